"""Thumbnails made once at ingest (``workers.thumbs``): small WebPs beside the event's derived objects."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageDraw

from tests.workers.media.test_bounds import tone_mp4


def _screen(seed: int = 0) -> Image.Image:
    """A 1920x1080 screen of text over noise: harder to compress than any real screenshot."""
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 255, (1080, 1920, 3), dtype=np.uint8))
    draw = ImageDraw.Draw(img)
    for row in range(0, 1080, 24):
        draw.text((10, row), "quarterly budget review " * 8, fill="black")
    return img


def test_a_full_hd_screen_gives_a_webp_320_wide_under_20_kb():
    from engram.workers.thumbs import MAX_THUMB_BYTES, webp, webp_of_file

    img = _screen()
    data = webp(img)
    assert len(data) <= MAX_THUMB_BYTES == 20_000
    with Image.open(io.BytesIO(data)) as thumb:
        assert (thumb.format, thumb.size) == ("WEBP", (320, 180))
    assert img.size == (1920, 1080)  # the original is left as it was
    png = io.BytesIO()
    img.save(png, "PNG")
    assert len(webp_of_file(png.getvalue())) <= MAX_THUMB_BYTES


def test_an_unreadable_picture_is_a_thumbnail_error():
    from engram.workers.thumbs import ThumbnailError, webp_of_file

    with pytest.raises(ThumbnailError, match="cannot be read"):
        webp_of_file(b"not a picture at all")


def _event(engram_env, tmp_path, name: str, data: bytes, kind, mime: str):
    from engram.schemas.events import MediaEvent
    from engram.schemas.ids import sha256_file

    path = tmp_path / name
    path.write_bytes(data)
    event = MediaEvent(
        tenant_id="acme",
        user_id="alice",
        device_id="laptop",
        kind=kind,
        object_key=f"media/acme/{name}",
        sha256=sha256_file(path),
        size=len(data),
        mime_type=mime,
        captured_at="2024-05-02T18:03:00Z",
    )
    engram_env.objects.put_file(event.object_key, path)
    engram_env.ledger.record_queued(event)
    return event


def test_a_screenshot_planned_at_ingest_has_its_thumbnail_stored(engram_env, tmp_path):
    from engram.schemas.events import MediaKind
    from engram.workers.ingest import plan
    from engram.workers.thumbs import thumb_key, thumb_key_of

    png = io.BytesIO()
    _screen(1).save(png, "PNG")
    event = _event(engram_env, tmp_path, "shot.png", png.getvalue(), MediaKind.screenshot, "image/png")
    [job] = plan(engram_env, event)
    key = thumb_key("acme", event.event_id, 0)
    assert key == f"derived/acme/{event.event_id}/thumb-00000.webp"
    assert key == thumb_key_of({"tenant_id": "acme", "event_id": str(event.event_id), "segment_index": 0})
    with Image.open(io.BytesIO(engram_env.objects.get_bytes(key))) as thumb:
        assert (thumb.format, thumb.width) == ("WEBP", 320)
    assert len(engram_env.objects.get_bytes(key)) <= 20_000


def test_each_clip_segment_gets_a_thumbnail_of_its_first_keyframe(engram_env, tmp_path, monkeypatch):
    from engram.schemas.events import MediaKind
    from engram.workers.ingest import plan
    from engram.workers.runtime import runtime
    from engram.workers.thumbs import thumb_key

    event = _event(engram_env, tmp_path, "tone.mp4", tone_mp4(seconds=3), MediaKind.clip, "video/mp4")
    monkeypatch.setenv("ENGRAM_CLIP_SEGMENT_SECONDS", "2")
    jobs = plan(runtime(), event)
    assert len(jobs) == 2
    for job in jobs:
        with Image.open(
            io.BytesIO(engram_env.objects.get_bytes(thumb_key("acme", event.event_id, job.segment_index)))
        ) as thumb:
            assert thumb.format == "WEBP" and thumb.size == (64, 64)  # a small video is never enlarged
