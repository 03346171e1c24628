"""The embedded default after a crash and on hostile files: ``kill -9`` of ``engram ingest`` in the middle of a
conversation loses nothing (the next run resumes the interrupted event: every message stored exactly once), a
JSON file nested 200,000 deep fails alone while the files after it are ingested and consolidated, a FIFO in a
folder is left out unopened, a file over the size limit fails unread, and a file that
kills the process each time it is perceived fails on a later run while the files of the same runs are done."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO


def _env(tmp_path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
        "COLUMNS": "250",
    }


def _chat(path, n: int, session: str = "s1") -> None:
    path.write_text(
        "".join(
            json.dumps(
                {
                    "message_id": f"{session}-m{i}",
                    "session_id": session,
                    "speaker": ["Ann", "Bob"][i % 2],
                    "text": f"Message {i}: we talked about topic number {i} and the plan for day {i % 30}.",
                    "timestamp": f"2024-05-{1 + i % 28:02d}T10:{i % 60:02d}:00Z",
                }
            )
            + "\n"
            for i in range(n)
        )
    )


def _segments_done(db) -> int:
    try:
        with sqlite3.connect(db, timeout=1) as conn:
            row = conn.execute("SELECT COUNT(*) FROM segments").fetchone()
        return int(row[0] or 0)
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_kill_9_mid_conversation_then_the_next_ingest_resumes_it(tmp_path):
    chat = tmp_path / "long.jsonl"
    _chat(chat, 640)  # ten segments of 64 messages
    cmd = [sys.executable, "-m", "engram.api.cli", "ingest", str(chat), "--user", "ann"]
    proc = subprocess.Popen(cmd, env=_env(tmp_path), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    db = tmp_path / "data" / "ledger.sqlite"
    deadline = time.monotonic() + 300
    while _segments_done(db) < 1 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    killed_after = _segments_done(db)
    assert 1 <= killed_after < 10, killed_after  # killed in the middle
    status = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", "status"],
        env=_env(tmp_path),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    shown = " ".join(status.stdout.split())
    assert status.returncode == 0 and f"unfinished {chat}" in shown and "the next `engram ingest`" in shown
    again = subprocess.run(cmd, env=_env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed" in again.stderr and "(interrupted earlier): done" in " ".join(again.stderr.split())
    code = (
        "from engram.workers.runtime import runtime\n"
        "from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter\n"
        "ids = [r.payload['message_id'] for r in runtime().vectors.scroll(OBSERVATIONS, tenant_filter("
        "'default', 'ann'), with_payload=['message_id'])]\n"
        "print(len(ids), len(set(ids)))\n"
    )
    counted = subprocess.run(
        [sys.executable, "-c", code], env=_env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert counted.stdout.split() == ["640", "640"], counted.stderr[-2000:]


@pytest.mark.slow
def test_a_json_nested_200000_deep_fails_alone(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    _chat(folder / "a.jsonl", 3, "sa")
    (folder / "b.json").write_text("[" * 200_000 + "]" * 200_000)
    _chat(folder / "c.jsonl", 3, "sc")
    out = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", "ingest", str(folder), "--user", "ann"],
        env=_env(tmp_path),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "RecursionError" not in out.stderr
    summary = " ".join(out.stdout.split())
    assert "2 done" in summary and "1 not media" in summary
    listed = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", "memories", "list", "--type", "episodic", "--user", "ann"],
        env=_env(tmp_path),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert listed.returncode == 0 and "Message 1" in listed.stdout  # consolidation ran after the batch


@pytest.mark.slow
def test_a_fifo_and_a_symlink_loop_in_a_folder_do_not_stop_the_ingest(tmp_path):
    """A folder holding a FIFO (reading it would wait for a writer for ever) and a symlink to itself: the FIFO is
    left out as not media without being opened, the loop fails with its reason, the conversation is done."""
    import os

    folder = tmp_path / "in"
    folder.mkdir()
    os.mkfifo(folder / "a-pipe.png")
    (folder / "b-loop").symlink_to(folder / "b-loop")
    _chat(folder / "c.jsonl", 3, "sc")
    out = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", "ingest", str(folder), "--user", "ann"],
        env=_env(tmp_path),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary, errors = " ".join(out.stdout.split()), " ".join(out.stderr.split())
    assert "1 done" in summary and "1 failed" in summary and "1 not media" in summary, summary
    assert "a-pipe.png: not media" in summary and "b-loop: cannot read: Too many levels of symbolic links" in errors


@pytest.mark.slow
def test_a_file_over_the_size_limit_fails_unread(tmp_path):
    """A conversation file larger than ENGRAM_MAX_OBJECT_BYTES (a sparse file here) fails with the limit as its
    reason before anything reads it: not parsed, hashed or copied into the object store; the file beside it is
    done."""
    folder = tmp_path / "in"
    folder.mkdir()
    with open(folder / "a-huge.jsonl", "wb") as fh:
        fh.truncate(3 * 1024**2)
    _chat(folder / "b.jsonl", 3, "sb")
    env = {**_env(tmp_path), "ENGRAM_MAX_OBJECT_BYTES": str(1024**2)}
    out = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", "ingest", str(folder), "--user", "ann"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "1 done" in " ".join(out.stdout.split()) and "1 failed" in " ".join(out.stdout.split())
    assert (
        f"a-huge.jsonl: too large: {3 * 1024**2} bytes exceeds ENGRAM_MAX_OBJECT_BYTES ({1024**2}); not read"
        in " ".join(out.stderr.split())
    ), out.stderr[-2000:]
    objects = tmp_path / "data" / "objects"  # the embedded object store
    stored = [p for p in objects.rglob("*") if p.is_file() and p.stat().st_size >= 1024**2]
    assert objects.is_dir() and stored == [], stored  # the conversation beside it is there, no copy of it


def _unfinished_starts(db, source: str) -> int:
    """Starts of the perception of the event of file ``source`` (a file name) that have not ended (the ledger's
    count)."""
    try:
        with sqlite3.connect(db, timeout=1) as conn:
            row = conn.execute(
                "SELECT MAX(u.starts) FROM unfinished u JOIN events e ON e.event_id = u.event_id"
                " WHERE e.source_name LIKE ?",
                (f"%/{source}",),
            ).fetchone()
        return int(row[0] or 0)
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_a_file_that_kills_engram_ingest_fails_on_a_later_run_and_the_others_are_kept(tmp_path):
    """``engram ingest`` of a folder dies (SIGKILLed here, as a decoder crashing on a hostile file or the kernel's
    out-of-memory killer would kill it) each time it perceives one screenshot: each next run resumes the files the
    dead one left, and the run after ``max_redeliveries - 1`` deaths fails that screenshot's event with the reason
    instead of dying again, while the other files of the same runs are done (not given up with it)."""
    from engram.schemas.settings import Settings
    from tests.workload import make_screenshot

    folder = tmp_path / "in"
    folder.mkdir()
    for i, name in enumerate(["a-notes.png", "b-poison.png", "c-notes.png"]):
        make_screenshot(folder / name, f"Notes {i}", [f"line {i} of {name}", "budget review on Friday"], seed=i)
    cmd = [sys.executable, "-m", "engram.api.cli", "ingest", str(folder), "--user", "ann"]
    db = tmp_path / "data" / "ledger.sqlite"
    deaths = max(1, Settings().max_redeliveries - 1)
    for run in range(1, deaths + 1):
        proc = subprocess.Popen(cmd, env=_env(tmp_path), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 300
        while _unfinished_starts(db, "b-poison.png") < run and proc.poll() is None:
            assert time.monotonic() < deadline, "never saw the screenshot being perceived"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)  # dies perceiving it
        proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL, f"run {run} ended before it was killed"
    last = subprocess.run(cmd, env=_env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in last.stderr, last.stderr[-3000:]
    with sqlite3.connect(db) as conn:
        rows = [
            (Path(name).name, *rest)
            for name, *rest in conn.execute("SELECT source_name, status, stage, reason FROM events ORDER BY created_at")
        ]
    resumed = rows[:3]  # the first run's events: the ones each later run resumed
    poison = next(r for r in resumed if r[0] == "b-poison.png")
    assert poison[1:3] == ("failed", "perceive"), rows
    assert f"started {deaths} times before and never finished" in poison[3], poison
    assert sorted(r[1] for r in resumed if r[0] != "b-poison.png") == ["done", "done"], rows
