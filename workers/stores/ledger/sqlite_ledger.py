"""``SqliteLedger``: the event ledger in one SQLite file under ``ENGRAM_DATA_DIR`` (the embedded default), its
schema and the numbered migrations that bring a ledger written by an earlier engram to it (``migrate``).
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import structlog

from engram.schemas.errors import StoreCorrupt
from engram.schemas.events import EventStatus, LedgerRecord, MediaEvent
from engram.workers.metrics import EVENTS_RECEIVED, count_finished
from engram.workers.stores.ledger.base import FINAL_STATUSES, now_iso, stalled_reason
from engram.workers.stores.owners import is_alive, this_process
from engram.workers.stores.sqlite import ThreadConnections, set_wal

log = structlog.get_logger(__name__)

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
MIGRATIONS: tuple[tuple[tuple[str, str, str], ...], ...] = (
    (("events", "event_json", "TEXT"), ("events", "redeliveries", "INTEGER NOT NULL DEFAULT 0")),
    (
        ("events", "owner_pid", "INTEGER"),
        ("events", "owner_started", "REAL"),
        ("locks", "owner_pid", "INTEGER"),
        ("locks", "owner_started", "REAL"),
    ),
)


#: SQLite's primary result codes for a file that is not a sound database: SQLITE_CORRUPT ("database disk image is
#: malformed": a page cut off or overwritten) and SQLITE_NOTADB ("file is not a database": its header overwritten).
DAMAGE_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


@contextmanager
def damage_named(path: Path) -> Iterator[None]:
    """Raise StoreCorrupt, in one line naming the ledger file ``path`` and what to do, for SQLite's damage errors
    (``DAMAGE_CODES``: the file truncated, overwritten or not a database) inside the block; any other error (the
    database locked past its timeout, a bad statement) passes as it was."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) not in DAMAGE_CODES:
            raise
        raise _damaged(path, str(exc)) from exc


def _damaged(path: Path, what: str) -> StoreCorrupt:
    """The one-line StoreCorrupt for the ledger file ``path``, SQLite saying ``what``, with what to do."""
    return StoreCorrupt(
        f"the embedded store's ledger {path} is damaged (SQLite: {what}); restore it from a backup "
        "(`engram restore`), or move it away to start an empty one (the record of the files ingested is lost)"
    )


def migrate(db: sqlite3.Connection) -> int:
    """Bring the ledger open on ``db`` (autocommit) to the current schema: the migrations it has not had, then the
    tables and indexes it lacks, in one write transaction (two processes opening an old ledger at once migrate it
    once). Returns how many migrations ran."""
    db.execute("BEGIN IMMEDIATE")
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        ran = 0
        for migration in MIGRATIONS[version:]:
            for table, column, decl in migration:
                have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}  # fixed table names
                if have and column not in have:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
            ran += 1
        for statement in filter(str.strip, _SCHEMA.split(";")):
            db.execute(statement)
        db.execute(f"PRAGMA user_version={len(MIGRATIONS)}")
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
        with damage_named(self.path):
            db = self._db.connection()
            set_wal(db)
            migrate(db)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """A write transaction of this thread (``ThreadConnections.transaction``); SQLite's damage errors inside
        it (a page found malformed once the file is open) raise StoreCorrupt naming the file (``damage_named``)."""
        with damage_named(self.path), self._db.transaction() as db:
            yield db

    def check(self) -> None:
        """Read every page of the file (SQLite's ``PRAGMA quick_check``: each b-tree page well formed, no page used
        twice or lost; not an index against its table), as ``engram status`` does: damage on a page no query has
        read yet is found. Raises StoreCorrupt naming the file (its first problem) when the file is not sound. Reads
        the whole file: a diagnostic, not for each open (~0.1 s per 10 MB)."""
        with self._tx() as db:
            problems = [row[0] for row in db.execute("PRAGMA quick_check(1)").fetchall()]
        if problems != ["ok"]:
            raise _damaged(self.path, " ".join(" ".join(problems).split())[:200])

    def record_queued(self, event: MediaEvent, created_at: datetime | None = None) -> None:
        now = now_iso()
        created_at_s = created_at.astimezone(UTC).isoformat() if created_at else now
        with self._tx() as db:
            me = this_process()
            created = db.execute(
                "INSERT OR IGNORE INTO events (event_id, tenant_id, user_id, device_id, kind, object_key, sha256,"
                " source_name, status, created_at, updated_at, event_json, owner_pid, owner_started)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    str(event.event_id),
                    event.tenant_id,
                    event.user_id,
                    event.device_id,
                    event.kind.value,
                    event.object_key,
                    event.sha256,
                    event.source_name,
                    EventStatus.queued.value,
                    created_at_s,
                    now,
                    event.model_dump_json(),
                    me.pid,
                    me.started,
                ),
            ).rowcount
        if created:
            EVENTS_RECEIVED.labels(kind=event.kind.value).inc()

    def _row(self, db: sqlite3.Connection, event_id: str) -> LedgerRecord | None:
        row = db.execute(
            "SELECT e.event_id, tenant_id, user_id, device_id, kind, object_key, sha256, source_name, status,"
            " stage, reason, segments_total, created_at, updated_at, COUNT(s.segment_index),"
            " COALESCE(SUM(s.observations),0)"
            " FROM events e LEFT JOIN segments s ON s.event_id = e.event_id WHERE e.event_id = ?"
            " GROUP BY e.event_id",
            (event_id,),
        ).fetchone()
        return self._record(row) if row else None

    @staticmethod
    def _record(row: tuple) -> LedgerRecord:
        (
            event_id,
            tenant,
            user,
            device,
            kind,
            key,
            sha,
            name,
            status,
            stage,
            reason,
            total,
            created,
            updated,
            done,
            obs,
        ) = row
        return LedgerRecord(
            event_id=uuid.UUID(event_id),
            tenant_id=tenant,
            user_id=user,
            device_id=device,
            kind=kind,
            object_key=key,
            sha256=sha,
            source_name=name,
            status=status,
            stage=stage,
            reason=reason,
            segments_total=total,
            segments_done=done,
            observations=obs,
            created_at=datetime.fromisoformat(created),
            updated_at=datetime.fromisoformat(updated),
        )

    def get(self, event_id: uuid.UUID) -> LedgerRecord | None:
        with self._tx() as db:
            return self._row(db, str(event_id))

    def mark(
        self, event_id: uuid.UUID, status: EventStatus, stage: str | None = None, reason: str | None = None
    ) -> None:
        with self._tx() as db:
            row = db.execute("SELECT status, kind FROM events WHERE event_id=?", (str(event_id),)).fetchone()
            if row is None:
                raise KeyError(f"unknown event {event_id}")
            if row[0] in FINAL_STATUSES and status not in FINAL_STATUSES:
                return
            db.execute(
                "UPDATE events SET status=?, stage=?, reason=?, updated_at=? WHERE event_id=?",
                (status.value, stage, reason, now_iso(), str(event_id)),
            )
        if status in FINAL_STATUSES and row[0] not in FINAL_STATUSES:
            count_finished(row[1], status.value, stage, reason)

    def claim_content(self, tenant_id: str, user_id: str, sha256: str, event_id: uuid.UUID) -> uuid.UUID | None:
        with self._tx() as db:
            row = db.execute(
                "SELECT c.event_id, e.status FROM user_content c LEFT JOIN events e ON e.event_id = c.event_id"
                " WHERE c.tenant_id=? AND c.user_id=? AND c.sha256=?",
                (tenant_id, user_id, sha256),
            ).fetchone()
            if row and row[0] != str(event_id) and row[1] not in (None, EventStatus.failed.value):
                return uuid.UUID(row[0])
            db.execute(
                "INSERT OR REPLACE INTO user_content (tenant_id, user_id, sha256, event_id) VALUES (?,?,?,?)",
                (tenant_id, user_id, sha256, str(event_id)),
            )
            return None

    def swap_frame(
        self, tenant_id: str, device_id: str, phash: str, event_id: uuid.UUID, is_near_duplicate
    ) -> uuid.UUID | None:
        with self._tx() as db:
            row = db.execute(
                "SELECT phash, event_id FROM frames WHERE tenant_id=? AND device_id=?", (tenant_id, device_id)
            ).fetchone()
            if row and row[1] != str(event_id) and is_near_duplicate(row[0], phash):
                return uuid.UUID(row[1])
            db.execute(
                "INSERT OR REPLACE INTO frames (tenant_id, device_id, phash, event_id) VALUES (?,?,?,?)",
                (tenant_id, device_id, phash, str(event_id)),
            )
            return None

    def expect_segments(self, event_id: uuid.UUID, total: int) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE events SET segments_total=?, updated_at=? WHERE event_id=?", (total, now_iso(), str(event_id))
            )
            finished = (
                total == 0
                and db.execute(
                    "UPDATE events SET status=?, stage=NULL, reason=? WHERE event_id=? AND status NOT IN (?,?,?)",
                    (EventStatus.done.value, "no content to store", str(event_id), *(s.value for s in FINAL_STATUSES)),
                ).rowcount
                == 1
            )
            kind = db.execute("SELECT kind FROM events WHERE event_id=?", (str(event_id),)).fetchone()
        if finished:
            count_finished(kind[0], EventStatus.done.value, None, "no content to store")

    def segment_done(self, event_id: uuid.UUID, segment_index: int, observations: int) -> bool:
        return self.segments_done([(event_id, segment_index, observations)])[0]

    def segments_done(self, segments: list[tuple[uuid.UUID, int, int]]) -> list[bool]:
        kinds: list[str | None] = []  # the kind of each event finished here, None for the others
        with self._tx() as db:
            for event_id, segment_index, observations in segments:
                db.execute(
                    "INSERT OR REPLACE INTO segments (event_id, segment_index, observations) VALUES (?,?,?)",
                    (str(event_id), segment_index, observations),
                )
                db.execute("UPDATE events SET updated_at=? WHERE event_id=?", (now_iso(), str(event_id)))  # progress
                row = db.execute(
                    "SELECT segments_total, status, kind FROM events WHERE event_id=?", (str(event_id),)
                ).fetchone()
                if row is None:
                    raise KeyError(f"unknown event {event_id}")
                total, status, kind = row
                done = db.execute("SELECT COUNT(*) FROM segments WHERE event_id=?", (str(event_id),)).fetchone()[0]
                finished = total is not None and done >= total and status not in FINAL_STATUSES
                if finished:
                    db.execute(
                        "UPDATE events SET status=?, stage=NULL, reason=NULL, updated_at=? WHERE event_id=?",
                        (EventStatus.done.value, now_iso(), str(event_id)),
                    )
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
            got = (
                db.execute(
                    "INSERT OR IGNORE INTO locks (name, token, expires, owner_pid, owner_started) VALUES (?,?,?,?,?)",
                    (name, token, time.time() + ttl_s, me.pid, me.started),
                ).rowcount
                == 1
            )
        try:
            yield got
        finally:
            if got:
                with self._tx() as db:
                    db.execute("DELETE FROM locks WHERE name=? AND token=?", (name, token))

    def records(
        self, tenant_id: str | None = None, status: EventStatus | None = None, limit: int = 100
    ) -> list[LedgerRecord]:
        where, args = [], []
        if tenant_id:
            where.append("tenant_id=?")
            args.append(tenant_id)
        if status:
            where.append("status=?")
            args.append(status.value)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        with self._tx() as db:
            ids = db.execute(
                f"SELECT event_id FROM events{clause} ORDER BY updated_at DESC LIMIT ?", (*args, limit)
            ).fetchall()
            return [r for (i,) in ids if (r := self._row(db, i))]

    def done_segments(self, event_id: uuid.UUID) -> set[int]:
        with self._tx() as db:
            rows = db.execute("SELECT segment_index FROM segments WHERE event_id=?", (str(event_id),))
            return {i for (i,) in rows}

    def user_events(self, tenant_id: str, user_id: str) -> list[LedgerRecord]:
        with self._tx() as db:
            ids = db.execute(
                "SELECT event_id FROM events WHERE tenant_id=? AND user_id=? ORDER BY created_at", (tenant_id, user_id)
            ).fetchall()
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
            return db.execute(
                "SELECT COUNT(*) FROM events WHERE tenant_id=? AND object_key=?", (tenant_id, object_key)
            ).fetchone()[0]

    def begin_work(self, event_id: uuid.UUID, work: str) -> int:
        with self._tx() as db:
            return db.execute(
                "INSERT INTO unfinished (event_id, work, starts) VALUES (?,?,1) ON CONFLICT"
                " (event_id, work) DO UPDATE SET starts=starts+1 RETURNING starts",
                (str(event_id), work),
            ).fetchone()[0]

    def end_work(self, event_id: uuid.UUID, work: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM unfinished WHERE event_id=? AND work=? AND starts<=1", (str(event_id), work))
            db.execute("UPDATE unfinished SET starts=starts-1 WHERE event_id=? AND work=?", (str(event_id), work))

    def claim_stalled(
        self, older_than_s: float, max_redeliveries: int, limit: int = 500
    ) -> tuple[list[MediaEvent], list[uuid.UUID]]:
        cutoff = datetime.fromtimestamp(time.time() - older_than_s, UTC).isoformat()
        republish, given_up, failed = [], [], []
        with self._tx() as db:
            rows = db.execute(
                "SELECT event_id, event_json, redeliveries, stage, kind FROM events WHERE status IN (?,?)"
                " AND updated_at < ? ORDER BY updated_at LIMIT ?",
                (EventStatus.queued.value, EventStatus.processing.value, cutoff, limit),
            ).fetchall()
            for event_id, event_json, redeliveries, stage, kind in rows:
                if event_json is None or redeliveries >= max_redeliveries:
                    reason = (
                        stalled_reason(stage, older_than_s, redeliveries)
                        if event_json
                        else "stalled, and recorded before redelivery existed: publish it again"
                    )
                    failed.append(self._give_up(db, event_id, kind, stage, reason))
                    given_up.append(uuid.UUID(event_id))
                else:
                    db.execute(
                        "UPDATE events SET redeliveries=redeliveries+1, updated_at=? WHERE event_id=?",
                        (now_iso(), event_id),
                    )
                    republish.append(MediaEvent.model_validate_json(event_json))
        for kind, stage, reason in failed:
            count_finished(kind, EventStatus.failed.value, stage, reason)
        return republish, given_up

    @staticmethod
    def _give_up(
        db: sqlite3.Connection, event_id: str, kind: str, stage: str | None, reason: str
    ) -> tuple[str, str, str]:
        """Mark the event failed at ``stage`` (default ``ingest``) with ``reason``, inside ``db``'s transaction;
        returns the arguments of ``metrics.count_finished``, to count once it commits."""
        db.execute(
            "UPDATE events SET status=?, stage=?, reason=?, updated_at=? WHERE event_id=?",
            (EventStatus.failed.value, stage or "ingest", reason, now_iso(), event_id),
        )
        return kind, stage or "ingest", reason

    def claim_interrupted(
        self,
        max_redeliveries: int,
        event_ids: list[uuid.UUID] | None = None,
        include_own: bool = False,
        limit: int = 500,
    ) -> tuple[list[MediaEvent], list[uuid.UUID]]:
        if event_ids is not None and not event_ids:
            return [], []
        me, republish, given_up, failed = this_process(), [], [], []
        only = f" AND event_id IN ({','.join('?' * len(event_ids))})" if event_ids is not None else ""
        with self._tx() as db:
            rows = db.execute(
                "SELECT event_id, event_json, redeliveries, stage, kind, owner_pid, owner_started FROM events"
                f" WHERE status IN (?,?){only} ORDER BY updated_at LIMIT ?",
                (EventStatus.queued.value, EventStatus.processing.value, *map(str, event_ids or []), limit),
            ).fetchall()
            for event_id, event_json, redeliveries, stage, kind, pid, started in rows:
                own = pid == me.pid and started == me.started
                if (own and not include_own) or (not own and is_alive(pid, started)):
                    continue  # its process lives: running it, or about to
                died = not own and pid is not None  # no owner: released (``release``), no process died
                if event_json is None or (died and redeliveries >= max_redeliveries):
                    reason = (
                        f"interrupted {redeliveries + 1} times: the process running it was gone each time"
                        + (f" (last stage {stage})" if stage else "")
                        if event_json
                        else "interrupted, and recorded before redelivery existed: ingest it again"
                    )
                    failed.append(self._give_up(db, event_id, kind, stage, reason))
                    given_up.append(uuid.UUID(event_id))
                    continue
                db.execute(
                    "UPDATE events SET redeliveries=redeliveries+?, owner_pid=?, owner_started=?, updated_at=?"
                    " WHERE event_id=?",
                    (int(died), me.pid, me.started, now_iso(), event_id),
                )
                republish.append(MediaEvent.model_validate_json(event_json))
        for kind, stage, reason in failed:
            count_finished(kind, EventStatus.failed.value, stage, reason)
        return republish, given_up

    def release(self, event_ids: list[uuid.UUID]) -> int:
        if not event_ids:
            return 0
        me = this_process()
        with self._tx() as db:
            return db.execute(
                "UPDATE events SET status=?, reason=NULL, owner_pid=NULL, owner_started=NULL, updated_at=?"
                f" WHERE event_id IN ({','.join('?' * len(event_ids))}) AND status IN (?,?)"
                " AND owner_pid=? AND owner_started=?",
                (
                    EventStatus.queued.value,
                    now_iso(),
                    *map(str, event_ids),
                    EventStatus.queued.value,
                    EventStatus.processing.value,
                    me.pid,
                    me.started,
                ),
            ).rowcount

    def retry(self, event_id: uuid.UUID) -> MediaEvent | None:
        me = this_process()
        with self._tx() as db:
            row = db.execute(
                "SELECT event_json FROM events WHERE event_id=? AND status=?", (str(event_id), EventStatus.failed.value)
            ).fetchone()
            if row is None or row[0] is None:
                return None
            db.execute(
                "UPDATE events SET status=?, stage=NULL, reason=NULL, redeliveries=0, owner_pid=?,"
                " owner_started=?, updated_at=? WHERE event_id=?",
                (EventStatus.queued.value, me.pid, me.started, now_iso(), str(event_id)),
            )
        return MediaEvent.model_validate_json(row[0])

    def running(self, event_ids: list[uuid.UUID]) -> set[uuid.UUID]:
        with self._tx() as db:
            rows = [
                db.execute(
                    "SELECT owner_pid, owner_started FROM events WHERE event_id=? AND status IN (?,?)",
                    (str(e), EventStatus.queued.value, EventStatus.processing.value),
                ).fetchone()
                for e in event_ids
            ]
        return {e for e, row in zip(event_ids, rows, strict=True) if row and is_alive(*row)}

    def record_reveal(self, tenant_id: str, entry_id: str, os_user: str, pid: int) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO reveals (tenant_id, entry_id, os_user, pid, at) VALUES (?,?,?,?,?)",
                (tenant_id, entry_id, os_user, pid, now_iso()),
            )

    def reveal_count(self, tenant_id: str) -> int:
        with self._tx() as db:
            return db.execute("SELECT COUNT(*) FROM reveals WHERE tenant_id=?", (tenant_id,)).fetchone()[0]
