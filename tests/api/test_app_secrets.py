"""POST /v1/events redacts an event's app name, window title and metadata values before it is recorded in the
Redis ledger or sent to the broker (a real redis-server and SeaweedFS S3, as tests/api/test_app.py)."""

from __future__ import annotations

import json

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from pydantic import SecretStr

from engram.api.http.app import create_app
from engram.workers.fairness import queue_lists
from tests.api.conftest import png_bytes
from tests.api.test_app import auth, event_body, upload

pytestmark = pytest.mark.timeout(120)

WINDOW_SECRET, TOKEN = "ApiW1ndow#Pw", "sk-proj-Q8vX2mN4pL7kR9tY3wZ6aB1cApi"


def test_window_title_and_metadata_reach_the_ledger_and_the_queue_redacted(api_settings, api_keys, api_redis):
    key = api_keys["acme"]
    data = png_bytes(4242)
    # a user of its own: its vault entries are not those of another test's user (test_memories_api forgets alice)
    body = {
        "user_id": "dora",
        "window": f"mysql -u root password: {WINDOW_SECRET}",
        "app": "Terminal",
        "metadata": {"note": f"token {TOKEN}", "plain": "nothing here"},
    }
    # an API without ENGRAM_VAULT_KEY cannot keep the secret: 503 with the reason, nothing recorded or queued
    with TestClient(create_app(api_settings)) as c:
        sha, _ = upload(c, key, data)
        event = event_body(sha, len(data), **body)
        resp = c.post("/v1/events", json=event, headers=auth(key))
        assert resp.status_code == 503 and "ENGRAM_VAULT_KEY" in resp.text
        assert c.get(f"/v1/events/{event['event_id']}", headers=auth(key)).status_code == 404
    keyed = api_settings.model_copy(update={"vault_key": SecretStr(Fernet.generate_key().decode())})
    with TestClient(create_app(keyed)) as c:
        resp = c.post("/v1/events", json=event, headers=auth(key))
        assert resp.status_code == 202, resp.text
        status = c.get(f"/v1/events/{event['event_id']}", headers=auth(key)).json()
    # the message sits in one of the ingest queue's priority lists (which one: the tenant's events in flight)
    (message,) = [
        m
        for name in queue_lists("ingest")
        for m in api_redis.lrange(name, 0, -1)
        if json.loads(m)["headers"]["id"] == event["event_id"]
    ]
    stored = [message, json.dumps(status)]
    for k in api_redis.scan_iter():
        if api_redis.type(k) == "hash":
            stored.append(json.dumps(api_redis.hgetall(k)))
        elif api_redis.type(k) == "string":
            stored.append(api_redis.get(k) or "")
    everything = "\n".join(stored)
    assert event["event_id"] in everything and "[vault:" in everything
    assert WINDOW_SECRET not in everything and TOKEN not in everything
    assert "nothing here" in everything and "Terminal" in everything
