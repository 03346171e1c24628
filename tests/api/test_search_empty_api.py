"""Empty answers through the HTTP API say why, without naming anyone else: ``empty`` is ``unknown_user`` for a user
that holds nothing in the key's tenant and ``no_data`` for a tenant that holds nothing, on search, ask and the
memories list; real servers (redis-server, SeaweedFS S3) and a real Celery worker process (``query_worker``)."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from engram.api.http.app import create_app
from tests.api.test_app import auth
from tests.api.test_memories_api import wait_done

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def test_an_unknown_user_and_an_empty_tenant_say_so_and_name_no_one(query_worker):
    from engram.api.http.keys import create_key

    with TestClient(create_app(query_worker)) as c:
        tag = uuid.uuid4().hex[:6]
        key = create_key(c.app.state.services.redis, f"holder-{tag}")
        empty = create_key(c.app.state.services.redis, f"empty-{tag}")
        r = c.post(
            "/v1/memories",
            json={"text": f"Erin keeps the boat keys in the red tin ({tag}).", "user_id": "erin"},
            headers=auth(key),
        )
        assert r.status_code == 202, r.text
        wait_done(c, key, [r.json()["event_id"]])

        answers = {
            "search": c.post("/v1/search", json={"query": "boat keys", "user_id": "carol"}, headers=auth(key)),
            "ask": c.post(
                "/v1/ask", json={"question": "where are the boat keys?", "user_id": "carol"}, headers=auth(key)
            ),
            "list": c.get("/v1/memories", params={"type": "observation", "user": "carol"}, headers=auth(key)),
        }
        for name, resp in answers.items():
            assert resp.status_code == 200 and resp.json()["empty"] == "unknown_user", (name, resp.text)
        found = c.post("/v1/search", json={"query": "boat keys", "user_id": "erin"}, headers=auth(key)).json()
        assert found["hits"] and found["empty"] is None
        nothing = c.post("/v1/search", json={"query": "boat keys"}, headers=auth(empty))
        assert nothing.status_code == 200 and nothing.json()["empty"] == "no_data"
        for resp in [*answers.values(), nothing]:
            assert "erin" not in resp.text and "holder" not in resp.text, resp.text
