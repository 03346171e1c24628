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
