"""Retention and the storage cap (workers.stores.retention) on a real embedded store: a note, a chat and a rendered
screenshot ingested once, copied for each test. Old originals go; their text (search), vectors, thumbnail and
memories stay; the cap removes the oldest first; a dry run changes nothing; the data dir stays owner-only."""

from __future__ import annotations

import os
import stat
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont

from engram.schemas.add import AddMemoryRequest
from engram.schemas.events import EventStatus, MediaKind
from engram.schemas.search import SearchRequest
from tests.files import copy_tree

SHOT_TEXT = "quarterly budget review"
NOTE = "The piano tuner comes on Thursday morning"
DAY = datetime(2024, 5, 2, tzinfo=UTC)

#: the shared store's ingest (the OCR and embedding models loaded, a screenshot read) takes 20-45 s
pytestmark = pytest.mark.slow


def _screenshot(folder: Path) -> Path:
    shot = Image.new("RGB", (960, 540), "white")
    ImageDraw.Draw(shot).text((40, 200), SHOT_TEXT, fill="black", font=ImageFont.load_default(size=48))
    shot.save(folder / "shot.png")
    return folder / "shot.png"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A data dir holding alice's note, bob's chat turn and alice's screenshot, consolidated into memories."""
    from engram.api.embedded import ingest_paths
    from engram.api.service.embedded import EmbeddedService
    from engram.workers.runtime import reset_runtimes

    root = tmp_path_factory.mktemp("retention")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENGRAM_DATA_DIR", str(root / "data"))
        for var in ("ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT", "ENGRAM_BROKER_URL"):
            mp.delenv(var, raising=False)
        reset_runtimes()
        svc = EmbeddedService(linger=0)
        try:
            assert (
                svc.add(AddMemoryRequest(text=NOTE, user_id="alice", time=DAY), "default", "laptop").status
                is EventStatus.done
            )
            chat = AddMemoryRequest(
                messages=[{"speaker": "Bea", "text": "The harbour festival starts on the ninth"}],
                user_id="bob",
                time=DAY,
            )
            assert svc.add(chat, "default", "phone").status is EventStatus.done
            out = ingest_paths(
                [_screenshot(root)],
                "default",
                "alice",
                "laptop",
                captured_at=DAY + timedelta(hours=1),
                app_name="Firefox",
                quiet=True,
            )
            assert len(out["done"]) == 1, out
        finally:
            svc.close()
            reset_runtimes()
    return root / "data"


@pytest.fixture
def store(template, tmp_path, monkeypatch):
    """A copy of the template's data dir as ENGRAM_DATA_DIR; yields the runtime on it."""
    from engram.workers.runtime import reset_runtimes, runtime

    data = tmp_path / "data"
    copy_tree(template, data)
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(data))
    for var in ("ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT", "ENGRAM_BROKER_URL"):
        monkeypatch.delenv(var, raising=False)
    reset_runtimes()
    yield runtime()
    reset_runtimes()


def _originals(rt) -> dict[str, MediaKind | None]:
    from engram.workers.stores.retention import classify, list_objects

    return {o.key: kind for o in list_objects(rt.objects) if (c := classify(o.key))[0] == "original" for kind in [c[1]]}


def _points(rt) -> dict[str, int]:
    from engram.workers.stores.vectors import COLLECTIONS, tenant_filter

    return {name: rt.vectors.count(name, tenant_filter("default")) for name in COLLECTIONS}


def _shot_key(rt) -> str:
    return next(k for k, kind in _originals(rt).items() if kind is MediaKind.screenshot)


def _later(days: float) -> datetime:
    return datetime.now(UTC) + timedelta(days=days)


def test_old_screenshots_go_and_their_text_thumbnail_and_memories_stay(store, monkeypatch):
    from engram.api.service.base import MediaMissing
    from engram.api.service.embedded import EmbeddedService
    from engram.workers.runtime import reset_runtimes, runtime
    from engram.workers.stores.retention import apply_retention
    from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter
    from engram.workers.thumbs import thumb_key_of

    monkeypatch.setenv("ENGRAM_RETENTION_SCREENSHOT_DAYS", "30")
    reset_runtimes()
    rt = runtime()
    shot = _shot_key(rt)
    obs = rt.vectors.scroll(OBSERVATIONS, tenant_filter("default", kind="screenshot"))[0]
    thumb = thumb_key_of(obs.payload)
    rt.objects.delete(thumb)  # an item stored before thumbnails were made at ingest: retention makes it first
    before, points = _originals(rt), _points(rt)
    assert points["episodic"] >= 1

    early = apply_retention(rt, now=_later(20))  # younger than 30 days: nothing goes
    assert early.items_total == 0 and _originals(rt) == before

    report = apply_retention(rt, now=_later(40))
    assert [i.key for i in report.items] == [shot] and report.items[0].reason == "age"
    assert report.removed[MediaKind.screenshot].count == 1 and report.thumbnails_made == 1
    assert report.observations_marked == 1
    assert not rt.objects.exists(shot) and rt.objects.exists(thumb)
    assert set(_originals(rt)) == set(before) - {shot}  # the note's and the chat's originals stay (no text rule)
    assert _points(rt) == points  # no observation, memory or entity removed

    svc = EmbeddedService(linger=0)
    try:
        hits = svc.search(SearchRequest(query=SHOT_TEXT, tenant_id="default", user_id="alice")).hits
        hit = next(h for h in hits if h.kind is MediaKind.screenshot)
        assert hit.original_removed_at is not None and hit.object_key == shot
        with pytest.raises(MediaMissing, match="removed by retention"):
            svc.media("default", hit.id)
        assert svc.thumbnail("default", hit.id).size > 0
        assert svc.search(SearchRequest(query="piano tuner", tenant_id="default")).hits[0].original_removed_at is None
    finally:
        svc.close()
    for folder, dirs, files in os.walk(rt.settings.data_dir):  # owner-only, what retention wrote included
        for name in [*dirs, *files]:
            mode = (Path(folder) / name).lstat().st_mode
            assert not stat.S_ISLNK(mode) and not mode & 0o077, (folder, name, oct(mode))


def test_the_dry_run_changes_nothing(store, monkeypatch):
    from engram.workers.runtime import reset_runtimes, runtime
    from engram.workers.stores.retention import apply_retention
    from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter

    monkeypatch.setenv("ENGRAM_RETENTION_SCREENSHOT_DAYS", "1")
    monkeypatch.setenv("ENGRAM_RETENTION_TEXT_DAYS", "1")
    reset_runtimes()
    rt = runtime()
    before = _originals(rt)
    report = apply_retention(rt, dry_run=True, now=_later(2))
    assert report.dry_run and report.items_total == len(before) == 3  # the note, the chat, the screenshot
    assert {i.kind for i in report.items} == {MediaKind.screenshot, MediaKind.text}
    assert report.observations_marked == report.thumbnails_made == 0
    assert _originals(rt) == before
    stored = rt.vectors.scroll(OBSERVATIONS, tenant_filter("default"))
    assert [p.id for p in stored if p.payload.get("original_removed_at")] == []


def test_the_cap_removes_the_oldest_originals_first_and_never_a_memory(store, monkeypatch):
    from engram.workers.runtime import reset_runtimes, runtime
    from engram.workers.stores.retention import apply_retention

    rt = store
    shot = _shot_key(rt)
    real = [k for k in sorted(_originals(rt)) if k != shot] + [shot]
    # three recordings of 1 MB, older than everything else (what the data dir's own files move by is far less)
    big = [f"media/default/{c * 64}.wav" for c in "abc"]
    for key in big:
        rt.objects.put_bytes(key, os.urandom(1_000_000), "audio/wav")
    order = big + real
    base = datetime.now(UTC) - timedelta(days=3)
    for i, key in enumerate(order):
        t = (base + timedelta(hours=i)).timestamp()
        os.utime(rt.objects.root / key, (t, t))
    points = _points(rt)
    reset_runtimes()
    before = apply_retention(runtime(), dry_run=True).capped_total_before
    monkeypatch.setenv("ENGRAM_STORAGE_CAP_BYTES", str(before - 1_500_000))  # one recording is not enough: two go
    reset_runtimes()
    rt = runtime()
    report = apply_retention(rt)
    assert [i.key for i in report.items] == big[:2] and {i.reason for i in report.items} == {"cap"}
    assert report.removed[MediaKind.audio].count == 2 and not report.over_cap
    assert set(_originals(rt)) == set(order[2:])
    # a cap far below: every original goes, oldest first, and the store (memories, text, vectors) stays whole
    monkeypatch.setenv("ENGRAM_STORAGE_CAP_BYTES", "1000")
    reset_runtimes()
    rt = runtime()
    report = apply_retention(rt)
    assert [i.key for i in report.items] == order[2:] and report.over_cap
    assert _originals(rt) == {} and _points(rt) == points
    assert report.observations_marked == 3  # the note's, the chat turn's and the screenshot's


def test_status_bytes_per_kind(store):
    from engram.workers.stores.retention import storage_use

    use = storage_use(store, "default")
    assert use.originals[MediaKind.screenshot].count == 1 and use.originals[MediaKind.text].count == 2
    assert use.thumbnails.count == 1 and use.store and use.ledger and use.store > 0
    assert use.total >= sum(k.bytes for k in use.originals.values()) + use.thumbnails.bytes + use.store
    assert storage_use(store, "nobody").originals == {}


def test_the_embedded_default_runs_it_once_per_interval(store, monkeypatch):
    from engram.workers.runtime import reset_runtimes, runtime
    from engram.workers.stores.retention import apply_if_due

    assert apply_if_due(store) is None  # no rule set: nothing, not even the stamp
    assert not (store.settings.data_dir / "retention.json").exists()
    monkeypatch.setenv("ENGRAM_RETENTION_SCREENSHOT_DAYS", "30")
    reset_runtimes()
    rt = runtime()
    first = apply_if_due(rt, now=_later(40))
    assert first is not None and first.items_total == 1
    assert apply_if_due(rt, now=_later(40) + timedelta(minutes=5)) is None  # within the hour
    assert apply_if_due(rt, now=_later(40) + timedelta(hours=2)) is not None


def test_the_beat_entry_and_its_task(store, monkeypatch):
    from engram.schemas.settings import Settings
    from engram.workers.app import celery_settings
    from engram.workers.retention import retention_task
    from engram.workers.runtime import reset_runtimes
    from engram.workers.tasks import QUEUE_OF, Queue, Task

    entry = celery_settings(Settings(retention_interval_seconds=600))["beat_schedule"]["retention"]
    assert entry["task"] == Task.retention.value and entry["schedule"] == 600 and entry["options"]["expires"] == 900
    assert QUEUE_OF[Task.retention] is Queue.consolidate
    monkeypatch.setenv("ENGRAM_RETENTION_SCREENSHOT_DAYS", "30")
    reset_runtimes()
    got = retention_task.delay(True, _later(40).isoformat()).get(timeout=60)
    assert got["dry_run"] and got["items_total"] == 1 and got["items"][0]["kind"] == "screenshot"


def test_beat_runs_it_on_a_cluster_and_the_worker_removes_from_s3(redis_server, seaweedfs_s3, tmp_path, monkeypatch):
    """The distributed mode: ``engram beat`` sends the retention task every interval to the store worker (queue
    ``consolidate``), and the task removes the oldest originals from S3 while over the cap."""
    import uuid

    import redis

    from engram.schemas.settings import Settings
    from engram.workers.stores.objects import S3ObjectStore
    from engram.workers.tasks import Task
    from tests.cluster import Cluster, producer

    url = redis_server.rsplit("/", 1)[0] + "/11"  # a database of its own on the session's redis-server
    redis.Redis.from_url(url).flushdb()
    s3 = {
        "ENGRAM_S3_ENDPOINT": seaweedfs_s3.endpoint,
        "ENGRAM_S3_ACCESS_KEY": seaweedfs_s3.access_key,
        "ENGRAM_S3_SECRET_KEY": seaweedfs_s3.secret_key,
        "ENGRAM_S3_BUCKET": f"ret-{uuid.uuid4().hex[:12]}",
    }
    env = {
        "ENGRAM_BROKER_URL": url,
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
        **s3,
        "ENGRAM_STORAGE_CAP_BYTES": "6000",
        "ENGRAM_RETENTION_INTERVAL_SECONDS": "2",
    }
    objects = S3ObjectStore(
        seaweedfs_s3.endpoint, seaweedfs_s3.access_key, seaweedfs_s3.secret_key, s3["ENGRAM_S3_BUCKET"]
    )
    keys = [f"media/acme/{c * 64}.wav" for c in "abc"]
    for key in keys:  # stored in this order: LastModified is the order (S3 keeps whole seconds)
        objects.put_bytes(key, os.urandom(4000), "audio/wav")
        time.sleep(1.1)
    cluster = Cluster.create(tmp_path, env)
    try:
        cluster.start(
            "store", ["worker", "--role", "store", "--pool", "solo", "--hostname", "store@ret", "--loglevel", "INFO"]
        )
        app = producer(Settings(broker_url=url))
        cluster.wait_ready(app, ["store@ret"])
        cluster.start("beat", ["beat", "--loglevel", "INFO"])
        deadline = time.monotonic() + 60
        while cluster.count_in_logs(f"{Task.retention.value}[", "store") < 2:  # received, then succeeded
            assert time.monotonic() < deadline, cluster.tails()
            time.sleep(0.5)
        assert sorted(objects.keys("media/")) == keys  # beat's runs at the real time: all younger than 10 min
        later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
        got = app.send_task(Task.retention.value, args=[False, later], queue="consolidate").get(timeout=60)
        assert [i["key"] for i in got["items"]] == keys[:2] and got["capped_total_after"] <= 6000
        assert objects.keys("media/") == keys[2:]
    finally:
        cluster.stop_all()
