"""A damaged embedded store meets a command in one line, never a traceback, and a writer on it fails no file.

- The ledger (``ledger.sqlite``) with its header overwritten or cut to a third: ``engram status`` and ``engram
  export`` exit 3 with one line naming the file (``StoreCorrupt``, from SQLite's "file is not a database" and
  "database disk image is malformed"); in process, a page overwritten after the header is the same error from the
  first query that reads it.
- The ``observations`` shard damaged (its segment's ``segment.json`` not JSON) under ``engram ingest`` of two healthy
  notes: exit 3, one line naming the file, neither note marked ``failed`` in the ledger; once the shard is copied
  back, the next ``engram ingest`` stores both.

Reruns on the shard still damaged count no death (each stopped run gives its events back: ``Ledger.release``),
so a healthy file never ends "interrupted 4 times"; the rerun after the restore counts the resumed files done.
``engram status`` reads every page of the ledger (``PRAGMA quick_check``): damage its queries never read is named.

Each command is its own process (``python -m engram.api.cli``), as a user runs it.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from engram.schemas.errors import StoreCorrupt
from engram.schemas.events import EventStatus
from engram.workers.stores.ledger import RedisLedger, SqliteLedger
from tests.conftest import REPO
from tests.files import copy_tree
from tests.workers.stores.test_ledger import make_event

NOTES = {
    "garden.md": "# Garden plan\n\nThe tomatoes go along the south fence this year.\n",
    "trip.md": "# Lisbon trip\n\nFlight TP1353 leaves on the 14th of June at 07:40.\n",
}
NEW_NOTES = {
    "budget.md": "# Budget meeting\n\nThe quarterly budget review moved to Thursday.\n",
    "cat.md": "# The cat\n\nMiso eats at six and again at eight; no milk.\n",
}


def _engram(data: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(data.parent),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "ENGRAM_DATA_DIR": str(data),
        "ENGRAM_USER": "ann",
        "COLUMNS": "250",
    }
    return subprocess.run(
        [sys.executable, "-m", "engram.api.cli", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _notes(folder: Path, notes: dict[str, str]) -> Path:
    folder.mkdir()
    for name, text in notes.items():
        (folder / name).write_text(text)
    return folder


def _one_line(out: subprocess.CompletedProcess) -> str:
    """The only line of ``out``'s stderr, which must be an error (exit 3, no traceback)."""
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 3 and len(lines) == 1 and lines[0].startswith("error: "), (out.returncode, out.stderr)
    return lines[0]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A data dir holding two ingested notes (the ledger checkpointed at the clean exit)."""
    root = tmp_path_factory.mktemp("ledger-damage")
    data = root / "data"
    out = _engram(data, "ingest", str(_notes(root / "notes", NOTES)))
    assert out.returncode == 0, out.stderr[-3000:]
    return data


def _overwrite(path: Path, at: int = 0, size: int = 100) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"\xa5" * size)


DAMAGES = {
    "header overwritten": _overwrite,
    "cut to a third": lambda p: os.truncate(p, p.stat().st_size // 3),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_ledger_is_one_line_naming_it(pristine, tmp_path, damage):
    data = tmp_path / "data"
    copy_tree(pristine, data)
    ledger = data / "ledger.sqlite"
    assert (
        not ledger.with_name("ledger.sqlite-wal").exists() or ledger.with_name("ledger.sqlite-wal").stat().st_size == 0
    )
    DAMAGES[damage](ledger)
    for command in (["status"], ["export", "--user", "ann"]):
        line = _one_line(_engram(data, *command))
        assert str(ledger) in line and "damaged" in line, f"{damage}, {command}: {line}"


def test_a_page_damaged_after_the_header_is_named_by_the_query_that_reads_it(tmp_path):
    """In process: the ledger opens (its first page is sound), and the first query reading a damaged page raises
    StoreCorrupt naming the file, not sqlite3.DatabaseError."""
    path = tmp_path / "ledger.sqlite"
    ledger = SqliteLedger(path)
    for _ in range(300):  # several pages of events
        ledger.record_queued(make_event())
    del ledger
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = db.execute("PRAGMA page_size").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name='events'").fetchone()[0]
    db.close()
    _overwrite(path, at=(root - 1) * page, size=page)  # the events table's root page
    with pytest.raises(StoreCorrupt, match=str(path)):
        SqliteLedger(path).records(limit=1000)


def _root_page(path: Path, table: str) -> tuple[int, int]:
    """(offset, size) of ``table``'s root page in the ledger file ``path``."""
    db = sqlite3.connect(path)
    page = db.execute("PRAGMA page_size").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name=?", (table,)).fetchone()[0]
    db.close()
    return (root - 1) * page, page


@pytest.mark.slow
def test_status_names_damage_on_a_page_its_queries_never_read(pristine, tmp_path):
    """The ``user_content`` table's root page overwritten: the queries status makes (counts, records, reveals) never
    read it, so only its ``PRAGMA quick_check`` (``SqliteLedger.check``) finds it: exit 3, one line naming the file."""
    data = tmp_path / "data"
    copy_tree(pristine, data)
    ledger = data / "ledger.sqlite"
    at, size = _root_page(ledger, "user_content")
    _overwrite(ledger, at=at, size=size)
    opened = SqliteLedger(ledger)
    assert sum(opened.counts().values()) == len(NOTES)  # what status asks reads no damaged page
    with pytest.raises(StoreCorrupt, match=str(ledger)):
        opened.check()
    line = _one_line(_engram(data, "status"))
    assert str(ledger) in line and "damaged" in line, line


@pytest.fixture(params=["sqlite", "redis"])
def any_ledger(request, tmp_path):
    """A fresh ledger of each backend: SQLite under ``tmp_path``, a real Redis server under a fresh key prefix."""
    if request.param == "sqlite":
        return SqliteLedger(tmp_path / "ledger.sqlite")
    return RedisLedger(request.getfixturevalue("redis_server"), prefix=f"test-{uuid.uuid4().hex[:8]}:")


def test_a_released_event_is_taken_up_with_no_redelivery_counted(any_ledger):
    """A run the store stopped gives its unfinished events back: the next claim takes them up though no redelivery
    is allowed (max_redeliveries=0 fails a dead process's event at once; unreleased, SQLite leaves its own process's
    event alone); a final one is not released."""
    stopped, finished = make_event(content=b"stopped"), make_event(content=b"finished")
    for ev in (stopped, finished):
        any_ledger.record_queued(ev)
    any_ledger.mark(stopped.event_id, EventStatus.processing, stage="store")
    any_ledger.mark(finished.event_id, EventStatus.done)
    assert any_ledger.release([stopped.event_id, finished.event_id]) == 1
    events, given_up = any_ledger.claim_interrupted(max_redeliveries=0)  # SQLite: held by none now, not by me
    assert [e.event_id for e in events] == [stopped.event_id] and given_up == []
    assert any_ledger.get(finished.event_id).status is EventStatus.done


def _shard_segment_json(data: Path) -> Path:
    segments = data / "vectors" / "observations" / "segments"
    return next(p / "segment.json" for p in sorted(segments.iterdir()) if (p / "segment.json").is_file())


@pytest.mark.slow
def test_ingest_on_a_damaged_shard_stops_in_one_line_and_fails_no_file(pristine, tmp_path):
    """Two healthy notes on a store whose observations shard is damaged: exit 3, one line naming the damaged file,
    no event ``failed``, four times over (each stopped run gives its events back: no redelivery counted); with the shard
    copied back, the next ingest stores both (resumed), and its summary counts them done, not skipped."""
    data = tmp_path / "data"
    copy_tree(pristine, data)
    shard = data / "vectors" / "observations"
    copy_tree(shard, tmp_path / "shard-backup")
    target = _shard_segment_json(data)
    target.write_text("{ not json")
    notes = _notes(tmp_path / "new", NEW_NOTES)

    for _ in range(4):  # reruns on the store still damaged: no death counted, so no false "interrupted 4 times"
        line = _one_line(_engram(data, "ingest", str(notes)))
        assert str(target) in line, line
    with sqlite3.connect(data / "ledger.sqlite") as db:
        rows = db.execute("SELECT source_name, status, reason, redeliveries FROM events").fetchall()
    new = [r for r in rows if Path(r[0]).name in NEW_NOTES]
    assert new and all(status != "failed" and redeliveries == 0 for _, status, _, redeliveries in new), rows

    shutil.rmtree(shard)
    copy_tree(tmp_path / "shard-backup", shard)
    out = _engram(data, "ingest", str(notes))
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert out.stderr.count("resumed ") == len(NEW_NOTES), out.stderr
    summary = next(line for line in out.stdout.splitlines() if " done " in line)
    assert summary.startswith(f"{len(NEW_NOTES)} done") and "0 skipped, 0 failed" in summary, out.stdout
    with sqlite3.connect(data / "ledger.sqlite") as db:
        done = {
            Path(name).name
            for (name,) in db.execute("SELECT source_name FROM events WHERE status='done'").fetchall()
            if name
        }
        failed = db.execute("SELECT COUNT(*) FROM events WHERE status='failed'").fetchone()[0]
        redelivered = db.execute("SELECT COALESCE(SUM(redeliveries), 0) FROM events").fetchone()[0]
    assert set(NEW_NOTES) <= done and failed == 0 and redelivered == 0, (done, failed, redelivered)
    hits = _engram(data, "search", "when is the budget review", "--json")
    assert hits.returncode == 0 and "Thursday" in hits.stdout, hits.stderr[-2000:]
