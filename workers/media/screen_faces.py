"""Changed-region face detection on screenshots: look for faces only where the frame changed since the device's
last frame, as ``workers.media.screens`` does for OCR.

``detect_changed`` compares a frame with the device's reference frame (its greyscale pixels and faces) with
``screens.changed_regions`` (scroll undone, changed blocks boxed, boxes grown over the reference faces they
touch), adds ``FACE_PAD`` pixels of context around every box (the HOG detector only finds a face that lies
wholly inside what it is given), grows the boxes over any reference face the context reaches (so a face is
detected again whole or carried over whole, never both), and detects in those boxes only; the reference's
other faces are carried over (moved by the scroll). Nothing changed: no detection at all. No reference
(a device's first frame in this process, another frame size) or boxes over more than
``screens.FULL_READ_SHARE`` of the frame: the whole frame is searched.

The references are per process (``REFERENCES``, a ``screens.ReferenceFrames`` of faces in place of lines, kept
apart from the OCR references because OCR and faces of one frame are computed one after the other).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from engram.schemas.observations import FaceDetection
from engram.workers.media import screens

Box = screens.Box
#: px of context added on every side of a changed region before detection: half the HOG window (80 px), so a
#: 40 px change inside a face (a blink, a video call's frame) still shows the detector the whole face.
FACE_PAD = 40

#: The last frame and its faces of each device, per process.
REFERENCES = screens.ReferenceFrames()


def _pad(box: Sequence[float], pad: int, w: int, h: int) -> list[int]:
    return [max(0, int(box[0]) - pad), max(0, int(box[1]) - pad),
            min(w, int(np.ceil(box[2])) + pad), min(h, int(np.ceil(box[3])) + pad)]


def face_regions(prev: np.ndarray, cur: np.ndarray,
                 prev_faces: list[FaceDetection]) -> tuple[list[Box], list[FaceDetection]]:
    """(boxes of ``cur`` to search for faces, reference faces carried over in ``cur``'s coordinates).

    ``prev``, ``cur``: greyscale (h, w) frames of one shape; ``prev_faces``: the faces found on ``prev``.
    The boxes are ``screens.changed_regions``' padded by ``FACE_PAD`` and grown (with the same padding) over
    each reference face they touch, repeated until no carried face touches a box, then merged where they
    overlap; no box when nothing changed."""
    h, w = cur.shape
    changed, carried = screens.changed_regions(prev, cur, prev_faces)
    boxes = [_pad(b, FACE_PAD, w, h) for b in changed]
    grown = True
    while grown:
        grown = False
        kept = []
        for face in carried:
            hit = next((b for b in boxes if screens.touches(b, face.box)), None)
            if hit is None:
                kept.append(face)
                continue
            p = _pad(face.box, FACE_PAD, w, h)
            hit[:] = [min(hit[0], p[0]), min(hit[1], p[1]), max(hit[2], p[2]), max(hit[3], p[3])]
            grown = True
        carried = kept
        boxes, merged_any = screens.merge_touching(boxes)
        grown = grown or merged_any
    return [tuple(b) for b in boxes], carried


def detect_changed(detect: Callable[[np.ndarray, list[Box] | None], list[FaceDetection]], pixels: np.ndarray,
                   reference: tuple[np.ndarray, list[FaceDetection]] | None) -> tuple[list[FaceDetection], float]:
    """(faces of ``pixels``, largest first; share of the frame's area searched).

    ``detect(pixels, boxes)``: the face detector, searching the whole uint8 RGB frame when ``boxes`` is None,
    else only those (x0, y0, x1, y1) regions, returning faces with boxes in the frame's pixels
    (``DlibFaces.detect`` / ``detect_regions``). ``reference``: the device's last frame (greyscale pixels, its
    faces) or None; None or another shape: the whole frame is searched (share 1.0)."""
    cur = screens.grey(pixels)
    if reference is None or reference[0].shape != cur.shape:
        return detect(pixels, None), 1.0
    boxes, carried = face_regions(reference[0], cur, reference[1])
    area = sum((b[2] - b[0]) * (b[3] - b[1]) for b in boxes) / cur.size
    if area > screens.FULL_READ_SHARE:
        return detect(pixels, None), 1.0
    found = detect(pixels, boxes) if boxes else []
    return sorted([*carried, *found], key=lambda f: -(f.box[2] - f.box[0]) * (f.box[3] - f.box[1])), area
