"""Queues of the distributed mode on a real redis-server: beat's stall sweep on a queue of its own, messages
without a representation of their arguments in their headers."""

from __future__ import annotations

import base64
import json

import pytest
from celery import Celery

from engram.schemas.events import EventStatus
from engram.schemas.settings import Settings
from engram.workers.app import Queue, configure


@pytest.fixture
def producer(redis_server, tmp_path):
    """A Celery app of its own (the process-wide one stays eager) on database 13 of the test Redis, emptied."""
    import redis

    url = redis_server.rsplit("/", 1)[0] + "/13"
    r = redis.Redis.from_url(url)
    r.flushdb()
    app = Celery("engram-test")
    configure(app, Settings(broker_url=url, data_dir=tmp_path, stalled_after_seconds=60))
    yield app, r
    r.flushdb()


def test_stall_sweep_is_not_queued_behind_an_ingest_backlog(producer):
    app, r = producer
    for _ in range(200):  # a backlog: the sweep used to wait behind it until its expiry (22.5 s here) passed
        app.send_task("workers.ingest.ingest", args=[{}])
    entry = app.conf.beat_schedule["redeliver-stalled"]
    assert entry["options"]["expires"] == 22.5
    app.send_task(entry["task"], **entry["options"])  # as beat sends it
    assert r.llen(Queue.ingest.value) == 200
    [message] = r.lrange(Queue.maintenance.value, 0, -1)
    assert json.loads(message)["headers"]["task"] == "workers.ingest.redeliver_stalled"
    uploads = app.conf.beat_schedule["expire-staged-uploads"]
    app.send_task(uploads["task"])  # routed by name too
    assert r.llen(Queue.maintenance.value) == 2


def test_messages_carry_no_representation_of_their_arguments(producer):
    """A message on the broker holds its arguments in its body only: its ``argsrepr`` header is Celery's ", ..."
    (no repr of the observations it carries, which cost a worker ~0.9 ms an event to make), and the stage
    tasks make none of their results for the log line that would hide it."""
    from engram.workers.app import REPR_MAXSIZE, load_tasks
    from engram.workers.tasks import Task

    app, r = producer
    segment = {"job": {"event": {"event_id": "e" * 36}}, "observations": [{"text": "budget review " * 50}] * 4}
    app.send_task(Task.embed_batched.value, args=[segment], queue=Queue.perceive_gpu.value)
    (raw,) = r.lrange(Queue.perceive_gpu.value, 0, -1)
    message = json.loads(raw)
    assert message["headers"]["argsrepr"] == ", ..." and message["headers"]["kwargsrepr"] == ", ..."
    assert "budget review" in base64.b64decode(message["body"]).decode()  # the body holds them whole
    tasks = load_tasks().tasks
    assert all(
        tasks[t.value].resultrepr_maxsize == REPR_MAXSIZE == 0
        for t in (Task.ingest, Task.perceive, Task.embed_batched, Task.store_batched)
    )


def test_every_worker_serves_the_maintenance_queue(tmp_path):
    from engram.api.processes import MAINTENANCE, Role, plan_worker, worker_argv

    settings = Settings(broker_url="redis://localhost:1/0", data_dir=tmp_path)
    assert MAINTENANCE == Queue.maintenance.value
    for role in Role:
        argv = worker_argv(plan_worker(settings, role=role))
        assert MAINTENANCE in argv[argv.index("--queues") + 1].split(","), role
    argv = worker_argv(plan_worker(settings, queues="perceive.gpu"))
    assert argv[argv.index("--queues") + 1] == "perceive.gpu,maintenance"


def test_each_batched_consumer_has_its_own_window():
    """The model's batches wait longer than the store's (``workers.tasks.BATCH_FLUSH_SECONDS``): the cpu workers
    share the events, the one store worker gets them all."""
    from engram.workers.app import load_tasks
    from engram.workers.tasks import BATCH_FLUSH_EVERY, Task

    tasks = load_tasks().tasks
    embed, store = tasks[Task.embed_batched.value], tasks[Task.store_batched.value]
    assert (embed.flush_every, embed.flush_interval) == (BATCH_FLUSH_EVERY[Task.embed_batched], 0.5)
    assert (store.flush_every, store.flush_interval) == (BATCH_FLUSH_EVERY[Task.store_batched], 0.25)


def test_a_flood_from_one_tenant_does_not_starve_another(redis_server, tmp_path):
    """40 events of one tenant, then one of another, published as the API does (``tenant_priority``), run by a
    real worker process with one slot: the other tenant's event is among the first handled, not the 41st. Each
    event's object is missing, so its real ingest task fails at once: the order of the ledger's final times is
    the order the worker took them."""
    import os
    import subprocess
    import sys
    import time
    import uuid
    from datetime import UTC, datetime
    from pathlib import Path

    import redis
    from cryptography.fernet import Fernet

    from engram.schemas.events import MediaEvent, MediaKind
    from engram.workers.fairness import tenant_priority
    from engram.workers.stores.ledger import open_ledger

    url = redis_server.rsplit("/", 1)[0] + "/14"
    redis.Redis.from_url(url).flushdb()
    settings = Settings(broker_url=url, data_dir=tmp_path / "data")
    app = Celery("engram-test")
    configure(app, settings)
    ledger = open_ledger(settings)

    def publish(tenant: str, i: int) -> MediaEvent:
        event = MediaEvent(
            event_id=uuid.uuid4(),
            tenant_id=tenant,
            user_id="u",
            device_id="d",
            kind=MediaKind.text,
            object_key=f"media/{tenant}/missing-{i}",
            sha256=f"{i:064x}",
            size=10,
            mime_type="application/x-ndjson",
            captured_at=datetime.now(UTC),
        )
        ledger.record_queued(event)
        app.send_task(
            "workers.ingest.ingest",
            args=[event.model_dump(mode="json")],
            task_id=str(event.event_id),
            priority=tenant_priority(ledger, tenant, settings),
        )
        return event

    flood = [publish("flood", i) for i in range(40)]
    small = publish("small", 0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(
        ENGRAM_BROKER_URL=url, ENGRAM_DATA_DIR=str(tmp_path / "data"), ENGRAM_VAULT_KEY=Fernet.generate_key().decode()
    )
    repo = Path(__file__).resolve().parents[2]
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "engram.workers.app",
                "worker",
                "-Q",
                "ingest",
                "--pool",
                "solo",
                "--without-gossip",
                "--without-mingle",
                "-l",
                "warning",
            ],
            cwd=repo,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 180
        ids = [e.event_id for e in [*flood, small]]
        while time.monotonic() < deadline:
            records = [ledger.get(i) for i in ids]
            if all(r.status is EventStatus.failed for r in records):
                break
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(0.5)
        else:
            raise AssertionError(f"not all handled: {(tmp_path / 'worker.log').read_text()[-3000:]}")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    assert all("not found in the object store" in r.reason for r in records)
    order = [r.event_id for r in sorted(records, key=lambda r: r.updated_at)]
    assert order.index(small.event_id) < 5, order.index(small.event_id)  # first in: the 41st


def test_a_long_events_tail_goes_at_lower_priority(tmp_path):
    from engram.workers.fairness import LOWEST, queue_lists, segment_priority

    s = Settings(data_dir=tmp_path)  # 8 segments per step
    assert [segment_priority(0, i, s) for i in (0, 7, 8, 63, 500)] == [0, 0, 1, 7, LOWEST]
    assert segment_priority(3, 0, s) == 3
    assert queue_lists("ingest")[:2] == ["ingest", "ingest\x06\x161"] and len(queue_lists("ingest")) == 10
