"""``Ledger.retry`` (the Activity screen's Retry), on SQLite and on a real Redis: a failed event is queued again
with its stage, reason and redeliveries cleared and its event given back; any other event is left alone."""

from __future__ import annotations

import uuid

import pytest

from engram.schemas.events import EventStatus
from engram.workers.stores.ledger import RedisLedger, SqliteLedger
from tests.workers.stores.test_ledger import make_event


@pytest.fixture(params=["sqlite", "redis"])
def ledger(request, tmp_path):
    """A fresh ledger: a SQLite file under ``tmp_path``, or a real Redis server under a fresh key prefix."""
    if request.param == "sqlite":
        return SqliteLedger(tmp_path / "ledger.sqlite")
    url = request.getfixturevalue("redis_server")
    return RedisLedger(url, prefix=f"test-{uuid.uuid4().hex[:8]}:")


def test_a_failed_event_is_queued_again(ledger):
    event = make_event(content=b"retry me")
    ledger.record_queued(event)
    assert ledger.retry(event.event_id) is None  # queued: nothing to retry
    ledger.mark(event.event_id, EventStatus.failed, stage="perceive", reason="the object is gone")
    again = ledger.retry(event.event_id)
    assert again == event
    rec = ledger.get(event.event_id)
    assert rec.status is EventStatus.queued and rec.stage is None and rec.reason is None
    assert [r.event_id for r in ledger.records("acme", EventStatus.failed)] == []
    assert [r.event_id for r in ledger.records("acme", EventStatus.queued)] == [event.event_id]
    assert ledger.retry(event.event_id) is None  # already queued again
    ledger.mark(event.event_id, EventStatus.done)
    assert ledger.retry(event.event_id) is None and ledger.get(event.event_id).status is EventStatus.done
    assert ledger.retry(uuid.uuid4()) is None


class Producer:
    """A Celery producer's ``send_task``, recording what it was asked to publish (the broker is not under test)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list, dict]] = []

    def send_task(self, name: str, args: list, **options) -> None:
        self.sent.append((name, args, options))


def test_the_distributed_service_retries_through_the_ledger_and_ingest(tmp_path):
    from engram.api.service.queue import QueueService
    from engram.workers.tasks import Task

    ledger = SqliteLedger(tmp_path / "ledger.sqlite")
    event = make_event(content=b"retry on the cluster")
    ledger.record_queued(event)
    ledger.mark(event.event_id, EventStatus.failed, stage="ingest", reason="the broker was down")
    producer = Producer()
    svc = QueueService(producer, ledger=ledger)
    assert svc.retry_event("another-tenant", event.event_id) is None and producer.sent == []
    rec = svc.retry_event("acme", event.event_id)
    assert rec is not None and rec.status is EventStatus.queued
    assert [(name, args[0]["event_id"]) for name, args, _ in producer.sent] == [
        (Task.ingest.value, str(event.event_id))
    ]
    assert svc.retry_event("acme", event.event_id) is None  # not failed any more
