"""Presigned uploads bound to the declared size and sha256 (api.uploads), on the real SeaweedFS S3: a URL writes
a staging key; publishing verifies the staged bytes and moves them to the content-addressed key, which no URL
can overwrite."""

from __future__ import annotations

import hashlib

import httpx
import pytest
from fastapi.testclient import TestClient

from engram.api.http.app import create_app
from engram.workers.stores.objects import S3ObjectStore
from tests.api.conftest import png_bytes
from tests.api.test_app import auth, event_body

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def client(api_settings):
    with TestClient(create_app(api_settings)) as c:
        yield c


@pytest.fixture(scope="module")
def store(api_settings, seaweedfs_s3) -> S3ObjectStore:
    return S3ObjectStore(
        seaweedfs_s3.endpoint, seaweedfs_s3.access_key, seaweedfs_s3.secret_key, api_settings.s3_bucket
    )


def ask(client, key: str, data: bytes) -> tuple[str, dict]:
    sha = hashlib.sha256(data).hexdigest()
    resp = client.post(
        "/v1/uploads", json={"sha256": sha, "size": len(data), "mime_type": "image/png"}, headers=auth(key)
    )
    assert resp.status_code == 200, resp.text
    return sha, resp.json()


def test_a_body_larger_than_declared_is_refused_at_publish(client, api_keys, store):
    key = api_keys["acme"]
    declared = png_bytes(21)[:100]
    sha, up = ask(client, key, declared)
    assert f"/uploads/acme/{sha}.png/" in up["url"] and up["object_key"] == f"media/acme/{sha}.png"
    put = httpx.put(up["url"], content=b"\0" * 2_000_000)  # SeaweedFS takes it: the URL binds only the key
    assert put.status_code == 200
    resp = client.post("/v1/events", json=event_body(sha, 100), headers=auth(key))
    assert resp.status_code == 409
    assert resp.json()["detail"] == (
        "upload rejected: the upload has 2000000 bytes, the event says 100; upload the declared bytes again"
    )
    assert not store.exists(up["object_key"])
    assert store.keys(f"uploads/acme/{sha}.png/") == []  # the staged body is deleted


def test_a_presigned_url_cannot_overwrite_a_published_object(client, api_keys, store):
    key = api_keys["acme"]
    data, other = png_bytes(22), png_bytes(23)
    assert len(data) == len(other)
    sha, up = ask(client, key, data)
    assert httpx.put(up["url"], content=data).status_code == 200
    assert client.post("/v1/events", json=event_body(sha, len(data)), headers=auth(key)).status_code == 202
    assert store.get_bytes(up["object_key"]) == data  # verified, then moved to the content-addressed key
    assert httpx.put(up["url"], content=other).status_code == 200  # the same URL again, other bytes
    assert store.get_bytes(up["object_key"]) == data  # untouched: the URL writes a staging key
    again = ask(client, key, data)[1]
    assert again["exists"] and again["url"] == ""


def test_two_uploads_of_one_content_both_publish(client, api_keys, store):
    """Two devices upload the same bytes at once: each URL is its own staging key; the first publish moves one,
    the second finds the object stored."""
    key = api_keys["acme"]
    data = png_bytes(24)
    (sha, a), (_, b) = ask(client, key, data), ask(client, key, data)
    assert a["url"] != b["url"]
    assert httpx.put(a["url"], content=data).status_code == 200
    assert httpx.put(b["url"], content=data).status_code == 200
    for _ in range(2):
        assert client.post("/v1/events", json=event_body(sha, len(data)), headers=auth(key)).status_code == 202
    assert store.get_bytes(a["object_key"]) == data
    assert store.keys(f"uploads/acme/{sha}.png/") == []


def test_beat_expires_staged_uploads_never_published(client, api_keys, store):
    from datetime import timedelta

    from engram.workers.stores.objects import expire_staged

    data = png_bytes(25)
    sha, up = ask(client, api_keys["acme"], data)
    assert httpx.put(up["url"], content=data).status_code == 200
    [staged] = store.keys(f"uploads/acme/{sha}.png/")
    assert expire_staged(store, timedelta(hours=1)) == 0  # young: its publish may still come
    assert store.keys(f"uploads/acme/{sha}.png/") == [staged]
    assert expire_staged(store, timedelta(0)) >= 1
    assert store.keys("uploads/") == [] and not store.exists(up["object_key"])
