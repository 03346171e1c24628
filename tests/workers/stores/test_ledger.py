"""The event ledgers (SQLite and Redis, one test body): status flow, final statuses, duplicate claims,
frame swaps and concurrent use."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engram.schemas.events import EventStatus, MediaEvent, MediaKind
from engram.workers.stores.ledger import RedisLedger, SqliteLedger


def make_event(
    tenant: str = "acme",
    user: str = "alice",
    device: str = "laptop",
    content: bytes = b"x",
    kind: MediaKind = MediaKind.screenshot,
) -> MediaEvent:
    """A queued-to-be MediaEvent whose sha256 and object key follow from ``content``."""
    sha = hashlib.sha256(content).hexdigest()
    return MediaEvent(
        tenant_id=tenant,
        user_id=user,
        device_id=device,
        kind=kind,
        object_key=f"media/{tenant}/{sha}.png",
        sha256=sha,
        size=len(content),
        mime_type="image/png",
        captured_at=datetime(2024, 5, 1, 12, tzinfo=UTC),
        source_name=f"{content[:8].decode(errors='replace')}.png",
    )


@pytest.fixture(params=["sqlite", "redis"])
def ledger(request, tmp_path):
    """A fresh ledger: a SQLite file under ``tmp_path``, or a real Redis server under a fresh key prefix."""
    if request.param == "sqlite":
        return SqliteLedger(tmp_path / "ledger.sqlite")
    url = request.getfixturevalue("redis_server")
    return RedisLedger(url, prefix=f"test-{uuid.uuid4().hex[:8]}:")


def _open_like(spec: tuple[str, str]):
    """Reopen a ledger in a child process from (kind, location)."""
    kind, where = spec
    if kind == "sqlite":
        return SqliteLedger(Path(where))
    url, prefix = where.split("|")
    return RedisLedger(url, prefix=prefix)


def _spec(ledger) -> tuple[str, str]:
    if isinstance(ledger, SqliteLedger):
        return ("sqlite", str(ledger.path))
    return ("redis", f"{ledger.url}|{ledger.p}")


def test_queued_processing_done_after_all_segments(ledger):
    ev = make_event()
    ledger.record_queued(ev)
    rec = ledger.get(ev.event_id)
    assert rec.status is EventStatus.queued
    assert (rec.tenant_id, rec.user_id, rec.device_id, rec.kind) == ("acme", "alice", "laptop", MediaKind.screenshot)
    assert rec.object_key == ev.object_key and rec.sha256 == ev.sha256

    ledger.mark(ev.event_id, EventStatus.processing, stage="ingest")
    ledger.expect_segments(ev.event_id, 3)
    assert ledger.segment_done(ev.event_id, 0, 2) is False
    assert ledger.segment_done(ev.event_id, 0, 2) is False  # repeated (redelivered task): no double count
    rec = ledger.get(ev.event_id)
    assert (rec.status, rec.segments_total, rec.segments_done, rec.observations) == (EventStatus.processing, 3, 1, 2)

    assert ledger.segment_done(ev.event_id, 2, 5) is False
    assert ledger.get(ev.event_id).status is EventStatus.processing  # segment 1 still missing
    assert ledger.segment_done(ev.event_id, 1, 0) is True  # the last one completes the event
    rec = ledger.get(ev.event_id)
    assert (rec.status, rec.segments_done, rec.observations, rec.stage, rec.reason) == (
        EventStatus.done,
        3,
        7,
        None,
        None,
    )

    assert ledger.segment_done(ev.event_id, 1, 0) is False  # done only once
    assert ledger.get(ev.event_id).segments_done == 3


def test_segments_done_before_expectation_do_not_finish(ledger):
    ev = make_event()
    ledger.record_queued(ev)
    assert ledger.segment_done(ev.event_id, 0, 1) is False  # total unknown yet
    assert ledger.get(ev.event_id).status is EventStatus.queued


def test_zero_segments_is_done_at_once(ledger):
    ev = make_event()
    ledger.record_queued(ev)
    ledger.mark(ev.event_id, EventStatus.processing, stage="ingest")
    ledger.expect_segments(ev.event_id, 0)
    rec = ledger.get(ev.event_id)
    assert rec.status is EventStatus.done
    assert rec.segments_total == 0 and rec.reason == "no content to store"


@pytest.mark.parametrize("final", [EventStatus.done, EventStatus.skipped, EventStatus.failed])
def test_final_status_not_overwritten_by_processing_or_queued(ledger, final):
    ev = make_event()
    ledger.record_queued(ev)
    ledger.mark(ev.event_id, final, stage="ingest", reason="why")
    ledger.mark(ev.event_id, EventStatus.processing, stage="perceive")
    ledger.mark(ev.event_id, EventStatus.queued)
    ledger.record_queued(ev)  # a redelivered event is not re-queued
    rec = ledger.get(ev.event_id)
    assert (rec.status, rec.stage, rec.reason) == (final, "ingest", "why")


def test_segment_done_does_not_revive_a_failed_event(ledger):
    ev = make_event()
    ledger.record_queued(ev)
    ledger.expect_segments(ev.event_id, 2)
    ledger.segment_done(ev.event_id, 0, 1)
    ledger.mark(ev.event_id, EventStatus.failed, stage="perceive", reason="OCR crashed")
    assert ledger.segment_done(ev.event_id, 1, 1) is False
    rec = ledger.get(ev.event_id)
    assert (rec.status, rec.stage, rec.reason) == (EventStatus.failed, "perceive", "OCR crashed")


def test_record_queued_is_a_no_op_for_known_events(ledger):
    ev = make_event()
    ledger.record_queued(ev)
    ledger.mark(ev.event_id, EventStatus.processing, stage="ingest")
    ledger.record_queued(ev)
    assert ledger.get(ev.event_id).status is EventStatus.processing


def test_recording_a_known_event_again_is_one_read_on_redis(redis_server):
    # ingest records every event the publisher already recorded: one EXISTS, no optimistic transaction
    ledger = RedisLedger(redis_server, prefix=f"test-{uuid.uuid4().hex[:8]}:")
    ev = make_event()
    ledger.record_queued(ev)

    def calls() -> dict[str, int]:
        return {k.removeprefix("cmdstat_"): v["calls"] for k, v in ledger.r.info("commandstats").items()}

    before = calls()
    ledger.record_queued(ev)
    after = calls()
    grew = {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}
    assert grew.pop("info", 0) <= 1 and grew == {"exists": 1}, grew


def test_each_step_of_an_event_is_one_round_trip_on_redis(redis_server):
    # the steps every event takes run as server-side scripts (EVALSHA), not optimistic transactions
    # (WATCH, reads, MULTI/EXEC: three or four round trips each)
    ledger = RedisLedger(redis_server, prefix=f"test-{uuid.uuid4().hex[:8]}:")
    warm, ev = make_event(), make_event()
    for e in (warm, ev):  # the first use of each script loads it (NOSCRIPT, then SCRIPT LOAD): not counted
        ledger.record_queued(e)
        ledger.mark(e.event_id, EventStatus.processing, stage="ingest")
        ledger.claim_content(e.tenant_id, e.user_id, e.sha256 + str(e.event_id), e.event_id)
        ledger.expect_segments(e.event_id, 2)
        ledger.segment_done(e.event_id, 0, 1)

    def calls() -> dict[str, int]:
        return {k.removeprefix("cmdstat_"): v["calls"] for k, v in ledger.r.info("commandstats").items()}

    for step in (
        lambda: ledger.mark(ev.event_id, EventStatus.processing, stage="perceive"),
        lambda: ledger.claim_content(ev.tenant_id, ev.user_id, "other", ev.event_id),
        lambda: ledger.expect_segments(ev.event_id, 2),
        lambda: ledger.segment_done(ev.event_id, 1, 3),
    ):
        before = calls()
        step()
        grew = {k: n - before.get(k, 0) for k, n in calls().items() if n != before.get(k, 0)}
        # the server counts the commands a script runs too; a transaction would show WATCH, MULTI and EXEC
        assert grew.get("evalsha") == 1 and not {"watch", "multi", "exec", "hgetall"} & grew.keys(), grew
    rec = ledger.get(ev.event_id)
    assert (rec.status, rec.segments_done, rec.observations) == (EventStatus.done, 2, 4)


def test_the_scripts_are_loaded_again_after_the_server_forgot_them(redis_server):
    # a restarted redis-server (or SCRIPT FLUSH) knows no script: redis-py's Script loads it again on NOSCRIPT
    ledger = RedisLedger(redis_server, prefix=f"test-{uuid.uuid4().hex[:8]}:")
    ev = make_event()
    ledger.record_queued(ev)
    ledger.mark(ev.event_id, EventStatus.processing, stage="ingest")
    ledger.r.script_flush()
    ledger.expect_segments(ev.event_id, 1)
    assert ledger.segment_done(ev.event_id, 0, 2) is True
    assert ledger.get(ev.event_id).status is EventStatus.done


def test_unknown_events(ledger):
    assert ledger.get(uuid.uuid4()) is None
    with pytest.raises(KeyError):
        ledger.mark(uuid.uuid4(), EventStatus.done)


def test_claim_content_exact_duplicates(ledger):
    first, second = make_event(content=b"same"), make_event(content=b"same")
    for ev in (first, second):
        ledger.record_queued(ev)
    assert ledger.claim_content("acme", "alice", first.sha256, first.event_id) is None
    assert ledger.claim_content("acme", "alice", first.sha256, first.event_id) is None  # re-run of the holder
    assert ledger.claim_content("acme", "alice", second.sha256, second.event_id) == first.event_id
    other_tenant = make_event(tenant="globex", content=b"same")
    ledger.record_queued(other_tenant)
    assert ledger.claim_content("globex", "alice", other_tenant.sha256, other_tenant.event_id) is None  # per tenant
    other_user = make_event(user="bob", content=b"same")
    ledger.record_queued(other_user)
    assert ledger.claim_content("acme", "bob", other_user.sha256, other_user.event_id) is None  # and per user


def test_claim_content_blocked_while_holder_in_flight_or_done(ledger):
    first, second = make_event(content=b"c"), make_event(content=b"c")
    for ev in (first, second):
        ledger.record_queued(ev)
    ledger.claim_content("acme", "alice", first.sha256, first.event_id)
    for status in (EventStatus.processing, EventStatus.done, EventStatus.skipped):
        ledger.mark(first.event_id, status)
        assert ledger.claim_content("acme", "alice", second.sha256, second.event_id) == first.event_id


def test_failed_earlier_event_does_not_block_retry(ledger):
    first, second, third = (make_event(content=b"retry") for _ in range(3))
    for ev in (first, second, third):
        ledger.record_queued(ev)
    assert ledger.claim_content("acme", "alice", first.sha256, first.event_id) is None
    ledger.mark(first.event_id, EventStatus.failed, stage="perceive", reason="transient")
    assert ledger.claim_content("acme", "alice", second.sha256, second.event_id) is None  # takes over the content
    assert ledger.claim_content("acme", "alice", third.sha256, third.event_id) == second.event_id


def test_swap_frame_near_duplicates(ledger):
    a, b, c, d = (uuid.uuid4() for _ in range(4))
    calls: list[tuple[str, str]] = []

    def near(prev: str, new: str) -> bool:
        calls.append((prev, new))
        return prev[:2] == new[:2]

    assert ledger.swap_frame("acme", "laptop", "aa01", a, near) is None  # first frame is kept
    assert calls == []  # nothing to compare with
    assert ledger.swap_frame("acme", "laptop", "aa02", b, near) == a  # near-duplicate of the kept frame
    assert calls == [("aa01", "aa02")]
    assert ledger.swap_frame("acme", "laptop", "bb01", c, near) is None  # different: becomes the kept one
    assert ledger.swap_frame("acme", "laptop", "aa03", d, near) is None  # compared with bb01, not aa01
    assert calls[-1] == ("bb01", "aa03")
    assert ledger.swap_frame("acme", "laptop", "aa03", d, near) is None  # a re-run of the kept frame
    assert ledger.swap_frame("acme", "phone", "aa04", uuid.uuid4(), near) is None  # per device
    assert ledger.swap_frame("globex", "laptop", "aa05", uuid.uuid4(), near) is None  # per tenant


def test_counts_and_records(ledger):
    events = [make_event(content=bytes([i])) for i in range(5)]
    other = make_event(tenant="globex", content=b"g")
    for ev in (*events, other):
        ledger.record_queued(ev)
    ledger.mark(events[0].event_id, EventStatus.failed, stage="ingest", reason="empty file (0 bytes)")
    ledger.mark(events[1].event_id, EventStatus.skipped, stage="ingest", reason="exact duplicate")
    ledger.mark(events[2].event_id, EventStatus.processing, stage="perceive")
    ledger.expect_segments(events[3].event_id, 0)

    assert ledger.counts("acme") == {
        EventStatus.failed: 1,
        EventStatus.skipped: 1,
        EventStatus.processing: 1,
        EventStatus.done: 1,
        EventStatus.queued: 1,
    }
    assert ledger.counts("globex") == {EventStatus.queued: 1}
    assert sum(ledger.counts().values()) == 6

    failed = ledger.records("acme", EventStatus.failed)
    assert [(r.event_id, r.stage, r.reason) for r in failed] == [(events[0].event_id, "ingest", "empty file (0 bytes)")]
    assert {r.event_id for r in ledger.records("acme")} == {e.event_id for e in events}
    assert [r.event_id for r in ledger.records("globex")] == [other.event_id]
    assert len(ledger.records(limit=2)) == 2
    newest = ledger.records("acme", limit=1)[0]  # newest first: the last updated
    assert newest.event_id == events[3].event_id


def test_ledger_persists_across_instances(tmp_path):
    ev = make_event()
    SqliteLedger(tmp_path / "l.sqlite").record_queued(ev)
    again = SqliteLedger(tmp_path / "l.sqlite")
    assert again.get(ev.event_id).status is EventStatus.queued


def _segment_worker(spec, event_id: str, first: int, count: int, barrier, results) -> None:
    """Child process: record ``count`` segments from ``first`` on; put how many calls finished the event."""
    led = _open_like(spec)
    barrier.wait()
    finished = sum(led.segment_done(uuid.UUID(event_id), i, 1) for i in range(first, first + count))
    results.put(finished)


def test_concurrent_segment_done_from_processes(ledger):
    procs_n, per_proc = 4, 50
    ev = make_event()
    ledger.record_queued(ev)
    ledger.mark(ev.event_id, EventStatus.processing, stage="ingest")
    # the ranges overlap by half: every segment but the first and last 25 is recorded twice
    total = per_proc * procs_n // 2 + per_proc // 2
    ledger.expect_segments(ev.event_id, total)
    ctx = mp.get_context("spawn")  # the test process may hold threads (models): no fork
    barrier, results = ctx.Barrier(procs_n), ctx.Queue()
    procs = [
        ctx.Process(
            target=_segment_worker,
            args=(_spec(ledger), str(ev.event_id), p * per_proc // 2, per_proc, barrier, results),
        )
        for p in range(procs_n)
    ]
    for p in procs:
        p.start()
    finished = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    rec = ledger.get(ev.event_id)
    assert sum(finished) == 1  # exactly one call saw the event complete
    assert (rec.status, rec.segments_total, rec.segments_done, rec.observations) == (
        EventStatus.done,
        total,
        total,
        total,
    )


def test_stalled_events_are_claimed_for_redelivery_then_given_up(ledger):
    """Events queued or processing without progress are handed back (the full event, for publishing again)
    once per stall period; after ``max_redeliveries`` they are failed with the reason. Done events, events
    that progressed and fresh events are left alone."""
    import time

    queued, processing, progressing, done, fresh = (make_event(content=c) for c in (b"q", b"p", b"g", b"d", b"f"))
    for ev in (queued, processing, progressing, done):
        ledger.record_queued(ev)
    for ev in (processing, progressing):
        ledger.mark(ev.event_id, EventStatus.processing, stage="ingest")
        ledger.expect_segments(ev.event_id, 3)
    ledger.mark(done.event_id, EventStatus.done)
    time.sleep(0.4)
    ledger.segment_done(progressing.event_id, 0, 2)  # progress resets its stall clock
    ledger.record_queued(fresh)
    assert ledger.done_segments(progressing.event_id) == {0}

    events, given_up = ledger.claim_stalled(0.3, max_redeliveries=1)
    assert sorted(e.event_id for e in events) == sorted([queued.event_id, processing.event_id])
    assert {e.event_id: e for e in events}[queued.event_id] == queued  # the whole event, for publishing again
    assert given_up == []
    assert ledger.claim_stalled(0.3, max_redeliveries=1) == ([], [])  # claimed: left alone for a stall period
    assert ledger.get(processing.event_id).status is EventStatus.processing

    time.sleep(0.4)
    events, given_up = ledger.claim_stalled(0.3, max_redeliveries=1)
    assert events == [] or {e.event_id for e in events} <= {progressing.event_id, fresh.event_id}
    assert sorted(given_up) == sorted([queued.event_id, processing.event_id])
    rec = ledger.get(processing.event_id)
    assert rec.status is EventStatus.failed and rec.stage == "ingest"
    assert rec.reason.startswith("stalled: no progress for 0 s after 1 redeliveries")
    assert ledger.get(done.event_id).status is EventStatus.done


def test_forgetting_a_users_events(ledger):
    """user_events lists one user's events; forget_events drops them with their segments, content claims and
    last kept frames; object_references counts what still references an object."""
    mine = [make_event(content=b"shared"), make_event(content=b"mine", device="phone")]
    theirs = make_event(user="bob", content=b"shared")
    other_tenant = make_event(tenant="globex", content=b"mine")
    for ev in (*mine, theirs, other_tenant):
        ledger.record_queued(ev)
    ledger.expect_segments(mine[0].event_id, 1)
    ledger.segment_done(mine[0].event_id, 0, 3)
    assert ledger.claim_content("acme", "alice", mine[1].sha256, mine[1].event_id) is None
    assert ledger.swap_frame("acme", "phone", "ff" * 8, mine[1].event_id, lambda a, b: a == b) is None
    assert [r.event_id for r in ledger.user_events("acme", "alice")] == [e.event_id for e in mine]
    assert ledger.object_references("acme", mine[0].object_key) == 2

    assert ledger.forget_events("globex", [e.event_id for e in mine]) == 0  # another tenant's ids: untouched
    assert ledger.forget_events("acme", [e.event_id for e in mine]) == 2
    assert ledger.user_events("acme", "alice") == [] and ledger.get(mine[0].event_id) is None
    assert ledger.done_segments(mine[0].event_id) == set()
    assert ledger.object_references("acme", mine[0].object_key) == 1  # bob's event still references it
    assert ledger.object_references("acme", mine[1].object_key) == 0
    assert ledger.counts("acme") == {EventStatus.queued: 1} and ledger.get(other_tenant.event_id) is not None
    # the same content and frame are new again
    again = make_event(content=b"mine", device="phone")
    assert ledger.claim_content("acme", "alice", again.sha256, again.event_id) is None
    assert ledger.swap_frame("acme", "phone", "ff" * 8, again.event_id, lambda a, b: a == b) is None


def test_segments_recorded_together_finish_their_events_as_one_by_one(ledger):
    """``segments_done`` records the segments of several events at once (one SQLite transaction, one Redis
    pipeline) with ``segment_done``'s outcome for each; an unknown event raises KeyError."""
    a, b, c = make_event(), make_event(), make_event()
    for ev, total in ((a, 2), (b, 1), (c, 3)):
        ledger.record_queued(ev)
        ledger.mark(ev.event_id, EventStatus.processing, stage="ingest")
        ledger.expect_segments(ev.event_id, total)
    assert ledger.segments_done(
        [(a.event_id, 0, 4), (b.event_id, 0, 2), (a.event_id, 1, 3), (c.event_id, 0, 1), (a.event_id, 1, 3)]
    ) == [False, True, True, False, False]
    assert [ledger.get(e.event_id).status for e in (a, b, c)] == [
        EventStatus.done,
        EventStatus.done,
        EventStatus.processing,
    ]
    assert (ledger.get(a.event_id).segments_done, ledger.get(a.event_id).observations) == (2, 7)
    assert ledger.segments_done([(c.event_id, 1, 1)]) == [False]
    assert ledger.segments_done([]) == []
    with pytest.raises(KeyError):
        ledger.segments_done([(c.event_id, 2, 1), (uuid.uuid4(), 0, 1)])


def _die_holding_work(spec: tuple[str, str], event_id: str) -> None:
    """A child process that starts a piece of work and dies (no end_work): as a pool process killed mid-task."""
    import os

    _open_like(spec).begin_work(uuid.UUID(event_id), "perceive:0")
    os._exit(1)


def test_unfinished_work_outlives_the_process_that_died_running_it(ledger):
    """begin_work counts the starts of one piece of work that have not ended; end_work takes its own start
    back, whatever the count; a process that died running the work leaves its start counted for the next
    process; each work and event counts apart; forgetting the event forgets the count; work that ended leaves
    no row or key."""
    ev, other = make_event(content=b"a"), make_event(content=b"b")
    ledger.record_queued(ev)
    assert ledger.begin_work(ev.event_id, "perceive:0") == 1
    ledger.end_work(ev.event_id, "perceive:0")
    assert ledger.begin_work(ev.event_id, "perceive:0") == 1  # ended: starts again from one
    ledger.end_work(ev.event_id, "perceive:0")
    for _ in range(2):
        child = mp.get_context("spawn").Process(target=_die_holding_work, args=(_spec(ledger), str(ev.event_id)))
        child.start()
        child.join(60)
        assert child.exitcode == 1
    assert ledger.begin_work(ev.event_id, "perceive:1") == 1  # another segment, another count
    assert ledger.begin_work(other.event_id, "perceive:0") == 1  # another event
    assert ledger.begin_work(ev.event_id, "perceive:0") == 3  # two deaths before this start
    ledger.end_work(ev.event_id, "perceive:0")
    assert ledger.begin_work(ev.event_id, "perceive:0") == 3
    ledger.end_work(ev.event_id, "perceive:0")
    assert ledger.forget_events("acme", [ev.event_id]) == 1
    assert ledger.begin_work(ev.event_id, "perceive:0") == 1
    # work that ended leaves nothing behind
    done = make_event(content=b"c")
    ledger.begin_work(done.event_id, "perceive:0")
    ledger.end_work(done.event_id, "perceive:0")
    if isinstance(ledger, RedisLedger):
        assert not ledger.r.exists(f"{ledger.p}event:{done.event_id}:unfinished")
    else:
        import sqlite3

        with sqlite3.connect(ledger.path) as db:
            assert db.execute("SELECT COUNT(*) FROM unfinished WHERE event_id=?", (str(done.event_id),)).fetchone() == (
                0,
            )
