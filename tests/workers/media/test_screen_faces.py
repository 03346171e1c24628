"""Changed-region face detection on screenshots (``workers.media.screen_faces``): a frame whose change lies away from a
face keeps the face without detecting it again; a change over a face detects it again. Real dlib model
throughout, wrapped to record which regions it was given; a real photo (deepface img1.jpg) pasted on a screen."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from engram.workers.media import screen_faces, screens, vision
from engram.workers.models import get_model
from engram.workers.models.faces import SAME_PERSON_DISTANCE, face_distance

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
    assert share == 1.0 and calls == [None] and len(first) == 1  # no reference: the whole frame
    face = first[0]
    assert PHOTO_AT[0] <= face.box[0] < face.box[2] <= PHOTO_AT[0] + photo.width

    # nothing changed: no detection at all
    calls.clear()
    same, share = screen_faces.detect_changed(detect, a.copy(), (screens.grey(a), first))
    assert calls == [] and share == 0.0 and same == first

    # a change away from the face: only its region searched, the face carried over as it was
    b = screen(photo, "Meeting moved to 11:30")
    calls.clear()
    second, share = screen_faces.detect_changed(detect, b, (screens.grey(a), first))
    assert len(calls) == 1 and calls[0] and share < 0.2
    assert all(not (x0 < face.box[2] and face.box[0] < x1 and y0 < face.box[3] and face.box[1] < y1)
               for x0, y0, x1, y1 in calls[0])  # no region over the face
    assert second == first

    # a change over the face (a few rows of the photo scribbled over): the face is detected again, whole
    c = b.copy()
    x0, y0 = int(face.box[0]), int(face.box[1])
    c[y0 + 5:y0 + 15, x0 + 10:x0 + 40] = 0
    calls.clear()
    third, _ = screen_faces.detect_changed(detect, c, (screens.grey(b), second))
    assert len(calls) == 1 and calls[0] is not None
    assert any(r[0] <= face.box[0] and r[1] <= face.box[1] and face.box[2] <= r[2] and face.box[3] <= r[3]
               for r in calls[0])  # a region holding the whole face
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
    assert all(abs(p - q) <= 2 for p, q in zip(kept[0].box, whole[0].box, strict=True))
    assert face_distance(kept[0].embedding, whole[0].embedding) < 0.05
    grey_now, faces_now = screen_faces.REFERENCES.get("acme", "desk")  # this frame is the device's reference now
    assert np.array_equal(grey_now, screens.grey(b)) and faces_now == kept
