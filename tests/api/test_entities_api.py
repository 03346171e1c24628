"""``GET /v1/entities`` and ``POST /v1/entities/{id}/merge`` through the API and the SDK, on real servers:
redis-server, SeaweedFS S3 and a real Celery worker process (``query_worker``) that ingests, links and answers."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from engram.api.http.app import create_app
from tests.api.conftest import served
from tests.api.test_app import auth
from tests.api.test_memories_api import publish_chat, wait_done

pytestmark = pytest.mark.timeout(240)


def test_entities_are_listed_per_tenant_and_merged(query_worker):
    from engram.api.client import EngramAPIError, EngramClient
    from engram.api.http.keys import create_key

    with TestClient(create_app(query_worker)) as c:
        tag = uuid.uuid4().hex[:6]
        key = create_key(c.app.state.services.redis, f"ent-{tag}")
        other = create_key(c.app.state.services.redis, f"ent-other-{tag}")
        eid = publish_chat(
            c,
            key,
            "carol",
            [
                ("Carol", "The budget review moved to Friday."),
                ("Dave", "Then I book the Lisbon room."),
                ("Carol", "Thanks, Dave."),
            ],
            f"e{tag}",
        )
        wait_done(c, key, [eid])

        got = c.get("/v1/entities", headers=auth(key))
        assert got.status_code == 200, got.text
        listed = got.json()
        by_name = {tuple(e["names"]): e for e in listed["items"]}
        assert listed["total"] == 2 and set(by_name) == {("Carol",), ("Dave",)}
        carol, dave = by_name[("Carol",)], by_name[("Dave",)]
        assert listed["items"][0] == carol and carol["observations"] == 2 and dave["observations"] == 1
        assert carol["first_seen"] and carol["last_seen"] >= carol["first_seen"]
        assert c.get("/v1/entities", headers=auth(other)).json() == {"items": [], "total": 0}  # tenant-scoped
        assert c.get("/v1/entities").status_code == 401

        # another tenant's entity is unknown; an entity cannot be merged with itself
        merge = f"/v1/entities/{carol['id']}/merge"
        assert c.post(merge, json={"entity_id": dave["id"]}, headers=auth(other)).status_code == 404
        assert c.post(merge, json={"entity_id": carol["id"]}, headers=auth(key)).status_code == 422
        assert c.post(merge, json={"entity_id": str(uuid.uuid4())}, headers=auth(key)).status_code == 404

        with served(query_worker) as url, EngramClient(url, key, retries=2, backoff=0.01) as sdk:
            assert {e.names[0] for e in sdk.list_entities().items} == {"Carol", "Dave"}
            kept = sdk.merge_entities(carol["id"], dave["id"], reason="same person")
            assert str(kept.id) == carol["id"] and kept.names == ["Carol", "Dave"] and kept.observations == 3
            assert kept.merged_from == [dave["id"]]
            (only,) = sdk.list_entities().items
            assert only.id == kept.id
            with pytest.raises(EngramAPIError) as err:
                sdk.merge_entities(carol["id"], dave["id"])  # merged away already
            assert err.value.status == 404
        # the stored messages of Dave now name the kept entity
        hits = c.post("/v1/search", json={"query": "Lisbon room", "entities": [carol["id"]]}, headers=auth(key)).json()[
            "hits"
        ]
        assert any("Lisbon" in h["text"] for h in hits)
