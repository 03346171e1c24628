"""Several processes opening the same new SQLite files at once (two ``engram ingest`` on a fresh data dir): the
embedding cache and the ledger each switch their file to WAL, which needs its exclusive lock; SQLite answers some
of the racers "database is locked" at once, without waiting out the busy timeout. None may fail (issue 45's CI run
of 2026-11-30 failed once on this; before the fix, 5 of 120 opens in this race failed)."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from pathlib import Path

from engram.workers.models.embeddings import EmbeddingCache
from engram.workers.stores.ledger.sqlite_ledger import SqliteLedger

RACERS, ROUNDS = 6, 10


def _open_both(folder: str, barrier, results) -> None:
    barrier.wait()
    try:
        EmbeddingCache(Path(folder) / "embeddings.sqlite")
        SqliteLedger(Path(folder) / "ledger.sqlite")
        results.put("ok")
    except Exception as exc:  # reported to the test, which names it
        results.put(repr(exc))


def test_processes_opening_new_files_at_once_all_get_them_in_wal_mode(tmp_path):
    ctx = mp.get_context("fork")
    failures = []
    for n in range(ROUNDS):
        folder = tmp_path / str(n)
        folder.mkdir()
        barrier, results = ctx.Barrier(RACERS), ctx.Queue()
        procs = [ctx.Process(target=_open_both, args=(str(folder), barrier, results)) for _ in range(RACERS)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
        failures += [r for r in (results.get(timeout=10) for _ in procs) if r != "ok"]
        for name in ("embeddings.sqlite", "ledger.sqlite"):
            with sqlite3.connect(folder / name) as db:
                assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert not failures, failures
