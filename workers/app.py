"""The Celery app: queues, routes and the beat schedule of DESIGN.md.

One app, two modes. The embedded default (no ``ENGRAM_BROKER_URL``) sets ``task_always_eager``, so the
same tasks run inline in the calling process. The distributed mode sets a Redis broker and result
backend. Tasks never depend on which mode runs them.
"""

from __future__ import annotations

import importlib
import logging

import structlog
from celery import Celery, Signature
from celery.signals import (
    setup_logging,
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
)
from kombu import Queue as KombuQueue

from engram.schemas.settings import Settings, get_settings
from engram.workers.fairness import PRIORITY_STEPS
from engram.workers.logs import celery_setup_logging
from engram.workers.metrics import TASK_CPU, mark_process_dead, serve_metrics
from engram.workers.tasks import BATCH_FLUSH_EVERY, BATCH_FLUSH_SECONDS, QUEUE_OF, STAGE_MODULES, Queue, Task

log = structlog.get_logger(__name__)

#: Routes of every task to its queue (``workers.tasks.QUEUE_OF``).
ROUTES = {name.value: {"queue": queue.value} for name, queue in QUEUE_OF.items()}


def transport_options(settings: Settings) -> dict:
    """Redis transport options: the visibility timeout, a sweep for unacknowledged tasks about every
    twentieth of it (1 s to 100 s), so a killed worker's task comes back soon after the timeout, and the
    ten message priority steps of ``workers.fairness`` (0 highest)."""
    vt = settings.broker_visibility_timeout
    interval = min(10, max(1, round(vt / 20)))
    return {
        "visibility_timeout": vt,
        "unacked_restore_interval": interval,
        "unacked_restore_throttle": min(10, max(1, round(vt / 20 / interval))),
        "priority_steps": PRIORITY_STEPS,
    }  # fair scheduling across tenants (workers.fairness)


def celery_settings(settings: Settings) -> dict:
    """Celery's configuration for engram's ``settings``: eager in the embedded default (no broker), a Redis
    broker and result backend in the distributed mode, the queues, routes and beat schedule."""
    broker = settings.broker_url or "memory://localhost/"  # a host named: kombu warns of none on every producer
    interval = settings.consolidate_interval_seconds
    sweep = min(300.0, max(5.0, settings.stalled_after / 4))
    return dict(
        broker_url=broker,
        result_backend=settings.result_backend or settings.broker_url or "cache+memory://",
        task_always_eager=settings.embedded,
        task_eager_propagates=False,
        task_store_eager_result=False,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_queues=[KombuQueue(q.value) for q in Queue],
        task_default_queue=Queue.ingest.value,
        task_routes=ROUTES,
        result_expires=3600,
        task_ignore_result=True,  # stage results travel down their chain; only query/consolidate keep one
        broker_transport_options=transport_options(settings),
        broker_connection_retry_on_startup=True,
        # a chain's next step is published from inside a task: ride out a broker restart of up to about a
        # minute instead of Celery's default 0.6 s, or the step is lost with its message already acknowledged
        task_publish_retry_policy={"max_retries": 20, "interval_start": 0.5, "interval_step": 1.0, "interval_max": 5.0},
        worker_cancel_long_running_tasks_on_connection_loss=True,  # redelivered, not run twice at once
        timezone="UTC",
        enable_utc=True,
        beat_schedule={
            "consolidate-due": {
                "task": Task.consolidate_due.value,
                "schedule": interval,
                "options": {"expires": interval * 1.5},
            },
            "archive-decayed": {  # MemoryBank's forgetting: hourly is plenty for a curve counted in days
                "task": Task.archive_decayed.value,
                "schedule": 3600.0,
                "options": {"expires": 5400.0},
            },
            "redeliver-stalled": {
                "task": Task.redeliver_stalled.value,
                "schedule": sweep,
                "options": {"expires": sweep * 1.5, "queue": Queue.maintenance.value},
            },
            "expire-staged-uploads": {  # presigned uploads never published (api.uploads)
                "task": Task.expire_staged.value,
                "schedule": 3600.0,
                "options": {"expires": 5400.0, "queue": Queue.maintenance.value},
            },
            "retention": {  # originals past their kind's age or the storage cap (workers.retention)
                "task": Task.retention.value,
                "schedule": settings.retention_interval_seconds,
                "options": {"expires": settings.retention_interval_seconds * 1.5},
            },
        },
    )


#: Characters of a task's arguments and result Celery writes into each message's headers (``argsrepr``,
#: ``kwargsrepr``: what Flower shows) and computes for its "succeeded" log line (the result, which
#: ``HideTaskValues`` then hides): none, as no log line holds them. Celery's default of 1,024 made its ``saferepr``
#: of a chat segment's observations cost ~0.25 ms of a cpu worker's ~2.6 ms CPU per ``ingest`` (measured side by
#: side, 2026-11-27; the streaming repr walks what follows the cut too, so 100 characters still cost most of it):
#: Celery then writes ", ..." in their place.
REPR_MAXSIZE = 0


def short_reprs(app: Celery) -> None:
    """Leave the arguments out of the headers of the messages ``app`` sends (Celery's ``AMQP.argsrepr_maxsize``
    and ``kwargsrepr_maxsize`` set to ``REPR_MAXSIZE``): the body holds them, a log line never does."""
    app.amqp.argsrepr_maxsize = app.amqp.kwargsrepr_maxsize = REPR_MAXSIZE


def configure(app: Celery, settings: Settings) -> None:
    """Configure ``app`` from ``settings``: a producer app of the API or a test (``Celery("name")`` made
    for one broker). The process-wide ``app`` below configures itself from the environment's settings when
    it is first used (Celery's ``on_after_configure``), not when a module is imported. Connections are made
    on first use, so configure an app before it sends anything; a process that must talk to another broker
    makes another app."""
    app.conf.update(celery_settings(settings))
    short_reprs(app)


#: The process-wide app: the worker's (``celery -A engram.workers.app``) and the embedded default's, where
#: ``task_always_eager`` runs the same tasks inline in the calling process.
app = Celery("engram", include=list(STAGE_MODULES))


@app.on_after_configure.connect
def _configure_from_settings(sender: Celery, source, **_) -> None:
    """Apply the environment's settings when the app's configuration is first read."""
    source.update(celery_settings(get_settings()))
    short_reprs(sender)


def load_tasks() -> Celery:
    """Import the stage modules (which register their tasks) and return the app. A worker imports them itself
    (``include``); a process that runs tasks inline (the embedded default) needs them registered before it
    starts one by name: an unregistered name would be sent to the in-memory broker and never run."""
    for module in STAGE_MODULES:
        importlib.import_module(module)  # each stage registers its tasks; imported once, then a dict lookup
    return app


def signature(name: Task, *args, **options) -> Signature:
    """A signature of task ``name`` with ``args`` and message ``options`` (``queue``, ``priority``): how a chain
    is built from task names, so no stage imports another (``workers.ingest.dispatch``, ``workers.batching``)."""
    return load_tasks().signature(name.value, args=args, **options)


def task(name: Task, kind: str = "stage", **options):
    """The decorator of every Celery task: registers the function under its wire ``name`` with the options of
    its ``kind`` (``runtime.TASK_OPTIONS``): ``"stage"`` (pipeline stages: pydantic arguments, late acks,
    retries with backoff on transient errors only), ``"batch"`` (a batched consumer, celery-batches' ``Batches``:
    the function takes the list of buffered requests, each with the ``args`` of one message), ``"request"`` (an
    answer awaited by a caller: the result kept), ``"beat"`` (a periodic sweep: the result kept, no retry).
    ``options`` override single ones."""
    from engram.workers.runtime import TASK_OPTIONS  # runtime imports the stores; this module stays light

    if kind == "batch":
        from celery_batches import Batches  # start-up time: the API's Celery client needs no batched consumer

        options = {
            "base": Batches,
            "flush_every": BATCH_FLUSH_EVERY[name],
            "flush_interval": BATCH_FLUSH_SECONDS[name],
            **options,
        }
    return app.task(name=name.value, **{**TASK_OPTIONS[kind], "resultrepr_maxsize": REPR_MAXSIZE, **options})


class HideTaskValues(logging.Filter):
    """Celery's own log lines without task arguments or results: "Task x[id] received" and "Task x[id]
    succeeded in 0.1s: <return value>" keep the task's name, id and runtime, and the values (in the record's
    ``args`` dict and the ``data`` extra Celery passes for custom handlers) become ``<not logged>``. Installed
    on Celery's ``celery.app.trace``, ``celery.worker.strategy`` and ``celery.worker.request`` loggers at
    import, so no worker log holds an event's metadata or a result's text whatever the log format."""

    HIDDEN = ("return_value", "args", "kwargs")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, dict) and any(k in record.args for k in self.HIDDEN):
            record.args = {k: "<not logged>" if k in self.HIDDEN else v for k, v in record.args.items()}
        data = getattr(record, "data", None)
        if isinstance(data, dict) and any(k in data for k in self.HIDDEN):
            record.data = {k: "<not logged>" if k in self.HIDDEN else v for k, v in data.items()}
        return True


for _name in ("celery.app.trace", "celery.worker.strategy", "celery.worker.request"):
    logging.getLogger(_name).addFilter(HideTaskValues())

# workers and beat log through workers.logs (structlog's lines and Celery's at their own levels), not Celery's setup
setup_logging.connect(celery_setup_logging, weak=False)


@worker_init.connect
def _require_vault_key(**_) -> None:
    """A distributed worker does not start without ``ENGRAM_VAULT_KEY``: it could neither keep the secrets
    perceive finds nor read the OCR cache, and would fail every event holding one (SystemExit with the
    reason; Celery's signal dispatch lets it through)."""
    settings = get_settings()
    if not settings.embedded and settings.vault_key is None:
        raise SystemExit(
            "engram worker: ENGRAM_VAULT_KEY is not set; every worker needs the same vault key "
            "(`engram vault keygen` prints one; a deployment keeps it as a secret) to redact "
            "secrets and read the OCR cache"
        )


@worker_init.connect
def _say_missing_models(**_) -> None:
    """At a worker's start, one warning per model the settings turn on whose packages are missing, with how to
    install them (``workers.models.missing_packages``: Resemblyzer, installed apart from the extras)."""
    from engram.workers.models import missing_packages  # start-up time: the API's Celery client loads no model code

    for message in missing_packages(get_settings()):
        log.warning("model unavailable", reason=message)


@worker_init.connect
def _serve_metrics(**_) -> None:
    """In the worker's main process: serve /metrics on ``ENGRAM_METRICS_PORT`` when it is set."""
    port = get_settings().metrics_port
    if port:
        serve_metrics(port)


@worker_process_init.connect
@worker_ready.connect
def _tune_collector(**_) -> None:
    """In each process that runs tasks (a prefork pool's children as they start; a solo or threads worker, and a
    prefork parent, once ready): the garbage collector set for throughput
    (``runtime.tune_collector_for_throughput``)."""
    from engram.workers.runtime import tune_collector_for_throughput  # the worker's stack: loaded by now

    tune_collector_for_throughput()


@task_prerun.connect
def _start_task_clock(**_) -> None:
    """A task begins: start its CPU clock (``metrics.TaskCpuClock``)."""
    TASK_CPU.start()


@task_postrun.connect
def _stop_task_clock(task=None, **_) -> None:
    """A task ended (whatever it returned or raised): count its CPU seconds under its name."""
    TASK_CPU.stop(getattr(task, "name", None) or "unknown")


@worker_process_shutdown.connect
def _forget_pool_process(pid: int | None = None, **_) -> None:
    """A pool process exits: drop its live samples (prometheus-client multiprocess mode)."""
    import os

    mark_process_dead(pid or os.getpid())
