"""OCR by lines, the cost of a kept frame (issue 41's budget): boxes of one frame that show the same glyphs are
recognized once (``workers.media.screens.FrameTwins``), a frame's text stays the text a full read gives, and a
frame changed everywhere is read whole. Real rapidocr on rendered frames (DejaVu Sans, as ``render_png``)."""

from __future__ import annotations

import numpy as np

from engram.workers.media import screens
from engram.workers.models import get_model
from tests.workers.media.test_bad_input import render_png
from tests.workers.media.test_screen_lines import Recorder, pixels, texts

#: A terminal's listing: the owner column repeats on every line, each at its own place.
TABLE = ["report.pdf", "root", "budget.xlsx", "root", "notes.txt", "root"]


def test_repeated_boxes_of_one_frame_are_recognized_once(engram_env, tmp_path):
    """Three boxes showing ``root`` (one glyph set at three places): one recognition gives all three their text;
    the frame's text is a full read's."""
    model = get_model("ocr", engram_env.settings)
    rec = Recorder(model)
    frame = pixels(render_png(tmp_path / "a.png", TABLE, (480, 280)))
    lines, share = screens.read_changed(rec.read, frame, None, rec, screens.LineMemory())
    assert share == 1.0 and len(rec.detected) == 1
    assert len(rec.recognized) == len(TABLE) - 2  # "root" once, not three times
    assert texts(lines) == texts(model.read(frame)) == TABLE


def test_one_changed_line_reads_as_a_full_read_and_a_new_screen_is_read_whole(engram_env, tmp_path):
    """A frame whose one line changed: only a band around it is detected and the line alone recognized, and
    the merged text equals a full read of that frame; then a frame changed everywhere (another window raised
    over all of it) is detected whole, and its text too equals a full read."""
    model = get_model("ocr", engram_env.settings)
    rec = Recorder(model)
    memory = screens.LineMemory()
    first = ["Ferry timetable for Ana", "Harbour budget on Thursday", "Radio for the lighthouse"]
    a = pixels(render_png(tmp_path / "a.png", first, (640, 200)))
    b = pixels(render_png(tmp_path / "b.png", first[:1] + ["Harbour budget on Friday"] + first[2:], (640, 200)))
    lines_a, _ = screens.read_changed(rec.read, a, None, rec, memory)
    rec.clear()
    lines_b, share = screens.read_changed(rec.read, b, (screens.grey(a), lines_a), rec, memory)
    assert 0 < share < 0.3 and len(rec.detected) == 1 and len(rec.recognized) == 1
    assert texts(lines_b) == texts(model.read(b))
    other = ["Invoice 48213 water damage", "Call the insurer", "Kitchen floor photos", "Claim form page 2"]
    c = pixels(render_png(tmp_path / "c.png", other, (640, 200)))
    c = np.where(c > 230, np.uint8(200), c)  # a grey background everywhere: every block changed
    rec.clear()
    lines_c, share = screens.read_changed(rec.read, c, (screens.grey(b), lines_b), rec, memory)
    assert share > 0.9 and rec.detected == [c.shape[:2]]  # one detector pass over the whole frame
    assert texts(lines_c) == texts(model.read(c)) == other
