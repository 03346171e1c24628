"""``engram capture`` under a real X server (Xvfb): a window shows text, the capture process grabs it, keeps a
frame only when the text changes (repeats dropped at the edge), never grabs while a denied window (a password
manager, a private browser window) is on screen or while paused, and the kept text is found by ``engram search``
under the app and window title it was on. Windows of every kind (only ``WM_NAME``, as xterm; Latin-1 and invalid
UTF-8 titles; windows that vanish while being read; malformed root properties) never stop it, nor does a long run
under a real window manager (openbox) with a real xterm. Without an X display (Wayland) it says what works.

Most tests play the desktop themselves: they draw the windows with python-xlib (text rendered by PIL) and, as a
window manager would, set the root window's ``_NET_ACTIVE_WINDOW`` (tests/xdesktop.py)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from engram.api.capture.agent import AdaptiveInterval, PrivacyRules, WindowInfo, XWindows, check_display, screen_source
from engram.schemas.api import PublishRequest
from tests.conftest import REPO
from tests.xdesktop import Desktop, have_real_desktop, openbox, vanishing_windows, xterm, xvfb


@pytest.fixture(scope="module")
def xserver():
    """An Xvfb server on a free display; yields its DISPLAY."""
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb not installed (`bash scripts/setup.sh --dev` installs it)")
    with xvfb() as display:
        yield display


def _env(tmp_path, display: str) -> dict:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
        "COLUMNS": "300",
        "ENGRAM_USER": "ann",
        "ENGRAM_DEVICE": "desk",
        "DISPLAY": display,
    }


def _capture(env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "engram.api.cli", "capture", "--json", *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen, with_stderr: bool = False):
    """The run's counts: the JSON object on the last line of its stdout (and its stderr)."""
    out, errs = proc.communicate(timeout=600)
    assert proc.returncode == 0, errs[-3000:]
    assert "Traceback" not in errs, errs[-3000:]
    stats = json.loads(out.strip().splitlines()[-1])
    return (stats, errs) if with_stderr else stats


def _frames_kept(spool, n: int, timeout: float = 120) -> None:
    """Wait until the capture's spool holds ``n`` frames (the first: its start-up is over)."""
    deadline = time.monotonic() + timeout
    while not (spool.is_dir() and len(list(spool.iterdir())) >= n):
        assert time.monotonic() < deadline, f"fewer than {n} frames kept in {timeout:g} s"
        time.sleep(0.1)


def _cli(env: dict, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=600
    )
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


@pytest.mark.slow
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
    assert not list((tmp_path / "data" / "capture-spool").iterdir())  # published frames leave the spool

    vault = desk.window("Passwords.kdbx - KeePassXC", ("keepassxc", "KeePassXC"), "bank PIN 4921 vault", y=300)
    second = _finish(_capture(env, "--duration", "3", "--interval", "1", "--max-interval", "1"))
    assert second["denied"] >= 2 and second["grabbed"] == 0 and second["kept"] == 0, second
    desk.hide(vault)
    desk.activate(editor)
    private = desk.window(
        "New Tab - Mozilla Firefox Private Browsing", ("Navigator", "firefox"), "private search terms", y=300
    )
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


# --- windows of every kind ---------------------------------------------------------------------------------


@pytest.fixture
def display():
    """A fresh Xvfb server for one test (its windows and root properties its own); yields its DISPLAY."""
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb not installed (`bash scripts/setup.sh --dev` installs it)")
    with xvfb() as name:
        yield name


def test_window_titles_of_every_kind_read_as_text_or_unknown_never_as_errors(display):
    """python-xlib against a real X server: each kind of window the capture meets, read as the title and app a
    frame is named by, or as unknown; nothing raises."""
    desk = Desktop(display)
    xw = XWindows(display)
    try:
        term = desk.window("user@host: ~/src", ("xterm", "XTerm"), "$ ls", net_wm_name=False)  # as xterm: WM_NAME only
        assert xw.active() == WindowInfo(term.id, "user@host: ~/src", "XTerm", ("xterm", "XTerm"))
        latin = desk.window("", ("editor", "Editor"), "menu", wm_name=b"caf\xe9 cr\xe8me.txt", net_wm_name=False)
        assert xw.active().title == "café crème.txt"
        broken = desk.window("", ("web", "Browser"), "page", wm_name=b"fallback", net_wm_name=b"caf\xc3 \xff page")
        assert xw.active().title == "caf\ufffd \ufffd page"  # invalid UTF-8: replaced, the rest kept
        evil = desk.window("", ("sh", "Term"), "x", wm_name=b"evil\x1b]0;owned\x07 title\x00", net_wm_name=False)
        assert xw.active().title == "evil ]0;owned title"  # control characters read as spaces
        nameless = desk.window("", ("", ""), "nothing", wm_name=b"", net_wm_name=b"")
        assert xw.active() == WindowInfo(nameless.id, None, None, ("", ""))

        gone = desk.window("closing", ("tmp", "Tmp"), "bye")
        desk.destroy(gone)  # the window manager's properties still name it
        desk.root_property("_NET_CLIENT_LIST", "WINDOW", 32, [term.id, gone.id, latin.id])
        assert xw.active() is None  # _NET_ACTIVE_WINDOW names a window that is gone
        assert [w.title for w in xw.visible()] == ["user@host: ~/src", "café crème.txt"]
        desk.root_property("_NET_ACTIVE_WINDOW", "STRING", 8, b"not a window id")  # malformed: wrong type
        xw.active()
        desk.root_property("_NET_CLIENT_LIST", "STRING", 8, b"garbage")
        assert xw.visible() == []
        desk.root_property("_NET_ACTIVE_WINDOW", "WINDOW", 32, [])  # empty
        desk.clear_root_property("_NET_CLIENT_LIST")  # the root's children instead
        titles = {w.title for w in xw.visible()}
        assert {"user@host: ~/src", "café crème.txt", "caf\ufffd \ufffd page"} <= titles
        assert broken.id and evil.id
    finally:
        xw.close()
        desk.close()
    assert screen_source("XTerm", "user@host: ~/src") == "screen/XTerm — user@host: ~\u2215src"
    assert screen_source(None, "..") == "screen/\u2024\u2024" and screen_source("Editor", None) == "screen/Editor"
    assert screen_source(None, None) == "screen"
    for app, title in (("XTerm", "vim ../../etc/passwd"), (None, ".."), ("sh", "C:\\Users\\..\\x")):
        PublishRequest(
            event_id=uuid.uuid4(),
            user_id="ann",
            device_id="desk",
            kind="screenshot",
            sha256="0" * 64,
            size=1,
            mime_type="image/webp",
            captured_at="2026-11-29T00:00:00Z",
            app=app,
            window=title,
            source_name=screen_source(app, title),
        )  # what the API takes from a device


def test_capture_survives_windows_of_every_kind_and_shows_its_progress(display, tmp_path):
    """The original crash (``AttributeError: module 'Xlib.X' has no attribute 'XA_WM_NAME'``: any window with
    ``WM_NAME`` only, as xterm) and the other windows that break a reader: windows closing while being read,
    malformed root properties, a Latin-1 title. The capture keeps a WebP frame per change until it is stopped
    (Ctrl-C), refreshes its progress on stderr (in place, on a terminal) and prints its counts as JSON on the
    last line of stdout. (Publishing, naming by window and search: the openbox test below.)"""
    spool = tmp_path / "data" / "capture-spool"
    desk = Desktop(display)
    try:
        term = desk.window("user@host: ~", ("xterm", "XTerm"), "make: building the ferry schedule", net_wm_name=False)
        env = {**_env(tmp_path, display), "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"}  # stderr as a terminal
        proc = _capture(env, "--duration", "300", "--interval", "0.5", "--max-interval", "0.5", "--spool-only")
        _frames_kept(spool, 1)  # the xterm-like window's frame: the run that stopped with AttributeError
        with vanishing_windows(display) as churning:
            assert churning.wait(5)
            desk.draw(term, "compiling lighthouse keeper module")
            _frames_kept(spool, 2)
            time.sleep(1)
        desk.root_property("_NET_ACTIVE_WINDOW", "STRING", 8, b"garbage")
        desk.root_property("_NET_CLIENT_LIST", "CARDINAL", 32, [1, 2, 3])
        desk.window(
            "", ("editor", "Editor"), "caf\u00e9 orders for Tuesday", y=300, wm_name=b"caf\xe9 notes", net_wm_name=False
        )
        _frames_kept(spool, 3)
        desk.activate(term)
        desk.draw(term, "ferry schedule published to the harbour")
        _frames_kept(spool, 4)
        time.sleep(2)  # a few repeats, and progress refreshed
        proc.send_signal(signal.SIGINT)
        stats, errs = _finish(proc, with_stderr=True)
    finally:
        desk.close()
    assert stats["kept"] >= 4 and stats["grabbed"] == stats["kept"] + stats["duplicates"], stats
    assert stats["duplicates"] >= 1 and stats["waiting"] == stats["kept"], stats
    assert stats["published"] == stats["failed"] == 0, stats
    spooled = list(spool.iterdir())
    assert len(spooled) == stats["kept"] and {p.suffix for p in spooled} == {".webp"}, spooled
    assert errs.count("\x1b[2K") >= 4 and errs.count("capturing: ") >= 4, errs[-3000:]  # refreshed in place
    assert f"publishing: {stats['grabbed']} grabbed, {stats['kept']} kept" in errs, errs[-3000:]
    assert f"{stats['kept']} in the spool" in errs, errs[-3000:]


@pytest.mark.slow
def test_capture_under_openbox_with_a_real_xterm_keeps_its_frames_and_never_stops(display, tmp_path):
    """30 s under a real window manager (openbox) with a real xterm printing a build log and typed into by
    xdotool: xterm sets ``WM_NAME`` only (the window that stopped capture after 2.8 s); the capture runs its
    whole length, keeps frames stored as WebP and named after the xterm's title (``engram search`` shows the
    app and title, not the spool file's name) and the log's words are found."""
    if not have_real_desktop():
        pytest.skip("openbox, xterm or xdotool not installed (`bash scripts/setup.sh --dev` installs them)")
    from Xlib import display as xdisplay

    from tests.xdesktop import type_text

    script = (
        'i=0; while [ $i -lt 120 ]; do echo "build step $i: linking the lighthouse module"; i=$((i+1)); '
        "sleep 0.25; done; cat"
    )
    env = _env(tmp_path, display)
    with openbox(display), xterm(display, script, "user@host: ~/harbour") as wid:
        x = xdisplay.Display(display)
        win = x.create_resource_object("window", wid)
        assert win.get_full_property(x.intern_atom("_NET_WM_NAME"), 0) is None  # xterm: WM_NAME only
        x.close()
        # no CPU budget: the first batch's model loads and OCR would spend it and hold the grabs this test
        # counts (the budget's own tests: test_capture_budget.py)
        proc = _capture(
            env,
            "--duration",
            "30",
            "--interval",
            "1",
            "--max-interval",
            "2",
            "--batch",
            "5",
            "--flush-seconds",
            "10",
            "--cpu-budget",
            "0",
        )
        time.sleep(20)
        type_text(display, wid, "echo harbour master signed off\n")
        stats, errs = _finish(proc, with_stderr=True)
    assert stats["wall_seconds"] >= 29 and stats["grabbed"] >= 6, stats  # it ran its whole length
    assert stats["kept"] >= 3 and stats["published"] == stats["kept"] and stats["failed"] == 0, stats
    assert "cannot read the windows" not in errs, errs[-2000:]
    stored = [p.suffix for p in (tmp_path / "data").rglob("*") if p.suffix in (".webp", ".png")]
    assert stored and set(stored) == {".webp"}, stored  # frames are stored as WebP, and ingest read them
    found = _cli(env, "search", "linking the lighthouse module")
    assert "lighthouse" in found and "XTerm — user@host: ~∕harbour" in found, found  # the app and title as source
    assert ".webp" not in found, found  # not the spool file's name


def test_capture_without_an_x_display_says_what_works_and_exits(tmp_path):
    """Wayland without XWayland, or no display at all: one plain message (what works, what does not) and exit 2,
    never a traceback; on Wayland with XWayland, a line that only X11 windows are seen."""
    base = _env(tmp_path, ":0")
    base.pop("DISPLAY")
    for extra, words in (
        ({"WAYLAND_DISPLAY": "wayland-0"}, "Wayland session without an X display"),
        ({"XDG_SESSION_TYPE": "wayland"}, "Wayland session without an X display"),
        ({}, "no X display (DISPLAY unset)"),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "engram.api.cli", "capture", "--duration", "2"],
            env={**base, **extra},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 2, out.stderr[-2000:]
        assert words in out.stderr and "--microphone --no-screen" in out.stderr, out.stderr[-2000:]
        assert "Traceback" not in out.stderr
    lines: list[str] = []
    check_display(lines.append, {"DISPLAY": ":0", "XDG_SESSION_TYPE": "wayland"})
    assert len(lines) == 1 and "XWayland" in lines[0] and "X11 applications only" in lines[0], lines
    check_display(lines.append, {"DISPLAY": ":0", "XDG_SESSION_TYPE": "x11"})
    assert len(lines) == 1


# --- the microphone ---------------------------------------------------------------------------------------


def _speech_16k(path) -> bytes:
    """A real recording as 16 kHz mono int16 PCM (soundfile reads it, librosa resamples)."""
    import librosa
    import numpy as np
    import soundfile as sf

    audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    mono = librosa.resample(audio.mean(axis=1), orig_sr=rate, target_sr=16_000)
    return (np.clip(mono, -1, 1) * 32767).astype("<i2").tobytes()


class _Blocks:
    """Stands in for PortAudio's stream (no capture device here): the recorder's own callback is fed the
    real recording's blocks, as PortAudio's thread would."""

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.slow
def test_microphone_chunks_gate_silence_and_hand_kept_chunks_to_the_publisher(tmp_path, eval_data):
    """5 s of silence, JFK's 11 s speech, 6 s of silence, fed through the recorder's PortAudio callback in
    100 ms blocks: 5 s chunks; silent ones dropped by WebRTC's VAD before anything is written; the kept ones
    written as 16 kHz WAV, timed from their first sample, and handed to the publisher as audio frames."""
    import wave
    from datetime import UTC

    from engram.api.capture.agent import audio_frame
    from engram.api.capture.microphone import MicrophoneConfig, MicrophoneRecorder, SilenceGate
    from engram.schemas.events import MediaKind

    speech = _speech_16k(eval_data / "audio" / "jfk.flac")
    silence = bytes(2 * 16_000 * 5)
    gate = SilenceGate()
    assert gate.voiced_fraction(speech) > 0.5 and gate.voiced_fraction(silence) == 0.0
    published: list = []
    rec = MicrophoneRecorder(
        MicrophoneConfig(spool=tmp_path / "spool", chunk_seconds=5),
        audio_frame,
        open_stream=lambda rate, block, device, callback: _Blocks(),
    )
    rec.start(published.extend)
    stream = silence + speech + bytes(2 * 16_000 * 6)
    block = 2 * 1600
    t0 = time.time()
    for i in range(0, len(stream), block):
        rec.callback(stream[i : i + block], len(stream[i : i + block]) // 2, None, None)
    stats = rec.stop()
    assert (stats.chunks, stats.silent) == (5, 2), stats  # 0-5 s and 20-22 s silent; 5-10, 10-15, 15-20 speech
    assert stats.kept == 3 and abs(stats.seconds - 22.0) < 0.01
    assert [f.kind for f in published] == [MediaKind.audio] * 3 and {f.mime for f in published} == {"audio/wav"}
    starts = [f.captured_at.timestamp() for f in published]  # the stream starts at the first block's first sample
    assert [round(b - a, 3) for a, b in zip(starts, starts[1:], strict=False)] == [5.0, 5.0]
    assert t0 + 5 - 0.2 <= starts[0] <= t0 + 5 + 1 and published[0].captured_at.tzinfo is UTC
    with wave.open(str(published[0].path)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getnframes()) == (16_000, 1, 80_000)
    assert sorted(p.name for p in (tmp_path / "spool").iterdir()) == sorted(f.path.name for f in published)


def test_capture_microphone_without_the_device_is_one_line(tmp_path):
    env = {**_env(tmp_path, ":0"), "XDG_RUNTIME_DIR": str(tmp_path)}
    env.pop("DISPLAY")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "engram.api.cli",
            "capture",
            "--microphone",
            "--no-screen",
            "--mic-device",
            "97",
            "--duration",
            "2",
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "error: --microphone: cannot record from input device 97" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr


@pytest.fixture
def pulse_null_source(tmp_path):
    """A real PulseAudio server whose default source is a null sink's monitor (tests/pulse.py); yields the
    environment its clients need."""
    from tests import pulse

    if not pulse.available():
        pytest.skip("PulseAudio not installed (`bash scripts/setup.sh --dev` installs it)")
    with pulse.null_source(tmp_path) as env:
        yield env


@pytest.mark.slow
def test_capture_microphone_from_a_real_audio_server_into_search(tmp_path, pulse_null_source, eval_data):
    """``engram capture --microphone --no-screen`` records from a real PulseAudio source (through sounddevice,
    PortAudio and ALSA) while JFK's speech plays into it: silent chunks are dropped, the speech chunks are
    published into the embedded store, and the words are found by ``engram search``."""
    from tests import pulse

    pulse_env = pulse_null_source
    env = {**_env(tmp_path, ":0"), **pulse_env}
    env.pop("DISPLAY")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engram.api.cli",
            "capture",
            "--json",
            "--microphone",
            "--no-screen",
            "--chunk-seconds",
            "4",
            "--duration",
            "26",
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    import soundfile as sf

    speech = tmp_path / "jfk.wav"  # as WAV: paplay 16.1 stops a FLAC after its first buffer
    sf.write(str(speech), *sf.read(str(eval_data / "audio" / "jfk.flac"), dtype="int16"), subtype="PCM_16")
    time.sleep(8)  # the first chunks: the null source's silence
    pulse.play(pulse_env, speech)
    stats = _finish(proc)
    assert stats["audio_seconds"] > 20 and stats["audio_silent"] >= 2, stats
    assert 2 <= stats["audio_kept"] <= 5 and stats["published"] == stats["audio_kept"], stats
    assert stats["failed"] == 0 and stats["grabbed"] == 0, stats
    assert not list((tmp_path / "data" / "capture-spool").glob("*.wav"))  # published chunks leave the spool
    out = _cli(env, "search", "ask not what your country can do for you", "-k", "5")
    assert "country" in out.lower(), out
