"""Throughput and latency of the distributed pipeline, beside the embedded default.

For each kind (text: JSONL conversations of 4 messages; screenshot: 640x360 PNGs with a few lines of text)
and each number of ``engram worker --role cpu`` processes (ingest, perceive, embed), the bench starts a
redis-server of its own, the workers and the one store worker of the embedded store (link, store,
consolidate, query) as a user starts them, publishes ``--events`` events (object stored, event queued in
the ledger, ``ingest`` sent to the broker) and counts events/s from the first publish to the last event
done. Then, with the cluster idle, it publishes one text event at a time and polls a search through the
query queue until the event's observations are found: the publish-to-searchable latency (p50, p95). The
embedded default (everything inline in one process, SQLite ledger, Qdrant Edge) runs the same.

Warm-up events (models load lazily, once per worker process) are published first and not counted. The
machine is shared and noisy: run it more than once and compare ratios.

    python bench/distributed.py                          # 300 events, 1 and 2 workers, both kinds
    python bench/distributed.py --events 60 --workers 1  # quicker
    python bench/distributed.py --json > figures.json

Needs ``redis-server`` (``scripts/setup.sh`` installs it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import structlog  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from tests.cluster import Cluster, producer  # noqa: E402
from tests.servers import RedisProcess, free_ports  # noqa: E402
from tests.workload import TOPICS, Item, chats_and_screens  # noqa: E402

TENANT = "bench"
KINDS = ("text", "screenshot")
FINAL = {"done", "skipped", "failed"}


@dataclass
class Figure:
    """One configuration's result: events/s (median of ``repeats``) and latency percentiles in seconds."""

    mode: str  # "distributed" or "embedded"
    kind: str
    workers: int  # cpu worker processes (0: embedded)
    events: int
    events_per_s: float
    failed: int
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None


def make_workload(folder: Path, kind: str, n: int, tag: str) -> list[Item]:
    """``n`` distinct items of ``kind`` ("text" or "screenshot") over the users (tests.workload)."""
    return chats_and_screens(folder, n, tag, kind=kind)


def publish(rt, items: list[Item], send) -> list[uuid.UUID]:
    """Store each file and queue its event (``api.local.publish_file``), then hand it to ``send(event)``."""
    from engram.api.local import classify, publish_file

    ids = []
    for it in items:
        event = publish_file(rt, classify(it.path), TENANT, it.user, it.device, it.captured_at, it.app, it.window)
        send(event)
        ids.append(event.event_id)
    return ids


def wait_final(rt, ids: list[uuid.UUID], timeout: float, progress=None, task=None) -> int:
    """Until every event is final; returns how many failed. Raises TimeoutError."""
    deadline = time.monotonic() + timeout
    pending = set(ids)
    failed = 0
    while pending:
        for eid in list(pending):
            rec = rt.ledger.get(eid)
            if rec is not None and rec.status.value in FINAL:
                pending.discard(eid)
                failed += rec.status.value == "failed"
                if progress is not None:
                    progress.advance(task)
        if pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(pending)} of {len(ids)} events not final after {timeout:.0f} s")
            time.sleep(0.1)
    return failed


def searchable_latency(rt, folder: Path, samples: int, send, search) -> list[float]:
    """Seconds from publishing one text event to a search that returns one of its observations."""
    from engram.schemas.search import SearchRequest

    out = []
    for i, item in enumerate(make_workload(folder, "text", samples, f"lat{uuid.uuid4().hex[:6]}")):
        t0 = time.perf_counter()
        (eid,) = publish(rt, [item], send)
        # the conversation's topic and "(latXXXXXX i)" are its own
        req = SearchRequest(query=f"{TOPICS[i % len(TOPICS)]} {item.path.stem.split('-')[0]} {i}",
                            tenant_id=TENANT, user_id=item.user, limit=5)
        deadline = time.monotonic() + 120
        while not any(eid in hit.event_ids for hit in search(req).hits):
            if time.monotonic() > deadline:
                raise TimeoutError(f"event {eid} not searchable after 120 s")
            time.sleep(0.05)
        out.append(time.perf_counter() - t0)
    return out


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation (statistics.quantiles, inclusive method)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def run_distributed(redis: RedisProcess, root: Path, kind: str, workers: int, events: int, samples: int,
                    progress: Progress) -> Figure:
    """One configuration on a fresh Redis database and data dir."""
    import redis as redis_lib

    from engram.schemas.search import SearchResponse
    from engram.schemas.settings import Settings
    from engram.workers.runtime import reset_runtimes, runtime

    redis_lib.Redis.from_url(redis.url).flushall()
    data = root / f"data-{kind}-{workers}"
    values = dict(broker_url=redis.url, data_dir=str(data), consolidate_interval_seconds=3600.0)
    settings = Settings(**values)
    cluster = Cluster.create(root / f"cluster-{kind}-{workers}", {f"ENGRAM_{k.upper()}": str(v)
                                                                  for k, v in values.items()})
    app = producer(settings)
    reset_runtimes()
    rt = runtime(settings)

    def send(event):
        app.send_task("workers.ingest.ingest", args=[event.model_dump(mode="json")])

    def search(req):
        return SearchResponse.model_validate(
            app.send_task("workers.query.search", args=[req.model_dump(mode="json")]).get(timeout=60))

    try:
        nodes = cluster.start_distributed(cpu_workers=workers, beat=False, tag=f"{kind}{workers}")
        cluster.wait_ready(app, nodes, timeout=180)
        warm = make_workload(root / "warm", kind, 2 * workers, f"warm{kind}{workers}")
        wait_final(rt, publish(rt, warm, send), timeout=600)
        items = make_workload(root / f"media-{kind}-{workers}", kind, events, f"{kind}{workers}")
        task = progress.add_task(f"{kind}, {workers} worker(s)", total=events)
        t0 = time.perf_counter()
        ids = publish(rt, items, send)
        failed = wait_final(rt, ids, timeout=3600, progress=progress, task=task)
        rate = events / (time.perf_counter() - t0)
        latency = searchable_latency(rt, root / f"lat-{kind}-{workers}", samples, send, search) \
            if kind == "text" and samples else []
    finally:
        cluster.stop_all()
        app.close()
        reset_runtimes()
    return Figure("distributed", kind, workers, events, rate, failed,
                  percentile(latency, 0.5) if latency else None, percentile(latency, 0.95) if latency else None)


def run_embedded(root: Path, kind: str, events: int, samples: int, progress: Progress) -> Figure:
    """The same in the embedded default: publish and run inline, one event after another."""
    from engram.api.local import run_event
    from engram.schemas.settings import Settings
    from engram.workers.app import app, configure
    from engram.workers.memory.search import search as hybrid_search
    from engram.workers.runtime import reset_runtimes, runtime

    settings = Settings(data_dir=str(root / f"embedded-{kind}"), broker_url=None)
    configure(app, settings)
    os.environ["ENGRAM_DATA_DIR"] = str(settings.data_dir)  # tasks read the settings from the environment
    os.environ.pop("ENGRAM_BROKER_URL", None)
    reset_runtimes()
    rt = runtime(settings)

    def send(event):
        run_event(rt, event)

    def search(req):
        return hybrid_search(rt, req)

    wait_final(rt, publish(rt, make_workload(root / "warm-emb", kind, 2, f"warmemb{kind}"), send), timeout=600)
    items = make_workload(root / f"media-emb-{kind}", kind, events, f"emb{kind}")
    task = progress.add_task(f"{kind}, embedded", total=events)
    t0 = time.perf_counter()
    ids = []
    for it in items:
        ids += publish(rt, [it], send)
        progress.advance(task)
    failed = wait_final(rt, ids, timeout=60)
    rate = events / (time.perf_counter() - t0)
    latency = searchable_latency(rt, root / f"lat-emb-{kind}", samples, send, search) \
        if kind == "text" and samples else []
    reset_runtimes()
    return Figure("embedded", kind, 0, events, rate, failed,
                  percentile(latency, 0.5) if latency else None, percentile(latency, 0.95) if latency else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=300, help="events per configuration (default 300)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                        help="numbers of cpu worker processes to measure (default 1 2)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--latency-samples", type=int, default=20,
                        help="text events published one at a time for the latency (default 20; 0: skip)")
    parser.add_argument("--no-embedded", action="store_true", help="skip the embedded default")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

    binary = shutil.which("redis-server")
    if binary is None:
        parser.error("redis-server not found (scripts/setup.sh installs it)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    console = Console(stderr=True)
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="engram-bench-") as tmp:
        root = Path(tmp)
        (port,) = free_ports(1)
        redis = RedisProcess(binary, port, root / "redis")
        redis.data.mkdir()
        redis.start()
        try:
            with Progress(console=console, transient=True) as progress:
                for kind in args.kinds:
                    for workers in args.workers:
                        figures.append(run_distributed(redis, root, kind, workers, args.events,
                                                       args.latency_samples, progress))
                    if not args.no_embedded:
                        figures.append(run_embedded(root, kind, args.events, args.latency_samples, progress))
        finally:
            redis.stop(signal.SIGKILL)

    if args.json:
        print(json.dumps([asdict(f) for f in figures], indent=2))
        return 0
    table = Table(title=f"engram pipeline: {args.events} events per row (2-core machine, shared: noisy)")
    for col in ("mode", "kind", "cpu workers", "events/s", "failed", "publish→searchable p50", "p95"):
        table.add_column(col, justify="right" if col not in ("mode", "kind") else "left")
    for f in figures:
        table.add_row(f.mode, f.kind, str(f.workers or "-"), f"{f.events_per_s:.2f}", str(f.failed),
                      f"{f.latency_p50_s:.2f} s" if f.latency_p50_s is not None else "",
                      f"{f.latency_p95_s:.2f} s" if f.latency_p95_s is not None else "")
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
