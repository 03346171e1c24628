"""Fixtures of the web app's tests: one real embedded store (notes of two users, hostile text, a chat with a named
speaker, a rendered screenshot, and another tenant's note), the web app on it served by uvicorn in a thread on a
free port, and Debian's chromium driven by Playwright (no browser download; the tests fail without it)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from engram.schemas.add import AddMemoryRequest
from engram.schemas.events import EventStatus
from tests.servers import free_ports

CHROMIUM = "/usr/bin/chromium"
#: ``rebind.test`` resolves to 127.0.0.1 in the browser: a DNS-rebinding page's request reaches the UI with its
#: own name as Host.
REBIND_HOST = "rebind.test"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    f"--host-resolver-rules=MAP {REBIND_HOST} 127.0.0.1",
]
DAY = datetime(2024, 5, 2, tzinfo=UTC)
NOTE = "The piano tuner comes on Thursday morning"
RLO = "invoice \u202egnp.exe total"
HOSTILE = [
    "<script>alert(1)</script> budget memo",
    "<img src=x onerror=alert(1)> travel plan",
    RLO,
    "[/code] long line " + "x" * 10_000,
]


@dataclass
class UiStore:
    """The web app under test: its base URL, service, data dir, and the ids the tests look for."""

    url: str
    service: object
    data_dir: Path
    screenshot_id: str
    other_tenant_id: str
    bob_id: str


def _screenshot(folder: Path) -> Path:
    shot = Image.new("RGB", (960, 540), "white")
    ImageDraw.Draw(shot).text((20, 200), "quarterly budget review", fill="black")
    shot.save(folder / "shot.png")
    return folder / "shot.png"


def _fill(svc, folder: Path) -> dict[str, str]:
    """Add the notes and ingest the screenshot; returns the ids the tests use."""
    from engram.api.embedded import ingest_paths
    from engram.schemas.memories import MemoryType

    texts = [NOTE, *HOSTILE]
    for i, text in enumerate(texts):
        resp = svc.add(
            AddMemoryRequest(text=text, user_id="alice", time=DAY + timedelta(hours=8, minutes=i)), "default", "laptop"
        )
        assert resp.status is EventStatus.done, resp
    chat = AddMemoryRequest(
        messages=[{"speaker": "Bea", "text": "The harbour festival starts on the ninth"}],
        user_id="bob",
        time=DAY + timedelta(hours=9),
    )
    assert svc.add(chat, "default", "phone").status is EventStatus.done
    assert (
        svc.add(AddMemoryRequest(text="globex secret roadmap", user_id="carol", time=DAY), "globex", "x").status
        is EventStatus.done
    )
    out = ingest_paths(
        [_screenshot(folder)],
        "default",
        "alice",
        "laptop",
        captured_at=DAY + timedelta(hours=10),
        app_name="Firefox",
        window="Budget - Mozilla Firefox",
        consolidate=False,
        quiet=True,
    )
    assert len(out["done"]) == 1, out
    shot = svc.list_memories("default", MemoryType.observation, "alice", 50).items
    bob = svc.list_memories("default", MemoryType.observation, "bob", 5).items[0]
    other = svc.list_memories("globex", MemoryType.observation, None, 5).items[0]
    return {
        "screenshot_id": str(next(m.id for m in shot if m.payload.get("kind") == "screenshot")),
        "other_tenant_id": str(other.id),
        "bob_id": str(bob.id),
    }


def _serve(app, port: int) -> tuple[object, threading.Thread]:
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="engram-ui", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    return server, thread


@pytest.fixture(scope="session")
def ui(tmp_path_factory) -> Iterator[UiStore]:
    """The web app on a filled embedded store under a data dir of this session, at http://127.0.0.1:PORT."""
    from engram.api.service.embedded import EmbeddedService
    from engram.api.ui.app import create_ui
    from engram.api.ui.pages import UiConfig
    from engram.api.ui.security import loopback_hosts
    from engram.workers.runtime import reset_runtimes

    root = tmp_path_factory.mktemp("ui")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENGRAM_DATA_DIR", str(root / "data"))
        mp.setenv("ENGRAM_TIMEZONE", "UTC")
        for var in ("ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT", "ENGRAM_BROKER_URL"):
            mp.delenv(var, raising=False)
        reset_runtimes()
        svc = EmbeddedService(linger=60)
        ids = _fill(svc, root)
        (port,) = free_ports(1)
        server, thread = _serve(
            create_ui(UiConfig(svc, "default", root / "data", loopback_hosts("127.0.0.1", port))), port
        )
        try:
            yield UiStore(url=f"http://127.0.0.1:{port}", service=svc, data_dir=root / "data", **ids)
        finally:
            server.should_exit = True
            thread.join(timeout=10)
            svc.close()
            reset_runtimes()


@pytest.fixture(scope="session")
def browser():
    """Debian's chromium through Playwright (headless). Fails, never skips, when chromium is missing: install it
    with ``scripts/setup.sh --dev`` (apt's ``chromium``)."""
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        pytest.fail(f"chromium not found at {CHROMIUM}: run scripts/setup.sh --dev (installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium"), args=CHROMIUM_ARGS
        )
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser):
    """A fresh browser context's page; every dialog (alert, confirm) it opens is recorded in ``page.dialogs`` and
    dismissed."""
    context = browser.new_context()
    pg = context.new_page()
    dialogs: list[str] = []

    def on_dialog(dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    pg.on("dialog", on_dialog)
    pg.dialogs = dialogs
    try:
        yield pg
    finally:
        context.close()
