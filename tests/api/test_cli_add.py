"""``engram add`` on the embedded default through the real CLI: a text and a file of messages are searchable when the
command returns, the same ``--id`` stores nothing again, bad input is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


def _cli(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
        "COLUMNS": "300",
        "ENGRAM_USER": "ann",
    }
    return subprocess.run(
        [sys.executable, "-m", "engram.api.cli", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_engram_add_text_and_file_then_search(tmp_path):
    chat = tmp_path / "chat.json"
    chat.write_text(
        json.dumps(
            {
                "messages": [
                    {
                        "speaker": "Bea",
                        "text": "The harbour festival starts on the ninth",
                        "timestamp": "2024-07-01T10:00:00Z",
                    },
                    {"text": "I will bring the folding chairs"},
                ]
            }
        )
    )
    out = _cli(tmp_path, "add", "The piano tuner comes on Thursday morning", "--id", "n1", "--source", "test", "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    first = json.loads(out.stdout)
    assert first["status"] == "done" and first["observations"] == 1
    again = _cli(tmp_path, "add", "anything", "--id", "n1")
    assert again.returncode == 0 and "nothing new stored" in again.stdout and first["event_id"] in again.stdout
    out = _cli(tmp_path, "add", "--file", str(chat), "--no-consolidate")
    assert out.returncode == 0 and out.stdout.startswith("done:") and "2 observations" in out.stdout, out.stderr
    # the file's two turns, left for it: one user's episodes (the dated turn and the one of today apart)
    consolidated = _cli(tmp_path, "consolidate")
    assert consolidated.returncode == 0 and consolidated.stdout.strip() == "2 episodic memories written for 1 user", (
        consolidated.stdout + consolidated.stderr[-2000:]
    )
    found = _cli(tmp_path, "search", "when does the piano tuner come", "-k", "3")
    assert "piano tuner comes on Thursday" in found.stdout, found.stderr[-2000:]
    found = _cli(tmp_path, "search", "who brings chairs to the harbour festival", "--json")
    texts = [h["text"] for h in json.loads(found.stdout)["hits"]]
    assert "ann: I will bring the folding chairs" in texts and any("Bea: The harbour festival" in t for t in texts)
    bad = _cli(tmp_path, "add", "x", "--file", str(chat))
    assert bad.returncode == 2 and "one of them" in bad.stderr
    chat.write_text('[{"speaker": "Bea"}]')
    bad = _cli(tmp_path, "add", "--file", str(chat))
    assert bad.returncode == 2 and "messages.0.text: Field required" in bad.stderr, bad.stderr
