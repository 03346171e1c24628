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


def test_microphone_chunks_gate_silence_and_hand_kept_chunks_to_the_publisher(tmp_path, eval_data):
    """5 s of silence, JFK's 11 s speech, 6 s of silence, fed through the recorder's PortAudio callback in
    100 ms blocks: 5 s chunks; silent ones dropped by WebRTC's VAD before anything is written; the kept ones
    written as 16 kHz WAV, timed from their first sample, and handed to the publisher as audio frames."""
    import wave
    from datetime import UTC

    from engram.api.capture import audio_frame
    from engram.api.microphone import MicrophoneConfig, MicrophoneRecorder, SilenceGate
    from engram.schemas.events import MediaKind

    speech = _speech_16k(eval_data / "audio" / "jfk.flac")
    silence = bytes(2 * 16_000 * 5)
    gate = SilenceGate()
    assert gate.voiced_fraction(speech) > 0.5 and gate.voiced_fraction(silence) == 0.0
    published: list = []
    rec = MicrophoneRecorder(MicrophoneConfig(spool=tmp_path / "spool", chunk_seconds=5), audio_frame,
                             open_stream=lambda rate, block, device, callback: _Blocks())
    rec.start(published.extend)
    stream = silence + speech + bytes(2 * 16_000 * 6)
    block = 2 * 1600
    t0 = time.time()
    for i in range(0, len(stream), block):
        rec.callback(stream[i:i + block], len(stream[i:i + block]) // 2, None, None)
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
    out = subprocess.run([sys.executable, "-m", "engram.api.cli", "capture", "--microphone", "--no-screen",
                          "--mic-device", "97", "--duration", "2"], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=300)
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


def test_capture_microphone_from_a_real_audio_server_into_search(tmp_path, pulse_null_source, eval_data):
    """``engram capture --microphone --no-screen`` records from a real PulseAudio source (through sounddevice,
    PortAudio and ALSA) while JFK's speech plays into it: silent chunks are dropped, the speech chunks are
    published into the embedded store, and the words are found by ``engram search``."""
    from tests import pulse

    pulse_env = pulse_null_source
    env = {**_env(tmp_path, ":0"), **pulse_env}
    env.pop("DISPLAY")
    proc = subprocess.Popen([sys.executable, "-m", "engram.api.cli", "capture", "--json", "--microphone",
                             "--no-screen", "--chunk-seconds", "4", "--duration", "26"], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
