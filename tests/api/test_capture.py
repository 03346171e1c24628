"""``engram capture`` under a real X server (Xvfb): a window shows text, the capture process grabs it, keeps a
frame only when the text changes (repeats dropped at the edge), never grabs while a denied window (a password
manager, a private browser window) is on screen or while paused, and the kept text is found by ``engram search``.

The test process plays the desktop: it draws the windows with python-xlib (text rendered by PIL) and, as a
window manager would, sets the root window's ``_NET_ACTIVE_WINDOW``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

from engram.api.capture import AdaptiveInterval, PrivacyRules, WindowInfo
from tests.conftest import REPO
from tests.xdesktop import Desktop, xvfb


@pytest.fixture(scope="module")
def xserver():
    """An Xvfb server on a free display; yields its DISPLAY."""
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb not installed (`bash scripts/setup.sh --dev` installs it)")
    with xvfb() as display:
        yield display


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
    desk.hide(vault)
    desk.activate(editor)
    private = desk.window("New Tab - Mozilla Firefox Private Browsing", ("Navigator", "firefox"),
                          "private search terms", y=300)
    third = _finish(_capture(env, "--max-frames", "1", "--duration", "3", "--interval", "1"))
    assert third["grabbed"] == 0 and third["denied"] >= 1, third
    desk.hide(private)
    pause = tmp_path / "data" / "capture.pause"  # the default pause file: nothing is grabbed while it exists
    pause.touch()
    paused = _finish(_capture(env, "--duration", "2", "--interval", "1", "--spool-only"))
    assert paused["grabbed"] == 0 and paused["denied"] == 0 and paused["paused_seconds"] > 1, paused
    pause.unlink()

    found = _cli(env, "search", "quarterly budget review")
    assert "quarterly budget review" in found and "budget.txt - Editor" in found, found
    assert "Tangier" in _cli(env, "search", "ferry tickets Tangier")
    everything = _cli(env, "export", "--user", "ann")  # all the user's observations, memories and events
    assert "Tangier" in everything
    for denied in ("4921", "private search terms", "KeePassXC", "Private Browsing"):
        assert denied not in everything, denied
