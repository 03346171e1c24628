"""Changed-region OCR of screenshots: read only what changed since the device's last kept frame.

A device's consecutive kept frames mostly show the same text (a new chat message, a line typed, a page
scrolled). ``changed_regions`` compares a frame with the reference frame (the device's last frame this
process OCR'd): it finds a vertical scroll first (rows of the new frame that are unique rows of the old one
at a common offset), then the boxes where pixels differ (after undoing the scroll), grown by a margin and
to every reference line they touch (without the margin, so growth stops at the next line), so a line
is read whole or not at all. ``read_changed`` OCRs those
boxes only and carries the reference's other lines over (moved by the scroll); when most of the frame
changed it reads the whole frame instead.

Given a reader that detects and recognizes apart (``LineReader``: ``workers.models.ocr.RapidOcr``), a frame is
read by lines instead: text boxes are detected in the changed regions (in the whole frame, one detector pass,
when they cover more than ``DETECT_WHOLE_SHARE`` of it), and only the boxes whose glyphs ``LineMemory`` has not
seen are recognized; a box whose glyphs match a line read before (a window raised again over the same text, a
terminal's lines scrolled up, a page come back to) takes that line's text, and of the boxes of one frame that show
the same glyphs (a terminal's ``root`` column, a table's repeated cells) one is recognized for all
(``FrameTwins``). Recognition is most of OCR's cost (~25 ms a line against ~0.25 s to detect a whole 1920x1080
frame), and desktops show the same lines again and again.

The references are kept per process (``ReferenceFrames``: greyscale pixels and OCR lines of the last
``REFERENCE_DEVICES`` devices, least recently used dropped), so a frame whose predecessor was read by
another worker process is read whole: correct either way, only slower.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

import cv2
import numpy as np
from cachetools import LRUCache

from engram.schemas.observations import OcrLine

Box = tuple[int, int, int, int]  # x0, y0, x1, y1 in pixels, end exclusive

DIFF_THRESHOLD = 10  # grey levels (0-255): a block whose mean absolute change is above this changed (lossy
# WebP noise between two encodings of one page: isolated pixels up to 51 levels, block means under 8)
MARGIN = 8  # px added above and below changed pixels: the detector needs some background around a line
MARGIN_X = 32  # px added left and right: a word typed after others joins their line
LINE_PAD = 2  # px added around a reference line a region grows over (no more: it would reach the next line)
BAND_GAP = 16  # changed rows this close are one band (the lines of one paragraph)
FULL_READ_SHARE = 0.6  # regions covering more of the frame than this: read the whole frame (one detector pass)
SCROLL_MAX_ERROR = 2.0  # grey levels: the mean row-feature error under which an offset is a scroll
MIN_READ_HEIGHT = 8  # px: a region or a line cut by the frame's edge lower than this holds no legible text
BLOCK = 4  # px: differences are averaged over BLOCK x BLOCK blocks, so lossy compression noise does not count
REFERENCE_DEVICES = 8  # devices whose last frame a process keeps (greyscale: ~1 MB per 1280x720 frame)
DETECT_WHOLE_SHARE = 0.3  # changed regions covering more of the frame than this: one detector pass on the whole
INK = 48  # grey levels from a line's background (its box's median) that count as a glyph's pixel
GLYPH_PAD = 3  # px: how far apart two detections of one line's box may be (detector jitter)
MEMORY_LINES = 3000  # lines a device's LineMemory keeps (their pixels, ~10 kB a line of a terminal: ~30 MB)
EDGE_GAP = 2  # blank columns that part a glyph cut by a box's edge from the line's own ink
GLYPH_THRESHOLD = 20  # grey levels: a BLOCK x BLOCK block of two boxes' pixels averaging more apart differs (the
# same line in two WebP frames (quality 65): 8-12 at most; two lines of different text: 70 and more, on the bench's
# desktop)
MEMORY_PER_SHAPE = 128  # lines kept per ink width, the most recent (a terminal: hundreds of short numbers)


def grey(pixels: np.ndarray) -> np.ndarray:
    """uint8 (h, w) luma (ITU-R BT.601: OpenCV's ``COLOR_RGB2GRAY``, a tenth of numpy's CPU on a 1920x1080 frame)
    of a uint8 (h, w, 3) RGB image."""
    return cv2.cvtColor(np.ascontiguousarray(pixels), cv2.COLOR_RGB2GRAY)


def _block_means(a: np.ndarray, block: int) -> np.ndarray:
    """float32 (ceil(h / block), ceil(w / block)): the means of ``block`` x ``block`` blocks of a 2-D array, the
    last row and column of blocks padded with zeros (OpenCV's area resize: exact means at an integer factor)."""
    h, w = a.shape
    hb, wb = -(-h // block), -(-w // block)
    if (hb * block, wb * block) != (h, w):
        a = np.pad(a, ((0, hb * block - h), (0, wb * block - w)))
    return cv2.resize(a.astype(np.float32), (wb, hb), interpolation=cv2.INTER_AREA)


def _row_features(g: np.ndarray) -> np.ndarray:
    """(h, w // 16) float32: the means of 16 px wide column blocks of each row of a greyscale frame."""
    h, w = g.shape
    k = max(1, w // 16)
    return cv2.resize(g[:, : k * 16].astype(np.float32), (k, h), interpolation=cv2.INTER_AREA)


def _shift_error(fp: np.ndarray, fc: np.ndarray, d: int) -> float:
    """Mean absolute difference of row features between row y of the new frame and row y + d of the old, over
    the rows both show (inf when they share less than a quarter of the frame)."""
    h = len(fp)
    lo, hi = max(0, -d), min(h, h - d)
    if hi - lo < h // 4:
        return float("inf")
    return float(np.abs(fc[lo:hi] - fp[lo + d : hi + d]).mean())


def scroll_offset(prev: np.ndarray, cur: np.ndarray) -> int:
    """The vertical offset ``d`` such that row ``y`` of ``cur`` best shows row ``y + d`` of ``prev`` (``d`` > 0:
    the content moved up, the page was scrolled down), or 0 for none (``changed_regions`` takes it only when
    it leaves fewer rows to read). Rows are compared by the means of their
    16 px column blocks (lossy compression noise averages out): every offset sharing at least a quarter of the
    frame is tried on rows averaged by 4, the best refined at full resolution; it is taken when its error is
    under ``SCROLL_MAX_ERROR`` grey levels and under half the error of no offset. ``prev``, ``cur``: greyscale
    (h, w) of one shape."""
    fp, fc = _row_features(prev), _row_features(cur)
    h = len(fp)
    base = _shift_error(fp, fc, 0)
    if h < 16 or base < SCROLL_MAX_ERROR / 4:  # (nearly) the same frame
        return 0
    q = h // 4
    cp, cc = fp[: q * 4].reshape(q, 4, -1).mean(axis=1), fc[: q * 4].reshape(q, 4, -1).mean(axis=1)
    coarse = min((d for d in range(-q + 1, q) if d), key=lambda d: _shift_error(cp, cc, d))
    d = min(range(4 * coarse - 4, 4 * coarse + 5), key=lambda d: _shift_error(fp, fc, d))
    err = _shift_error(fp, fc, d)
    return d if d and err < SCROLL_MAX_ERROR and err < base / 2 else 0


def _shift_box(box: tuple[float, float, float, float], d: int) -> tuple[float, float, float, float]:
    return box[0], box[1] - d, box[2], box[3] - d


def touches(a, b) -> bool:
    """Whether boxes ``a`` and ``b`` (x0, y0, x1, y1 in pixels) overlap."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def merge_touching(boxes: list[list[int]]) -> tuple[list[list[int]], bool]:
    """``boxes`` (x0, y0, x1, y1) with every pair that overlaps a box already kept (in sorted order) merged into
    their union; the second value tells whether any merge happened (callers repeat until none does)."""
    merged: list[list[int]] = []
    grown = False
    for b in sorted(boxes):
        other = next((m for m in merged if touches(m, b)), None)
        if other is None:
            merged.append(list(b))
        else:
            other[:] = [min(other[0], b[0]), min(other[1], b[1]), max(other[2], b[2]), max(other[3], b[3])]
            grown = True
    return merged, grown


def _changed_blocks(prev: np.ndarray, cur: np.ndarray, d: int) -> np.ndarray:
    """(ceil(h / BLOCK), ceil(w / BLOCK)) bool: the blocks of ``cur`` whose mean absolute difference from
    ``prev`` scrolled by ``d`` rows (row y of cur against row y + d of prev) is above ``DIFF_THRESHOLD``; rows
    with no counterpart in ``prev`` are changed."""
    h, w = cur.shape
    diff = np.full((h, w), 255, np.uint8)
    lo, hi = max(0, -d), min(h, h - d)  # rows y of cur with 0 <= y + d < h
    if lo < hi:
        diff[lo:hi] = cv2.absdiff(cur[lo:hi], prev[lo + d : hi + d])
    return _block_means(diff, BLOCK) > DIFF_THRESHOLD


def changed_regions(prev: np.ndarray, cur: np.ndarray, prev_lines: list[OcrLine]) -> tuple[list[Box], list[OcrLine]]:
    """(boxes of ``cur`` to OCR, reference lines carried over in ``cur``'s coordinates).

    ``prev``, ``cur``: greyscale (h, w) frames of one shape; ``prev_lines``: the OCR lines of ``prev`` (any
    confidence). The frame is compared with ``prev`` as it is and, when ``scroll_offset`` finds one, as
    scrolled; the comparison that leaves fewer changed rows wins. Boxes are grown by ``MARGIN`` (``MARGIN_X``
    sideways) and to every carried line they touch (repeated until none does), so no line is read in part;
    lines moved out of the frame by a scroll are dropped, and lines cut by its edge are read again."""
    h, w = cur.shape
    changed, d = _changed_blocks(prev, cur, 0), scroll_offset(prev, cur)
    if d:
        scrolled = _changed_blocks(prev, cur, d)
        if scrolled.any(axis=1).sum() < changed.any(axis=1).sum():  # fewer rows to read with the scroll
            changed = scrolled
        else:
            d = 0
    rows = np.flatnonzero(changed.any(axis=1))
    boxes: list[list[int]] = []
    if rows.size:
        starts = np.concatenate([[0], np.flatnonzero(np.diff(rows) > BAND_GAP // BLOCK) + 1])
        ends = np.concatenate([starts[1:], [rows.size]])
        for s, e in zip(starts, ends, strict=True):
            y0, y1 = int(rows[s]), int(rows[e - 1]) + 1
            cols = np.flatnonzero(changed[y0:y1].any(axis=0))
            boxes.append(
                [
                    max(0, int(cols[0]) * BLOCK - MARGIN_X),
                    max(0, y0 * BLOCK - MARGIN),
                    min(w, (int(cols[-1]) + 1) * BLOCK + MARGIN_X),
                    min(h, y1 * BLOCK + MARGIN),
                ]
            )
    lines = []
    for ln in prev_lines:
        box = _shift_box(ln.box, d)
        if box[3] <= 0 or box[1] >= h:
            continue  # scrolled out of the frame
        if box[1] < 0 or box[3] > h:  # cut by the frame's edge: read again what is left of it, if legible
            y0, y1 = max(0, int(box[1])), min(h, int(np.ceil(box[3])) + 1)
            if y1 - y0 >= MIN_READ_HEIGHT:
                boxes.append([int(box[0]), y0, int(np.ceil(box[2])) + 1, y1])
            continue
        lines.append(ln.model_copy(update={"box": box}))
    carried = []
    grown = True
    while grown:  # grow boxes over the lines they touch, and merge boxes that overlap
        grown = False
        carried = []
        for ln in lines:
            hit = next((b for b in boxes if touches(b, ln.box)), None)
            if hit is None:
                carried.append(ln)
                continue
            x0, y0, x1, y1 = ln.box  # the detector's box already has a margin around the glyphs
            new = [
                min(hit[0], max(0, int(x0) - LINE_PAD)),
                min(hit[1], max(0, int(y0) - LINE_PAD)),
                max(hit[2], min(w, int(np.ceil(x1)) + LINE_PAD)),
                max(hit[3], min(h, int(np.ceil(y1)) + LINE_PAD)),
            ]
            if new != hit:
                hit[:] = new
                grown = True
        boxes, merged_any = merge_touching(boxes)
        grown = grown or merged_any
    return [(b[0], b[1], b[2], b[3]) for b in boxes if b[3] - b[1] >= MIN_READ_HEIGHT], carried


def reading_order(lines: list[OcrLine]) -> list[OcrLine]:
    """Lines sorted top to bottom (12 px rows), then left to right: the order ``RapidOcr.read`` returns."""
    return sorted(lines, key=lambda ln: (round(ln.box[1] / 12), ln.box[0]))


class LineReader(Protocol):
    """An OCR model that detects and recognizes apart (``workers.models.ocr.RapidOcr``)."""

    def detect(self, image: np.ndarray) -> list[np.ndarray]:
        """Text boxes of a uint8 (h, w, 3) RGB image: float32 (4, 2) quadrilaterals in its pixels."""
        ...

    def recognize(
        self, image: np.ndarray, quads: list[np.ndarray], min_confidence: float = 0.5
    ) -> list[OcrLine | None]:
        """The line of each quad (None: nothing legible), in order."""
        ...


class Glyphs:
    """A line's pixels, to tell whether another box shows the same line (``same``): the greyscale frame around
    the box (``GLYPH_PAD`` px more on each side, clipped), its ink's columns in it (``left``, ``width``: the
    columns with pixels more than ``INK`` grey levels from the box's median, its background, in the box's middle
    half of rows, which the lines above and below never reach; a neighbour's glyph cut by the box's edge left out:
    ``_own_columns``) and its ink's rows (``top``, ``height``: the rows with ink in those columns from the middle
    half out to the first row without, so a box a few px taller, reaching into the next line, holds the same rows).
    Where on the screen the line is does not matter."""

    __slots__ = ("pixels", "top", "height", "left", "width", "profile")

    def __init__(self, pixels: np.ndarray, top: int, height: int, left: int, width: int) -> None:
        self.pixels, self.top, self.height, self.left, self.width = pixels, top, height, left, width
        core = pixels[top : top + height, left : left + width]
        cols = -(-width // BLOCK) * BLOCK
        padded = np.zeros((height, cols), np.float32)
        padded[:, :width] = core
        #: the mean grey of each ``BLOCK`` columns of the box's rows: lines whose profiles differ by more than
        #: block means can (``same``) are told apart without comparing their pixels
        self.profile = padded.reshape(height, -1, BLOCK).mean(axis=(0, 2))

    @property
    def key(self) -> int:
        """The ink's width in px: what ``LineMemory`` files lines under."""
        return self.width

    def bound(self, heights: np.ndarray | int) -> np.ndarray | float:
        """How far (grey levels) the profile of a line of ``heights`` px may differ from this one's, block by
        block, when both show the same line: the block test's bound, plus what rows the jitter moves in or out."""
        return GLYPH_THRESHOLD + 255 * GLYPH_PAD / np.maximum(1, np.minimum(self.height, heights))

    def same(self, other: Glyphs) -> bool:
        """Whether ``other`` shows the same line: its widths within 1 px, their profiles within ``bound``, and
        this line's box rows and ink columns found in the other's pixels (``within``; not the other way round: a
        box a little larger than the line it matched may hold a stroke more, '->' against '-')."""
        if abs(self.width - other.width) > 1:
            return False
        n = min(len(self.profile), len(other.profile))
        if np.abs(self.profile[:n] - other.profile[:n]).max() > self.bound(other.height):
            return False
        return self.within(other)

    def within(self, other: Glyphs) -> bool:
        """Whether this line's ink rows and columns are found in ``other``'s pixels within ``GLYPH_PAD`` px
        up or down and 1 px sideways with no ``BLOCK`` x ``BLOCK`` block differing by more than
        ``GLYPH_THRESHOLD`` grey levels on average (lossy compression noise passes, one character changed does
        not)."""
        core = self.pixels[self.top : self.top + self.height, self.left : self.left + self.width].astype(np.int16)
        h, w = core.shape
        big_h, big_w = other.pixels.shape
        y0, y1 = max(0, other.top - GLYPH_PAD), min(big_h - h, other.top + GLYPH_PAD)
        x0, x1 = max(0, other.left - 1), min(big_w - w, other.left + 1)
        if y0 > y1 or x0 > x1:
            return False
        # every offset at once: (ny, nx, h, w) windows of the other's pixels
        windows = np.lib.stride_tricks.sliding_window_view(other.pixels, (h, w))[y0 : y1 + 1, x0 : x1 + 1]
        hb, wb = -(-h // BLOCK), -(-w // BLOCK)
        diff = np.zeros((*windows.shape[:2], hb * BLOCK, wb * BLOCK), np.int16)
        diff[..., :h, :w] = np.abs(windows - core)
        blocks = diff.reshape(*windows.shape[:2], hb, BLOCK, wb, BLOCK).sum(axis=(3, 5))
        return bool((blocks.max(axis=(2, 3)) <= GLYPH_THRESHOLD * BLOCK * BLOCK).any())


class GlyphShelf:
    """Lines filed by ink width (``Glyphs.key``), each with a payload, newest first per width; ``find`` compares
    a line's profile with all those of widths within 1 px at once (a stacked array per width, built again after a
    change) and its pixels only with those whose profiles are close. Not thread safe (its owner locks)."""

    def __init__(self) -> None:
        self.rows: OrderedDict[int, list[tuple[Glyphs, object]]] = OrderedDict()
        self._stacks: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def find(self, ink: Glyphs) -> tuple[int, object] | None:
        """(width, payload) of a line with the same glyphs (``Glyphs.same``), or None."""
        for key in (ink.key, ink.key - 1, ink.key + 1):
            rows = self.rows.get(key)
            if not rows:
                continue
            stack = self._stacks.get(key)
            if stack is None:
                stack = self._stacks[key] = (
                    np.stack([g.profile for g, _ in rows]),
                    np.array([g.height for g, _ in rows]),
                )
            profiles, heights = stack
            n = min(profiles.shape[1], len(ink.profile))
            close = np.abs(profiles[:, :n] - ink.profile[:n]).max(axis=1) <= ink.bound(heights)
            for i in np.flatnonzero(close):
                known, payload = rows[i]
                if ink.within(known):
                    return key, payload
        return None

    def add(self, ink: Glyphs, payload: object, per_width: int | None = None) -> int:
        """File ``ink`` first under its width, keeping ``per_width`` lines of that width at most (None: all);
        returns how many lines were dropped (0 or 1)."""
        kept = self.rows.setdefault(ink.key, [])
        self.rows.move_to_end(ink.key)
        kept.insert(0, (ink, payload))
        self._stacks.pop(ink.key, None)
        if per_width is not None and len(kept) > per_width:
            kept.pop()
            return 1
        return 0

    def drop_oldest(self) -> int:
        """Drop the lines of the width used least recently; returns how many."""
        key, dropped = self.rows.popitem(last=False)
        self._stacks.pop(key, None)
        return len(dropped)


def glyphs(g: np.ndarray, box: tuple[float, float, float, float]) -> Glyphs | None:
    """The ``Glyphs`` of the line in ``box`` (x0, y0, x1, y1) of greyscale frame ``g``; None when the box is
    empty or its middle rows hold no ink."""
    h, w = g.shape
    bx0, by0 = max(0, int(box[0])), max(0, int(box[1]))
    bx1, by1 = min(w, int(np.ceil(box[2]))), min(h, int(np.ceil(box[3])))
    if bx1 - bx0 < 2 or by1 - by0 < 4:
        return None
    ink = np.asarray(np.abs(g[by0:by1, bx0:bx1].astype(np.int16) - int(np.median(g[by0:by1, bx0:bx1]))) > INK)
    quarter = (by1 - by0) // 4
    cols = _own_columns(np.asarray(ink[quarter : by1 - by0 - quarter].any(axis=0)))
    if not cols.size:
        return None
    rows = np.asarray(ink[:, cols[0] : cols[-1] + 1].any(axis=1))
    mid = np.flatnonzero(rows[quarter : by1 - by0 - quarter]) + quarter
    top, bottom = int(mid[0]), int(mid[-1]) + 1
    while top > 0 and rows[top - 1]:  # the line's own ascenders, up to a row without ink
        top -= 1
    while bottom < len(rows) and rows[bottom]:
        bottom += 1
    x0, y0 = max(0, bx0 - GLYPH_PAD), max(0, by0 - GLYPH_PAD)
    x1, y1 = min(w, bx1 + GLYPH_PAD), min(h, by1 + GLYPH_PAD)
    return Glyphs(
        g[y0:y1, x0:x1].copy(), by0 - y0 + top, bottom - top, bx0 - x0 + int(cols[0]), int(cols[-1] - cols[0]) + 1
    )


def _own_columns(has_ink: np.ndarray) -> np.ndarray:
    """The indices of the True columns of a box's ink columns (``has_ink``, bool (w,)) that are the line's own: a
    run of ink at either end that touches the box's edge and is ``EDGE_GAP`` blank columns or more from the rest is
    a neighbouring word's glyph the detector's box cut into (its margin reaches the next word in a terminal's
    columns), left out so that the same word boxed with or without it has one width."""
    cols = np.flatnonzero(has_ink)
    if cols.size < 2:
        return cols
    gaps = np.flatnonzero(np.diff(cols) > EDGE_GAP)
    if gaps.size and cols[0] == 0:
        cols = cols[gaps[0] + 1 :]
        gaps = gaps[1:] - (gaps[0] + 1)
    if gaps.size and cols[-1] == len(has_ink) - 1:
        cols = cols[: gaps[-1] + 1]
    return cols


class LineMemory:
    """Lines a device's frames showed, by their glyph pixels (``glyphs``): text and confidence of up to
    ``maxlines`` lines, ``MEMORY_PER_SHAPE`` per ink width, the widths used least recently dropped first
    (``GlyphShelf``). Thread safe. ``hits`` and ``misses`` count the lookups."""

    def __init__(self, maxlines: int = MEMORY_LINES) -> None:
        self.maxlines = maxlines
        self._shelf = GlyphShelf()
        self._count = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return self._count

    def find(self, ink: Glyphs) -> tuple[str, float] | None:
        """(text, confidence) of a remembered line with the same glyphs (``Glyphs.same``), or None."""
        with self._lock:
            found = self._shelf.find(ink)
            if found is None:
                self.misses += 1
                return None
            self._shelf.rows.move_to_end(found[0])
            self.hits += 1
            filed: tuple[str, float] = found[1]  # type: ignore[assignment]  # what ``add`` filed
            return filed

    def add(self, ink: Glyphs, text: str, confidence: float) -> None:
        """Remember a line read from these glyphs."""
        with self._lock:
            self._count += 1 - self._shelf.add(ink, (text, confidence), MEMORY_PER_SHAPE)
            while self._count > self.maxlines and self._shelf.rows:
                self._count -= self._shelf.drop_oldest()


def read_lines(
    reader: LineReader, pixels: np.ndarray, cur: np.ndarray, regions: list[Box] | None, memory: LineMemory | None
) -> list[OcrLine]:
    """The lines of ``pixels`` (uint8 RGB; ``cur`` its ``grey``) inside ``regions`` (None: the whole frame):
    boxes detected in each region (in the whole frame, once, when the regions cover more than
    ``DETECT_WHOLE_SHARE`` of it, keeping the boxes that touch one), those ``memory`` knows taken from it, the
    others recognized in one call and remembered."""
    h, w = cur.shape
    if regions is None or sum((b[2] - b[0]) * (b[3] - b[1]) for b in regions) > DETECT_WHOLE_SHARE * h * w:
        quads = reader.detect(pixels)
        if regions is not None:
            quads = [q for q in quads if any(touches(_bounds(q), b) for b in regions)]
    else:
        quads = []
        for x0, y0, x1, y1 in regions:
            offset = np.array([x0, y0], np.float32)
            quads += [q + offset for q in reader.detect(np.ascontiguousarray(pixels[y0:y1, x0:x1]))]
    lines: list[OcrLine] = []
    unread: list[tuple[np.ndarray, Glyphs | None]] = []
    twins = FrameTwins()
    repeats: list[tuple[tuple[float, float, float, float], int]] = []  # (box, index in unread of its twin)
    for q in quads:
        box = _bounds(q)
        ink = glyphs(cur, box) if memory is not None else None
        known = memory.find(ink) if memory is not None and ink is not None else None
        if known is not None:
            lines.append(OcrLine(text=known[0], confidence=known[1], box=box))
        elif ink is not None and (twin := twins.find(ink)) is not None:
            repeats.append((box, twin))
        else:
            if ink is not None:
                twins.add(ink, len(unread))
            unread.append((q, ink))
    read = reader.recognize(pixels, [q for q, _ in unread], min_confidence=0.0)
    for (_, ink), line in zip(unread, read, strict=True):
        if line is None:
            continue
        lines.append(line)
        if memory is not None and ink is not None:
            memory.add(ink, line.text, line.confidence)
    for box, twin in repeats:
        if (line := read[twin]) is not None:
            lines.append(line.model_copy(update={"box": box}))
    return lines


class FrameTwins:
    """The boxes of one frame waiting to be recognized, by their glyphs: a box whose glyphs (``Glyphs.same``)
    another box of the frame shows (a terminal's ``root`` column, a table's repeated cells, a menu shown twice)
    takes that box's text instead of being recognized too (``find`` gives the other box's index, as given to
    ``add``). Not thread safe (one ``read_lines`` call owns it)."""

    def __init__(self) -> None:
        self._shelf = GlyphShelf()

    def find(self, ink: Glyphs) -> int | None:
        """The index of a box added with the same glyphs, or None."""
        found = self._shelf.find(ink)
        return None if found is None else int(found[1])  # type: ignore[call-overload]  # what ``add`` filed

    def add(self, ink: Glyphs, index: int) -> None:
        """Remember the box at ``index`` (into the caller's list of boxes to recognize) by its glyphs."""
        self._shelf.add(ink, index)


def _bounds(quad: np.ndarray) -> tuple[float, float, float, float]:
    return (float(quad[:, 0].min()), float(quad[:, 1].min()), float(quad[:, 0].max()), float(quad[:, 1].max()))


def read_changed(
    read: Callable[[np.ndarray], list[OcrLine]],
    pixels: np.ndarray,
    reference: tuple[np.ndarray, list[OcrLine]] | None,
    reader: LineReader | None = None,
    memory: LineMemory | None = None,
) -> tuple[list[OcrLine], float]:
    """(OCR lines of ``pixels``, share of the frame's area read) using ``read`` (an OCR function of a uint8
    RGB image returning lines with boxes in its pixels) on the regions changed since ``reference`` (its
    greyscale pixels and lines; None or another shape: the whole frame is read, share 1.0). With ``reader``,
    read by lines (``read_lines``: detected, then recognized unless ``memory`` knows them) instead of
    ``read``."""
    cur = grey(pixels)
    if reader is not None:
        if reference is None or reference[0].shape != cur.shape:
            return reading_order(read_lines(reader, pixels, cur, None, memory)), 1.0
        boxes, carried = changed_regions(reference[0], cur, reference[1])
        if not boxes:
            return reading_order(carried), 0.0
        area = sum((b[2] - b[0]) * (b[3] - b[1]) for b in boxes) / cur.size
        return reading_order(carried + read_lines(reader, pixels, cur, boxes, memory)), area
    if reference is None or reference[0].shape != cur.shape:
        return read(pixels), 1.0
    boxes, carried = changed_regions(reference[0], cur, reference[1])
    area = sum((b[2] - b[0]) * (b[3] - b[1]) for b in boxes) / cur.size
    if area > FULL_READ_SHARE:
        return read(pixels), 1.0
    lines = list(carried)
    for x0, y0, x1, y1 in boxes:
        for ln in read(np.ascontiguousarray(pixels[y0:y1, x0:x1])):
            b = ln.box
            lines.append(ln.model_copy(update={"box": (b[0] + x0, b[1] + y0, b[2] + x0, b[3] + y0)}))
    return reading_order(lines), area


class ReferenceFrames:
    """The last OCR'd frame of each device (greyscale pixels, sha256 of its RGB pixels, all its OCR lines),
    for the ``REFERENCE_DEVICES`` devices used last. Owned by one process; thread safe."""

    def __init__(self, maxsize: int = REFERENCE_DEVICES) -> None:
        self._frames: LRUCache = LRUCache(maxsize=maxsize)
        self._memories: LRUCache = LRUCache(maxsize=maxsize)
        self._lock = threading.Lock()

    def memory(self, tenant_id: str, device_id: str) -> LineMemory:
        """The device's ``LineMemory`` (a new one for a device not seen, or dropped as least recently used)."""
        with self._lock:
            mem = self._memories.get((tenant_id, device_id))
            if mem is None:
                mem = self._memories[(tenant_id, device_id)] = LineMemory()
            return mem

    def get(self, tenant_id: str, device_id: str) -> tuple[np.ndarray, list[OcrLine]] | None:
        """(greyscale pixels, lines) of the device's last frame, or None."""
        with self._lock:
            kept = self._frames.get((tenant_id, device_id))
        return None if kept is None else (kept[1], kept[2])

    def lines_of(self, tenant_id: str, device_id: str, digest: str) -> list[OcrLine] | None:
        """The lines of the device's last frame when it is the frame of sha256 ``digest`` (this process read it),
        else None."""
        with self._lock:
            kept = self._frames.get((tenant_id, device_id))
        return list(kept[2]) if kept is not None and kept[0] == digest else None

    def put(self, tenant_id: str, device_id: str, digest: str, pixels: np.ndarray, lines: list[OcrLine]) -> None:
        """Make this frame (uint8 RGB pixels, sha256 ``digest``, lines of any confidence) the device's
        reference; the same frame again changes nothing."""
        with self._lock:
            kept = self._frames.get((tenant_id, device_id))
            if kept is not None and kept[0] == digest:
                return
        g = grey(pixels)
        with self._lock:
            self._frames[(tenant_id, device_id)] = (digest, g, list(lines))


REFERENCES = ReferenceFrames()
