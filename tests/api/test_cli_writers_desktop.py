"""``engram watch`` and ``engram capture`` beside ``engram ingest`` on one embedded data dir (issue 43), as real
processes: an ingest of a folder, a watcher fed files while it runs, and a capture of a test desktop (Xvfb, a window
whose text changes: tests/xdesktop.py), all at once. Every file is done once, no event fails or is "interrupted
earlier" while its process lives, nothing is redelivered, and the ledger and the store agree (the pattern of
``test_cli_writers``' two and four ingests)."""

from __future__ import annotations

import json
import queue
import re
import shutil
import signal
import subprocess
import threading
import time

import pytest

from tests.api.test_cli_writers import _OBSERVATIONS, _engram, _env, _files, _python, _query
from tests.conftest import REPO
from tests.xdesktop import Desktop, xvfb

#: A failure reported by a process (capture's progress line counts "0 failed": not one).
_FAILED = re.compile(r"(?<!\b0 )\bfailed\b")


def _lines(stream, out: queue.Queue) -> None:
    for line in stream:
        out.put(line)


@pytest.mark.slow
def test_watch_and_capture_beside_ingest_on_one_data_dir(tmp_path):
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb not installed (`bash scripts/setup.sh --dev` installs it)")
    folder, inbox = tmp_path / "in" / "a", tmp_path / "inbox"
    _files(folder, range(0, 8), pictures=range(0, 2))
    _files(tmp_path / "later", range(20, 26))  # dropped into the watched folder while the others run
    inbox.mkdir()
    with xvfb() as display:
        desk = Desktop(display)
        env = _env(tmp_path) | {"DISPLAY": display, "ENGRAM_DEVICE": "desk"}
        editor = desk.window("plan.txt - Editor", ("editor", "Editor"), "harbour crane schedule for Monday")

        def start(*args: str, merged: bool = False) -> subprocess.Popen:
            return subprocess.Popen(
                _engram(tmp_path, *args),
                env=env,
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                text=True,
            )

        watch = start("watch", str(inbox), "--settle", "0.5", merged=True)
        watched: queue.Queue = queue.Queue()
        threading.Thread(target=_lines, args=(watch.stdout, watched), daemon=True).start()
        seen: list[str] = []
        try:
            capture = start(
                "capture",
                "--json",
                "--duration",
                "30",
                "--interval",
                "1",
                "--max-interval",
                "1",
                "--batch",
                "2",
                "--flush-seconds",
                "5",
            )
            capture_errs: list[str] = []
            errs_reader = threading.Thread(target=lambda: capture_errs.extend(capture.stderr), daemon=True)
            errs_reader.start()
            deadline = time.monotonic() + 300
            while not any("capturing monitor" in line for line in capture_errs):  # its start-up is over
                assert capture.poll() is None and time.monotonic() < deadline, "".join(capture_errs)[-3000:]
                time.sleep(0.1)
            ingest = start("ingest", str(folder), "--user", "ann", "--no-consolidate")
            for n, path in enumerate(sorted((tmp_path / "later").iterdir())):  # 6 files over 18 s
                time.sleep(3)
                shutil.copy(path, inbox / path.name)
                if n % 2:
                    desk.draw(editor, f"harbour crane schedule revision {n} for Tuesday berth {n * 3}")
            ingested = ingest.communicate(timeout=900) + (ingest.returncode,)
            capture_out = capture.stdout.read()
            errs_reader.join(timeout=60)
            captured = (capture_out, "".join(capture_errs), capture.wait(timeout=60))
            deadline = time.monotonic() + 300
            while (
                sum("ingested " in line for line in seen) < 6 and time.monotonic() < deadline and watch.poll() is None
            ):
                try:
                    seen.append(watched.get(timeout=0.5))
                except queue.Empty:
                    pass
        finally:
            watch.send_signal(signal.SIGTERM)
            watch.wait(timeout=120)
        desk.close()
    while not watched.empty():
        seen.append(watched.get())
    watch_out = "".join(seen)
    assert sum("ingested " in line for line in seen) == 6, watch_out[-3000:]  # each file it was given, once
    for out, errs, code in (ingested, captured):
        assert code == 0 and not _FAILED.search(errs) and "interrupted earlier" not in errs, (out, errs[-3000:])
        assert "Traceback" not in errs, errs[-3000:]
    assert watch.returncode == 0, watch_out[-3000:]
    assert not _FAILED.search(watch_out), watch_out[-3000:]
    for bad in ("interrupted earlier", "Traceback"):
        assert bad not in watch_out, watch_out[-3000:]
    stats = json.loads(captured[0].strip().splitlines()[-1])
    assert stats["kept"] >= 2 and stats["published"] == stats["kept"] and stats["failed"] == 0, stats

    db = tmp_path / "data" / "ledger.sqlite"
    statuses = dict(_query(db, "SELECT status, COUNT(*) FROM events GROUP BY status"))
    skipped = _query(db, "SELECT source_name, reason FROM events WHERE status='skipped'")
    assert set(statuses) <= {"done", "skipped"}, (statuses, skipped)
    assert all("duplicate" in reason for _, reason in skipped), skipped
    by_device = dict(_query(db, "SELECT device_id, COUNT(*) FROM events GROUP BY device_id"))
    assert by_device == {"desk": 8 + 2 + 6 + stats["published"]}, by_device  # every file and frame: one event
    names = _query(
        db,
        "SELECT source_name, COUNT(*) FROM events WHERE source_name LIKE ? OR source_name LIKE ? GROUP BY source_name",
        (f"{folder}/%", f"{inbox}/%"),
    )
    assert len(names) == 8 + 2 + 6 and all(n == 1 for _, n in names), names  # each file once
    assert _query(db, "SELECT SUM(redeliveries) FROM events") == [(0,)]  # nobody died: nothing redelivered
    assert _query(db, "SELECT COUNT(*) FROM unfinished") == [(0,)]
    done = dict(
        _query(
            db,
            "SELECT e.event_id, COALESCE(SUM(s.observations), 0) FROM events e LEFT JOIN segments s "
            "ON s.event_id = e.event_id WHERE e.status='done' GROUP BY e.event_id",
        )
    )
    stored: dict[str, int] = {}
    for event_id, _ in json.loads(_python(tmp_path, _OBSERVATIONS)):  # every event's observations, once
        stored[event_id] = stored.get(event_id, 0) + 1
    assert stored == {e: n for e, n in done.items() if n}  # ledger and store agree
    assert all(n >= 1 for n in done.values())
    texts = " ".join(t for _, t in json.loads(_python(tmp_path, _OBSERVATIONS)))
    assert "harbour crane" in texts and "delivery number 23" in texts and "delivery number 5" in texts
