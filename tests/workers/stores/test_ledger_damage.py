"""A damaged embedded store meets a command in one line, never a traceback, and a writer on it fails no file.

- The ledger (``ledger.sqlite``) with its header overwritten or cut to a third: ``engram status`` and ``engram
  export`` exit 3 with one line naming the file (``StoreCorrupt``, from SQLite's "file is not a database" and
  "database disk image is malformed"); in process, a page overwritten after the header is the same error from the
  first query that reads it.
- The ``observations`` shard damaged (its segment's ``segment.json`` not JSON) under ``engram ingest`` of two healthy
  notes: exit 3, one line naming the file, neither note marked ``failed`` in the ledger; once the shard is copied
  back, the next ``engram ingest`` stores both.

Each command is its own process (``python -m engram.api.cli``), as a user runs it.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from engram.schemas.errors import StoreCorrupt
from engram.workers.stores.ledger import SqliteLedger
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


def _shard_segment_json(data: Path) -> Path:
    segments = data / "vectors" / "observations" / "segments"
    return next(p / "segment.json" for p in sorted(segments.iterdir()) if (p / "segment.json").is_file())


@pytest.mark.slow
def test_ingest_on_a_damaged_shard_stops_in_one_line_and_fails_no_file(pristine, tmp_path):
    """Two healthy notes on a store whose observations shard is damaged: exit 3, one line naming the damaged file,
    no event ``failed``; with the shard copied back, the next ingest stores both (resumed)."""
    data = tmp_path / "data"
    copy_tree(pristine, data)
    shard = data / "vectors" / "observations"
    copy_tree(shard, tmp_path / "shard-backup")
    target = _shard_segment_json(data)
    target.write_text("{ not json")
    notes = _notes(tmp_path / "new", NEW_NOTES)

    line = _one_line(_engram(data, "ingest", str(notes)))
    assert str(target) in line, line
    with sqlite3.connect(data / "ledger.sqlite") as db:
        rows = db.execute("SELECT source_name, status, reason FROM events").fetchall()
    new = [r for r in rows if Path(r[0]).name in NEW_NOTES]
    assert new and all(status != "failed" for _, status, _ in new), rows

    shutil.rmtree(shard)
    copy_tree(tmp_path / "shard-backup", shard)
    out = _engram(data, "ingest", str(notes))
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    with sqlite3.connect(data / "ledger.sqlite") as db:
        done = {
            Path(name).name
            for (name,) in db.execute("SELECT source_name FROM events WHERE status='done'").fetchall()
            if name
        }
        failed = db.execute("SELECT COUNT(*) FROM events WHERE status='failed'").fetchone()[0]
    assert set(NEW_NOTES) <= done and failed == 0, (done, failed)
    hits = _engram(data, "search", "when is the budget review", "--json")
    assert hits.returncode == 0 and "Thursday" in hits.stdout, hits.stderr[-2000:]
