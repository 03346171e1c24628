"""Throughput, CPU efficiency and latency of the distributed pipeline, beside the embedded default (issue 15).

For each kind (text: JSONL conversations of 4 messages; screenshot: 640x360 PNGs with a few lines of text)
and each number of ``engram worker --role cpu`` processes (ingest, perceive, embed), the bench starts a
redis-server of its own, the workers and the one store worker of the embedded store (store,
consolidate, query) as a user starts them, publishes ``--events`` events (object stored, event queued in
the ledger, ``ingest`` sent to the broker) as a backlog, with the cpu workers' ingest consumers paused (Celery's
remote control: ``cancel_consumer``), then resumes them (``add_consumer``) and measures the workers draining it,
from the resume to the last event final. (Published inside the window, the bench's own publishing, ~7 ms CPU an
event, ran on the same 2 cores as the workers and paced them: four workers spent 11 of their 12.5 s waiting on
it, 2026-11-28.)

- **events/s**: events ÷ wall seconds;
- **events per CPU-second**: events ÷ the CPU seconds (user + system, psutil) of every worker process and
  its children (the cpu workers' prefork pools and the store worker) over the same window. The machine has
  2 cores: more workers cannot add CPU, so this efficiency should hold (within 10 %) as workers are added;
- **store busy**: the store worker's CPU seconds ÷ the wall seconds (its share of one core; the store
  owner should stay under 50 % at the highest rate), and apart its tasks' wall time ÷ the wall seconds
  (``engram_stage_duration_seconds`` read from its /metrics: the share of time it was running a task).

Then, with the cluster idle, it publishes one event of the kind at a time (a text conversation, or a
screenshot), waits for the ledger to call it final, then searches through the query queue until the event's
observations are found: the publish-to-searchable latency (p50, p95; target p95 ≤ 2 s). (Polling searches
from the publish on would queue on the one store worker ahead of the event's own link and store tasks.) The
embedded default (everything inline in one process, SQLite ledger, Qdrant Edge) runs the same, with the CPU
seconds of its one process.

Warm-up events (models load lazily, once per worker process) are published first and not counted, then one
search warms the query path (its time is reported apart: ``first_search_s``, a fresh worker's first search), and
the idle cluster's own CPU (broker polls, heartbeats; cores busy, ``idle_cpu_share``) is measured over 5 s. The
machine is shared and noisy: the load average is printed before and after; compare ratios.

Each cpu worker runs its models on ``cores ÷ workers`` threads (at least one: ``model_threads``, set through
``ENGRAM_MODELS__CPU_THREADS``), as ``models.cpu_threads`` says to when several worker processes share a machine
and as the Helm chart deploys cpu workers (one model thread per pool process): with the default, a thread per core
in every process, four workers on 2 cores ran 8 model threads (four processes encoding the same texts took
~5-10 % more CPU with 2 threads each than with 1, 2026-11-27).

The same work's CPU seconds move by ±15 % between two runs of one configuration here (other jobs on the
host, caches), so the distributed rows run ``--rounds`` times (default 3), interleaved (1, 2, 4 workers, then
again): the JSON's figures are the medians over the rounds, and the efficiency check is the median of each
round's ratio to the same round's one-worker row.

Beside them, a control of the machine itself (``machine_contention``): the CPU seconds of a fixed piece of
single-threaded Python work alone, then with the other cores running busy loops, and each row's cores kept busy
(CPU ÷ wall seconds). One cpu worker leaves a core idle much of the time, four keep both busy, and on a shared VM
the same instructions cost more CPU time beside busy cores: the control says how much of an efficiency loss the
machine alone makes.

``bench/distributed.py`` runs it and prints the table; ``distributed_rates()`` returns the ``"distributed"``
section of ``bench/ingest.py --json``.
Needs ``redis-server`` (``scripts/setup.sh`` installs it).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import structlog
from rich.console import Console
from rich.progress import Progress

from tests.cluster import Cluster, producer, scrape
from tests.servers import RedisProcess, free_ports
from tests.workload import TOPICS, Item, chats_and_screens

TENANT = "bench"
KINDS = ("text", "screenshot")
FINAL = {"done", "skipped", "failed"}
IDLE_SECONDS = 5.0  # the idle cluster's own CPU is measured over this long before each run


@dataclass
class Figure:
    """One configuration's result over its measured window (first publish to last event final).

    ``events_per_s``: events ÷ wall seconds; ``cpu_s``: CPU seconds (user + system) of the worker processes
    and their children (embedded: of the bench's own process); ``events_per_cpu_s``: events ÷ ``cpu_s``;
    ``store_cpu_s`` / ``store_busy``: the store worker's CPU seconds and their share of the wall seconds;
    ``store_task_busy``: its tasks' wall time ÷ the wall seconds (None when its metrics are unreadable);
    latencies in seconds (publish to searchable, one event at a time on an idle cluster)."""

    mode: str  # "distributed" or "embedded"
    kind: str
    workers: int  # cpu worker processes (0: embedded)
    events: int
    failed: int
    wall_s: float
    events_per_s: float
    cpu_s: float
    events_per_cpu_s: float
    store_cpu_s: float | None = None
    store_busy: float | None = None
    store_task_busy: float | None = None
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    latency_samples: int = 0
    latency_s: list[float] | None = None  # every sample, in publishing order
    latency_final_s: list[float] | None = None  # of each sample, the seconds until the ledger called it final
    first_search_s: float | None = None  # the process's first search (cold query path), after the warm-up events
    idle_cpu_share: float | None = None  # CPU seconds per wall second of all the workers, idle, before the run
    round: int = 1  # which of ``--rounds`` (each round runs every configuration once, in the same order)
    #: CPU seconds by task name over the window, summed over the workers (``engram_task_cpu_seconds_total`` on
    #: their /metrics); the rest of ``cpu_s`` went to no task (consumers, prefork parents, idle polls)
    task_cpu_s: dict[str, float] | None = None
    model_threads: int | None = None  # each cpu worker's model threads (``model_threads``; None: embedded)


def model_threads(workers: int) -> int:
    """Model threads for each of ``workers`` cpu worker processes sharing this machine: its usable cores divided
    among them, at least one (``models.cpu_threads``; 2 cores: 2 for one worker, 1 for two or four)."""
    from engram.workers.models.embeddings import usable_cores

    return max(1, usable_cores() // max(1, workers))


# --- CPU accounting --------------------------------------------------------------------------------------


#: The control's fixed single-threaded Python work (``python_work``): JSON round trips and dict and list work of
#: the size of a chat event's messages, ~0.4 s CPU on the 2-core EPYC of 2026-11-28.
CONTROL_ROUNDS = 12_000


def python_work(rounds: int = CONTROL_ROUNDS) -> float:
    """CPU seconds (``time.process_time``) this process takes for a fixed piece of pure-Python work (what the
    workers do around the model: JSON, dicts, small lists), single-threaded."""
    record = {
        "event_id": "8c1d4a2e-52f4-4c39-9b0e-3f6a1c2d7e90",
        "tenant": TENANT,
        "segment": 3,
        "messages": [
            {
                "speaker": "Caroline",
                "text": "I went to the LGBTQ support group yesterday " * 2,
                "ts": 1_700_000_000.5 + i,
            }
            for i in range(4)
        ],
        "vector": [0.125] * 48,
    }
    start = time.process_time()
    for i in range(rounds):
        back = json.loads(json.dumps(record))
        back["segment"] = i
        sorted(back["messages"], key=lambda m: -m["ts"])
        {m["speaker"]: m["text"].split() for m in back["messages"]}
    return time.process_time() - start


def machine_contention(pairs: int = 5) -> dict[str, float]:
    """The machine's own cost of busy cores, measured as a control beside the efficiency figures: the CPU seconds
    of ``python_work`` in this process alone, then with every other usable core running a busy loop (a process
    each), ``pairs`` times alternately. On a shared VM the same instructions take more CPU time when the
    neighbouring cores are busy (shared caches and the host's scheduling: 1.1-1.35x for this work on the
    2-core EPYC of 2026-11-28, 0-11 % for a single-threaded MiniLM encode), so a row that keeps both cores busy
    (four cpu workers) pays that on its Python work and a row that leaves one core idle half the time (one
    worker) does not: the efficiency check compares the pipeline and the machine together, and this factor says
    how much of the difference the machine alone makes.

    Returns ``{"alone_cpu_s", "beside_busy_cpu_s", "factor"}`` (medians over the pairs; factor = beside ÷ alone;
    1.0 with one usable core: nothing to run beside)."""
    from engram.workers.models.embeddings import usable_cores

    others = usable_cores() - 1
    python_work(CONTROL_ROUNDS // 10)  # warm
    alone, beside = [], []
    for _ in range(pairs):
        alone.append(python_work())
        if others < 1:
            beside.append(alone[-1])
            continue
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(others)]
        try:
            time.sleep(0.2)  # running before the measured work starts
            beside.append(python_work())
        finally:
            for b in burners:
                b.kill()
                b.wait()
    a, b = statistics.median(alone), statistics.median(beside)
    return {"alone_cpu_s": round(a, 3), "beside_busy_cpu_s": round(b, 3), "factor": round(b / a, 3)}


def contention_line(control: dict[str, float], figures: list[Figure], kind: str) -> str:
    """``machine_contention``'s control and each distributed row of ``kind``'s cores kept busy (CPU s ÷ wall s,
    medians by worker count), one line."""
    busy = {
        n: statistics.median(f.cpu_s / f.wall_s for f in fs if f.wall_s) for n, fs in by_workers(figures, kind).items()
    }
    return (
        f"the machine (control): the same single-threaded Python work took x{control['factor']:.2f} its CPU "
        f"seconds with the other cores busy ({control['alone_cpu_s']:.2f} s alone, "
        f"{control['beside_busy_cpu_s']:.2f} s beside); cores kept busy by the workers: "
        + ", ".join(f"{n} worker(s) {b:.2f}" for n, b in busy.items())
    )


def tree_cpu_seconds(pids: Iterable[int]) -> float:
    """CPU seconds (user + system) so far of the processes ``pids``, their live descendants and the children
    they have already reaped (psutil ``children_user``/``children_system``). The difference of two calls is
    the CPU the trees used in between, pool processes that exited or started meanwhile included. Processes
    that are gone count zero."""
    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for p in procs:
            try:
                t = p.cpu_times()
            except psutil.Error:  # exited meanwhile (its parent's children_* take it over)
                continue
            total += t.user + t.system + t.children_user + t.children_system
    return total


def metric_pages(ports: Iterable[int]) -> dict[int, dict[tuple[str, tuple], float]]:
    """Each worker's /metrics samples (``tests.cluster.scrape``) by port, read once; a page that cannot be read
    is left out."""
    out = {}
    for port in ports:
        try:
            out[port] = scrape(f"http://127.0.0.1:{port}/metrics")
        except Exception:  # noqa: BLE001 - no metrics: the CPU figures stand alone
            continue
    return out


def sum_by_label(pages: Iterable[dict[tuple[str, tuple], float]], metric: str, label: str) -> dict[str, float]:
    """The samples named ``metric`` in ``pages``, summed by the value of their ``label``."""
    out: dict[str, float] = {}
    for samples in pages:
        for (name, labels), value in samples.items():
            if name == metric:
                key = dict(labels).get(label, "")
                out[key] = out.get(key, 0.0) + value
    return out


@contextmanager
def measured(
    pids: Callable[[], list[int]], store_pid: int | None, store_port: int | None, metrics_ports: Iterable[int] = ()
) -> Iterator[dict]:
    """Wall and tree CPU seconds of the enclosed block; the store worker's CPU and its stage tasks' wall seconds
    (``engram_stage_duration_seconds`` on its /metrics, None when unreadable); the CPU seconds by task
    (``engram_task_cpu_seconds_total``) of the workers serving /metrics on ``metrics_ports`` (None without
    ports). Written into the yielded dict (``wall_s``, ``cpu_s``, ``store_cpu_s``, ``store_task_s``,
    ``task_cpu_s``) when it exits; each worker's page is read once at either end."""
    out: dict = {}
    worker_ports = list(metrics_ports)
    ports = {*worker_ports, *([store_port] if store_port is not None else [])}
    store = [store_pid] if store_pid else []
    cpu0, scpu0, pages0 = tree_cpu_seconds(pids()), tree_cpu_seconds(store), metric_pages(ports)
    t0 = time.perf_counter()
    yield out
    out["wall_s"] = time.perf_counter() - t0
    out["cpu_s"] = tree_cpu_seconds(pids()) - cpu0
    out["store_cpu_s"] = tree_cpu_seconds(store) - scpu0 if store else None
    pages = metric_pages(ports)

    def grew(metric: str, label: str, which: Iterable[int]) -> dict[str, float]:
        now = sum_by_label((pages[p] for p in which), metric, label)
        then = sum_by_label((pages0[p] for p in which), metric, label)
        return {k: v - then.get(k, 0.0) for k, v in sorted(now.items())}

    read = {p for p in ports if p in pages and p in pages0}
    out["store_task_s"] = (
        sum(grew("engram_stage_duration_seconds_sum", "stage", [store_port]).values()) if store_port in read else None
    )
    workers = [p for p in worker_ports if p in read]
    out["task_cpu_s"] = (
        {t: round(v, 3) for t, v in grew("engram_task_cpu_seconds_total", "task", workers).items() if v > 0}
        if workers
        else None
    )


# --- workload, publishing, latency -----------------------------------------------------------------------


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


def on_every_node(control: Callable, queue: str, nodes: list[str]) -> None:
    """Call Celery's remote ``control`` command (``app.control.cancel_consumer`` to pause ``queue``'s consumer,
    ``app.control.add_consumer`` to resume it) on the worker ``nodes`` and wait for every node's reply. Raises
    RuntimeError when a node does not answer within 10 s or answers with an error."""
    replies = {
        node: answer
        for reply in control(queue, destination=nodes, reply=True, timeout=10) or []
        for node, answer in reply.items()
    }
    bad = {n: replies.get(n) for n in nodes if not isinstance(replies.get(n), dict) or "error" in replies[n]}
    if bad:
        raise RuntimeError(f"{control.__name__}({queue!r}) not done on every worker: {bad}")


def wait_final(rt, ids: list[uuid.UUID], timeout: float, progress=None, task=None, stall: float = 180.0) -> int:
    """Until every event is final; returns how many failed. Raises TimeoutError after ``timeout`` seconds,
    or when no event became final for ``stall`` seconds.

    Polls in publishing order and stops at the first event not yet final (events finish roughly in the order they
    were published; one finished early is counted when the poll reaches it): a few ledger reads every 50 ms. This
    process shares the machine with the workers it measures, and reading every pending event's record each time
    (300 reads every 50 ms) took ~40 % of a core beside them (2026-11-28)."""
    deadline = time.monotonic() + timeout
    moved = time.monotonic()
    failed, at = 0, 0
    while at < len(ids):
        rec = rt.ledger.get(ids[at])
        if rec is not None and rec.status.value in FINAL:
            at += 1
            moved = time.monotonic()
            failed += rec.status.value == "failed"
            if progress is not None:
                progress.advance(task)
            continue
        now = time.monotonic()
        if now > deadline or now - moved > stall:
            raise TimeoutError(
                f"{len(ids) - at} of {len(ids)} events not final after {timeout:.0f} s (none for {now - moved:.0f} s)"
            )
        time.sleep(0.05)
    return failed


def latency_query(kind: str, item: Item, tag: str, k: int) -> str:
    """Search words that only the ``k``-th latency item (tag ``tag``) holds, besides its topic: the
    conversation's "(tag k)" or the screenshot's "ticket tag-k for user" line."""
    topic = TOPICS[k % len(TOPICS)]
    return f"{topic} {tag} {k}" if kind == "text" else f"{topic} ticket {tag}-{k} {item.user}"


def searchable_latency(rt, folder: Path, kind: str, samples: int, send, search) -> list[tuple[float, float]]:
    """For ``samples`` events of ``kind`` published one at a time: (seconds from the publish to a search (limit
    10) that returns one of the event's observations, of which seconds until the ledger called it final).
    Raises TimeoutError after 120 s."""
    from engram.schemas.search import SearchRequest

    out = []
    for k in range(samples):
        tag = f"lat{uuid.uuid4().hex[:6]}"
        (item,) = chats_and_screens(folder, 1, tag, offset=k, kind=kind)
        req = SearchRequest(query=latency_query(kind, item, tag, k), tenant_id=TENANT, user_id=item.user, limit=10)
        t0 = time.perf_counter()
        (eid,) = publish(rt, [item], send)
        deadline = time.monotonic() + 120
        # the ledger first (cheap), so that searches polling the one store worker do not delay the event's
        # own link and store tasks on it; then searches until one returns the event
        while (rec := rt.ledger.get(eid)) is None or rec.status.value not in FINAL:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{kind} event {eid} not final after 120 s")
            time.sleep(0.02)
        final = time.perf_counter() - t0
        while not any(eid in hit.event_ids for hit in search(req).hits):
            if time.monotonic() > deadline:
                rec = rt.ledger.get(eid)
                raise TimeoutError(
                    f"{kind} event {eid} not searchable after 120 s (ledger: {rec.status.value if rec else None})"
                )
            time.sleep(0.05)
        out.append((time.perf_counter() - t0, final))
    return out


def first_search(search, item: Item) -> float:
    """Seconds of the first search of a fresh worker (or process), for ``item``'s user: the query path's own
    warm-up (its imports and models load on first use), kept apart from the latency samples."""
    from engram.schemas.search import SearchRequest

    t0 = time.perf_counter()
    search(SearchRequest(query=TOPICS[0], tenant_id=TENANT, user_id=item.user, limit=10))
    return time.perf_counter() - t0


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) by linear interpolation (statistics.quantiles, inclusive method); None
    for no values."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def figure(
    mode: str,
    kind: str,
    workers: int,
    events: int,
    failed: int,
    m: dict,
    samples: list[tuple[float, float]],
    first_search_s: float,
) -> Figure:
    """A Figure from the ``measured`` dict ``m`` of a run and its latency samples (``searchable_latency``)."""
    latency = [total for total, _ in samples]
    wall, cpu = m["wall_s"], m["cpu_s"]
    store_cpu, store_task = m.get("store_cpu_s"), m.get("store_task_s")
    return Figure(
        mode,
        kind,
        workers,
        events,
        failed,
        round(wall, 3),
        events / wall,
        round(cpu, 3),
        events / cpu if cpu > 0 else float("nan"),
        round(store_cpu, 3) if store_cpu is not None else None,
        store_cpu / wall if store_cpu is not None else None,
        store_task / wall if store_task is not None else None,
        percentile(latency, 0.5),
        percentile(latency, 0.95),
        len(latency),
        [round(x, 3) for x in latency],
        [round(final, 3) for _, final in samples],
        round(first_search_s, 3),
    )


# --- the two modes ---------------------------------------------------------------------------------------


def run_distributed(
    redis: RedisProcess,
    root: Path,
    kind: str,
    workers: int,
    events: int,
    samples: int,
    progress: Progress,
    round_no: int = 1,
) -> Figure:
    """One configuration on a fresh Redis database and data dir: ``workers`` cpu workers and the store worker
    (``round_no``: which round, for the Figure and the folders' names)."""
    import redis as redis_lib

    from engram.schemas.search import SearchResponse
    from engram.schemas.settings import Settings
    from engram.workers.runtime import reset_runtimes, runtime
    from engram.workers.tasks import Queue

    redis_lib.Redis.from_url(redis.url).flushall()
    tag = f"{kind}{workers}r{round_no}"
    values = dict(broker_url=redis.url, data_dir=str(root / f"data-{tag}"), consolidate_interval_seconds=3600.0)
    settings = Settings(**values)
    threads = model_threads(workers)
    cluster = Cluster.create(
        root / f"cluster-{tag}",
        {**{f"ENGRAM_{k.upper()}": str(v) for k, v in values.items()}, "ENGRAM_MODELS__CPU_THREADS": str(threads)},
    )
    app = producer(settings)
    reset_runtimes()
    rt = runtime(settings)

    def send(event):
        app.send_task("workers.ingest.ingest", args=[event.model_dump(mode="json")], ignore_result=True)

    def search(req):
        return SearchResponse.model_validate(
            app.send_task("workers.query.search", args=[req.model_dump(mode="json")]).get(timeout=60)
        )

    try:
        nodes = cluster.start_distributed(cpu_workers=workers, beat=False, tag=tag, metrics=True)
        cluster.wait_ready(app, nodes, timeout=300)
        warm = make_workload(root / f"warm-{tag}", kind, 2 * workers, f"warm{tag}")
        wait_final(rt, publish(rt, warm, send), timeout=600)
        first = first_search(search, warm[0])
        pids = lambda: [p.pid for p in cluster.procs.values()]  # noqa: E731
        time.sleep(1.0)  # the warm-up's last batch windows close
        with measured(pids, None, None) as idle:  # what the idle cluster burns (broker polls, heartbeats)
            time.sleep(IDLE_SECONDS)
        items = make_workload(root / f"media-{tag}", kind, events, tag)
        task = progress.add_task(f"{kind}, {workers} worker(s), round {round_no}", total=events)
        cpu_nodes = [n for n in nodes if n.startswith("cpu")]
        # a backlog, queued while the cpu workers' ingest consumers are paused; the window times its draining
        on_every_node(app.control.cancel_consumer, Queue.ingest.value, cpu_nodes)
        ids = publish(rt, items, send)
        with measured(
            pids, cluster.procs["store"].pid, cluster.metrics_ports.get("store"), cluster.metrics_ports.values()
        ) as m:
            on_every_node(app.control.add_consumer, Queue.ingest.value, cpu_nodes)
            failed = wait_final(rt, ids, timeout=3600, progress=progress, task=task)
        latency = searchable_latency(rt, root / f"lat-{tag}", kind, samples, send, search)
    except TimeoutError as exc:  # what the workers said, with why
        raise TimeoutError(f"{exc}; exited: {cluster.exited()}\n{cluster.tails()}") from exc
    finally:
        cluster.stop_all()
        app.close()
        reset_runtimes()
    out = figure("distributed", kind, workers, events, failed, m, latency, first)
    out.idle_cpu_share = round(idle["cpu_s"] / idle["wall_s"], 4)
    out.round = round_no
    out.task_cpu_s = m.get("task_cpu_s")
    out.model_threads = threads
    return out


def run_embedded(root: Path, kind: str, events: int, samples: int, progress: Progress) -> Figure:
    """The same in the embedded default: publish and run inline, one event after another, in this process."""
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

    warm = make_workload(root / "warm-emb", kind, 2, f"warmemb{kind}")
    wait_final(rt, publish(rt, warm, send), timeout=600)
    first = first_search(search, warm[0])
    items = make_workload(root / f"media-emb-{kind}", kind, events, f"emb{kind}")
    task = progress.add_task(f"{kind}, embedded", total=events)
    with measured(lambda: [os.getpid()], None, None) as m:
        ids = []
        for it in items:
            ids += publish(rt, [it], send)
            progress.advance(task)
        failed = wait_final(rt, ids, timeout=60)
    latency = searchable_latency(rt, root / f"lat-emb-{kind}", kind, samples, send, search)
    reset_runtimes()
    return figure("embedded", kind, 0, events, failed, m, latency, first)


# --- entry points ----------------------------------------------------------------------------------------


def load_average() -> str:
    """The first three fields of /proc/loadavg (1, 5, 15 minutes)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(
    kinds: Iterable[str],
    workers: Iterable[int],
    events: int,
    samples: int,
    embedded: bool,
    console: Console | None = None,
    rounds: int = 1,
) -> list[Figure]:
    """Every configuration: for each kind, ``rounds`` rounds of the distributed mode with each number of cpu
    workers (interleaved: 1, 2, 4, 1, 2, 4, ..., so a load that comes and goes meets every count alike;
    publish→searchable measured in the first round only), then (with ``embedded``) the embedded default once.
    Starts and stops a redis-server of its own; raises RuntimeError when ``redis-server`` is not installed,
    TimeoutError when events do not finish."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found (scripts/setup.sh installs it)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="engram-bench-") as tmp:
        root = Path(tmp)
        (port,) = free_ports(1)
        redis = RedisProcess(binary, port, root / "redis")
        redis.data.mkdir()
        redis.start()
        try:
            with Progress(console=console or Console(stderr=True), transient=True) as progress:
                for kind in kinds:
                    for r in range(1, rounds + 1):
                        for n in workers:
                            figures.append(
                                run_distributed(redis, root, kind, n, events, samples if r == 1 else 0, progress, r)
                            )
                    if embedded:
                        figures.append(run_embedded(root, kind, events, samples, progress))
        finally:
            redis.stop(signal.SIGKILL)
    return figures


def _median(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def by_workers(figures: list[Figure], kind: str) -> dict[int, list[Figure]]:
    """The distributed figures of ``kind`` by number of cpu workers (ascending), each list in round order."""
    out: dict[int, list[Figure]] = {}
    for f in sorted(
        (f for f in figures if f.mode == "distributed" and f.kind == kind), key=lambda f: (f.workers, f.round)
    ):
        out.setdefault(f.workers, []).append(f)
    return out


def rates(figures: list[Figure], kind: str = "text") -> dict[str, dict[str, float | None]]:
    """``{"<workers>": {"events_per_s", "events_per_cpu_s", "store_busy", "efficiency_vs_fewest"}}`` of the
    distributed figures of ``kind``: the first three each the median over the rounds (the shape of
    ``bench/ingest.py --json``'s ``"distributed"`` section), the last the median of the count's rounds' ratios to
    the fewest workers' row of the same round (``efficiency_ratios``; 1.0 for the fewest; None without a pair)."""
    out: dict[str, dict[str, float | None]] = {}
    groups = by_workers(figures, kind)
    ratios = efficiency_ratios(figures, kind)
    for n, fs in groups.items():
        busy = _median(f.store_busy for f in fs)
        ratio = 1.0 if n == min(groups) else _median(ratios.get(n, []))
        out[str(n)] = {
            "events_per_s": round(_median(f.events_per_s for f in fs), 3),
            "events_per_cpu_s": round(_median(f.events_per_cpu_s for f in fs), 4),
            "store_busy": round(busy, 3) if busy is not None else None,
            "efficiency_vs_fewest": round(ratio, 3) if ratio is not None else None,
        }
    return out


def efficiency_ratios(figures: list[Figure], kind: str = "text") -> dict[int, list[float]]:
    """For each number of cpu workers above the fewest, each round's events per CPU-second ÷ the same round's
    with the fewest workers (a ratio of two rows measured side by side), in round order: ``{workers: [ratio,
    ...]}``. A round missing either row has no ratio."""
    groups = by_workers(figures, kind)
    if len(groups) < 2:
        return {}
    base = {f.round: f.events_per_cpu_s for f in groups[min(groups)]}
    return {
        n: [f.events_per_cpu_s / base[f.round] for f in fs if base.get(f.round)]
        for n, fs in groups.items()
        if n != min(groups)
    }


def distributed_rates(
    events: int = 60,
    workers: Iterable[int] = (1, 2, 4),
    kind: str = "text",
    latency_samples: int = 0,
    rounds: int = 1,
    out=print,
) -> dict[str, dict[str, float | None]]:
    """Run the distributed mode alone (no embedded row, no latency by default) on ``kind`` events, ``rounds``
    rounds, print each row's figures and the targets' checks (``checks``) through ``out``, and return ``rates()``:
    ``{"1": {"events_per_s": .., "events_per_cpu_s": .., "store_busy": .., "efficiency_vs_fewest": 1.0}, "2": ..,
    "4": ..}`` (medians over the rounds of events/s, events per CPU-second of all worker processes, the store
    worker's CPU share of the wall time; each count's median ratio to one worker, round by round). For
    ``bench/ingest.py``; takes minutes (each configuration starts its workers and loads their models)."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    figures = run(kinds=[kind], workers=workers, events=events, samples=latency_samples, embedded=False, rounds=rounds)
    for f in figures:
        out(
            f"  {f.workers} cpu worker(s), round {f.round}: {f.events_per_s:.2f} events/s, "
            f"{f.events_per_cpu_s:.2f} events per CPU-second"
            + (f", store busy {f.store_busy:.0%}" if f.store_busy is not None else "")
        )
        if line := task_cpu_line(f):
            out(f"    {line}")
    for line in checks(figures):
        out(f"  {line}")
    out(f"  {contention_line(machine_contention(), figures, kind)}")
    return rates(figures, kind)


def task_cpu_line(f: Figure) -> str | None:
    """``f``'s CPU seconds by task and the rest of its CPU (no task), one line, or None without them."""
    if not f.task_cpu_s:
        return None
    return (
        "CPU s by task "
        + ", ".join(f"{t.rsplit('.', 1)[-1]} {v:.2f}" for t, v in f.task_cpu_s.items())
        + f"; in no task (consumers, pool parents, polls) {f.cpu_s - sum(f.task_cpu_s.values()):.2f}"
    )


def checks(figures: list[Figure]) -> list[str]:
    """The issue's targets, one line each: events per CPU-second within 10 % of the 1-worker row as workers
    are added, store busy under 50 % at the highest rate, publish-to-searchable p95 ≤ 2 s."""
    lines = []
    for kind in dict.fromkeys(f.kind for f in figures):
        groups = by_workers(figures, kind)
        fewest = min(groups, default=None)
        for n, ratios in efficiency_ratios(figures, kind).items():
            if not ratios:
                continue
            ratio = statistics.median(ratios)
            each = f" (rounds: {', '.join(f'x{r:.2f}' for r in ratios)})" if len(ratios) > 1 else ""
            lines.append(
                f"{kind}: events/CPU-s {n} vs {fewest} worker(s) x{ratio:.2f}"
                f"{' median of the rounds' if len(ratios) > 1 else ''}{each} "
                f"({'ok' if ratio >= 0.9 else 'MISSED'}: at most 10 % lower)"
            )
        medians = rates(figures, kind)
        if medians:
            top = max(medians, key=lambda n: medians[n]["events_per_s"] or 0)
            busy = medians[top]["store_busy"]
            if busy is not None:
                lines.append(
                    f"{kind}: store busy at the highest rate ({top} worker(s), "
                    f"{medians[top]['events_per_s']:.2f} events/s) {busy:.0%} "
                    f"({'ok' if busy < 0.5 else 'MISSED'}: < 50 %)"
                )
        for f in figures:
            if f.kind == kind and f.latency_p95_s is not None:
                lines.append(
                    f"{kind}: publish→searchable p95 {f.mode} {f.workers or ''} {f.latency_p95_s:.2f} s "
                    f"({'ok' if f.latency_p95_s <= 2.0 else 'MISSED'}: ≤ 2 s)"
                )
    return lines
