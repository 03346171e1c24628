"""``RedisLedger``: the event ledger in Redis (the distributed mode), for any number of processes; its atomic steps
are the Lua scripts of ``redis_scripts`` and its locks live on leases (``leases.LockLease``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import structlog

from engram.schemas.events import EventStatus, LedgerRecord, MediaEvent
from engram.workers.metrics import EVENTS_RECEIVED, count_finished
from engram.workers.stores.ledger.base import FINAL_STATUSES, stalled_reason
from engram.workers.stores.ledger.leases import LOCK_LEASE_S, LockLease, log_lock_expired
from engram.workers.stores.ledger.redis_scripts import (
    LUA_CLAIM_CONTENT,
    LUA_END_WORK,
    LUA_EXPECT_SEGMENTS,
    LUA_MARK,
    LUA_SEGMENT_DONE,
)

log = structlog.get_logger(__name__)

#: Seconds the Redis ledger keeps an event's count of unfinished work after its last start (``begin_work``).
UNFINISHED_TTL_S = 7 * 24 * 3600


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
        self._mark = self.r.register_script(LUA_MARK)
        self._expect_segments = self.r.register_script(LUA_EXPECT_SEGMENTS)
        self._segment_done = self.r.register_script(LUA_SEGMENT_DONE)
        self._claim_content = self.r.register_script(LUA_CLAIM_CONTENT)
        self._end_work = self.r.register_script(LUA_END_WORK)

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
    def _finished(
        outcome: list, event_id: uuid.UUID | None, status: EventStatus, stage: str | None, reason: str | None
    ) -> bool:
        """Read an event script's ``outcome`` (``{-1}`` unknown event, ``{1, kind}`` it entered ``status``, a final
        one, else ``{0}``): count the finish (``metrics.count_finished``) and return whether it happened. An unknown
        event raises KeyError, unless ``event_id`` is None (the caller leaves unknown events alone)."""
        if outcome[0] == -1 and event_id is not None:
            raise KeyError(f"unknown event {event_id}")
        if outcome[0] == 1:
            count_finished(outcome[1], status.value, stage, reason)
        return outcome[0] == 1

    def _set_status(self, pipe, rec: dict, status: EventStatus, stage: str | None, reason: str | None) -> tuple | None:
        """Queue (in MULTI) the writes that move ``rec`` to ``status``; returns the arguments of
        ``metrics.count_finished`` when this enters a final status, to count once the transaction commits."""
        now = datetime.now(UTC)
        tenant, eid, old = rec["tenant_id"], rec["event_id"], rec.get("status")
        pipe.hset(
            self._ek(eid),
            mapping={
                "status": status.value,
                "stage": stage or "",
                "reason": reason or "",
                "updated_at": now.isoformat(),
            },
        )
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

    def record_queued(self, event: MediaEvent, created_at: datetime | None = None) -> None:
        key = self._ek(event.event_id)
        if self.r.exists(key):  # the publisher recorded it (ingest records it again): one round trip, no WATCH
            return

        def fn(pipe):
            if pipe.exists(key):
                pipe.multi()
                return False
            now = datetime.now(UTC).isoformat()
            rec = {
                "event_id": str(event.event_id),
                "tenant_id": event.tenant_id,
                "user_id": event.user_id,
                "device_id": event.device_id,
                "kind": event.kind.value,
                "object_key": event.object_key,
                "sha256": event.sha256,
                "source_name": event.source_name or "",
                "created_at": created_at.astimezone(UTC).isoformat() if created_at else now,
                "updated_at": now,
                "segments_total": "",
                "event_json": event.model_dump_json(),
                "redeliveries": 0,
            }
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
            event_id=uuid.UUID(rec["event_id"]),
            tenant_id=rec["tenant_id"],
            user_id=rec["user_id"],
            device_id=rec["device_id"],
            kind=rec["kind"],
            object_key=rec["object_key"],
            sha256=rec["sha256"],
            source_name=rec.get("source_name") or None,
            status=rec["status"],
            stage=rec.get("stage") or None,
            reason=rec.get("reason") or None,
            segments_total=int(rec["segments_total"]) if rec.get("segments_total") else None,
            segments_done=len(segs),
            observations=sum(int(v) for v in segs),
            created_at=datetime.fromisoformat(rec["created_at"]),
            updated_at=datetime.fromisoformat(rec["updated_at"]),
        )

    def mark(
        self, event_id: uuid.UUID, status: EventStatus, stage: str | None = None, reason: str | None = None
    ) -> None:
        now = datetime.now(UTC)
        self._finished(
            self._mark(
                keys=[self._ek(event_id)],
                args=[self.p, status.value, stage or "", reason or "", now.isoformat(), now.timestamp()],
            ),
            event_id,
            status,
            stage,
            reason,
        )

    def claim_content(self, tenant_id: str, user_id: str, sha256: str, event_id: uuid.UUID) -> uuid.UUID | None:
        holder = self._claim_content(
            keys=[f"{self.p}content:{tenant_id}:{user_id}:{sha256}"], args=[self.p, str(event_id)]
        )
        return uuid.UUID(holder) if holder else None

    def swap_frame(
        self, tenant_id: str, device_id: str, phash: str, event_id: uuid.UUID, is_near_duplicate
    ) -> uuid.UUID | None:
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
        self._finished(
            self._expect_segments(
                keys=[key, key + ":segments"], args=[self.p, total, reason or "", now.isoformat(), now.timestamp()]
            ),
            None,
            EventStatus.done,
            None,
            reason,
        )

    def segment_done(self, event_id: uuid.UUID, segment_index: int, observations: int) -> bool:
        return self._finished(
            self._segment_done(**self._segment_args(event_id, segment_index, observations)),
            event_id,
            EventStatus.done,
            None,
            None,
        )

    def segments_done(self, segments: list[tuple[uuid.UUID, int, int]]) -> list[bool]:
        if len(segments) == 1:  # one EVALSHA; a pipeline asks SCRIPT EXISTS first
            return [self.segment_done(*segments[0])]
        with self.r.pipeline(transaction=False) as pipe:
            for segment in segments:
                self._segment_done(**self._segment_args(*segment), client=pipe)
            outcomes = pipe.execute()
        finished = [self._finished(outcome, None, EventStatus.done, None, None) for outcome in outcomes]
        if unknown := [
            str(event_id) for outcome, (event_id, _, _) in zip(outcomes, segments, strict=True) if outcome[0] == -1
        ]:
            raise KeyError(f"unknown events {', '.join(unknown)}")
        return finished

    def _segment_args(self, event_id: uuid.UUID, segment_index: int, observations: int) -> dict[str, list]:
        key, now = self._ek(event_id), datetime.now(UTC)
        return {
            "keys": [key, key + ":segments"],
            "args": [self.p, segment_index, observations, now.isoformat(), now.timestamp()],
        }

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

        @retry(
            retry=retry_if_exception_type((redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)),
            stop=stop_after_delay(30),
            wait=wait_exponential(multiplier=0.2, max=3),
            reraise=True,
        )
        def release() -> None:
            lock.do_release(token)

        try:
            release()
        except redis.exceptions.LockError:
            log_lock_expired(name)
        except redis.exceptions.RedisError as exc:
            log.error("lock not released: it blocks its work until its ttl ends", lock=name, error=str(exc))

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
                pipe.delete(
                    key,
                    key + ":segments",
                    key + ":unfinished",
                    *([ckey] if holds_content else []),
                    *([fkey] if holds_frame else []),
                )
                pipe.zrem(f"{self.p}tenant:{tenant_id}:events", eid)
                for st in EventStatus:
                    pipe.zrem(f"{self.p}tenant:{tenant_id}:status:{st.value}", eid)

            self._transact(fn, key, ckey, fkey)
            deleted += 1
        return deleted

    def object_references(self, tenant_id: str, object_key: str) -> int:
        return sum(key == object_key for _, (key,) in self._tenant_fields(tenant_id, "object_key"))

    def claim_stalled(
        self, older_than_s: float, max_redeliveries: int, limit: int = 500
    ) -> tuple[list[MediaEvent], list[uuid.UUID]]:
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
                        if (
                            rec.get("status") != status.value
                            or datetime.fromisoformat(rec["updated_at"]).timestamp() >= cutoff
                        ):
                            return None  # it moved on meanwhile
                        done = int(rec.get("redeliveries") or 0)
                        released = bool(rec.get("released"))  # ``release``d by a stopped run: no death to count
                        if not rec.get("event_json") or (done >= max_redeliveries and not released):
                            reason = (
                                stalled_reason(rec.get("stage"), older_than_s, done)
                                if rec.get("event_json")
                                else "stalled, and recorded before redelivery existed: publish it again"
                            )
                            return self._set_status(pipe, rec, EventStatus.failed, rec.get("stage") or "ingest", reason)
                        pipe.hset(key, "redeliveries", done + int(not released))
                        pipe.hdel(key, "released")
                        self._touch(pipe, rec)
                        return MediaEvent.model_validate_json(rec["event_json"])

                    outcome = self._transact(fn, key)
                    if isinstance(outcome, tuple):
                        given_up.append(uuid.UUID(eid))
                        count_finished(*outcome)
                    elif outcome is not None:
                        republish.append(outcome)
        return republish, given_up

    def claim_interrupted(
        self,
        max_redeliveries: int,
        event_ids: list[uuid.UUID] | None = None,
        include_own: bool = False,
        limit: int = 500,
    ) -> tuple[list[MediaEvent], list[uuid.UUID]]:
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

    def release(self, event_ids: list[uuid.UUID]) -> int:
        """The Redis ledger keeps no owner: each unfinished one of ``event_ids`` is flagged ``released``, so the
        next ``claim_stalled`` (or ``claim_interrupted``) of it counts no redelivery; its status stays."""
        released = 0
        for event_id in event_ids:
            key = self._ek(event_id)

            def fn(pipe, key=key):
                status = pipe.hget(key, "status")
                pipe.multi()
                if status not in (EventStatus.queued.value, EventStatus.processing.value):
                    return 0
                pipe.hset(key, "released", 1)
                return 1

            released += self._transact(fn, key)
        return released

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
            if rec.get("status") not in (EventStatus.queued.value, EventStatus.processing.value) or not rec.get(
                "event_json"
            ):
                return None
            self._touch(pipe, rec)
            return MediaEvent.model_validate_json(rec["event_json"])

        return self._transact(fn, key)

    def record_reveal(self, tenant_id: str, entry_id: str, os_user: str, pid: int) -> None:
        self.r.xadd(
            f"{self.p}reveals:{tenant_id}",
            {"entry_id": entry_id, "os_user": os_user, "pid": pid, "at": datetime.now(UTC).isoformat()},
        )

    def reveal_count(self, tenant_id: str) -> int:
        return int(self.r.xlen(f"{self.p}reveals:{tenant_id}"))

    def _tenants(self) -> list[str]:
        pat = f"{self.p}tenant:*:events"
        return sorted({k[len(self.p) + 7 : -7] for k in self.r.scan_iter(match=pat)})

    def records(
        self, tenant_id: str | None = None, status: EventStatus | None = None, limit: int = 100
    ) -> list[LedgerRecord]:
        out: list[LedgerRecord] = []
        for t in [tenant_id] if tenant_id else self._tenants():
            key = f"{self.p}tenant:{t}:status:{status.value}" if status else f"{self.p}tenant:{t}:events"
            out.extend(r for eid in self.r.zrevrange(key, 0, limit - 1) if (r := self.get(uuid.UUID(eid))))
        return sorted(out, key=lambda r: r.updated_at, reverse=True)[:limit]
