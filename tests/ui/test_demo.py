"""What a new user sees after ``engram demo`` (issue 42): the demo's sample ingested for real (three rendered
screens, a voice memo, a slide clip with speech, a chat), then its timeline in Debian's chromium: the frames'
thumbnails, the clip's keyframe, the memo's transcript with a player, every picture loaded, and a frame's page."""

from __future__ import annotations

import io
import re
import shutil
from collections.abc import Iterator

import httpx
import pytest

from tests.servers import free_ports
from tests.ui.conftest import _serve

pytestmark = pytest.mark.slow  # the demo runs OCR, speech-to-text and consolidation (~1 min)


@pytest.fixture(scope="module")
def demo_ui(tmp_path_factory) -> Iterator[str]:
    """``engram demo``'s store (its ``run_demo``, as the command runs it) served by the web app of tenant ``demo``,
    as ``engram ui --data-dir WORKDIR/data --tenant demo`` (the demo's hint) serves it; yields the URL."""
    from rich.console import Console

    from engram.api.demo import run_demo
    from engram.api.service.embedded import EmbeddedService
    from engram.api.ui.app import create_ui
    from engram.api.ui.pages import UiConfig
    from engram.api.ui.security import loopback_hosts
    from engram.workers.runtime import reset_runtimes

    work = tmp_path_factory.mktemp("demo-ui")
    with pytest.MonkeyPatch.context() as mp:
        for var in ("ENGRAM_BROKER_URL", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT"):
            mp.delenv(var, raising=False)
        mp.setenv("ENGRAM_TIMEZONE", "UTC")
        out = run_demo(work, Console(file=io.StringIO()))
        assert out["ingest"]["failed"] == [], out["ingest"]
        mp.setenv("ENGRAM_DATA_DIR", str(work / "data"))
        reset_runtimes()
        svc = EmbeddedService(linger=60)
        (port,) = free_ports(1)
        server, thread = _serve(
            create_ui(UiConfig(svc, "demo", work / "data", loopback_hosts("127.0.0.1", port))), port
        )
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            thread.join(timeout=10)
            svc.close()
            reset_runtimes()


def test_the_demos_frames_clip_and_memo_on_the_timeline(page, demo_ui):
    page.goto(f"{demo_ui}/timeline")  # no date: the day of the newest observation, the demo's morning
    frames = page.locator("ul.thumbs img[loading=lazy]")
    assert frames.count() == 3, page.content()[-3000:]
    for i in range(3):
        frames.nth(i).scroll_into_view_if_needed()
    srcs = [frames.nth(i).get_attribute("src") for i in range(3)]
    if shutil.which("ffmpeg"):  # the clip's keyframe: the thumbnail made at ingest
        srcs.append(page.locator("ul.turns img.keyframe").first.get_attribute("src"))
    for src in srcs:  # each a WebP made at ingest, not the missing picture's redirect
        got = httpx.get(demo_ui + src, follow_redirects=False, timeout=60)
        assert got.status_code == 200 and got.headers["content-type"] == "image/webp", (src, got.status_code)
    page.wait_for_function("() => [...document.querySelectorAll('ul.thumbs img')].every(i => i.complete)")
    assert all(
        w > 0 for w in page.evaluate("() => [...document.querySelectorAll('ul.thumbs img')].map(i => i.naturalWidth)")
    )
    if shutil.which("espeak-ng"):
        memo = page.locator("section.audio")  # its segments, each with its transcript and a player
        assert memo.locator("audio[controls]").count() == memo.locator("li").count() >= 1
        assert re.search(r"budget review", memo.inner_text(), re.I), memo.inner_text()
    from axe_playwright_python.sync_playwright import Axe

    found = Axe().run(page).response["violations"]
    assert [v["id"] for v in found if v["impact"] in ("serious", "critical")] == []
    page.locator("ul.thumbs a").first.click()
    page.wait_for_function("() => document.querySelector('img.frame') && document.querySelector('img.frame').complete")
    assert page.locator("img.frame").evaluate("i => i.naturalWidth") == 1280  # the full frame
    assert page.locator("dt", has_text="Device").count() == 1 and page.get_by_text("demo-laptop").is_visible()


def test_the_memos_transcript_follows_its_player(page, demo_ui):
    """A recording's page: the player starts at the segment, and its transcript's words (each with its time in the
    recording) follow the player: the word playing is marked (``ui.js``). Fails, never skips, without espeak-ng
    (the demo's voice memo; ``scripts/setup.sh`` installs it), as tests/ui do without chromium."""
    assert shutil.which("espeak-ng"), "espeak-ng not found: run scripts/setup.sh (the demo makes its memo with it)"
    page.goto(f"{demo_ui}/timeline")
    page.locator("section.audio li a").first.click()
    words = page.locator("p.transcript span[data-start]")
    assert words.count() >= 3, page.content()[-2000:]
    page.wait_for_function("() => document.getElementById('player').readyState >= 1")
    third = words.nth(2)
    at = (float(third.get_attribute("data-start")) + float(third.get_attribute("data-end"))) / 2
    page.evaluate("t => { document.getElementById('player').currentTime = t; }", at)
    page.wait_for_selector("p.transcript span.now")
    assert page.locator("p.transcript span.now").count() == 1
    assert page.locator("p.transcript span.now").inner_text() == third.inner_text()
