"""The web app's screens in a real browser (Debian's chromium through Playwright), on the ``ui`` store with real
media added: a photo of two faces and a recording (the shared evaluation data), consolidated into memories, and a
file whose ingest failed (its object gone). Naming a person from a face crop (keyboard only), "not this person",
a voice clip with range requests, editing a memory and seeing its history, a delete, a retry of a failure, the
hourly plot with its table, the timeline's scrubber and date picker (keyboard only), and axe-core on every screen,
each screen's screenshot taken (written to docs/screens/<screen>.png, the README's and docs/web.md's pictures, when
ENGRAM_UPDATE_SCREENS=1: `ENGRAM_UPDATE_SCREENS=1 .venv/bin/python -m pytest tests/ui/test_screens.py`)."""

from __future__ import annotations

import os
import re
import uuid
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from tests.ui.conftest import DAY

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

SCREENS_DIR = Path(__file__).resolve().parents[2] / "docs" / "screens"
CORRECTION = "The piano tuner comes on Friday <b>afternoon</b>"


class Media:
    """What this module added to the ``ui`` store: the failed event's id, its object key and bytes."""

    def __init__(self, failed_id: uuid.UUID, key: str, data: bytes) -> None:
        self.failed_id, self.key, self.data = failed_id, key, data


@pytest.fixture(scope="module")
def media(ui, eval_data, tmp_path_factory) -> Media:
    """Ingest a photo of two faces and a speech recording for alice (then consolidate her memories), and a
    screenshot whose object is deleted before it runs: a failure whose reason is the missing object."""
    from PIL import Image, ImageDraw

    from engram.api.embedded import ingest_paths
    from engram.api.local import classify, publish_file, run_event
    from engram.workers.runtime import runtime

    out = ingest_paths(
        [eval_data / "faces" / "deepface" / "couple.jpg", eval_data / "audio" / "jfk.flac"],
        "default",
        "alice",
        "laptop",
        captured_at=DAY + timedelta(hours=11),
        quiet=True,
    )
    assert len(out["done"]) == 2, out
    folder = tmp_path_factory.mktemp("lost")
    shot = Image.new("RGB", (480, 200), "white")
    ImageDraw.Draw(shot).text((10, 90), "lost and found invoice", fill="black")
    shot.save(folder / "lost.png")
    rt = runtime()
    event = publish_file(
        rt, classify(folder / "lost.png"), "default", "alice", "laptop", captured_at=DAY + timedelta(hours=12)
    )
    data = rt.objects.get_bytes(event.object_key)
    rt.objects.delete(event.object_key)
    assert run_event(rt, event).status.value == "failed"
    return Media(event.event_id, event.object_key, data)


def _faces(ui) -> list:
    return [e for e in ui.service.list_entities("default").items if e.faces]


def _shot(page, name: str, top: bool = True, height: int = 900) -> None:
    """The page's screenshot (1200 wide, ``height`` high, from its top unless ``top`` is False), kept as
    docs/screens/<name>.png when ENGRAM_UPDATE_SCREENS=1 (a test run otherwise leaves the committed pictures
    alone)."""
    page.set_viewport_size({"width": 1200, "height": height})
    if top:
        page.evaluate("() => window.scrollTo(0, 0)")
    png = page.screenshot()
    assert png.startswith(b"\x89PNG")
    if os.environ.get("ENGRAM_UPDATE_SCREENS") == "1":
        SCREENS_DIR.mkdir(parents=True, exist_ok=True)
        (SCREENS_DIR / f"{name}.png").write_bytes(png)


def _tab_to(page, selector: str, limit: int = 300) -> None:
    """Press Tab until the focused element matches ``selector`` (keyboard only); fails after ``limit`` presses."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("s => document.activeElement && document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"Tab never reached {selector}")


def _loaded(page, selector: str) -> None:
    page.locator(selector).first.scroll_into_view_if_needed()
    page.wait_for_function(
        "s => [...document.querySelectorAll(s)].some(i => i.complete && i.naturalWidth > 0)", arg=selector
    )


def test_naming_a_person_from_a_face_crop_by_keyboard(page, ui, media):
    person = _faces(ui)[0]
    page.goto(f"{ui.url}/people")
    crop = f"#person-{person.id} ul.faces img"
    _loaded(page, crop)
    assert page.locator(crop).first.get_attribute("loading") == "lazy"
    _tab_to(page, f"#name-{person.id}")
    page.keyboard.press("Control+A")
    page.keyboard.type("Angelina <i>")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.get_by_role("heading", name="Angelina <i>").is_visible()
    assert any("Angelina <i>" in e.names for e in _faces(ui))
    crop_href = page.locator(f"#person-{person.id} ul.faces a").first.get_attribute("href")
    assert re.fullmatch(r"/item/[0-9a-f-]{36}", crop_href)  # the crop links to the photo it was cut from
    assert page.dialogs == []


def test_not_this_person_splits_a_face_off(page, ui, media):
    a, b = _faces(ui)[:2]
    assert ui.service.merge_entities("default", a.id, b.id, "test") is not None
    page.goto(f"{ui.url}/people")
    merged = page.locator(f"#person-{a.id}")
    assert merged.locator("ul.faces img").count() == 2
    before = len(_faces(ui))
    with page.expect_navigation():
        merged.get_by_role("button", name=re.compile(r"^Face 2 is not")).click()
    new_id = page.url.rsplit("#person-", 1)[1]
    assert len(_faces(ui)) == before + 1
    assert page.locator(f"#person-{a.id} ul.faces img").count() == 1
    _loaded(page, f"#person-{new_id} ul.faces img")
    assert page.locator(f"#person-{new_id} ul.faces img").count() == 1


def test_a_voice_clip_streams_with_ranges(ui, media):
    voiced = next(e for e in ui.service.list_entities("default").items if e.voices)
    with httpx.Client(base_url=ui.url, timeout=120) as client:
        html = client.get("/people").text
        src = re.search(rf'<audio controls preload="none" src="(/people/{voiced.id}/sample\?key=[^"]+)"', html)
        assert src, html[-2000:]
        url = src.group(1).replace("&amp;", "&")
        whole = client.get(url)
        assert whole.status_code == 200 and whole.headers["content-type"].startswith("audio/")
        assert whole.content[:4] == b"RIFF" and 16_000 < len(whole.content) < 16_000 * 2 * 7  # at most ~6 s
        part = client.get(url, headers={"Range": "bytes=0-99"})
        assert part.status_code == 206 and part.content == whole.content[:100]
        assert client.get(f"/people/{voiced.id}/sample", params={"key": "nope"}).status_code == 404
        assert client.get(f"/people/{uuid.uuid4()}/sample", params={"key": "x"}).status_code == 404


def test_not_this_person_splits_a_voice_off(ui, media):
    voiced = next(e for e in ui.service.list_entities("default").items if e.voices and not e.faces)
    face = _faces(ui)[0]
    kept = ui.service.merge_entities("default", face.id, voiced.id, "test")
    assert kept is not None and kept.voices == 1
    key = next(s.key for s in ui.service.entity_samples("default", face.id) if s.modality == "voice")
    with httpx.Client(base_url=ui.url, timeout=120) as client:
        html = client.get("/people").text
        assert 'aria-label="Voice 1 is not' in html
        token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', html).group(1)
        done = client.post(f"/people/{face.id}/split", data={"key": key, "csrf_token": token})
        assert done.status_code == 303 and "#person-" in done.headers["location"]
        new_id = done.headers["location"].rsplit("#person-", 1)[1]
    people = {str(e.id): e for e in ui.service.list_entities("default").items}
    assert people[new_id].voices == 1 and people[new_id].faces == 0 and people[str(face.id)].voices == 0
    assert [s.modality for s in ui.service.entity_samples("default", uuid.UUID(new_id))] == ["voice"]


def test_editing_a_memory_shows_its_history(page, ui, media):
    page.goto(f"{ui.url}/memories?type=episodic")
    item = page.locator("ul.memories > li").filter(has_text="piano tuner").first
    old_id = item.get_attribute("id")[2:]
    old_text = item.locator("p.t").first.inner_text()
    item.locator("details.edit summary").click()
    item.get_by_label("Corrected text").fill(CORRECTION)
    with page.expect_navigation():
        item.get_by_role("button", name="Save correction").click()
    new_id = page.url.rsplit("#m-", 1)[1]
    assert new_id != old_id
    edited = page.locator(f"#m-{new_id}")
    assert edited.locator("p.t").first.inner_text() == CORRECTION  # shown as text
    assert page.locator(f"#m-{old_id}").count() == 0  # the old version is history, not a current memory
    edited.locator("details.history summary").click()
    history = edited.locator("details.history")
    assert "1 earlier version" in history.inner_text() and old_text in history.inner_text()
    assert "valid" in history.inner_text() and "until" in history.inner_text()
    old = ui.service.get_memory("default", uuid.UUID(old_id))
    assert old is not None and old.payload["superseded_by"] == new_id and old.payload["valid_to"]
    page.goto(f"{ui.url}/item/{old_id}")  # the old version's page links to the new one, and back
    with page.expect_navigation():
        page.get_by_role("link", name="a newer version").click()
    assert page.url.endswith(f"/item/{new_id}") and page.get_by_text(CORRECTION).first.is_visible()
    page.goto(f"{ui.url}/memories?type=episodic#m-{new_id}")
    edited.locator("details.history summary").click()  # the picture shows the history open
    edited.scroll_into_view_if_needed()
    _shot(page, "memories", top=False)
    assert page.dialogs == []


def test_deleting_a_memory(page, ui, media):
    page.goto(f"{ui.url}/memories?type=episodic")
    item = page.locator("ul.memories > li").filter(has_text="travel plan").first
    mid = item.get_attribute("id")[2:]
    with page.expect_navigation():
        item.get_by_role("button", name="Delete this memory").click()
    assert page.locator(f"#m-{mid}").count() == 0 and "/memories?type=episodic" in page.url
    assert ui.service.get_memory("default", uuid.UUID(mid)) is None
    gone = page.goto(f"{ui.url}/item/{mid}")  # a deleted item answers 404 cleanly, with the app's page
    assert gone.status == 404 and page.get_by_role("heading").first.is_visible() and "Traceback" not in page.content()


def test_retrying_a_failure(page, ui, media):
    from engram.workers.runtime import runtime

    page.goto(f"{ui.url}/activity")
    row = page.locator("#failures + table tr").filter(has_text="lost.png")
    assert "not found in the object store" in row.inner_text()
    _shot(page, "activity")  # with the failure and its Retry
    runtime().objects.put_bytes(media.key, media.data, "image/png")  # the object is back
    with page.expect_navigation():
        row.get_by_role("button", name=re.compile(r"^Retry")).click()
    assert page.url.endswith("/activity#failures")
    assert page.locator("#failures + table tr").filter(has_text="lost.png").count() == 0
    done = [r for r in ui.service.events("default", "alice") if r.event_id == media.failed_id]
    assert done and done[0].status.value == "done" and done[0].observations == 1
    with httpx.Client(base_url=ui.url) as client:  # a retry of an event that is not failed: 404
        token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', client.get("/activity").text).group(1)
        again = client.post(f"/activity/{media.failed_id}/retry", data={"csrf_token": token})
        assert again.status_code == 404


def test_the_hourly_plot_has_a_title_and_a_table(page, ui, media):
    page.goto(f"{ui.url}/activity")
    plot = page.locator("figure.plot svg[role=img]")
    assert plot.locator("title").first.text_content().startswith("Files ingested per hour")
    assert plot.locator("rect[fill]").count() >= 1
    page.locator("details.plot-table summary").click()
    rows = page.locator("details.plot-table tbody tr")
    assert rows.count() == 24
    total = sum(int(rows.nth(i).locator("td").last.inner_text()) for i in range(24))
    assert total == len(ui.service.events("default", None, None, 10_000))  # every event was published just now
    assert page.locator("#capture").is_visible() and page.get_by_text("keepassxc").first.is_visible()
    assert page.get_by_role("button", name=re.compile(r"(Pause|Resume) capture")).is_visible()
    storage = page.get_by_role("table", name=re.compile("Bytes stored per kind"))  # the storage table, per kind
    assert storage.get_by_role("rowheader", name="screenshot originals").is_visible()


def test_pausing_capture_writes_its_pause_file(page, ui):
    flag = ui.data_dir / "capture.pause"
    page.goto(f"{ui.url}/activity")
    paused = flag.exists()
    with page.expect_navigation():
        page.get_by_role("button", name=re.compile(r"(Pause|Resume) capture")).click()
    assert flag.exists() is not paused
    with page.expect_navigation():
        page.get_by_role("button", name=re.compile(r"(Pause|Resume) capture")).click()
    assert flag.exists() is paused


def test_timeline_date_picker_and_scrubber_by_keyboard(page, ui, media):
    page.goto(f"{ui.url}/timeline?date=2024-05-01")
    assert page.get_by_text("Nothing captured in this range").is_visible()
    _tab_to(page, "input[type=date][name=date]")
    page.keyboard.type("05022024")  # chromium's date field takes its parts in the locale's order (en-US)
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"date=2024-05-02"))
    scrub = page.locator("nav.scrubber")
    assert scrub.locator("li").count() == 24 and scrub.locator("a").count() >= 3
    _tab_to(page, "nav.scrubber a[href='#h-2024-05-02-11']")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"#h-2024-05-02-11$"))
    assert page.evaluate("() => document.getElementById('h-2024-05-02-11') !== null")
    _shot(page, "timeline")


def test_every_change_needs_the_csrf_token(ui, media):
    person = _faces(ui)[0]
    with httpx.Client(base_url=ui.url, timeout=60) as client:
        client.get("/people")  # a session cookie, but no token sent
        for url, data in (
            (f"/people/{person.id}/split", {"key": "x"}),
            (f"/memories/{uuid.uuid4()}/edit", {"text": "x"}),
            (f"/activity/{media.failed_id}/retry", {}),
            ("/activity/pause", {"pause": "1"}),
        ):
            assert client.post(url, data=data).status_code == 403, url
        token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', client.get("/people").text).group(1)
        assert client.post(f"/people/{person.id}/split", data={"key": "nope", "csrf_token": token}).status_code == 404
        assert client.post(f"/memories/{uuid.uuid4()}/edit", data={"text": "x", "csrf_token": token}).status_code == 404
        obs = ui.screenshot_id  # an observation is what was captured: not edited
        assert client.post(f"/memories/{obs}/edit", data={"text": "x", "csrf_token": token}).status_code == 400
    assert not (ui.data_dir / "capture.pause").exists()


SCREENS = {
    "start": "/",
    "timeline": "/timeline?date=2024-05-02",
    "search": "/search?q=quarterly+budget+review",
    "people": "/people",
    "memories": "/memories?type=episodic",
    "activity": "/activity",
    "connect": "/connect",
}


def test_no_serious_violation_and_a_screenshot_of_each_screen(page, ui, media):
    from axe_playwright_python.sync_playwright import Axe

    axe = Axe()
    item = f"/item/{ui.screenshot_id}?hl=quarterly%20budget%20review"  # as a search hit opens it: words marked
    for name, path in [*SCREENS.items(), ("item", item)]:
        page.goto(ui.url + path)
        page.wait_for_load_state("networkidle")
        for summary in page.locator("details.history summary").all()[:1]:
            summary.click()
        found = axe.run(page).response["violations"]
        bad = [
            (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
            for v in found
            if v["impact"] in ("serious", "critical")
        ]
        assert bad == [], (path, bad)
        if name not in ("memories", "activity", "timeline") or not (SCREENS_DIR / f"{name}.png").exists():
            _shot(page, name, height=1250 if name == "item" else 900)  # the item's frame, then its marked text
    assert page.dialogs == []
