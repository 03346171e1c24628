"""A distributed-mode cluster of real processes for integration tests: ``engram worker`` and ``engram beat``
started as a user starts them (the venv's ``engram`` command), on a test Redis and a shared data dir.

Each process runs in its own session (process group), so ``kill(name, SIGKILL)`` takes down a prefork
worker together with its pool children, as when a machine or container dies. Logs go to files under
``<root>/logs``; ``tail(name)`` shows them when an assertion fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ENGRAM = str(Path(sys.executable).parent / "engram")


@dataclass
class Cluster:
    """Worker and beat processes sharing ``env`` (ENGRAM_BROKER_URL, ENGRAM_DATA_DIR, ...)."""

    root: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    argv: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def create(cls, root: Path, settings_env: dict[str, str]) -> Cluster:
        """A cluster whose processes see the current environment without any ENGRAM_ variable, plus
        ``settings_env``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                   PYTHONUNBUFFERED="1", **settings_env)
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
            proc = subprocess.Popen(argv, env=self.env, cwd=self.root, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs[name], self.argv[name] = proc, args
        return proc

    def restart(self, name: str) -> subprocess.Popen:
        """Start ``name`` again with the same arguments."""
        return self.start(name, self.argv[name])

    def wait_ready(self, app, nodes: Iterable[str], timeout: float = 90.0) -> None:
        """Until every Celery node in ``nodes`` answers a ping through the broker."""
        want = set(nodes)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.tail(name)}")
            replies = app.control.ping(timeout=1.0) or []
            if want <= {node for reply in replies for node in reply}:
                return
        raise TimeoutError(f"workers {sorted(want)} not ready after {timeout:.0f} s:\n{self.tails()}")

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
