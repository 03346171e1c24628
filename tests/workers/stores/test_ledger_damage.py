"""A damaged embedded store meets a command in one line, never a traceback, and a writer on it fails no file.

- The ledger (``ledger.sqlite``) with its header overwritten or cut to a third: ``engram status`` and ``engram
  export`` exit 3 with one line naming the file (``StoreCorrupt``, from SQLite's "file is not a database" and
  "database disk image is malformed"); in process, a page overwritten after the header is the same error from the
  first query that reads it.

Each command is its own process (``python -m engram.api.cli``), as a user runs it.
"""

from __future__ import annotations

import os
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
