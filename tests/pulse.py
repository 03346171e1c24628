"""An audio source for tests and benches of ``engram capture --microphone``: a real PulseAudio server with a null
sink whose monitor is the default source, so what is played into the sink (``paplay``) is what a microphone
would record. PortAudio (``sounddevice``) reaches it through ALSA's ``pulse`` plugin (Debian's
``libasound2-plugins``), as on a desktop."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

SINK = "engram_null"


def available() -> bool:
    """True when the PulseAudio server and its tools are installed (``scripts/setup.sh --dev``)."""
    return all(shutil.which(tool) for tool in ("pulseaudio", "paplay", "pactl"))


@contextlib.contextmanager
def null_source(root: Path, start_timeout: float = 30.0) -> Iterator[dict[str, str]]:
    """Run ``pulseaudio`` (no default script: only the native protocol on a socket under ``root`` and a null sink
    ``SINK``, its monitor set as the default source) and yield the environment a client needs
    (``PULSE_SERVER``, ``XDG_RUNTIME_DIR``, ``HOME``, ``PATH``); the server is stopped on exit. Raises
    RuntimeError with its log when it does not start."""
    runtime = root / "pulse-runtime"
    runtime.mkdir(parents=True, exist_ok=True)
    socket = runtime / "native"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(root),
        "XDG_RUNTIME_DIR": str(runtime),
        "PULSE_SERVER": f"unix:{socket}",
    }
    log = root / "pulseaudio.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [
                "pulseaudio",
                "-n",
                "--daemonize=no",
                "--exit-idle-time=-1",
                "--disallow-exit",
                "--log-target=stderr",
                "-L",
                f"module-native-protocol-unix auth-anonymous=1 socket={socket}",
                "-L",
                f"module-null-sink sink_name={SINK}",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + start_timeout
        while subprocess.run(["pactl", "info"], env=env, capture_output=True).returncode != 0:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pulseaudio did not start:\n{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        subprocess.run(["pactl", "set-default-source", f"{SINK}.monitor"], env=env, check=True)
        yield env
    finally:
        server.terminate()
        server.wait(timeout=10)


def play(env: dict[str, str], wav: Path, timeout: float = 120.0) -> None:
    """Play a WAV file into the null sink in real time (``paplay``; it stops a FLAC early, so WAV only)."""
    subprocess.run(["paplay", f"--device={SINK}", str(wav)], env=env, check=True, timeout=timeout)
