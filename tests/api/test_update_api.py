"""Correcting a memory through the HTTP API and the SDK (issue 44): ``PATCH /v1/memories/{id}`` and
``EngramClient.update_memory`` on real servers (redis-server, SeaweedFS S3 and a real Celery worker process,
``query_worker``): a note's episodic memory corrected supersedes the old version, which is kept (``superseded_by``,
``valid_to``); search answers the correction; a second edit of the old version, an observation and an empty text
answer 422; an unknown id and another tenant's key 404."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from engram.api.http.app import create_app
from tests.api.conftest import served
from tests.api.test_app import auth
from tests.api.test_memories_api import wait_done
from tests.cluster import producer

pytestmark = pytest.mark.timeout(300)


def _episodic(c: TestClient, key: str, query: str) -> list[dict]:
    r = c.post("/v1/search", json={"query": query, "user_id": "erin", "memory_types": ["episodic"]}, headers=auth(key))
    assert r.status_code == 200, r.text
    return r.json()["hits"]


def test_a_correction_through_the_api_and_the_sdk_supersedes_the_old_version(query_worker):
    from engram.api.client import EngramAPIError, EngramClient
    from engram.api.http.keys import create_key

    with TestClient(create_app(query_worker)) as c:
        tag = uuid.uuid4().hex[:6]
        key = create_key(c.app.state.services.redis, f"upd-{tag}")
        other = create_key(c.app.state.services.redis, f"upd-other-{tag}")
        text = f"The canoe paddles are stored above the garage door ({tag})."
        r = c.post("/v1/memories", json={"text": text, "user_id": "erin", "id": f"p-{tag}"}, headers=auth(key))
        assert r.status_code == 202, r.text
        wait_done(c, key, [r.json()["event_id"]])
        app = producer(query_worker)
        try:  # the user's observations into memories now (beat would start it later)
            app.send_task("workers.consolidate.consolidate_user", args=[f"upd-{tag}", "erin"]).get(timeout=180)
        finally:
            app.close()
        hits = [h for h in _episodic(c, key, "where are the canoe paddles?") if tag in h["text"]]
        assert hits, "no episodic memory of the note"
        old_id = hits[0]["id"]
        obs = c.get("/v1/memories", params={"type": "observation", "user": "erin"}, headers=auth(key)).json()
        obs_id = obs["items"][0]["id"]

        patched = c.patch(f"/v1/memories/{old_id}", json={"text": f"The canoe paddles hang in the shed ({tag})."})
        assert patched.status_code in (401, 403)  # no key
        patched = c.patch(
            f"/v1/memories/{old_id}", json={"text": f"The paddles are in the shed ({tag})."}, headers=auth(other)
        )
        assert patched.status_code == 404  # another tenant's memory is unknown to this key
        assert c.patch(f"/v1/memories/{obs_id}", json={"text": "x"}, headers=auth(key)).status_code == 422
        assert c.patch(f"/v1/memories/{old_id}", json={"text": "  "}, headers=auth(key)).status_code == 422
        unknown = c.patch(f"/v1/memories/{uuid.uuid4()}", json={"text": "x"}, headers=auth(key))
        assert unknown.status_code == 404

        with served(query_worker) as url, EngramClient(url, key, retries=2, backoff=0.01) as sdk:
            first = sdk.update_memory(old_id, f"The canoe paddles hang in the shed ({tag}).")
            assert str(first.id) != old_id and "shed" in first.text
            with pytest.raises(EngramAPIError) as err:
                sdk.update_memory(old_id, "again")
            assert err.value.status == 422 and "superseded" in str(err.value)
            kept = sdk.get_memory(old_id)
            assert "garage door" in kept.text and kept.payload["superseded_by"] == str(first.id)
            assert kept.payload["valid_to"]
        second = c.patch(
            f"/v1/memories/{first.id}",
            json={"text": f"The canoe paddles are in the boathouse ({tag})."},
            headers=auth(key),
        )
        assert second.status_code == 200, second.text
        assert (
            c.get(f"/v1/memories/{first.id}", headers=auth(key)).json()["payload"]["superseded_by"]
            == second.json()["id"]
        )
        texts = [h["text"] for h in _episodic(c, key, "where are the canoe paddles?") if tag in h["text"]]
        assert texts and all("boathouse" in t for t in texts), texts
