"""`engram worker` / `engram beat`: queue sets, the Qdrant local-mode rule, and the celery command lines."""

from __future__ import annotations

import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engram.api.processes import (
    ALL_QUEUES,
    QDRANT_BOUND,
    WorkerConfigError,
    beat_argv,
    plan_worker,
    pool_model_environment,
    prefetch_multiplier,
    start_time_parser_warm_up,
    start_warm_up,
    warm_up_models,
    worker_argv,
)
from engram.schemas.settings import Settings
from engram.workers.tasks import BATCH_FLUSH_EVERY, Task

BROKER = "redis://127.0.0.1:1/0"


def settings(tmp_path: Path, **kw) -> Settings:
    return Settings(data_dir=tmp_path, broker_url=BROKER, **kw)


def test_roles_pick_queue_sets(tmp_path):
    s = settings(tmp_path)
    cpu = plan_worker(s, role="cpu", concurrency=2)
    assert cpu.queues == ("ingest", "perceive.cpu", "perceive.gpu") and cpu.pool == "prefork" and cpu.concurrency == 2
    assert plan_worker(s, role="gpu").queues == ("perceive.gpu",)
    store = plan_worker(s, role="store")
    assert store.queues == QDRANT_BOUND and (store.pool, store.concurrency) == ("solo", 1)
    assert plan_worker(s, role="all").queues == ALL_QUEUES
    assert plan_worker(s, queues=" ingest , perceive.cpu").queues == ("ingest", "perceive.cpu")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"queues": "store,consolidate"}, "not query"),
        ({"queues": "query"}, "exactly one worker serves all of store, consolidate, query"),
        ({"role": "store", "pool": "prefork"}, "--pool prefork is not allowed"),
        ({"role": "all", "pool": "threads"}, "--pool threads is not allowed"),
        ({"role": "store", "concurrency": 2}, "--concurrency 2 is not allowed"),
        ({"queues": "ingest,search"}, "unknown queue 'search'"),
        ({"role": "tpu"}, "unknown role 'tpu'"),
        ({}, "say which queues"),
        ({"role": "cpu", "pool": "solo", "concurrency": 4}, "--pool solo runs one task at a time"),
        ({"role": "cpu", "pool": "gevent"}, "unknown pool"),
    ],
)
def test_refused_on_local_qdrant(tmp_path, kw, message):
    with pytest.raises(WorkerConfigError) as info:
        plan_worker(settings(tmp_path), **kw)
    assert message in str(info.value)


def test_qdrant_server_allows_any_number_of_store_workers(tmp_path):
    s = settings(tmp_path, qdrant_url="http://qdrant:6333")
    plan = plan_worker(s, queues="query", pool="prefork", concurrency=4)
    assert plan.queues == ("query",) and plan.pool == "prefork" and plan.concurrency == 4
    assert plan_worker(s, role="store").pool == "prefork"


def test_no_broker_no_workers(tmp_path):
    with pytest.raises(WorkerConfigError, match="ENGRAM_BROKER_URL is not set"):
        plan_worker(Settings(data_dir=tmp_path), role="cpu")
    with pytest.raises(WorkerConfigError, match="ENGRAM_BROKER_URL is not set"):
        beat_argv(Settings(data_dir=tmp_path))


def test_celery_argv(tmp_path):
    plan = plan_worker(settings(tmp_path), role="store")
    argv = worker_argv(plan, "info", events=True)
    assert argv[:7] == [
        "worker",
        "--queues",
        "store,consolidate,query,maintenance",
        "--pool",
        "solo",
        "--loglevel",
        "INFO",
    ]  # every worker serves beat's sweeps too
    assert argv[argv.index("--hostname") + 1] == f"store-{os.getpid()}@%h"
    # the store worker's batched consumer (store_batched) needs BATCH_FLUSH_EVERY messages prefetched
    assert argv[-5:] == [
        "--concurrency",
        "1",
        "--prefetch-multiplier",
        str(BATCH_FLUSH_EVERY[Task.store_batched]),
        "--task-events",
    ]
    # no gossip or mingle; heartbeats only with task events (Flower reads both)
    assert {"--without-gossip", "--without-mingle"} <= set(argv) and "--without-heartbeat" not in argv
    assert "--without-heartbeat" in worker_argv(plan) and "--task-events" not in worker_argv(plan)
    beat = beat_argv(settings(tmp_path))
    assert beat[:3] == ["beat", "--schedule", str(tmp_path / "beat" / "celerybeat-schedule")]
    assert (tmp_path / "beat").is_dir()


def test_cli_refuses_with_reason(monkeypatch, tmp_path):
    from engram.api.cli.main import app

    monkeypatch.delenv("ENGRAM_BROKER_URL", raising=False)
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(tmp_path))
    runner = CliRunner()
    res = runner.invoke(app, ["worker", "--role", "cpu"])
    assert res.exit_code == 2 and "ENGRAM_BROKER_URL is not set" in res.output
    res = runner.invoke(app, ["beat"])
    assert res.exit_code == 2 and "engram consolidate" in res.output
    monkeypatch.setenv("ENGRAM_BROKER_URL", BROKER)
    monkeypatch.delenv("ENGRAM_QDRANT_URL", raising=False)
    res = runner.invoke(app, ["worker", "--queues", "ingest,store"])
    assert res.exit_code == 2 and "--role store" in res.output


def test_second_store_worker_fails_fast(engram_env, tmp_path):
    """On local mode the store is held by one process: another store worker exits 3 before serving."""
    engram_env.vectors.ensure("observations")  # this process holds the embedded store now (a read of a collection
    # never written opens nothing)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(ENGRAM_DATA_DIR=str(engram_env.settings.data_dir), ENGRAM_BROKER_URL=BROKER)
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "engram"), "worker", "--role", "store"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    assert "only one store worker" in proc.stderr


def test_prefetch_fills_a_batch_only_where_a_batched_consumer_is_served(tmp_path):
    """A worker serving perceive.gpu (embed_batched) or store (store_batched) prefetches enough messages for
    celery-batches to fill a batch (multiplier × concurrency ≥ its BATCH_FLUSH_EVERY); one serving neither keeps
    the app's prefetch of 1, so a long OCR task holds no other message back."""
    cpu = plan_worker(settings(tmp_path), role="cpu", concurrency=2)
    assert prefetch_multiplier(cpu) * 2 == BATCH_FLUSH_EVERY[Task.embed_batched]
    argv = worker_argv(cpu)
    assert argv[argv.index("--prefetch-multiplier") + 1] == str(prefetch_multiplier(cpu))
    ingest_only = plan_worker(settings(tmp_path), queues="ingest,perceive.cpu", concurrency=2)
    assert prefetch_multiplier(ingest_only) == 1 and "--prefetch-multiplier" not in worker_argv(ingest_only)


def test_prefork_pool_processes_share_the_cores_among_their_text_embedders(tmp_path, monkeypatch):
    """A prefork worker's pool processes each run the text embedder on the usable cores divided among them (Celery's
    default: a process per CPU, so one thread each), not a thread per core in every process; a solo worker's one
    process takes every core; a setting given wins. The embedder runs as many batches at once as the setting says."""
    from engram.workers.models import get_model
    from engram.workers.models.embeddings import usable_cores

    cores = usable_cores()
    share = {"ENGRAM_MODELS__EMBEDDING_THREADS": str(max(1, cores // 2))}
    s = settings(tmp_path)
    assert pool_model_environment(plan_worker(s, role="cpu", concurrency=2), s) == share
    default = pool_model_environment(plan_worker(s, role="cpu"), s)
    assert default == {"ENGRAM_MODELS__EMBEDDING_THREADS": str(max(1, cores // (os.cpu_count() or 1)))}
    assert pool_model_environment(plan_worker(s, role="store"), s) == {}
    for given in ({"cpu_threads": 3}, {"embedding_threads": 3}):
        s = settings(tmp_path, models=given)
        assert pool_model_environment(plan_worker(s, role="cpu", concurrency=2), s) == {}

    monkeypatch.setenv("ENGRAM_MODELS__EMBEDDING_THREADS", "1")
    from engram.schemas.settings import get_settings

    model = get_model("embedding", get_settings())
    model.load()
    assert model.session.runs == 1


def test_workers_that_embed_load_the_text_embedder_as_their_pool_processes_start(tmp_path):
    """A prefork worker's children each load it as they start, a solo worker itself; a worker whose queues
    embed nothing loads nothing (the log check on real workers: tests/integration/test_distributed.py)."""
    from celery.signals import worker_process_init, worker_ready

    def receivers(signal) -> set[str]:  # Celery keeps a receiver connected with weak=False as itself
        return {getattr(r() if isinstance(r, weakref.ref) else r, "__name__", "") for _, r in signal.receivers}

    try:
        assert warm_up_models(plan_worker(settings(tmp_path), role="cpu")) is worker_process_init
        assert "start_time_parser_warm_up" not in receivers(worker_process_init)  # the cpu worker serves no search
        assert warm_up_models(plan_worker(settings(tmp_path), role="store")) is worker_ready
        assert {"start_warm_up", "start_time_parser_warm_up"} <= receivers(worker_ready)  # the store worker does
        assert warm_up_models(plan_worker(settings(tmp_path), queues="ingest,perceive.cpu")) is None
    finally:
        for signal in (worker_process_init, worker_ready):
            signal.disconnect(start_warm_up)
            signal.disconnect(start_time_parser_warm_up)


def test_a_search_worker_reads_a_time_expression_as_it_starts():
    """``load_time_parser`` (on a query worker's warm-up thread) imports dateparser and resolves one expression, and
    logs it, so the first search that names a time does not wait for that; in a fresh process, as a worker's."""
    code = (
        "import sys; from engram.api.processes import load_time_parser; "
        "print('before', 'dateparser' in sys.modules); load_time_parser(); "
        "print('after', 'dateparser.search' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert out.returncode == 0, out.stderr
    assert "before False" in out.stdout and "after True" in out.stdout
    assert "time-expression parser loaded" in out.stdout + out.stderr


def test_an_unrecoverable_error_asks_for_a_restart_a_shutdown_does_not():
    """Celery's "Unrecoverable error" (CRITICAL on ``celery.worker``) with no shutdown asked for means start
    again; a signal's shutdown (``worker_shutting_down``) first means stop."""
    import logging

    from celery.signals import worker_shutting_down

    from engram.api.processes import UnrecoverableWatch

    with UnrecoverableWatch() as watch:
        logging.getLogger("celery.worker").critical("Unrecoverable error: %r", AttributeError("hostname"))
    assert watch.restart and "AttributeError" in (watch.error or "")
    with UnrecoverableWatch() as asked:
        worker_shutting_down.send(sender="test", sig="SIGTERM", how="Warm", exitcode=0)
        logging.getLogger("celery.worker").critical("Unrecoverable error: %r", RuntimeError("while stopping"))
    assert not asked.restart
    with UnrecoverableWatch() as quiet:
        logging.getLogger("celery.worker").critical("something else")
    assert not quiet.restart
    logging.getLogger("celery.worker").critical("Unrecoverable error: after the run")  # the watch is detached
    assert quiet.error is None


def test_restarts_back_off_and_a_healthy_run_resets_them():
    from engram.api.processes import MAX_RESTART_DELAY_SECONDS, restart_delay

    assert [restart_delay(n, 5.0) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert restart_delay(7, 3600.0) == 1.0 and MAX_RESTART_DELAY_SECONDS == 60


def test_a_restart_runs_the_same_command_again_in_the_same_process():
    """``restart_worker`` execs the process's own command line (same pid), counting restarts in the environment."""
    code = (
        "import logging, os\n"
        "from engram.api.processes import RESTARTS_ENV, UnrecoverableWatch, restart_worker\n"
        "print('run', os.getpid(), os.environ.get(RESTARTS_ENV), flush=True)\n"
        "if os.environ.get(RESTARTS_ENV) is None:\n"
        "    with UnrecoverableWatch() as watch:\n"
        "        logging.getLogger('celery.worker').critical('Unrecoverable error: %r', OSError('gone'))\n"
        "    restart_worker(watch)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "ENGRAM_WORKER_RESTARTS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    runs = [line.split() for line in out.stdout.splitlines() if line.startswith("run ")]
    assert [r[2] for r in runs] == ["None", "1"] and runs[0][1] == runs[1][1]  # once more, same pid
    assert "starting it again" in out.stderr + out.stdout
