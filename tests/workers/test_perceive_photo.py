"""A camera photo is described as a photo, a screen as a screen (issue 41): real photos of the deepface set (one
with a camera in its EXIF, one without EXIF) and real screenshots of screenpipe, through engram's ingest plan and
the perceive task on the embedded default."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from bench.lib.speech import perceive_file


@pytest.mark.parametrize("name", ["img14.jpg", "img26.jpg"])  # a Canon EOS 5D and a Nikon D750 in their EXIF
def test_a_camera_photo_without_text_is_a_photo(engram_env, eval_data: Path, name):
    (obs,) = perceive_file(eval_data / "faces" / "deepface" / name)
    assert obs.text == "[photo: 1 face, no text]" and len(obs.faces) == 1


def test_a_jpeg_without_a_camera_that_is_no_screen_is_a_photo(engram_env, eval_data: Path):
    """couple.jpg names no camera in its EXIF; a 2280x1588 JPEG is no screen's frame."""
    from engram.api.local import classify, publish_file
    from engram.workers.perceive import is_photo
    from engram.workers.runtime import runtime

    path = eval_data / "faces" / "deepface" / "couple.jpg"
    assert not {0x010F, 0x0110} & set(Image.open(path).getexif())  # no camera make or model
    assert is_photo(path.read_bytes(), publish_file(runtime(), classify(path), "t", "u", "d"))


def test_a_screenshot_is_a_screen(engram_env, eval_data: Path, tmp_path):
    """A real screenshot (PNG, no camera) is not a photo; a face shown full screen without text (a video call
    frame: one photo's face on a 1920x1080 PNG) reads "on screen"."""
    from engram.api.local import classify, publish_file
    from engram.workers.perceive import is_photo
    from engram.workers.runtime import runtime

    for name in ("screenpipe_Claude_prompt.png", "screenpipe_cursor-mcp-result.png"):
        path = eval_data / "screens" / name
        event = publish_file(runtime(), classify(path), "t", "u", "d")
        assert not is_photo(path.read_bytes(), event), name
    screen = Image.new("RGB", (1920, 1080), (20, 20, 20))
    face = Image.open(eval_data / "faces" / "deepface" / "img14.jpg").convert("RGB")
    face.thumbnail((900, 900))
    screen.paste(face, (510, 90))
    screen.save(tmp_path / "call.png")
    (obs,) = perceive_file(tmp_path / "call.png")
    assert obs.text == "[1 face on screen, no text]"
