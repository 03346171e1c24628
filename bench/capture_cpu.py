"""CPU of ``engram capture`` per hour at its default interval, on a static and on a changing screen.

Starts an Xvfb server with one window of text (tests/xdesktop.py), runs ``engram capture --duration SECONDS
--json`` with the default interval (2 s, backing off to 30 s on a static screen) into a fresh embedded store, and
for the changing screen rewrites the window's text every ``--change-every`` seconds. Prints, per screen, the
frames grabbed and kept, the capture thread's CPU (grab, windows, near-duplicate gate, spool) and the whole
process's CPU (with the embedded pipeline's OCR and embedding of the kept frames), each scaled to one hour, and
the load average (``os.getloadavg``) before and after.

    python bench/capture_cpu.py --seconds 150
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


def run(display: str, seconds: float, change_every: float | None, data_dir: Path) -> dict:
    """One capture run of ``seconds``; the window's text changes every ``change_every`` s (None: static)."""
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
    proc = subprocess.Popen([sys.executable, "-m", "engram.api.cli", "capture", "--json", "--duration", str(seconds)],
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
            "wall_s": round(stats["wall_seconds"], 1), "grabbed": stats["grabbed"], "kept": stats["kept"],
            "kept_per_hour": round(stats["kept"] / hours), "capture_cpu_s_per_hour": round(stats["gate_cpu_seconds"]
                                                                                          / hours, 1),
            "process_cpu_s_per_hour": round(stats["cpu_seconds"] / hours, 1), "published": stats["published"],
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=150.0, help="Length of each run.")
    ap.add_argument("--change-every", type=float, default=2.0, help="Seconds between text changes (changing run).")
    ap.add_argument("--only", choices=("static", "changing"), help="Run one of the two.")
    args = ap.parse_args()
    with xvfb() as display, tempfile.TemporaryDirectory() as tmp:
        for name, every in (("static", None), ("changing", args.change_every)):
            if args.only in (None, name):
                print(json.dumps(run(display, args.seconds, every, Path(tmp) / name)), flush=True)


if __name__ == "__main__":
    main()
