"""The parts of the web app under ``engram serve`` that need no cluster (``api.ui.signin``): session tokens (forged,
expired, of another secret), where sign-in may send the browser back, HTTP ranges, links given the ``/ui`` prefix,
and a 503 (not a traceback) when Redis cannot be reached. The whole flow on a real cluster: ``test_serve.py``."""

from __future__ import annotations

import time

import pytest
from cryptography.fernet import Fernet


def test_a_session_token_is_read_back_only_unaltered_in_time_and_with_its_secret():
    from engram.api.ui.signin import Sessions

    key = Fernet.generate_key()
    sessions = Sessions(key, max_age_s=60)
    token = sessions.token("ab" * 32, "acme")
    assert sessions.read(token) == ("ab" * 32, "acme")
    assert "acme" not in token and "abab" not in token  # encrypted, not only signed
    assert sessions.read(token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]) is None  # altered
    assert Sessions(Fernet.generate_key()).read(token) is None  # another API's secret
    assert sessions.read(None) is None and sessions.read("") is None and sessions.read("x" * 5000) is None
    old = Sessions(key, max_age_s=1)
    stale = old.token("cd" * 32, "acme")
    time.sleep(2.1)
    assert old.read(stale) is None  # older than allowed
    assert (
        Sessions(key).csrf.token("s1") == sessions.csrf.token("s1") != Sessions(Fernet.generate_key()).csrf.token("s1")
    )  # the CSRF key derives from the shared secret: every replica checks the same tokens


def test_sign_in_sends_the_browser_back_only_within_the_app():
    from engram.api.ui.signin import local

    assert local("/timeline?date=2024-05-02") == "/timeline?date=2024-05-02"
    for bad in ("//evil.example/x", "https://evil.example/", "/\\evil.example", "timeline", "", None):
        assert local(bad) == ""


@pytest.mark.parametrize(
    ("header", "size", "want"),
    [
        ("bytes=0-99", 1000, (0, 99)),
        ("bytes=100-", 1000, (100, 999)),
        ("bytes=-10", 1000, (990, 999)),
        ("bytes=990-5000", 1000, (990, 999)),
        ("bytes=-5000", 1000, (0, 999)),
        (None, 1000, None),
        ("bytes=0-1,5-9", 1000, None),
        ("items=0-1", 1000, None),
        ("bytes=-", 1000, None),
    ],
)
def test_byte_ranges(header, size, want):
    from engram.api.ui.signin import byte_range

    assert byte_range(header, size) == want


@pytest.mark.parametrize("header", ["bytes=1000-", "bytes=5-2", "bytes=-0"])
def test_a_range_past_the_end_cannot_be_satisfied(header):
    from engram.api.ui.signin import byte_range

    with pytest.raises(ValueError):
        byte_range(header, 1000)


def test_pages_made_for_the_root_link_under_the_prefix():
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse, RedirectResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from engram.api.ui.signin import Prefixed

    html = (
        '<a href="/timeline">t</a> <img src="/thumb/1" alt=""> <form action="/search"></form> '
        '<a href="//cdn.example/x">c</a> <p>href=&#34;/not-a-link&#34; said href="/x" in text</p>'
        "<footer>f</footer>"
    )
    app = Starlette(
        routes=[
            Route("/", lambda r: HTMLResponse(html)),
            Route("/go", lambda r: RedirectResponse("/people?user=a", status_code=303)),
        ]
    )
    client = TestClient(Prefixed(app, "/ui", b"<form>out</form>"))
    body = client.get("/").text
    assert 'href="/ui/timeline"' in body and 'src="/ui/thumb/1"' in body and 'action="/ui/search"' in body
    assert 'href="//cdn.example/x"' in body and "href=&#34;/not-a-link&#34;" in body  # escaped text untouched
    assert body.endswith("f<form>out</form></footer>")
    assert client.get("/go", follow_redirects=False).headers["location"] == "/ui/people?user=a"


def test_redis_out_of_reach_is_a_503_not_a_traceback(tmp_path):
    from starlette.testclient import TestClient

    from engram.api.http.app import create_app
    from engram.schemas.settings import Settings
    from tests.servers import free_ports

    (port,) = free_ports(1)  # nothing listens there
    settings = Settings(broker_url=f"redis://127.0.0.1:{port}/0", data_dir=tmp_path, api_rate_limit="")
    with TestClient(create_app(settings)) as client:
        r = client.get("/ui/timeline", follow_redirects=False)
    assert r.status_code == 503 and "Redis" in r.text and r.headers["retry-after"] == "5"
    assert "script-src 'self'" in r.headers["content-security-policy"]
