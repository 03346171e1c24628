"""The timeline read (``workers.memory.timeline``): ids in order, then the payloads not read lately, kept per open
store; what is kept never shows a deleted observation, another user's or another tenant's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engram.schemas.add import AddMemoryRequest
from engram.schemas.events import EventStatus
from engram.schemas.timeline import TimelineRequest

DAY = datetime(2024, 5, 2, tzinfo=UTC)


@pytest.mark.slow  # 12-20 s: three notes through the embedding model
def test_kept_records_match_a_fresh_read_and_a_deleted_one_is_gone_at_once(engram_env):
    from engram.api.service.embedded import EmbeddedService
    from engram.workers.memory import timeline

    svc = EmbeddedService(linger=60)
    try:
        for i, (user, text) in enumerate(
            [("alice", "piano tuner on Thursday"), ("alice", "dentist at noon"), ("bob", "cello lesson on Friday")]
        ):
            resp = svc.add(AddMemoryRequest(text=text, user_id=user, time=DAY + timedelta(hours=8 + i)), "acme", "x")
            assert resp.status is EventStatus.done
        req = TimelineRequest(tenant_id="acme", user_id="alice", time_from=DAY, time_to=DAY + timedelta(days=1))
        timeline.clear_cache()
        fresh = svc.timeline(req)
        kept = svc.timeline(req)  # every record from what the first read kept
        assert [r.model_dump() for r in kept.items] == [r.model_dump() for r in fresh.items]
        assert [r.text for r in kept.items] == ["alice: dentist at noon", "alice: piano tuner on Thursday"]
        assert kept.total == 2
        assert "text" in kept.items[0].payload and "ocr_lines" not in kept.items[0].payload
        assert [r.user_id for r in svc.timeline(req.model_copy(update={"user_id": None})).items] == [
            "bob",
            "alice",
            "alice",
        ]
        assert svc.timeline(req.model_copy(update={"tenant_id": "globex"})).items == []
        svc.delete_memory("acme", kept.items[0].id)
        after = svc.timeline(req)
        assert [r.text for r in after.items] == ["alice: piano tuner on Thursday"] and after.total == 1
    finally:
        svc.close()
