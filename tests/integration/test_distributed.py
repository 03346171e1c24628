"""The distributed mode with real processes: a real redis-server (broker, result backend, ledger), a shared
temporary ENGRAM_DATA_DIR (local object store, Qdrant's local mode), and ``engram worker`` / ``engram beat``
processes started as a user starts them: one ``--role cpu`` worker (ingest, perceive.cpu, perceive.gpu,
prefork) and the one store worker that local mode allows (store, consolidate, query; ``--pool solo``).

The test process publishes with ``api.local.publish_file`` (object stored, event queued in the Redis ledger)
and ``send_task`` of the ingest task. Qdrant is opened here only after the store worker has stopped (local
mode: one process at a time).
"""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engram.schemas.events import EventStatus, MediaEvent
from engram.schemas.memories import MemoryType
from engram.schemas.search import SearchRequest, SearchResponse
from tests.cluster import Cluster, producer
from tests.servers import S3Server
from tests.workload import TOPICS, USERS, Item, make_conversation, make_screenshot

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

TENANT = "dist"
FINAL = (EventStatus.done, EventStatus.skipped, EventStatus.failed)
QUEUES = ("ingest", "perceive.cpu", "perceive.gpu", "store", "consolidate", "query")


def make_items(folder: Path, per_user: int, tag: str) -> list[Item]:
    """``per_user`` files for each user, alternating conversations and screenshots (distinct content)."""
    folder.mkdir(parents=True, exist_ok=True)
    items: list[Item] = []
    start = datetime(2024, 5, 1, 9, tzinfo=UTC)
    n = 0
    for u, user in enumerate(USERS):
        for i in range(per_user):
            topic = TOPICS[(u * per_user + i) % len(TOPICS)]
            when = start + timedelta(days=u, hours=i)
            if i % 2 == 0:
                path = folder / f"{tag}-{user}-chat-{i}.jsonl"
                count = make_conversation(path, f"{tag}-{user}-s{i}", (user, "friend"), topic, when)
                items.append(Item(path, user, f"{user}-phone", count))
            else:
                path = folder / f"{tag}-{user}-screen-{i}.png"
                make_screenshot(path, f"Notes {i} - {user}", [topic, f"item {n} for {user}", tag], seed=n)
                # a device per screenshot stream, so no frame is a near-duplicate of another by chance
                items.append(
                    Item(path, user, f"{user}-laptop-{i}", 1, app="Notes", window=f"{topic} ({tag})", captured_at=when)
                )
            n += 1
    return items


def sender():
    """A producer app for the cluster of the current settings (``tests.cluster.producer``, one per broker)."""
    from engram.schemas.settings import get_settings

    settings = get_settings()
    if settings.broker_url not in _SENDERS:
        _SENDERS[settings.broker_url] = producer(settings)
    return _SENDERS[settings.broker_url]


_SENDERS: dict = {}


def publish(rt, items: list[Item]) -> list[MediaEvent]:
    """Store each file and queue its event in the ledger (``api.local.publish_file``), then send ingest."""
    from engram.api.local import classify, publish_file

    app = sender()

    events = []
    for it in items:
        event = publish_file(rt, classify(it.path), TENANT, it.user, it.device, it.captured_at, it.app, it.window)
        app.send_task("workers.ingest.ingest", args=[event.model_dump(mode="json")])
        events.append(event)
    return events


def wait_final(rt, cluster: Cluster, event_ids: list[uuid.UUID], timeout: float) -> dict:
    """Ledger records of ``event_ids`` once all are final; fails with the workers' logs on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        records = {eid: rt.ledger.get(eid) for eid in event_ids}
        pending = [eid for eid, r in records.items() if r is None or r.status not in FINAL]
        if not pending:
            return records
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{len(pending)} events not final after {timeout:.0f} s, e.g. {records[pending[0]]}\n{cluster.tails()}"
            )
        time.sleep(0.5)


def search(query: str, user: str, types: list[MemoryType]) -> SearchResponse:
    """A search through the query queue (the store worker), answered through the Redis result backend."""
    app = sender()

    req = SearchRequest(query=query, tenant_id=TENANT, user_id=user, memory_types=types, limit=5)
    return SearchResponse.model_validate(
        app.send_task("workers.query.search", args=[req.model_dump(mode="json")]).get(timeout=60)
    )


def wait_memories(cluster: Cluster, timeout: float) -> None:
    """Until every user has episodic memories, written by consolidation that beat started."""
    deadline = time.monotonic() + timeout
    missing = list(USERS)
    while missing:
        missing = [u for u in missing if not search("notes and plans", u, [MemoryType.episodic]).hits]
        if missing and time.monotonic() > deadline:
            raise AssertionError(f"no episodic memories for {missing} after {timeout:.0f} s\n{cluster.tails()}")
        time.sleep(1.0)


def wait_quiet(redis_url: str, timeout: float) -> None:
    """Until no task waits in any queue and none is delivered but unacknowledged (duplicates included)."""
    import redis

    from engram.workers.fairness import queue_depth

    r = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + timeout
    while True:
        waiting = {q: n for q in QUEUES if (n := queue_depth(r, q))}  # every priority step
        unacked = r.hlen("unacked")
        if not waiting and not unacked:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"broker not quiet after {timeout:.0f} s: queued {waiting}, unacked {unacked}")
        time.sleep(0.5)


def cpu_tasks_unacked(redis_url: str) -> list[str]:
    """Names of delivered but unacknowledged tasks of the cpu worker's queues (kombu's ``unacked`` hash:
    JSON [message, exchange, routing key] per delivery tag)."""
    import json

    import redis

    out = []
    for raw in redis.Redis.from_url(redis_url).hvals("unacked"):
        message, _, routing_key = json.loads(raw)
        if routing_key in ("ingest", "perceive.cpu", "perceive.gpu"):
            out.append(message["headers"]["task"])
    return out


def drain_consolidation(timeout: float = 120.0) -> None:
    """Run ``consolidate_due`` through the consolidate queue until no user has unconsolidated observations
    (the queue is FIFO on the single store worker, so the user consolidations it started ran before)."""
    app = sender()

    deadline = time.monotonic() + timeout
    while app.send_task("workers.consolidate.consolidate_due").get(timeout=60):
        assert time.monotonic() < deadline, "consolidation did not settle"
        time.sleep(0.5)


@pytest.fixture
def make_cluster(redis_server, tmp_path, monkeypatch):
    """A factory for a running cluster on a fresh Redis database and data dir; configures this process's
    producer app for it (``sender``); this process's own app stays eager for the rest of the suite."""
    import redis

    from engram.workers.runtime import reset_runtimes

    made: list[Cluster] = []

    def start(
        visibility_timeout: float = 1800.0, cpu_concurrency: int = 2, s3: S3Server | None = None
    ) -> tuple[Cluster, str]:
        url = redis_server.rsplit("/", 1)[0] + "/7"  # a database of its own on the session's redis-server
        redis.Redis.from_url(url).flushdb()
        env = {
            "ENGRAM_BROKER_URL": url,
            "ENGRAM_DATA_DIR": str(tmp_path / "data"),
            "ENGRAM_BROKER_VISIBILITY_TIMEOUT": str(visibility_timeout),
            "ENGRAM_CONSOLIDATE_INTERVAL_SECONDS": "3",
            "ENGRAM_TENANT": TENANT,
        }
        if s3 is not None:  # objects in S3 (SeaweedFS), a bucket of this test's own
            env.update(
                ENGRAM_S3_ENDPOINT=s3.endpoint,
                ENGRAM_S3_ACCESS_KEY=s3.access_key,
                ENGRAM_S3_SECRET_KEY=s3.secret_key,
                ENGRAM_S3_BUCKET=f"dist-{uuid.uuid4().hex[:12]}",
            )
        for var in (
            "ENGRAM_QDRANT_URL",
            "ENGRAM_S3_ENDPOINT",
            "ENGRAM_S3_BUCKET",
            "ENGRAM_RESULT_BACKEND",
            "ENGRAM_REDIS_URL",
        ):
            monkeypatch.delenv(var, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        reset_runtimes()
        cluster = Cluster.create(tmp_path, env)
        made.append(cluster)
        cluster.start(
            "store", ["worker", "--role", "store", "--pool", "solo", "--hostname", "store@test", "--loglevel", "INFO"]
        )
        cluster.start(
            "cpu",
            [
                "worker",
                "--role",
                "cpu",
                "--concurrency",
                str(cpu_concurrency),
                "--hostname",
                "cpu@test",
                "--loglevel",
                "INFO",
            ],
        )
        cluster.start("beat", ["beat", "--loglevel", "INFO"])
        cluster.wait_ready(sender(), ["store@test", "cpu@test"])
        return cluster, url

    yield start
    for cluster in made:
        cluster.stop_all()
    monkeypatch.undo()
    reset_runtimes()


def stop_and_open_store(cluster: Cluster, redis_url: str):
    """Stop beat, let every queued task and consolidation finish, stop the workers, then open the vector
    store here (local mode: only now is it free)."""
    from engram.workers.runtime import reset_runtimes, runtime

    cluster.kill("beat", signal.SIGTERM)
    wait_quiet(redis_url, 120)
    drain_consolidation()
    wait_quiet(redis_url, 60)
    for name in ("cpu", "store"):
        assert cluster.kill(name, signal.SIGTERM) == 0, cluster.tail(name)
    reset_runtimes()
    return runtime()


def check_exactly_once(rt, items_by_event: dict[uuid.UUID, Item], records: dict) -> None:
    """Each done event's observations are stored once (count per event as expected, nothing from other
    events) and marked consolidated; every user has episodic memories; then, each observation is in exactly
    one episodic memory (an expected failure, with the counts, until consolidation has its watermark)."""
    from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter

    points = rt.vectors.scroll(OBSERVATIONS, tenant_filter(TENANT))
    per_event = Counter(p.payload["event_id"] for p in points)
    expected = {
        str(eid): items_by_event[eid].observations for eid, r in records.items() if r.status is EventStatus.done
    }
    assert dict(per_event) == expected
    for eid, rec in records.items():
        if rec.status is EventStatus.done:
            assert rec.observations == items_by_event[eid].observations, rec
    assert all(p.payload["consolidated"] for p in points), "observations left unconsolidated"

    memories = rt.vectors.scroll(MemoryType.episodic.value, tenant_filter(TENANT))
    assert {m.payload["user_id"] for m in memories} == set(USERS)
    covered = Counter(str(o) for m in memories for o in m.payload["provenance"]["observation_ids"])
    uncovered = {str(p.id) for p in points} - set(covered)
    twice = [o for o, n in covered.items() if n > 1]
    assert not uncovered, f"{len(uncovered)} observations in no episodic memory"
    assert not twice, f"{len(twice)} observations in more than one episodic memory"


@pytest.mark.slow
def test_events_through_worker_processes(make_cluster, tmp_path):
    """~20 events (chats, screenshots, a duplicate, a corrupt file, one event sent twice): all final in the
    Redis ledger, observations stored exactly once, searchable through the query worker, episodic
    memories for every user from beat's consolidation."""
    from engram.workers.runtime import runtime

    t0 = time.monotonic()
    cluster, url = make_cluster(cpu_concurrency=1)
    app = sender()
    started = time.monotonic() - t0
    # each process that embeds (the cpu worker's pool child, the solo store worker) loads its text embedder as it
    # starts, before any task (api.processes.warm_up_models)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(
        cluster.count_in_logs("text embedder loaded", n) for n in ("cpu", "store")
    ):
        time.sleep(0.2)
    assert [cluster.count_in_logs("text embedder loaded", n) for n in ("cpu", "store")] == [1, 1], cluster.tails()
    # the store worker serves searches: it has read a time expression too (dateparser loaded before the first one)
    while time.monotonic() < deadline and not cluster.count_in_logs("time-expression parser loaded", "store"):
        time.sleep(0.2)
    assert cluster.count_in_logs("time-expression parser loaded", "store") == 1, cluster.tails()
    # the cpu worker's one pool process runs the embedder on every usable core (processes.pool_model_environment)
    from engram.workers.models.embeddings import usable_cores

    loaded = next(ln for ln in cluster.log_path("cpu").read_text().splitlines() if "text embedder loaded" in ln)
    assert f"threads={usable_cores()}" in loaded, loaded
    rt = runtime()
    items = make_items(tmp_path / "media", per_user=6, tag="run")
    bad = tmp_path / "media" / "run-alice-broken.png"
    bad.write_bytes(items[1].path.read_bytes()[:200])  # a PNG cut short: detected as an image, fails to decode
    items.append(Item(bad, "alice", "alice-laptop-x", 0))
    dup = Item(items[0].path, items[0].user, items[0].device, items[0].observations)  # same content again
    items.append(dup)
    events = publish(rt, items)
    app.send_task("workers.ingest.ingest", args=[events[3].model_dump(mode="json")])  # the same event twice
    by_event = {e.event_id: it for e, it in zip(events, items, strict=True)}

    records = wait_final(rt, cluster, list(by_event), timeout=180)
    processed = time.monotonic() - t0 - started
    statuses = Counter(r.status for r in records.values())
    assert statuses == {EventStatus.done: 18, EventStatus.skipped: 1, EventStatus.failed: 1}, statuses
    broken = records[events[-2].event_id]
    assert broken.status is EventStatus.failed and broken.stage == "ingest" and broken.reason
    pair = sorted(records[e.event_id].status.value for e in (events[0], events[-1]))
    assert pair == ["done", "skipped"]  # whichever ran first is stored, the other is an exact duplicate
    skipped = next(r for r in records.values() if r.status is EventStatus.skipped)
    assert "exact duplicate" in skipped.reason

    # a chat's segments are perceived by its ingest task and go straight to embed_batched (workers.ingest
    # INLINE_PERCEPTION); only the screenshots' segments travel as perceive tasks
    shots = sum(r.status is EventStatus.done and r.kind == "screenshot" for r in records.values())
    chats = sum(r.status is EventStatus.done and r.kind == "text" for r in records.values())
    assert shots and chats, statuses
    received = [
        line
        for line in cluster.log_path("cpu").read_text(errors="replace").splitlines()
        if "Task workers.perceive.perceive[" in line and "] received" in line
    ]
    # (the event sent twice may be planned twice while its first run is not final: its segment again)
    assert shots <= len(received) <= shots + 1, cluster.tail("cpu")
    screen = next(it for it in items if it.user == "bob" and it.path.suffix == ".png")
    topic = screen.window.split(" (")[0]  # rendered on bob's screenshot only: found by OCR in the worker
    hits = search(topic, "bob", [MemoryType.observation]).hits
    assert hits and topic.split()[0] in hits[0].text.lower() and hits[0].kind == "screenshot", hits[:1]
    wait_memories(cluster, timeout=60)

    rt = stop_and_open_store(cluster, url)
    check_exactly_once(rt, by_event, records)
    print(
        f"\ncluster ready in {started:.1f} s; {len(events)} events final in {processed:.1f} s; "
        f"total {time.monotonic() - t0:.1f} s"
    )


@pytest.mark.slow
def test_sigkill_worker_mid_run(make_cluster, tmp_path, request):
    """30 events; the cpu worker (main process and pool children) is SIGKILLed while it works and started
    again: its unacknowledged tasks come back after the visibility timeout and every event ends final with
    each observation stored exactly once. Objects live in S3 (SeaweedFS) here when it is installed."""
    from engram.workers.runtime import runtime

    try:
        s3 = request.getfixturevalue("seaweedfs_s3")
    except pytest.skip.Exception:
        s3 = None  # the local folder then; the kill is what this test is about
    t0 = time.monotonic()
    cluster, url = make_cluster(visibility_timeout=8.0, cpu_concurrency=1, s3=s3)
    rt = runtime()
    items = make_items(tmp_path / "media", per_user=10, tag="kill")
    events = publish(rt, items)
    by_event = {e.event_id: it for e, it in zip(events, items, strict=True)}

    # Kill once a few events are final while the worker holds a task (acks are late and prefetch is one, so
    # between two tasks it may hold none: poll until it does, then kill at once; a task takes far longer than
    # the poll-to-kill gap). The tasks still unacknowledged after the kill are the ones it died holding.
    deadline = time.monotonic() + 120
    while True:
        done = sum(1 for e in events if (r := rt.ledger.get(e.event_id)) and r.status in FINAL)
        if done >= 3 and cpu_tasks_unacked(url):
            break
        assert time.monotonic() < deadline, (
            f"never saw the cpu worker hold a task with {done}/{len(events)} events final\n{cluster.tails()}"
        )
        time.sleep(0.05)
    cluster.kill("cpu", signal.SIGKILL)
    at_kill = done
    assert at_kill < len(events), "every event finished before the kill; nothing was tested"
    lost = cpu_tasks_unacked(url)
    assert lost, "the killed worker held no task; nothing was tested"
    cluster.restart("cpu")

    records = wait_final(rt, cluster, list(by_event), timeout=180)
    assert all(r.status is EventStatus.done for r in records.values()), [
        (r.source_name, r.status, r.reason) for r in records.values() if r.status is not EventStatus.done
    ]
    wait_memories(cluster, timeout=60)
    rt = stop_and_open_store(cluster, url)
    check_exactly_once(rt, by_event, records)
    print(
        f"\nkilled the cpu worker with {at_kill}/{len(events)} events final and {len(lost)} tasks in hand "
        f"({', '.join(sorted(set(lost)))}); "
        f"all final and stored once; objects in {'S3' if s3 else 'the local folder'}; "
        f"total {time.monotonic() - t0:.1f} s"
    )


@pytest.mark.slow
def test_media_that_kill_their_worker_process_fail_alone(make_cluster, tmp_path):
    """A screenshot whose perception kills the pool process running it, each time (SIGKILLed here as soon as it
    starts, as the kernel's out-of-memory killer or a decoder crashing on a hostile file would): Celery puts the
    message back after each death (late acks), the ledger counts the starts that never ended, and the start after
    ``MAX_UNFINISHED_STARTS`` deaths fails the event with the reason instead of killing another process. The
    worker's main process stays up and the events published after it are done."""
    import psutil
    import redis

    from engram.workers.runtime import MAX_UNFINISHED_STARTS, runtime

    t0 = time.monotonic()
    cluster, url = make_cluster(cpu_concurrency=1)
    rt = runtime()
    items = make_items(tmp_path / "media", per_user=2, tag="dies")  # a conversation and a screenshot per user
    poison = next(it for it in items if it.path.suffix == ".png")
    (event,) = publish(rt, [poison])
    counted = f"{rt.ledger.p}event:{event.event_id}:unfinished"  # RedisLedger's key of begin_work's counts
    r = redis.Redis.from_url(url, decode_responses=True)
    worker = psutil.Process(cluster.procs["cpu"].pid)
    kills, deadline = 0, time.monotonic() + 180
    while kills < MAX_UNFINISHED_STARTS:
        assert time.monotonic() < deadline, f"{kills} kills\n{cluster.tails()}"
        if int(r.hget(counted, "perceive:0") or 0) > kills:  # a start not ended: its pool process perceives it
            for child in worker.children():  # one pool process (concurrency 1)
                child.kill()
            kills += 1
        time.sleep(0.01)
    others = [it for it in items if it is not poison]
    events = [event, *publish(rt, others)]
    records = wait_final(rt, cluster, [e.event_id for e in events], timeout=180)
    failed = records[event.event_id]
    assert failed.status is EventStatus.failed and failed.stage == "perceive", failed
    assert f"started {MAX_UNFINISHED_STARTS} times before and never finished" in failed.reason, failed.reason
    assert all(records[e.event_id].status is EventStatus.done for e in events[1:]), [
        (r.source_name, r.status, r.reason) for r in records.values()
    ]
    assert cluster.exited() == {} and worker.is_running(), cluster.tails()
    print(
        f"\n{kills} pool processes killed perceiving one screenshot, then it failed: {failed.reason!r}; "
        f"{len(others)} other events done; total {time.monotonic() - t0:.1f} s"
    )


@pytest.mark.slow
def test_a_bad_segment_in_a_store_batch_fails_alone_on_the_store_worker(make_cluster, tmp_path):
    """The store worker's batched consumer (``store_batched``, celery-batches) gets six embedded chats at once,
    three in one message as the cpu workers' ``embed_batched`` sends them and three alone, one of the three
    together with a dense vector the store refuses: they are linked
    and stored as one batch, the joint upsert fails, each segment then runs alone; five events are done with
    their observations and the bad one failed at stage store with its reason."""
    from engram.api.local import classify, publish_file
    from engram.schemas.jobs import SegmentJob
    from engram.workers.embed import embed_batches
    from engram.workers.perceive import perceive_segments
    from engram.workers.runtime import runtime
    from tests.workload import make_conversation

    cluster, _ = make_cluster(cpu_concurrency=1)
    rt = runtime()
    folder = tmp_path / "media"
    folder.mkdir()
    start = datetime(2024, 5, 1, 9, tzinfo=UTC)
    jobs = []
    for i, topic in enumerate(TOPICS[:6]):
        path = folder / f"batch-{i}.jsonl"
        n = make_conversation(path, f"batch-s{i}", ("alice", "friend"), topic, start + timedelta(hours=i))
        event = publish_file(rt, classify(path), TENANT, "alice", "alice-phone")
        rt.ledger.expect_segments(event.event_id, 1)
        jobs.append(SegmentJob(event=event, segment_index=0, first_message=0, last_message=n))
    # perceived and embedded here, as a cpu worker does (no store is opened for that)
    embedded = embed_batches(rt, perceive_segments(rt, jobs))
    bad = embedded[2]
    for item in bad.items:
        item.dense = item.dense[:7]  # not a 384-d vector
    app = sender()
    # three in one message, as embed_batched sends one pass's segments, and three alone (earlier releases)
    app.send_task("workers.store.store_batched", args=[[b.model_dump(mode="json") for b in embedded[:3]]])
    for batch in embedded[3:]:
        app.send_task("workers.store.store_batched", args=[batch.model_dump(mode="json")])
    records = wait_final(rt, cluster, [j.event.event_id for j in jobs], timeout=120)
    failed = records[bad.job.event.event_id]
    assert failed.status is EventStatus.failed and failed.stage == "store" and failed.reason, failed
    done = [r for eid, r in records.items() if eid != bad.job.event.event_id]
    assert all(r.status is EventStatus.done and r.observations == 4 for r in done), done
    assert cluster.count_in_logs("batch failed; each item runs alone", "store") >= 1, cluster.tail("store")
