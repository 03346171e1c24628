"""Issue 42's requirements that the other web app tests do not name, each read from the served HTML (httpx against
the ``ui`` store on loopback): the timeline's groups by application and window and its chat turns with their
speaker, an item's time, device, source and linked people, the six memory types in tabs with evidence and
strength, the activity's events by status and the capture's denied applications and titles, and every POST route
the app has refusing a change without the session's CSRF token."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest
from starlette.testclient import TestClient

from engram.schemas.memories import MEMORY_TYPES
from tests.ui.conftest import NOTE


@pytest.fixture
def client(ui):
    with httpx.Client(base_url=ui.url, timeout=120) as c:
        yield c


def test_the_timeline_groups_frames_by_application_and_window_and_shows_chat_turns_with_their_speaker(client, ui):
    day = client.get("/timeline", params={"date": "2024-05-02"}).text
    assert re.search(r"<h2><bdi>Firefox</bdi> — <bdi>Budget - Mozilla Firefox</bdi></h2>", day), day[-3000:]
    turn = re.search(r"<li>.*?<b><bdi>Bea</bdi></b>\s*<span class=\"t\">([^<]*)</span>", day, re.S)
    assert turn and turn.group(1) == "The harbour festival starts on the ninth"
    assert NOTE in day and f"/thumb/{ui.screenshot_id}" in day


def test_an_items_page_gives_its_time_device_source_and_linked_people(client, ui):
    shot = client.get(f"/item/{ui.screenshot_id}").text
    facts = dict(re.findall(r"<dt>([^<]+)</dt><dd>(.*?)</dd>", shot, re.S))
    assert "2024-05-02 10:00:00" in facts["When"] and "laptop" in facts["Device"]
    assert "shot.png" in facts["Source"] and "Firefox" in facts["Application"]
    chat = client.get(f"/item/{ui.bob_id}").text
    people = re.search(r"<dt>People</dt><dd>(.*?)</dd>", chat, re.S)
    assert people, chat[-2000:]
    link = re.search(r'<a href="/people#person-([0-9a-f-]{36})">', people.group(1))
    entity = next(e for e in ui.service.list_entities("default").items if str(e.id) == link.group(1))
    assert entity.names and f'id="person-{entity.id}"' in client.get("/people").text


def test_memories_come_in_six_tabs_with_evidence_and_strength(client, ui):
    page = client.get("/memories").text
    tabs = re.search(r'<nav class="tabs" aria-label="Memory types">(.*?)</nav>', page, re.S).group(1)
    types = re.findall(r'href="/memories\?type=([a-z_]+)"', tabs)
    assert types == [t.value for t in MEMORY_TYPES] and len(types) == 6
    for t in types:
        assert client.get("/memories", params={"type": t}).status_code == 200, t
    episodic = client.get("/memories", params={"type": "episodic", "user": "alice"}).text
    assert re.search(r'class="strength">strength \d\.\d\d<', episodic), episodic[-2000:]
    evidence = re.findall(r'<p class="evidence">Evidence: <a href="/item/([0-9a-f-]{36})\?user=alice"', episodic)
    assert evidence
    observation = client.get(f"/item/{evidence[0]}", params={"user": "alice"})
    assert observation.status_code == 200 and "Observation" in observation.text


def test_activity_shows_events_by_status_and_the_captures_denied_apps_and_titles(client, ui):
    page = client.get("/activity").text
    counts = dict(re.findall(r'href="/activity\?status=([a-z]+)"[^>]*>\1: (\d+)</a>', page))
    done = [r for r in ui.service.events("default", None, None, 10_000) if r.status.value == "done"]
    assert int(counts["done"]) == len(done) > 0 and {"failed", "queued"} <= counts.keys()
    only_done = client.get("/activity", params={"status": "done"}).text
    assert "<h2>Events: done</h2>" in only_done and "<td>failed</td>" not in only_done
    assert client.get("/activity", params={"status": "bogus"}).status_code == 400
    apps = re.search(r'<h3 id="deny-apps">.*?</section>', page, re.S).group(0)
    titles = re.search(r'<h3 id="deny-titles">.*?</section>', page, re.S).group(0)
    assert "<bdi>keepassxc</bdi>" in apps and "<code>private browsing</code>" in titles


def test_every_post_route_refuses_a_change_without_the_sessions_csrf_token(ui):
    """Every POST route of the app (read from its routes, so a new one is checked too) answers 403 without a token,
    with another session's token, and from another site; nothing changes."""
    from engram.api.ui.app import create_ui
    from engram.api.ui.pages import UiConfig

    guarded = create_ui(UiConfig(ui.service, "default", ui.data_dir, None))
    posts = [r.path for r in guarded.app.routes if "POST" in getattr(r, "methods", ())]
    assert len(posts) >= 7, posts
    names = {e.id: e.names for e in ui.service.list_entities("default").items}
    with TestClient(guarded) as mine, TestClient(guarded) as theirs:
        mine.get("/people")
        token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', theirs.get("/people").text).group(1)
        for path in posts:
            url = re.sub(r"\{[a-z_]+\}", str(uuid.uuid4()), path)
            form = {"name": "Mallory", "text": "x", "key": "x", "into": str(uuid.uuid4()), "pause": "1"}
            assert mine.post(url, data=form).status_code == 403, url
            assert mine.post(url, data={**form, "csrf_token": token}).status_code == 403, url  # not its session's
            mine_token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', mine.get("/people").text).group(1)
            elsewhere = mine.post(url, data={**form, "csrf_token": mine_token}, headers={"Origin": "http://evil"})
            assert elsewhere.status_code == 403, url
    assert {e.id: e.names for e in ui.service.list_entities("default").items} == names
    assert not (ui.data_dir / "capture.pause").exists()


def test_search_works_with_javascript_off(browser, ui):
    """Without JavaScript the pages still work: the search form submits, hits show their text, why they matched and
    their thumbnail, and a hit's link opens its item."""
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(f"{ui.url}/search")
        page.get_by_role("searchbox").fill("quarterly budget review")
        with page.expect_navigation():
            page.get_by_role("searchbox").press("Enter")
        hit = page.locator("li.hit").filter(has=page.locator("img")).first
        assert "Why:" in hit.inner_text() and "quarterly budget review" in hit.inner_text().lower()
        hit.locator("img").scroll_into_view_if_needed()
        page.wait_for_function("() => [...document.querySelectorAll('li.hit img')].some(i => i.naturalWidth > 0)")
        with page.expect_navigation():
            hit.locator("a").first.click()
        assert "/item/" in page.url and page.get_by_role("heading", name=re.compile("Observation")).is_visible()
    finally:
        context.close()


def test_the_timeline_shows_a_range_of_days(client, ui):
    """A range (``date`` to ``to``) holds every day's items, its scrubber names each busy hour's day, and the pager
    moves by the range's length."""
    span = client.get("/timeline", params={"date": "2024-05-01", "to": "2024-05-03"}).text
    assert NOTE in span and f"/thumb/{ui.screenshot_id}" in span
    assert re.search(r'<a href="#h-2024-05-02-08">05-02 08:00 ', span)
    assert 'href="/timeline?date=2024-04-28&amp;to=2024-04-30" rel="prev"' in span
    assert client.get("/timeline", params={"date": "2024-05-03", "to": "2024-05-01"}).status_code == 400


def test_search_reads_the_clis_time_words(client):
    """The search page is the CLI's search: time words in the query are resolved by the search layer (said on the
    page) and rank what is inside them."""
    page = client.get("/search", params={"q": "the piano tuner in May 2024"}).text
    assert re.search(r"· time: <bdi>[^<]*May 2024</bdi>", page), page[-3000:]
    assert NOTE in page


def test_another_users_media_and_thumbnail_urls_answer_404(client, ui):
    """With ``?user=`` an item's page, original and thumbnail of another user answer 404 like an unknown one;
    the owner's answer."""
    for path in (f"/item/{ui.screenshot_id}", f"/media/{ui.screenshot_id}", f"/thumb/{ui.screenshot_id}"):
        assert client.get(path, params={"user": "bob"}).status_code == 404, path
        assert client.get(path, params={"user": "alice"}).status_code == 200, path
    assert client.get(f"/media/{ui.bob_id}", params={"user": "alice"}).status_code == 404


@pytest.mark.parametrize(
    "mime, sent",
    [
        ("image/png", ("image/png", "inline")),
        ("audio/flac", ("audio/flac", "inline")),
        ("video/mp4", ("video/mp4", "inline")),
        ("image/svg+xml", ("application/octet-stream", "attachment")),
        ("text/html", ("application/octet-stream", "attachment")),
        ("text/javascript", ("application/octet-stream", "attachment")),
        ("text/plain", ("application/octet-stream", "attachment")),
    ],
)
def test_an_original_is_rendered_only_when_a_picture_recording_or_video(mime, sent):
    """What ``engram ui`` and ``engram serve``'s /ui send an original as (``media_type_of``): a stored page or
    script is a download, never a document or a script of the app's origin."""
    from engram.api.ui.pages import media_type_of

    assert media_type_of(mime) == sent


def test_an_original_keeps_its_sandbox_policy_and_pages_keep_theirs(client, ui):
    """The guard adds the pages' policy to every answer but keeps an original's own, stricter one."""
    for path in (f"/media/{ui.screenshot_id}", f"/thumb/{ui.screenshot_id}"):
        sent = client.get(path)
        assert sent.headers["content-security-policy"] == "sandbox; default-src 'none'", path
        assert sent.headers["x-content-type-options"] == "nosniff"
    note = client.get(f"/media/{ui.bob_id}")
    assert note.status_code == 200 and note.headers["content-type"] == "application/octet-stream"
    assert note.headers["content-disposition"].startswith("attachment")
    for path in ("/", "/nowhere", f"/item/{ui.screenshot_id}"):
        assert "script-src 'self'" in client.get(path).headers["content-security-policy"], path


def test_activity_lists_the_privacy_rules_of_the_settings_which_capture_applies(client, monkeypatch):
    from engram.api.capture.agent import privacy_rules

    monkeypatch.setenv("ENGRAM_CAPTURE_DENY_APPS", '["signal-desktop"]')
    monkeypatch.setenv("ENGRAM_CAPTURE_DENY_TITLES", '["\\\\bmedical record\\\\b"]')
    page = client.get("/activity").text
    apps = re.search(r'<h3 id="deny-apps">.*?</section>', page, re.S).group(0)
    titles = re.search(r'<h3 id="deny-titles">.*?</section>', page, re.S).group(0)
    assert "<bdi>keepassxc</bdi>" in apps and "<bdi>signal-desktop</bdi>" in apps
    assert r"<code>\bmedical record\b</code>" in titles and "<code>private browsing</code>" in titles
    rules = privacy_rules(["thunderbird"], None, print)  # what engram capture --deny-app thunderbird applies
    assert {"keepassxc", "signal-desktop", "thunderbird"} <= set(rules.deny_apps)
    assert any(p.search("Medical Record 2024 - Viewer") for p in rules.deny_titles)


def test_a_bad_title_pattern_in_the_settings_is_refused_naming_it(monkeypatch):
    from engram.schemas.settings import Settings

    with pytest.raises(ValueError, match=r"not a regular expression: '\(unclosed'"):
        Settings(capture_deny_titles=["(unclosed"])
