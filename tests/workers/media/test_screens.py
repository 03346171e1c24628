"""Changed-region OCR (``workers.media.screens``): a frame that differs from the device's last one by a line or a
scroll is read only where it changed, and its text is still the whole screen's. Real OCR model throughout; the
read function is the model's, wrapped to record which crops it was given."""

from __future__ import annotations

import numpy as np
import pytest

from bench.lib import vision as ev
from engram.schemas.observations import OcrLine
from engram.workers.media import decode as media
from engram.workers.media import screens, vision
from engram.workers.models import get_model
from tests.workers.media.test_bad_input import render_png

LINES = [
    "Quarterly budget review",
    "Alice sent the draft",
    "Bob approved travel",
    "Carol booked the room",
    "Dave wrote the minutes",
]


def pixels(path) -> np.ndarray:
    return np.asarray(media.load_image(path.read_bytes(), 60_000_000))


def recording_reader(rt, crops: list):
    model = get_model("ocr", rt.settings)

    def read(img: np.ndarray) -> list[OcrLine]:
        crops.append(img.shape[:2])
        return model.read(img, min_confidence=0.0)

    return read


def text_of(lines: list[OcrLine]) -> str:
    return " ".join(ln.text for ln in lines).lower()


def test_one_changed_line_is_read_alone_and_the_text_stays_whole(engram_env, tmp_path):
    rt = engram_env
    size = (640, 240)
    a = pixels(render_png(tmp_path / "a.png", LINES, size))
    changed = LINES[:2] + ["Bob rejected the invoice"] + LINES[3:]
    b = pixels(render_png(tmp_path / "b.png", changed, size))
    crops: list = []
    read = recording_reader(rt, crops)
    first, share = screens.read_changed(read, a, None)
    assert share == 1.0 and crops == [a.shape[:2]]
    crops.clear()
    second, share = screens.read_changed(read, b, (screens.grey(a), first))
    assert len(crops) == 1 and crops[0][0] < 70 and share < 0.3  # one band around the changed line (40 px apart)
    text = text_of(second)
    assert "rejected" in text and "approved" not in text
    assert all(w in text for w in ("quarterly", "alice", "carol", "dave"))  # carried over from the first frame
    assert [ln.box[1] for ln in second] == sorted(ln.box[1] for ln in second)  # reading order
    # through vision.ocr_lines with the device: the same text as reading the frame whole
    vision.ocr_lines(rt, "acme", a, device_id="desk")
    assert text_of(vision.ocr_lines(rt, "acme", b, device_id="desk")) == text_of(
        get_model("ocr", rt.settings).read(b, min_confidence=rt.settings.ocr_min_confidence)
    )


def test_unchanged_frame_reads_nothing_and_other_shapes_read_whole():
    prev = np.full((100, 200), 255, np.uint8)
    line = OcrLine(text="kept", confidence=0.9, box=(10.0, 10.0, 60.0, 30.0))
    assert screens.changed_regions(prev, prev.copy(), [line]) == ([], [line])
    calls = []
    lines, share = screens.read_changed(
        lambda img: calls.append(img.shape) or [], np.zeros((50, 50, 3), np.uint8), (prev, [line])
    )
    assert share == 1.0 and calls == [(50, 50, 3)] and lines == []


def test_a_line_touching_a_change_is_read_again_whole():
    prev = np.full((100, 300), 255, np.uint8)
    cur = prev.copy()
    cur[12:28, 250:280] = 0  # a word appended at the end of the line
    line = OcrLine(text="a long line", confidence=0.9, box=(10.0, 10.0, 240.0, 30.0))
    boxes, carried = screens.changed_regions(prev, cur, [line])
    assert carried == [] and len(boxes) == 1
    x0, y0, x1, y1 = boxes[0]
    assert x0 <= 10 and x1 >= 280 and y0 <= 10 and y1 >= 30


def test_scrolled_page_reads_the_new_band_only(engram_env, eval_data):
    rt = engram_env
    _, shot, full = ev.webui_pages(eval_data / "screens" / "webui")[0]  # 1280x720 viewport of a 1163 px page
    page = pixels(full)
    top = 200
    first, second = page[:720], page[top : top + 720]
    assert screens.scroll_offset(screens.grey(first), screens.grey(second)) == top
    crops: list = []
    read = recording_reader(rt, crops)
    lines, _ = screens.read_changed(read, np.ascontiguousarray(first), None)
    crops.clear()
    lines, share = screens.read_changed(read, np.ascontiguousarray(second), (screens.grey(first), lines))
    assert share < 0.5, crops
    ref = ev.webui_reference(shot, top + 720) - ev.webui_reference(shot, top)
    recall, missed = ev.word_recall(ref, [w for ln in lines if ln.confidence >= 0.5 for w in ev.words(ln.text)])
    assert recall >= 0.95, missed
    assert all(0 <= ln.box[1] and ln.box[3] <= 720 for ln in lines)


@pytest.mark.parametrize("d", [0, 37])
def test_scroll_offset(d):
    rng = np.random.default_rng(0)
    prev = rng.integers(0, 255, (300, 64), dtype=np.uint8)
    cur = np.concatenate([prev[d:], np.full((d, 64), 255, np.uint8)])
    assert screens.scroll_offset(prev, cur) == d


def test_a_device_stream_through_perceive_reads_against_its_last_frame(engram_env, tmp_path):
    from bench.lib.speech import perceive_file

    changed = ["Invoice 4471 rejected by Bob"] + LINES[1:]
    first = perceive_file(render_png(tmp_path / "a.png", LINES, (640, 240)), tenant="acme", device="laptop-stream")
    assert screens.REFERENCES.get("acme", "laptop-stream") is not None  # the device's frame is the reference now
    second = perceive_file(render_png(tmp_path / "b.png", changed, (640, 240)), tenant="acme", device="laptop-stream")
    assert first and second, "both frames kept (not near-duplicates)"
    text = second[0].text.lower()
    assert "invoice" in text and "quarterly" not in text and all(w in text for w in ("alice", "carol", "dave"))
    grey_now, _ = screens.REFERENCES.get("acme", "laptop-stream")
    assert np.array_equal(grey_now, screens.grey(pixels(tmp_path / "b.png")))
