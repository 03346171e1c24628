"""The web app in a real browser (Debian's chromium through Playwright): a note on the timeline and in search with
a thumbnail and why it matched, hostile stored text shown as text (no dialog, visible, nothing injected), a
DNS-rebinding name refused, keyboard-only search, renaming a person, and axe-core's rules on every screen."""

from __future__ import annotations

import re

import pytest

from tests.ui.conftest import HOSTILE, NOTE, REBIND_HOST, RLO

pytestmark = pytest.mark.timeout(300)


def test_a_note_on_the_timeline_and_in_search(page, ui):
    page.goto(f"{ui.url}/timeline?date=2024-05-02")
    assert page.get_by_text(NOTE).is_visible()
    page.goto(f"{ui.url}/search?q=quarterly+budget+review")
    hit = page.locator("li.hit").filter(has=page.locator("img")).first
    hit.locator("img").scroll_into_view_if_needed()
    page.wait_for_function(
        "() => [...document.querySelectorAll('li.hit img')].some(i => i.complete && i.naturalWidth > 0)"
    )
    assert "quarterly budget review" in hit.inner_text().lower() and "Why:" in hit.inner_text()


def test_hostile_text_is_shown_as_text(page, ui):
    page.goto(f"{ui.url}/timeline?date=2024-05-02")
    for text in HOSTILE[:3]:
        assert page.get_by_text(text, exact=False).first.is_visible(), text
    assert page.locator("img[src='x']").count() == 0 and page.locator("main script").count() == 0
    long_item = page.locator("li", has_text="[/code] long line").locator("a").first.get_attribute("href")
    page.goto(ui.url + long_item)
    body = page.locator("p.t.full").inner_text()
    assert body.endswith("x" * 10_000)
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")  # it wraps
    page.goto(f"{ui.url}/search?q=invoice+total")
    assert page.get_by_text(RLO).first.is_visible()
    assert page.dialogs == []


def test_a_rebinding_name_is_refused(page, ui):
    port = ui.url.rsplit(":", 1)[1]
    resp = page.goto(f"http://{REBIND_HOST}:{port}/")
    assert resp.status == 403 and NOTE not in page.content()


def test_keyboard_only_search(page, ui):
    page.goto(f"{ui.url}/")
    page.keyboard.press("/")  # from any screen: to the search page
    page.wait_for_url(re.compile(r"/search$"))
    page.keyboard.press("/")
    assert page.evaluate("() => document.activeElement.id") == "q"
    page.keyboard.type("when does the piano tuner come")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/search\?q=when"))
    assert page.locator("li.hit").first.get_by_text(NOTE).is_visible()


def test_renaming_a_person(page, ui):
    page.goto(f"{ui.url}/people")
    person = page.locator("ul.people > li").filter(has=page.get_by_role("heading", name="Bea"))
    person.get_by_label("Name").fill("Beatrice <b>")
    with page.expect_navigation():
        person.get_by_role("button", name="Rename").click()
    assert page.url == f"{ui.url}/people", page.content()[-1500:]
    assert page.get_by_role("heading", name="Beatrice <b>").is_visible()
    assert ui.service.list_entities("default").items  # the store holds the new name
    assert any("Beatrice <b>" in e.names for e in ui.service.list_entities("default").items)


SCREENS = [
    "/",
    "/timeline?date=2024-05-02",
    "/search?q=quarterly+budget",
    "/people",
    "/memories",
    "/memories?type=semantic",
    "/activity",
    "/connect",
    "/nowhere",
]


def test_no_serious_accessibility_violation_on_any_screen(page, ui):
    from axe_playwright_python.sync_playwright import Axe

    axe = Axe()
    for path in [*SCREENS, f"/item/{ui.screenshot_id}"]:
        page.goto(ui.url + path)
        found = axe.run(page).response["violations"]
        bad = [
            (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
            for v in found
            if v["impact"] in ("serious", "critical")
        ]
        assert bad == [], (path, bad)
    assert page.dialogs == []
