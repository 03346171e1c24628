"""The web app under ``engram serve`` (``/ui``, ``api.ui.signin``) on a real cluster: the API served by uvicorn in this
process on a real redis-server and SeaweedFS S3, a real Celery worker process ingesting a rendered screenshot, a
real recording (``jfk.flac``) and a photo of two faces published through the SDK, then consolidating alice's memories.
Signing in with an API key in Debian's chromium, the session cookie's flags, every screen through the queue, another
tenant's URLs answering 404, the thumbnail stored at ingest and served with cache headers, an original streamed with
HTTP ranges from S3, the tenant's keys on Connect (create, revoke: the session ends), sign-out, the UI's routes out of
the OpenAPI document, and the changes made on the query worker: a memory's correction, face crops and voice clips,
"not this person"."""

from __future__ import annotations

import html
import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from PIL import Image, ImageDraw

from tests.api.conftest import make_settings, served, worker_process
from tests.conftest import eval_data_dir

pytestmark = pytest.mark.slow  # a worker process ingests through OCR and speech models (~1-2 min)

SERVE_DB = 8
DAY = datetime(2024, 5, 2, tzinfo=UTC)


@dataclass
class Cluster:
    """The API's URL, its settings, one key per tenant, and the ids the tests look for."""

    url: str
    settings: object
    keys: dict[str, str]
    shot_id: str
    shot_event: str
    audio_id: str
    audio_key: str


@pytest.fixture(scope="module")
def cluster(redis_server, seaweedfs_s3, tmp_path_factory) -> Iterator[Cluster]:
    import redis

    from engram.api.client import EngramClient
    from engram.api.http.keys import create_key
    from engram.schemas.events import EventStatus, MediaKind
    from engram.schemas.memories import MemoryType

    root = tmp_path_factory.mktemp("serve-ui")
    settings = make_settings(redis_server, seaweedfs_s3, root / "data", db=SERVE_DB, s3_bucket="engram-ui-serve-test")
    (root / "data").mkdir()
    r = redis.Redis.from_url(settings.broker_url, decode_responses=True)
    r.flushdb()
    keys = {t: create_key(r, t, "test") for t in ("acme", "globex")}
    shot = Image.new("RGB", (1280, 720), "white")
    ImageDraw.Draw(shot).text((40, 300), "quarterly budget review", fill="black")
    shot.save(root / "shot.png")
    with worker_process(settings, seaweedfs_s3), served(settings) as url:
        with EngramClient(url, keys["acme"], timeout=120, user="alice", device="laptop") as sdk:
            shot_event = sdk.publish(
                root / "shot.png",
                MediaKind.screenshot,
                captured_at=DAY + timedelta(hours=10),
                app="Firefox",
                window="Budget - Mozilla Firefox",
            ).event_id
            audio_event = sdk.publish(
                eval_data_dir() / "audio" / "jfk.flac", MediaKind.audio, captured_at=DAY + timedelta(hours=11)
            ).event_id
            faces_event = sdk.publish(
                eval_data_dir() / "faces" / "deepface" / "couple.jpg", captured_at=DAY + timedelta(hours=12)
            ).event_id
            done = sdk.wait([shot_event, audio_event, faces_event], timeout=300, interval=0.5)
            assert {s.status for s in done.values()} == {EventStatus.done}, done
            assert consolidate(settings, "acme", "alice") > 0  # episodic memories to edit
            obs = sdk.list_memories(MemoryType.observation, "alice", 20).items
        shot_obs = next(o for o in obs if o.payload.get("event_id") == str(shot_event))
        audio_obs = next(o for o in obs if o.payload.get("kind") == "audio")
        yield Cluster(
            url, settings, keys, str(shot_obs.id), str(shot_event), str(audio_obs.id), audio_obs.payload["object_key"]
        )
    r.close()


def consolidate(settings, tenant: str, user: str) -> int:
    """``consolidate_user`` on the cluster's worker (as beat would send it): the episodic memories written."""
    from celery import Celery

    from engram.workers.app import configure
    from engram.workers.tasks import Task

    celery = Celery("serve-ui-test")
    configure(celery, settings)
    return celery.send_task(Task.consolidate_user.value, args=[tenant, user]).get(timeout=180)


@contextmanager
def signed_in(cluster: Cluster, tenant: str) -> Iterator[httpx.Client]:
    """An HTTP client signed in to the web app with ``tenant``'s key (through the form, with its CSRF token)."""
    with httpx.Client(base_url=cluster.url, timeout=120) as http:
        form = http.get("/ui/signin")
        r = http.post("/ui/signin", data={"csrf_token": csrf_of(form.text), "api_key": cluster.keys[tenant]})
        assert r.status_code == 303 and r.headers["location"] == "/ui/", r.text
        yield http


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def serious_violations(page) -> list:
    """axe-core's serious and critical findings on the page shown."""
    from axe_playwright_python.sync_playwright import Axe

    found = Axe().run(page).response["violations"]
    return [(v["id"], [n["target"] for n in v["nodes"]][:3]) for v in found if v["impact"] in ("serious", "critical")]


def test_signing_in_with_a_key_in_chromium_gives_a_strict_httponly_session(cluster, page):
    page.goto(cluster.url + "/ui/timeline?date=2024-05-02")
    assert page.url.endswith("/ui/signin?next=%2Ftimeline%3Fdate%3D2024-05-02")  # no session: the sign-in form
    assert serious_violations(page) == []
    page.fill("#api_key", "egk_not-a-key")
    page.click("button[type=submit]")
    assert "not known here" in page.inner_text("main")
    page.fill("#api_key", cluster.keys["acme"])
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/ui/timeline\?date=2024-05-02$"))  # back where it was going
    cookies = {c["name"]: c for c in page.context.cookies()}
    auth = cookies["engram_ui_auth"]
    assert (auth["httpOnly"], auth["sameSite"], auth["path"]) == (True, "Strict", "/ui")
    assert cluster.keys["acme"] not in auth["value"]  # the key itself is never in the cookie
    assert cookies["engram_ui_session"]["httpOnly"] and cookies["engram_ui_session"]["sameSite"] == "Strict"
    page.goto(cluster.url + "/ui/timeline?date=2024-05-02&user=alice")
    thumb = page.locator(f'img[src="/ui/thumb/{cluster.shot_id}?user=alice"]')
    thumb.wait_for()
    thumb.scroll_into_view_if_needed()
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=thumb.element_handle())
    assert "acme" in page.inner_text("footer")
    page.goto(cluster.url + "/ui/people")  # face crops made by the query worker, read from S3
    crop = page.locator("ul.faces img").first
    crop.scroll_into_view_if_needed()
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=crop.element_handle())
    assert serious_violations(page) == []
    page.goto(cluster.url + "/ui/connect")
    assert "egk_…" in page.inner_text("main") and serious_violations(page) == []
    assert page.dialogs == []
    page.click("footer button:has-text('Sign out')")
    page.wait_for_url(re.compile(r"/ui/signin$"))
    assert "engram_ui_auth" not in {c["name"] for c in page.context.cookies()}
    page.goto(cluster.url + "/ui/")
    assert "/ui/signin" in page.url


def test_every_screen_answers_through_the_cluster(cluster):
    with signed_in(cluster, "acme") as http:
        start = http.get("/ui/")
        assert start.status_code == 200 and 'href="/ui/timeline"' in start.text and "acme" in start.text
        assert "script-src 'self'" in start.headers["content-security-policy"]
        day = http.get("/ui/timeline", params={"date": "2024-05-02", "user": "alice"})
        assert day.status_code == 200 and f"/ui/thumb/{cluster.shot_id}" in day.text
        assert f"/ui/media/{cluster.audio_id}" in day.text  # the recording plays from the page
        found = http.get("/ui/search", params={"q": "quarterly budget review", "user": "alice"})
        assert found.status_code == 200 and f"/ui/item/{cluster.shot_id}" in found.text
        for screen in ("/ui/people", "/ui/memories", "/ui/activity", "/ui/connect", f"/ui/item/{cluster.shot_id}"):
            assert http.get(screen).status_code == 200, screen
        activity = http.get("/ui/activity").text
        assert "alice" in activity  # the ledger's users and events, read beside the API
        assert "Bytes stored per kind" in activity and "screenshot originals" in activity  # S3's listing, by kind


def test_a_url_of_tenant_a_is_404_for_tenant_b(cluster):
    with signed_in(cluster, "globex") as http:
        for path in (f"/ui/item/{cluster.shot_id}", f"/ui/thumb/{cluster.shot_id}", f"/ui/media/{cluster.audio_id}"):
            r = http.get(path)
            assert r.status_code == 404, path
        assert cluster.shot_id not in http.get("/ui/timeline", params={"date": "2024-05-02"}).text
    with signed_in(cluster, "acme") as http:
        assert http.get(f"/ui/item/{cluster.shot_id}").status_code == 200


def test_the_thumbnail_stored_at_ingest_is_served_with_cache_headers(cluster):
    from engram.workers.stores.objects import open_object_store
    from engram.workers.thumbs import thumb_key

    objects = open_object_store(cluster.settings)
    key = thumb_key("acme", cluster.shot_event, 0)
    stored = objects.get_bytes(key)  # made by the worker's ingest, before any page asked for it
    with signed_in(cluster, "acme") as http:
        r = http.get(f"/ui/thumb/{cluster.shot_id}")
        assert r.status_code == 200 and r.headers["content-type"] == "image/webp" and r.content == stored
        assert r.headers["cache-control"] == "private, max-age=86400" and r.headers["etag"]
        with Image.open(io.BytesIO(r.content)) as img:
            assert img.width == 320 and len(r.content) <= 20_000
        again = http.get(f"/ui/thumb/{cluster.shot_id}", headers={"If-None-Match": r.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        objects.delete(key)  # an item from before thumbnails were made at ingest: made now, and stored
        assert http.get(f"/ui/thumb/{cluster.shot_id}").status_code == 200 and objects.exists(key)
        shot = http.get(f"/ui/thumb/{cluster.audio_id}")  # a recording has no picture: the placeholder
        assert shot.status_code == 307 and shot.headers["location"] == "/ui/static/missing.svg"


def test_a_recording_streams_with_range_requests_from_s3(cluster):
    from engram.workers.stores.objects import open_object_store

    original = open_object_store(cluster.settings).get_bytes(cluster.audio_key)
    size = len(original)
    with signed_in(cluster, "acme") as http:
        part = http.get(f"/ui/media/{cluster.audio_id}", headers={"Range": "bytes=100-1123"})
        assert part.status_code == 206 and part.headers["content-range"] == f"bytes 100-1123/{size}"
        assert part.content == original[100:1124] and part.headers["accept-ranges"] == "bytes"
        assert part.headers["content-type"].startswith("audio/")
        assert part.headers["content-security-policy"].startswith("sandbox")  # the original's own, kept
        assert part.headers["content-disposition"].startswith("inline")
        tail = http.get(f"/ui/media/{cluster.audio_id}", headers={"Range": "bytes=-16"})
        assert tail.status_code == 206 and tail.content == original[-16:]
        assert http.get(f"/ui/media/{cluster.audio_id}", headers={"Range": f"bytes={size}-"}).status_code == 416
        whole = http.get(f"/ui/media/{cluster.audio_id}")
        assert whole.status_code == 200 and whole.content == original


def test_connect_shows_the_tenants_keys_masked_and_a_revoked_key_ends_its_session(cluster):
    from engram.api.http.keys import hash_key

    with signed_in(cluster, "acme") as http:
        page = http.get("/ui/connect")
        assert page.status_code == 200 and "egk_…" + hash_key(cluster.keys["acme"])[:12] in page.text
        assert cluster.keys["acme"] not in page.text and hash_key(cluster.keys["globex"])[:12] not in page.text
        made = http.post("/ui/connect/keys", data={"csrf_token": csrf_of(page.text), "label": "laptop"})
        assert made.status_code == 201 and made.headers["cache-control"] == "no-store"
        new_key = re.search(r"<code>(egk_[A-Za-z0-9_-]{20,})</code>", made.text).group(1)
        assert http.post("/ui/connect/keys", data={"label": "no token"}).status_code == 403  # CSRF
        other = hash_key(cluster.keys["globex"])[:12]
        assert (
            http.post(f"/ui/connect/keys/{other}/revoke", data={"csrf_token": csrf_of(page.text)}).status_code == 404
        )  # another tenant's key
    mine = Cluster(**{**cluster.__dict__, "keys": {"acme": new_key}})
    with signed_in(mine, "acme") as http:
        page = http.get("/ui/connect")
        gone = http.post(f"/ui/connect/keys/{hash_key(new_key)[:12]}/revoke", data={"csrf_token": csrf_of(page.text)})
        assert gone.status_code == 303 and gone.headers["location"] == "/ui/connect"
        after = http.get("/ui/connect")  # signed in with the key just revoked: the session is over
        assert after.status_code == 303 and after.headers["location"].startswith("/ui/signin")
        assert http.post("/ui/connect/keys", data={}).status_code == 401


def test_the_ui_is_not_in_the_openapi_document(cluster):
    spec = httpx.get(cluster.url + "/openapi.json").json()
    assert spec["paths"] and not any(p.startswith("/ui") for p in spec["paths"])


CORRECTION = "The budget review moved to Friday <b>3 pm</b>"


def test_editing_a_memory_through_the_cluster_supersedes_it(cluster):
    from engram.api.client import EngramClient
    from engram.schemas.memories import MemoryType

    with signed_in(cluster, "acme") as http:
        page = http.get("/ui/memories", params={"type": "episodic", "user": "alice"})
        assert page.status_code == 200
        old_id = re.search(r'action="/ui/memories/([0-9a-f-]{36})/edit"', page.text).group(1)
        form = {"csrf_token": csrf_of(page.text), "user": "alice", "text": CORRECTION}
        done = http.post(f"/ui/memories/{old_id}/edit", data=form)
        assert done.status_code == 303, done.text
        assert done.headers["location"].startswith("/ui/memories?type=episodic&user=alice#m-")
        new_id = done.headers["location"].rsplit("#m-", 1)[1]
        after = http.get("/ui/memories", params={"type": "episodic", "user": "alice"})
        assert f'id="m-{new_id}"' in after.text and "Friday &lt;b&gt;3 pm&lt;/b&gt;" in after.text  # text, not markup
        again = http.post(f"/ui/memories/{old_id}/edit", data=form)  # the old version cannot be corrected twice
        assert again.status_code == 400 and "already superseded" in again.text
    with EngramClient(cluster.url, cluster.keys["acme"], timeout=120) as sdk:
        old = sdk.get_memory(old_id)
        new = sdk.get_memory(new_id)
    assert old.payload["superseded_by"] == new_id and old.payload["valid_to"]  # kept as history, not overwritten
    assert new.memory_type is MemoryType.episodic and new.payload["corrected_from"] == old_id
    assert new.payload["summary"] == CORRECTION and new.user_id == "alice"


def _faces(cluster) -> list:
    from engram.api.client import EngramClient

    with EngramClient(cluster.url, cluster.keys["acme"], timeout=120) as sdk:
        return [e for e in sdk.list_entities().items if e.faces]


def test_face_crops_and_voice_clips_are_made_on_the_worker_and_served_from_s3(cluster):
    from engram.workers.stores.objects import open_object_store

    with signed_in(cluster, "acme") as http:
        people = http.get("/ui/people")
        assert people.status_code == 200
        crops = re.findall(r'<img src="(/ui/people/[0-9a-f-]{36}/sample\?key=[^"]+)"', people.text)
        clips = re.findall(
            r'<audio controls preload="none" src="(/ui/people/[0-9a-f-]{36}/sample\?key=[^"]+)"', people.text
        )
        assert len(crops) >= 2 and clips, people.text[-3000:]
        crop = http.get(crops[0].replace("&amp;", "&"))
        assert crop.status_code == 200 and crop.headers["content-type"] == "image/webp", crop.text[:300]
        with Image.open(io.BytesIO(crop.content)) as img:
            assert max(img.size) <= 160 and min(img.size) > 10
        clip = http.get(clips[0].replace("&amp;", "&"))
        assert clip.status_code == 200 and clip.headers["content-type"] == "audio/wav"
        assert clip.content[:4] == b"RIFF" and 16_000 < len(clip.content) < 16_000 * 2 * 7  # at most ~6 s
        entity = re.search(r"/ui/people/([0-9a-f-]{36})/", crops[0]).group(1)
        assert http.get(f"/ui/people/{entity}/sample", params={"key": "nope"}).status_code == 404
    objects = open_object_store(cluster.settings)
    stored = [k for k in objects.keys("derived/acme/") if "/face-" in k]
    assert stored and objects.get_bytes(stored[0])[:4] == b"RIFF"  # made once by the worker, kept beside the event
    with signed_in(cluster, "globex") as http:  # another tenant's person
        assert http.get(crops[0].replace("&amp;", "&")).status_code == 404


def test_not_this_person_splits_a_face_off_through_the_cluster(cluster):
    a, b = _faces(cluster)[:2]
    with signed_in(cluster, "acme") as http:
        page = http.get("/ui/people")
        merged = http.post(f"/ui/people/{b.id}/merge", data={"csrf_token": csrf_of(page.text), "into": str(a.id)})
        assert merged.status_code == 303, merged.text
        page = http.get("/ui/people")
        assert 'aria-label="Face 2 is not' in page.text
        keys = re.findall(
            rf'action="/ui/people/{a.id}/split">\s*<input type="hidden" name="csrf_token" value="[^"]+">'
            r'\s*<input type="hidden" name="key" value="([^"]+)">',
            page.text,
        )
        assert len(keys) == 2, page.text[-3000:]
        done = http.post(
            f"/ui/people/{a.id}/split", data={"csrf_token": csrf_of(page.text), "key": html.unescape(keys[1])}
        )
        assert done.status_code == 303 and "#person-" in done.headers["location"], done.text
        new_id = done.headers["location"].rsplit("#person-", 1)[1]
        after = http.get("/ui/people")
        assert after.status_code == 200 and f'id="person-{new_id}"' in after.text
    people = {str(e.id): e for e in _faces(cluster)}
    assert people[new_id].faces == 1 and people[str(a.id)].faces == 1


def test_the_http_api_serves_originals_with_ranges_and_thumbnails_with_etags(cluster):
    """``GET /v1/media/{id}`` and ``/v1/thumbnails/{id}`` (``api.routes.screens``, what ``RemoteService`` reads):
    the same S3 ranges and ETags as the web app, behind an API key, 404 for another tenant's key."""
    from engram.workers.stores.objects import open_object_store

    original = open_object_store(cluster.settings).get_bytes(cluster.audio_key)
    auth = {"Authorization": f"Bearer {cluster.keys['acme']}"}
    with httpx.Client(base_url=cluster.url, timeout=120, headers=auth) as api:
        part = api.get(f"/v1/media/{cluster.audio_id}", headers={"Range": "bytes=100-1123"})
        assert part.status_code == 206 and part.content == original[100:1124]
        assert part.headers["content-range"] == f"bytes 100-1123/{len(original)}"
        assert api.get(f"/v1/media/{cluster.audio_id}", headers={"Range": f"bytes={len(original)}-"}).status_code == 416
        thumb = api.get(f"/v1/thumbnails/{cluster.shot_id}")
        assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/webp" and thumb.headers["etag"]
        assert (
            api.get(f"/v1/thumbnails/{cluster.shot_id}", headers={"If-None-Match": thumb.headers["etag"]}).status_code
            == 304
        )
        gone = api.get(f"/v1/thumbnails/{cluster.audio_id}")
        assert gone.status_code == 410 and "no picture" in gone.json()["detail"]
        assert api.get(f"/v1/media/{cluster.audio_id}", params={"user": "bob"}).status_code == 404
    other = {"Authorization": f"Bearer {cluster.keys['globex']}"}
    assert httpx.get(f"{cluster.url}/v1/media/{cluster.audio_id}", headers=other, timeout=60).status_code == 404


def test_remote_service_reads_samples_and_crops_and_splits_through_the_http_api(cluster):
    """``RemoteService`` (the SDK over ``/v1/entities/{id}/samples``, ``.../samples/media`` and ``.../split``) on the
    cluster's faces: the samples a query worker lists, a crop's WebP, a split, unknown ones None or NotFound."""
    import uuid

    from engram.api.service import NotFound
    from engram.api.service.remote import RemoteService

    svc = RemoteService(cluster.url, cluster.keys["acme"], timeout=120)
    try:
        person, other_face = [e for e in svc.list_entities("acme").items if e.faces][:2]
        assert svc.merge_entities("acme", person.id, other_face.id, "test") is not None
        samples = svc.entity_samples("acme", person.id)
        faces = [s for s in samples if s.modality == "face"]
        assert len(faces) >= 2 and all(s.observation_id for s in faces)
        crop = svc.sample_media("acme", person.id, faces[0].key)
        assert crop.mime_type == "image/webp" and crop.data[:4] == b"RIFF" and crop.size == len(crop.data)
        with pytest.raises(NotFound):
            svc.sample_media("acme", person.id, "nope")
        assert svc.split_entity("acme", person.id, "nope") is None
        new = svc.split_entity("acme", person.id, faces[1].key)
        assert new is not None and new.id != person.id and new.faces == 1
        assert [s.key for s in svc.entity_samples("acme", new.id)] == [faces[1].key]
        assert svc.entity_samples("acme", uuid.uuid4()) is None
    finally:
        svc.close()
    other = RemoteService(cluster.url, cluster.keys["globex"], timeout=120)
    try:
        assert other.entity_samples("globex", person.id) is None  # another tenant's person
    finally:
        other.close()


class Recorder:
    """A Celery producer that notes the name of each task it sends (the broker and the worker are real)."""

    def __init__(self, app) -> None:
        self.app, self.sent = app, []

    def send_task(self, name: str, **options):
        self.sent.append(name)
        return self.app.send_task(name, **options)


def test_the_people_page_reads_every_persons_samples_in_one_request_task(cluster):
    """``QueueService.entities_samples`` (what the People page under /ui asks): every person's samples in one request
    task on the query worker, the same as one ``entity_samples`` each; another tenant's persons are left out."""
    import uuid

    from celery import Celery

    from engram.api.service.queue import QueueService
    from engram.workers.app import configure
    from engram.workers.tasks import Task

    app = Celery("serve-ui-people")
    configure(app, cluster.settings)
    producer = Recorder(app)
    svc = QueueService(producer, 120)
    ids = [e.id for e in svc.list_entities("acme").items if e.faces or e.voices]
    assert len(ids) >= 2, ids
    producer.sent.clear()
    many = svc.entities_samples("acme", [*ids, uuid.uuid4()])
    assert producer.sent == [Task.entity_samples_many.value]
    assert many == {e: svc.entity_samples("acme", e) for e in ids} and all(many.values())
    assert svc.entities_samples("globex", ids) == {}
    with signed_in(cluster, "acme") as http:
        page = http.get("/ui/people").text
    assert all(f"/ui/people/{e}/sample?key=" in page for e in many)  # each person's crop or clip shown


def test_a_frames_page_lists_the_memories_it_fed_through_the_cluster(cluster):
    """The memories drawn from the screenshot (alice's consolidation) through a query worker: on its /ui page, and
    through the HTTP API (``GET /v1/memories/{id}/derived``, ``RemoteService``); none for another tenant's key."""
    import uuid

    from engram.api.service.remote import RemoteService

    svc = RemoteService(cluster.url, cluster.keys["acme"], timeout=120)
    other = RemoteService(cluster.url, cluster.keys["globex"], timeout=120)
    try:
        fed = svc.memories_from("acme", uuid.UUID(cluster.shot_id))
        assert fed and all(cluster.shot_id in m.payload["provenance"]["observation_ids"] for m in fed)
        assert other.memories_from("globex", uuid.UUID(cluster.shot_id)) == []
        assert svc.memories_from("acme", uuid.uuid4()) == []
    finally:
        svc.close()
        other.close()
    with signed_in(cluster, "acme") as http:
        page = http.get(f"/ui/item/{cluster.shot_id}").text
    assert "Memories it fed" in page and f'href="/ui/item/{fed[0].id}"' in page
