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

Of those boxes (or of the whole frame) only the parts that can hold a face are searched (``photo_regions``): a
face is a picture's, and a screen is mostly flat backgrounds and text. Blocks of ``FACE_BLOCK`` px whose grey
levels span ``FLAT_RANGE`` or less (a window's background, WebP noise included) and blocks whose centre lies in
one of the frame's text lines (its OCR boxes, when the caller has them) are left out; the others, joined across
one block, are searched where they span ``MIN_FACE`` px or more both ways (with ``FACE_PAD`` px of context). A
terminal or an editor changing is not searched at all; a photo is, whole.

The references are per process (``REFERENCES``, a ``screens.ReferenceFrames`` of faces in place of lines, kept
apart from the OCR references because OCR and faces of one frame are computed one after the other).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy import ndimage

from engram.schemas.observations import FaceDetection
from engram.workers.media import screens

Box = screens.Box
#: px of context added on every side of a changed region before detection: half the HOG window (80 px), so a
#: 40 px change inside a face (a blink, a video call's frame) still shows the detector the whole face.
FACE_PAD = 40
FACE_BLOCK = 16  # px: the side of the blocks ``photo_regions`` tells apart
FLAT_RANGE = 8  # grey levels: a block whose pixels span no more is a plain background (WebP noise on one: 0-4)
#: px: the least extent (both ways) of the non-plain blocks worth searching: under the smallest face HOG finds on
#: a 1920 px wide frame (its 80 px window on the frame downscaled to 1024 px and upsampled once: 75 px)
MIN_FACE = 48
DENSE_SHARE = 7 / 9 - 1e-6  # of the 3 x 3 blocks around a block, the share busy for the block to lie in a picture

#: The last frame and its faces of each device, per process.
REFERENCES = screens.ReferenceFrames()


def _pad(box: Sequence[float], pad: int, w: int, h: int) -> list[int]:
    return [
        max(0, int(box[0]) - pad),
        max(0, int(box[1]) - pad),
        min(w, int(np.ceil(box[2])) + pad),
        min(h, int(np.ceil(box[3])) + pad),
    ]


def face_regions(
    prev: np.ndarray, cur: np.ndarray, prev_faces: list[FaceDetection]
) -> tuple[list[Box], list[FaceDetection]]:
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
    return [(b[0], b[1], b[2], b[3]) for b in boxes], carried


def _text_blocks(shape: tuple[int, int], text: Sequence[Sequence[float]]) -> np.ndarray:
    """(hb, wb) bool: the ``FACE_BLOCK`` blocks of a frame of ``shape`` (h, w) whose centre lies in a ``text`` box."""
    hb, wb = -(-shape[0] // FACE_BLOCK), -(-shape[1] // FACE_BLOCK)
    covered = np.zeros((hb, wb), bool)
    half = FACE_BLOCK / 2
    for x0, y0, x1, y1 in text:
        covered[
            max(0, int(np.ceil((y0 - half) / FACE_BLOCK))) : max(0, int(np.floor((y1 - half) / FACE_BLOCK)) + 1),
            max(0, int(np.ceil((x0 - half) / FACE_BLOCK))) : max(0, int(np.floor((x1 - half) / FACE_BLOCK)) + 1),
        ] = True
    return covered


def photo_regions(g: np.ndarray, within: Sequence[Box] | None, text: Sequence[Sequence[float]] = ()) -> list[Box]:
    """The boxes of greyscale frame ``g`` (h, w) worth searching for faces (module docstring): its ``FACE_BLOCK``
    blocks inside ``within`` (None: the whole frame) that are neither plain (their grey levels span ``FLAT_RANGE``
    or less) nor centred in a ``text`` box (x0, y0, x1, y1 px: the frame's OCR lines), in groups joined across one
    block; a group spanning ``MIN_FACE`` px or more both ways gives its bounding box padded by ``FACE_PAD``
    (clipped to the frame), overlapping boxes merged. [] when no group is that large."""
    h, w = g.shape
    hb, wb = -(-h // FACE_BLOCK), -(-w // FACE_BLOCK)
    padded = np.pad(g, ((0, hb * FACE_BLOCK - h), (0, wb * FACE_BLOCK - w)), mode="edge")
    blocks = padded.reshape(hb, FACE_BLOCK, wb, FACE_BLOCK)
    busy = (blocks.max(axis=(1, 3)).astype(np.int16) - blocks.min(axis=(1, 3))) > FLAT_RANGE
    busy &= ~_text_blocks((h, w), text)
    if within is not None:
        inside = np.zeros_like(busy)
        for x0, y0, x1, y1 in within:
            inside[y0 // FACE_BLOCK : -(-y1 // FACE_BLOCK), x0 // FACE_BLOCK : -(-x1 // FACE_BLOCK)] = True
        busy &= inside
    # a face's blocks are busy nearly all (a window's borders, a widget's outline, text's leftovers are thin):
    # the 3 x 3 blocks (48 px) around each block 7 of whose 9 are busy, and the groups they form
    dense = ndimage.uniform_filter(busy.astype(np.float32), size=3, mode="constant") >= DENSE_SHARE
    groups, _ = ndimage.label(ndimage.binary_dilation(dense, np.ones((3, 3), bool)) & busy)
    boxes = []
    for rows, cols in ndimage.find_objects(groups):
        y0, y1 = rows.start * FACE_BLOCK, rows.stop * FACE_BLOCK
        x0, x1 = cols.start * FACE_BLOCK, cols.stop * FACE_BLOCK
        if min(y1 - y0, x1 - x0) >= MIN_FACE:
            boxes.append(_pad((x0, y0, min(w, x1), min(h, y1)), FACE_PAD, w, h))
    merged, grown = screens.merge_touching(boxes)
    while grown:
        merged, grown = screens.merge_touching(merged)
    return [(b[0], b[1], b[2], b[3]) for b in merged]


def detect_changed(
    detect: Callable[[np.ndarray, list[Box] | None], list[FaceDetection]],
    pixels: np.ndarray,
    reference: tuple[np.ndarray, list[FaceDetection]] | None,
    text: Sequence[Sequence[float]] = (),
) -> tuple[list[FaceDetection], float]:
    """(faces of ``pixels``, largest first; share of the frame's area searched).

    ``detect(pixels, boxes)``: the face detector, searching the whole uint8 RGB frame when ``boxes`` is None,
    else only those (x0, y0, x1, y1) regions, returning faces with boxes in the frame's pixels
    (``DlibFaces.detect`` / ``detect_regions``). ``reference``: the device's last frame (greyscale pixels, its
    faces) or None; None or another shape: the whole frame is looked at. ``text``: the boxes (x0, y0, x1, y1 px)
    of the frame's text lines, never searched. Only ``photo_regions`` of what changed (of the whole frame) are
    searched; none: no detection at all."""
    cur = screens.grey(pixels)
    carried: list[FaceDetection] = []
    changed: list[Box] | None = None
    if reference is not None and reference[0].shape == cur.shape:
        changed, carried = face_regions(reference[0], cur, reference[1])
        if sum((b[2] - b[0]) * (b[3] - b[1]) for b in changed) > screens.FULL_READ_SHARE * cur.size:
            changed, carried = None, []
    boxes = photo_regions(cur, changed, text) if changed is None or changed else []
    found = detect(pixels, boxes) if boxes else []
    area = sum((b[2] - b[0]) * (b[3] - b[1]) for b in boxes) / cur.size
    return sorted([*carried, *found], key=lambda f: -(f.box[2] - f.box[0]) * (f.box[3] - f.box[1])), area
