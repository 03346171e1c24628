"""The SQLite ledger's owner processes (``workers.stores.owners``), with real processes killed by SIGKILL: an
unfinished event or a lock of a live process is never taken, one of a dead process is taken at once (and only then
counted as a redelivery); an old ledger is migrated by number; vault reveals are audited and counted."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
import uuid

from engram.schemas.events import EventStatus
from engram.workers.stores.ledger import MIGRATIONS, SqliteLedger
from engram.workers.stores.owners import is_alive, this_process
from tests.conftest import REPO
from tests.workers.stores.test_ledger import make_event

#: A child that opens the ledger at argv[1], records the event JSON of argv[2] (or takes lock argv[3]), says
#: "ready" and sleeps until it is killed.
_CHILD = """
import sys, time
from engram.schemas.events import MediaEvent
from engram.workers.stores.ledger import SqliteLedger
led = SqliteLedger(sys.argv[1])
if sys.argv[2] != "-":
    led.record_queued(MediaEvent.model_validate_json(sys.argv[2]))
    print("ready", flush=True)
    time.sleep(600)
with led.try_lock(sys.argv[3], 600) as got:
    print("ready" if got else "refused", flush=True)
    time.sleep(600)
"""


def _child(path, event_json: str = "-", lock: str = "-") -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), event_json, lock], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_a_live_processs_event_is_never_taken_and_a_dead_ones_at_once(tmp_path):
    ledger = SqliteLedger(tmp_path / "ledger.sqlite")
    theirs, mine = make_event(content=b"theirs"), make_event(content=b"mine")
    child = _child(ledger.path, theirs.model_dump_json())
    try:
        ledger.record_queued(mine)
        ledger.mark(theirs.event_id, EventStatus.processing, stage="perceive")  # as if it ran it
        assert ledger.claim_interrupted(max_redeliveries=3) == ([], [])  # its process lives; mine is mine
        assert ledger.claim_interrupted(max_redeliveries=3, event_ids=[theirs.event_id]) == ([], [])
    finally:
        _kill(child)
    events, given_up = ledger.claim_interrupted(max_redeliveries=3)
    assert [e.event_id for e in events] == [theirs.event_id] and given_up == []
    assert ledger.claim_interrupted(max_redeliveries=3) == ([], [])  # now this process's: not taken again
    events, _ = ledger.claim_interrupted(max_redeliveries=3, include_own=True)  # its caller has none in flight
    assert sorted(e.event_id for e in events) == sorted([theirs.event_id, mine.event_id])
    with sqlite3.connect(ledger.path) as db:  # one death, one redelivery; taking back one's own counts none
        rows = dict(db.execute("SELECT event_id, redeliveries FROM events").fetchall())
    assert rows == {str(theirs.event_id): 1, str(mine.event_id): 0}


def test_an_event_whose_process_died_too_often_fails_with_the_reason(tmp_path):
    ledger = SqliteLedger(tmp_path / "ledger.sqlite")
    ev = make_event()
    _kill(_child(ledger.path, ev.model_dump_json()))
    with sqlite3.connect(ledger.path) as db:
        db.execute("UPDATE events SET redeliveries=2 WHERE event_id=?", (str(ev.event_id),))
    assert ledger.claim_interrupted(max_redeliveries=2) == ([], [ev.event_id])
    rec = ledger.get(ev.event_id)
    assert rec.status is EventStatus.failed and rec.reason.startswith("interrupted 3 times")


def test_a_dead_holders_lock_is_taken_over_at_once(tmp_path):
    ledger = SqliteLedger(tmp_path / "ledger.sqlite")
    holder = _child(ledger.path, lock="consolidate:acme:ann")
    try:
        with ledger.try_lock("consolidate:acme:ann", 600) as got:
            assert not got  # a live holder keeps it
        with ledger.try_lock("consolidate:acme:bob", 600) as got:
            assert got  # another name is free
    finally:
        _kill(holder)
    started = time.monotonic()
    with ledger.try_lock("consolidate:acme:ann", 600) as got:
        assert got and time.monotonic() - started < 5  # at once, not after 600 s
        with ledger.try_lock("consolidate:acme:ann", 600) as again:
            assert not again  # held by this live process now
    with ledger.try_lock("consolidate:acme:ann", 600) as got:
        assert got  # released


def test_process_identity_tells_a_reused_pid_from_its_holder():
    me = this_process()
    assert is_alive(me.pid, me.started)
    assert not is_alive(me.pid, me.started - 3600)  # the same pid, started an hour before: another process
    assert not is_alive(None, None)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not is_alive(proc.pid, None)


def test_an_old_ledger_is_migrated_once_and_its_events_can_be_resumed(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with sqlite3.connect(path) as db:  # the first ledger: no redelivery, no owners, user_version 0
        db.execute(
            "CREATE TABLE events (event_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, user_id TEXT NOT NULL,"
            " device_id TEXT NOT NULL, kind TEXT NOT NULL, object_key TEXT NOT NULL, sha256 TEXT NOT NULL,"
            " source_name TEXT, status TEXT NOT NULL, stage TEXT, reason TEXT, segments_total INTEGER,"
            " created_at TEXT NOT NULL, updated_at TEXT NOT NULL)"
        )
        db.execute("CREATE TABLE locks (name TEXT PRIMARY KEY, token TEXT NOT NULL, expires REAL NOT NULL)")
        db.execute(
            "INSERT INTO events VALUES (?, 'acme', 'ann', 'pc', 'text', 'k', 's', 'a.md', 'queued', NULL,"
            " NULL, NULL, '2024-05-01T00:00:00+00:00', '2024-05-01T00:00:00+00:00')",
            (str(uuid.uuid4()),),
        )
        db.execute("INSERT INTO locks VALUES ('consolidate:acme:ann', 't', 9e99)")  # a lock of no known holder
    ledger = SqliteLedger(path)
    SqliteLedger(path)  # a second open finds it migrated
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        have = {row[1] for row in db.execute("PRAGMA table_info(events)")}
    assert {"event_json", "redeliveries", "owner_pid", "owner_started"} <= have
    _, given_up = ledger.claim_interrupted(max_redeliveries=3)  # no owner: gone; no event JSON: cannot run
    assert len(given_up) == 1 and "recorded before redelivery existed" in ledger.get(given_up[0]).reason
    with ledger.try_lock("consolidate:acme:ann", 600) as got:
        assert got  # a lock without an owner process is not held by anyone alive


def test_reveals_are_audited_and_counted_per_tenant(tmp_path):
    ledger = SqliteLedger(tmp_path / "ledger.sqlite")
    assert ledger.reveal_count("acme") == 0
    ledger.record_reveal("acme", "e1", "ann", 123)
    ledger.record_reveal("acme", "e2", "ann", 124)
    ledger.record_reveal("other", "e3", "bob", 125)
    assert (ledger.reveal_count("acme"), ledger.reveal_count("other")) == (2, 1)
    with sqlite3.connect(ledger.path) as db:
        row = db.execute("SELECT tenant_id, entry_id, os_user, pid, at FROM reveals ORDER BY rowid").fetchone()
    assert row[:4] == ("acme", "e1", "ann", 123) and row[4].startswith("20")


def test_reveals_are_counted_on_redis_too(redis_server):
    from engram.workers.stores.ledger import RedisLedger

    ledger = RedisLedger(redis_server, prefix=f"test-{uuid.uuid4().hex[:8]}:")
    ledger.record_reveal("acme", "e1", "ann", 123)
    assert (ledger.reveal_count("acme"), ledger.reveal_count("other")) == (1, 0)
    ((_, fields),) = ledger.r.xrange(f"{ledger.p}reveals:acme")
    assert fields["entry_id"] == "e1" and fields["os_user"] == "ann" and fields["pid"] == "123"


def test_running_names_the_unfinished_events_of_live_processes(tmp_path):
    ledger = SqliteLedger(tmp_path / "ledger.sqlite")
    theirs, done = make_event(content=b"theirs"), make_event(content=b"done")
    ledger.record_queued(done)
    ledger.mark(done.event_id, EventStatus.done)
    child = _child(ledger.path, theirs.model_dump_json())
    try:
        assert ledger.running([theirs.event_id, done.event_id, uuid.uuid4()]) == {theirs.event_id}
    finally:
        _kill(child)
    assert ledger.running([theirs.event_id]) == set()  # interrupted now
