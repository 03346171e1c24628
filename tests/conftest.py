"""Shared fixtures: an isolated embedded data dir per test, and the real evaluation data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import (  # noqa: F401  (real servers for tests, see tests/servers.py)
    redis_server,
    restartable_redis,
    seaweedfs_s3,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.pop("ENGRAM_BROKER_URL", None)  # tests of the embedded default run eagerly
os.environ.setdefault("ENGRAM_TIMEZONE", "UTC")  # times without a zone read the same on every machine
if os.environ.get("PYTEST_XDIST_WORKER"):  # the fast tier's parallel workers (pytest -n 2): execnet gives them
    # COLUMNS=80 and LINES=24, which narrow engram's tables in this process; without a terminal they are 180 wide,
    # as in a run without -n
    for var in ("COLUMNS", "LINES"):
        os.environ.pop(var, None)

REPO = Path(__file__).resolve().parent.parent


def pytest_sessionfinish(session, exitstatus):
    """Kill the multiprocessing children a test left running, and name them: at interpreter exit multiprocessing
    joins every non-daemon child, so one hung child kept pytest from ever exiting (CI of 2026-11-30 timed out
    after its last test so, on a forked child of test_sqlite_wal that had deadlocked)."""
    import multiprocessing

    for child in multiprocessing.active_children():
        child.kill()
        child.join(timeout=10)
        print(f"\nconftest: killed {child.name} (pid {child.pid}), left running by a test", file=sys.stderr)


@pytest.fixture(scope="session", autouse=True)
def eager_process_app():
    """The process-wide Celery app (``workers.app.app``) takes its settings from the environment when its
    configuration is first read: read it here, before any test puts a broker in the environment (the cluster
    tests do), so it is the embedded default's, eager, for the whole run in any order of the tests. Run alone
    before the embedded tests, a cluster test had left it sending their tasks to its broker."""
    from engram.workers.app import app

    assert app.conf.task_always_eager, "ENGRAM_BROKER_URL is set: the tests of the embedded default need none"


@pytest.fixture
def engram_env(tmp_path, monkeypatch):
    """A fresh embedded default under ``tmp_path/data``; yields its Runtime and closes it afterwards."""
    from engram.workers.runtime import reset_runtimes, runtime

    monkeypatch.setenv("ENGRAM_DATA_DIR", str(tmp_path / "data"))
    for var in ("ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT", "ENGRAM_BROKER_URL"):
        monkeypatch.delenv(var, raising=False)
    _no_lingering_cli_service()
    reset_runtimes()
    yield runtime()
    _no_lingering_cli_service()
    reset_runtimes()


def _no_lingering_cli_service() -> None:
    """An in-process CLI command of an earlier test leaves the process's EmbeddedService holding its store (an
    earlier test's data dir) and a watcher thread for up to 300 s: released here, before and after a test that
    opens its own store."""
    embedded = sys.modules.get("engram.api.embedded")
    if embedded is not None:
        embedded.close_embedded_service()


def cli_env(root: Path, **extra: str) -> dict[str, str]:
    """A bare environment for ``engram`` run as a new process: HOME under ``root``, models offline, wide output, the
    store waited for up to 60 s, plus ``extra`` (e.g. ``ENGRAM_TIMEZONE="UTC"``)."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(root),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "COLUMNS": "300",
        "ENGRAM_STORE_WAIT_SECONDS": "60",
        **extra,
    }


def run_cli(env: dict[str, str], data: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m engram.api.cli --data-dir DATA ARGS`` in a new process with ``env``; output captured, 300 s."""
    return subprocess.run(
        [sys.executable, "-m", "engram.api.cli", "--data-dir", str(data), *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def eval_data_dir() -> Path:
    """``ENGRAM_EVAL_DATA`` or ``../shared/data`` from the repository root."""
    return Path(os.environ.get("ENGRAM_EVAL_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def eval_data() -> Path:
    """The real evaluation data folder; skips (with the reason) when it is absent."""
    path = eval_data_dir()
    if not (path / "README.md").exists():
        pytest.skip(f"real evaluation data not found at {path} (set ENGRAM_EVAL_DATA)")
    return path


def run_forked(fn) -> bytes:
    """Run ``fn() -> bytes`` in a child of this process made by a bare ``os.fork`` (not multiprocessing's: its
    after-fork hooks close the broker connections earlier tests left in the pytest process, on sockets the parent
    still shares, and one such close waited forever on a redis reply) and return what it returned. Raises
    AssertionError when the child does not exit 0 (``fn`` raised: it returns nothing then)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            os.write(write, fn())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        out = pipe.read()
    assert os.waitpid(pid, 0)[1] == 0, "the forked child failed"
    return out
