"""Prometheus metrics of engram (prometheus-client), shared by the api, the workers and the CLI.

Names follow Prometheus conventions: ``engram_<what>_total`` counters, ``_seconds`` histograms in base
units, labels with bounded values only (kind, stage, status, reason class, model, queue, memory type).

Prefork workers run in multiprocess mode: with ``PROMETHEUS_MULTIPROC_DIR`` set, every process writes its
samples to files there and ``serve_metrics`` (the worker's main process) or the api's ``/metrics`` collects
them with ``MultiProcessCollector``; a pool child that exits is marked dead (``mark_process_dead``) so its
live gauges disappear. Without the variable (the embedded default, tests), metrics live in the process.

Where each family is counted:
- events received / finished: in the ledger, at the one transition of an event into a status (so the
  counts equal the ledger's, whatever process or retry made the transition);
- stage latency: ``workers.runtime.stage``; model time per item: ``model_timer`` around each model call;
- observations and memories written: the store and consolidate stages; near-duplicate drops: ingest;
- publish-to-searchable: the store stage, when an event's last segment is stored (ledger ``created_at`` to
  now); search latency: the query stage;
- queue depth: ``QueueDepthCollector``, read from Redis at scrape time by the api;
- worker CPU and memory (with the pool processes): ``WorkerResourcesCollector``, on the worker's port;
- CPU per task: ``TaskCpuClock``, started and stopped by Celery's ``task_prerun``/``task_postrun`` signals
  (``workers.app``).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

#: Latency buckets from 5 ms to 10 min (stages, publish-to-searchable).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

EVENTS_RECEIVED = Counter("engram_events_received_total", "Events recorded in the ledger (published).", ["kind"])
EVENTS_FINISHED = Counter(
    "engram_events_finished_total",
    "Events that reached a final status (done, skipped, failed), by kind, stage and reason class.",
    ["kind", "status", "stage", "reason"],
)
STAGE_SECONDS = Histogram(
    "engram_stage_duration_seconds",
    "Wall time of one stage task for one segment or event.",
    ["stage"],
    buckets=LATENCY_BUCKETS,
)
STAGE_ERRORS = Counter(
    "engram_stage_errors_total",
    "Stage runs that raised, by stage and error class (transient: retried; bad_input; error).",
    ["stage", "error"],
)
MODEL_SECONDS = Histogram(
    "engram_model_seconds_per_item",
    "Model wall time per item (image, audio second, text).",
    ["model"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
MODEL_ITEMS = Counter("engram_model_items_total", "Items a model processed (images, audio seconds, texts).", ["model"])
OBSERVATIONS_WRITTEN = Counter("engram_observations_written_total", "Observations upserted into the store.", ["kind"])
MEMORIES_WRITTEN = Counter("engram_memories_written_total", "Memories written by consolidation.", ["memory_type"])
NEAR_DUPLICATES = Counter(
    "engram_near_duplicates_dropped_total",
    "Screenshots dropped as near-duplicates of the device's previous frame.",
    ["kind"],
)
PUBLISH_TO_SEARCHABLE = Histogram(
    "engram_publish_to_searchable_seconds",
    "From an event's publish (ledger record) to its last segment stored.",
    ["kind"],
    buckets=LATENCY_BUCKETS,
)
SEARCH_SECONDS = Histogram(
    "engram_search_duration_seconds", "Hybrid search latency in the query stage.", buckets=LATENCY_BUCKETS
)
TASK_CPU_SECONDS = Counter(
    "engram_task_cpu_seconds_total",
    "CPU seconds (user + system, all threads) of the process running each task, from its "
    "start to its end, by task name (a task applied inside another counts in the outer).",
    ["task"],
)


class TaskCpuClock:
    """Counts each task's CPU seconds into ``engram_task_cpu_seconds_total{task}``: ``start`` when a task begins,
    ``stop`` when it ends (Celery's ``task_prerun``/``task_postrun``), the process's CPU time in between
    (``time.process_time``: the task's model threads included). Exact where a process runs one task at a time
    (prefork pool children, ``--pool solo``); on a threads pool it is the process's CPU while the task ran, an
    upper bound. A task applied inside another (a chat's perception inside ``ingest``, the embedded default's
    eager tasks) counts in the outermost one only, so the family sums to the tasks' CPU without double counting.
    The rest of a worker's CPU (the consumer, the prefork parent, idle polls) is the worker's
    ``engram_worker_cpu_seconds_total`` minus this family's sum."""

    def __init__(self) -> None:
        self._local = threading.local()

    def start(self) -> None:
        """A task begins on this thread."""
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            self._local.t0 = time.process_time()
        self._local.depth = depth + 1

    def stop(self, task_name: str) -> None:
        """The task ``task_name`` ends on this thread; the outermost one counts the CPU since its start."""
        depth = getattr(self._local, "depth", 0)
        if depth <= 0:  # a stop without its start (a signal connected mid-task): nothing to count
            return
        self._local.depth = depth - 1
        if depth == 1:
            TASK_CPU_SECONDS.labels(task=task_name).inc(max(0.0, time.process_time() - self._local.t0))


TASK_CPU = TaskCpuClock()

_REASONS = (
    ("exact duplicate", "exact_duplicate"),
    ("near-duplicate", "near_duplicate"),
    ("stalled", "stalled"),
    ("retries exhausted", "retries_exhausted"),
    ("no content", "no_content"),
)
_EXCEPTION = re.compile(r"^[A-Z][A-Za-z0-9_]*[a-z][A-Za-z0-9_]*: ")  # "KeyError: ...", "UnexpectedResponse: ..."


def reason_class(status: str, reason: str | None) -> str:
    """A bounded label for a free-text ledger reason: ``none``, ``exact_duplicate``, ``near_duplicate``,
    ``stalled``, ``retries_exhausted``, ``no_content``, ``error`` (an unexpected exception: stage() writes its
    reason as "ClassName: message") or ``bad_input`` (any other failure: stage() records bad input by its
    message alone)."""
    if not reason:
        return "none"
    low = reason.lower()
    for needle, label in _REASONS:
        if needle in low:
            return label
    if status == "failed":
        return "error" if _EXCEPTION.match(reason) else "bad_input"
    return "other"


def count_finished(kind: str, status: str, stage: str | None, reason: str | None) -> None:
    """Count one event's transition into a final status (called by the ledgers, once per transition)."""
    EVENTS_FINISHED.labels(kind=kind, status=status, stage=stage or "none", reason=reason_class(status, reason)).inc()


#: the models being timed in this context: an inner ``model_timer`` of one of them observes nothing
_TIMING: ContextVar[frozenset[str]] = ContextVar("engram_model_timing", default=frozenset())


@contextmanager
def model_timer(model: str, items: float = 1.0) -> Iterator[None]:
    """Time one model call over ``items`` items (images, audio seconds, texts): observes seconds per item.

    Nested timers of the same ``model`` count once, by the outermost: a caller that times a larger unit (a
    screenshot read region by region) around a provider's ``predict``, which times itself, is not counted twice."""
    active = _TIMING.get()
    if model in active:
        yield
        return
    token = _TIMING.set(active | {model})
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _TIMING.reset(token)
        if items > 0:
            MODEL_SECONDS.labels(model=model).observe((time.perf_counter() - t0) / items)
            MODEL_ITEMS.labels(model=model).inc(items)


#: the priority steps of workers.fairness (repeated: this module is imported before the Celery app)
PRIORITY_STEPS = list(range(10))


class QueueDepthCollector:
    """``engram_queue_depth{queue}``: messages waiting in each Celery queue, and
    ``engram_queue_unacked``: delivered but not yet acknowledged, read from the Redis broker at scrape time.
    Errors reading Redis yield no sample (the scrape itself never fails)."""

    def __init__(self, redis_url: str, queues: list[str]) -> None:
        import redis

        self.r = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
        self.queues = queues

    def collect(self):
        depth = GaugeMetricFamily("engram_queue_depth", "Messages waiting in a Celery queue.", labels=["queue"])
        unacked = GaugeMetricFamily("engram_queue_unacked", "Messages delivered to workers, not yet acknowledged.")
        try:
            with self.r.pipeline() as pipe:
                for q in self.queues:  # a queue is one Redis list per priority step (workers.fairness)
                    for step in PRIORITY_STEPS:
                        pipe.llen(f"{q}\x06\x16{step}" if step else q)
                pipe.hlen("unacked")
                values = pipe.execute()
        except Exception:  # the broker is down: /readyz says so; the scrape goes on without these samples
            return
        per = len(PRIORITY_STEPS)
        for i, q in enumerate(self.queues):
            depth.add_metric([q], sum(values[i * per : (i + 1) * per]))
        unacked.add_metric([], values[-1])
        yield depth
        yield unacked


class _ThisProcess:
    """The default registry's samples (this process's metrics) inside another registry."""

    def collect(self):
        from prometheus_client import REGISTRY

        yield from REGISTRY.collect()


class WorkerResourcesCollector:
    """``engram_worker_cpu_seconds_total`` and ``engram_worker_resident_memory_bytes``: CPU time and resident
    memory of this process together with its child processes (a prefork worker's pool), read with psutil
    at scrape time. (prometheus-client's own process metrics cover one process and are not exported in
    multiprocess mode.)"""

    def __init__(self, pid: int | None = None) -> None:
        import psutil

        self.proc = psutil.Process(pid)

    def collect(self):
        import psutil

        cpu = CounterMetricFamily(
            "engram_worker_cpu_seconds", "CPU seconds (user + system) of the worker and its pool processes."
        )
        rss = GaugeMetricFamily(
            "engram_worker_resident_memory_bytes", "Resident memory of the worker and its pool processes, bytes."
        )
        total_cpu = total_rss = 0.0
        for p in [self.proc, *self.proc.children(recursive=True)]:
            try:
                with p.oneshot():
                    times = p.cpu_times()
                    total_cpu += times.user + times.system
                    total_rss += p.memory_info().rss
            except psutil.Error:  # a pool process that exited meanwhile
                continue
        cpu.add_metric([], total_cpu)
        rss.add_metric([], total_rss)
        yield cpu
        yield rss


def multiprocess_dir() -> str | None:
    """``PROMETHEUS_MULTIPROC_DIR`` when set (prefork workers, several api processes), else None."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def registry(redis_url: str | None = None, queues: list[str] | None = None) -> CollectorRegistry:
    """The registry to expose: every process's samples (multiprocess mode) or this process's, plus the
    queue depths when ``redis_url`` is given."""
    reg = CollectorRegistry()
    if multiprocess_dir():
        multiprocess.MultiProcessCollector(reg)
    else:
        reg.register(_ThisProcess())
    if redis_url and queues:
        reg.register(QueueDepthCollector(redis_url, queues))
    return reg


def render(reg: CollectorRegistry) -> tuple[bytes, str]:
    """(body, content type) of a /metrics response."""
    return generate_latest(reg), CONTENT_TYPE_LATEST


def serve_metrics(port: int, addr: str = "0.0.0.0") -> None:
    """Serve /metrics of this process (and, in multiprocess mode, its pool children) on ``port`` from a
    daemon thread (prometheus_client's HTTP server). Raises OSError when the port is taken."""
    from prometheus_client import start_http_server

    reg = registry()
    reg.register(WorkerResourcesCollector())
    start_http_server(port, addr=addr, registry=reg)


def mark_process_dead(pid: int) -> None:
    """Drop the live gauges of a pool child that exited (multiprocess mode; a no-op otherwise)."""
    if multiprocess_dir():
        multiprocess.mark_process_dead(pid)
