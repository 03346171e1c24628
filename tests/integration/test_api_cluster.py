"""The distributed mode end to end through the HTTP API: the SDK (``api.client.EngramClient``) hashes, uploads
through presigned URLs to a real SeaweedFS S3 and publishes to the API (uvicorn in a thread, as ``engram
serve`` runs it), which queues on a real redis-server; ``engram worker --role cpu`` (two processes), the one
store worker of Qdrant's local mode (``--role store --pool solo``) and ``engram beat`` (consolidation every
3 s) run as separate processes, as a user starts them.

Events are followed through ``GET /v1/events/{id}`` only. Observations are counted in Qdrant's local mode
after the store worker has stopped (one process at a time): per event, as many as the ledger says, and no
two for the same message or segment. Each test has its own Redis database (or server), S3 bucket, data dir
and tenant; the process-wide Celery app is never touched (the rest of the suite keeps running eagerly).
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engram.api.client import FINAL, EngramClient
from engram.schemas.events import EventStatus, MediaKind
from engram.schemas.memories import MemoryType
from engram.schemas.settings import Settings
from tests.cluster import (
    Cluster,
    broker_state,
    drain_consolidation,
    local_store,
    producer,
    scrape,
    serve_api,
    total,
    wait_quiet,
)
from tests.conftest import eval_data_dir
from tests.servers import S3Server
from tests.workload import USERS, Item, chats_and_screens, speech_files

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@dataclass
class Stack:
    """A running cluster, the API in front of it and one tenant's API key."""

    cluster: Cluster
    settings: Settings
    redis_url: str
    api_url: str
    api_key: str
    tenant: str
    app: object  # the test's Celery producer for the cluster (tests.cluster.producer)
    nodes: list[str] = field(default_factory=list)

    def client(self, **kw) -> EngramClient:
        return EngramClient(self.api_url, self.api_key, **kw)


def mixed_items(folder: Path, total: int = 60) -> list[Item]:
    """``total`` mixed events: speech recordings, real screenshots (and real speech) from ENGRAM_EVAL_DATA
    when present, a truncated PNG (must fail in ingest with a reason), the same bytes as an earlier chat
    from another device (an exact duplicate: skipped), and conversations and screenshots for the rest."""
    folder.mkdir(parents=True, exist_ok=True)
    special: list[Item] = []
    for i, path in enumerate(speech_files(folder)):
        special.append(Item(path, USERS[i % len(USERS)], f"{USERS[i % len(USERS)]}-recorder", None))
    data = eval_data_dir()
    real = [
        (data / "screens" / "screenpipe_testing_OCR.png", "alice", "alice-desktop"),
        (data / "screens" / "screenpipe_testing_OCR_chinese.png", "carol", "carol-desktop"),
        (data / "audio" / "jfk.flac", "bob", "bob-recorder"),
    ]
    special += [
        Item(p, user, device, None)
        for p, user, device in real
        if p.exists() and not any(s.path.name == p.name for s in special)
    ]
    items = chats_and_screens(folder, total - len(special) - 2, "mix")
    broken = folder / "broken.png"
    broken.write_bytes(next(i for i in items if i.path.suffix == ".png").path.read_bytes()[:200])
    special.append(Item(broken, "alice", "alice-laptop-broken", 0, EventStatus.failed))
    first_chat = next(i for i in items if i.path.suffix == ".jsonl")
    special.append(Item(first_chat.path, first_chat.user, f"{first_chat.user}-tablet", 0, EventStatus.skipped))
    out = special[:-2] + items + special[-2:]  # the slow ones (speech, real files) first
    assert len(out) == total
    return out


# --- the cluster behind the API -----------------------------------------------------------------------


@pytest.fixture
def make_stack(seaweedfs_s3: S3Server, tmp_path) -> Iterator:
    """A factory: ``make_stack(redis_url, tenant, ...)`` flushes the Redis database, starts the cluster's
    processes (``Cluster.start_distributed``) and the API, creates an API key for ``tenant`` and returns a
    Stack. Everything it started is stopped at teardown."""
    import redis

    from engram.api.http.keys import create_key

    stacks = ExitStack()

    def make(
        redis_url: str,
        tenant: str,
        cpu_workers: int = 2,
        visibility_timeout: float = 1800.0,
        beat: bool = True,
        metrics: bool = False,
    ) -> Stack:
        redis.Redis.from_url(redis_url).flushdb()
        data = tmp_path / "data"
        values = dict(
            broker_url=redis_url,
            data_dir=data,
            s3_endpoint=seaweedfs_s3.endpoint,
            s3_access_key=seaweedfs_s3.access_key,
            s3_secret_key=seaweedfs_s3.secret_key,
            s3_bucket=f"api-{uuid.uuid4().hex[:12]}",
            broker_visibility_timeout=visibility_timeout,
            consolidate_interval_seconds=3.0,
            api_search_timeout_seconds=60,
            api_public_metrics=True,
            api_rate_limit="",
        )  # rate limits: tests/api/test_ratelimit.py
        settings = Settings(**values)
        env = {f"ENGRAM_{k.upper()}": str(v) for k, v in values.items() if not k.startswith("api_")} | {
            "ENGRAM_TENANT": tenant
        }
        cluster = Cluster.create(tmp_path / "cluster", env)
        stacks.callback(cluster.stop_all)
        nodes = cluster.start_distributed(cpu_workers=cpu_workers, beat=beat, metrics=metrics)
        app = producer(settings)
        stacks.callback(app.close)
        url = stacks.enter_context(serve_api(settings))
        r = redis.Redis.from_url(redis_url, decode_responses=True)
        key = create_key(r, tenant)
        r.close()
        cluster.wait_ready(app, nodes, timeout=120)
        return Stack(cluster, settings, redis_url, url, key, tenant, app, nodes)

    with stacks:
        yield make


def db_url(redis_url: str, db: int) -> str:
    return redis_url.rsplit("/", 1)[0] + f"/{db}"


def publish(client: EngramClient, items: list[Item]) -> dict[uuid.UUID, Item]:
    """Publish each item through the SDK (hash, presigned upload, POST /v1/events); returns them by event id."""
    out = {}
    for it in items:
        res = client.publish(
            it.path, user=it.user, device=it.device, captured_at=it.captured_at, app=it.app, window=it.window
        )
        assert not res.duplicate and res.status is EventStatus.queued, (it.path.name, res)
        out[res.event_id] = it
    return out


def wait_final(stack: Stack, client: EngramClient, ids, timeout: float) -> dict:
    """Each event's final status (GET /v1/events/{id}); on timeout, fails naming the pending ones with the
    broker's state and the workers' logs."""
    try:
        return client.wait(ids, timeout=timeout, interval=1.0)
    except TimeoutError as exc:
        pending = {i: s for i in ids if (s := client.event_status(i)).status not in FINAL}
        lines = "\n".join(
            f"{i} {s.status.value}@{s.stage}:\n{trace(stack.cluster, str(i))}" for i, s in pending.items()
        )
        raise AssertionError(
            f"{exc}; broker (queued, unacked) {broker_state(stack.redis_url)}; the workers' warnings "
            f"and errors naming each pending event:\n{lines}\n"
            f"where deliveries may have been dropped:\n{drops(stack.cluster)}"
        ) from None


DROP_SIGNS = (
    "cannot be acknowledged",
    "Giving up refused callback publish",
    "reject requeue=False",
    "raised unexpected",
)


def drops(cluster: Cluster, width: int = 260) -> str:
    """The log lines where Celery gave up a delivery (a task cancelled or failed after a connection loss, a
    callback that could not be published, a retry that could not be sent and was rejected)."""
    out = [
        f"  {name}: {line[:width]}"
        for name in cluster.procs
        if cluster.log_path(name).exists()
        for line in cluster.log_path(name).read_text(errors="replace").splitlines()
        if any(sign in line for sign in DROP_SIGNS)
    ]
    return "\n".join(out[:30]) or "  (none logged)"


def trace(cluster: Cluster, event_id: str, width: int = 260) -> str:
    """The WARNING and ERROR lines of the workers' logs that name ``event_id`` (directly, or through the
    request of a task whose arguments carry it), and the lines naming those tasks' ids."""
    import re

    logs = {
        n: cluster.log_path(n).read_text(errors="replace").splitlines()
        for n in cluster.procs
        if cluster.log_path(n).exists()
    }
    task_ids = {event_id} | {
        t
        for lines in logs.values()
        for line in lines
        if event_id in line
        for t in re.findall(r"\[([0-9a-f-]{36})\]", line)
    }
    out = [
        f"  {name}: {line[:width]}"
        for name, lines in logs.items()
        for line in lines
        if any(t in line for t in task_ids) and ("WARNING" in line or "ERROR" in line or " reject" in line)
    ]
    return "\n".join(out[:15]) or "  (no warning or error names it)"


def check_final(by_event: dict[uuid.UUID, Item], final: dict) -> None:
    """Every event has the status its item expects; failed and skipped ones name a stage and a reason."""
    wrong = [
        (it.path.name, final[eid].status.value, final[eid].stage, final[eid].reason)
        for eid, it in by_event.items()
        if final[eid].status is not it.status
    ]
    assert not wrong, wrong
    for eid, st in final.items():
        if st.status is not EventStatus.done:
            assert st.stage and st.reason, st
        if st.status is EventStatus.skipped:
            assert "exact duplicate" in st.reason, st
        expected = by_event[eid].observations
        if st.status is EventStatus.done and expected is not None:
            assert st.observations == expected, (by_event[eid].path.name, st)


def wait_memories(stack: Stack, client: EngramClient, users, timeout: float) -> None:
    """Until every user finds episodic memories through POST /v1/search (beat's consolidation made them)."""
    deadline = time.monotonic() + timeout
    missing = list(users)
    while missing:
        missing = [
            u for u in missing if not client.search("notes plans week", user=u, memory_types=[MemoryType.episodic]).hits
        ]
        if missing and time.monotonic() > deadline:
            raise AssertionError(
                f"no episodic memories for {missing} after {timeout:.0f} s\n"
                f"{stack.cluster.tail('beat')}\n{stack.cluster.tail('store')}"
            )
        time.sleep(1.0)


def check_metrics(stack: Stack, api_before: dict, final: dict) -> None:
    """The api's /metrics (a delta: the api runs in the test process) counts every event received and the
    queue depths; the workers' /metrics together count each event's final status once, by kind, and the
    observations written, equal to the ledger's figures."""
    api = scrape(f"{stack.api_url}/metrics")
    assert total(api, "engram_events_received_total") - total(api_before, "engram_events_received_total") == len(final)
    searches = "engram_search_duration_seconds_count"
    assert total(api, searches) > total(api_before, searches)
    assert {dict(items)["queue"] for (n, items) in api if n == "engram_queue_depth"} >= {"ingest", "store", "query"}

    workers = [scrape(f"http://127.0.0.1:{port}/metrics") for port in stack.cluster.metrics_ports.values()]
    assert len(workers) == 3

    def summed(name: str, **labels: str) -> float:
        return sum(total(w, name, **labels) for w in workers)

    for status in ("done", "skipped", "failed"):
        assert summed("engram_events_finished_total", status=status) == sum(
            st.status.value == status for st in final.values()
        ), status
    assert summed("engram_events_finished_total", status="skipped", reason="exact_duplicate") == 1
    assert summed("engram_events_finished_total", status="failed", stage="ingest", reason="bad_input") == 1
    done_kinds = Counter(st.kind.value for st in final.values() if st.status is EventStatus.done)
    for kind, n in done_kinds.items():
        assert summed("engram_events_finished_total", status="done", kind=kind) == n, kind
    assert summed("engram_observations_written_total") == sum(st.observations for st in final.values())
    for name in ("ingest", "perceive", "embed", "link", "store"):
        assert summed("engram_stage_duration_seconds_count", stage=name) > 0, name
    stored = sum(1 for st in final.values() if st.status is EventStatus.done and st.segments_total)
    assert summed("engram_publish_to_searchable_seconds_count") == stored


def stop_and_count(stack: Stack, final: dict, users) -> dict[str, int]:
    """Stop beat, let every task and consolidation finish, stop the workers (a clean exit each), then in
    Qdrant's local mode: per event exactly the ledger's number of observations (none for skipped or failed
    events, none of unknown events), no two for the same segment, message or time span, all consolidated,
    each in exactly one episodic memory, and episodic memories for every user. Returns counts."""
    from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter

    cluster = stack.cluster
    if "beat" in cluster.procs:
        cluster.kill("beat", signal.SIGTERM)
    wait_quiet(stack.redis_url, 120, cluster)
    drain_consolidation(stack.app, cluster=cluster)
    wait_quiet(stack.redis_url, 60, cluster)
    for name in [n for n in cluster.procs if n != "beat"]:
        assert cluster.kill(name, signal.SIGTERM) == 0, cluster.tail(name)

    with local_store(stack.settings.data_dir) as store:
        points = store.scroll(OBSERVATIONS, tenant_filter(stack.tenant))
        memories = store.scroll(MemoryType.episodic.value, tenant_filter(stack.tenant))
    per_event = Counter(p.payload["event_id"] for p in points)
    expected = {
        str(eid): st.observations for eid, st in final.items() if st.status is EventStatus.done and st.observations
    }
    assert dict(per_event) == expected
    units = Counter(
        (
            p.payload["event_id"],
            p.payload["segment_index"],
            p.payload.get("message_id"),
            p.payload.get("start_s"),
            p.payload.get("end_s"),
        )
        for p in points
    )
    assert [u for u, n in units.items() if n > 1] == []
    assert all(p.payload["consolidated"] for p in points), "observations left unconsolidated"

    assert {m.payload["user_id"] for m in memories} == set(users)
    covered = Counter(str(o) for m in memories for o in m.payload["provenance"]["observation_ids"])
    uncovered = {str(p.id) for p in points} - set(covered)
    assert not uncovered, f"{len(uncovered)} observations in no episodic memory"
    assert [o for o, n in covered.items() if n > 1] == [], "observations in more than one episodic memory"
    return {"observations": len(points), "episodic": len(memories)}


# --- tests --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_sixty_mixed_events_through_the_api(make_stack, redis_server, tmp_path):
    """60 mixed events (conversations, screenshots, speech, real files) from three users, published by the
    SDK to two cpu workers, the store worker and beat: every event ends done, skipped or failed with a
    reason; each observation is stored exactly once; every user gets episodic memories; a screenshot's text
    is found through POST /v1/search. The /metrics of the api and of each worker (prefork children counted
    through the multiprocess folder) count exactly what the ledger says was processed."""
    t0 = time.monotonic()
    stack = make_stack(db_url(redis_server, 5), "apimix", metrics=True)
    ready = time.monotonic() - t0
    items = mixed_items(tmp_path / "media")
    api_before = scrape(f"{stack.api_url}/metrics")
    with stack.client() as client:
        by_event = publish(client, items)
        published = time.monotonic() - t0
        final = wait_final(stack, client, list(by_event), timeout=360)
        processed = time.monotonic() - t0
        check_final(by_event, final)
        statuses = Counter(s.status.value for s in final.values())
        assert statuses["failed"] == 1 and statuses["skipped"] == 1, statuses
        broken = next(final[e] for e, it in by_event.items() if it.status is EventStatus.failed)
        assert broken.stage == "ingest", broken

        # the text of one synthetic screenshot, rendered there only, is found by OCR and search
        screen_eid, screen = next((e, it) for e, it in by_event.items() if it.user == "bob" and it.app == "Notes")
        topic = screen.window.split(" (")[0]
        hits = client.search(
            screen.window, user="bob", memory_types=[MemoryType.observation], kinds=[MediaKind.screenshot], limit=3
        ).hits
        assert hits and hits[0].kind.value == "screenshot" and hits[0].event_ids == [screen_eid], hits[:1]
        assert all(w in hits[0].text.lower() for w in topic.lower().split()), hits[0].text
        real = next((it for it in items if it.path.name == "screenpipe_testing_OCR.png"), None)
        if real is not None:  # a real desktop screenshot: a code editor showing `receiver_count`
            hits = client.search("receiver_count", user="alice", memory_types=[MemoryType.observation]).hits
            assert any("receiver_count" in h.text for h in hits), [h.text[:80] for h in hits]
        wait_memories(stack, client, USERS, timeout=90)
    check_metrics(stack, api_before, final)
    counts = stop_and_count(stack, final, USERS)
    kinds = Counter(it.path.suffix for it in items)
    print(
        f"\n60 events ({dict(kinds)}; {statuses}): cluster ready {ready:.1f} s, published {published:.1f} s, "
        f"all final {processed:.1f} s; {counts}; total {time.monotonic() - t0:.1f} s"
    )


@pytest.mark.slow
def test_redis_restart_mid_run_loses_nothing(make_stack, restartable_redis, tmp_path):
    """~20 events published, redis-server stopped (SIGTERM: AOF with appendfsync always) while the workers
    process them and started again on the same port and data dir, then the rest published: the workers
    reconnect by themselves, no event is lost (all done) and each observation is stored exactly once."""
    t0 = time.monotonic()
    # a killed delivery comes back after the visibility timeout: short here, above the longest task
    stack = make_stack(restartable_redis.url, "apiredis", visibility_timeout=30.0)
    items = chats_and_screens(tmp_path / "media", 40, "rr")
    with stack.client() as client:
        by_event = publish(client, items[:20])
        deadline = time.monotonic() + 90
        while sum(client.event_status(e).status in FINAL for e in by_event) < 3:
            assert time.monotonic() < deadline, stack.cluster.tails()
            time.sleep(0.2)
        at_stop = Counter(client.event_status(e).status.value for e in by_event)
        waiting, unacked = broker_state(stack.redis_url)
        code = restartable_redis.stop(signal.SIGTERM)
        assert code == 0, restartable_redis.log.read_text()[-2000:]
        time.sleep(3.0)  # long enough for every process to notice
        restartable_redis.start()
        restarted = time.monotonic()
        by_event |= publish(client, items[20:])
        final = wait_final(stack, client, list(by_event), timeout=150)  # the visibility timeout is 30 s
        recovered = time.monotonic() - restarted
    check_final(by_event, final)
    assert stack.cluster.exited() == {}, stack.cluster.tails()
    stack.cluster.wait_ready(stack.app, stack.nodes, timeout=30)  # every worker answers after the restart
    counts = stop_and_count(stack, final, USERS)
    print(
        f"\nredis-server restarted with {dict(at_stop)} of the first 20 events, {waiting} queued and {unacked} "
        f"unacknowledged; all 40 done {recovered:.1f} s after the restart; {counts}; "
        f"total {time.monotonic() - t0:.1f} s"
    )


@pytest.mark.slow
def test_same_event_published_twice_is_stored_once(make_stack, redis_server, tmp_path):
    """The SDK publishes one event id twice (one after the other, then from six threads at once, then again
    once it is done): one ingest, its observations stored once. The same bytes under a new event id are an
    exact duplicate (skipped), stored nowhere."""
    t0 = time.monotonic()
    stack = make_stack(db_url(redis_server, 6), "apidup", beat=False)
    chat, screen = chats_and_screens(tmp_path / "media", 4, "dup")[::3]
    assert chat.path.suffix == ".jsonl" and screen.path.suffix == ".png"
    eid, eid_racing = uuid.uuid4(), uuid.uuid4()
    with stack.client(user=chat.user, device=chat.device) as client:
        first = client.publish(chat.path, event_id=eid)
        second = client.publish(chat.path, event_id=eid)
        assert (first.event_id, second.event_id) == (eid, eid)
        assert first.uploaded and not first.duplicate
        assert second.duplicate and not second.uploaded

        barrier = threading.Barrier(6)

        def race(_: int):
            with stack.client(user=screen.user, device=screen.device) as c:
                barrier.wait()
                return c.publish(screen.path, event_id=eid_racing, app=screen.app, window=screen.window)

        with ThreadPoolExecutor(6) as pool:
            racing = list(pool.map(race, range(6)))
        assert {r.event_id for r in racing} == {eid_racing}
        assert sum(not r.duplicate for r in racing) == 1, racing

        final = wait_final(stack, client, [eid, eid_racing], timeout=90)
        assert final[eid].status is EventStatus.done and final[eid].observations == chat.observations
        assert final[eid_racing].status is EventStatus.done and final[eid_racing].observations == 1
        again = client.publish(chat.path, event_id=eid)
        assert again.duplicate and again.status is EventStatus.done and not again.uploaded

        copy = client.publish(chat.path, event_id=uuid.uuid4())  # same bytes, a new event
        assert not copy.duplicate and not copy.uploaded
        final |= wait_final(stack, client, [copy.event_id], timeout=60)
        assert final[copy.event_id].status is EventStatus.skipped, final[copy.event_id]

    for event_id in (eid, eid_racing, copy.event_id):
        received = stack.cluster.count_in_logs(f"Task workers.ingest.ingest[{event_id}] received", "cpu")
        assert received == 1, (event_id, received)
    counts = stop_and_count(stack, final, {chat.user, screen.user})  # consolidation drained there, no beat
    assert counts["observations"] == chat.observations + 1, counts
    print(
        f"\nsame event published twice: one ingest per event id, stored once ({counts}); "
        f"total {time.monotonic() - t0:.1f} s"
    )
