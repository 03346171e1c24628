"""The HTTP API on real servers: a redis-server (broker, ledger, keys), a SeaweedFS S3 (presigned uploads
are PUT to it) and, for search and readiness, a real Celery worker process."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fastapi.testclient import TestClient

from engram.api.http.app import create_app
from tests.api.conftest import chat_jsonl, png_bytes, queue_length

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def client(api_settings):
    """A TestClient of the API (its lifespan opens the real Redis and S3 clients)."""
    with TestClient(create_app(api_settings)) as c:
        yield c


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def upload(client: TestClient, key: str, data: bytes, mime: str = "image/png", declared: bytes | None = None):
    """Ask for an upload URL (for ``declared``'s sha256 and size, default ``data``'s) and PUT ``data`` to
    it on the real S3 server. Returns (sha256, upload answer)."""
    declared = data if declared is None else declared
    sha = hashlib.sha256(declared).hexdigest()
    resp = client.post("/v1/uploads", json={"sha256": sha, "size": len(declared), "mime_type": mime}, headers=auth(key))
    assert resp.status_code == 200, resp.text
    body = resp.json()
    if not body["exists"]:
        put = httpx.put(body["url"], content=data, headers={"Content-Type": mime})
        assert put.status_code == 200, put.text
    return sha, body


def event_body(sha: str, size: int, mime: str = "image/png", kind: str = "screenshot", **extra) -> dict:
    return {
        "event_id": str(uuid.uuid4()),
        "user_id": "alice",
        "device_id": "laptop",
        "kind": kind,
        "sha256": sha,
        "size": size,
        "mime_type": mime,
        "captured_at": "2024-05-01T12:00:00Z",
        "source_name": "/home/alice/shot.png",
        **extra,
    }


def published(client, key: str, seed: int) -> dict:
    """Upload a fresh PNG and publish it; returns the event body (202 asserted)."""
    data = png_bytes(seed)
    sha, _ = upload(client, key, data)
    body = event_body(sha, len(data))
    resp = client.post("/v1/events", json=body, headers=auth(key))
    assert resp.status_code == 202, resp.text
    return body


def test_health_and_openapi(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    spec = client.get("/openapi.json").json()
    assert {"/v1/uploads", "/v1/events", "/v1/events/{event_id}", "/v1/search", "/readyz"} <= set(spec["paths"])
    for page in ("/docs", "/redoc"):  # served from packaged files: nothing loaded from a CDN
        html = client.get(page).text
        assert "cdn.jsdelivr.net" not in html and "unpkg.com" not in html
        assets = [a.split('"')[0] for a in html.split('src="')[1:]] + [
            a.split('"')[0] for a in html.split('href="')[1:] if a.split('"')[0].endswith(".css")
        ]
        assert assets and all(client.get(a).status_code == 200 for a in assets), assets


def test_requests_need_a_valid_key(client, api_keys, api_redis):
    calls = [
        ("post", "/v1/uploads", {"sha256": "0" * 64, "size": 1, "mime_type": "image/png"}),
        ("post", "/v1/events", {}),
        ("get", f"/v1/events/{uuid.uuid4()}", None),
        ("post", "/v1/search", {"query": "x"}),
    ]
    for method, path, body in calls:
        for headers in ({}, auth("egk_not-a-key"), {"Authorization": f"Basic {api_keys['acme']}"}):
            resp = client.request(method, path, json=body, headers=headers)
            assert resp.status_code == 401, (path, headers, resp.text)
            assert resp.headers["www-authenticate"] == "Bearer"
    # hashed at rest: the key itself is nowhere in Redis, its sha256 maps to the tenant
    key = api_keys["acme"]
    assert api_redis.get("engram:apikey:" + hashlib.sha256(key.encode()).hexdigest()) == "acme"
    for k in api_redis.scan_iter("engram:apikey*"):
        values = api_redis.hgetall(k) if api_redis.type(k) == "hash" else {"v": api_redis.get(k)}
        assert key not in k and all(key not in v for v in values.values())


def test_upload_publish_and_status(client, api_keys, api_redis):
    key = api_keys["acme"]
    data = png_bytes(1)
    sha, first = upload(client, key, data)
    assert first["object_key"] == f"media/acme/{sha}.png" and first["url"] and not first["exists"]
    _, again = upload(client, key, data)
    assert again["exists"] and again["url"] == ""  # stored with this size: the client skips the PUT

    before = queue_length(api_redis)
    body = event_body(sha, len(data))
    resp = client.post("/v1/events", json=body, headers=auth(key))
    assert resp.status_code == 202, resp.text
    assert resp.json() == {"event_id": body["event_id"], "status": "queued", "duplicate": False}
    assert queue_length(api_redis) == before + 1
    message = json.loads(api_redis.lindex("ingest", 0))  # LPUSH: the newest message is first
    assert message["headers"]["task"] == "workers.ingest.ingest"
    assert message["headers"]["id"] == body["event_id"]

    status = client.get(f"/v1/events/{body['event_id']}", headers=auth(key))
    assert status.status_code == 200
    assert status.json()["status"] == "queued" and status.json()["kind"] == "screenshot"


def test_same_event_published_twice_is_enqueued_once(client, api_keys, api_redis):
    key = api_keys["acme"]
    data = png_bytes(2)
    sha, _ = upload(client, key, data)
    body = event_body(sha, len(data))
    before = queue_length(api_redis)
    first = client.post("/v1/events", json=body, headers=auth(key))
    second = client.post("/v1/events", json=body, headers=auth(key))
    assert (first.status_code, second.status_code) == (202, 202)
    assert not first.json()["duplicate"] and second.json()["duplicate"]
    assert second.json()["status"] == "queued"
    assert queue_length(api_redis) == before + 1

    # racing publishers of one new event: exactly one enqueues it
    body = event_body(sha, len(data))
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: client.post("/v1/events", json=body, headers=auth(key)), range(8)))
    assert [a.status_code for a in answers] == [202] * 8
    assert sum(not a.json()["duplicate"] for a in answers) == 1
    assert queue_length(api_redis) == before + 2


def test_tenants_cannot_read_or_publish_into_each_other(client, api_keys):
    acme, globex = api_keys["acme"], api_keys["globex"]
    body = published(client, acme, seed=3)
    eid = body["event_id"]

    theirs = client.get(f"/v1/events/{eid}", headers=auth(globex))
    unknown = client.get(f"/v1/events/{uuid.uuid4()}", headers=auth(globex))
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json() == unknown.json() == {"detail": "event not found"}  # no existence leak

    resp = client.post(
        "/v1/events", json={**body, "event_id": str(uuid.uuid4()), "tenant_id": "acme"}, headers=auth(globex)
    )
    assert resp.status_code == 403
    # acme's object is not globex's: its key resolves under media/globex/, where nothing was uploaded
    resp = client.post("/v1/events", json={**body, "event_id": str(uuid.uuid4())}, headers=auth(globex))
    assert resp.status_code == 404
    resp = client.post(
        "/v1/events",
        json={**body, "event_id": str(uuid.uuid4()), "object_key": f"media/acme/{body['sha256']}.png"},
        headers=auth(globex),
    )
    assert resp.status_code == 422
    resp = client.post("/v1/events", json=body, headers=auth(globex))  # acme's event id
    assert resp.status_code in (404, 409) and "acme" not in resp.text
    assert client.post("/v1/search", json={"query": "x", "tenant_id": "acme"}, headers=auth(globex)).status_code == 403


def test_missing_object_and_size_mismatch(client, api_keys):
    key = api_keys["acme"]
    data = png_bytes(4)
    sha = hashlib.sha256(data).hexdigest()
    resp = client.post("/v1/events", json=event_body(sha, len(data)), headers=auth(key))
    assert resp.status_code == 404 and "not uploaded" in resp.json()["detail"]

    sha, _ = upload(client, key, data)
    resp = client.post("/v1/events", json=event_body(sha, len(data) + 1), headers=auth(key))
    assert resp.status_code == 409


def test_oversize_is_413(client, api_keys):
    key = api_keys["acme"]
    resp = client.post(
        "/v1/uploads", json={"sha256": "a" * 64, "size": 5_000_001, "mime_type": "image/png"}, headers=auth(key)
    )
    assert resp.status_code == 413 and "too large" in resp.json()["detail"]
    resp = client.post("/v1/events", json=event_body("a" * 64, 5_000_001), headers=auth(key))
    assert resp.status_code == 413
    big = json.dumps(event_body("a" * 64, 1, metadata={"k": "x" * 70_000}))  # over the 64 KiB body limit
    resp = client.post("/v1/events", content=big, headers={**auth(key), "Content-Type": "application/json"})
    assert resp.status_code == 413


HOSTILE = {
    "10 kB source name": {"source_name": "a" * 10_000},
    "10 kB window title": {"window": "w" * 10_000},
    "10 kB metadata value": {"metadata": {"note": "x" * 10_000}},
    "too many metadata items": {"metadata": {f"k{i}": "v" for i in range(100)}},
    "escape sequence in window": {"window": "\x1b[2J\x1b[31mowned"},
    "newline in app": {"app": "code\nrm -rf /"},
    "NUL in source name": {"source_name": "shot\x00.png"},
    "control character in metadata": {"metadata": {"note": "a\x07b"}},
    "traversal in source name": {"source_name": "../../etc/passwd"},
    "windows traversal in source name": {"source_name": "C:\\shots\\..\\..\\secret.png"},
    "traversal in metadata key": {"metadata": {"../key": "v"}},
    "unknown kind": {"kind": "hologram"},
    "bad sha256": {"sha256": "Z" * 64},
    "slash in user id": {"user_id": "../alice"},
    "naive capture time": {"captured_at": "2024-05-01T12:00:00"},
    "unknown field": {"shell": "rm -rf /"},
}


@pytest.mark.parametrize("override", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_input_is_422(client, api_keys, api_redis, override):
    before = queue_length(api_redis)
    body = event_body("b" * 64, 10) | override
    resp = client.post("/v1/events", json=body, headers=auth(api_keys["acme"]))
    assert resp.status_code == 422, resp.text
    detail = resp.json()["detail"]
    assert isinstance(detail, list) and detail[0]["loc"][0] == "body" and detail[0]["msg"]
    assert len(resp.content) < 2000  # the hostile input is not echoed back
    assert queue_length(api_redis) == before


def test_unsupported_mime_and_kind_mismatch_are_422(client, api_keys):
    key = api_keys["acme"]
    resp = client.post(
        "/v1/uploads", json={"sha256": "c" * 64, "size": 5, "mime_type": "application/x-sh"}, headers=auth(key)
    )
    assert resp.status_code == 422 and resp.json()["detail"][0]["loc"] == ["body", "mime_type"]
    resp = client.post("/v1/events", json=event_body("c" * 64, 5, mime="image/png", kind="text"), headers=auth(key))
    assert resp.status_code == 422 and resp.json()["detail"][0]["loc"] == ["body", "kind"]
    # a ChatGPT export as downloaded (a .zip holding conversations.json) is a text upload
    resp = client.post(
        "/v1/uploads", json={"sha256": "d" * 64, "size": 5, "mime_type": "application/zip"}, headers=auth(key)
    )
    assert resp.status_code == 200 and resp.json()["object_key"].endswith(".zip"), resp.text


def test_wrong_sha256_event_fails_in_ingest_with_reason(
    client, api_keys, api_settings, seaweedfs_s3, monkeypatch, tmp_path
):
    """The presigned PUT does not check content: publishing does (409, api.uploads); and should an object under
    its content-addressed key hold other bytes all the same, ingest fails the event with the reason."""
    key = api_keys["acme"]
    declared, actual = png_bytes(5), png_bytes(6)
    assert len(declared) == len(actual)
    sha, _ = upload(client, key, actual, declared=declared)
    body = event_body(sha, len(declared))
    refused = client.post("/v1/events", json=body, headers=auth(key))
    assert refused.status_code == 409 and "upload rejected: the uploaded bytes hash to" in refused.json()["detail"]

    from engram.workers.stores.objects import S3ObjectStore

    store = S3ObjectStore(
        seaweedfs_s3.endpoint, seaweedfs_s3.access_key, seaweedfs_s3.secret_key, api_settings.s3_bucket
    )
    store.put_bytes(f"media/acme/{sha}.png", actual)  # written past the API, as a damaged store would
    assert client.post("/v1/events", json=body, headers=auth(key)).status_code == 202

    # run the queued task inline, as a worker would, on the same Redis ledger and S3 bucket
    from engram.workers.ingest import ingest
    from engram.workers.runtime import reset_runtimes

    for var, value in {
        "ENGRAM_REDIS_URL": api_settings.broker_url,
        "ENGRAM_S3_ENDPOINT": seaweedfs_s3.endpoint,
        "ENGRAM_S3_ACCESS_KEY": seaweedfs_s3.access_key,
        "ENGRAM_S3_SECRET_KEY": seaweedfs_s3.secret_key,
        "ENGRAM_S3_BUCKET": api_settings.s3_bucket,
        "ENGRAM_DATA_DIR": str(tmp_path),
    }.items():
        monkeypatch.setenv(var, value)
    reset_runtimes()
    try:
        ingest.apply(args=[{**body, "tenant_id": "acme", "object_key": f"media/acme/{sha}.png"}])
    finally:
        reset_runtimes()
    status = client.get(f"/v1/events/{body['event_id']}", headers=auth(key)).json()
    assert status["status"] == "failed" and status["stage"] == "ingest"
    assert "sha256 mismatch" in status["reason"]


def test_expired_or_tampered_presigned_url_is_refused(api_settings, api_keys):
    data = png_bytes(7)
    sha = hashlib.sha256(data).hexdigest()
    ask = {"sha256": sha, "size": len(data), "mime_type": "image/png"}
    with TestClient(create_app(api_settings)) as c:  # a long-lived URL, so only the signature is wrong
        url = c.post("/v1/uploads", json=ask, headers=auth(api_keys["acme"])).json()["url"]
        tampered = url.replace("X-Amz-Signature=", "X-Amz-Signature=0")
        refused = httpx.put(tampered, content=data)
        assert refused.status_code == 403 and "SignatureDoesNotMatch" in refused.text
    short = api_settings.model_copy(update={"upload_url_expiry_seconds": 1})
    with TestClient(create_app(short)) as c:
        resp = c.post("/v1/uploads", json=ask, headers=auth(api_keys["acme"]))
        url = resp.json()["url"]
        assert resp.json()["expires_in"] == 1
        time.sleep(2.1)
        expired = httpx.put(url, content=data)
        assert expired.status_code == 403 and "expired" in expired.text
        resp = c.post("/v1/events", json=event_body(sha, len(data)), headers=auth(api_keys["acme"]))
        assert resp.status_code == 404  # nothing was stored


def test_readyz_names_what_is_missing(client, api_settings, tmp_path):
    resp = client.get("/readyz")  # broker and S3 up, but no worker consumes this database's queues
    assert resp.status_code == 503
    checks = resp.json()["checks"]
    assert checks["broker"] == "ok" and checks["object_store"] == "ok"
    assert checks["query_worker"] != "ok"

    from tests.servers import free_ports

    dead_redis, dead_s3 = free_ports(2)
    broken = api_settings.model_copy(
        update={"broker_url": f"redis://127.0.0.1:{dead_redis}/0", "s3_endpoint": f"127.0.0.1:{dead_s3}"}
    )
    with TestClient(create_app(broken)) as c:
        t0 = time.monotonic()
        resp = c.get("/readyz")
        assert resp.status_code == 503
        checks = resp.json()["checks"]
        assert checks["broker"] != "ok" and checks["object_store"] != "ok" and checks["query_worker"] != "ok"
        assert time.monotonic() - t0 < 15
        down = c.get(f"/v1/events/{uuid.uuid4()}", headers=auth("egk_any"))  # keys live in the dead Redis
        assert down.status_code == 503 and down.json() == {"detail": "service unavailable, try again"}


def test_keys_cli(api_settings, api_redis, monkeypatch):
    from typer.testing import CliRunner

    from engram.api.cli.main import app as cli
    from engram.api.http.keys import tenant_for

    monkeypatch.setenv("ENGRAM_BROKER_URL", api_settings.broker_url)
    runner = CliRunner()
    made = runner.invoke(cli, ["keys", "create", "--tenant", "initech", "--label", "test laptop"])
    assert made.exit_code == 0, made.output
    key = made.stdout.strip().splitlines()[0]
    assert key.startswith("egk_") and tenant_for(api_redis, key) == "initech"
    listed = runner.invoke(cli, ["keys", "list", "--tenant", "initech"])
    assert "initech" in listed.stdout and "test laptop" in listed.stdout and key not in listed.stdout
    assert runner.invoke(cli, ["keys", "create", "--tenant", "../bad"]).exit_code == 2
    key_id = hashlib.sha256(key.encode()).hexdigest()[:12]
    assert runner.invoke(cli, ["keys", "revoke", key_id]).exit_code == 0
    assert tenant_for(api_redis, key) is None


def test_search_and_readiness_through_a_query_worker(query_worker, api_keys):
    """A real worker process serves the queues: a chat published by acme becomes searchable for acme
    only; /readyz is ready."""
    with TestClient(create_app(query_worker)) as c:
        from engram.api.http.keys import create_key

        keys = {t: create_key(c.app.state.services.redis, t) for t in ("acme", "globex")}
        deadline = time.monotonic() + 30
        while (ready := c.get("/readyz")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert ready.status_code == 200, ready.text

        data = chat_jsonl(
            [
                ("alice", "The quarterly budget review moved to Thursday at the Lisbon office."),
                ("bob", "Fine, I will book the flights to Lisbon."),
            ]
        )
        sha, _ = upload(c, keys["acme"], data, mime="application/x-ndjson")
        body = event_body(sha, len(data), mime="application/x-ndjson", kind="text", source_name="chat.jsonl")
        assert c.post("/v1/events", json=body, headers=auth(keys["acme"])).status_code == 202
        deadline = time.monotonic() + 60
        while (st := c.get(f"/v1/events/{body['event_id']}", headers=auth(keys["acme"])).json())["status"] in (
            "queued",
            "processing",
        ) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert st["status"] == "done", st

        mine = c.post("/v1/search", json={"query": "budget review Lisbon"}, headers=auth(keys["acme"]))
        assert mine.status_code == 200, mine.text
        assert any("Lisbon" in h["text"] for h in mine.json()["hits"])
        theirs = c.post("/v1/search", json={"query": "budget review Lisbon"}, headers=auth(keys["globex"]))
        assert theirs.status_code == 200 and theirs.json()["hits"] == []
