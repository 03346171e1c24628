"""SQLite connections kept open per thread and process (the ledger, the embedding cache).

Opening a connection per call cost ~1 ms each on the ingest path: the connect itself, and, when the last
connection to a WAL database closes, a checkpoint of its write-ahead log into the database file (SQLite's
documented behaviour). A chat ingest made ~60 such calls per 1,000 messages; an embedding call of a distributed
worker four. ``ThreadConnections`` opens one connection per (process, thread) on first use and keeps it: a
connection is never shared between threads (SQLite's default check), and a forked child (a prefork pool process)
opens its own instead of using its parent's.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

#: Seconds a writer waits for another process's write lock before ``sqlite3.OperationalError`` ("database is locked").
BUSY_TIMEOUT_S = 60


def _locked(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


def set_wal(db: sqlite3.Connection) -> None:
    """Put ``db``'s file in WAL journal mode (kept by the file: a no-op once set). The switch needs the file's
    exclusive lock, and when several processes open a new file at once (two ``engram ingest`` on a fresh data dir)
    SQLite answers some of them "database is locked" at once, without waiting out the busy timeout; so the switch
    is retried (tenacity: backoff from 10 ms to 0.5 s) for up to ``BUSY_TIMEOUT_S``, then raises
    ``sqlite3.OperationalError``."""
    for attempt in Retrying(
        retry=retry_if_exception(_locked),
        stop=stop_after_delay(BUSY_TIMEOUT_S),
        wait=wait_exponential(multiplier=0.01, max=0.5),
        reraise=True,
    ):
        with attempt:
            db.execute("PRAGMA journal_mode=WAL")


class ThreadConnections:
    """Connections to the SQLite file ``path``, one per thread of this process, opened in autocommit mode
    (``isolation_level=None``: transactions are ``transaction()``'s), each first running ``pragmas`` (statements
    such as ``"PRAGMA synchronous=NORMAL"``)."""

    def __init__(self, path: Path, pragmas: tuple[str, ...] = ()) -> None:
        self.path = Path(path)
        self.pragmas = pragmas
        self._local = threading.local()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
        for statement in self.pragmas:
            db.execute(statement)
        return db

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (opened now on first use in this process and thread)."""
        local = self._local
        if getattr(local, "pid", None) != os.getpid():  # first use, or a forked child holding its parent's
            local.db, local.pid = self._connect(), os.getpid()
        return local.db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``: the write lock taken at once, waiting up to
        ``BUSY_TIMEOUT_S``), committed when the block ends and rolled back when it raises. Inside another
        transaction of this thread it is a savepoint of that one (released, or rolled back to, alone)."""
        db = self.connection()
        nested = db.in_transaction
        db.execute("SAVEPOINT nested" if nested else "BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("RELEASE nested" if nested else "COMMIT")
        except BaseException:
            db.execute("ROLLBACK TO nested" if nested else "ROLLBACK")
            if nested:
                db.execute("RELEASE nested")  # the savepoint, rolled back to, is ended too
            raise
