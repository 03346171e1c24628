"""``engram capture``: a desktop capture agent. Screenshots at an interval that adapts to change, gated at the
edge by the project's near-duplicate test before anything is stored, with the window title and application from
the X server, privacy rules, pause, and publishing in batches into the embedded store or to an API.

The loop (MIRIX's screenshot memory, screenpipe's capture, with the CPU cost in mind):

1. Paused (the pause file exists, or SIGUSR1 toggled it)? Sleep.
2. The active window and the viewable windows from the X server (``_NET_ACTIVE_WINDOW`` / ``_NET_CLIENT_LIST``,
   else the input focus and the root's mapped children; ``_NET_WM_NAME`` / ``WM_NAME`` and ``WM_CLASS``). A
   window of a denied application (``WM_CLASS``, e.g. KeePassXC, 1Password, Bitwarden) or whose title matches a
   denied pattern ("Private Browsing", "Incognito") anywhere on screen: nothing is grabbed this tick.
3. Grab the monitor (``mss``) and compute its ``workers.media.decode.frame_signature`` (pHash + a 256 px thumbnail);
   a frame that ``workers.media.decode.is_near_duplicate`` calls a repeat of the last kept one (the thresholds of
   ingest: ``ENGRAM_NEAR_DUPLICATE_SIMILARITY``, ``_SSIM``) is dropped here, never encoded or written.
4. A kept frame is written as WebP (``WEBP_QUALITY``) to the spool folder and published with the batch
   (``--batch`` frames, or ``--flush-seconds`` after the batch's first), named by what it shows (``screen_source``:
   ``screen/<app> — <title>``): on the embedded default through ``api.local`` (``EmbeddedSink``: the store stays
   open between batches and is left at once to another engram process that asks), or through the API with
   ``api.client.EngramClient``. Published frames are removed from the spool; failed ones stay there.
5. The interval: ``--interval`` (2 s) after a kept frame, doubled after each repeat up to ``--max-interval``
   (30 s), so a static screen costs one grab every 30 s.
6. The CPU budget (``--cpu-budget``, ``ENGRAM_CAPTURE_CPU_BUDGET``: 0.08 of a core): ``CpuBudget``, a token
   bucket over the whole process's CPU seconds (the grabs and, on the embedded default, the pipeline's OCR and
   embedding), holds the next grab while it is spent (counting what the frames queued for the pipeline will
   cost, at what published frames cost so far; the frames gathered for the next batch are handed to the
   publisher at once then, not when the batch fills: a batch that the budget cannot fill would otherwise wait
   ``--flush-seconds`` with the grabs held), and on the embedded default no frame is grabbed while two batches
   wait for the pipeline. A busy screen is grabbed less often, never read at more CPU. The pipeline reads
   each frame by lines against the last (``workers.media.screens``: only the lines not seen before are
   recognized), and the user is consolidated once ``consolidate_min_observations`` frames are in and at the end,
   not after every batch.

Ownership: the caller's thread runs the loop (grabs, windows, the gate, the spool) and owns the counts of
``CaptureStats`` but ``published``/``failed``, which belong to one publisher thread that takes batches from a
queue (``run`` joins it before returning): a slow embedded ingest (OCR) delays publishing, never the grabs.
Signal handlers only set flags.

Microphone (``--microphone``, off by default; ``api.capture.microphone``): audio from PortAudio (``sounddevice``) in
``--chunk-seconds`` chunks, chunks without speech dropped at the edge by WebRTC's VAD, each kept chunk a WAV
``Frame`` of kind audio put on the same publisher queue as the screenshots (so the same sinks publish it). The
microphone runs beside the screen loop, or alone with ``--no-screen``.
"""

from __future__ import annotations

import functools
import os
import queue
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from engram.api.console import counted
from engram.schemas.events import MediaKind

#: Applications never captured (matched case-insensitively within WM_CLASS's instance and class names).
DEFAULT_DENY_APPS = (
    "keepassxc",
    "keepass",
    "1password",
    "bitwarden",
    "lastpass",
    "enpass",
    "dashlane",
    "proton pass",
    "seahorse",
    "kwalletmanager",
    "gnome-keyring",
)
#: Control characters (Unicode category Cc), which a title may hold and an event's names may not: read as spaces.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: The longest title and app name an event takes (``schemas.events.MediaEvent``'s ``window`` and ``app``).
MAX_TITLE, MAX_APP = 1024, 256
#: How kept frames are stored: WebP at this quality (Pillow; 0-100), chosen by bytes and OCR word recall on the
#: shared screenshots (``python bench/capture_cpu.py --formats``, docs/figures.md).
WEBP_QUALITY = 65
#: Texts per embedding batch in a capture that runs the pipeline in its own process (unless
#: ``ENGRAM_MODELS__EMBEDDING_BATCH_SIZE`` says otherwise): MiniLM's activations grow with the batch, and a
#: consolidation embeds a screen text of 256 word pieces per frame (20 frames: 320 MB more RSS at 64, 143 MB at
#: 4, for the same CPU).
CAPTURE_EMBEDDING_BATCH = 4
#: The source name of a frame whose window is unknown, and of a microphone chunk.
SCREEN_SOURCE, MICROPHONE_SOURCE = "screen", "microphone"

#: Window titles never captured (regular expressions, case-insensitive, searched anywhere in the title).
DEFAULT_DENY_TITLES = (
    r"private browsing",
    r"\bincognito\b",
    r"\binprivate\b",
    r"private window",
    r"keepassxc",
    r"1password",
    r"bitwarden",
)


@dataclass(frozen=True)
class WindowInfo:
    """A top-level window: X id, title (``_NET_WM_NAME``, else ``WM_NAME``) and app (``WM_CLASS`` class,
    else instance); None when the window does not say."""

    window_id: int
    title: str | None
    app: str | None
    app_names: tuple[str, ...] = ()  # both WM_CLASS strings (instance, class)


class XWindows:
    """Window titles and applications from an X server through python-xlib (one connection; the capture
    thread owns it). Raises ``Xlib.error.DisplayError`` when the display cannot be opened."""

    def __init__(self, display: str | None = None) -> None:
        from Xlib import display as xdisplay

        self.display = xdisplay.Display(display)
        self.root = self.display.screen().root
        self._atoms = {
            name: self.display.intern_atom(name)
            for name in ("_NET_ACTIVE_WINDOW", "_NET_CLIENT_LIST", "_NET_WM_NAME", "UTF8_STRING")
        }

    def close(self) -> None:
        """Close the connection."""
        self.display.close()

    def active(self) -> WindowInfo | None:
        """The active window (``_NET_ACTIVE_WINDOW`` set by the window manager, else the input focus, else the
        topmost viewable top-level window with a name), or None."""
        from Xlib import X

        wid = self._window_prop(self.root, "_NET_ACTIVE_WINDOW")
        if wid:
            return self._info(wid)
        focus = self.display.get_input_focus().focus
        if not isinstance(focus, int) and focus.id not in (self.root.id, X.NONE, X.PointerRoot):
            if (info := self._info(focus.id)) and (info.title or info.app):
                return info
        named = [w for w in self.visible() if w.title or w.app]
        return named[-1] if named else None

    def visible(self) -> list[WindowInfo]:
        """Viewable top-level client windows, bottom to top (``_NET_CLIENT_LIST``, else the root's children)."""
        from Xlib import X, error

        prop = self.root.get_full_property(self._atoms["_NET_CLIENT_LIST"], X.AnyPropertyType)
        ids = list(prop.value) if prop is not None else [w.id for w in self.root.query_tree().children]
        out = []
        for wid in ids:
            try:
                win = self.display.create_resource_object("window", wid)
                if win.get_attributes().map_state != X.IsViewable:
                    continue
            except error.XError:
                continue
            if info := self._info(wid):
                out.append(info)
        return out

    def _window_prop(self, win, name: str) -> int | None:
        from Xlib import X

        prop = win.get_full_property(self._atoms[name], X.AnyPropertyType)
        try:
            return int(prop.value[0]) if prop is not None and len(prop.value) else None
        except (TypeError, ValueError):  # a property of another type than the window id it should hold
            return None

    def _info(self, wid: int) -> WindowInfo | None:
        """The window's title and application; None when the window went away while being read. A property
        that is missing, of an unexpected type or not valid text reads as unknown, never as an error."""
        from Xlib import error

        win = self.display.create_resource_object("window", wid)
        try:
            title = self._title(win)
            try:
                classes = tuple(c for c in (win.get_wm_class() or ()) if isinstance(c, str))
            except (TypeError, ValueError, UnicodeError):  # a malformed WM_CLASS
                classes = ()
        except error.XError:  # the window went away
            return None
        app = " ".join(_CONTROLS.sub(" ", classes[-1]).split())[:MAX_APP] if classes else None
        return WindowInfo(wid, title or None, app or None, classes)

    def _title(self, win) -> str | None:
        """``_NET_WM_NAME`` (UTF-8), else ``WM_NAME`` (ICCCM: Latin-1 ``STRING`` or a compound text read as UTF-8
        where it decodes); undecodable bytes are replaced. Raises ``Xlib.error.XError`` when the window is gone."""
        from Xlib import X, Xatom

        for atom, wanted, fallback in (
            (self._atoms["_NET_WM_NAME"], self._atoms["UTF8_STRING"], "utf-8"),
            (Xatom.WM_NAME, X.AnyPropertyType, "latin-1"),
        ):
            value = getattr(win.get_full_property(atom, wanted), "value", None)
            if isinstance(value, bytes):
                try:
                    text = value.decode("utf-8")
                except UnicodeDecodeError:
                    text = value.decode(fallback, "replace")
            else:  # absent, or a property of another format (a list of numbers)
                text = value if isinstance(value, str) else None
            if text and (text := " ".join(_CONTROLS.sub(" ", text).split())):
                return text[:MAX_TITLE]
        return None


class PrivacyRules:
    """Which windows are never captured: an application whose WM_CLASS contains one of ``deny_apps`` (case-
    insensitive) or a title matching one of ``deny_titles`` (regular expressions, case-insensitive). Raises
    re.error for a bad pattern."""

    def __init__(
        self, deny_apps: Iterable[str] = DEFAULT_DENY_APPS, deny_titles: Iterable[str] = DEFAULT_DENY_TITLES
    ) -> None:
        self.deny_apps = tuple(a.lower() for a in deny_apps if a)
        self.deny_titles = tuple(re.compile(p, re.IGNORECASE) for p in deny_titles if p)

    def denies(self, win: WindowInfo) -> str | None:
        """Why ``win`` must not be captured (the rule that matched), or None."""
        for name in win.app_names or ((win.app,) if win.app else ()):
            for app in self.deny_apps:
                if app in name.lower():
                    return f"app {app!r}"
        if win.title:
            for pattern in self.deny_titles:
                if pattern.search(win.title):
                    return f"title /{pattern.pattern}/"
        return None


@dataclass
class AdaptiveInterval:
    """Seconds to the next grab: ``minimum`` after a kept (changed) frame, multiplied by ``factor`` after each
    repeat, up to ``maximum``."""

    minimum: float = 2.0
    maximum: float = 30.0
    factor: float = 2.0
    current: float = field(init=False)

    def __post_init__(self) -> None:
        self.current = self.minimum

    def next(self, changed: bool) -> float:
        """The interval after a frame that was kept (``changed``) or dropped as a repeat."""
        self.current = self.minimum if changed else min(self.maximum, self.current * self.factor)
        return self.current


class CpuBudget:
    """A token bucket over this process's CPU seconds (``time.process_time``: every thread, the pipeline's too):
    ``cores`` CPU seconds per wall second flow in, up to ``burst`` CPU seconds; what the process used flows out.
    ``wait`` says how long until the bucket is no longer in debt. (The ``limits`` library counts hits and turns
    away those over the limit; this CPU is spent before it is counted.) ``clock`` and ``cpu`` are for tests."""

    def __init__(
        self,
        cores: float,
        burst: float,
        clock: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.process_time,
    ) -> None:
        if cores <= 0:
            raise ValueError("a CPU budget needs cores > 0")
        self.cores, self.burst, self._clock, self._cpu = cores, burst, clock, cpu
        self.tokens = burst
        self._at, self._used = clock(), cpu()

    def update(self) -> float:
        """The tokens now (CPU seconds; negative: in debt)."""
        now, used = self._clock(), self._cpu()
        self.tokens = min(self.burst, self.tokens + self.cores * (now - self._at) - (used - self._used))
        self._at, self._used = now, used
        return self.tokens

    def wait(self, ahead: float = 0.0) -> float:
        """Seconds until the bucket, less ``ahead`` CPU seconds already committed (frames queued for the
        pipeline), is out of debt at its rate (0: within budget now)."""
        tokens = self.update() - ahead
        return 0.0 if tokens >= 0 else -tokens / self.cores


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` through ``ctypes``, or None where the C library has none (musl, macOS, Windows)."""
    import ctypes  # the C library, loaded once, on the embedded sink's first frame

    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # no C library to load by handle, or one without malloc_trim
        return None


def release_freed_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim(0)``: every thread's arena, free
    pages inside the heaps too); a no-op elsewhere. After each frame the embedded pipeline read (OCR, faces,
    embedding), the memory it freed stays mapped in glibc's arenas otherwise: onnxruntime's and OpenCV's buffers
    of a 1920x1080 frame, 200-270 MB that the process's RSS kept for the rest of the run (rapidocr over the
    shared screenshots three times: 466-526 MB against 262 MB trimmed, for 2-3 % more CPU: the pages are faulted
    in again on the next frame)."""
    if (trim := _malloc_trim()) is not None:
        trim(0)


def screen_source(app: str | None, title: str | None) -> str:
    """The source name of a screenshot: ``screen/<app> — <title>`` (``screen/xterm — user@host: ~``), the parts
    that are known; ``screen`` when neither is. Slashes and backslashes of the title become the look-alike
    U+2215 and U+2216, so the name's last path part (what ``engram search`` shows) is the app and title whole and
    no part of it reads as a folder (nor ``..``: the API refuses a name that climbs)."""
    shown = " — ".join(x for x in (app, title) if x).replace("/", "\u2215").replace("\\", "\u2216")
    if set(shown) == {"."}:  # a title of dots alone: one-dot leaders, never a path's "." or ".."
        shown = shown.replace(".", "\u2024")
    return f"{SCREEN_SOURCE}/{shown}"[:1024] if shown else SCREEN_SOURCE


@dataclass(frozen=True)
class Frame:
    """A kept frame waiting in the spool: its file (a WebP screenshot, or a WAV chunk of the microphone), when
    it was grabbed (UTC; a chunk's first sample), the active window (None for audio), what it is, and the name
    its event is published under (``source_name``: ``screen_source`` or ``microphone``; the spool file is
    deleted once published)."""

    path: Path
    captured_at: datetime
    app: str | None
    window: str | None
    kind: MediaKind = MediaKind.screenshot
    mime: str = "image/webp"
    source_name: str = SCREEN_SOURCE


def screen_frame(path: Path, when: datetime, active: WindowInfo | None) -> Frame:
    """A kept screenshot (WebP) as a ``Frame``, named after ``active`` (the active window, None: unknown)."""
    app, title = (active.app, active.title) if active else (None, None)
    return Frame(path, when, app, title, source_name=screen_source(app, title))


def audio_frame(path: Path, when: datetime) -> Frame:
    """A microphone chunk (WAV) as a ``Frame`` for the publisher."""
    return Frame(path, when, None, None, MediaKind.audio, "audio/wav", MICROPHONE_SOURCE)


@dataclass
class CaptureStats:
    """What a capture run did. ``gate_cpu_seconds``: CPU of the capture thread (grabbing, reading windows, the
    near-duplicate gate, writing kept frames; not publishing); ``cpu_seconds``: the whole process's (with an
    embedded sink, the pipeline's OCR and embedding of the kept frames too, until the last is published);
    ``wall_seconds``: the capture's length; ``publish_wait_seconds``: the wait after it for the publisher to
    finish the frames still queued; ``throttled_seconds``: how long grabs were held by the CPU budget or the
    pipeline's backlog."""

    grabbed: int = 0
    kept: int = 0
    duplicates: int = 0
    denied: int = 0
    paused_seconds: float = 0.0
    published: int = 0
    failed: int = 0
    wall_seconds: float = 0.0
    publish_wait_seconds: float = 0.0
    gate_cpu_seconds: float = 0.0
    cpu_seconds: float = 0.0
    denied_rules: dict[str, int] = field(default_factory=dict)
    audio_chunks: int = 0  # microphone: chunks cut, kept (published like frames), dropped as silent
    audio_kept: int = 0
    audio_silent: int = 0
    audio_seconds: float = 0.0
    audio_overflows: int = 0
    throttled_seconds: float = 0.0  # grabs held by the CPU budget or the pipeline's backlog

    @property
    def waiting(self) -> int:
        """Kept frames and chunks not yet published nor failed (queued for the publisher, or being read by OCR
        and embedded on the embedded default)."""
        return max(0, self.kept + self.audio_kept - self.published - self.failed)


Sink = Callable[[Sequence[Frame]], tuple[int, int]]  # publish a batch -> (published, failed)


class EmbeddedSink:
    """Publishes kept frames into the embedded store (``api.local.publish_file`` + ``run_event``, the pipeline
    inline), and consolidates the user once ``consolidate_every`` frames are in since the last time (and at
    ``close``); returns (published, failed) per batch. The store is held with a
    ``workers.runtime.StoreLease`` that stays open ``linger`` seconds after a batch (the next batch does not open
    it again: 0.3-4 s from 10 k to 1 M points) and is left at once to another engram process that asks for it;
    ``close`` releases it (the run is over). After each frame and each consolidation the memory the pipeline
    freed is given back to the system (``release_freed_memory``)."""

    def __init__(
        self,
        tenant: str,
        user: str,
        device: str,
        report: Callable[[str], None] = lambda _: None,
        linger: float = 0.0,
        consolidate_every: int = 20,
    ) -> None:
        from engram.workers.runtime import StoreLease  # the workers' stack, when the capture publishes

        self.tenant, self.user, self.device, self.report = tenant, user, device, report
        self.lease = StoreLease(linger)
        self.consolidate_every = consolidate_every
        self.unconsolidated = 0  # frames published since the user was last consolidated

    def __call__(self, frames: Sequence[Frame]) -> tuple[int, int]:
        from engram.api.local import Candidate, publish_file, run_event
        from engram.schemas.events import EventStatus

        ok = bad = 0
        with self.lease.session() as rt:
            for frame in frames:
                try:
                    event = publish_file(
                        rt,
                        Candidate(frame.path, frame.kind, frame.mime),
                        self.tenant,
                        self.user,
                        self.device,
                        frame.captured_at,
                        frame.app,
                        frame.window,
                        source_name=frame.source_name,
                    )
                    record = run_event(rt, event)
                except Exception as exc:  # noqa: BLE001 (one frame never stops the capture)
                    self.report(f"failed {frame.path.name}: {type(exc).__name__}: {exc}")
                    bad += 1
                    continue
                finally:
                    release_freed_memory()
                if record.status is EventStatus.failed:
                    self.report(f"failed {frame.path.name}: {record.reason}")
                    bad += 1
                else:
                    ok += 1
                    frame.path.unlink(missing_ok=True)
            self.unconsolidated += ok
            if self.unconsolidated >= self.consolidate_every:
                self._consolidate()
                release_freed_memory()
        return ok, bad

    def _consolidate(self) -> None:
        from engram.workers.consolidate import consolidate_user

        consolidate_user.delay(self.tenant, self.user)
        self.unconsolidated = 0

    def close(self) -> None:
        """Consolidate the user if frames came in since the last time, then release the store."""
        try:
            if self.unconsolidated:
                with self.lease.session():
                    self._consolidate()
        except Exception as exc:  # noqa: BLE001 (the next capture, ingest or beat consolidates them)
            self.report(f"cannot consolidate: {type(exc).__name__}: {exc}")
        finally:
            self.lease.close()


def spool_sink(frames: Sequence[Frame]) -> tuple[int, int]:
    """Publish nothing: the frames stay in the spool (``--spool-only``)."""
    return 0, 0


def api_sink(client, report: Callable[[str], None] = lambda _: None) -> Sink:
    """Publish kept frames through an ``api.client.EngramClient`` (presigned upload, then the event)."""

    def publish(frames: Sequence[Frame]) -> tuple[int, int]:
        ok = bad = 0
        for frame in frames:
            try:
                client.publish(
                    frame.path,
                    frame.kind,
                    captured_at=frame.captured_at,
                    app=frame.app,
                    window=frame.window,
                    source_name=frame.source_name,
                )
            except Exception as exc:  # noqa: BLE001 (the API down: the frame stays in the spool)
                report(f"failed {frame.path.name}: {type(exc).__name__}: {exc}")
                bad += 1
            else:
                ok += 1
                frame.path.unlink(missing_ok=True)
        return ok, bad

    return publish


@dataclass
class CaptureConfig:
    """Options of one capture run (the CLI's): ``interval``/``max_interval`` seconds; ``max_frames`` grabs and
    ``duration`` seconds bound the run (None: until stopped); ``batch`` frames or ``flush_seconds`` per publish;
    ``monitor`` is mss's index (0: all monitors as one image, 1: the first); ``screen`` False: no screenshots
    (the microphone alone); ``cpu_budget`` cores and ``cpu_burst`` CPU seconds for ``CpuBudget`` (0: none);
    ``max_backlog``: grabs wait while this many kept frames are not yet published (None: never)."""

    spool: Path
    interval: float = 2.0
    max_interval: float = 30.0
    max_frames: int | None = None
    duration: float | None = None
    batch: int = 5
    flush_seconds: float = 60.0
    monitor: int = 1
    pause_file: Path | None = None
    hash_min: float = 0.9
    ssim_min: float = 0.997
    thumb_side: int = 256
    screen: bool = True
    quality: int = WEBP_QUALITY
    cpu_budget: float = 0.0  # cores (0: none): ``CpuBudget``'s rate
    cpu_burst: float = 10.0  # CPU seconds the budget lets the process run ahead of its rate
    max_backlog: int | None = None  # kept frames not yet published at which grabs wait


class Capture:
    """The capture loop (module docstring). ``windows``: an ``XWindows`` or None (no window information: the
    title and app rules cannot apply). ``stop``: set to end the run (the pending batch is published).
    ``microphone``: an ``api.capture.microphone.MicrophoneRecorder`` recording beside the screen (or alone), or None."""

    def __init__(
        self,
        config: CaptureConfig,
        sink: Sink,
        rules: PrivacyRules,
        windows: XWindows | None = None,
        stop: threading.Event | None = None,
        report: Callable[[str], None] = lambda _: None,
        microphone: Any = None,
    ) -> None:
        self.config, self.sink, self.rules, self.windows, self.report = config, sink, rules, windows, report
        self.microphone = microphone
        self.stop = stop or threading.Event()
        self.paused_by_signal = False
        self.stats = CaptureStats()
        self.phase = "capturing"  # "publishing" once the grabs are over and the publisher drains its queue
        self.window_errors: set[str] = set()
        self.batch_lines = True  # a line per published batch (off under a refreshed progress display)
        self.frame_cpu = 0.0  # process CPU seconds a published frame has cost (moving average; the publisher's)

    def toggle_pause(self, *_: object) -> None:
        """SIGUSR1's handler: pause or resume."""
        self.paused_by_signal = not self.paused_by_signal

    def paused(self) -> bool:
        """Paused by SIGUSR1 or by the pause file's existence."""
        pf = self.config.pause_file
        return self.paused_by_signal or (pf is not None and pf.exists())

    def run(self) -> CaptureStats:
        """Capture until ``stop``, ``max_frames`` grabs or ``duration`` seconds; publish what is pending; return
        the counts. Raises mss's ScreenShotError when the screen cannot be grabbed at all, and the audio
        library's error when the microphone cannot be opened."""
        cfg, st = self.config, self.stats
        cfg.spool.mkdir(parents=True, exist_ok=True)
        start, cpu0 = time.monotonic(), time.process_time()
        batches: queue.Queue[list[Frame] | None] = queue.Queue()
        publisher = threading.Thread(target=self._publish_batches, args=(batches,), name="capture-publish", daemon=True)
        publisher.start()
        try:
            if self.microphone is not None:
                self.microphone.start(batches.put)
            if cfg.screen:
                self._screen(start, batches)
            else:
                self.stop.wait(None if cfg.duration is None else cfg.duration)
        finally:
            if self.microphone is not None:
                mic = self.microphone.stop()
                st.audio_chunks, st.audio_kept, st.audio_silent = mic.chunks, mic.kept, mic.silent
                st.audio_seconds, st.audio_overflows = mic.seconds, mic.overflows
            st.wall_seconds = time.monotonic() - start
            self.phase = "publishing"
            batches.put(None)
            publisher.join()
        st.publish_wait_seconds = time.monotonic() - start - st.wall_seconds
        st.cpu_seconds = time.process_time() - cpu0
        return st

    def _screen(self, start: float, batches: queue.Queue) -> None:
        """The screen loop (module docstring): grab, gate, spool, hand batches to the publisher."""
        import mss

        from engram.workers.media import decode as media

        cfg, st = self.config, self.stats
        interval = AdaptiveInterval(cfg.interval, max(cfg.max_interval, cfg.interval))
        pending: list[Frame] = []
        first_pending = 0.0
        last_signature: str | None = None
        budget = CpuBudget(cfg.cpu_budget, cfg.cpu_burst) if cfg.cpu_budget > 0 else None
        with mss.MSS() as grabber:
            monitor = grabber.monitors[min(cfg.monitor, len(grabber.monitors) - 1)]
            while not self.stop.is_set():
                now = time.monotonic()
                if cfg.duration is not None and now - start >= cfg.duration:
                    break
                if cfg.max_frames is not None and st.grabbed >= cfg.max_frames:
                    break
                if self.paused():
                    self.stop.wait(min(1.0, cfg.interval))
                    st.paused_seconds += time.monotonic() - now
                    continue
                if hold := self._throttle(budget):
                    if pending:  # held for what they will cost: read them now, not when the batch fills or flushes
                        batches.put(pending)
                        pending = []
                    if cfg.duration is not None:
                        hold = min(hold, max(0.0, cfg.duration - (now - start)))
                    self.stop.wait(hold)
                    st.throttled_seconds += time.monotonic() - now
                    continue
                gate0 = time.thread_time()
                changed = False
                denied, active = self._denied()
                if denied:
                    st.denied += 1
                    st.denied_rules[denied] = st.denied_rules.get(denied, 0) + 1
                    last_signature = None  # what shows after the denied window is compared with nothing
                else:
                    when = datetime.now(UTC)
                    shot = grabber.grab(monitor)
                    from PIL import Image

                    img = Image.frombytes("RGB", shot.size, shot.bgra, "raw", "BGRX")
                    st.grabbed += 1
                    # the gate's pHash and thumbnail from a half-size image (a box filter): a third less CPU a grab
                    signature = media.frame_signature(img.reduce(2) if img.width >= 1280 else img, cfg.thumb_side)
                    if last_signature is not None and media.is_near_duplicate(
                        last_signature, signature, cfg.hash_min, cfg.ssim_min
                    ):
                        st.duplicates += 1
                    else:
                        changed, last_signature = True, signature
                        path = cfg.spool / f"{when:%Y%m%dT%H%M%S.%fZ}.webp"
                        img.save(path, format="WEBP", quality=cfg.quality)
                        st.kept += 1
                        if not pending:
                            first_pending = time.monotonic()
                        pending.append(screen_frame(path, when, active))
                st.gate_cpu_seconds += time.thread_time() - gate0
                if pending and (len(pending) >= cfg.batch or time.monotonic() - first_pending >= cfg.flush_seconds):
                    batches.put(pending)
                    pending = []
                wait = interval.next(changed)
                if cfg.duration is not None:
                    wait = min(wait, max(0.0, cfg.duration - (time.monotonic() - start)))
                self.stop.wait(wait)
        if pending:
            batches.put(pending)

    def _throttle(self, budget: CpuBudget | None) -> float:
        """Seconds to hold the next grab: while ``budget`` is in debt, counting what the kept frames not yet
        published will cost (``frame_cpu`` each), or (``max_backlog``) while that many of them wait (the batch
        being gathered included); 0: grab now."""
        hold = budget.wait(self.stats.waiting * self.frame_cpu) if budget is not None else 0.0
        backlog = self.config.max_backlog
        if backlog is not None and self.stats.waiting >= backlog:
            hold = max(hold, self.config.interval)
        return hold

    def _denied(self) -> tuple[str | None, WindowInfo | None]:
        """(the rule that denies this tick, or None; the active window). A window list that cannot be read
        (the X connection lost, a reply python-xlib cannot parse) keeps the tick's frame without a title; each
        kind of error is reported once."""
        if self.windows is None:
            return None, None
        try:
            active = self.windows.active()
            windows = ([active] if active else []) + self.windows.visible()
        except Exception as exc:  # noqa: BLE001 (a window's properties never stop the capture)
            if type(exc).__name__ not in self.window_errors:
                self.window_errors.add(type(exc).__name__)
                self.report(
                    f"cannot read the windows ({type(exc).__name__}: {exc}); such ticks keep their frame "
                    "without a title"
                )
            return None, None
        for win in windows:
            if why := self.rules.denies(win):
                return why, active
        return None, active

    def _publish_batches(self, batches: queue.Queue) -> None:
        """The publisher thread: each batch through the sink until the None that ends the run."""
        while (frames := batches.get()) is not None:
            cpu = time.process_time()
            try:
                ok, bad = self.sink(frames)
            except Exception as exc:  # noqa: BLE001 (the store busy, the API down: frames stay in the spool)
                ok, bad = 0, len(frames)
                self.report(f"cannot publish {len(frames)} frames: {type(exc).__name__}: {exc}")
            cost = (time.process_time() - cpu) / len(frames)
            self.frame_cpu = cost if not self.frame_cpu else 0.7 * self.frame_cpu + 0.3 * cost
            self.stats.published += ok
            self.stats.failed += bad
            if self.batch_lines or bad:
                self.report(
                    f"published {counted(ok, 'file')}"
                    + (f", {bad} failed (kept in {self.config.spool})" if bad else "")
                )


def install_signals(capture: Capture) -> dict:
    """SIGINT/SIGTERM stop the run (the pending batch is published), SIGUSR1 toggles pause; returns the
    previous handlers for ``signal.signal`` to restore. Call from the main thread."""
    handlers = {
        signal.SIGINT: lambda *_: capture.stop.set(),
        signal.SIGTERM: lambda *_: capture.stop.set(),
        signal.SIGUSR1: capture.toggle_pause,
    }
    return {sig: signal.signal(sig, h) for sig, h in handlers.items()}


def check_display(report: Callable[[str], None], environ: dict | None = None) -> None:
    """Before a screen capture on Linux: say what works on a Wayland session, and exit 2 with one line when
    there is no X display to grab (mss and the window titles both go through X: Xorg, XWayland or Xvfb).

    Wayland with ``$DISPLAY`` (XWayland): one line that only X11 applications' windows are seen (a native
    Wayland window is grabbed black and its title is unknown), then the capture runs.

    Raises:
        typer.Exit: code 2, no ``$DISPLAY`` (the line says what works instead: ``--microphone --no-screen``).
    """
    import sys

    env = os.environ if environ is None else environ
    if not sys.platform.startswith("linux"):
        return
    wayland = bool(env.get("WAYLAND_DISPLAY")) or env.get("XDG_SESSION_TYPE", "").lower() == "wayland"
    if env.get("DISPLAY"):
        if wayland:
            report(
                f"Wayland session: the screen is read through XWayland (DISPLAY={env['DISPLAY']}), which shows "
                "X11 applications only: native Wayland windows are grabbed black and their titles are unknown, "
                "so the privacy rules by title and app see X11 windows only"
            )
        return
    if wayland:
        report(
            "error: Wayland session without an X display (DISPLAY unset): engram capture grabs the screen and "
            "reads window titles through X, which Wayland does not give. What works: XWayland (set DISPLAY, "
            "e.g. DISPLAY=:0; X11 applications' windows only) and the microphone alone (--microphone "
            "--no-screen). What does not: native Wayland windows (grabs and titles need X)."
        )
    else:
        report(
            "error: no X display (DISPLAY unset): engram capture grabs the screen through X (Xorg, XWayland "
            "or Xvfb). Set DISPLAY, or record the microphone alone with --microphone --no-screen."
        )
    raise typer.Exit(2)


def progress_line(cap: Capture) -> str:
    """What a capture did so far, for its progress display: phase, grabbed, kept, repeats, denied, published,
    failed, and what waits for OCR (or in the spool, ``--spool-only``)."""
    st = cap.stats
    waiting = f"{st.waiting} in the spool" if cap.sink is spool_sink else f"{st.waiting} waiting for OCR"
    audio = f", {st.audio_kept}/{st.audio_chunks} audio chunks kept" if st.audio_chunks else ""
    return (
        f"{cap.phase}: {st.grabbed} grabbed, {st.kept} kept, {st.duplicates} repeats, {st.denied} denied{audio}, "
        f"{st.published} published, {st.failed} failed, {waiting}"
    )


def progress_display(cap: Capture, console: Any):
    """A rich ``Progress`` on ``console`` (stderr) showing ``progress_line(cap)`` with a spinner and the time
    elapsed, refreshed twice a second by rich's own thread while the capture runs and while it drains (on a
    terminal; elsewhere rich prints its last state once, when it stops)."""
    from rich.progress import Progress, ProgressColumn, SpinnerColumn, TimeElapsedColumn
    from rich.text import Text

    class Counts(ProgressColumn):
        def render(self, task) -> Text:  # noqa: ANN001 (rich's Task)
            return Text(progress_line(cap))

    return Progress(SpinnerColumn(), Counts(), TimeElapsedColumn(), console=console, refresh_per_second=2)


def open_windows(report: Callable[[str], None]) -> XWindows | None:
    """An ``XWindows`` on ``$DISPLAY``, or None (reported) when there is no X display to ask."""
    if not os.environ.get("DISPLAY"):
        report("no DISPLAY: window titles and apps unknown, privacy rules by title and app cannot apply")
        return None
    try:
        return XWindows()
    except Exception as exc:  # noqa: BLE001 (Xlib raises its own DisplayError family and OSError)
        report(
            f"cannot read windows from the X server ({type(exc).__name__}: {exc}): privacy rules by title and "
            "app cannot apply"
        )
        return None


def capture_command(
    duration: Annotated[
        float | None, typer.Option(help="Stop after this many seconds (default: until Ctrl-C).")
    ] = None,
    max_frames: Annotated[int | None, typer.Option(help="Stop after this many screenshots grabbed.")] = None,
    interval: Annotated[float, typer.Option(help="Seconds between grabs while the screen changes.")] = 2.0,
    max_interval: Annotated[
        float, typer.Option(help="Longest wait on a static screen (doubled per repeat up to this).")
    ] = 30.0,
    batch: Annotated[int, typer.Option(min=1, help="Kept frames per publish.")] = 5,
    flush_seconds: Annotated[float, typer.Option(help="Publish a smaller batch after this many seconds.")] = 60.0,
    monitor: Annotated[int, typer.Option(help="mss monitor: 1 the first, 2 the second, 0 all as one image.")] = 1,
    deny_app: Annotated[
        list[str] | None, typer.Option(help="Also never capture this app (WM_CLASS substring; repeatable).")
    ] = None,
    deny_title: Annotated[
        list[str] | None,
        typer.Option(help="Also never capture a window whose title matches this regular expression (repeatable)."),
    ] = None,
    pause_file: Annotated[
        Path | None, typer.Option(help="Paused while this file exists (default: DATA_DIR/capture.pause).")
    ] = None,
    spool: Annotated[
        Path | None, typer.Option(help="Where kept frames wait to be published (default: DATA_DIR/capture-spool).")
    ] = None,
    api: Annotated[
        str | None,
        typer.Option(
            "--api", envvar="ENGRAM_API_URL", help="Publish to this engram API (default: the embedded store)."
        ),
    ] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="ENGRAM_API_KEY", help="API key.")] = None,
    user: Annotated[str | None, typer.Option(help="User id (default: ENGRAM_USER or the OS user).")] = None,
    device: Annotated[str | None, typer.Option(help="Device id (default: ENGRAM_DEVICE or the host name).")] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant, embedded (default: ENGRAM_TENANT).")] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the run's counts as one JSON object on the last line of stdout.")
    ] = False,
    spool_only: Annotated[
        bool,
        typer.Option(
            "--spool-only",
            help="Publish nothing: kept frames stay in the spool (to measure the agent alone, or to ingest later).",
        ),
    ] = False,
    microphone: Annotated[
        bool,
        typer.Option(
            "--microphone",
            help="Also record the microphone in chunks; chunks without speech are dropped (off by default).",
        ),
    ] = False,
    chunk_seconds: Annotated[
        float, typer.Option(min=1, help="Seconds of audio per published chunk, with --microphone.")
    ] = 30.0,
    mic_device: Annotated[
        str | None,
        typer.Option(help="PortAudio input device (index or name part; default: the system's default input)."),
    ] = None,
    screen: Annotated[
        bool, typer.Option("--screen/--no-screen", help="Capture the screen (--no-screen: the microphone alone).")
    ] = True,
    cpu_budget: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="CPU budget in cores, the embedded pipeline's included (default ENGRAM_CAPTURE_CPU_BUDGET; 0: none).",
        ),
    ] = None,
) -> None:
    """Capture the screen (and with --microphone the microphone) into memory: screenshots at an adaptive
    interval, repeats dropped before anything is stored, denied apps and windows never captured, audio chunks
    without speech dropped, published in batches. SIGUSR1 or the pause file pauses the screen; Ctrl-C stops
    (the pending batch is published)."""
    from rich.text import Text

    from engram.api.console import api_client as _client
    from engram.api.console import console, err
    from engram.api.console import default_device as _default_device
    from engram.api.console import default_user as _default_user
    from engram.schemas.settings import get_settings

    settings = get_settings()

    def report(line: str) -> None:
        err.print(Text(line))

    if screen:
        check_display(report)
    rules = privacy_rules(deny_app, deny_title, report)
    config = CaptureConfig(
        spool=spool or settings.data_dir / "capture-spool",
        interval=interval,
        max_interval=max_interval,
        max_frames=max_frames,
        duration=duration,
        batch=batch,
        flush_seconds=flush_seconds,
        monitor=monitor,
        pause_file=pause_file or settings.data_dir / "capture.pause",
        hash_min=settings.near_duplicate_similarity,
        ssim_min=settings.near_duplicate_ssim,
        thumb_side=settings.near_duplicate_thumb_side,
        screen=screen,
        cpu_budget=settings.capture_cpu_budget if cpu_budget is None else cpu_budget,
    )
    mic = open_microphone(config.spool, chunk_seconds, mic_device, report) if microphone else None
    user, device = user or _default_user(), device or _default_device()
    client = _client(api, api_key, user, device) if api and not spool_only else None
    sink = (
        spool_sink
        if spool_only
        else api_sink(client, report)
        if client
        else embedded_sink(config, tenant or settings.tenant, user, device, report)
    )
    windows = open_windows(report) if screen else None
    cap = Capture(config, sink, rules, windows, report=report, microphone=mic)
    previous = install_signals(cap)
    report(start_line(config, chunk_seconds if mic else None, config.spool if spool_only else api))
    stats = run_with_progress(cap, previous, windows, client, report)
    print_stats(stats, json_out, console)
    if stats.failed and not stats.published:
        raise typer.Exit(1)


def start_line(config: CaptureConfig, chunk_seconds: float | None, target: Path | str | None) -> str:
    """What a capture says as it starts: monitor and interval, the microphone's chunks (``chunk_seconds``, None: no
    microphone), where it publishes (``target``: the spool or the API; None: the embedded store), how to pause."""
    longest = max(config.max_interval, config.interval)
    screen = f"capturing monitor {config.monitor} every {config.interval:g}-{longest:g} s"
    mic = f"{' and' if config.screen else ''} the microphone in {chunk_seconds:g} s chunks" if chunk_seconds else ""
    return (
        (screen if config.screen else "capturing") + mic + f" into {target or 'the embedded store'} (pause: "
        f"SIGUSR1 or {config.pause_file}; Ctrl-C stops)"
    )


def embedded_sink(
    config: CaptureConfig, tenant: str, user: str, device: str, report: Callable[[str], None]
) -> EmbeddedSink:
    """The ``EmbeddedSink`` of a capture that runs the pipeline in its own process: the store kept open twice
    ``flush_seconds``, the user consolidated every ``consolidate_min_observations`` frames; grabs wait while two
    batches wait for the pipeline (``max_backlog``), and the pipeline embeds in batches of
    ``CAPTURE_EMBEDDING_BATCH`` unless ``ENGRAM_MODELS__EMBEDDING_BATCH_SIZE`` is set."""
    from engram.schemas.settings import get_settings

    config.max_backlog = 2 * config.batch
    os.environ.setdefault("ENGRAM_MODELS__EMBEDDING_BATCH_SIZE", str(CAPTURE_EMBEDDING_BATCH))
    return EmbeddedSink(
        tenant,
        user,
        device,
        report,
        linger=2 * config.flush_seconds,
        consolidate_every=get_settings().consolidate_min_observations,
    )


def print_stats(stats: CaptureStats, json_out: bool, console: Any) -> None:
    """The run's counts on ``console``: one line of JSON (``--json``: ``CaptureStats``'s fields and ``waiting``)
    or one line of text."""
    import json
    from dataclasses import asdict

    if json_out:
        console.out(json.dumps({**asdict(stats), "waiting": stats.waiting}), highlight=False)
        return
    audio = (
        f"; audio: {stats.audio_chunks} chunks, {stats.audio_kept} kept, {stats.audio_silent} silent dropped"
        if stats.audio_chunks or stats.audio_seconds
        else ""
    )
    console.print(
        f"{stats.grabbed} grabbed, {stats.kept} kept, {stats.duplicates} repeats dropped, "
        f"{stats.denied} denied, {stats.published} published, {stats.failed} failed{audio}; "
        f"{stats.gate_cpu_seconds:.2f} CPU s capturing, {stats.cpu_seconds:.2f} CPU s in all, "
        f"{stats.wall_seconds:.1f} s"
    )


def open_microphone(spool: Path, chunk_seconds: float, device: str | None, report: Callable[[str], None]):
    """A ``MicrophoneRecorder`` for ``--microphone`` (not started). Exits 2 with one line when the audio
    libraries are missing (sounddevice, PortAudio's libportaudio2, webrtcvad)."""
    from engram.api.capture.microphone import MicrophoneConfig, MicrophoneRecorder

    dev = int(device) if device is not None and device.isdigit() else device
    try:
        import sounddevice  # noqa: F401 (raises OSError when the PortAudio library is missing)

        return MicrophoneRecorder(
            MicrophoneConfig(spool=spool, chunk_seconds=chunk_seconds, device=dev), audio_frame, report
        )
    except (ImportError, OSError) as exc:
        report(f"error: --microphone: {exc} (pip install sounddevice webrtcvad-wheels; apt install libportaudio2)")
        raise typer.Exit(2) from exc


def configured_rules() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(applications, title patterns) never captured on any run: the built-in ones (``DEFAULT_DENY_APPS``,
    ``DEFAULT_DENY_TITLES``) and the settings' ``capture_deny_apps`` / ``capture_deny_titles``, as the web app's
    Activity page shows them."""
    from engram.schemas.settings import get_settings  # the CLI's own settings import is deferred too

    settings = get_settings()
    apps = tuple(dict.fromkeys((*DEFAULT_DENY_APPS, *settings.capture_deny_apps)))
    return apps, tuple(dict.fromkeys((*DEFAULT_DENY_TITLES, *settings.capture_deny_titles)))


def privacy_rules(
    deny_app: list[str] | None, deny_title: list[str] | None, report: Callable[[str], None]
) -> PrivacyRules:
    """The built-in rules, those of the settings (``ENGRAM_CAPTURE_DENY_APPS``/``_TITLES``) and ``--deny-app``/
    ``--deny-title``; exits 2 with one line for a bad pattern."""
    apps, titles = configured_rules()
    try:
        return PrivacyRules((*apps, *(deny_app or [])), (*titles, *(deny_title or [])))
    except re.error as exc:
        report(f"error: --deny-title: {exc}")
        raise typer.Exit(2) from exc


def run_with_progress(
    cap: Capture, previous: dict, windows: XWindows | None, client: Any, report: Callable[[str], None]
) -> CaptureStats:
    """``run_capture`` under ``progress_display`` on stderr; on a terminal the counts are refreshed in place
    instead of a line per published batch."""
    from engram.api.console import err

    cap.batch_lines = not err.is_terminal
    with progress_display(cap, err) as bar:
        bar.add_task("capture", total=None)
        return run_capture(cap, previous, windows, client, report)


def run_capture(
    cap: Capture, previous: dict, windows: XWindows | None, client: Any, report: Callable[[str], None]
) -> CaptureStats:
    """``cap.run()``, then ``restore``; a microphone that cannot be opened exits 2 with one line."""
    from engram.api.capture.microphone import MicrophoneUnavailable

    try:
        return cap.run()
    except MicrophoneUnavailable as exc:
        report(f"error: --microphone: {exc}")
        raise typer.Exit(2) from exc
    finally:
        if isinstance(cap.sink, EmbeddedSink):
            cap.sink.close()  # the store it kept open between batches
        restore(previous, windows, client)


def restore(previous: dict, windows: XWindows | None, client: Any) -> None:
    """After a run: the previous signal handlers back, the X connection and the API client closed."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    if windows is not None:
        windows.close()
    if client is not None:
        client.close()
