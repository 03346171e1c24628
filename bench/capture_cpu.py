"""CPU of ``engram capture`` per hour at its default interval, on a static and on a changing screen.

Starts an Xvfb server with one window of text (tests/xdesktop.py) and runs ``engram capture --duration SECONDS
--json`` at the default interval (2 s, backing off to 30 s on a static screen): the agent alone
(``--spool-only``), or with ``--embedded`` publishing into a fresh embedded store. For the changing screen it
rewrites the window's text every ``--change-every`` seconds. Prints, per screen, the frames grabbed and kept, the
capture thread's CPU (grab, windows, near-duplicate gate, spool) and the whole process's CPU (with ``--embedded``,
the pipeline's OCR and embedding of the kept frames too), each scaled to one hour of capture, and the load
average (``os.getloadavg``) before and after.

    python bench/capture_cpu.py --seconds 150            # the agent alone
    python bench/capture_cpu.py --seconds 150 --embedded --only static
    python bench/capture_cpu.py --seconds 120 --microphone   # the microphone alone: a silent and a speaking source

``--microphone`` measures ``engram capture --microphone --no-screen --spool-only`` (30 s chunks) recording a real
PulseAudio null sink's monitor (tests/pulse.py): silent, then with speech (``ENGRAM_EVAL_DATA``'s jfk.flac and
leopard_test.wav, as WAV) played into it back to back; per source, chunks cut and kept per hour and the
process's CPU per hour (PortAudio's thread, the chunker, WebRTC's VAD, WAV writing).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.xdesktop import Desktop, xvfb  # noqa: E402


def run(display: str, seconds: float, change_every: float | None, data_dir: Path, spool_only: bool) -> dict:
    """One capture run of ``seconds``; the window's text changes every ``change_every`` s (None: static);
    ``spool_only``: the agent alone (kept frames stay in its spool), else published into the embedded store."""
    desk = Desktop(display)
    win = desk.window("notes.txt - Editor", ("editor", "Editor"), "line 0 of the meeting notes")
    stop = threading.Event()

    def change() -> None:
        n = 0
        while not stop.wait(change_every):
            n += 1
            desk.draw(win, f"line {n} of the meeting notes: item {n * 7919 % 1000}")

    changer = threading.Thread(target=change, daemon=True) if change_every else None
    env = {**os.environ, "DISPLAY": display, "ENGRAM_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(REPO)}
    load_before = os.getloadavg()
    proc = subprocess.Popen([sys.executable, "-m", "engram.api.cli", "capture", "--json", "--duration", str(seconds),
                             *(["--spool-only"] if spool_only else [])],
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if changer:
        changer.start()
    out, err = proc.communicate()
    stop.set()
    if proc.returncode != 0:
        raise SystemExit(err[-3000:])
    stats = json.loads(out)
    hours = stats["wall_seconds"] / 3600
    return {"screen": f"changing every {change_every:g} s" if change_every else "static",
            "publish": "none (--spool-only)" if spool_only else "embedded",
            "wall_s": round(stats["wall_seconds"], 1), "grabbed": stats["grabbed"], "kept": stats["kept"],
            "kept_per_hour": round(stats["kept"] / hours), "capture_cpu_s_per_hour": round(stats["gate_cpu_seconds"]
                                                                                          / hours, 1),
            "process_cpu_s_per_hour": round(stats["cpu_seconds"] / hours, 1), "published": stats["published"],
            "publish_wait_s": round(stats["publish_wait_seconds"], 1),
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()]}


def run_microphone(root: Path, seconds: float, speech: list[Path] | None) -> dict:
    """One microphone run of ``seconds`` on a PulseAudio null source; ``speech``: WAV files played into it in a
    loop (None: silence)."""
    from tests import pulse

    with pulse.null_source(root) as env:
        stop = threading.Event()

        def talk() -> None:
            while not stop.is_set():
                for wav in speech or []:
                    if not stop.is_set():
                        pulse.play(env, wav)

        talker = threading.Thread(target=talk, daemon=True) if speech else None
        run_env = {**os.environ, **env, "ENGRAM_DATA_DIR": str(root / "data"), "PYTHONPATH": str(REPO)}
        run_env.pop("DISPLAY", None)
        load_before = os.getloadavg()
        proc = subprocess.Popen([sys.executable, "-m", "engram.api.cli", "capture", "--json", "--microphone",
                                 "--no-screen", "--spool-only", "--duration", str(seconds)], env=run_env, cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if talker:
            talker.start()
        out, err = proc.communicate()
        stop.set()
        if talker:
            talker.join()  # the clip playing ends before the server stops
    if proc.returncode != 0:
        raise SystemExit(err[-3000:])
    stats = json.loads(out)
    hours = stats["wall_seconds"] / 3600
    return {"source": "speech" if speech else "silent", "wall_s": round(stats["wall_seconds"], 1),
            "audio_s": round(stats["audio_seconds"], 1), "chunks": stats["audio_chunks"], "kept": stats["audio_kept"],
            "kept_per_hour": round(stats["audio_kept"] / hours), "process_cpu_s_per_hour":
            round(stats["cpu_seconds"] / hours, 1), "overflows": stats["audio_overflows"],
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()]}


def speech_wavs(folder: Path) -> list[Path]:
    """jfk.flac and leopard_test.wav of the evaluation data as 16-bit WAV files in ``folder``."""
    import soundfile as sf

    data = Path(os.environ.get("ENGRAM_EVAL_DATA", REPO.parent / "shared" / "data")) / "audio"
    out = []
    for name in ("jfk.flac", "leopard_test.wav"):
        wav = folder / (Path(name).stem + ".wav")
        sf.write(str(wav), *sf.read(str(data / name), dtype="int16"), subtype="PCM_16")
        out.append(wav)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=150.0, help="Length of each run.")
    ap.add_argument("--change-every", type=float, default=2.0, help="Seconds between text changes (changing run).")
    ap.add_argument("--only", choices=("static", "changing"), help="Run one of the two.")
    ap.add_argument("--embedded", action="store_true", help="Publish into the embedded store (OCR, embedding) "
                    "instead of measuring the agent alone.")
    ap.add_argument("--microphone", action="store_true", help="Measure the microphone alone (a silent and a "
                    "speaking PulseAudio source) instead of the screen.")
    args = ap.parse_args()
    if args.microphone:
        with tempfile.TemporaryDirectory() as tmp:
            for name, speech in (("silent", None), ("speech", speech_wavs(Path(tmp)))):
                print(json.dumps(run_microphone(Path(tmp) / name, args.seconds, speech)), flush=True)
        return
    with xvfb() as display, tempfile.TemporaryDirectory() as tmp:
        for name, every in (("static", None), ("changing", args.change_every)):
            if args.only in (None, name):
                print(json.dumps(run(display, args.seconds, every, Path(tmp) / name, not args.embedded)), flush=True)


if __name__ == "__main__":
    main()
