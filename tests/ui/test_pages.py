"""The web app over HTTP (httpx against the app served on loopback): every screen answers with the security
headers, stored text is escaped, a foreign Host is refused, POSTs need the session's CSRF token, another tenant's
or user's item and an unknown one answer 404, originals stream with range requests, thumbnails are small WebPs
made once, and the UI's routes are in no OpenAPI document."""

from __future__ import annotations

import re

import httpx
import pytest

from engram.schemas.add import AddMemoryRequest
from engram.schemas.memories import MemoryType
from engram.schemas.settings import get_settings
from engram.schemas.timeline import TimelineRequest
from tests.ui.conftest import NOTE

SCREENS = ["/", "/timeline?date=2024-05-02", "/search?q=piano+tuner", "/people", "/memories", "/activity", "/connect"]


@pytest.fixture
def client(ui):
    with httpx.Client(base_url=ui.url, timeout=120) as c:
        yield c


def test_every_screen_answers_with_a_strict_policy(client):
    for path in SCREENS:
        r = client.get(path)
        assert r.status_code == 200, (path, r.text[-500:])
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        assert "<script>" not in r.text.replace('<script src="/static/ui.js" defer></script>', "")
    start = client.get("/").text
    assert all(f'href="/{s}"' in start for s in ("timeline", "search", "people", "memories", "activity", "connect"))
    assert '<option value="alice">' in start and '<option value="bob">' in start  # every user of the tenant


def test_stored_text_is_escaped(client):
    day = client.get("/timeline?date=2024-05-02").text
    assert NOTE in day
    assert 'href="/timeline?date=2024-05-01" rel="prev"' in day and 'href="/timeline?date=2024-05-03" rel="next"' in day
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in day and "<script>alert(1)" not in day
    assert "&lt;img src=x onerror=alert(1)&gt;" in day and "<img src=x" not in day
    found = client.get("/search", params={"q": "budget memo"}).text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; budget memo" in found and "Why:" in found


def test_a_host_that_is_not_the_bound_address_is_refused(ui):
    for host in ("evil.example", "evil.example:80", "192.168.1.5"):
        r = httpx.get(ui.url + "/", headers={"Host": host})
        assert r.status_code == 403, host
    assert httpx.get(ui.url + "/", headers={"Host": "localhost:" + ui.url.rsplit(":", 1)[1]}).status_code == 200


def test_posts_need_the_sessions_csrf_token(client, ui):
    people = client.get("/people")
    entity = re.search(r'action="/people/([0-9a-f-]+)/name"', people.text).group(1)
    name = re.search(rf'id="name-{entity}" name="name" required maxlength="256" value="([^"]*)"', people.text).group(1)
    token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', people.text).group(1)
    url = f"/people/{entity}/name"
    assert client.post(url, data={"name": "Mallory"}).status_code == 403  # no token
    assert client.post(url, data={"name": "Mallory", "csrf_token": "0" * 64}).status_code == 403
    stranger = httpx.post(ui.url + url, data={"name": "Mallory", "csrf_token": token})  # no session cookie
    assert stranger.status_code == 403
    other_site = client.post(url, data={"name": "Mallory", "csrf_token": token}, headers={"Origin": "http://evil"})
    assert other_site.status_code == 403
    assert "Mallory" not in client.get("/people").text
    done = client.post(url, data={"name": name, "csrf_token": token})  # its own name again
    assert done.status_code == 303 and done.headers["location"] == "/people"


def test_unknown_foreign_and_deleted_items_answer_404(client, ui):
    assert client.get(f"/item/{ui.other_tenant_id}").status_code == 404  # another tenant's
    assert client.get(f"/media/{ui.other_tenant_id}").status_code == 404
    assert client.get(f"/thumb/{ui.other_tenant_id}").status_code == 404
    assert client.get(f"/item/{ui.bob_id}", params={"user": "alice"}).status_code == 404  # another user's
    assert client.get(f"/item/{ui.bob_id}", params={"user": "bob"}).status_code == 200
    assert client.get("/item/not-an-id").status_code == 404
    assert client.get("/item/00000000-0000-4000-8000-000000000000").status_code == 404
    assert client.get("/nowhere").status_code == 404
    assert client.get("/timeline", params={"date": "May 2"}).status_code == 400
    assert client.get("/timeline", params={"user": "<bad>"}).status_code == 404


def test_media_streams_with_ranges_and_thumbnails_are_small_webps(client, ui):
    whole = client.get(f"/media/{ui.screenshot_id}")
    assert whole.status_code == 200 and whole.headers["content-type"] == "image/png"
    part = client.get(f"/media/{ui.screenshot_id}", headers={"Range": "bytes=10-29"})
    assert part.status_code == 206 and part.content == whole.content[10:30]
    assert part.headers["content-range"] == f"bytes 10-29/{len(whole.content)}"
    thumb = client.get(f"/thumb/{ui.screenshot_id}")
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/webp"
    assert len(thumb.content) < 20_000 and "max-age" in thumb.headers["cache-control"]
    item = client.get(f"/item/{ui.screenshot_id}").text
    assert "quarterly budget review" in item.lower() and f'src="/media/{ui.screenshot_id}"' in item
    day = client.get("/timeline", params={"date": "2024-05-02", "user": "alice"}).text
    assert re.search(rf'<img src="/thumb/{ui.screenshot_id}\?user=alice" loading="lazy" width="160" height="90"', day)
    assert "Firefox" in day


def test_the_ui_is_in_no_openapi_document(client):
    assert client.get("/openapi.json").status_code == 404 and client.get("/docs").status_code == 404


def test_a_missing_original_shows_a_placeholder_with_the_reason(client, ui):
    resp = ui.service.add(AddMemoryRequest(text="a note whose file goes", user_id="dora"), "default", "x")
    assert resp.status.value == "done"
    rec = ui.service.list_memories("default", MemoryType.observation, "dora").items[0]
    ui.service.media("default", rec.id).path.unlink()
    page = client.get(f"/item/{rec.id}")
    assert page.status_code == 200 and "The original cannot be shown" in page.text and "no longer stored" in page.text


def test_merging_two_people(client, ui):
    for speaker in ("Zed", "Zed Zimmer"):
        req = AddMemoryRequest(messages=[{"speaker": speaker, "text": f"{speaker} plays the tuba"}], user_id="erin")
        assert ui.service.add(req, "default", "x").status.value == "done"
    ids = {e.names[0]: str(e.id) for e in ui.service.list_entities("default").items if e.names}
    people = client.get("/people").text
    token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', people).group(1)
    same = client.post(f"/people/{ids['Zed']}/merge", data={"into": ids["Zed"], "csrf_token": token})
    assert same.status_code == 400
    done = client.post(f"/people/{ids['Zed Zimmer']}/merge", data={"into": ids["Zed"], "csrf_token": token})
    assert done.status_code == 303
    names = [e.names for e in ui.service.list_entities("default").items if "Zed" in e.names]
    assert len(names) == 1 and "Zed Zimmer" in names[0]
    assert f"/people/{ids['Zed Zimmer']}/merge" not in client.get("/people").text


def test_search_filters_by_memory_type_kind_and_application(client, ui):
    shots = client.get("/search", params={"q": "quarterly budget review", "type": "observation", "app": "Firefox"})
    assert shots.status_code == 200 and f"/thumb/{ui.screenshot_id}" in shots.text
    assert shots.text.count('class="hit"') == 1
    elsewhere = client.get("/search", params={"q": "quarterly budget review", "app": "Slack"})
    assert 'class="hit"' not in elsewhere.text and "Nothing found" in elsewhere.text
    assert client.get("/search", params={"q": "x", "type": "bogus"}).status_code == 400


def test_a_recordings_segment_plays_from_its_offset():
    """An audio segment's page plays the original from the segment's offset (a media fragment, no script); a
    clip's is a video."""
    import uuid
    from zoneinfo import ZoneInfo

    from engram.api.ui.pages import environment
    from engram.schemas.memory_admin import MemoryRecord

    env = environment(ZoneInfo("UTC"))
    common = dict(
        user=None,
        uq="?user=ann",
        ua="&user=ann",
        missing=None,
        names={},
        evidence=[],
        tenant="t",
        users=[],
        csrf="x",
        csrf_field="c",
        path="/item",
        query={},
    )
    for kind, tag in (("audio", "audio"), ("clip", "video")):
        rec = MemoryRecord(
            id=uuid.uuid4(),
            memory_type=MemoryType.observation,
            tenant_id="t",
            text="hello",
            payload={"kind": kind, "start_s": 12.5, "end_s": 30.0, "object_key": "media/t/x.bin"},
        )
        html = env.get_template("item.html").render(rec=rec, **common)
        assert f'<{tag} id="player" controls preload="metadata"' in html
        assert f'src="/media/{rec.id}?user=ann#t=12.5,30"' in html


def test_the_timeline_opens_on_the_day_of_the_newest_observation(client, ui):
    newest = ui.service.timeline(TimelineRequest(tenant_id="default", limit=1)).items[0]
    day = newest.time.astimezone(get_settings().tzinfo).date().isoformat()
    page = client.get("/timeline").text  # no date asked for: not an empty today when the memory is older
    assert f'name="date" value="{day}"' in page and "Nothing captured" not in page


def test_no_asset_comes_from_another_origin(client):
    """No CDN: the policy allows this origin only (no host, no scheme), and every page's scripts, styles, images
    and media are paths of the app."""
    for path in SCREENS:
        r = client.get(path)
        for directive in r.headers["content-security-policy"].split(";"):
            sources = directive.split()[1:]
            assert all(s in ("'self'", "'none'") for s in sources), directive
        refs = re.findall(r'<(?:script|img|audio|video|source|link)\b[^>]*?\b(?:src|href)="([^"]*)"', r.text)
        assert refs and all(ref.startswith("/") and not ref.startswith("//") for ref in refs), (path, refs)


def test_connect_gives_the_mcp_configuration_with_this_installs_paths(client, ui):
    import html
    import json
    import shutil
    import sys
    from pathlib import Path

    page = client.get("/connect").text
    snippet = json.loads(
        html.unescape(re.search(r'<pre class="snippet"><code>(.*?)</code></pre>', page, re.S).group(1))
    )
    entry = snippet["mcpServers"]["engram"]
    assert entry["args"] == ["mcp", "--data-dir", str(ui.data_dir)]
    exe = shutil.which("engram") or str(Path(sys.executable).with_name("engram"))
    assert entry["command"] == exe and Path(exe).is_absolute()


def test_a_hits_page_highlights_the_words_it_matched(client, ui):
    """A search hit links to its item with the words it matched (``matched.words``); the item's text and OCR lines
    show them in ``<mark>`` (a word that starts with one: BM25 compares stems), and stay text."""
    found = client.get("/search", params={"q": "quarterly budget review", "user": "alice"}).text
    link = re.search(rf'href="(/item/{ui.screenshot_id}\?user=alice&amp;hl=[^"]+)"', found)
    assert link, found[-3000:]
    page = client.get(link.group(1).replace("&amp;", "&")).text
    assert "<mark>budget</mark>" in page.lower() and "<mark>review" in page.lower()
    assert "<details open>" in page  # the OCR lines shown open
    hostile = re.search(
        r'href="(/item/[0-9a-f-]{36}\?hl=budget%20memo)"', client.get("/search", params={"q": "budget memo"}).text
    ).group(1)
    item = client.get(hostile + "+%3Cscript%3E").text  # markup asked for is a word: marked inside the escaped text
    assert (
        "&lt;<mark>script</mark>&gt;alert(1)&lt;/<mark>script</mark>&gt; <mark>budget</mark> <mark>memo</mark>" in item
    )
    assert "<script>alert" not in item and "<mark><" not in item


def test_search_filters_by_device_person_and_days(client):
    """The search form's device, person (a name of an entity, or its id) and from/to days narrow the hits; an
    unknown name says so instead of searching."""

    def hits(**params) -> str:
        page = client.get(
            "/search", params={"q": "when does the harbour festival start", "type": "observation", **params}
        )
        assert page.status_code == 200, page.text[-500:]
        return page.text

    assert "The harbour festival starts on the ninth" in hits()
    assert "starts on the ninth" in hits(device="phone") and "starts on the ninth" not in hits(device="laptop")
    bea = client.get("/people").text
    assert "Bea" in bea
    said = "starts on the ninth"
    assert said in hits(person="bea") and said in hits(**{"from": "2024-05-02", "to": "2024-05-02"})
    assert said not in hits(**{"from": "2024-05-03"}) and said not in hits(to="2024-05-01")
    nobody = hits(person="Nobody Atall")
    assert "No person is called" in nobody and 'class="hit"' not in nobody
    assert client.get("/search", params={"q": "x", "from": "2024-05-03", "to": "2024-05-01"}).status_code == 400


def test_an_observations_page_lists_the_memories_it_fed(client, ui):
    """An observation's page links the memories drawn from it (their provenance), and each of those links back to
    it as evidence; another tenant's observation feeds nothing here."""
    from engram.schemas.memories import MemoryType as T

    note = next(r for r in ui.service.list_memories("default", T.observation, "alice", 50).items if NOTE in r.text)
    fed = ui.service.memories_from("default", note.id)
    assert fed and all(str(note.id) in m.payload["provenance"]["observation_ids"] for m in fed)
    assert all(not m.payload.get("superseded_by") for m in fed)
    page = client.get(f"/item/{note.id}").text
    assert "Memories it fed" in page and all(f'href="/item/{m.id}"' in page for m in fed)
    back = client.get(f"/item/{fed[0].id}").text
    assert f'href="/item/{note.id}"' in back  # its evidence
    assert ui.service.memories_from("globex", note.id) == []
