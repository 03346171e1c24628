"""Per-process access to the stores, built from the current settings and cached by their location.

Tasks call ``runtime()`` at the start of each run: settings are re-read from the environment, so a test or
the CLI that points ``ENGRAM_DATA_DIR`` elsewhere gets stores there. The vector store is opened lazily,
only by the tasks of Qdrant-bound queues.
"""

from __future__ import annotations

import gc
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import httpx
import redis
import structlog
import urllib3
from celery import current_task
from celery.exceptions import Ignore

from engram.schemas.errors import MediaError, StoreCorrupt
from engram.schemas.events import EventStatus, MediaEvent
from engram.schemas.settings import Settings, get_settings
from engram.workers.metrics import STAGE_ERRORS, STAGE_SECONDS
from engram.workers.models import EmbeddingCache
from engram.workers.models.embeddings import check_store_embedder
from engram.workers.stores.ledger import Ledger, open_ledger
from engram.workers.stores.objects import ObjectStore, open_object_store
from engram.workers.stores.private import secure_data_dir
from engram.workers.stores.vectors import (
    COLLECTIONS,
    StoreBusy,
    VectorStore,
    close_vector_store,
    close_vector_stores,
    embedded_store_dir,
    open_vector_store,
)

log = structlog.get_logger(__name__)

T = TypeVar("T")
R = TypeVar("R")

#: Errors worth retrying: a server that is restarting or unreachable for a moment, a store held by
#: another process. Anything else (bad input, bugs) fails at once.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionError,
    TimeoutError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    httpx.TransportError,
    urllib3.exceptions.HTTPError,
    StoreBusy,
)  # a server not answering: StoreUnavailable

#: Errors of the store itself, not of the item at hand: a file of the embedded store damaged (its shards, its
#: ledger: ``StoreCorrupt``, one line naming the file). Every other item would meet it too, and it will not pass by
#: itself: it stops the run (raised through ``stage``, ``each_alone``, ``run_together``), no event is marked
#: failed for it, and the events it stopped stay unfinished for a run after the store is restored (``engram
#: ingest`` resumes them).
STORE_DOWN_ERRORS: tuple[type[BaseException], ...] = (StoreCorrupt,)

#: Errors a stage raises to its caller instead of failing its item: ``TRANSIENT_ERRORS`` (retried) and
#: ``STORE_DOWN_ERRORS`` (the run stops).
RAISED_ERRORS: tuple[type[BaseException], ...] = TRANSIENT_ERRORS + STORE_DOWN_ERRORS

#: Options shared by the pipeline's stage tasks: pydantic arguments, late acks (a killed worker's task is
#: redelivered), and retries with exponential backoff and jitter on transient errors only.
STAGE_TASK_OPTIONS = dict(
    pydantic=True,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=TRANSIENT_ERRORS,
    retry_backoff=2,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=5,
)

#: Options of a batched consumer (``workers.tasks.BATCHED``; its flush settings are there): late acks (the
#: buffered messages are acknowledged when the batch returns, so a worker killed mid-batch has them redelivered);
#: errors are the task's own to handle (``workers.batching.consume``: each bad item alone, transient errors
#: published again with backoff), as celery-batches acknowledges a batch whatever it raises.
BATCH_TASK_OPTIONS = dict(acks_late=True, reject_on_worker_lost=True)  # workers.app.task adds each one's flush settings

#: Options of each kind of task (``workers.app.task``): a pipeline stage; a batched consumer of a stage (its
#: ``base`` is set by ``workers.app.task``); a request whose caller awaits the answer (search, ask, memory and
#: entity management: the result kept); a periodic sweep started by beat.
TASK_OPTIONS: dict[str, dict] = {
    "stage": STAGE_TASK_OPTIONS,
    "batch": BATCH_TASK_OPTIONS,
    "request": dict(ignore_result=False, pydantic=True, acks_late=True),
    "beat": dict(ignore_result=False, acks_late=True),
}


@dataclass
class Runtime:
    """Stores of one configuration, shared by the tasks of one process."""

    settings: Settings
    objects: ObjectStore
    ledger: Ledger
    embedding_cache: EmbeddingCache
    _vectors: VectorStore | None = field(default=None, repr=False)

    @property
    def vectors(self) -> VectorStore:
        """The vector store (opened on first use). Raises vectorstore.StoreBusy if another process holds the
        embedded store, EmbedderMismatch if another text embedder made its vectors (``check_store_embedder``; the
        embedded store only: a Qdrant server's collections are not in the data dir)."""
        if self._vectors is None:
            if not self.settings.qdrant_url:  # one vector space per store
                check_store_embedder(
                    self.settings.data_dir, self.settings.models.embedding_model, _holds_vectors(self.settings)
                )
            self._vectors = open_vector_store(self.settings)
        return self._vectors


_runtimes: dict[tuple, Runtime] = {}
_lock = threading.Lock()


#: How often a lease that lingers looks for another process waiting for the store (``VectorStore.wanted``): the
#: longest such a process waits for an idle holder (a glob of the store's folder each time, ~20 us).
HANDOFF_POLL_S = 0.2


def _holds_vectors(settings: Settings) -> bool:
    """Whether the data dir holds an embedded store already (this engram's or an older one's folder, not empty)."""
    return any(d.is_dir() and any(d.iterdir()) for d in (embedded_store_dir(settings), settings.data_dir / "qdrant"))


def _holds_a_store(settings: Settings) -> bool:
    """Whether this process opens the embedded store itself (no broker's workers, no Qdrant server)."""
    return not (settings.broker_url or settings.qdrant_url)


class StoreLease:
    """This process's hold on the embedded store for a long-running command (``engram mcp``, ``watch``,
    ``capture``) that must leave the store to other processes between its units of work.

    ``session()`` takes the store's file lock (waiting up to ``ENGRAM_STORE_WAIT_SECONDS`` while another process
    holds it; ``vectorstore.StoreBusy`` after) and yields the runtime. After the last session the store stays open
    (its shards loaded: 0.3-4 s to open from 10 k to 1 M points) for ``linger`` seconds, or until another process
    asks for it (``VectorStore.wanted``: a waiting process's request file, looked for every ``HANDOFF_POLL_S``),
    whichever comes first; then the runtime and its stores are closed (``reset_runtimes``), which releases the
    lock. So an agent's calls minutes apart find the store open, and another engram command waits at most
    ``HANDOFF_POLL_S`` more than the call in progress. ``linger=0`` releases at the end of each session; a session
    that raises releases at once. With a broker or a Qdrant server nothing is held. Sessions are serialised by an
    internal lock: one unit of work at a time per lease."""

    def __init__(self, linger: float = 0.0) -> None:
        self.linger = linger
        self._lock = threading.Lock()
        self._held: VectorStore | None = None
        self._stop_watch: threading.Event | None = None  # set to end the current lingering's watcher thread

    @contextmanager
    def session(self, wait: bool = True) -> Iterator[Runtime]:
        """Hold the store for one unit of work; yields the Runtime of the current settings. ``wait=False``: raise
        StoreBusy at once when another process holds the store, without asking it to let go."""
        settings = get_settings()
        if not _holds_a_store(settings):
            yield runtime(settings)
            return
        with self._lock:
            self._stop_lingering()
            rt = runtime(settings)
            try:
                if self._held is None:
                    rt.vectors.hold(wait=wait)
                    self._held = rt.vectors
                yield rt
            except BaseException:
                if self._held is None and rt._vectors is not None:
                    release_store(rt._vectors)  # opened, never held: closed all the same (its lock released)
                self._release()
                raise
            if self.linger <= 0:
                self._release()
            else:
                self._linger_until(time.monotonic() + self.linger)

    @property
    def held(self) -> bool:
        """Whether this lease holds the store now (between sessions: lingering)."""
        return self._held is not None

    def open_existing(self) -> int | None:
        """Open the embedded store now, when it exists and no other process holds it, and load each of its
        collections (``VectorStore.count``), then linger as after a session: a long-running command's first unit
        of work then finds the store open (0.3-4 s from 10 k to 1 M points). A store that does not exist is not
        made, and one that another process holds is left to it, neither waited for nor asked for. Returns the
        points loaded, or None when nothing was opened. Raises what opening raises (``StoreCorrupt``...)."""
        settings = get_settings()
        if not _holds_a_store(settings) or not embedded_store_dir(settings).is_dir():
            return None
        try:
            with self.session(wait=False) as rt:
                return sum(rt.vectors.count(c) for c in COLLECTIONS if rt.vectors.has_collection(c))
        except StoreBusy:
            return None

    def close(self) -> None:
        """Release the store now (the command is stopping)."""
        with self._lock:
            self._stop_lingering()
            self._release()

    def _stop_lingering(self) -> None:
        """End the current lingering's watcher (it exits at its next wake-up). Called with ``_lock`` held."""
        if self._stop_watch is not None:
            self._stop_watch.set()
            self._stop_watch = None

    def _linger_until(self, deadline: float) -> None:
        """Start one watcher thread for this lingering: it looks for a waiting process every ``HANDOFF_POLL_S`` and
        releases the store when one asks or at ``deadline``. Called with ``_lock`` held."""
        stop = self._stop_watch = threading.Event()
        threading.Thread(target=self._watch, args=(stop, deadline), name="engram-store-lease", daemon=True).start()

    def _watch(self, stop: threading.Event, deadline: float) -> None:
        while not stop.wait(min(HANDOFF_POLL_S, max(0.0, deadline - time.monotonic()))):
            with self._lock:
                if stop.is_set() or self._held is None:
                    return  # a session began, or the lease closed, while this one waited for the lock
                try:
                    wanted = self._held.wanted()
                except OSError as exc:  # the folder unreadable: hold to the deadline, as before there were requests
                    log.warning("cannot look for processes waiting for the store", error=str(exc)[:200])
                    wanted = False
                if wanted or time.monotonic() >= deadline:
                    self._stop_watch = None
                    self._release()
                    return

    def _release(self) -> None:
        """Close the held store and forget the runtimes that use it (the file lock released); the process's other
        runtimes and stores (another data dir's) stay open. Called with ``_lock`` held."""
        if self._held is not None:
            release_store(self._held)
        self._held = None


def store_session() -> AbstractContextManager[Runtime]:
    """Hold the embedded store for one unit of work and release it after (``StoreLease(linger=0).session()``)."""
    return StoreLease().session()


def release_store(store: VectorStore) -> None:
    """Close ``store`` (flushed, its file lock released) and forget every cached Runtime that uses it, so the next
    ``runtime()`` of its settings opens it again; Runtimes of other stores are left as they are."""
    with _lock:
        for key, rt in list(_runtimes.items()):
            if rt._vectors is store:
                del _runtimes[key]
    close_vector_store(store)


def reset_runtimes() -> None:
    """Forget every cached Runtime and close vector stores (tests; a CLI switching data dirs)."""
    with _lock:
        _runtimes.clear()
    close_vector_stores()


def runtime(settings: Settings | None = None) -> Runtime:
    """The Runtime for ``settings`` (default: read from the environment now). Building one makes its data dir
    owner-only (``stores.private.secure_data_dir``: this process's umask 0o077, a looser existing dir tightened with
    a warning on stderr)."""
    settings = settings or get_settings()
    key = (
        str(settings.data_dir),
        settings.s3_endpoint,
        settings.s3_bucket,
        settings.qdrant_url,
        settings.redis_url,
        settings.broker_url,
    )
    with _lock:
        rt = _runtimes.get(key)
        if rt is None:
            secure_data_dir(settings.data_dir)  # owner-only from here on (the umask), an older looser one tightened
            rt = _runtimes[key] = Runtime(
                settings=settings,
                objects=open_object_store(settings),
                ledger=open_ledger(settings),
                embedding_cache=EmbeddingCache(settings.data_dir / "cache" / "embeddings.sqlite"),
            )
        else:
            rt.settings = settings
        return rt


#: Python's collector thresholds inside ``bulk_work``: a young collection every 100,000 container allocations net of
#: those freed, instead of 700. An ingest's objects are short-lived and freed by reference counting (a round's
#: vectors included: ``workers.pipeline`` empties them once stored), so what is still young when a collection runs is
#: what the work keeps (memos, results: ~6,000 containers after 788 LoCoMo turns) or a cycle's garbage, which this
#: bounds. Measured on that ingest: the collector's time 0.045 s (a collection every 20,000) → 0.002 s.
BULK_GC_THRESHOLDS = (100_000, 20, 50)


#: A worker process's collector thresholds (``tune_collector_for_throughput``): young collections as rare as in
#: ``bulk_work``, and the older generations at Python's default pace after them (a full collection every 100 young
#: ones), since a worker lives for days and what dies after it has grown old must still be found.
WORKER_GC_THRESHOLDS = (BULK_GC_THRESHOLDS[0], 10, 10)


def tune_collector_for_throughput() -> None:
    """For a worker process, from its start until it exits: what it holds now (imports, the app, settings) is frozen
    out of every collection (``gc.freeze``) and young collections run every ``WORKER_GC_THRESHOLDS[0]`` allocations,
    as ``bulk_work`` does for one ingest. A worker's tasks are that work all day: with Python's default (a young
    collection every 700 allocations) the store worker spent ~0.45 s of 300 chat events' ~0.5 s of ``store_batched``
    in the collector, each collection traversing the batch's vectors (lists of floats, alive while it is stored) again;
    none ran with these settings (``bench/distributed.py``, 2026-11-28). Garbage in reference cycles (Celery's
    in-process results among them) waits at most that many allocations."""
    gc.freeze()
    gc.set_threshold(*WORKER_GC_THRESHOLDS)


@contextmanager
def bulk_work() -> Iterator[None]:
    """Run a long allocation-heavy unit of work (an ingest) with fewer, larger garbage collections: what the process
    holds before it (imports, models, the runtime: it lives as long as the process) is frozen out of every collection
    (``gc.freeze``), and young collections run every ``BULK_GC_THRESHOLDS[0]`` allocations; both are undone after.
    On LoCoMo chat ingest this took the collector's time from 0.04-0.18 s to ~0.002 s per 788 messages (a full
    collection scanned the whole heap of imports and models). The technique is Instagram's ("Dismissing Python
    Garbage Collection at Instagram", 2017) and the Python docs' advice for ``gc.freeze``."""
    before, ours = gc.get_threshold(), gc.get_freeze_count() == 0  # a process that froze its own is left to it
    if ours:
        gc.freeze()
    gc.set_threshold(*BULK_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        if ours:
            gc.unfreeze()


def each_alone(items: list[T], run: Callable[[T], R]) -> list[R]:
    """``run`` of each of ``items`` in order (a stage over a batch, ``workers.pipeline``), leaving out an item whose
    ``stage`` failed: ``stage`` has marked its event failed with the stage and reason (or raised Ignore for bad
    input), so the item fails alone. A transient error (``TRANSIENT_ERRORS``) is raised for the caller's retry, a
    store that cannot be used (``STORE_DOWN_ERRORS``) to stop the run."""
    out: list[R] = []
    for item in items:
        try:
            out.append(run(item))
        except RAISED_ERRORS:
            raise
        except Exception:  # noqa: BLE001 (stage marked the event failed with its reason; Ignore for bad input)
            continue
    return out


@contextmanager
def stage(rt: Runtime, event: MediaEvent | uuid.UUID, name: str, final: bool | None = None) -> Iterator[None]:
    """Run one stage of one event: bad input (MediaError) marks the event failed with the stage and reason
    and stops its chain without retrying; a transient error is re-raised for the caller's retry policy and
    marks the event failed only when no retry is left (``final``: this try is the last, as the embedded runner
    ``workers.pipeline`` says; None: asks the Celery task running it, the last when none runs); a store that cannot
    be used (``STORE_DOWN_ERRORS``: not this event's fault) is re-raised with the event left unfinished; any other
    error marks it failed and is re-raised.

    The stage's wall time goes to ``engram_stage_duration_seconds{stage}``, its errors to
    ``engram_stage_errors_total{stage, error}``; log lines inside carry the event id, the stage and the task
    id, and the tenant when ``event`` is the MediaEvent (structlog contextvars)."""
    event_id = event.event_id if isinstance(event, MediaEvent) else event
    context = {"tenant": event.tenant_id} if isinstance(event, MediaEvent) else {}
    task_id = getattr(getattr(current_task, "request", None), "id", None)
    with (
        structlog.contextvars.bound_contextvars(event_id=str(event_id), stage=name, task_id=task_id, **context),
        STAGE_SECONDS.labels(stage=name).time(),
    ):
        try:
            yield
        except Ignore:
            raise
        except MediaError as exc:
            STAGE_ERRORS.labels(stage=name, error="bad_input").inc()
            rt.ledger.mark(event_id, EventStatus.failed, stage=name, reason=str(exc))
            log.warning("event failed", reason=str(exc))
            raise Ignore() from exc  # no retry: the input will not change
        except TRANSIENT_ERRORS as exc:
            STAGE_ERRORS.labels(stage=name, error="transient").inc()
            if final is None:
                task = current_task
                final = task is None or task.request.retries >= (task.max_retries or 0)
            if final:
                reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
                rt.ledger.mark(event_id, EventStatus.failed, stage=name, reason=f"{reason} (retries exhausted)")
                log.error("event failed", reason=reason)
            raise  # retried by the task's autoretry policy (backoff), or by workers.pipeline
        except STORE_DOWN_ERRORS:
            STAGE_ERRORS.labels(stage=name, error="store").inc()
            raise  # the store, not this event: left unfinished for a run once the store is restored
        except Exception as exc:
            STAGE_ERRORS.labels(stage=name, error="error").inc()
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            rt.ledger.mark(event_id, EventStatus.failed, stage=name, reason=reason)
            log.error("event failed", reason=reason)
            raise


#: Starts of one piece of work (``deaths_guard``) that ended with their worker process dead before the next start
#: fails the work instead of running it again (the distributed mode).
MAX_UNFINISHED_STARTS = 3


def unfinished_limit(settings: Settings) -> int:
    """How many starts of one piece of work may end with their process dead (``deaths_guard``):
    ``MAX_UNFINISHED_STARTS`` in the distributed mode (a pool process died; its worker goes on). On the embedded
    default the process that died is ``engram ingest`` itself, whose next run resumes the events it left
    (``api.local.resume_interrupted``) and gives each up after ``max_redeliveries`` resumes: one less than that
    (at least 1), so the input that killed it fails before the files of the same run are given up with it."""
    return max(1, settings.max_redeliveries - 1) if settings.embedded else MAX_UNFINISHED_STARTS


@contextmanager
def deaths_guard(rt: Runtime, event_id: uuid.UUID, work: str) -> Iterator[None]:
    """Run ``work`` of an event (e.g. ``perceive:0``) unless ``unfinished_limit`` earlier starts of it never ended:
    then raise MediaError (inside ``stage``: the event fails with that reason and the message is acknowledged).

    A task whose worker process dies (a decoder or a model crashing on the input, the kernel's out-of-memory
    killer) is not acknowledged (late acks) and Celery puts it back (``task_reject_on_worker_lost``), so the next
    process takes it and dies the same way, for ever (Celery's documentation warns of this loop); on the embedded
    default each run of ``engram ingest`` would resume it and die again. The ledger counts each start that has not
    ended (``Ledger.begin_work``/``end_work``, which outlive the process; an exception or Ctrl-C ends the work),
    so the input that kills its process is tried that many times, then fails with the reason, and its neighbours
    go on. A transient error ending the count is logged, not raised: the count then stays one higher."""
    limit = unfinished_limit(rt.settings)
    starts = rt.ledger.begin_work(event_id, work)
    try:
        if starts > limit:
            raise MediaError(
                f"{work.replace(':', ' of segment ')} was started {starts - 1} times before and never "
                "finished: the process running it died each time (a crash in a decoder or a model on "
                "this input, or more memory than the process has); not tried again"
            )
        yield
    finally:
        try:
            rt.ledger.end_work(event_id, work)
        except TRANSIENT_ERRORS as exc:
            log.warning("unfinished work not cleared", work=work, error=f"{type(exc).__name__}: {exc}"[:200])


def run_together(
    rt: Runtime,
    name: str,
    items: list[T],
    run: Callable[[list[T]], list[R]],
    event_of: Callable[[T], MediaEvent],
    final: bool | None = None,
) -> list[R]:
    """Run stage ``name`` over ``items`` (segments of one or many events) at once: ``run(items)``, one model call
    or one store request for all, returning one output per item. When that raises, each item runs alone,
    ``run([item])`` inside its own ``stage``, so a bad item fails only its own event (marked failed with the stage
    and its reason) and its neighbours go on (issue 15: batching never lets one bad item fail its neighbours).

    Returns the outputs of the items that succeeded, in order. A transient error (``TRANSIENT_ERRORS``) is
    re-raised, joint or alone, for the caller's retry policy: every stage is idempotent, so the batch is run
    again whole (``final``: whether this is the last try, as for ``stage``); so is a store that cannot be used
    (``STORE_DOWN_ERRORS``), which stops the run with no item failed. The joint run's wall time goes to
    ``engram_stage_duration_seconds{stage}`` once."""
    with structlog.contextvars.bound_contextvars(stage=name, segments=len(items)):
        try:
            with STAGE_SECONDS.labels(stage=name).time():
                out = run(items)
            if len(out) != len(items):
                raise AssertionError(f"{name}: {len(out)} outputs for {len(items)} items")
            return out
        except RAISED_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 (each item alone meets its own error, in its own stage)
            log.warning("batch failed; each item runs alone", error=f"{type(exc).__name__}: {exc}"[:300])
    kept: list[R] = []
    for item in items:
        try:
            with stage(rt, event_of(item), name, final):
                kept.extend(run([item]))
        except RAISED_ERRORS:
            raise
        except Exception:  # noqa: BLE001 (stage marked its event failed with its reason; Ignore for bad input)
            continue
    return kept
