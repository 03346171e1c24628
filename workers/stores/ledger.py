"""The event ledger: the status of every event (queued, processing, done, skipped, failed + stage + reason).

One interface (``Ledger``); SQLite under ``ENGRAM_DATA_DIR`` in the embedded default. The ledger also
keeps the small shared state that ingest needs across processes: which content hash a tenant already
has (exact duplicates) and the last kept frame of each device stream (near-duplicates). Failed events
stay in the ledger with their reason and object key: that is the quarantine.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import structlog

from engram.schemas.events import EventStatus, LedgerRecord, MediaEvent
from engram.workers.metrics import EVENTS_RECEIVED, count_finished
from engram.workers.stores.owners import is_alive, this_process
from engram.workers.stores.sqlite import ThreadConnections

log = structlog.get_logger(__name__)

FINAL_STATUSES = (EventStatus.done, EventStatus.skipped, EventStatus.failed)


class Ledger(Protocol):
    """Event status and ingest's shared state. Every method is atomic and safe across processes."""

    def record_queued(self, event: MediaEvent) -> None:
        """Add ``event`` as queued (no-op if it is already known)."""

    def get(self, event_id: uuid.UUID) -> LedgerRecord | None:
        """The event's record, or None."""

    def mark(self, event_id: uuid.UUID, status: EventStatus, stage: str | None = None,
             reason: str | None = None) -> None:
        """Set the status (a final status is not overwritten by ``processing`` or ``queued``)."""

    def claim_content(self, tenant_id: str, user_id: str, sha256: str, event_id: uuid.UUID) -> uuid.UUID | None:
        """Register ``event_id`` as the holder of this content for this user; return the earlier holder if the
        user already has the content in an event that did not fail (then this event is an exact duplicate). The
        object is stored once per tenant; each user who publishes it gets their own observations."""

    def swap_frame(self, tenant_id: str, device_id: str, phash: str, event_id: uuid.UUID,
                   is_near_duplicate) -> uuid.UUID | None:
        """Compare ``phash`` with the device's last kept frame using ``is_near_duplicate(prev, new)``;
        return that frame's event id if it is a near-duplicate, else make this frame the last kept one."""

    def expect_segments(self, event_id: uuid.UUID, total: int) -> None:
        """Declare how many segments the event was cut into; with 0 the event is done at once."""

    def segment_done(self, event_id: uuid.UUID, segment_index: int, observations: int) -> bool:
        """Record a stored segment (idempotent); mark the event done and return True when all are."""

    def segments_done(self, segments: list[tuple[uuid.UUID, int, int]]) -> list[bool]:
        """``segment_done`` of each (event id, segment index, observations), in order, together: one transaction
        (SQLite: one commit, not one per segment) or one pipeline (Redis). Returns, for each, whether it finished
        its event."""

    def counts(self, tenant_id: str | None = None) -> dict[EventStatus, int]:
        """Number of events per status."""

    def try_lock(self, name: str, ttl_s: float) -> AbstractContextManager[bool]:
        """A lock shared by every process, held at most ``ttl_s`` seconds, and tied to a live holder: on SQLite a
        lock whose holder process is gone is taken over at once; on Redis it is a lease its holder renews while the
        block runs (``LockLease``), so a dead holder's lock lapses within ``LOCK_LEASE_S``. Yields True when
        acquired, False (without waiting) when someone else holds it."""

    def records(self, tenant_id: str | None = None, status: EventStatus | None = None,
                limit: int = 100) -> list[LedgerRecord]:
        """Recent records, newest first."""

    def done_segments(self, event_id: uuid.UUID) -> set[int]:
        """Indexes of the event's segments already stored."""

    def user_events(self, tenant_id: str, user_id: str) -> list[LedgerRecord]:
        """Every event of one user of a tenant, any status, oldest first."""

    def forget_events(self, tenant_id: str, event_ids: list[uuid.UUID]) -> int:
        """Delete the tenant's records of these events and what is kept about them (segments, the content
        hashes and last kept frames they hold), as forgetting a user needs; returns the records deleted."""

    def object_references(self, tenant_id: str, object_key: str) -> int:
        """How many of the tenant's events (any status) reference ``object_key``."""

    def begin_work(self, event_id: uuid.UUID, work: str) -> int:
        """Count one start of ``work`` on the event (e.g. ``perceive:0``, a segment's perception) and return how
        many of its starts have not ended (``end_work``), this one included: more than one means a process died
        running it before (killed, crashed in a decoder or a model, out of memory)."""

    def end_work(self, event_id: uuid.UUID, work: str) -> None:
        """``work`` ended in this process, however it ended: its start no longer counts (``begin_work``)."""

    def claim_stalled(self, older_than_s: float, max_redeliveries: int,
                      limit: int = 500) -> tuple[list[MediaEvent], list[uuid.UUID]]:
        """Events queued or processing without progress for ``older_than_s`` seconds (their task was lost:
        acknowledged while the broker restarted, or a chain's next publish failed). Each is claimed for
        one redelivery (its progress time is reset, so the next sweep leaves it alone for another
        ``older_than_s``); one already redelivered ``max_redeliveries`` times is marked failed instead.
        Returns (events to publish again, event ids given up)."""

    def claim_interrupted(self, max_redeliveries: int, event_ids: list[uuid.UUID] | None = None,
                          include_own: bool = False, limit: int = 500) -> tuple[list[MediaEvent], list[uuid.UUID]]:
        """Embedded default: events queued or processing whose owner process is gone (``owners.is_alive``: killed,
        crashed; an event of a process that still lives, running it or waiting for the store, is never taken), or
        held by this process too with ``include_own`` (its caller has none of its own in flight). Each is claimed
        for this process (its owner from now on), a dead owner's counting one redelivery; one already redelivered
        ``max_redeliveries`` times is marked failed instead. ``event_ids``: only these events. Returns (events to
        run again, event ids given up)."""

    def retry(self, event_id: uuid.UUID) -> MediaEvent | None:
        """A user's retry of a failed event: it is queued again (stage, reason and redeliveries cleared; the
        segments already stored stay done) and its event returned, to publish or run again. None, changing
        nothing, when the event is unknown, not failed, or was recorded without its event."""

    def running(self, event_ids: list[uuid.UUID]) -> set[uuid.UUID]:
        """Of ``event_ids``, the unfinished ones whose owner process still lives (in progress, not interrupted; on
        SQLite: ``owners.is_alive``; the Redis ledger keeps no owner: none)."""

    def record_reveal(self, tenant_id: str, entry_id: str, os_user: str, pid: int) -> None:
        """Audit one reveal of a vault entry: who (the OS user and pid), when (now) and which entry; never the
        secret."""

    def reveal_count(self, tenant_id: str) -> int:
        """How many reveals of the tenant's vault entries were audited (``record_reveal``)."""


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _stalled_reason(stage: str | None, older_than_s: float, redeliveries: int) -> str:
    return (f"stalled: no progress for {older_than_s:.0f} s after {redeliveries} redeliveries"
            + (f" (last stage {stage})" if stage else ""))


#: Seconds the Redis ledger keeps an event's count of unfinished work after its last start (``begin_work``).
UNFINISHED_TTL_S = 7 * 24 * 3600

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
  event_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, user_id TEXT NOT NULL, device_id TEXT NOT NULL,
  kind TEXT NOT NULL, object_key TEXT NOT NULL, sha256 TEXT NOT NULL, source_name TEXT,
  status TEXT NOT NULL, stage TEXT, reason TEXT, segments_total INTEGER,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL, event_json TEXT, redeliveries INTEGER NOT NULL DEFAULT 0,
  owner_pid INTEGER, owner_started REAL);
CREATE INDEX IF NOT EXISTS events_tenant_status ON events(tenant_id, status);
CREATE INDEX IF NOT EXISTS events_status_updated ON events(status, updated_at);
CREATE TABLE IF NOT EXISTS segments (
  event_id TEXT NOT NULL, segment_index INTEGER NOT NULL, observations INTEGER NOT NULL,
  PRIMARY KEY (event_id, segment_index));
CREATE TABLE IF NOT EXISTS user_content (
  tenant_id TEXT NOT NULL, user_id TEXT NOT NULL, sha256 TEXT NOT NULL, event_id TEXT NOT NULL,
  PRIMARY KEY (tenant_id, user_id, sha256));
CREATE TABLE IF NOT EXISTS locks (name TEXT PRIMARY KEY, token TEXT NOT NULL, expires REAL NOT NULL,
  owner_pid INTEGER, owner_started REAL);
CREATE TABLE IF NOT EXISTS unfinished (
  event_id TEXT NOT NULL, work TEXT NOT NULL, starts INTEGER NOT NULL, PRIMARY KEY (event_id, work));
CREATE TABLE IF NOT EXISTS frames (
  tenant_id TEXT NOT NULL, device_id TEXT NOT NULL, phash TEXT NOT NULL, event_id TEXT NOT NULL,
  PRIMARY KEY (tenant_id, device_id));
CREATE TABLE IF NOT EXISTS reveals (
  tenant_id TEXT NOT NULL, entry_id TEXT NOT NULL, os_user TEXT NOT NULL, pid INTEGER NOT NULL, at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS reveals_tenant ON reveals(tenant_id);
"""

#: The ledger's numbered migrations (``PRAGMA user_version`` counts those a file has had): each adds columns
#: (table, column, declaration) that a ledger written by an earlier engram lacks; the tables it lacks are made by
#: ``_SCHEMA``. 1: redelivery (the event itself and its count); 2: the owner process of each event and lock
#: (``workers.stores.owners``).
_MIGRATIONS: tuple[tuple[tuple[str, str, str], ...], ...] = (
    (("events", "event_json", "TEXT"), ("events", "redeliveries", "INTEGER NOT NULL DEFAULT 0")),
    (("events", "owner_pid", "INTEGER"), ("events", "owner_started", "REAL"),
     ("locks", "owner_pid", "INTEGER"), ("locks", "owner_started", "REAL")),
)


def migrate(db: sqlite3.Connection) -> int:
    """Bring the ledger open on ``db`` (autocommit) to the current schema: the migrations it has not had, then the
    tables and indexes it lacks, in one write transaction (two processes opening an old ledger at once migrate it
    once). Returns how many migrations ran."""
    db.execute("BEGIN IMMEDIATE")
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        ran = 0
        for migration in _MIGRATIONS[version:]:
            for table, column, decl in migration:
                have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}  # fixed table names
                if have and column not in have:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
            ran += 1
        for statement in filter(str.strip, _SCHEMA.split(";")):
            db.execute(statement)
        db.execute(f"PRAGMA user_version={len(_MIGRATIONS)}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return ran


class SqliteLedger:
    """The ledger in one SQLite file (WAL mode), through a connection per thread and process kept open
    (``stores.sqlite.ThreadConnections``), so any thread or process may use it. Each unfinished event and each lock
    names its owner process (``workers.stores.owners``): several engram processes share one data dir, and one takes
    over another's event or lock only once that process is gone."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = ThreadConnections(self.path)
        db = self._db.connection()
        db.execute("PRAGMA journal_mode=WAL")
        migrate(db)

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._db.transaction()

    def record_queued(self, event: MediaEvent) -> None:
        now = _now()
        with self._tx() as db:
            me = this_process()
            created = db.execute(
                "INSERT OR IGNORE INTO events (event_id, tenant_id, user_id, device_id, kind, object_key, sha256,"
                " source_name, status, created_at, updated_at, event_json, owner_pid, owner_started)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (str(event.event_id), event.tenant_id, event.user_id, event.device_id, event.kind.value,
                 event.object_key, event.sha256, event.source_name, EventStatus.queued.value, now, now,
                 event.model_dump_json(), me.pid, me.started)).rowcount
        if created:
            EVENTS_RECEIVED.labels(kind=event.kind.value).inc()

    def _row(self, db: sqlite3.Connection, event_id: str) -> LedgerRecord | None:
        row = db.execute(
            "SELECT e.event_id, tenant_id, user_id, device_id, kind, object_key, sha256, source_name, status,"
            " stage, reason, segments_total, created_at, updated_at, COUNT(s.segment_index),"
            " COALESCE(SUM(s.observations),0)"
            " FROM events e LEFT JOIN segments s ON s.event_id = e.event_id WHERE e.event_id = ?"
            " GROUP BY e.event_id", (event_id,)).fetchone()
        return self._record(row) if row else None

    @staticmethod
    def _record(row: tuple) -> LedgerRecord:
        (event_id, tenant, user, device, kind, key, sha, name, status, stage, reason, total, created, updated,
         done, obs) = row
        return LedgerRecord(event_id=uuid.UUID(event_id), tenant_id=tenant, user_id=user, device_id=device,
                            kind=kind, object_key=key, sha256=sha, source_name=name, status=status,
                            stage=stage, reason=reason, segments_total=total, segments_done=done,
                            observations=obs, created_at=datetime.fromisoformat(created),
                            updated_at=datetime.fromisoformat(updated))

    def get(self, event_id: uuid.UUID) -> LedgerRecord | None:
        with self._tx() as db:
            return self._row(db, str(event_id))

    def mark(self, event_id: uuid.UUID, status: EventStatus, stage: str | None = None,
             reason: str | None = None) -> None:
        with self._tx() as db:
            row = db.execute("SELECT status, kind FROM events WHERE event_id=?", (str(event_id),)).fetchone()
            if row is None:
                raise KeyError(f"unknown event {event_id}")
            if row[0] in FINAL_STATUSES and status not in FINAL_STATUSES:
                return
            db.execute("UPDATE events SET status=?, stage=?, reason=?, updated_at=? WHERE event_id=?",
                       (status.value, stage, reason, _now(), str(event_id)))
        if status in FINAL_STATUSES and row[0] not in FINAL_STATUSES:
            count_finished(row[1], status.value, stage, reason)

    def claim_content(self, tenant_id: str, user_id: str, sha256: str, event_id: uuid.UUID) -> uuid.UUID | None:
        with self._tx() as db:
            row = db.execute(
                "SELECT c.event_id, e.status FROM user_content c LEFT JOIN events e ON e.event_id = c.event_id"
                " WHERE c.tenant_id=? AND c.user_id=? AND c.sha256=?", (tenant_id, user_id, sha256)).fetchone()
            if row and row[0] != str(event_id) and row[1] not in (None, EventStatus.failed.value):
                return uuid.UUID(row[0])
            db.execute("INSERT OR REPLACE INTO user_content (tenant_id, user_id, sha256, event_id) VALUES (?,?,?,?)",
                       (tenant_id, user_id, sha256, str(event_id)))
            return None

    def swap_frame(self, tenant_id: str, device_id: str, phash: str, event_id: uuid.UUID,
                   is_near_duplicate) -> uuid.UUID | None:
        with self._tx() as db:
            row = db.execute("SELECT phash, event_id FROM frames WHERE tenant_id=? AND device_id=?",
                             (tenant_id, device_id)).fetchone()
            if row and row[1] != str(event_id) and is_near_duplicate(row[0], phash):
                return uuid.UUID(row[1])
            db.execute("INSERT OR REPLACE INTO frames (tenant_id, device_id, phash, event_id) VALUES (?,?,?,?)",
                       (tenant_id, device_id, phash, str(event_id)))
            return None

    def expect_segments(self, event_id: uuid.UUID, total: int) -> None:
        with self._tx() as db:
            db.execute("UPDATE events SET segments_total=?, updated_at=? WHERE event_id=?",
                       (total, _now(), str(event_id)))
            finished = total == 0 and db.execute(
                "UPDATE events SET status=?, stage=NULL, reason=? WHERE event_id=? AND status NOT IN (?,?,?)",
                (EventStatus.done.value, "no content to store", str(event_id),
                 *(s.value for s in FINAL_STATUSES))).rowcount == 1
            kind = db.execute("SELECT kind FROM events WHERE event_id=?", (str(event_id),)).fetchone()
        if finished:
            count_finished(kind[0], EventStatus.done.value, None, "no content to store")

    def segment_done(self, event_id: uuid.UUID, segment_index: int, observations: int) -> bool:
        return self.segments_done([(event_id, segment_index, observations)])[0]

    def segments_done(self, segments: list[tuple[uuid.UUID, int, int]]) -> list[bool]:
        kinds: list[str | None] = []  # the kind of each event finished here, None for the others
        with self._tx() as db:
            for event_id, segment_index, observations in segments:
                db.execute("INSERT OR REPLACE INTO segments (event_id, segment_index, observations) VALUES (?,?,?)",
                           (str(event_id), segment_index, observations))
                db.execute("UPDATE events SET updated_at=? WHERE event_id=?", (_now(), str(event_id)))  # progress
                row = db.execute("SELECT segments_total, status, kind FROM events WHERE event_id=?",
                                 (str(event_id),)).fetchone()
                if row is None:
                    raise KeyError(f"unknown event {event_id}")
                total, status, kind = row
                done = db.execute("SELECT COUNT(*) FROM segments WHERE event_id=?", (str(event_id),)).fetchone()[0]
                finished = total is not None and done >= total and status not in FINAL_STATUSES
                if finished:
                    db.execute("UPDATE events SET status=?, stage=NULL, reason=NULL, updated_at=? WHERE event_id=?",
                               (EventStatus.done.value, _now(), str(event_id)))
                kinds.append(kind if finished else None)
        for kind in kinds:  # counted once committed
            if kind is not None:
                count_finished(kind, EventStatus.done.value, None, None)
        return [kind is not None for kind in kinds]

    def counts(self, tenant_id: str | None = None) -> dict[EventStatus, int]:
        with self._tx() as db:
            q = "SELECT status, COUNT(*) FROM events" + (" WHERE tenant_id=?" if tenant_id else "")
            rows = db.execute(q + " GROUP BY status", (tenant_id,) if tenant_id else ()).fetchall()
        return {EventStatus(s): n for s, n in rows}

    @contextmanager
    def try_lock(self, name: str, ttl_s: float) -> Iterator[bool]:
        token, me = uuid.uuid4().hex, this_process()
        with self._tx() as db:
            held = db.execute("SELECT expires, owner_pid, owner_started FROM locks WHERE name=?", (name,)).fetchone()
            if held and (held[0] < time.time() or not is_alive(held[1], held[2])):  # expired, or its holder gone
                if held[0] >= time.time():
                    log.warning("lock taken over from a process that is gone", lock=name, pid=held[1])
                db.execute("DELETE FROM locks WHERE name=?", (name,))
            got = db.execute("INSERT OR IGNORE INTO locks (name, token, expires, owner_pid, owner_started)"
                             " VALUES (?,?,?,?,?)", (name, token, time.time() + ttl_s, me.pid,
                                                     me.started)).rowcount == 1
        try:
            yield got
        finally:
            if got:
                with self._tx() as db:
                    db.execute("DELETE FROM locks WHERE name=? AND token=?", (name, token))

    def records(self, tenant_id: str | None = None, status: EventStatus | None = None,
                limit: int = 100) -> list[LedgerRecord]:
        where, args = [], []
        if tenant_id:
            where.append("tenant_id=?")
            args.append(tenant_id)
        if status:
            where.append("status=?")
            args.append(status.value)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        with self._tx() as db:
            ids = db.execute(f"SELECT event_id FROM events{clause} ORDER BY updated_at DESC LIMIT ?",
                             (*args, limit)).fetchall()
            return [r for (i,) in ids if (r := self._row(db, i))]

    def done_segments(self, event_id: uuid.UUID) -> set[int]:
        with self._tx() as db:
            rows = db.execute("SELECT segment_index FROM segments WHERE event_id=?", (str(event_id),))
            return {i for (i,) in rows}

    def user_events(self, tenant_id: str, user_id: str) -> list[LedgerRecord]:
        with self._tx() as db:
            ids = db.execute("SELECT event_id FROM events WHERE tenant_id=? AND user_id=? ORDER BY created_at",
                             (tenant_id, user_id)).fetchall()
            return [r for (i,) in ids if (r := self._row(db, i))]

    def forget_events(self, tenant_id: str, event_ids: list[uuid.UUID]) -> int:
        deleted = 0
        with self._tx() as db:
            for eid in map(str, event_ids):
                n = db.execute("DELETE FROM events WHERE event_id=? AND tenant_id=?", (eid, tenant_id)).rowcount
                if n:
                    for table in ("segments", "user_content", "frames", "unfinished"):
                        db.execute(f"DELETE FROM {table} WHERE event_id=?", (eid,))  # fixed table names
                deleted += n
        return deleted

    def object_references(self, tenant_id: str, object_key: str) -> int:
        with self._tx() as db:
            return db.execute("SELECT COUNT(*) FROM events WHERE tenant_id=? AND object_key=?",
                              (tenant_id, object_key)).fetchone()[0]

    def begin_work(self, event_id: uuid.UUID, work: str) -> int:
        with self._tx() as db:
            return db.execute("INSERT INTO unfinished (event_id, work, starts) VALUES (?,?,1) ON CONFLICT"
                              " (event_id, work) DO UPDATE SET starts=starts+1 RETURNING starts",
                              (str(event_id), work)).fetchone()[0]

    def end_work(self, event_id: uuid.UUID, work: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM unfinished WHERE event_id=? AND work=? AND starts<=1", (str(event_id), work))
            db.execute("UPDATE unfinished SET starts=starts-1 WHERE event_id=? AND work=?", (str(event_id), work))

    def claim_stalled(self, older_than_s: float, max_redeliveries: int,
                      limit: int = 500) -> tuple[list[MediaEvent], list[uuid.UUID]]:
        cutoff = datetime.fromtimestamp(time.time() - older_than_s, UTC).isoformat()
        republish, given_up, failed = [], [], []
        with self._tx() as db:
            rows = db.execute(
                "SELECT event_id, event_json, redeliveries, stage, kind FROM events WHERE status IN (?,?)"
                " AND updated_at < ? ORDER BY updated_at LIMIT ?",
                (EventStatus.queued.value, EventStatus.processing.value, cutoff, limit)).fetchall()
            for event_id, event_json, redeliveries, stage, kind in rows:
                if event_json is None or redeliveries >= max_redeliveries:
                    reason = (_stalled_reason(stage, older_than_s, redeliveries) if event_json
                              else "stalled, and recorded before redelivery existed: publish it again")
                    failed.append(self._give_up(db, event_id, kind, stage, reason))
                    given_up.append(uuid.UUID(event_id))
                else:
                    db.execute("UPDATE events SET redeliveries=redeliveries+1, updated_at=? WHERE event_id=?",
                               (_now(), event_id))
                    republish.append(MediaEvent.model_validate_json(event_json))
        for kind, stage, reason in failed:
            count_finished(kind, EventStatus.failed.value, stage, reason)
        return republish, given_up

    @staticmethod
    def _give_up(db: sqlite3.Connection, event_id: str, kind: str, stage: str | None,
                 reason: str) -> tuple[str, str, str]:
        """Mark the event failed at ``stage`` (default ``ingest``) with ``reason``, inside ``db``'s transaction;
        returns the arguments of ``metrics.count_finished``, to count once it commits."""
        db.execute("UPDATE events SET status=?, stage=?, reason=?, updated_at=? WHERE event_id=?",
                   (EventStatus.failed.value, stage or "ingest", reason, _now(), event_id))
        return kind, stage or "ingest", reason

    def claim_interrupted(self, max_redeliveries: int, event_ids: list[uuid.UUID] | None = None,
                          include_own: bool = False, limit: int = 500) -> tuple[list[MediaEvent], list[uuid.UUID]]:
        if event_ids is not None and not event_ids:
            return [], []
        me, republish, given_up, failed = this_process(), [], [], []
        only = f" AND event_id IN ({','.join('?' * len(event_ids))})" if event_ids is not None else ""
        with self._tx() as db:
            rows = db.execute(
                "SELECT event_id, event_json, redeliveries, stage, kind, owner_pid, owner_started FROM events"
                f" WHERE status IN (?,?){only} ORDER BY updated_at LIMIT ?",
                (EventStatus.queued.value, EventStatus.processing.value, *map(str, event_ids or []),
                 limit)).fetchall()
            for event_id, event_json, redeliveries, stage, kind, pid, started in rows:
                own = pid == me.pid and started == me.started
                if (own and not include_own) or (not own and is_alive(pid, started)):
                    continue  # its process lives: running it, or about to
                if event_json is None or (not own and redeliveries >= max_redeliveries):
                    reason = (f"interrupted {redeliveries + 1} times: the process running it was gone each time"
                              + (f" (last stage {stage})" if stage else "") if event_json else
                              "interrupted, and recorded before redelivery existed: ingest it again")
                    failed.append(self._give_up(db, event_id, kind, stage, reason))
                    given_up.append(uuid.UUID(event_id))
                    continue
                db.execute("UPDATE events SET redeliveries=redeliveries+?, owner_pid=?, owner_started=?, updated_at=?"
                           " WHERE event_id=?", (int(not own), me.pid, me.started, _now(), event_id))
                republish.append(MediaEvent.model_validate_json(event_json))
        for kind, stage, reason in failed:
            count_finished(kind, EventStatus.failed.value, stage, reason)
        return republish, given_up

    def retry(self, event_id: uuid.UUID) -> MediaEvent | None:
        me = this_process()
        with self._tx() as db:
            row = db.execute("SELECT event_json FROM events WHERE event_id=? AND status=?",
                             (str(event_id), EventStatus.failed.value)).fetchone()
            if row is None or row[0] is None:
                return None
            db.execute("UPDATE events SET status=?, stage=NULL, reason=NULL, redeliveries=0, owner_pid=?,"
                       " owner_started=?, updated_at=? WHERE event_id=?",
                       (EventStatus.queued.value, me.pid, me.started, _now(), str(event_id)))
        return MediaEvent.model_validate_json(row[0])

    def running(self, event_ids: list[uuid.UUID]) -> set[uuid.UUID]:
        with self._tx() as db:
            rows = [db.execute("SELECT owner_pid, owner_started FROM events WHERE event_id=? AND status IN (?,?)",
                               (str(e), EventStatus.queued.value, EventStatus.processing.value)).fetchone()
                    for e in event_ids]
        return {e for e, row in zip(event_ids, rows, strict=True) if row and is_alive(*row)}

    def record_reveal(self, tenant_id: str, entry_id: str, os_user: str, pid: int) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO reveals (tenant_id, entry_id, os_user, pid, at) VALUES (?,?,?,?,?)",
                       (tenant_id, entry_id, os_user, pid, _now()))

    def reveal_count(self, tenant_id: str) -> int:
        with self._tx() as db:
            return db.execute("SELECT COUNT(*) FROM reveals WHERE tenant_id=?", (tenant_id,)).fetchone()[0]


#: Lua shared by the Redis ledger's scripts: ``set_status`` moves an event (its hash at ``key``) to ``status`` as
#: ``RedisLedger._set_status`` does inside a transaction; ``is_final`` tells the final statuses.
_LUA_COMMON = """
local function is_final(s) return {} end
local function set_status(key, prefix, tenant, eid, old, status, stage, reason, now_iso, now_ts)
  redis.call('HSET', key, 'status', status, 'stage', stage, 'reason', reason, 'updated_at', now_iso)
  if old and old ~= status then redis.call('ZREM', prefix .. 'tenant:' .. tenant .. ':status:' .. old, eid) end
  redis.call('ZADD', prefix .. 'tenant:' .. tenant .. ':status:' .. status, now_ts, eid)
  redis.call('ZADD', prefix .. 'tenant:' .. tenant .. ':events', now_ts, eid)
end
""".format(" or ".join(f"s == '{st.value}'" for st in FINAL_STATUSES))

# The event scripts return {-1} for an unknown event, {1, kind} when the event entered a final status, else {0}.
#: ``mark``: KEYS the event's hash; ARGV prefix, status, stage, reason, now (ISO 8601), now (epoch seconds).
_LUA_MARK = _LUA_COMMON + """
local rec = redis.call('HMGET', KEYS[1], 'status', 'tenant_id', 'event_id', 'kind')
if not rec[1] then return {-1} end
if is_final(rec[1]) and not is_final(ARGV[2]) then return {0} end
set_status(KEYS[1], ARGV[1], rec[2], rec[3], rec[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
if is_final(ARGV[2]) and not is_final(rec[1]) then return {1, rec[4]} end
return {0}
"""
#: ``expect_segments``: KEYS the event's hash and its segments; ARGV prefix, total, reason when done now, now
#: (ISO 8601), now (epoch seconds).
_LUA_EXPECT_SEGMENTS = _LUA_COMMON + """
local rec = redis.call('HMGET', KEYS[1], 'status', 'tenant_id', 'event_id', 'kind')
if not rec[1] then return {-1} end
redis.call('HSET', KEYS[1], 'segments_total', ARGV[2])
if not is_final(rec[1]) and redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[2]) then
  set_status(KEYS[1], ARGV[1], rec[2], rec[3], rec[1], 'done', '', ARGV[3], ARGV[4], ARGV[5])
  return {1, rec[4]}
end
return {0}
"""
#: ``segment_done``: KEYS the event's hash and its segments; ARGV prefix, segment index, observations, now
#: (ISO 8601), now (epoch seconds). An event not final yet gets a new progress time (``_touch``).
_LUA_SEGMENT_DONE = _LUA_COMMON + """
local rec = redis.call('HMGET', KEYS[1], 'status', 'tenant_id', 'event_id', 'kind', 'segments_total')
if not rec[1] then return {-1} end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
if is_final(rec[1]) then return {0} end
if rec[5] and rec[5] ~= '' and redis.call('HLEN', KEYS[2]) >= tonumber(rec[5]) then
  set_status(KEYS[1], ARGV[1], rec[2], rec[3], rec[1], 'done', '', '', ARGV[4], ARGV[5])
  return {1, rec[4]}
end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[4])
redis.call('ZADD', ARGV[1] .. 'tenant:' .. rec[2] .. ':status:' .. rec[1], ARGV[5], rec[3])
redis.call('ZADD', ARGV[1] .. 'tenant:' .. rec[2] .. ':events', ARGV[5], rec[3])
return {0}
"""
#: ``claim_content``: KEYS the content key; ARGV prefix, event id. Returns the event holding the content (not
#: failed), or nil when this event now holds it.
_LUA_CLAIM_CONTENT = f"""
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[2] then
  local status = redis.call('HGET', ARGV[1] .. 'event:' .. holder, 'status')
  if status and status ~= '{EventStatus.failed.value}' then return holder end
end
redis.call('SET', KEYS[1], ARGV[2])
return false
"""

#: ``end_work``: KEYS the event's unfinished hash; ARGV the work. One start fewer; the field goes at zero (and the
#: hash with its last field), so an event whose work all ended keeps nothing.
_LUA_END_WORK = """
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
"""


class RedisLedger:
    """The ledger in Redis (the distributed mode), for any number of processes.

    Keys (prefix ``engram:``): ``event:<id>`` (hash of the record), ``event:<id>:segments`` (hash segment index →
    observations), ``event:<id>:unfinished`` (hash work → starts not ended: ``begin_work``), ``tenant:<t>:events``
    (sorted set by update time), ``tenant:<t>:status:<s>`` (sorted set per status), ``content:<t>:<user>:<sha256>``
    and ``frame:<t>:<device>``. Read-modify-write steps are atomic, so concurrent workers never lose an update: the
    ones every event takes (``mark``, ``claim_content``, ``expect_segments``, ``segment_done``) as Lua scripts (one
    round trip each: an ingest task made ~12 round trips with optimistic transactions, each a wait and a process
    switch on a busy worker), the rarer ones as optimistic transactions (WATCH/MULTI). The scripts reach keys they
    read from the event's hash (its tenant's sets, a content holder's hash): one Redis server or a replicated one,
    not Redis Cluster."""

    def __init__(self, url: str, prefix: str = "engram:", lock_lease_s: float | None = None) -> None:
        import redis

        self.url = url
        self.lock_lease_s = LOCK_LEASE_S if lock_lease_s is None else lock_lease_s  # try_lock's lease
        self.r = redis.Redis.from_url(url, decode_responses=True, health_check_interval=30)
        self.p = prefix
        # redis-py's Script: EVALSHA, loading the script again after a server restart forgot it (NOSCRIPT)
        self._mark = self.r.register_script(_LUA_MARK)
        self._expect_segments = self.r.register_script(_LUA_EXPECT_SEGMENTS)
        self._segment_done = self.r.register_script(_LUA_SEGMENT_DONE)
        self._claim_content = self.r.register_script(_LUA_CLAIM_CONTENT)
        self._end_work = self.r.register_script(_LUA_END_WORK)

    def _ek(self, event_id: uuid.UUID | str) -> str:
        return f"{self.p}event:{event_id}"

    def _transact(self, fn, *keys: str):
        """Run ``fn(pipe)`` under WATCH of ``keys`` until it commits; returns fn's result."""
        import redis

        with self.r.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(*keys)
                    result = fn(pipe)
                    pipe.execute()
                    return result
                except redis.WatchError:
                    continue

    @staticmethod
    def _finished(outcome: list, event_id: uuid.UUID | None, status: EventStatus, stage: str | None,
                  reason: str | None) -> bool:
        """Read an event script's ``outcome`` (``{-1}`` unknown event, ``{1, kind}`` it entered ``status``, a final
        one, else ``{0}``): count the finish (``metrics.count_finished``) and return whether it happened. An unknown
        event raises KeyError, unless ``event_id`` is None (the caller leaves unknown events alone)."""
        if outcome[0] == -1 and event_id is not None:
            raise KeyError(f"unknown event {event_id}")
        if outcome[0] == 1:
            count_finished(outcome[1], status.value, stage, reason)
        return outcome[0] == 1

    def _set_status(self, pipe, rec: dict, status: EventStatus, stage: str | None,
                    reason: str | None) -> tuple | None:
        """Queue (in MULTI) the writes that move ``rec`` to ``status``; returns the arguments of
        ``metrics.count_finished`` when this enters a final status, to count once the transaction commits."""
        now = datetime.now(UTC)
        tenant, eid, old = rec["tenant_id"], rec["event_id"], rec.get("status")
        pipe.hset(self._ek(eid), mapping={"status": status.value, "stage": stage or "", "reason": reason or "",
                                          "updated_at": now.isoformat()})
        if old and old != status.value:
            pipe.zrem(f"{self.p}tenant:{tenant}:status:{old}", eid)
        pipe.zadd(f"{self.p}tenant:{tenant}:status:{status.value}", {eid: now.timestamp()})
        pipe.zadd(f"{self.p}tenant:{tenant}:events", {eid: now.timestamp()})
        if status in FINAL_STATUSES and old not in FINAL_STATUSES:
            return (rec["kind"], status.value, stage, reason)
        return None

    def _touch(self, pipe, rec: dict) -> None:
        """Queue (in MULTI) a new progress time for ``rec`` without changing its status."""
        now = datetime.now(UTC)
        pipe.hset(self._ek(rec["event_id"]), "updated_at", now.isoformat())
        pipe.zadd(f"{self.p}tenant:{rec['tenant_id']}:status:{rec['status']}", {rec["event_id"]: now.timestamp()})
        pipe.zadd(f"{self.p}tenant:{rec['tenant_id']}:events", {rec["event_id"]: now.timestamp()})

    def record_queued(self, event: MediaEvent) -> None:
        key = self._ek(event.event_id)
        if self.r.exists(key):  # the publisher recorded it (ingest records it again): one round trip, no WATCH
            return

        def fn(pipe):
            if pipe.exists(key):
                pipe.multi()
                return False
            now = datetime.now(UTC).isoformat()
            rec = {"event_id": str(event.event_id), "tenant_id": event.tenant_id, "user_id": event.user_id,
                   "device_id": event.device_id, "kind": event.kind.value, "object_key": event.object_key,
                   "sha256": event.sha256, "source_name": event.source_name or "", "created_at": now,
                   "updated_at": now, "segments_total": "", "event_json": event.model_dump_json(),
                   "redeliveries": 0}
            pipe.multi()
            pipe.hset(key, mapping=rec)
            self._set_status(pipe, rec, EventStatus.queued, None, None)
            return True

        if self._transact(fn, key):
            EVENTS_RECEIVED.labels(kind=event.kind.value).inc()

    def get(self, event_id: uuid.UUID) -> LedgerRecord | None:
        with self.r.pipeline(transaction=False) as pipe:  # one round trip for both
            pipe.hgetall(self._ek(event_id))
            pipe.hvals(self._ek(event_id) + ":segments")
            rec, segs = pipe.execute()
        if not rec:
            return None
        return LedgerRecord(
            event_id=uuid.UUID(rec["event_id"]), tenant_id=rec["tenant_id"], user_id=rec["user_id"],
            device_id=rec["device_id"], kind=rec["kind"], object_key=rec["object_key"], sha256=rec["sha256"],
            source_name=rec.get("source_name") or None, status=rec["status"], stage=rec.get("stage") or None,
            reason=rec.get("reason") or None,
            segments_total=int(rec["segments_total"]) if rec.get("segments_total") else None,
            segments_done=len(segs), observations=sum(int(v) for v in segs),
            created_at=datetime.fromisoformat(rec["created_at"]), updated_at=datetime.fromisoformat(rec["updated_at"]))

    def mark(self, event_id: uuid.UUID, status: EventStatus, stage: str | None = None,
             reason: str | None = None) -> None:
        now = datetime.now(UTC)
        self._finished(self._mark(keys=[self._ek(event_id)], args=[self.p, status.value, stage or "", reason or "",
                                                                   now.isoformat(), now.timestamp()]),
                       event_id, status, stage, reason)

    def claim_content(self, tenant_id: str, user_id: str, sha256: str, event_id: uuid.UUID) -> uuid.UUID | None:
        holder = self._claim_content(keys=[f"{self.p}content:{tenant_id}:{user_id}:{sha256}"],
                                     args=[self.p, str(event_id)])
        return uuid.UUID(holder) if holder else None

    def swap_frame(self, tenant_id: str, device_id: str, phash: str, event_id: uuid.UUID,
                   is_near_duplicate) -> uuid.UUID | None:
        fkey = f"{self.p}frame:{tenant_id}:{device_id}"

        def fn(pipe):
            prev = pipe.hgetall(fkey)
            pipe.multi()
            if prev and prev["event_id"] != str(event_id) and is_near_duplicate(prev["phash"], phash):
                return uuid.UUID(prev["event_id"])
            pipe.hset(fkey, mapping={"phash": phash, "event_id": str(event_id)})
            return None

        return self._transact(fn, fkey)

    def expect_segments(self, event_id: uuid.UUID, total: int) -> None:
        key, now = self._ek(event_id), datetime.now(UTC)
        reason = "no content to store" if total == 0 else None
        # an unknown event is left alone, as the SQLite ledger's UPDATE leaves it
        self._finished(self._expect_segments(keys=[key, key + ":segments"],
                                             args=[self.p, total, reason or "", now.isoformat(), now.timestamp()]),
                       None, EventStatus.done, None, reason)

    def segment_done(self, event_id: uuid.UUID, segment_index: int, observations: int) -> bool:
        return self._finished(self._segment_done(**self._segment_args(event_id, segment_index, observations)),
                              event_id, EventStatus.done, None, None)

    def segments_done(self, segments: list[tuple[uuid.UUID, int, int]]) -> list[bool]:
        if len(segments) == 1:  # one EVALSHA; a pipeline asks SCRIPT EXISTS first
            return [self.segment_done(*segments[0])]
        with self.r.pipeline(transaction=False) as pipe:
            for segment in segments:
                self._segment_done(**self._segment_args(*segment), client=pipe)
            outcomes = pipe.execute()
        finished = [self._finished(outcome, None, EventStatus.done, None, None) for outcome in outcomes]
        if unknown := [str(event_id) for outcome, (event_id, _, _) in zip(outcomes, segments, strict=True)
                       if outcome[0] == -1]:
            raise KeyError(f"unknown events {', '.join(unknown)}")
        return finished

    def _segment_args(self, event_id: uuid.UUID, segment_index: int, observations: int) -> dict[str, list]:
        key, now = self._ek(event_id), datetime.now(UTC)
        return {"keys": [key, key + ":segments"],
                "args": [self.p, segment_index, observations, now.isoformat(), now.timestamp()]}

    def counts(self, tenant_id: str | None = None) -> dict[EventStatus, int]:
        tenants = [tenant_id] if tenant_id else self._tenants()
        keys = [(st, f"{self.p}tenant:{t}:status:{st.value}") for t in tenants for st in EventStatus]
        with self.r.pipeline(transaction=False) as pipe:  # one round trip (ingest asks it for every event)
            for _, key in keys:
                pipe.zcard(key)
            found = pipe.execute()
        out: dict[EventStatus, int] = {}
        for (st, _), n in zip(keys, found, strict=True):
            if n:
                out[st] = out.get(st, 0) + n
        return out

    @contextmanager
    def try_lock(self, name: str, ttl_s: float) -> Iterator[bool]:
        """A redis-py ``Lock`` on a lease (see ``LockLease``): it lives ``lock_lease_s`` seconds unless its holder
        renews it, which a thread of the holder does while the block runs, up to ``ttl_s`` in all. A holder that
        dies (killed, its machine gone) stops renewing: its lock lapses within ``lock_lease_s``, not ``ttl_s``."""
        lease_s = min(self.lock_lease_s, ttl_s)
        # thread_local=False: the token is read by the renewing thread too (redis-py keeps it per thread by default)
        lock = self.r.lock(f"{self.p}lock:{name}", timeout=lease_s, blocking=False, thread_local=False)
        if not lock.acquire():
            yield False
            return
        lease = LockLease(lock, name, lease_s, ttl_s)
        try:
            yield True
        finally:
            lease.stop()
            self._release(lock, name)

    @staticmethod
    def _release(lock, name: str) -> None:
        """Release ``lock``, riding out a Redis restart of up to 30 s (else the lock would block its work
        until its ttl ends); a lock that expired meanwhile is left to its new holder."""
        import redis
        from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

        token = lock.local.token  # Lock.release() forgets the token before it talks to Redis: retry with it

        @retry(retry=retry_if_exception_type((redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)),
               stop=stop_after_delay(30), wait=wait_exponential(multiplier=0.2, max=3), reraise=True)
        def release() -> None:
            lock.do_release(token)

        try:
            release()
        except redis.exceptions.LockError:
            log_lock_expired(name)
        except redis.exceptions.RedisError as exc:

            log.error("lock not released: it blocks its work until its ttl ends",
                                                 lock=name, error=str(exc))

    def done_segments(self, event_id: uuid.UUID) -> set[int]:
        return {int(i) for i in self.r.hkeys(self._ek(event_id) + ":segments")}

    def begin_work(self, event_id: uuid.UUID, work: str) -> int:
        key = self._ek(event_id) + ":unfinished"
        with self.r.pipeline(transaction=True) as pipe:
            pipe.hincrby(key, work, 1)
            pipe.expire(key, UNFINISHED_TTL_S)  # the count of an event never finished does not stay forever
            return int(pipe.execute()[0])

    def end_work(self, event_id: uuid.UUID, work: str) -> None:
        self._end_work(keys=[self._ek(event_id) + ":unfinished"], args=[work])

    def _tenant_fields(self, tenant_id: str, *fields: str) -> list[tuple[str, list[str | None]]]:
        """(event id, values of ``fields``) of every event of the tenant, oldest first (pipelined HMGETs)."""
        eids = self.r.zrange(f"{self.p}tenant:{tenant_id}:events", 0, -1)
        with self.r.pipeline(transaction=False) as pipe:
            for eid in eids:
                pipe.hmget(self._ek(eid), list(fields))
            return list(zip(eids, pipe.execute(), strict=True))

    def user_events(self, tenant_id: str, user_id: str) -> list[LedgerRecord]:
        mine = [eid for eid, (user,) in self._tenant_fields(tenant_id, "user_id") if user == user_id]
        return sorted((r for eid in mine if (r := self.get(uuid.UUID(eid)))), key=lambda r: r.created_at)

    def forget_events(self, tenant_id: str, event_ids: list[uuid.UUID]) -> int:
        deleted = 0
        for eid in map(str, event_ids):
            key = self._ek(eid)
            rec = self.r.hgetall(key)
            if not rec or rec["tenant_id"] != tenant_id:
                continue
            ckey = f"{self.p}content:{tenant_id}:{rec['user_id']}:{rec['sha256']}"
            fkey = f"{self.p}frame:{tenant_id}:{rec['device_id']}"

            def fn(pipe, key=key, eid=eid, ckey=ckey, fkey=fkey):
                holds_content = pipe.get(ckey) == eid
                holds_frame = pipe.hget(fkey, "event_id") == eid
                pipe.multi()
                pipe.delete(key, key + ":segments", key + ":unfinished", *([ckey] if holds_content else []),
                            *([fkey] if holds_frame else []))
                pipe.zrem(f"{self.p}tenant:{tenant_id}:events", eid)
                for st in EventStatus:
                    pipe.zrem(f"{self.p}tenant:{tenant_id}:status:{st.value}", eid)

            self._transact(fn, key, ckey, fkey)
            deleted += 1
        return deleted

    def object_references(self, tenant_id: str, object_key: str) -> int:
        return sum(key == object_key for _, (key,) in self._tenant_fields(tenant_id, "object_key"))

    def claim_stalled(self, older_than_s: float, max_redeliveries: int,
                      limit: int = 500) -> tuple[list[MediaEvent], list[uuid.UUID]]:
        cutoff = time.time() - older_than_s
        republish: list[MediaEvent] = []
        given_up: list[uuid.UUID] = []
        for tenant in self._tenants():
            for status in (EventStatus.queued, EventStatus.processing):
                zkey = f"{self.p}tenant:{tenant}:status:{status.value}"
                for eid in self.r.zrangebyscore(zkey, "-inf", cutoff, start=0, num=limit):
                    key = self._ek(eid)

                    def fn(pipe, key=key, status=status):
                        rec = pipe.hgetall(key)
                        pipe.multi()
                        if rec.get("status") != status.value or \
                                datetime.fromisoformat(rec["updated_at"]).timestamp() >= cutoff:
                            return None  # it moved on meanwhile
                        done = int(rec.get("redeliveries") or 0)
                        if not rec.get("event_json") or done >= max_redeliveries:
                            reason = (_stalled_reason(rec.get("stage"), older_than_s, done) if rec.get("event_json")
                                      else "stalled, and recorded before redelivery existed: publish it again")
                            return self._set_status(pipe, rec, EventStatus.failed, rec.get("stage") or "ingest",
                                                    reason)
                        pipe.hset(key, "redeliveries", done + 1)
                        self._touch(pipe, rec)
                        return MediaEvent.model_validate_json(rec["event_json"])

                    outcome = self._transact(fn, key)
                    if isinstance(outcome, tuple):
                        given_up.append(uuid.UUID(eid))
                        count_finished(*outcome)
                    elif outcome is not None:
                        republish.append(outcome)
        return republish, given_up

    def claim_interrupted(self, max_redeliveries: int, event_ids: list[uuid.UUID] | None = None,
                          include_own: bool = False, limit: int = 500) -> tuple[list[MediaEvent], list[uuid.UUID]]:
        """The Redis ledger keeps no owner process (its events are the broker's workers', redelivered by the broker
        and ``claim_stalled``): every unfinished event counts as interrupted, as before owners existed. Only the
        embedded default asks this, with a Redis ledger only when ``ENGRAM_REDIS_URL`` is set without a broker. Named
        events (``event_ids``) are left to the broker and its sweep: nothing is claimed."""
        if event_ids is not None:
            return [], []
        return self.claim_stalled(0.0, max_redeliveries, limit)

    def retry(self, event_id: uuid.UUID) -> MediaEvent | None:
        key = self._ek(event_id)

        def fn(pipe):
            rec = pipe.hgetall(key)
            pipe.multi()
            if not rec or rec.get("status") != EventStatus.failed.value or not rec.get("event_json"):
                return None
            self._set_status(pipe, rec, EventStatus.queued, None, None)
            pipe.hset(key, "redeliveries", 0)
            return MediaEvent.model_validate_json(rec["event_json"])

        return self._transact(fn, key)

    def running(self, event_ids: list[uuid.UUID]) -> set[uuid.UUID]:
        return set()

    def take_up(self, event_id: uuid.UUID) -> MediaEvent | None:
        """The distributed mode's retry of an unfinished event (``POST /v1/memories`` again with its client id):
        the event to publish again when it is queued or processing, its progress time reset (as ``claim_stalled``
        does, so beat's sweep leaves it alone meanwhile); None when it is final, unknown or recorded before
        redelivery existed (no event kept). Its redeliveries are not counted: a client's retries must not fail an
        event that workers never had a chance to run (a poison input is failed by ``runtime.deaths_guard``)."""
        key = self._ek(event_id)

        def fn(pipe):
            rec = pipe.hgetall(key)
            pipe.multi()
            if rec.get("status") not in (EventStatus.queued.value, EventStatus.processing.value) \
                    or not rec.get("event_json"):
                return None
            self._touch(pipe, rec)
            return MediaEvent.model_validate_json(rec["event_json"])

        return self._transact(fn, key)

    def record_reveal(self, tenant_id: str, entry_id: str, os_user: str, pid: int) -> None:
        self.r.xadd(f"{self.p}reveals:{tenant_id}", {"entry_id": entry_id, "os_user": os_user, "pid": pid,
                                                      "at": datetime.now(UTC).isoformat()})

    def reveal_count(self, tenant_id: str) -> int:
        return int(self.r.xlen(f"{self.p}reveals:{tenant_id}"))

    def _tenants(self) -> list[str]:
        pat = f"{self.p}tenant:*:events"
        return sorted({k[len(self.p) + 7:-7] for k in self.r.scan_iter(match=pat)})

    def records(self, tenant_id: str | None = None, status: EventStatus | None = None,
                limit: int = 100) -> list[LedgerRecord]:
        out: list[LedgerRecord] = []
        for t in [tenant_id] if tenant_id else self._tenants():
            key = f"{self.p}tenant:{t}:status:{status.value}" if status else f"{self.p}tenant:{t}:events"
            out.extend(r for eid in self.r.zrevrange(key, 0, limit - 1) if (r := self.get(uuid.UUID(eid))))
        return sorted(out, key=lambda r: r.updated_at, reverse=True)[:limit]


#: Seconds a lock of the Redis ledger (``RedisLedger.try_lock``) lives unless its holder renews it (every third of
#: this, while its work runs): how long a dead holder's lock blocks its work at most.
LOCK_LEASE_S = 15.0


class LockLease:
    """Keeps a held redis-py ``Lock`` (made with ``thread_local=False``) alive while its holder's work runs: a daemon
    thread of the holder renews it every third of ``lease_s`` (``Lock.extend`` with ``replace_ttl``: its ttl set to
    ``lease_s`` again), until ``stop`` or ``max_s`` seconds after the start (a holder alive but stuck does not hold
    it for ever: the last renewal gives what is left of ``max_s``). The lease is the liveness test that a pid cannot
    be across machines (Gray and Cheriton, "Leases", SOSP 1989): a holder that died renews nothing and its lock
    lapses within ``lease_s``. A renewal that fails on a connection error is tried again at the next tick; a lock
    found no longer held (it lapsed while Redis was unreachable and someone else may hold it now) stops the renewals
    with a warning. The thread owns nothing but the renewals; ``lost`` tells whether the lock was found gone."""

    def __init__(self, lock, name: str, lease_s: float, max_s: float) -> None:
        import threading

        self.lock, self.name, self.lease_s = lock, name, lease_s
        self.lost = False
        self._until = time.monotonic() + max_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"lease:{name}", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        import redis

        while not self._stopped.wait(self.lease_s / 3):
            left = self._until - time.monotonic()
            if left <= 0:
                log.warning("lock held for its whole ttl: no longer renewed", lock=self.name)
                return
            try:
                self.lock.extend(min(self.lease_s, left), replace_ttl=True)
            except redis.exceptions.LockError:  # LockNotOwnedError: it lapsed; another process may hold it
                self.lost = True
                log.warning("lock lost while held: its lease lapsed before it was renewed", lock=self.name)
                return
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                log.warning("lock lease not renewed; trying again", lock=self.name, error=str(exc)[:200])

    def stop(self) -> None:
        """End the renewals (the holder's work is over) and wait for the thread."""
        self._stopped.set()
        self._thread.join(timeout=10)


def log_lock_expired(name: str) -> None:
    """Note a lock that outlived its ttl (its work took longer than the ttl allows)."""

    log.warning("lock expired before release", lock=name)


def open_ledger(settings) -> Ledger:
    """The configured ledger: Redis when ``redis_url`` or ``broker_url`` is a Redis URL (the distributed
    mode), else SQLite under ``data_dir`` (the embedded default)."""
    url = settings.redis_url or settings.broker_url
    if url and url.startswith(("redis://", "rediss://", "unix://")):
        return RedisLedger(url)
    return SqliteLedger(settings.data_dir / "ledger.sqlite")
