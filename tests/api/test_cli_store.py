"""Read-only commands refuse a data dir that holds no store (naming it, with a hint) and make nothing there;
a write makes the store."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


def _engram(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "COLUMNS": "250",
    }
    return subprocess.run(
        [sys.executable, "-m", "engram.api.cli", *args], capture_output=True, text=True, env=env, timeout=600, cwd=REPO
    )


@pytest.mark.slow
def test_read_only_commands_refuse_a_data_dir_without_a_store(tmp_path):
    missing = tmp_path / "nowhere"
    for command in (["search", "hello"], ["memories", "list"], ["status"], ["entities"]):
        out = _engram(tmp_path, "--data-dir", str(missing), *command)
        assert out.returncode == 2, (command, out.stderr[-2000:])
        assert f"no engram store in {missing}" in " ".join(out.stderr.split())
        assert "engram ingest" in out.stderr and not missing.exists()
    assert _engram(tmp_path, "--data-dir", str(missing), "search", "--help").returncode == 0
    chat = tmp_path / "chat.jsonl"
    chat.write_text(
        '{"message_id": "m1", "session_id": "s1", "speaker": "Ann", "text": "Lisbon is booked", '
        '"timestamp": "2024-05-02T18:03:00Z"}\n'
    )
    assert _engram(tmp_path, "--data-dir", str(missing), "ingest", str(chat), "--user", "ann").returncode == 0
    found = _engram(tmp_path, "--data-dir", str(missing), "search", "Lisbon", "--user", "ann")
    assert found.returncode == 0 and "Lisbon is booked" in found.stdout


@pytest.mark.slow
def test_since_and_until_take_the_words_a_query_takes(tmp_path):
    chat = tmp_path / "chat.jsonl"
    chat.write_text(
        '{"message_id": "m1", "session_id": "s1", "speaker": "Ann", "text": "Lisbon is booked", '
        '"timestamp": "2024-05-02T18:03:00Z"}\n'
        '{"message_id": "m2", "session_id": "s2", "speaker": "Ann", "text": "Lisbon was lovely", '
        '"timestamp": "2024-07-20T09:00:00Z"}\n'
    )
    data = str(tmp_path / "data")
    assert _engram(tmp_path, "--data-dir", data, "ingest", str(chat), "--user", "ann").returncode == 0
    may = _engram(tmp_path, "--data-dir", data, "search", "Lisbon", "--since", "2024-05", "--until", "2024-05")
    assert may.returncode == 0 and "Lisbon is booked" in may.stdout and "lovely" not in may.stdout
    later = _engram(tmp_path, "--data-dir", data, "search", "Lisbon", "--since", "June 2024")
    assert later.returncode == 0 and "lovely" in later.stdout and "booked" not in later.stdout
    recent = _engram(tmp_path, "--data-dir", data, "search", "Lisbon", "--since", "2h")  # a span back from now
    assert recent.returncode == 0 and "booked" not in recent.stdout and "lovely" not in recent.stdout  # 2024
    bad = _engram(tmp_path, "--data-dir", data, "search", "Lisbon", "--since", "banana")
    assert bad.returncode == 2 and "--since" in bad.stderr and "'banana' is not a time" in " ".join(bad.stderr.split())
