"""The web app's sign-in form under ``engram serve`` limits failed API-key attempts per client
(``api.ui.signin.SigninLimits``, ``ENGRAM_UI_SIGNIN_RATE_LIMIT``): the API served by uvicorn on a real redis-server
(where the counters and keys live) and SeaweedFS S3, no worker (signing in asks none)."""

from __future__ import annotations

import re
import time

import httpx

from tests.api.conftest import make_settings, served

SIGNIN_DB = 9
WINDOW_S = 2


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def _try(http: httpx.Client, token: str, key: str) -> httpx.Response:
    return http.post("/ui/signin", data={"csrf_token": token, "api_key": key})


def test_the_wrong_key_past_the_limit_is_429_and_a_right_key_works_after_the_window(
    redis_server, seaweedfs_s3, tmp_path
):
    import redis

    from engram.api.http.keys import create_key

    settings = make_settings(
        redis_server, seaweedfs_s3, tmp_path, db=SIGNIN_DB, ui_signin_rate_limit=f"3 per {WINDOW_S} seconds"
    )
    r = redis.Redis.from_url(settings.broker_url, decode_responses=True)
    r.flushdb()
    key = create_key(r, "acme", "test")
    with served(settings) as url, httpx.Client(base_url=url, timeout=30) as http:
        token = csrf_of(http.get("/ui/signin").text)
        for n in range(3):
            wrong = _try(http, token, f"egk_not-a-key-{n}")
            assert wrong.status_code == 401 and "not known here" in wrong.text
        refused = _try(http, token, "egk_not-a-key-4")  # the limit's N+1th in the window
        assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= WINDOW_S
        assert (
            "Too many failed sign-ins" in refused.text
            and "script-src 'self'" in refused.headers["content-security-policy"]
        )
        assert _try(http, token, key).status_code == 429  # while over it, any key: a guess learns nothing
        counters = r.keys("*engram-ui-signin*")
        assert counters and not any("127.0.0" in k for k in counters)  # the client's address kept as a hash
        other = httpx.HTTPTransport(local_address="127.0.0.2")  # another client is not held back
        with httpx.Client(base_url=url, timeout=30, transport=other) as elsewhere:
            theirs = csrf_of(elsewhere.get("/ui/signin").text)
            assert _try(elsewhere, theirs, "egk_not-a-key-5").status_code == 401
        time.sleep(WINDOW_S + 0.2)
        ok = _try(http, token, key)
        assert ok.status_code == 303 and ok.headers["location"] == "/ui/", ok.text
        assert "engram_ui_auth" in ok.cookies
    r.close()


def test_an_empty_setting_sets_no_limit(redis_server, seaweedfs_s3, tmp_path):
    settings = make_settings(redis_server, seaweedfs_s3, tmp_path, db=SIGNIN_DB, ui_signin_rate_limit="")
    with served(settings) as url, httpx.Client(base_url=url, timeout=30) as http:
        token = csrf_of(http.get("/ui/signin").text)
        assert {_try(http, token, f"egk_not-a-key-{n}").status_code for n in range(12)} == {401}


def test_every_change_under_serve_needs_the_sessions_csrf_token(redis_server, seaweedfs_s3, tmp_path):
    """Signing in and out and a key's creation and revocation (the changes only ``engram serve``'s app has; the
    shared ones: tests/ui/test_requirements.py) answer 403 without the session's token and change nothing."""
    import redis

    from engram.api.http.keys import create_key, list_keys

    settings = make_settings(redis_server, seaweedfs_s3, tmp_path, db=SIGNIN_DB, ui_signin_rate_limit="")
    r = redis.Redis.from_url(settings.broker_url, decode_responses=True)
    r.flushdb()
    key = create_key(r, "acme", "test")
    with served(settings) as url, httpx.Client(base_url=url, timeout=30) as http:
        token = csrf_of(http.get("/ui/signin").text)
        assert http.post("/ui/signin", data={"api_key": key}).status_code == 403
        assert "engram_ui_auth" not in http.cookies
        assert _try(http, token, key).status_code == 303
        keys_before = {k.key_id for k in list_keys(r, "acme")}
        token = csrf_of(http.get("/ui/connect").text)
        mine = next(iter(keys_before))
        for path in ("/ui/connect/keys", f"/ui/connect/keys/{mine}/revoke", "/ui/signout"):
            assert http.post(path, data={"label": "x"}).status_code == 403, path
            assert http.post(path, data={"label": "x", "csrf_token": "0" * 64}).status_code == 403, path
        assert {k.key_id for k in list_keys(r, "acme")} == keys_before
        assert http.get("/ui/connect").status_code == 200  # still signed in
        assert http.post("/ui/signout", data={"csrf_token": token}).status_code == 303
    r.close()
