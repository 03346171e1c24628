"""The event ledger: the status of every event (queued, processing, done, skipped, failed + stage + reason).

One interface (``Ledger``); SQLite under ``ENGRAM_DATA_DIR`` in the embedded default. The ledger also
keeps the small shared state that ingest needs across processes: which content hash a tenant already
has (exact duplicates) and the last kept frame of each device stream (near-duplicates). Failed events
stay in the ledger with their reason and object key: that is the quarantine.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from schemas.events import EventStatus, LedgerRecord, MediaEvent

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

    def claim_content(self, tenant_id: str, sha256: str, event_id: uuid.UUID) -> uuid.UUID | None:
        """Register ``event_id`` as the holder of this content; return the earlier holder if the tenant
        already has the content in an event that did not fail (then this event is an exact duplicate)."""

    def swap_frame(self, tenant_id: str, device_id: str, phash: str, event_id: uuid.UUID,
                   is_near_duplicate) -> uuid.UUID | None:
        """Compare ``phash`` with the device's last kept frame using ``is_near_duplicate(prev, new)``;
        return that frame's event id if it is a near-duplicate, else make this frame the last kept one."""

    def expect_segments(self, event_id: uuid.UUID, total: int) -> None:
        """Declare how many segments the event was cut into; with 0 the event is done at once."""

    def segment_done(self, event_id: uuid.UUID, segment_index: int, observations: int) -> bool:
        """Record a stored segment (idempotent); mark the event done and return True when all are."""

    def counts(self, tenant_id: str | None = None) -> dict[EventStatus, int]:
        """Number of events per status."""

    def records(self, tenant_id: str | None = None, status: EventStatus | None = None,
                limit: int = 100) -> list[LedgerRecord]:
        """Recent records, newest first."""


def _now() -> str:
    return datetime.now(UTC).isoformat()


_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
  event_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, user_id TEXT NOT NULL, device_id TEXT NOT NULL,
  kind TEXT NOT NULL, object_key TEXT NOT NULL, sha256 TEXT NOT NULL, source_name TEXT,
  status TEXT NOT NULL, stage TEXT, reason TEXT, segments_total INTEGER,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_tenant_status ON events(tenant_id, status);
CREATE TABLE IF NOT EXISTS segments (
  event_id TEXT NOT NULL, segment_index INTEGER NOT NULL, observations INTEGER NOT NULL,
  PRIMARY KEY (event_id, segment_index));
CREATE TABLE IF NOT EXISTS content (
  tenant_id TEXT NOT NULL, sha256 TEXT NOT NULL, event_id TEXT NOT NULL, PRIMARY KEY (tenant_id, sha256));
CREATE TABLE IF NOT EXISTS frames (
  tenant_id TEXT NOT NULL, device_id TEXT NOT NULL, phash TEXT NOT NULL, event_id TEXT NOT NULL,
  PRIMARY KEY (tenant_id, device_id));
"""


class SqliteLedger:
    """The ledger in one SQLite file (WAL mode). A connection per call, so any thread or process may use it."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(sqlite3.connect(self.path, timeout=60)) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=60, isolation_level=None)) as db:
            db.execute("PRAGMA busy_timeout=60000")
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def record_queued(self, event: MediaEvent) -> None:
        now = _now()
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO events (event_id, tenant_id, user_id, device_id, kind, object_key, sha256,"
                " source_name, status, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (str(event.event_id), event.tenant_id, event.user_id, event.device_id, event.kind.value,
                 event.object_key, event.sha256, event.source_name, EventStatus.queued.value, now, now))

    def _row(self, db: sqlite3.Connection, event_id: str) -> LedgerRecord | None:
        row = db.execute(
            "SELECT e.event_id, tenant_id, user_id, device_id, kind, object_key, sha256, source_name, status,"
            " stage, reason, segments_total, updated_at, COUNT(s.segment_index), COALESCE(SUM(s.observations),0)"
            " FROM events e LEFT JOIN segments s ON s.event_id = e.event_id WHERE e.event_id = ?"
            " GROUP BY e.event_id", (event_id,)).fetchone()
        return self._record(row) if row else None

    @staticmethod
    def _record(row: tuple) -> LedgerRecord:
        (event_id, tenant, user, device, kind, key, sha, name, status, stage, reason, total, updated,
         done, obs) = row
        return LedgerRecord(event_id=uuid.UUID(event_id), tenant_id=tenant, user_id=user, device_id=device,
                            kind=kind, object_key=key, sha256=sha, source_name=name, status=status,
                            stage=stage, reason=reason, segments_total=total, segments_done=done,
                            observations=obs, updated_at=datetime.fromisoformat(updated))

    def get(self, event_id: uuid.UUID) -> LedgerRecord | None:
        with self._tx() as db:
            return self._row(db, str(event_id))

    def mark(self, event_id: uuid.UUID, status: EventStatus, stage: str | None = None,
             reason: str | None = None) -> None:
        with self._tx() as db:
            row = db.execute("SELECT status FROM events WHERE event_id=?", (str(event_id),)).fetchone()
            if row is None:
                raise KeyError(f"unknown event {event_id}")
            if row[0] in FINAL_STATUSES and status not in FINAL_STATUSES:
                return
            db.execute("UPDATE events SET status=?, stage=?, reason=?, updated_at=? WHERE event_id=?",
                       (status.value, stage, reason, _now(), str(event_id)))

    def claim_content(self, tenant_id: str, sha256: str, event_id: uuid.UUID) -> uuid.UUID | None:
        with self._tx() as db:
            row = db.execute(
                "SELECT c.event_id, e.status FROM content c LEFT JOIN events e ON e.event_id = c.event_id"
                " WHERE c.tenant_id=? AND c.sha256=?", (tenant_id, sha256)).fetchone()
            if row and row[0] != str(event_id) and row[1] not in (None, EventStatus.failed.value):
                return uuid.UUID(row[0])
            db.execute("INSERT OR REPLACE INTO content (tenant_id, sha256, event_id) VALUES (?,?,?)",
                       (tenant_id, sha256, str(event_id)))
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
            if total == 0:
                db.execute("UPDATE events SET status=?, stage=NULL, reason=? WHERE event_id=? AND status NOT IN"
                           " (?,?,?)", (EventStatus.done.value, "no content to store", str(event_id),
                                        *(s.value for s in FINAL_STATUSES)))

    def segment_done(self, event_id: uuid.UUID, segment_index: int, observations: int) -> bool:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO segments (event_id, segment_index, observations) VALUES (?,?,?)",
                       (str(event_id), segment_index, observations))
            total, status = db.execute("SELECT segments_total, status FROM events WHERE event_id=?",
                                       (str(event_id),)).fetchone()
            done = db.execute("SELECT COUNT(*) FROM segments WHERE event_id=?", (str(event_id),)).fetchone()[0]
            if total is not None and done >= total and status not in FINAL_STATUSES:
                db.execute("UPDATE events SET status=?, stage=NULL, reason=NULL, updated_at=? WHERE event_id=?",
                           (EventStatus.done.value, _now(), str(event_id)))
                return True
            return False

    def counts(self, tenant_id: str | None = None) -> dict[EventStatus, int]:
        with self._tx() as db:
            q = "SELECT status, COUNT(*) FROM events" + (" WHERE tenant_id=?" if tenant_id else "")
            rows = db.execute(q + " GROUP BY status", (tenant_id,) if tenant_id else ()).fetchall()
        return {EventStatus(s): n for s, n in rows}

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


def open_ledger(settings) -> Ledger:
    """The configured ledger: SQLite under ``data_dir`` (the Redis ledger comes with the distributed mode)."""
    return SqliteLedger(settings.data_dir / "ledger.sqlite")
