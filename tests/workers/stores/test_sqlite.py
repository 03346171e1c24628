"""``stores.sqlite.ThreadConnections``: a connection per thread kept open, a forked child's own, transactions that
commit, roll back and nest."""

from __future__ import annotations

import threading

import pytest

from engram.workers.stores.sqlite import ThreadConnections
from tests.conftest import run_forked


def _table(tmp_path) -> ThreadConnections:
    conns = ThreadConnections(tmp_path / "t.sqlite", pragmas=("PRAGMA journal_mode=WAL",))
    with conns.transaction() as db:
        db.execute("CREATE TABLE t (v INTEGER)")
    return conns


def _count(conns: ThreadConnections) -> int:
    return conns.connection().execute("SELECT count(*) FROM t").fetchone()[0]


def test_one_connection_per_thread_kept_between_calls(tmp_path):
    conns = _table(tmp_path)
    assert conns.connection() is conns.connection()
    seen = []
    worker = threading.Thread(target=lambda: seen.append(conns.connection()))
    worker.start()
    worker.join()
    assert seen[0] is not conns.connection()


def test_transactions_commit_roll_back_and_nest(tmp_path):
    conns = _table(tmp_path)
    with conns.transaction() as db:
        db.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(ValueError), conns.transaction() as inner:  # nested: a savepoint, undone alone
            inner.execute("INSERT INTO t VALUES (9)")
            raise ValueError("only this")
        with conns.transaction() as inner:
            inner.execute("INSERT INTO t VALUES (4)")
    assert sorted(v for (v,) in conns.connection().execute("SELECT v FROM t")) == [1, 4]
    with pytest.raises(RuntimeError), conns.transaction() as db:
        db.execute("INSERT INTO t VALUES (2)")
        raise RuntimeError("undo")
    assert _count(conns) == 2 and not conns.connection().in_transaction


def _child_writes(conns: ThreadConnections, parent_id: int) -> bool:
    db = conns.connection()
    with conns.transaction() as tx:
        tx.execute("INSERT INTO t VALUES (3)")
    return id(db) != parent_id


def test_a_forked_child_opens_its_own_connection(tmp_path):
    conns = _table(tmp_path)
    parent = conns.connection()
    assert run_forked(lambda: b"1" if _child_writes(conns, id(parent)) else b"0") == b"1"
    assert _count(conns) == 1  # the child's row, committed on its own connection, seen by the parent's
