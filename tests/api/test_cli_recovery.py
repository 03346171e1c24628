"""The embedded default after a crash and on hostile files: ``kill -9`` of ``engram ingest`` in the middle of a
conversation loses nothing (the next run resumes the interrupted event: every message stored exactly once), and a
JSON file nested 200,000 deep fails alone while the files after it are ingested and consolidated."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time

from tests.conftest import REPO


def _env(tmp_path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO),
            "ENGRAM_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "250"}


def _chat(path, n: int, session: str = "s1") -> None:
    path.write_text("".join(json.dumps({
        "message_id": f"{session}-m{i}", "session_id": session, "speaker": ["Ann", "Bob"][i % 2],
        "text": f"Message {i}: we talked about topic number {i} and the plan for day {i % 30}.",
        "timestamp": f"2024-05-{1 + i % 28:02d}T10:{i % 60:02d}:00Z"}) + "\n" for i in range(n)))


def _segments_done(db) -> int:
    try:
        with sqlite3.connect(db, timeout=1) as conn:
            row = conn.execute("SELECT COUNT(*) FROM segments").fetchone()
        return int(row[0] or 0)
    except sqlite3.Error:
        return 0


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
    status = subprocess.run([sys.executable, "-m", "engram.api.cli", "status"], env=_env(tmp_path), cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    shown = " ".join(status.stdout.split())
    assert status.returncode == 0 and f"unfinished {chat}" in shown and "the next `engram ingest`" in shown
    again = subprocess.run(cmd, env=_env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed" in again.stderr and "(interrupted earlier): done" in " ".join(again.stderr.split())
    code = ("from engram.workers.runtime import runtime\n"
            "from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter\n"
            "ids = [r.payload['message_id'] for r in runtime().vectors.scroll(OBSERVATIONS, tenant_filter("
            "'default', 'ann'), with_payload=['message_id'])]\n"
            "print(len(ids), len(set(ids)))\n")
    counted = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path), cwd=REPO, capture_output=True,
                             text=True, timeout=300)
    assert counted.stdout.split() == ["640", "640"], counted.stderr[-2000:]


def test_a_json_nested_200000_deep_fails_alone(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    _chat(folder / "a.jsonl", 3, "sa")
    (folder / "b.json").write_text("[" * 200_000 + "]" * 200_000)
    _chat(folder / "c.jsonl", 3, "sc")
    out = subprocess.run([sys.executable, "-m", "engram.api.cli", "ingest", str(folder), "--user", "ann"],
                         env=_env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "RecursionError" not in out.stderr
    summary = " ".join(out.stdout.split())
    assert "2 done" in summary and "1 not media" in summary
    listed = subprocess.run([sys.executable, "-m", "engram.api.cli", "memories", "list", "--type", "episodic", "--user",
                             "ann"], env=_env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0 and "Message 1" in listed.stdout  # consolidation ran after the batch
