"""``Ledger``: the one interface of the event ledger over its two backends (``sqlite_ledger.SqliteLedger``, the
embedded default; ``redis_ledger.RedisLedger``, the distributed mode), and what both share: the final statuses
and the reason given to an event that stalled.
"""

from __future__ import annotations

import uuid
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Protocol

from engram.schemas.events import EventStatus, LedgerRecord, MediaEvent

FINAL_STATUSES = (EventStatus.done, EventStatus.skipped, EventStatus.failed)


class Ledger(Protocol):
    """Event status and ingest's shared state. Every method is atomic and safe across processes."""

    def record_queued(self, event: MediaEvent, created_at: datetime | None = None) -> None:
        """Add ``event`` as queued (no-op if it is already known). ``created_at``: its creation time when it is
        not now (an event imported from an archive keeps the one it had where it was exported)."""

    def get(self, event_id: uuid.UUID) -> LedgerRecord | None:
        """The event's record, or None."""

    def mark(
        self, event_id: uuid.UUID, status: EventStatus, stage: str | None = None, reason: str | None = None
    ) -> None:
        """Set the status (a final status is not overwritten by ``processing`` or ``queued``)."""

    def claim_content(self, tenant_id: str, user_id: str, sha256: str, event_id: uuid.UUID) -> uuid.UUID | None:
        """Register ``event_id`` as the holder of this content for this user; return the earlier holder if the
        user already has the content in an event that did not fail (then this event is an exact duplicate). The
        object is stored once per tenant; each user who publishes it gets their own observations."""

    def swap_frame(
        self, tenant_id: str, device_id: str, phash: str, event_id: uuid.UUID, is_near_duplicate
    ) -> uuid.UUID | None:
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

    def records(
        self, tenant_id: str | None = None, status: EventStatus | None = None, limit: int = 100
    ) -> list[LedgerRecord]:
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

    def claim_stalled(
        self, older_than_s: float, max_redeliveries: int, limit: int = 500
    ) -> tuple[list[MediaEvent], list[uuid.UUID]]:
        """Events queued or processing without progress for ``older_than_s`` seconds (their task was lost:
        acknowledged while the broker restarted, or a chain's next publish failed). Each is claimed for
        one redelivery (its progress time is reset, so the next sweep leaves it alone for another
        ``older_than_s``); one already redelivered ``max_redeliveries`` times is marked failed instead.
        Returns (events to publish again, event ids given up)."""

    def claim_interrupted(
        self,
        max_redeliveries: int,
        event_ids: list[uuid.UUID] | None = None,
        include_own: bool = False,
        limit: int = 500,
    ) -> tuple[list[MediaEvent], list[uuid.UUID]]:
        """Embedded default: events queued or processing whose owner process is gone (``owners.is_alive``: killed,
        crashed; an event of a process that still lives, running it or waiting for the store, is never taken), or
        held by this process too with ``include_own`` (its caller has none of its own in flight), or held by none
        (``release``d by a run the store stopped). Each is claimed for this process (its owner from now on), a dead
        owner's counting one redelivery (a released one's none: no process died running it); one already
        redelivered ``max_redeliveries`` times is marked failed instead. ``event_ids``: only these events. Returns
        (events to run again, event ids given up)."""

    def release(self, event_ids: list[uuid.UUID]) -> int:
        """Give back ``event_ids``, unfinished events this process holds, when the store stopped its run
        (``runtime.STORE_DOWN_ERRORS``: a damaged shard or ledger, no fault of theirs): each is queued again, held
        by no process, and the next run that claims it (``claim_interrupted``; on Redis ``claim_stalled`` too) counts
        no redelivery, so reruns on a store still damaged never fail it as "interrupted N times". Final events,
        unknown ones and those another process holds are left as they are. Returns how many were released."""

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


def now_iso() -> str:
    """Now (UTC) in ISO 8601, as the ledgers write ``created_at``/``updated_at``."""
    return datetime.now(UTC).isoformat()


def stalled_reason(stage: str | None, older_than_s: float, redeliveries: int) -> str:
    """The reason a stalled event fails with (``Ledger.claim_stalled``): how long without progress, after how many
    redeliveries, and its last stage when known."""
    return f"stalled: no progress for {older_than_s:.0f} s after {redeliveries} redeliveries" + (
        f" (last stage {stage})" if stage else ""
    )
