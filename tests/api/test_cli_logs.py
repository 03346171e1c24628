"""The CLI's logs in the embedded default: no warning about a broker host (there is no broker), and no colour
codes when stderr is a file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_verbose_logs_to_a_file_have_no_colour_and_no_broker_warning(tmp_path):
    chat = tmp_path / "chat.jsonl"
    chat.write_text(
        json.dumps(
            {
                "message_id": "m1",
                "session_id": "s1",
                "speaker": "Ann",
                "text": "Lisbon is booked",
                "timestamp": "2024-05-02T18:03:00Z",
            }
        )
        + "\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
    }
    with open(tmp_path / "err.log", "w") as err:
        out = subprocess.run(
            [sys.executable, "-m", "engram.api.cli", "-v", "ingest", str(chat), "--user", "ann"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            timeout=600,
            cwd=REPO,
        )
    log = (tmp_path / "err.log").read_text()
    assert out.returncode == 0, log[-3000:]
    assert "1 done" in out.stdout
    assert "event" in log or "stage" in log  # -v logs the stages
    assert "\x1b[" not in log and "No hostname was supplied" not in log
