"""The service layer (``api.service``) on a real embedded store under a temporary ``ENGRAM_DATA_DIR``: notes added
and a rendered screenshot ingested for real, then every call of ``MemoryService`` on them (search, memories,
timeline with its filters, the ledger, users, media and thumbnails), tenancy, deletion; and ``RemoteService``
against the real API served with a real Celery worker."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from PIL import Image, ImageDraw

from engram.api.service import MediaMissing, NotFound
from engram.schemas.add import AddMemoryRequest
from engram.schemas.events import EventStatus, MediaKind
from engram.schemas.memories import MemoryType
from engram.schemas.search import SearchRequest
from engram.schemas.timeline import TimelineRequest

DAY = datetime(2024, 5, 2, tzinfo=UTC)
NOTES = [
    ("alice", "The piano tuner comes on Thursday morning", DAY + timedelta(hours=9)),
    ("alice", "Maria moves to Lisbon in March", DAY + timedelta(hours=11)),
    ("bob", "My cello lesson is on Friday", DAY + timedelta(hours=10)),
]


def screenshot(folder, name: str, text: str, hour: int) -> dict:
    """Ingest a rendered screenshot showing ``text`` as alice's (app Firefox) at ``hour`` on DAY."""
    from engram.api.embedded import ingest_paths

    shot = Image.new("RGB", (640, 200), "white")
    ImageDraw.Draw(shot).text((10, 80), text, fill="black")
    shot.save(folder / name)
    out = ingest_paths(
        [folder / name],
        "default",
        "alice",
        "laptop",
        captured_at=DAY + timedelta(hours=hour),
        app_name="Firefox",
        window="Budget - Mozilla Firefox",
        consolidate=False,
        quiet=True,
    )
    assert len(out["done"]) == 1, out
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The embedded service over three notes (two users) and one screenshot of alice's (app Firefox), in a data
    dir of this module's."""
    from engram.api.service.embedded import EmbeddedService
    from engram.workers.runtime import reset_runtimes

    root = tmp_path_factory.mktemp("service")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENGRAM_DATA_DIR", str(root / "data"))
        for var in ("ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT", "ENGRAM_BROKER_URL"):
            mp.delenv(var, raising=False)
        reset_runtimes()
        svc = EmbeddedService(linger=0)
        for user, text, when in NOTES:
            resp = svc.add(AddMemoryRequest(text=text, user_id=user, time=when), "default", "laptop")
            assert resp.status is EventStatus.done, resp
        screenshot(root, "shot.png", "quarterly budget review", 12)
        yield svc, root
        svc.close()
        reset_runtimes()


@pytest.mark.slow
def test_embedded_service_answers_every_call(store):
    svc, _ = store
    found = svc.search(SearchRequest(query="when does the piano tuner come", tenant_id="default", user_id="alice"))
    assert found.hits and "piano tuner" in found.hits[0].text
    obs = next(h for h in found.hits if h.memory_type is MemoryType.observation)
    assert svc.get_memory("default", obs.id).text == obs.text
    assert svc.get_memory("globex", obs.id) is None  # another tenant's id reads as unknown

    page = svc.list_memories("default", MemoryType.observation, "alice")
    assert page.total == 3 and {m.user_id for m in page.items} == {"alice"}

    day = svc.timeline(
        TimelineRequest(
            tenant_id="default", user_id="alice", time_from=DAY + timedelta(hours=9), time_to=DAY + timedelta(days=1)
        )
    )  # (the other test adds one at 8:00)
    assert [m.payload["kind"] for m in day.items] == ["screenshot", "text", "text"] and day.total == 3
    assert [m.time for m in day.items] == sorted((m.time for m in day.items), reverse=True)  # newest first
    shots = svc.timeline(
        TimelineRequest(
            tenant_id="default", kinds=[MediaKind.screenshot], apps=["Firefox"], time_from=DAY + timedelta(hours=9)
        )
    )
    assert len(shots.items) == 1 and "budget" in shots.items[0].text.lower()
    assert shots.items[0].payload["app"] == "Firefox" and "ocr_lines" not in shots.items[0].payload  # light
    assert svc.timeline(TimelineRequest(tenant_id="default", apps=["Slack"])).items == []
    assert svc.timeline(TimelineRequest(tenant_id="default", time_from=DAY + timedelta(days=1))).items == []
    assert svc.timeline(TimelineRequest(tenant_id="globex")).items == []

    assert svc.users("default") == ["alice", "bob"]
    assert svc.event_counts("default")[EventStatus.done] >= 4
    assert len(svc.events("default", "bob", EventStatus.done)) == 1 and svc.failures("default") == []
    assert svc.list_entities("default").total >= 0

    screenshot = shots.items[0]
    original = svc.media("default", screenshot.id)
    assert original.mime_type == "image/png" and original.path is not None and original.size > 0
    thumb = svc.thumbnail("default", screenshot.id)
    assert thumb.mime_type == "image/webp" and thumb.key.startswith("derived/default/") and thumb.size < 20_000
    with Image.open(thumb.path) as img:
        assert max(img.size) == 320
    assert svc.thumbnail("default", screenshot.id).key == thumb.key  # made once, then read
    with pytest.raises(NotFound):
        svc.media("default", screenshot.id, user_id="bob")  # another user's
    with pytest.raises(NotFound):
        svc.thumbnail("globex", screenshot.id)
    with pytest.raises(MediaMissing, match="no picture"):
        svc.thumbnail("default", obs.id)

    assert svc.delete_memory("default", screenshot.id) is MemoryType.observation
    assert svc.get_memory("default", screenshot.id) is None and svc.delete_memory("default", screenshot.id) is None
    with pytest.raises(NotFound):
        svc.media("default", screenshot.id)
    with pytest.raises(ValueError, match="observation is what was captured"):
        svc.update_memory("default", obs.id, "corrected")
    assert svc.update_memory("default", uuid.uuid4(), "corrected") is None
    assert svc.split_entity("default", uuid.uuid4(), "x#0") is None
    assert svc.name_entity("default", uuid.uuid4(), "Maria") is None


def test_a_missing_original_is_told_apart_from_an_unknown_observation(store):
    svc, root = store
    screenshot(root, "gone.png", "travel expenses form", 8)
    shot = svc.timeline(
        TimelineRequest(tenant_id="default", kinds=[MediaKind.screenshot], time_to=DAY + timedelta(hours=9))
    ).items[0]
    assert "expenses" in shot.text
    svc.media("default", shot.id).path.unlink()
    with pytest.raises(MediaMissing, match="no longer stored"):
        svc.media("default", shot.id)
    thumb = svc.thumbnail("default", shot.id)  # made at ingest: it stays without the original (as retention keeps it)
    thumb.path.unlink()
    with pytest.raises(MediaMissing, match="no longer stored"):
        svc.thumbnail("default", shot.id)


def retry_a_failure(svc, settings, event_id: uuid.UUID) -> None:
    """Mark the done event ``event_id`` failed in the cluster's ledger, retry it through ``svc`` (``POST
    /v1/events/{id}/retry``) and wait until the worker has run it again (done)."""
    import time

    from engram.workers.stores.ledger import open_ledger

    ledger = open_ledger(settings)
    ledger.mark(event_id, EventStatus.failed, stage="ingest", reason="test: the object store was down")
    assert [e.event_id for e in svc.failures("svc-remote")] == [event_id]
    again = svc.retry_event("svc-remote", event_id)
    assert again is not None and again.event_id == event_id and again.status is not EventStatus.failed
    assert again.reason is None
    deadline = time.monotonic() + 60
    while ledger.get(event_id).status not in (EventStatus.done, EventStatus.skipped, EventStatus.failed):
        assert time.monotonic() < deadline, ledger.get(event_id)
        time.sleep(0.2)
    assert ledger.get(event_id).status is EventStatus.done
    assert svc.retry_event("svc-remote", event_id) is None  # not failed any more: 404


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_remote_service_through_the_http_api(query_worker):
    """``RemoteService`` on the real API (uvicorn in this process) and a real Celery worker: add (stored when it
    returns), search, get, list, the timeline, events with their counts, users, a failure's retry, the bytes stored
    per kind, an original and a thumbnail's reason, delete; unknown ids answer None; another tenant's key sees and
    retries nothing."""
    import redis

    from engram.api.http.keys import create_key
    from engram.api.service.remote import RemoteService
    from engram.workers.stores.objects import open_object_store
    from tests.api.conftest import served

    r = redis.Redis.from_url(query_worker.broker_url, decode_responses=True)
    key, other = create_key(r, "svc-remote"), create_key(r, "svc-other")
    with served(query_worker) as url:
        svc = RemoteService(url, key, timeout=120, device="laptop")
        try:
            added = svc.add(
                AddMemoryRequest(text="The vendor contracts are in the oak desk", user_id="alice"), "ignored", "laptop"
            )
            assert added.status is EventStatus.done and added.observations >= 1
            hits = svc.search(
                SearchRequest(
                    query="where are the vendor contracts",
                    tenant_id="svc-remote",
                    user_id="alice",
                    memory_types=[MemoryType.observation],
                )
            ).hits
            assert hits and "oak desk" in hits[0].text
            assert svc.get_memory("svc-remote", hits[0].id).text == hits[0].text
            assert svc.list_memories("svc-remote", MemoryType.observation, "alice").total == 1
            day = svc.timeline(
                TimelineRequest(
                    tenant_id="ignored",
                    user_id="alice",
                    kinds=[MediaKind.text],
                    time_from=datetime.now(UTC) - timedelta(days=1),
                )
            )
            assert [r.id for r in day.items] == [hits[0].id]  # GET /v1/timeline, the key's tenant
            assert svc.timeline(TimelineRequest(tenant_id="svc-remote", user_id="bob")).items == []
            events = svc.events("svc-remote", "alice")
            assert [e.event_id for e in events] == [added.event_id] and events[0].status is EventStatus.done
            assert svc.events("svc-remote", None, EventStatus.failed) == []
            assert svc.event_counts("svc-remote")[EventStatus.done] == 1 and svc.users("svc-remote") == ["alice"]
            retry_a_failure(svc, query_worker, added.event_id)
            use = svc.storage("svc-remote")  # GET /v1/storage: the tenant's objects by kind
            assert use.tenant_id == "svc-remote" and use.originals[MediaKind.text].count >= 1 and use.total > 0
            elsewhere = RemoteService(url, other, timeout=120)  # another tenant's key sees none of it
            try:
                assert elsewhere.events("svc-remote") == [] and elsewhere.users("svc-remote") == []
                assert elsewhere.timeline(TimelineRequest(tenant_id="svc-remote")).items == []
                assert elsewhere.storage("svc-remote").originals == {}
                assert elsewhere.retry_event("svc-remote", added.event_id) is None
                with pytest.raises(NotFound):
                    elsewhere.media("svc-remote", hits[0].id)
            finally:
                elsewhere.close()
            original = svc.media("svc-remote", hits[0].id)  # GET /v1/media/{id}: the note's conversation record
            stored = open_object_store(query_worker).get_bytes(svc.get_memory("", hits[0].id).payload["object_key"])
            assert original.data == stored and original.size == len(stored)
            with pytest.raises(MediaMissing, match="no picture"):  # GET /v1/thumbnails/{id}: 410 with the reason
                svc.thumbnail("svc-remote", hits[0].id)
            with pytest.raises(NotFound):
                svc.media("svc-remote", hits[0].id, "bob")  # another user's
            with pytest.raises(NotFound):
                svc.media("svc-remote", uuid.uuid4())
            assert svc.name_entity("svc-remote", uuid.uuid4(), "Maria") is None
            assert svc.delete_memory("svc-remote", hits[0].id) is MemoryType.observation
            assert svc.get_memory("svc-remote", hits[0].id) is None
            assert svc.delete_memory("svc-remote", hits[0].id) is None
            with pytest.raises(NotFound):
                svc.media("svc-remote", hits[0].id)  # deleted: 404
            assert svc.split_entity("svc-remote", uuid.uuid4(), "x") is None  # POST /v1/entities/{id}/split: 404
            assert svc.entity_samples("svc-remote", uuid.uuid4()) is None
            with pytest.raises(NotFound):
                svc.sample_media("svc-remote", uuid.uuid4(), "x")
            assert svc.retry_event("svc-remote", uuid.uuid4()) is None
        finally:
            svc.close()


#: The front doors over the service layer: none waits on a task itself or reads a timeout of its own.
FRONT_DOORS = [
    "api/cli/main.py",
    "api/cli/memory.py",
    "api/mcp_server.py",
    "api/embedded.py",
    "api/cli/ui.py",
    *(f"api/http/routes/{n}" for n in ("queue.py", "search.py", "memories.py", "entities.py", "screens.py")),
    *(f"api/ui/{n}" for n in ("app.py", "routes.py", "signin.py", "pages.py")),
]


def test_one_timeout_for_every_front_door(redis_server, monkeypatch):
    """``ENGRAM_SERVICE_TIMEOUT_SECONDS`` is the one wait of the service layer: the only such setting, the default of
    the three implementations (the remote one's HTTP client too), and a call no query worker takes fails with
    ServiceTimeout after it (a real broker on a database no worker consumes); the front doors wait on no task."""
    import re
    import time
    from pathlib import Path

    import redis
    from celery import Celery

    from engram.api.service import ServiceTimeout
    from engram.api.service.embedded import EmbeddedService
    from engram.api.service.queue import QueueService
    from engram.api.service.remote import RemoteService
    from engram.schemas.settings import Settings
    from engram.workers.app import configure
    from tests.api.conftest import db_url

    waits = [f for f in Settings.model_fields if f.startswith(("api_", "service_")) and "timeout" in f]
    assert waits == ["service_timeout_seconds"]
    root = Path(__file__).resolve().parents[2]
    for path in FRONT_DOORS:
        source = (root / path).read_text()
        assert not re.search(
            r"\.get\(\s*timeout=|\.wait\(\s*timeout=|_timeout_seconds", source.replace("service_timeout_seconds", "")
        ), path
    url = db_url(redis_server, 2)  # a database no worker consumes
    monkeypatch.setenv("ENGRAM_SERVICE_TIMEOUT_SECONDS", "1.5")
    monkeypatch.setenv("ENGRAM_BROKER_URL", url)
    celery = Celery("one-timeout")
    configure(celery, Settings())
    svc, remote, embedded = QueueService(celery), RemoteService("http://127.0.0.1:1", "k"), EmbeddedService()
    try:
        assert svc.timeout == remote.timeout == embedded.timeout == 1.5
        began = time.monotonic()
        with pytest.raises(ServiceTimeout, match="1.5 s"):
            svc.search(SearchRequest(query="anything", tenant_id="nobody"))
        assert 1.4 < time.monotonic() - began < 10
    finally:
        remote.close()
        embedded.close()
        redis.Redis.from_url(url).delete("query")  # the message no worker took
