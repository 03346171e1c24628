"""The resource budget of ``engram capture``: a scripted desktop for ``--minutes`` (issue 41), the frame format's
bytes and OCR word recall (``--formats``, issue 44), and the older single-window and microphone runs.

Default, the scripted desktop: Xvfb at 1920x1080 with a real window manager (openbox), an editor (vim in a real
xterm) typed into by xdotool, a terminal (a real xterm) running commands whose output scrolls, a browser-like
window (python-xlib) switching between pages (the shared webui full-page screenshots and screenpipe's
screenshots) with their titles, and idle stretches; a seeded script changes what is on screen every 10 s on
average. ``engram capture --json --duration`` runs at its defaults (2-30 s interval, batches of 5) publishing
into the embedded store of a fresh ``ENGRAM_DATA_DIR`` (OCR, embedding, storing inline: the pipeline runs in the
capture's process). Measured from the process's rusage (``os.wait4``): CPU of the capture agent and the
pipeline together, user + system, over the capture's length (as % of one core), peak RSS (the larger of rusage's,
the largest single process of its tree, and the tree's summed RSS sampled every 0.5 s); the data dir's
allocated bytes per hour of capture; frames kept; coverage: of the script's changes (a sentence typed, a
command run, which ends by echoing a few words, a page switched to: its title), the share for which a frame
kept while the change was its window's newest holds 80 % of the change's words in its stored text (read back from
the store). ``--json FILE`` writes ``{"cpu_percent", "rss_peak_bytes", "disk_bytes_per_hour", "frames_kept",
"coverage", "load"}`` and the details (``cpu_s_per_kept_frame``, coverage by kind, the drain after the capture,
the data dir by folder, the load average before).

    python bench/capture_cpu.py [--minutes 10] [--baseline] [--json bench/results/capture.json]

``--baseline``: a second capture without its CPU budget (``--cpu-budget 0``) runs on the same desktop at the same
time into its own store: its figures under ``baseline``, the ratios under ``ratio_to_baseline`` (the two share the
machine's cores, so both run slower than alone; the CPU seconds each used are its own). ``--before CHECKOUT``:
one more capture, from another checkout (``git worktree add /tmp/wt-before <commit>``) at its defaults, beside
them: the code before a change measured side by side with it (figures under ``before``, ratios under
``ratio_to_before``).

``--formats``: each shared screenshot (``screens/screenpipe_*.png``, the webui viewports) stored as PNG (what
capture wrote before: compression level 1) and as WebP at several qualities, read back through engram's decoder
and OCR: bytes, encoding CPU and OCR word recall (webui: against the accessibility tree's visible words, as
``../shared/data/README.md`` counts them; screenpipe: against the words read from the PNG), and screenpipe's named
strings found. ``--json FILE`` writes the table under ``formats`` and, for the format capture keeps
(``api.capture.agent.WEBP_QUALITY``, always among the qualities), ``stored_format`` and ``frame_bytes_ratio`` (its
bytes as a share of PNG's): the one comparison of frame formats.

    python bench/capture_cpu.py --formats [--json bench/results/capture-format.json]

Older runs: ``--only static|changing`` (one window of text, static or rewritten every ``--change-every`` s, for
``--seconds``; ``--embedded`` publishes) and ``--microphone`` (a silent and a speaking PulseAudio source; the
microphone alone): per run, frames or chunks kept per hour and CPU per hour.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.lib.embedded import merge_json  # noqa: E402
from tests import xdesktop  # noqa: E402
from tests.xdesktop import Desktop, xvfb  # noqa: E402

DATA = Path(os.environ.get("ENGRAM_EVAL_DATA", REPO.parent / "shared" / "data"))


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
    env = {
        **os.environ,
        "DISPLAY": display,
        "ENGRAM_DATA_DIR": str(data_dir),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
    }
    load_before = os.getloadavg()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engram.api.cli",
            "capture",
            "--json",
            "--duration",
            str(seconds),
            *(["--spool-only"] if spool_only else []),
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if changer:
        changer.start()
    out, err = proc.communicate()
    stop.set()
    if proc.returncode != 0:
        raise SystemExit(err[-3000:])
    stats = json.loads(out)
    hours = stats["wall_seconds"] / 3600
    return {
        "screen": f"changing every {change_every:g} s" if change_every else "static",
        "publish": "none (--spool-only)" if spool_only else "embedded",
        "wall_s": round(stats["wall_seconds"], 1),
        "grabbed": stats["grabbed"],
        "kept": stats["kept"],
        "kept_per_hour": round(stats["kept"] / hours),
        "capture_cpu_s_per_hour": round(stats["gate_cpu_seconds"] / hours, 1),
        "process_cpu_s_per_hour": round(stats["cpu_seconds"] / hours, 1),
        "published": stats["published"],
        "publish_wait_s": round(stats["publish_wait_seconds"], 1),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


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
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "engram.api.cli",
                "capture",
                "--json",
                "--microphone",
                "--no-screen",
                "--spool-only",
                "--duration",
                str(seconds),
            ],
            env=run_env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
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
    return {
        "source": "speech" if speech else "silent",
        "wall_s": round(stats["wall_seconds"], 1),
        "audio_s": round(stats["audio_seconds"], 1),
        "chunks": stats["audio_chunks"],
        "kept": stats["audio_kept"],
        "kept_per_hour": round(stats["audio_kept"] / hours),
        "process_cpu_s_per_hour": round(stats["cpu_seconds"] / hours, 1),
        "overflows": stats["audio_overflows"],
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


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


def engram_path(checkout: Path, root: Path) -> str:
    """``PYTHONPATH`` that makes ``engram`` the code of ``checkout`` (this repository, or a ``git worktree`` of an
    earlier commit) in a child process: a package folder under ``root`` whose ``engram`` links the checkout's
    ``api``, ``schemas`` and ``workers`` (found before the editable install's finder, which maps ``engram`` to the
    checkout it was installed from), then the checkout itself (``tests``, ``bench``)."""
    pkg = root / f"engram-of-{checkout.name}" / "engram"
    if not pkg.exists():
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        for part in ("api", "schemas", "workers"):
            (pkg / part).symlink_to(checkout.resolve() / part)
    return os.pathsep.join((str(pkg.parent), str(checkout)))


class TreeRss:
    """The peak of the summed RSS of a process and its descendants, sampled every ``every`` s by a thread (psutil)
    until ``stop``: ``os.wait4``'s ``ru_maxrss`` gives the largest single process of a tree, not their sum."""

    def __init__(self, pid: int, every: float = 0.5) -> None:
        import psutil  # the sampler only: the --formats and older runs do without

        self.proc, self.every, self.peak = psutil.Process(pid), every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        import psutil  # the sampler only: the --formats and older runs do without

        while not self._stop.wait(self.every):
            try:
                tree = [self.proc, *self.proc.children(recursive=True)]
                total = 0
                for p in tree:
                    with contextlib.suppress(psutil.Error):
                        total += p.memory_info().rss
            except psutil.Error:  # the process ended
                return
            self.peak = max(self.peak, total)

    def stop(self) -> int:
        """End the sampling; the peak in bytes."""
        self._stop.set()
        self._thread.join()
        return self.peak


# --- the scripted desktop ----------------------------------------------------------------------------------

SCREEN = (1920, 1080)
BROWSER = (1280, 800)
SENTENCES = (
    "Meeting notes: the harbour budget review moves to Thursday at 10:30.",
    "TODO: send the ferry timetable to Ana before Friday.",
    "The lighthouse keeper asked for two more batteries and a radio.",
    "Decision: ship version 2.4 of the booking service next Tuesday.",
    "Open question: who owns the on-call rota in December?",
    "Call the insurer about claim 48213 (water damage, kitchen).",
    "Draft reply: thanks for the slides, the numbers on page 7 look right.",
    "Groceries: oat milk, lemons, rice, coffee beans, dish soap.",
)
#: (command, what it echoes last: the words that stay on screen after it, whatever its output, for ``coverage``)
COMMANDS = (
    ("seq 1 40 | sed 's/^/build step /'", "build steps listed"),
    ("ls -la /usr/bin | head -45", "programs listed"),
    ("cat /etc/os-release", "release shown"),
    ("df -h", "disk usage shown"),
    ("ps aux | head -30", "processes listed"),
    ("for i in 1 2 3 4 5 6; do date; uname -a; done", "dates printed"),
    ("ls -la /etc | tail -40", "settings folder listed"),
)
#: A change is covered when a frame kept while it was its window's newest shows this share of its words.
COVER_WORDS = 0.8


def browser_pages() -> list[tuple[str, object]]:
    """(title, PIL RGB image of ``BROWSER`` size) per page: windows down the shared webui full-page screenshots
    and the screenpipe screenshots, cropped to the browser's size."""
    from PIL import Image

    pages = []
    for full in sorted((DATA / "screens" / "webui").glob("*-screenshot-full.webp"))[:2]:
        page = Image.open(full).convert("RGB")
        page = page.resize((BROWSER[0], round(page.height * BROWSER[0] / page.width)))
        for top in range(0, max(1, page.height - BROWSER[1]), 700):
            pages.append((f"Research sample, part {top // 700 + 1} - Browser", page.crop((0, top, *BROWSER))))
    for shot in sorted((DATA / "screens").glob("screenpipe_*.png")):
        img = Image.open(shot).convert("RGB")
        pages.append(
            (
                shot.stem.removeprefix("screenpipe_").replace("_", " ") + " - Browser",
                img.crop((0, 0, min(img.width, BROWSER[0]), min(img.height, BROWSER[1]))).resize(BROWSER),
            )
        )
    return pages


class ScriptedDesktop:
    """The bench's desktop on ``display`` (module docstring): started by ``open`` (an ``ExitStack`` holds the
    window manager and the terminals), then ``play`` runs the seeded script until ``stop`` is set. The thread that
    plays owns the python-xlib connection."""

    def __init__(self, display: str, workdir: Path, seed: int = 41) -> None:
        self.display, self.workdir, self.rng = display, workdir, random.Random(seed)
        self.pages = browser_pages()
        self.changes: dict[str, int] = {"editor": 0, "terminal": 0, "browser": 0, "idle": 0}
        #: (UTC time the change began, kind, the text it puts on screen) of every change but idle stretches
        self.log: list[tuple[datetime, str, str]] = []

    def open(self, stack: contextlib.ExitStack) -> None:
        """Start openbox, the editor and the terminal xterms, and the browser-like window."""
        stack.enter_context(xdesktop.openbox(self.display))
        notes = self.workdir / "notes.txt"
        self.editor = stack.enter_context(
            xdesktop.xterm(self.display, f"vim -u NONE -N -n {notes}", "notes.txt - VIM", "110x34+0+0")
        )
        self.terminal = stack.enter_context(
            xdesktop.xterm(self.display, "PS1='user@host:~$ ' exec sh -i", "user@host: ~", "110x34+960+420")
        )
        xdesktop.type_text(self.display, self.editor, "i")  # vim's insert mode
        self.desk = Desktop(self.display)
        stack.callback(self.desk.close)
        title, page = self.pages[0]
        self.browser = self.desk.window(title, ("navigator", "Browser"), "", size=BROWSER)
        self.desk.paint(self.browser, page)
        self.page = 0

    def step(self) -> str:
        """One change of the screen (or an idle stretch); returns its kind."""
        kind = self.rng.choices(("editor", "terminal", "browser", "idle"), (0.3, 0.25, 0.3, 0.15))[0]
        began = datetime.now(UTC)
        if kind == "editor":
            sentence = self.rng.choice(SENTENCES)
            self.log.append((began, kind, sentence))
            xdesktop.type_text(self.display, self.editor, sentence + "\n", delay_ms=40)
        elif kind == "terminal":
            command, said = self.rng.choice(COMMANDS)
            self.log.append((began, kind, said))
            xdesktop.type_text(self.display, self.terminal, f"{command}; echo {said}\n", delay_ms=30)
        elif kind == "browser":
            self.page = (self.page + self.rng.randrange(1, len(self.pages))) % len(self.pages)
            title, page = self.pages[self.page]
            self.log.append((began, kind, title))
            self.desk.retitle(self.browser, title)
            xdesktop.activate(self.display, self.browser.id)
            self.desk.paint(self.browser, page)
        self.changes[kind] += 1
        return kind

    def play(self, stop: threading.Event) -> None:
        """Steps every 4-12 s (8.5 s on average; one in seven is idle: a change every 10 s) until ``stop``."""
        while not stop.is_set():
            began = time.monotonic()
            self.step()
            stop.wait(max(0.0, self.rng.uniform(4, 12) - (time.monotonic() - began)))


def words(text: str) -> list[str]:
    """Lower-case runs of letters and digits of ``text``."""
    return re.findall(r"[^\W_]+", text.lower())


def stored_frames(env: dict) -> list[tuple[datetime, str]]:
    """(capture time, stored text) of every observation in the embedded store of ``env``'s ``ENGRAM_DATA_DIR``
    (read in a child process: the store's settings come from the environment), oldest first."""
    code = (
        "import json; from engram.api.service.embedded import EmbeddedService; "
        "from engram.schemas.timeline import TimelineRequest; from engram.schemas.settings import get_settings; "
        "svc = EmbeddedService(); page = svc.timeline(TimelineRequest(tenant_id=get_settings().tenant, "
        "limit=10000)); svc.close(); "
        "print(json.dumps([[r.payload['start_ts'], r.payload.get('text') or ''] for r in page.items]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    rows = [
        (datetime.fromisoformat(ts) if isinstance(ts, str) else datetime.fromtimestamp(ts, UTC), text)
        for ts, text in json.loads(out.strip().splitlines()[-1])
    ]
    return sorted(rows)


def coverage(log: list[tuple[datetime, str, str]], frames: list[tuple[datetime, str]], end: datetime) -> dict:
    """Of the desktop's changes (``log``: time, kind, text), the share covered: a frame kept from the change's
    start until the next change of its window (``end`` for the last) whose text holds ``COVER_WORDS`` of the
    change's words. ``{"coverage", "coverage_by_kind", "changes_covered", "changes_scripted"}``."""
    got: dict[str, list[bool]] = {}
    for i, (began, kind, text) in enumerate(log):
        until = next((t for t, k, _ in log[i + 1 :] if k == kind), end)
        want = Counter(words(text))
        covered = False
        for at, stored in frames:
            if began <= at < until:
                found = Counter(words(stored))
                if sum(min(n, found[w]) for w, n in want.items()) >= COVER_WORDS * sum(want.values()):
                    covered = True
                    break
        got.setdefault(kind, []).append(covered)
    every = [c for cs in got.values() for c in cs]
    return {
        "coverage": round(sum(every) / max(1, len(every)), 3),
        "coverage_by_kind": {k: f"{sum(cs)}/{len(cs)}" for k, cs in sorted(got.items())},
        "changes_covered": sum(every),
        "changes_scripted": len(every),
    }


def allocated_bytes(folder: Path) -> dict[str, int]:
    """Bytes allocated on disk (``st_blocks``) under each top-level entry of ``folder``."""
    out: dict[str, int] = {}
    for top in folder.iterdir():
        files = [top] if top.is_file() else [p for p in top.rglob("*") if p.is_file()]
        out[top.name] = sum(p.stat().st_blocks * 512 for p in files)
    return out


def _figures(stats: dict, usage, disk: dict[str, int], elapsed: float, tree_rss: int = 0) -> dict:
    """A capture run's figures (module docstring) from its ``--json`` counts, rusage, data dir and the sampled
    peak of its process tree's summed RSS (``TreeRss``); ``rss_peak_bytes`` is the larger of that and rusage's."""
    cpu = usage.ru_utime + usage.ru_stime
    hours = stats["wall_seconds"] / 3600
    return {
        "cpu_percent": round(100 * cpu / stats["wall_seconds"], 2),
        "rss_peak_bytes": max(usage.ru_maxrss * 1024, tree_rss),
        "rss_peak_process_bytes": usage.ru_maxrss * 1024,
        "rss_tree_sampled_peak_bytes": tree_rss,
        "disk_bytes_per_hour": round(sum(disk.values()) / hours),
        "frames_kept": stats["kept"],
        "cpu_seconds": round(cpu, 1),
        "cpu_s_per_kept_frame": round(cpu / max(1, stats["kept"]), 2),
        "capture_thread_cpu_seconds": round(stats["gate_cpu_seconds"], 1),
        "drain_seconds": round(elapsed - stats["wall_seconds"], 1),
        "grabbed": stats["grabbed"],
        "duplicates": stats["duplicates"],
        "throttled_seconds": round(stats.get("throttled_seconds", 0.0), 1),
        "published": stats["published"],
        "failed": stats["failed"],
        "disk_bytes": disk,
    }


def desktop_run(minutes: float, seed: int, baseline: list[str] | None = None, before: Path | None = None) -> dict:
    """The scripted desktop for ``minutes`` with ``engram capture`` publishing into a fresh embedded store;
    the figures of the module docstring. ``baseline``: extra ``engram capture`` arguments of a second capture
    run at the same time on the same desktop into its own store (``--baseline``: ``--cpu-budget 0``, capture
    without its CPU budget); its figures under ``baseline`` and the ratios of the first's to its. ``before``:
    another checkout (a ``git worktree`` of earlier code) whose capture runs at its defaults beside them: its
    figures under ``before``, the ratios under ``ratio_to_before``."""
    seconds = minutes * 60
    runs = {"run": ([], REPO)} | ({"baseline": (baseline, REPO)} if baseline is not None else {})
    if before is not None:
        runs["before"] = ([], before)
    with (
        tempfile.TemporaryDirectory(prefix="engram-bench-capture-") as tmp,
        xvfb(f"{SCREEN[0]}x{SCREEN[1]}x24") as display,
        contextlib.ExitStack() as stack,
    ):
        root = Path(tmp)
        desktop = ScriptedDesktop(display, root, seed)
        desktop.open(stack)
        load_before = os.getloadavg()
        stop = threading.Event()
        player = threading.Thread(target=desktop.play, args=(stop,), name="desktop", daemon=True)
        procs, envs = {}, {}
        trees: dict[str, TreeRss] = {}
        for name, (extra, checkout) in runs.items():
            env = {
                **os.environ,
                "DISPLAY": display,
                "ENGRAM_DATA_DIR": str(root / name / "data"),
                "HF_HUB_OFFLINE": "1",
                "PYTHONPATH": engram_path(checkout, root),
            }
            for var in ("ENGRAM_BROKER_URL", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT", "WAYLAND_DISPLAY"):
                env.pop(var, None)
            envs[name] = env
            (root / name).mkdir()
            out, err = open(root / name / "out.txt", "w"), open(root / name / "err.txt", "w")
            stack.callback(out.close)
            stack.callback(err.close)
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "engram.api.cli", "capture", "--json", "--duration", str(seconds), *extra],
                env=env,
                cwd=checkout,
                stdout=out,
                stderr=err,
            )
            trees[name] = TreeRss(procs[name].pid)
        started = time.monotonic()
        player.start()
        ending = threading.Timer(seconds, stop.set)  # the desktop plays while the capture grabs, not its drain
        ending.start()
        reaped: dict[str, tuple] = {}

        def reap(name: str) -> None:  # each capture's own rusage and end time (a thread per process)
            _, status, usage = os.wait4(procs[name].pid, 0)
            reaped[name] = (os.waitstatus_to_exitcode(status), usage, time.monotonic() - started)

        waiters = [threading.Thread(target=reap, args=(name,)) for name in procs]
        for w in waiters:
            w.start()
        for w in waiters:
            w.join()
        results = {}
        stop.set()
        player.join(timeout=60)
        ended = datetime.now(UTC)
        for name, (code, usage, elapsed) in reaped.items():
            procs[name].returncode = code
            if code != 0:
                raise SystemExit((root / name / "err.txt").read_text()[-3000:])
            stats = json.loads((root / name / "out.txt").read_text().strip().splitlines()[-1])
            disk = allocated_bytes(root / name / "data")
            results[name] = _figures(stats, usage, disk, elapsed, trees[name].stop())
            results[name] |= coverage(desktop.log, stored_frames(envs[name]), ended)
    result = {
        **results["run"],
        "load": [round(x, 2) for x in os.getloadavg()],
        "load_before": [round(x, 2) for x in load_before],
        "minutes": minutes,
        "screen": "x".join(map(str, SCREEN)),
        "changes": desktop.changes,
    }
    for name, ratios in (("baseline", "ratio_to_baseline"), ("before", "ratio_to_before")):
        if name in results:
            base = results[name]
            result[name] = {"args": runs[name][0], **base}
            if name == "before":
                result[name]["checkout"] = subprocess.run(
                    ["git", "-C", str(before), "log", "-1", "--format=%h %cs"], capture_output=True, text=True
                ).stdout.strip()
            result[ratios] = {
                k: round(result[k] / base[k], 3) if base[k] else None
                for k in ("cpu_percent", "rss_peak_bytes", "disk_bytes_per_hour", "frames_kept", "coverage")
            }
    return result


# --- the frame format -------------------------------------------------------------------------------------


def _encode(img, fmt: str, quality: int | None) -> tuple[bytes, float]:
    """``img`` encoded as ``fmt`` (PNG at compression level 1; WebP at ``quality``, None: lossless) and the CPU
    seconds it took."""
    buf = io.BytesIO()
    t = time.process_time()
    if fmt == "png":
        img.save(buf, format="PNG", compress_level=1)
    elif quality is None:
        img.save(buf, format="WEBP", lossless=True)
    else:
        img.save(buf, format="WEBP", quality=quality)
    return buf.getvalue(), time.process_time() - t


def formats(qualities: list[int]) -> dict:
    """The ``--formats`` table (module docstring): per format, bytes as a share of PNG's (mean over the
    screenshots), encoding CPU ms (median), OCR word recall (webui: mean against the tree; screenpipe: mean
    against the PNG's OCR words) and screenpipe's named strings found."""
    import numpy as np

    from bench.lib import vision as ev
    from engram.workers.media import decode as media
    from engram.workers.media import vision
    from engram.workers.runtime import runtime

    rt = runtime()
    shots = [(p, None) for p in sorted((DATA / "screens").glob("screenpipe_*.png"))]
    shots += [(shot, shot) for _, shot, _ in ev.webui_pages(DATA / "screens" / "webui")]
    needles = {"screenpipe_testing_OCR.png": "receiver_count", "screenpipe_testing_OCR_chinese.png": "管理分支"}
    variants = [("png", None)] + [("webp", q) for q in qualities] + [("webp", None)]
    rows: dict[str, dict[str, list]] = {}
    for path, webui in shots:
        img = media.load_image(path.read_bytes(), 60_000_000)
        reference = None
        for fmt, quality in variants:
            name = fmt if fmt == "png" else f"webp q{quality}" if quality is not None else "webp lossless"
            data, cpu = _encode(img, fmt, quality)
            lines = vision.ocr_lines(rt, "bench-formats", np.asarray(media.load_image(data, 60_000_000)))
            found = [w for ln in lines for w in ev.words(ln.text)]
            if fmt == "png":
                png_bytes = len(data)
                reference = ev.webui_reference(webui, img.height) if webui else Counter(found)
            row = rows.setdefault(name, {"share": [], "cpu": [], "webui": [], "screenpipe": [], "found": []})
            row["share"].append(len(data) / png_bytes)
            row["cpu"].append(cpu)
            row["webui" if webui else "screenpipe"].append(ev.word_recall(reference, found)[0])
            if path.name in needles:
                row["found"].append(any(needles[path.name] in ln.text for ln in lines))
            print(path.name, name, len(data), f"{row['webui' if webui else 'screenpipe'][-1]:.3f}", flush=True)
    return {
        name: {
            "bytes_share_of_png": round(statistics.fmean(r["share"]), 3),
            "encode_cpu_ms": round(1000 * statistics.median(r["cpu"]), 1),
            "webui_recall": round(statistics.fmean(r["webui"]), 3),
            "screenpipe_recall_vs_png": round(statistics.fmean(r["screenpipe"]), 3),
            "named_strings_found": f"{sum(r['found'])}/{len(r['found'])}",
        }
        for name, r in rows.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="Length of the scripted desktop's capture.")
    ap.add_argument("--seed", type=int, default=41, help="Seed of the desktop's script.")
    ap.add_argument("--json", type=Path, help="Write (merge) the figures into this JSON file.")
    ap.add_argument(
        "--baseline",
        action="store_true",
        help="Also run a capture without its CPU budget "
        "(--cpu-budget 0) on the same desktop at the same time, and give the ratios to it.",
    )
    ap.add_argument(
        "--before",
        type=Path,
        help="Also run the capture of this checkout (a git worktree of the code before) at its defaults, "
        "on the same desktop at the same time; its figures under before, the ratios under ratio_to_before.",
    )
    ap.add_argument("--formats", action="store_true", help="Measure the frame formats instead (bytes, recall).")
    ap.add_argument("--qualities", type=int, nargs="+", default=[50, 65, 75, 80, 85, 90], help="WebP qualities.")
    ap.add_argument("--seconds", type=float, default=150.0, help="Length of each --only/--microphone run.")
    ap.add_argument("--change-every", type=float, default=2.0, help="Seconds between text changes (changing run).")
    ap.add_argument("--only", choices=("static", "changing"), help="The older single-window run instead.")
    ap.add_argument(
        "--embedded",
        action="store_true",
        help="With --only: publish into the embedded store (OCR, embedding) instead of measuring the agent alone.",
    )
    ap.add_argument(
        "--microphone",
        action="store_true",
        help="Measure the microphone alone (a silent and a speaking PulseAudio source) instead of the screen.",
    )
    args = ap.parse_args()
    if args.microphone:
        with tempfile.TemporaryDirectory() as tmp:
            for name, speech in (("silent", None), ("speech", speech_wavs(Path(tmp)))):
                print(json.dumps(run_microphone(Path(tmp) / name, args.seconds, speech)), flush=True)
        return
    if args.only:
        with xvfb() as display, tempfile.TemporaryDirectory() as tmp:
            every = args.change_every if args.only == "changing" else None
            print(json.dumps(run(display, args.seconds, every, Path(tmp) / args.only, not args.embedded)))
        return
    if args.formats:
        os.environ["ENGRAM_DATA_DIR"] = tempfile.mkdtemp(prefix="engram-bench-formats-")
        from engram.api.capture.agent import WEBP_QUALITY  # the stored format: only --formats reads it

        table, stored = formats(sorted({*args.qualities, WEBP_QUALITY})), f"webp q{WEBP_QUALITY}"
        result = {
            "formats": table,
            "stored_format": stored,
            "frame_bytes_ratio": table[stored]["bytes_share_of_png"],
            "load": [round(x, 2) for x in os.getloadavg()],
        }
    else:
        baseline = ["--cpu-budget", "0"] if args.baseline else None
        result = desktop_run(args.minutes, args.seed, baseline, args.before)
    print(json.dumps(result, ensure_ascii=False))
    if args.json:
        merge_json(args.json, result)


if __name__ == "__main__":
    main()
