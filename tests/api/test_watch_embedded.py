"""``engram watch`` on the embedded default (no servers), as a real process: a file dropped in the folder is
ingested once it settles and becomes searchable from another process while the watcher keeps running (the store
is held only per batch); the same content again is skipped as a duplicate; SIGTERM stops it."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import REPO


def _lines(stream, out: queue.Queue) -> None:
    for line in stream:
        out.put(line)


def _wait_for(lines: queue.Queue, needle: str, timeout: float, seen: list[str]) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(line)
        if needle in line:
            return line
    raise AssertionError(f"{needle!r} not printed within {timeout} s; output: {''.join(seen)[-3000:]}")


@pytest.mark.slow
def test_watch_embedded_ingests_dropped_files_and_releases_the_store(tmp_path):
    folder = tmp_path / "inbox"
    folder.mkdir()
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
        "COLUMNS": "300",
        "ENGRAM_USER": "ann",
        "ENGRAM_STORE_WAIT_SECONDS": "120",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram.api.cli", "watch", str(folder), "--settle", "0.5"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    seen: list[str] = []
    try:
        _wait_for(lines, "watching", 120, seen)
        record = {
            "message_id": "m1",
            "session_id": "s1",
            "speaker": "Ann",
            "text": "The kayak rental at Lagos closes at six",
            "timestamp": "2024-05-02T18:03:00Z",
        }
        part = folder / "chat.jsonl.part"  # written under an in-progress name, then moved in, as downloads are
        part.write_text(json.dumps(record) + "\n")
        part.rename(folder / "chat.jsonl")
        assert "done (1 observation)" in _wait_for(lines, "ingested", 300, seen)
        # the watcher is still running and keeps the store open for its next batch (300 s), but leaves it to
        # another process that asks: a search waiting 20 s at most gets it
        found = subprocess.run(
            [sys.executable, "-m", "engram.api.cli", "search", "kayak rental"],
            env={**env, "ENGRAM_STORE_WAIT_SECONDS": "20"},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert found.returncode == 0, found.stderr[-2000:]
        assert "kayak rental at Lagos" in " ".join(found.stdout.split())
        (folder / "again.jsonl").write_text(json.dumps(record) + "\n")  # same content, another name
        assert "duplicate" in _wait_for(lines, "skipped", 300, seen)
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert proc.returncode == 0
    assert not any("chat.jsonl.part" in line for line in seen)
