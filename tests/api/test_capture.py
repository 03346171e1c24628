"""``engram capture`` under a real X server (Xvfb): a window shows text, the capture process grabs it, keeps a
frame only when the text changes (repeats dropped at the edge), never grabs while a denied window (a password
manager, a private browser window) is on screen, and the kept text is found by ``engram search``.

The test process plays the desktop: it draws the windows with python-xlib (text rendered by PIL) and, as a
window manager would, sets the root window's ``_NET_ACTIVE_WINDOW``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from engram.api.capture import AdaptiveInterval, PrivacyRules, WindowInfo
from tests.conftest import REPO


@pytest.fixture(scope="module")
def xserver():
    """An Xvfb server on a free display (``-displayfd``: the server picks it); yields its DISPLAY."""
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb not installed (`bash scripts/setup.sh --dev` installs it)")
    read, write = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", "1024x600x24", "-nolisten", "tcp"],
                            pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read) as fh:
        number = fh.readline().strip()
    assert number, "Xvfb did not start"
    yield f":{number}"
    proc.terminate()
    proc.wait(timeout=10)


class Desktop:
    """Windows on the X server, drawn by this process (python-xlib; text rendered with PIL)."""

    def __init__(self, display: str) -> None:
        from Xlib import X
        from Xlib import display as xdisplay

        self.X = X
        self.d = xdisplay.Display(display)
        self.screen = self.d.screen()
        self.root = self.screen.root

    def window(self, title: str, wm_class: tuple[str, str], text: str, y: int = 0):
        win = self.root.create_window(0, y, 1024, 300, 0, self.screen.root_depth,
                                      background_pixel=self.screen.white_pixel)
        win.set_wm_name(title)
        win.change_property(self.d.intern_atom("_NET_WM_NAME"), self.d.intern_atom("UTF8_STRING"), 8, title.encode())
        win.set_wm_class(*wm_class)
        win.map()
        self.d.sync()
        time.sleep(0.2)
        self.draw(win, text)
        self.activate(win)
        return win

    def draw(self, win, text: str) -> None:
        from PIL import Image, ImageDraw, ImageFont

        img = Image.new("RGB", (1024, 300), "white")
        ImageDraw.Draw(img).text((30, 110), text, fill="black", font=ImageFont.truetype("DejaVuSans.ttf", 44))
        gc = win.create_gc(foreground=self.screen.black_pixel, background=self.screen.white_pixel)
        win.put_pil_image(gc, 0, 0, img)
        self.d.sync()

    def activate(self, win) -> None:
        from Xlib import Xatom

        self.root.change_property(self.d.intern_atom("_NET_ACTIVE_WINDOW"), Xatom.WINDOW, 32, [win.id])
        self.d.sync()


def _env(tmp_path, display: str) -> dict:
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO),
            "ENGRAM_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "300", "ENGRAM_USER": "ann",
            "ENGRAM_DEVICE": "desk", "DISPLAY": display}


def _capture(env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "engram.api.cli", "capture", "--json", *args], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> dict:
    out, errs = proc.communicate(timeout=600)
    assert proc.returncode == 0, errs[-3000:]
    return json.loads(out)


def _cli(env: dict, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "engram.api.cli", *args], env=env, cwd=REPO, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return " ".join(out.stdout.split())


def test_privacy_rules_and_interval():
    rules = PrivacyRules()
    assert rules.denies(WindowInfo(1, "Passwords.kdbx - KeePassXC", "KeePassXC", ("keepassxc", "KeePassXC")))
    assert rules.denies(WindowInfo(2, "New Tab - Mozilla Firefox Private Browsing", "firefox"))
    assert rules.denies(WindowInfo(3, "New Tab - Google Chrome (Incognito)", "Google-chrome"))
    assert rules.denies(WindowInfo(4, "Vault", "Bitwarden", ("bitwarden", "Bitwarden")))
    assert rules.denies(WindowInfo(5, "budget.ods - LibreOffice Calc", "libreoffice-calc")) is None
    steps = AdaptiveInterval(2.0, 30.0)
    assert [steps.next(c) for c in (False, False, False, False, False, True)] == [4.0, 8.0, 16.0, 30.0, 30.0, 2.0]


def test_capture_keeps_changes_drops_repeats_and_never_grabs_denied_windows(xserver, tmp_path):
    desk = Desktop(xserver)
    env = _env(tmp_path, xserver)
    editor = desk.window("budget.txt - Editor", ("editor", "Editor"), "quarterly budget review on Thursday")
    proc = _capture(env, "--duration", "9", "--interval", "1", "--max-interval", "1", "--batch", "10")
    time.sleep(5.5)  # ~4 grabs of the first text (start-up included), then the text changes
    desk.draw(editor, "ferry tickets booked for Tangier")
    first = _finish(proc)
    assert first["kept"] == 2, first  # one per text
    assert first["duplicates"] >= 2 and first["grabbed"] == first["kept"] + first["duplicates"], first
    assert first["denied"] == 0 and first["published"] == 2 and first["failed"] == 0, first
    assert not list((tmp_path / "data" / "capture-spool").glob("*.png"))  # published frames leave the spool

    vault = desk.window("Passwords.kdbx - KeePassXC", ("keepassxc", "KeePassXC"), "bank PIN 4921 vault", y=300)
    second = _finish(_capture(env, "--duration", "3", "--interval", "1", "--max-interval", "1"))
    assert second["denied"] >= 2 and second["grabbed"] == 0 and second["kept"] == 0, second
    vault.unmap()
    desk.d.sync()
    desk.activate(editor)
    private = desk.window("New Tab - Mozilla Firefox Private Browsing", ("Navigator", "firefox"),
                          "private search terms", y=300)
    third = _finish(_capture(env, "--max-frames", "1", "--duration", "3", "--interval", "1"))
    assert third["grabbed"] == 0 and third["denied"] >= 1, third
    private.unmap()
    desk.d.sync()

    found = _cli(env, "search", "quarterly budget review")
    assert "quarterly budget review" in found and "budget.txt - Editor" in found, found
    assert "Tangier" in _cli(env, "search", "ferry tickets Tangier")
    everything = _cli(env, "export", "--user", "ann")  # all the user's observations, memories and events
    assert "Tangier" in everything
    for denied in ("4921", "private search terms", "KeePassXC", "Private Browsing"):
        assert denied not in everything, denied
