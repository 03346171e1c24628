"""Queues of the distributed mode on a real redis-server: beat's stall sweep on a queue of its own."""

from __future__ import annotations

import json

import pytest
from celery import Celery

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


def test_every_worker_serves_the_maintenance_queue(tmp_path):
    from engram.api.processes import MAINTENANCE, Role, plan_worker, worker_argv

    settings = Settings(broker_url="redis://localhost:1/0", data_dir=tmp_path)
    assert MAINTENANCE == Queue.maintenance.value
    for role in Role:
        argv = worker_argv(plan_worker(settings, role=role))
        assert MAINTENANCE in argv[argv.index("--queues") + 1].split(","), role
    argv = worker_argv(plan_worker(settings, queues="perceive.gpu"))
    assert argv[argv.index("--queues") + 1] == "perceive.gpu,maintenance"
