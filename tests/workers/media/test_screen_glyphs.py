"""OCR by lines on a terminal's tight lines (issue 41's budget): a line the device's ``LineMemory`` has seen is
known again after it moved, in another WebP encoding, with a detector box a few px taller (reaching into the next
line) or cut into a neighbouring word, and a line with one character changed is not. Real rapidocr on frames
rendered in a monospace font at a terminal's line pitch, encoded as capture stores them (WebP, quality 65)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from engram.api.capture.agent import WEBP_QUALITY
from engram.workers.media import decode as media
from engram.workers.media import screens
from engram.workers.models import get_model
from tests.workers.media.test_screen_lines import Recorder, texts

LISTING = [
    f"-rwxr-xr-x 1 root root {size:>6} Aug  4 04:53 {name}"
    for size, name in (
        (27592, "amqp-consume"),
        (131192, "apt-key"),
        (88456, "aria_chk"),
        (18752, "basenc"),
        (59784, "b2sum"),
        (26944, "bunzip2"),
        (60400, "cat"),
        (5404576, "containerd"),
    )
]


def terminal(lines: list[str], dx: int = 0, dy: int = 0) -> np.ndarray:
    """A 900 x 420 frame of ``lines`` (DejaVu Sans Mono 15 px, 17 px apart: a terminal's pitch) at (12 + dx,
    8 + dy), stored as WebP at capture's quality and decoded (lossy noise around the glyphs, as in capture)."""
    from PIL import Image, ImageDraw, ImageFont

    try:
        font = ImageFont.truetype("DejaVuSansMono.ttf", 15)
    except OSError:
        pytest.skip("DejaVu Sans Mono is not installed")
    img = Image.new("RGB", (900, 420), "white")
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((12 + dx, 8 + dy + 17 * i), line, fill="black", font=font)
    buf = io.BytesIO()
    img.save(buf, format="WEBP", quality=WEBP_QUALITY)
    return np.asarray(media.load_image(buf.getvalue(), 60_000_000))


def test_moved_lines_of_a_terminal_are_known_again_and_a_changed_digit_is_read(engram_env):
    """The listing scrolled by three lines and moved 5 px right (every box re-detected, other WebP noise): no
    line seen before is recognized again; the line whose size changed by one digit is, and reads so."""
    model = get_model("ocr", engram_env.settings)
    rec = Recorder(model)
    memory = screens.LineMemory()
    first, _ = screens.read_changed(rec.read, terminal(LISTING), None, rec, memory)
    assert "27592" in " ".join(texts(first))
    rec.clear()
    changed = LISTING[3:] + [LISTING[0].replace("27592", "27593")]
    frame = terminal(changed, dx=5, dy=-2)
    second, _ = screens.read_changed(rec.read, frame, None, rec, memory)
    assert 1 <= len(rec.recognized) <= 2  # the changed line, and a line the detector boxed otherwise at most
    assert any(0 < q[:, 1].min() - 17 * 5 < 30 for q in rec.recognized)  # the changed line's row
    got = " ".join(texts(second))
    assert "27593" in got and "27592" not in got
    assert sorted(texts(second)) == sorted(texts(model.read(frame)))  # what a full read gives


def test_a_box_cut_into_the_next_word_has_the_line_width():
    """``glyphs`` of one word boxed tight, boxed with a margin, and boxed into a neighbour's glyph: one ink
    width and rows, and each is ``same`` as the others."""
    frame = screens.grey(terminal(["   root", "wx root"]))
    y0, y1 = 8, 8 + 17
    x = 12 + 3 * 9  # "root" starts at the fourth column (DejaVu Sans Mono 15 px: 9 px a column)
    tight = screens.glyphs(frame, (x - 1, y0, x + 37, y1))
    margin = screens.glyphs(frame, (x - 6, y0 - 3, x + 42, y1 + 4))  # into the next line's top
    cut = screens.glyphs(frame, (x - 6, y0 + 17 - 3, x + 42, y1 + 17 + 1))  # into "x" of "wx root"
    assert tight is not None and margin is not None and cut is not None
    assert abs(tight.width - margin.width) <= 1 and abs(tight.width - cut.width) <= 1
    assert tight.same(margin) and margin.same(tight) and cut.same(tight) and tight.same(cut)
