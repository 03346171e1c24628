"""Changed-region face detection on screenshots (``workers.media.screen_faces``): a frame whose change lies away from a
face keeps the face without detecting it again; a change over a face detects it again. Real dlib model
throughout, wrapped to record which regions it was given; a real photo (deepface img1.jpg) pasted on a screen."""

from __future__ import annotations

import time

import mss
import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from engram.workers.media import screen_faces, screens, vision
from engram.workers.models import get_model
from engram.workers.models.faces import SAME_PERSON_DISTANCE, face_distance
from tests.xdesktop import have_real_desktop, openbox, type_text, xterm, xvfb

SIZE = (1000, 600)
PHOTO_AT = (40, 150)  # top left of the pasted photo


def screen(photo: Image.Image, text: str) -> np.ndarray:
    """A white 1000x600 RGB screen with ``photo`` (about 300 px high) on the left and a line of text on the right."""
    img = Image.new("RGB", SIZE, "white")
    img.paste(photo, PHOTO_AT)
    try:
        font = ImageFont.truetype("DejaVuSans.ttf", 24)
    except OSError:
        font = ImageFont.load_default(size=24)
    ImageDraw.Draw(img).text((560, 450), text, fill="black", font=font)
    return np.asarray(img)


def recording_detector(rt, calls: list):
    model = get_model("faces", rt.settings)

    def detect(img: np.ndarray, boxes):
        calls.append(boxes)
        return model.detect([img])[0] if boxes is None else model.detect_regions(img, boxes)

    return detect


def test_faces_carried_over_away_from_a_change_and_detected_again_over_one(engram_env, eval_data):
    photo = Image.open(eval_data / "faces" / "deepface" / "img1.jpg").convert("RGB")
    photo = photo.resize((photo.width * 300 // photo.height, 300))
    a = screen(photo, "Meeting at 10:00")
    calls: list = []
    detect = recording_detector(engram_env, calls)
    first, share = screen_faces.detect_changed(detect, a, None)
    assert len(calls) == 1 and len(first) == 1  # no reference: the whole frame, where it is not plain or text
    assert calls[0] is not None and share < 0.4
    face = first[0]
    assert any(
        r[0] <= face.box[0] and r[1] <= face.box[1] and face.box[2] <= r[2] and face.box[3] <= r[3] for r in calls[0]
    )  # the photo searched
    assert PHOTO_AT[0] <= face.box[0] < face.box[2] <= PHOTO_AT[0] + photo.width

    # nothing changed: no detection at all
    calls.clear()
    same, share = screen_faces.detect_changed(detect, a.copy(), (screens.grey(a), first))
    assert calls == [] and share == 0.0 and same == first

    # a change away from the face: the face carried over as it was
    b = screen(photo, "Meeting moved to 11:30")
    calls.clear()
    second, share = screen_faces.detect_changed(detect, b, (screens.grey(a), first))
    assert calls == [] and share == 0.0  # a line of text changed: nothing that could be a face to search
    assert second == first

    # a change over the face (a few rows of the photo scribbled over): the face is detected again, whole
    c = b.copy()
    x0, y0 = int(face.box[0]), int(face.box[1])
    c[y0 + 5 : y0 + 15, x0 + 10 : x0 + 40] = 0
    calls.clear()
    third, _ = screen_faces.detect_changed(detect, c, (screens.grey(b), second))
    assert len(calls) == 1 and calls[0] is not None
    assert any(
        r[0] <= face.box[0] and r[1] <= face.box[1] and face.box[2] <= r[2] and face.box[3] <= r[3] for r in calls[0]
    )  # a region holding the whole face
    assert len(third) == 1 and third[0] is not face
    assert face_distance(third[0].embedding, face.embedding) < SAME_PERSON_DISTANCE


def test_screenshot_faces_of_a_device_stream_match_whole_frame_detection(engram_env, eval_data):
    rt = engram_env
    photo = Image.open(eval_data / "faces" / "deepface" / "img1.jpg").convert("RGB")
    photo = photo.resize((photo.width * 300 // photo.height, 300))
    a, b = screen(photo, "Meeting at 10:00"), screen(photo, "Meeting moved to 11:30")
    vision.screenshot_faces(rt, "acme", a, device_id="desk")
    kept = vision.screenshot_faces(rt, "acme", b, device_id="desk")
    whole = get_model("faces", rt.settings).detect([b])[0]
    assert len(kept) == len(whole) == 1
    # the photo's region alone searched: HOG's cells fall elsewhere on it than on the whole frame (a few px)
    assert all(abs(p - q) <= 12 for p, q in zip(kept[0].box, whole[0].box, strict=True))
    assert face_distance(kept[0].embedding, whole[0].embedding) < SAME_PERSON_DISTANCE
    grey_now, faces_now = screen_faces.REFERENCES.get("acme", "desk")  # this frame is the device's reference now
    assert np.array_equal(grey_now, screens.grey(b)) and faces_now == kept


@pytest.mark.slow
def test_text_and_plain_screens_are_not_searched_for_faces(engram_env, eval_data, tmp_path):
    """``photo_regions`` of a screen of text (a real xterm's listing on a real desktop): nothing to search once its
    OCR lines are left out; the same screen with a photo pasted: the photo's region alone, and the face is in it."""
    if not have_real_desktop():
        pytest.skip("openbox, xterm and xdotool are not installed")
    with (
        xvfb("1280x720x24") as display,
        openbox(display),
        xterm(display, "PS1='$ ' exec sh -i", "user@host: ~", "120x40+0+0") as term,
    ):
        type_text(display, term, "ls -la /usr/bin | head -38\n", delay_ms=5)
        time.sleep(1.5)
        with mss.MSS(display=display) as grab:
            shot = grab.grab(grab.monitors[1])
    text = np.asarray(Image.frombytes("RGB", shot.size, shot.bgra, "raw", "BGRX"))
    lines = get_model("ocr", engram_env.settings).read(text, min_confidence=0.0)
    assert len(lines) > 30
    boxes = [ln.box for ln in lines]
    assert screen_faces.photo_regions(screens.grey(text), None, boxes) == []
    photo = Image.open(eval_data / "faces" / "deepface" / "img1.jpg").convert("RGB")
    photo = photo.resize((photo.width * 300 // photo.height, 300))
    img = Image.fromarray(text)
    img.paste(photo, (900, 300))
    with_photo = np.asarray(img)
    regions = screen_faces.photo_regions(screens.grey(with_photo), None, boxes)
    assert len(regions) == 1 and regions[0][0] >= 900 - screen_faces.FACE_PAD - 2 * screen_faces.FACE_BLOCK
    faces = get_model("faces", engram_env.settings).detect_regions(with_photo, regions)
    assert len(faces) == 1 and faces[0].box[0] >= 900
