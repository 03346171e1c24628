"""Several processes opening the same new SQLite files at once (two ``engram ingest`` on a fresh data dir): the
embedding cache and the ledger each switch their file to WAL, which needs its exclusive lock; SQLite answers some
of the racers "database is locked" at once, without waiting out the busy timeout. None may fail (issue 45's CI run
of 2026-11-30 failed once on this; before the fix, 5 of 120 opens in this race failed).

The racers are spawned, not forked: a fork of the test process, which holds other tests' threads (onnxruntime's
pool, servers' readers), can copy a lock held by one of them and hang forever, and multiprocessing then waits for
the hung child at interpreter exit (CI's run of 2026-11-30 timed out so). They are daemons, killed at the end."""

from __future__ import annotations

import multiprocessing as mp
import queue
import sqlite3
from pathlib import Path

RACERS, ROUNDS = 6, 10


def _open_both_in_each(folders: list[str], barrier, results) -> None:
    """One racer: for each folder in turn, wait for the others, then open the cache and the ledger there."""
    from engram.workers.models.embeddings import EmbeddingCache
    from engram.workers.stores.ledger.sqlite_ledger import SqliteLedger

    for folder in folders:
        barrier.wait(timeout=120)
        try:
            EmbeddingCache(Path(folder) / "embeddings.sqlite")
            SqliteLedger(Path(folder) / "ledger.sqlite")
            results.put("ok")
        except Exception as exc:  # reported to the test, which names it
            results.put(repr(exc))


def test_processes_opening_new_files_at_once_all_get_them_in_wal_mode(tmp_path):
    ctx = mp.get_context("spawn")
    folders = [tmp_path / str(n) for n in range(ROUNDS)]
    for folder in folders:
        folder.mkdir()
    barrier, results = ctx.Barrier(RACERS), ctx.Queue()
    args = ([str(f) for f in folders], barrier, results)
    procs = [ctx.Process(target=_open_both_in_each, args=args, daemon=True) for _ in range(RACERS)]
    try:
        for p in procs:
            p.start()
        outcomes = []
        for _ in range(RACERS * ROUNDS):
            try:
                outcomes.append(results.get(timeout=180))
            except queue.Empty:
                outcomes.append("no answer within 180 s")
                break
        for p in procs:
            p.join(timeout=30)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    failures = [o for o in outcomes if o != "ok"]
    assert not failures, failures
    assert len(outcomes) == RACERS * ROUNDS
    for folder in folders:
        for name in ("embeddings.sqlite", "ledger.sqlite"):
            with sqlite3.connect(folder / name) as db:
                assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
