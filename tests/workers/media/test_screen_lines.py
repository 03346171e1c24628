"""OCR by lines (``workers.media.screens.read_lines``): only the changed regions' boxes are detected, and only the
boxes whose glyphs the device's ``LineMemory`` has not seen are recognized. Real OCR model throughout, wrapped to
record what it was asked to detect and recognize; the last test reads frames grabbed from a real desktop (Xvfb,
openbox, xterm) and compares the merged text with a full read of the same frame."""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

from engram.workers.media import decode as media
from engram.workers.media import screens
from engram.workers.models import get_model
from tests.workers.media.test_bad_input import render_png
from tests.xdesktop import have_real_desktop, openbox, type_text, xterm, xvfb

LINES = [
    "Quarterly budget review",
    "Alice sent the draft",
    "Bob approved travel",
    "Carol booked the room",
    "Dave wrote the minutes",
]


class Recorder:
    """The OCR model with its ``detect`` and ``recognize`` calls recorded (detected image shapes, quads asked)."""

    def __init__(self, model) -> None:
        self.model, self.detected, self.recognized = model, [], []

    def read(self, image):
        return self.model.read(image, min_confidence=0.0)

    def detect(self, image):
        self.detected.append(image.shape[:2])
        return self.model.detect(image)

    def recognize(self, image, quads, min_confidence=0.5):
        self.recognized += quads
        return self.model.recognize(image, quads, min_confidence)

    def clear(self) -> None:
        self.detected.clear()
        self.recognized.clear()


def pixels(path) -> np.ndarray:
    return np.asarray(media.load_image(path.read_bytes(), 60_000_000))


def texts(lines) -> list[str]:
    return [ln.text for ln in lines if ln.confidence >= 0.5]


def words(lines) -> list[str]:
    return [w for t in texts(lines) for w in t.split()]


def test_unchanged_frame_reads_nothing_and_a_changed_line_is_recognized_alone(engram_env, tmp_path):
    rec = Recorder(get_model("ocr", engram_env.settings))
    memory = screens.LineMemory()
    a = pixels(render_png(tmp_path / "a.png", LINES, (640, 240)))
    first, share = screens.read_changed(rec.read, a, None, rec, memory)
    assert share == 1.0 and len(rec.recognized) == len(LINES) and len(memory) == len(LINES)
    assert texts(first) == texts(get_model("ocr", engram_env.settings).read(a))  # the same as a full read
    rec.clear()
    same, share = screens.read_changed(rec.read, a.copy(), (screens.grey(a), first), rec, memory)
    assert same == first and share == 0.0 and rec.detected == [] and rec.recognized == []
    b = pixels(render_png(tmp_path / "b.png", LINES[:2] + ["Bob rejected the invoice"] + LINES[3:], (640, 240)))
    second, share = screens.read_changed(rec.read, b, (screens.grey(a), first), rec, memory)
    assert len(rec.detected) == 1 and rec.detected[0][0] < 70 and share < 0.3  # a band around the line
    assert len(rec.recognized) == 1 and 100 < rec.recognized[0][:, 1].mean() < 140  # the third line's box only
    assert texts(second) == LINES[:2] + ["Bob rejected the invoice"] + LINES[3:]


def test_lines_seen_before_are_not_recognized_again(engram_env, tmp_path):
    """A frame whose text came back (a window raised again, a page come back to, lines scrolled to another
    place): its boxes are detected, their glyphs found in the memory, nothing recognized."""
    rec = Recorder(get_model("ocr", engram_env.settings))
    memory = screens.LineMemory()
    a = pixels(render_png(tmp_path / "a.png", LINES, (640, 240)))
    b = pixels(render_png(tmp_path / "b.png", ["Eve moved the meeting", "Frank left early"], (640, 240)))
    moved = pixels(render_png(tmp_path / "c.png", LINES[2:] + LINES[:2], (640, 240)))  # same lines, elsewhere
    lines, _ = screens.read_changed(rec.read, a, None, rec, memory)
    lines_b, _ = screens.read_changed(rec.read, b, (screens.grey(a), lines), rec, memory)
    assert texts(lines_b) == ["Eve moved the meeting", "Frank left early"]
    rec.clear()
    again, _ = screens.read_changed(rec.read, moved, (screens.grey(b), lines_b), rec, memory)
    assert rec.detected and rec.recognized == [] and memory.hits >= len(LINES)
    assert texts(again) == LINES[2:] + LINES[:2]


def test_line_memory_tells_one_changed_character(engram_env, tmp_path):
    """Two lines of the same shape that differ by one digit are two lines, not one remembered."""
    g1 = screens.grey(pixels(render_png(tmp_path / "a.png", ["Invoice 4471 paid"], (400, 60))))
    g2 = screens.grey(pixels(render_png(tmp_path / "b.png", ["Invoice 4477 paid"], (400, 60))))
    box = (10.0, 10.0, 380.0, 50.0)
    a, b = screens.glyphs(g1, box), screens.glyphs(g2, box)
    moved = screens.glyphs(np.pad(g1, ((2, 0), (0, 1)), constant_values=255), (11.0, 12.0, 381.0, 51.0))
    assert a is not None and b is not None and moved is not None and a.width == b.width == moved.width
    assert a.same(moved) and not a.same(b)  # one line two pixels down (the detector's box one apart), one not
    memory = screens.LineMemory()
    memory.add(a, "Invoice 4471 paid", 0.99)
    assert memory.find(b) is None and memory.find(moved) == ("Invoice 4471 paid", 0.99)


@pytest.mark.slow
def test_frames_of_a_real_desktop_read_by_lines_give_the_full_read_text(engram_env, tmp_path):
    """Xvfb + openbox + two real xterms (one typed into, one printing a line every second): frames grabbed
    with mss as capture grabs them, stored as capture stores them (WebP), read by lines against the previous
    frame; each frame's text is the text a full read of it gives, with a fraction of the lines recognized."""
    if not have_real_desktop():
        pytest.skip("openbox, xterm or xdotool not installed (`bash scripts/setup.sh --dev` installs them)")
    import mss
    from PIL import Image

    from engram.api.capture.agent import WEBP_QUALITY

    model = get_model("ocr", engram_env.settings)
    rec = Recorder(model)
    memory = screens.LineMemory()
    ticker = 'i=0; while true; do i=$((i+1)); echo "ferry departure $i at harbour gate $((i*7%13))"; sleep 1; done'
    frames = []
    with (
        xvfb("1280x720x24") as display,
        openbox(display),
        xterm(
            display, "cat /etc/os-release; ls -la /usr/bin | head -20; exec sh -i", "user@host: ~", "70x28+0+0"
        ) as shell,
        xterm(display, ticker, "ticker", "60x20+660+80"),
    ):
        with mss.MSS(display=display) as grabber:
            for step in range(4):
                if step == 2:
                    type_text(display, shell, "echo the lighthouse keeper asked for batteries\n", delay_ms=5)
                time.sleep(1.5)
                shot = grabber.grab(grabber.monitors[1])
                img = Image.frombytes("RGB", shot.size, shot.bgra, "raw", "BGRX")
                img.save(tmp_path / f"{step}.webp", format="WEBP", quality=WEBP_QUALITY)
                frames.append(pixels(tmp_path / f"{step}.webp"))
    reference = None
    for i, px in enumerate(frames):
        rec.clear()
        lines, share = screens.read_changed(rec.read, px, reference, rec, memory)
        full = model.read(px, min_confidence=0.0)
        # the words of a full read, but for a line read in an earlier frame from a box a pixel apart (the same
        # pixels may read 'activate-glc' there and 'activate-glq' here) and boxes a changed region's detector
        # split where the whole frame's did not; and boxes of one frame with the same glyphs share one reading
        # ('NoV' for all of a listing's 'Nov' when that is how the one recognized read; 5 words of 217 here)
        got, want = Counter(words(lines)), Counter(words(full))
        assert sum((want - got).values()) <= 0.03 * sum(want.values()), (i, want - got, got - want)
        if i:
            assert len(rec.recognized) < len(full) / 2, (i, share, len(rec.recognized), len(full))
        reference = (screens.grey(px), lines)
    assert "lighthouse" in words(lines)
