"""A distributed-mode cluster of real processes for integration tests: ``engram worker`` and ``engram beat``
started as a user starts them (the venv's ``engram`` command), on a test Redis and a shared data dir.

Each process runs in its own session (process group), so ``kill(name, SIGKILL)`` takes down a prefork
worker together with its pool children, as when a machine or container dies. Logs go to files under
``<root>/logs``; ``tail(name)`` shows them when an assertion fails.

Shared helpers of the distributed tests: ``start_distributed`` (two cpu workers, the store worker, beat),
``producer`` (a Celery app of the test process for a cluster, apart from the eager process-wide one),
``wait_quiet`` / ``drain_consolidation`` (let the cluster settle), ``local_store`` (read Qdrant's local
mode once the store worker has stopped) and ``serve_api`` (the HTTP API in a thread).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.fernet import Fernet

ENGRAM = str(Path(sys.executable).parent / "engram")


@dataclass
class Cluster:
    """Worker and beat processes sharing ``env`` (ENGRAM_BROKER_URL, ENGRAM_DATA_DIR, ...)."""

    root: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    argv: dict[str, list[str]] = field(default_factory=dict)
    metrics_ports: dict[str, int] = field(default_factory=dict)

    @classmethod
    def create(cls, root: Path, settings_env: dict[str, str]) -> Cluster:
        """A cluster whose processes see the current environment without any ENGRAM_ variable, plus
        ``settings_env``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
        env.update(
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
            PYTHONUNBUFFERED="1",
            **settings_env,
        )
        env.setdefault("ENGRAM_VAULT_KEY", Fernet.generate_key().decode())  # distributed workers need one
        (root / "logs").mkdir(parents=True, exist_ok=True)
        return cls(root=root, env=env)

    def log_path(self, name: str) -> Path:
        """The file that collects the process's stdout and stderr."""
        return self.root / "logs" / f"{name}.log"

    def start(self, name: str, args: list[str]) -> subprocess.Popen:
        """Run ``engram <args>`` as process ``name`` (appending to its log)."""
        argv = [ENGRAM, *args]
        with open(self.log_path(name), "ab") as log:
            log.write(f"\n=== {' '.join(argv)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                argv,
                env=self.env,
                cwd=self.root,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.procs[name], self.argv[name] = proc, args
        return proc

    def restart(self, name: str) -> subprocess.Popen:
        """Start ``name`` again with the same arguments."""
        return self.start(name, self.argv[name])

    def wait_ready(self, app, nodes: Iterable[str], timeout: float = 90.0) -> None:
        """Until every Celery node in ``nodes`` answers a ping through the broker."""
        want = set(nodes)
        last: Exception | None = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.tail(name)}")
            try:
                replies = app.control.ping(timeout=1.0) or []
            except Exception as exc:  # a broker connection made before a broker restart: ask again
                last, replies = exc, []
                time.sleep(0.5)
            if want <= {node for reply in replies for node in reply}:
                return
        raise TimeoutError(f"workers {sorted(want)} not ready after {timeout:.0f} s ({last!r}):\n{self.tails()}")

    def kill(self, name: str, sig: int = signal.SIGKILL, timeout: float = 60.0) -> int:
        """Send ``sig`` to the process group of ``name`` and wait for its leader to exit; returns its code.
        SIGTERM is Celery's warm shutdown (running tasks finish); SIGKILL loses them (redelivered)."""
        proc = self.procs[name]
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait(timeout=10)
        finally:
            if sig == signal.SIGKILL:  # the leader is gone; make sure no pool child outlives it
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def stop_all(self) -> None:
        """Warm-stop every process still running (SIGKILL after a grace period)."""
        for name, proc in self.procs.items():
            if proc.poll() is None:
                self.kill(name, signal.SIGTERM, timeout=30)

    def tail(self, name: str, chars: int = 4000) -> str:
        """The end of the log of ``name``."""
        path = self.log_path(name)
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"

    def tails(self, chars: int = 3000) -> str:
        """The ends of every log, for assertion messages."""
        return "\n".join(f"--- {name}\n{self.tail(name, chars)}" for name in self.procs)

    # --- the standard distributed layout, and its state ----------------------------------------------

    def start_distributed(
        self,
        cpu_workers: int = 2,
        cpu_concurrency: int = 1,
        beat: bool = True,
        tag: str = "test",
        metrics: bool = False,
    ) -> list[str]:
        """Start DESIGN.md's layout on Qdrant's local mode as a user starts it: ``cpu_workers`` processes of
        ``engram worker --role cpu`` (prefork, ``cpu_concurrency`` children each), the one store worker
        (``--role store --pool solo``) and, with ``beat``, ``engram beat``. With ``metrics`` each worker
        serves /metrics on a free port (``metrics_ports[name]``). Returns the Celery node names
        (``cpu1@<tag>``, ..., ``store@<tag>``) for ``wait_ready``."""
        from tests.servers import free_ports

        def metrics_args(name: str) -> list[str]:
            if not metrics:
                return []
            (self.metrics_ports[name],) = free_ports(1)
            return ["--metrics-port", str(self.metrics_ports[name])]

        nodes = [f"store@{tag}"]
        self.start(
            "store",
            [
                "worker",
                "--role",
                "store",
                "--pool",
                "solo",
                "--hostname",
                nodes[0],
                "--loglevel",
                "INFO",
                *metrics_args("store"),
            ],
        )
        for i in range(1, cpu_workers + 1):
            nodes.append(f"cpu{i}@{tag}")
            self.start(
                f"cpu{i}",
                [
                    "worker",
                    "--role",
                    "cpu",
                    "--concurrency",
                    str(cpu_concurrency),
                    "--hostname",
                    nodes[-1],
                    "--loglevel",
                    "INFO",
                    *metrics_args(f"cpu{i}"),
                ],
            )
        if beat:
            self.start("beat", ["beat", "--loglevel", "INFO"])
        return nodes

    def exited(self) -> dict[str, int]:
        """Processes that are no longer running, with their exit codes."""
        return {name: proc.returncode for name, proc in self.procs.items() if proc.poll() is not None}

    def count_in_logs(self, text: str, prefix: str = "") -> int:
        """How many times ``text`` occurs in the logs of the processes whose name starts with ``prefix``."""
        return sum(
            self.log_path(n).read_text(errors="replace").count(text)
            for n in self.procs
            if n.startswith(prefix) and self.log_path(n).exists()
        )


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """The samples of a Prometheus /metrics page: {(sample name, sorted label items): value}."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url, timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(samples: dict[tuple[str, tuple], float], name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(v for (n, items), v in samples.items() if n == name and set(labels.items()) <= set(items))


QUEUES = ("ingest", "perceive.cpu", "perceive.gpu", "store", "consolidate", "query")


def producer(settings):
    """A Celery app configured from ``settings`` for the test process (pings, ``send_task``, results),
    apart from the process-wide ``workers.app.app``, which keeps running the rest of the suite eagerly."""
    from celery import Celery

    from engram.workers.app import configure

    app = Celery(f"engram-test-{os.getpid()}")
    configure(app, settings)
    return app


def broker_state(redis_url: str) -> tuple[dict[str, int], int]:
    """(messages waiting per non-empty queue, deliveries not yet acknowledged) on a Redis broker."""
    import redis

    from engram.workers.fairness import queue_depth

    r = redis.Redis.from_url(redis_url)
    try:
        return {q: n for q in QUEUES if (n := queue_depth(r, q))}, r.hlen("unacked")  # every priority step
    finally:
        r.close()


def wait_quiet(redis_url: str, timeout: float, cluster: Cluster | None = None) -> None:
    """Until no task waits in any queue and none is delivered but unacknowledged (retries with a countdown
    included: a worker holds them unacknowledged)."""
    deadline = time.monotonic() + timeout
    while True:
        waiting, unacked = broker_state(redis_url)
        if not waiting and not unacked:
            return
        if time.monotonic() > deadline:
            logs = f"\n{cluster.tails()}" if cluster else ""
            raise AssertionError(
                f"broker not quiet after {timeout:.0f} s: queued {waiting}, unacked {unacked}"
                f"{unacked_report(redis_url)}{logs}"
            )
        time.sleep(0.5)


def unacked_report(redis_url: str, limit: int = 20) -> str:
    """The deliveries not yet acknowledged on a Redis broker, for a failure message: each one's task, queue,
    seconds since it was delivered, ETA and retries (kombu's ``unacked`` hash and ``unacked_index`` scores,
    its default key names), and how long kombu's restore lock (``unacked_mutex``) is still held, if it is."""
    import json

    import redis

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        lines, now = [], time.time()
        for tag, payload in list(r.hgetall("unacked").items())[:limit]:
            try:
                message, _, routing_key = json.loads(payload)
                headers = message.get("headers") or {}
                task, eta, retries = headers.get("task"), headers.get("eta"), headers.get("retries")
            except (ValueError, TypeError, AttributeError):
                task = eta = retries = routing_key = "?"
            delivered = r.zscore("unacked_index", tag)
            age = f"{now - delivered:.0f} s ago" if delivered is not None else "not in the index"
            lines.append(f"  {task} ({routing_key}) delivered {age}, eta {eta}, retries {retries}")
        mutex = r.ttl("unacked_mutex")
        held = f"\nkombu's restore lock held for {mutex} s more" if mutex and mutex > 0 else ""
        return "\nunacknowledged:\n" + "\n".join(lines) + held
    except redis.RedisError as exc:
        return f"\n(unacknowledged deliveries not readable: {exc})"
    finally:
        r.close()


def drain_consolidation(app, timeout: float = 120.0, cluster: Cluster | None = None) -> None:
    """Run ``consolidate_due`` through the consolidate queue (``app``: see ``producer``) until no user has
    unconsolidated observations (FIFO on the single store worker: the consolidations it started ran first)."""
    deadline = time.monotonic() + timeout
    while pending := app.send_task("workers.consolidate.consolidate_due").get(timeout=60):
        assert time.monotonic() < deadline, f"consolidation did not settle: {pending} users pending" + (
            f"\n{cluster.tails()}" if cluster else ""
        )
        time.sleep(0.5)


@contextmanager
def local_store(data_dir: Path) -> Iterator:
    """The embedded VectorStore (Qdrant Edge) under ``data_dir`` (open it only once the store worker has
    stopped: one process at a time), closed on exit."""
    from engram.workers.stores.vectors import EdgeVectorStore

    store = EdgeVectorStore(data_dir / "vectors")
    try:
        yield store
    finally:
        store.close()


@contextmanager
def serve_api(settings, timeout: float = 20.0) -> Iterator[str]:
    """The API (``api.app.create_app(settings)``) served by uvicorn in a thread on a free port, as
    ``engram serve`` serves it; yields its base URL and stops it on exit."""
    import uvicorn

    from engram.api.http.app import create_app
    from tests.servers import free_ports

    (port,) = free_ports(1)
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
