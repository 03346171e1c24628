"""Worker and beat processes of the distributed mode: which queues a worker serves, and the ``celery``
command lines that ``engram worker`` and ``engram beat`` run.

The rule of DESIGN.md for Qdrant-bound queues (``store``, ``consolidate``, ``query``) is
enforced here: with a Qdrant server (``ENGRAM_QDRANT_URL``) any number of workers may serve them; with
the embedded store (Qdrant Edge) one process may open the store, so exactly one worker serves all four, with
``--pool solo`` and concurrency 1. Nothing here opens a store or a broker connection.

``UnrecoverableWatch`` and ``restart_worker`` keep a worker alive through Celery's "Unrecoverable error" (the
worker process would exit): ``engram worker`` starts itself again, with a backoff.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import structlog

from engram.schemas.errors import ConfigError
from engram.schemas.settings import Settings
from engram.workers.tasks import BATCH_FLUSH_EVERY, QDRANT_BOUND, QUEUE_OF, Queue

log = structlog.get_logger(__name__)

INGEST, PERCEIVE_CPU, PERCEIVE_GPU = Queue.ingest, Queue.perceive_cpu, Queue.perceive_gpu
#: every pipeline queue (beat's ``maintenance`` is added to each worker by ``worker_argv``)
ALL_QUEUES = tuple(q for q in Queue if q is not Queue.maintenance)
#: beat's sweep for lost work (``workers.ingest.redeliver_stalled``): every worker serves it besides its own
#: queues, so no backlog of the pipeline's queues can hold it back until it expires
MAINTENANCE = Queue.maintenance


class Role(StrEnum):
    """Shortcuts for the queue sets of DESIGN.md's worker kinds."""

    cpu = "cpu"  # ingest and perception on CPU; serves the GPU queue too where there is no GPU worker
    gpu = "gpu"  # speech-to-text, captioning, text embedding
    store = "store"  # the Qdrant-bound queues
    all = "all"  # everything in one process (a single-machine cluster)


ROLE_QUEUES: dict[Role, tuple[str, ...]] = {
    Role.cpu: (INGEST, PERCEIVE_CPU, PERCEIVE_GPU),
    Role.gpu: (PERCEIVE_GPU,),
    Role.store: QDRANT_BOUND,
    Role.all: ALL_QUEUES,
}

POOLS = ("prefork", "solo", "threads")


class WorkerConfigError(ConfigError):
    """A worker command line that engram refuses to start; the message says why and what to do."""


@dataclass(frozen=True)
class WorkerPlan:
    """What one worker process serves and how: queues in DESIGN.md order, Celery pool and concurrency
    (None: Celery's default, the number of CPUs)."""

    queues: tuple[str, ...]
    pool: str
    concurrency: int | None
    role: str


def plan_worker(
    settings: Settings,
    queues: str | None = None,
    role: Role | str | None = None,
    pool: str | None = None,
    concurrency: int | None = None,
) -> WorkerPlan:
    """Check a worker's options against the settings and fill in defaults. Raises WorkerConfigError.

    ``queues`` is a comma-separated list of queue names, ``role`` a shortcut for one (give one or
    both: they are joined). With the embedded store a worker serving any Qdrant-bound queue must serve
    all four, and defaults to (and must use) ``--pool solo`` with concurrency 1. Other workers default
    to the prefork pool.
    """
    if not settings.broker_url:
        raise WorkerConfigError(
            "ENGRAM_BROKER_URL is not set: on the embedded default there are no workers (tasks run inside "
            "`engram ingest`). Point it at the cluster's Redis, e.g. ENGRAM_BROKER_URL=redis://localhost:6379/0."
        )
    names: list[str] = []
    if role is not None:
        try:
            names.extend(ROLE_QUEUES[Role(role)])
        except ValueError as exc:
            raise WorkerConfigError(f"unknown role {role!r}; choose one of {', '.join(r.value for r in Role)}") from exc
    for name in (queues or "").split(","):
        name = name.strip()
        if not name:
            continue
        if name not in ALL_QUEUES:
            raise WorkerConfigError(f"unknown queue {name!r}; queues are {', '.join(ALL_QUEUES)}")
        names.append(name)
    if not names:
        raise WorkerConfigError(
            f"say which queues to serve: --queues {','.join(ALL_QUEUES[:3])} or "
            f"--role {'|'.join(r.value for r in Role)}"
        )
    served = tuple(q for q in ALL_QUEUES if q in names)
    if pool is not None and pool not in POOLS:
        raise WorkerConfigError(f"unknown pool {pool!r}; choose one of {', '.join(POOLS)}")
    if concurrency is not None and concurrency < 1:
        raise WorkerConfigError("--concurrency must be at least 1")

    bound = [q for q in served if q in QDRANT_BOUND]
    if bound and not settings.qdrant_url:
        missing = [q for q in QDRANT_BOUND if q not in served]
        rule = (
            "with the embedded store (ENGRAM_QDRANT_URL unset) only one process can open the vector "
            f"store, so exactly one worker serves all of {', '.join(QDRANT_BOUND)}, with --pool solo and "
            "concurrency 1 (run `engram worker --role store`); set ENGRAM_QDRANT_URL to a Qdrant server "
            "to run more."
        )
        if missing:
            raise WorkerConfigError(f"this worker serves {', '.join(bound)} but not {', '.join(missing)}: {rule}")
        if pool not in (None, "solo"):
            raise WorkerConfigError(f"--pool {pool} is not allowed here: {rule}")
        if concurrency not in (None, 1):
            raise WorkerConfigError(f"--concurrency {concurrency} is not allowed here: {rule}")
        pool, concurrency = "solo", 1
    pool = pool or "prefork"
    if pool == "solo" and concurrency not in (None, 1):
        raise WorkerConfigError("--pool solo runs one task at a time: use --concurrency 1 or another pool")
    label = Role(role).value if role is not None else "worker"
    return WorkerPlan(queues=served, pool=pool, concurrency=1 if pool == "solo" else concurrency, role=label)


def worker_argv(
    plan: WorkerPlan, loglevel: str = "INFO", hostname: str | None = None, events: bool = False
) -> list[str]:
    """The ``celery worker`` arguments for ``plan`` (for ``app.worker_main``). The default node name,
    ``<role>-<pid>@<host>``, keeps several workers on one host apart. Every worker also serves the
    ``maintenance`` queue (beat's sweeps).

    Workers run without gossip and mingle, and without heartbeats unless ``events`` (task events for Flower,
    which also reads the heartbeats): engram uses none of them (no revokes to sync at start, no leader election;
    the API's health asks the workers through remote control, which stays on). With gossip, every worker receives
    every other worker's heartbeat (every 2 s) on its consumer: broker traffic and CPU that grow with the square of
    the workers (celery/celery#2566 reports it for large deployments)."""
    argv = [
        "worker",
        "--queues",
        ",".join((*plan.queues, MAINTENANCE)),
        "--pool",
        plan.pool,
        "--loglevel",
        loglevel.upper(),
        "--hostname",
        hostname or f"{plan.role}-{os.getpid()}@%h",
        "--without-gossip",
        "--without-mingle",
    ]
    if plan.concurrency is not None:
        argv += ["--concurrency", str(plan.concurrency)]
    multiplier = prefetch_multiplier(plan)
    if multiplier > 1:
        argv += ["--prefetch-multiplier", str(multiplier)]
    if events:
        argv.append("--task-events")
    else:
        argv.append("--without-heartbeat")
    return argv


def pool_processes(plan: WorkerPlan) -> int:
    """The processes or threads that run ``plan``'s tasks at once: its concurrency, else Celery's default of one per
    CPU (``os.cpu_count()``)."""
    return plan.concurrency or os.cpu_count() or 1


def prefetch_multiplier(plan: WorkerPlan) -> int:
    """Celery's prefetch multiplier for ``plan``: 1 (the app's ``worker_prefetch_multiplier``: a long OCR task
    holds back no other message) unless the worker serves the queue of a batched consumer (``embed_batched`` on
    ``perceive.gpu``, ``store_batched`` on ``store``); then enough that ``multiplier × concurrency`` messages
    fill the largest batch it serves (``workers.tasks.BATCH_FLUSH_EVERY``), as celery-batches needs (with
    fewer, a batch runs at the end of its ``BATCH_FLUSH_SECONDS`` window). A prefork worker's default
    concurrency is the CPU count."""
    concurrency = pool_processes(plan)
    fill = [math.ceil(n / concurrency) for t, n in BATCH_FLUSH_EVERY.items() if QUEUE_OF[t] in plan.queues]
    return max([1, *fill])


def pool_model_environment(plan: WorkerPlan, settings: Settings) -> dict[str, str]:
    """Variables for the pool processes of a worker started by ``plan``: with the prefork pool, when neither
    ``models.embedding_threads`` nor ``models.cpu_threads`` is set, ``ENGRAM_MODELS__EMBEDDING_THREADS`` = the usable
    cores divided among the pool processes (``pool_processes``), at least 1.
    Each process's text embedder would otherwise run a batch per core at once: on 8 cores, 8 processes of 8 threads
    (four processes encoding the same texts on 2 cores took 5-10 % more CPU with 2 threads each than with 1,
    2026-11-27). OCR, ASR and speaker embeddings already default to one thread. Empty for a solo or threads pool (one
    process: the embedder takes every core) and when either setting is given."""
    if plan.pool != "prefork" or settings.models.embedding_threads or settings.models.cpu_threads:
        return {}
    from engram.workers.models.embeddings import usable_cores  # the worker's stack: loaded when it starts anyway

    return {"ENGRAM_MODELS__EMBEDDING_THREADS": str(max(1, usable_cores() // pool_processes(plan)))}


#: Queues whose tasks embed text: the embed stage's batches (``perceive.gpu``), consolidation's memories and search
#: queries. A worker that serves one loads the text embedder as its pool processes start (``warm_up_models``).
TEXT_EMBEDDING_QUEUES = (PERCEIVE_GPU, Queue.consolidate.value, Queue.query.value)


def warm_up_models(plan: WorkerPlan) -> Any:
    """Have each process that runs this worker's tasks load the text embedder when it starts, on a thread of its
    own, instead of in its first task: the first event a fresh worker takes, or a search after a restart, does not
    wait for the model (~0.6 s CPU to load MiniLM on 2 cores, and the imports before it), and a worker that has
    had no task yet costs the same as one that has. Connects Celery's ``worker_process_init`` (prefork: each pool
    child loads its own; the parent, which forks them, loads nothing) or ``worker_ready`` (solo and threads pools:
    tasks run in the worker's own process) to ``start_warm_up`` and returns that signal; returns None, connecting
    nothing, for a worker whose queues embed nothing (``TEXT_EMBEDDING_QUEUES``). A model that cannot load is
    logged here and raised by the first task that needs it, with its stage. A worker that serves searches (the
    ``query`` queue) also reads a time expression once as it starts (``start_time_parser_warm_up``), so the first
    search that names a time does not wait for ``dateparser``'s imports and first use either (~0.5-0.8 s)."""
    if not set(plan.queues) & set(TEXT_EMBEDDING_QUEUES):
        return None
    from celery.signals import worker_process_init, worker_ready  # the worker's own import; this module stays light

    signal = worker_process_init if plan.pool == "prefork" else worker_ready
    signal.connect(start_warm_up, weak=False)
    if Queue.query.value in plan.queues:
        signal.connect(start_time_parser_warm_up, weak=False)
    return signal


def start_warm_up(**_) -> None:
    """The receiver ``warm_up_models`` connects: ``load_text_embedder`` on a daemon thread, so the pool process is
    ready for tasks at once (a task that comes first waits for the same load)."""
    threading.Thread(target=load_text_embedder, name="engram-warm-up", daemon=True).start()


def start_time_parser_warm_up(**_) -> None:
    """The receiver ``warm_up_models`` connects for a worker that serves searches: ``load_time_parser`` on a daemon
    thread of its own."""
    threading.Thread(target=load_time_parser, name="engram-warm-up-time", daemon=True).start()


def warm_up_for_searches() -> None:
    """In a long-lived process that runs searches itself (the embedded default's ``engram mcp``, ``engram demo``),
    load the text embedder and the time-expression parser now, each on a daemon thread of its own
    (``start_warm_up``, ``start_time_parser_warm_up``), so an agent's first tool call or the demo's first search
    naming a time does not wait for them (~2 s for both on 2 cores). Returns at once; a failure is logged by the
    thread and met again, with its reason, by the first search."""
    start_warm_up()
    start_time_parser_warm_up()


def load_time_parser() -> None:
    """Read one time expression (``workers.text.timeexpr.warm_up``) so ``dateparser`` is imported and has compiled
    its patterns before the first search that names a time, and log how long it took; an error is logged, not
    raised (that search will meet it and say so)."""
    from engram.workers.text.timeexpr import warm_up  # the worker's stack, on the warm-up thread

    try:
        seconds = warm_up()
    except Exception as exc:  # noqa: BLE001 (a warm-up never stops a worker; the first search meets the error)
        log.warning("time-expression parser not warmed up", reason=f"{type(exc).__name__}: {exc}"[:300])
        return
    log.info("time-expression parser loaded", seconds=round(seconds, 2), pid=os.getpid())


def load_text_embedder() -> None:
    """Load this process's text embedder (``get_model("embedding")``) if it is not loaded, and log how long it took;
    a model that cannot load is logged, not raised."""
    from engram.schemas.settings import get_settings  # this module stays light: the worker's stack is loaded here
    from engram.workers.models import ModelUnavailable, get_model  # on the warm-up thread, not at `engram` start

    t0 = time.perf_counter()
    try:
        model = get_model("embedding", get_settings())
        if model.loaded:
            return
        model.load()
    except (ModelUnavailable, OSError, RuntimeError) as exc:
        log.warning("text embedder not loaded at start; the first task that embeds will say why", reason=str(exc)[:300])
        return
    log.info(
        "text embedder loaded",
        seconds=round(time.perf_counter() - t0, 2),
        pid=os.getpid(),
        threads=getattr(model.session, "runs", None),
    )  # batches at once (the ONNX runtime's run threads)


def beat_schedule_path(settings: Settings) -> Path:
    """Where beat keeps its schedule state: ``$ENGRAM_DATA_DIR/beat/celerybeat-schedule``."""
    return settings.data_dir / "beat" / "celerybeat-schedule"


def beat_argv(settings: Settings, loglevel: str = "INFO") -> list[str]:
    """The ``celery beat`` arguments (for ``app.start``). Raises WorkerConfigError without a broker."""
    if not settings.broker_url:
        raise WorkerConfigError(
            "ENGRAM_BROKER_URL is not set: beat schedules consolidation for workers of the distributed mode; "
            "on the embedded default run `engram consolidate` instead."
        )
    schedule = beat_schedule_path(settings)
    schedule.parent.mkdir(parents=True, exist_ok=True)
    return ["beat", "--schedule", str(schedule), "--loglevel", loglevel.upper()]


#: How many times in a row ``engram worker`` has started itself again (``restart_worker``), passed on to the new
#: process in the environment.
RESTARTS_ENV = "ENGRAM_WORKER_RESTARTS"
#: A worker that ran this long before it stopped counts as healthy: its next restart waits the shortest delay.
HEALTHY_RUN_SECONDS = 60.0
MAX_RESTART_DELAY_SECONDS = 60.0


class UnrecoverableWatch(logging.Handler):
    """Watches one run of a Celery worker for the way it stops without being asked to: Celery logs "Unrecoverable
    error" (CRITICAL, logger ``celery.worker``) when a bootstep raises, then the worker exits. Seen here: when the
    Redis broker restarts while a worker holds prefetched messages (a batched consumer's buffer), kombu 5.7's Redis
    transport restores them on a channel whose connection is already gone and raises AttributeError (kombu
    issues #582, #970: the same failure in earlier releases). A shutdown asked for by a signal (SIGTERM, SIGINT,
    SIGQUIT: Celery's ``worker_shutting_down``) or by ``celery control shutdown`` (no unrecoverable error) is
    not one. Use as a context manager around the worker's run; ``restart`` says whether to start it again."""

    def __init__(self) -> None:
        super().__init__(logging.CRITICAL)
        self.error: str | None = None
        self.shutdown_asked = False
        self.started = time.monotonic()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Unrecoverable error"):
            self.error = record.getMessage()[:300]

    def _asked(self, **_) -> None:
        self.shutdown_asked = True

    def __enter__(self) -> UnrecoverableWatch:
        from celery.signals import worker_shutting_down  # the worker's own import; this module stays light

        logging.getLogger("celery.worker").addHandler(self)
        worker_shutting_down.connect(self._asked, weak=False)
        return self

    def __exit__(self, *exc) -> None:
        from celery.signals import worker_shutting_down

        logging.getLogger("celery.worker").removeHandler(self)
        worker_shutting_down.disconnect(self._asked)

    @property
    def restart(self) -> bool:
        """The worker stopped on an unrecoverable error that no shutdown request came before."""
        return self.error is not None and not self.shutdown_asked


def restart_delay(restarts: int, ran_seconds: float) -> float:
    """Seconds to wait before starting a worker again: 1 s after a run of ``HEALTHY_RUN_SECONDS`` or more, else
    doubling with each restart in a row (``restarts``, 0 for the first) up to ``MAX_RESTART_DELAY_SECONDS``, so a
    worker that cannot stay up (a broker that stays down) does not spin."""
    if ran_seconds >= HEALTHY_RUN_SECONDS:
        return 1.0
    return min(MAX_RESTART_DELAY_SECONDS, float(2 ** min(restarts, 16)))


def restart_worker(watch: UnrecoverableWatch) -> None:
    """Start this ``engram worker`` again in place (``os.execv`` of the same command line: the same process id,
    so the same default node name; files and the store's lock are closed by the exec) after ``restart_delay``.
    Messages the stopped worker had taken and not acknowledged are redelivered by the broker after its
    visibility timeout (late acks). Does not return."""
    ran = time.monotonic() - watch.started
    restarts = 0 if ran >= HEALTHY_RUN_SECONDS else int(os.environ.get(RESTARTS_ENV, "0") or 0)
    delay = restart_delay(restarts, ran)
    log.warning(
        "worker stopped on an unrecoverable error; starting it again",
        error=watch.error,
        ran_s=round(ran, 1),
        restarts_in_a_row=restarts,
        delay_s=delay,
    )
    time.sleep(delay)
    os.environ[RESTARTS_ENV] = str(restarts + 1)
    os.execv(sys.executable, sys.orig_argv)
