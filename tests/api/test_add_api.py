"""``POST /v1/memories`` and ``POST /v1/entities/{id}/name`` through the API, the SDK and the async SDK, on real
servers: redis-server, SeaweedFS S3 and a real Celery worker process (``query_worker``) that ingests and answers."""

from __future__ import annotations

import time
import uuid

import anyio
import pytest
from fastapi.testclient import TestClient

from engram.api.http.app import create_app
from tests.api.conftest import served
from tests.api.test_app import auth
from tests.api.test_memories_api import wait_done

pytestmark = pytest.mark.timeout(300)


def test_add_by_api_then_search_name_and_sdks(query_worker):
    from engram.api.client import AsyncEngramClient, EngramAPIError, EngramClient
    from engram.api.http.keys import create_key

    with TestClient(create_app(query_worker)) as c:
        tag = uuid.uuid4().hex[:6]
        key = create_key(c.app.state.services.redis, f"add-{tag}")
        other = create_key(c.app.state.services.redis, f"add-other-{tag}")
        text = f"The spare key for the boathouse is under the green pot ({tag})."
        t0 = time.perf_counter()
        r = c.post(
            "/v1/memories",
            json={"text": text, "user_id": "erin", "id": f"k-{tag}", "source": "agent"},
            headers=auth(key),
        )
        assert r.status_code == 202, r.text
        added = r.json()
        assert added["status"] == "queued" and added["duplicate"] is False
        wait_done(c, key, [added["event_id"]])
        hits = c.post(
            "/v1/search", json={"query": "where is the boathouse key?", "user_id": "erin"}, headers=auth(key)
        ).json()["hits"]
        took = time.perf_counter() - t0
        assert any(text in h["text"] for h in hits), hits
        print(f"API add → searchable: {took:.2f} s")
        again = c.post(
            "/v1/memories", json={"text": "something else", "user_id": "erin", "id": f"k-{tag}"}, headers=auth(key)
        ).json()
        assert again["event_id"] == added["event_id"] and again["duplicate"] is True
        assert c.post("/v1/memories", json={"text": text, "user_id": "erin"}).status_code == 401
        both = c.post(
            "/v1/memories", json={"text": "a", "messages": [{"text": "b"}], "user_id": "erin"}, headers=auth(key)
        )
        assert both.status_code == 422
        assert c.get(f"/v1/events/{added['event_id']}", headers=auth(other)).status_code == 404

        # chat messages: one observation each; the speaker becomes an entity, which is named
        msgs = [
            {"speaker": "Frank", "text": f"I moved the canoe to the north shed ({tag})."},
            {"speaker": "erin", "text": "Thanks, I will tell the others."},
        ]
        r = c.post(
            "/v1/memories",
            json={"messages": msgs, "user_id": "erin", "time": "2024-05-02T18:00:00Z"},
            headers=auth(key),
        )
        assert r.status_code == 202, r.text
        wait_done(c, key, [r.json()["event_id"]])
        assert c.get(f"/v1/events/{r.json()['event_id']}", headers=auth(key)).json()["observations"] == 2
        frank = next(e for e in c.get("/v1/entities", headers=auth(key)).json()["items"] if "Frank" in e["names"])
        named = c.post(f"/v1/entities/{frank['id']}/name", json={"name": "Frank Ocean"}, headers=auth(key))
        assert named.status_code == 200, named.text
        assert named.json()["names"] == ["Frank Ocean", "Frank"]
        assert c.post(f"/v1/entities/{frank['id']}/name", json={"name": "X"}, headers=auth(other)).status_code == 404
        assert c.post(f"/v1/entities/{frank['id']}/name", json={"name": " "}, headers=auth(key)).status_code == 422
        # the name binds the entity: a query naming it filters to what it is linked with
        found = c.post("/v1/search", json={"query": "what did Frank Ocean move?"}, headers=auth(key)).json()
        assert found["hits"] and "canoe" in found["hits"][0]["text"]

        with served(query_worker) as url:
            with EngramClient(url, key, retries=2, backoff=0.01, user="gina") as sdk:
                t0 = time.perf_counter()  # the worker's models are loaded by now
                res = sdk.add(
                    [{"speaker": "gina", "text": f"Dinner with the Okafors is on the 14th ({tag})."}], id=f"sdk-{tag}"
                )
                sdk.wait([res.event_id], timeout=120, interval=0.1)
                assert any("Okafors" in h.text for h in sdk.search("dinner Okafors", user="gina").hits)
                print(f"SDK add → searchable (warm worker): {time.perf_counter() - t0:.2f} s")
                assert sdk.add("ignored", id=f"sdk-{tag}").duplicate
                with pytest.raises(EngramAPIError) as err:
                    sdk.name_entity(uuid.uuid4(), "Nobody")
                assert err.value.status == 404

            async def run_async() -> None:
                async with AsyncEngramClient(url, key, retries=2, backoff=0.01, user="hal") as aio:
                    res = await aio.add(f"The wifi password card is taped inside the pantry door ({tag}).")
                    final = await aio.wait([res.event_id], timeout=120)
                    assert final[res.event_id].status.value == "done"
                    found = await aio.search("wifi password card", user="hal")
                    assert any("pantry door" in h.text for h in found.hits)
                    ents = await aio.list_entities()
                    assert any("Frank Ocean" in e.names for e in ents.items)
                    renamed = await aio.name_entity(frank["id"], "Frank")
                    assert renamed.names[0] == "Frank"

            anyio.run(run_async)
