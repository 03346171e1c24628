"""The Celery app: queues, routes and the beat schedule of DESIGN.md.

One app, two modes. The embedded default (no ``ENGRAM_BROKER_URL``) sets ``task_always_eager``, so the
same tasks run inline in the calling process. The distributed mode sets a Redis broker and result
backend. Tasks never depend on which mode runs them.
"""

from __future__ import annotations

import logging
from enum import StrEnum

from celery import Celery
from celery.signals import setup_logging, worker_init, worker_process_shutdown
from kombu import Queue as KombuQueue

from engram.schemas.settings import Settings, get_settings
from engram.workers.fairness import PRIORITY_STEPS
from engram.workers.logs import celery_setup_logging


class Queue(StrEnum):
    """Queues, split by kind of work so operators scale each without code changes."""

    ingest = "ingest"
    perceive_cpu = "perceive.cpu"
    perceive_gpu = "perceive.gpu"
    link = "link"
    store = "store"
    consolidate = "consolidate"
    query = "query"
    maintenance = "maintenance"  # beat's sweeps; every worker serves it (api.processes.worker_argv)


#: Queues whose tasks open the vector store. With the embedded store exactly one ``--pool solo``
#: worker serves all of them.
QDRANT_BOUND = (Queue.link, Queue.store, Queue.consolidate, Queue.query)

#: Modules that define tasks (imported by the worker). Task names keep the wire form ``workers.<stage>.<task>``
#: of earlier releases, so queued messages stay valid across the move into the ``engram`` namespace.
TASK_MODULES = [f"engram.workers.{stage}" for stage in (
    "ingest", "perceive", "embed", "link", "store", "consolidate", "dynamics", "query", "ask", "memory_admin",
    "entities", "uploads")]

ROUTES = {
    # beat's sweep for lost work has a queue of its own: behind an ingest backlog it would expire unrun
    "workers.ingest.redeliver_stalled": {"queue": Queue.maintenance.value},
    "workers.uploads.*": {"queue": Queue.maintenance.value},  # beat's sweep of staged uploads
    "workers.ingest.*": {"queue": Queue.ingest.value},
    "workers.perceive.*": {"queue": Queue.perceive_cpu.value},
    "workers.embed.*": {"queue": Queue.perceive_gpu.value},
    "workers.link.*": {"queue": Queue.link.value},
    "workers.store.*": {"queue": Queue.store.value},
    "workers.consolidate.*": {"queue": Queue.consolidate.value},
    "workers.dynamics.*": {"queue": Queue.consolidate.value},
    "workers.query.*": {"queue": Queue.query.value},
    "workers.ask.*": {"queue": Queue.query.value},  # ask and memory management read the vector store
    "workers.memory_admin.*": {"queue": Queue.query.value},
    "workers.entities.*": {"queue": Queue.query.value},  # listing and merging entities for the API
}


def transport_options(settings: Settings) -> dict:
    """Redis transport options: the visibility timeout, a sweep for unacknowledged tasks about every
    twentieth of it (1 s to 100 s), so a killed worker's task comes back soon after the timeout, and the
    ten message priority steps of ``workers.fairness`` (0 highest)."""
    vt = settings.broker_visibility_timeout
    interval = min(10, max(1, round(vt / 20)))
    return {"visibility_timeout": vt, "unacked_restore_interval": interval,
            "unacked_restore_throttle": min(10, max(1, round(vt / 20 / interval))),
            "priority_steps": PRIORITY_STEPS}  # fair scheduling across tenants (workers.fairness)


def configure(app: Celery, settings: Settings) -> None:
    """Apply ``settings`` to ``app`` (eager in the embedded default). Safe to call again (tests switch
    brokers): broker connections and the result backend made for the previous settings are dropped."""
    broker = settings.broker_url or "memory://localhost/"  # a host named: kombu warns of none on every producer
    interval = settings.consolidate_interval_seconds
    sweep = min(300.0, max(5.0, settings.stalled_after / 4))
    app.conf.update(
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
        task_publish_retry_policy={"max_retries": 20, "interval_start": 0.5, "interval_step": 1.0,
                                   "interval_max": 5.0},
        worker_cancel_long_running_tasks_on_connection_loss=True,  # redelivered, not run twice at once
        timezone="UTC",
        enable_utc=True,
        beat_schedule={
            "consolidate-due": {
                "task": "workers.consolidate.consolidate_due",
                "schedule": interval,
                "options": {"expires": interval * 1.5},
            },
            "archive-decayed": {  # MemoryBank's forgetting: hourly is plenty for a curve counted in days
                "task": "workers.dynamics.archive_task",
                "schedule": 3600.0,
                "options": {"expires": 5400.0},
            },
            "redeliver-stalled": {
                "task": "workers.ingest.redeliver_stalled",
                "schedule": sweep,
                "options": {"expires": sweep * 1.5, "queue": Queue.maintenance.value},
            },
            "expire-staged-uploads": {  # presigned uploads never published (api.uploads)
                "task": "workers.uploads.expire_staged",
                "schedule": 3600.0,
                "options": {"expires": 5400.0, "queue": Queue.maintenance.value},
            },
        },
    )
    # forget the broker connection pools and result backend made for earlier settings (Celery caches them)
    app._pool = None
    if "amqp" in app.__dict__:
        app.amqp._producer_pool = None
    app._backend_cache = None
    app._local.__dict__.pop("backend", None)


app = Celery("engram", include=TASK_MODULES)
configure(app, get_settings())


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
        raise SystemExit("engram worker: ENGRAM_VAULT_KEY is not set; every worker needs the same vault key "
                         "(`engram vault keygen` prints one; a deployment keeps it as a secret) to redact "
                         "secrets and read the OCR cache")


@worker_init.connect
def _serve_metrics(**_) -> None:
    """In the worker's main process: serve /metrics on ``ENGRAM_METRICS_PORT`` when it is set."""
    port = get_settings().metrics_port
    if port:
        from engram.workers.metrics import serve_metrics

        serve_metrics(port)


@worker_process_shutdown.connect
def _forget_pool_process(pid: int | None = None, **_) -> None:
    """A pool process exits: drop its live samples (prometheus-client multiprocess mode)."""
    import os

    from engram.workers.metrics import mark_process_dead

    mark_process_dead(pid or os.getpid())
