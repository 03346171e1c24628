"""The face model's descriptor half loads on the first face (issue 41): a capture of a real terminal, through the
pipeline of the embedded default as ``engram capture`` publishes it, never loads the landmark and descriptor models
(92 MB), and the same screen with a photo on it does, and keeps its face. Run in a fresh interpreter: the models are
per process, and an earlier test of this one may have loaded them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import mss
import pytest
from PIL import Image

from tests.conftest import REPO
from tests.xdesktop import have_real_desktop, openbox, type_text, xterm, xvfb

#: Publishes each PNG named on the command line as a screenshot of one device (``api.local.publish_file`` and
#: ``run_event``, as ``EmbeddedSink`` does) and prints, after each, the event's status, the faces
#: the device's frame holds (``screen_faces.REFERENCES``) and the face model's public flags.
CHILD = """
import json, sys
from pathlib import Path
from engram.api.local import Candidate, publish_file, run_event
from engram.schemas.events import MediaKind
from engram.workers.media import screen_faces
from engram.workers.models import get_model
from engram.workers.runtime import runtime

rt = runtime()
faces = get_model("faces", rt.settings)
for path in sys.argv[1:]:
    event = publish_file(rt, Candidate(Path(path), MediaKind.screenshot, "image/png"), "acme", "u", "desk")
    record = run_event(rt, event)
    found = len(screen_faces.REFERENCES.get("acme", "desk")[1])
    print(json.dumps({"status": record.status.value, "loaded": faces.loaded, "describer": faces.describer_loaded,
                      "faces": found}))
"""


def terminal_screen(path) -> None:
    """Save a real xterm's directory listing on a real 1280x720 desktop (openbox) to ``path`` (PNG)."""
    with (
        xvfb("1280x720x24") as display,
        openbox(display),
        xterm(display, "PS1='$ ' exec sh -i", "user@host: ~", "120x40+0+0") as term,
    ):
        type_text(display, term, "ls -la /usr/bin | head -38\n", delay_ms=5)
        time.sleep(1.5)
        with mss.MSS(display=display) as grab:
            shot = grab.grab(grab.monitors[1])
    Image.frombytes("RGB", shot.size, shot.bgra, "raw", "BGRX").save(path)


@pytest.mark.slow
def test_a_terminal_never_loads_the_face_descriptors_and_a_photo_on_screen_does(eval_data, tmp_path):
    if not have_real_desktop():
        pytest.skip("openbox, xterm and xdotool are not installed")
    terminal = tmp_path / "terminal.png"
    terminal_screen(terminal)
    photo = Image.open(eval_data / "faces" / "deepface" / "img1.jpg").convert("RGB")
    photo = photo.resize((photo.width * 300 // photo.height, 300))
    with_photo = Image.open(terminal).convert("RGB")
    with_photo.paste(photo, (900, 300))
    with_photo.save(tmp_path / "with_photo.png")
    env = {**os.environ, "ENGRAM_DATA_DIR": str(tmp_path / "data"), "HF_HUB_OFFLINE": "1"}
    for var in ("ENGRAM_BROKER_URL", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT"):
        env.pop(var, None)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(terminal), str(tmp_path / "with_photo.png")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    first, second = (json.loads(line) for line in out.stdout.splitlines() if line.startswith("{"))
    assert first == {"status": "done", "loaded": False, "describer": False, "faces": 0}  # nothing on it to search
    assert second == {"status": "done", "loaded": True, "describer": True, "faces": 1}  # the photo's face described
