"""API hardening on real servers: per-key rate limits (api.ratelimit, counters in the test Redis), and /docs and
/metrics exposed only by their settings."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from engram.api.http.app import create_app
from engram.api.http.keys import create_key
from tests.api.test_app import auth

pytestmark = pytest.mark.timeout(120)


def test_each_key_is_limited_on_its_own(api_settings, api_redis):
    limited = api_settings.model_copy(update={"api_rate_limit": "5/minute;100/hour"})
    hasty, other = create_key(api_redis, "acme"), create_key(api_redis, "acme")
    with TestClient(create_app(limited)) as c:
        codes = [c.get("/v1/memories", params={"user_id": "alice"}, headers=auth(hasty)).status_code for _ in range(6)]
        assert 429 not in codes[:5] and codes[5] == 429
        refused = c.get("/v1/memories", params={"user_id": "alice"}, headers=auth(hasty))
        assert refused.status_code == 429 and 1 <= int(refused.headers["Retry-After"]) <= 60
        assert "5 per 1 minute" in refused.json()["detail"] and hasty not in refused.text
        assert c.get("/v1/memories", params={"user_id": "alice"}, headers=auth(other)).status_code != 429
        assert c.get("/v1/events/00000000-0000-0000-0000-000000000000").status_code == 401  # no key: not counted
    keys = [k for k in api_redis.scan_iter("*engram-api-key*")]
    assert keys and not any(hasty in k for k in keys)  # counters keyed by a hash of the key


def test_docs_and_metrics_are_closed_by_default(api_settings, api_keys):
    closed = api_settings.model_copy(update={"api_public_docs": False, "api_public_metrics": False})
    with TestClient(create_app(closed)) as c:
        for page in ("/docs", "/redoc", "/openapi.json", "/metrics"):
            assert c.get(page).status_code == 404, page
        assert c.get("/metrics", headers=auth(api_keys["acme"])).status_code == 404  # a tenant key is no help
    token = closed.model_copy(update={"api_metrics_token": SecretStr("scrape-me-0123456789")})
    with TestClient(create_app(token)) as c:
        assert c.get("/metrics").status_code == 401
        assert c.get("/metrics", headers=auth(api_keys["acme"])).status_code == 401
        ok = c.get("/metrics", headers=auth("scrape-me-0123456789"))
        assert ok.status_code == 200 and "engram_queue_depth" in ok.text
    public = closed.model_copy(update={"api_public_docs": True, "api_public_metrics": True})
    with TestClient(create_app(public)) as c:
        assert c.get("/metrics").status_code == 200 and c.get("/openapi.json").status_code == 200
