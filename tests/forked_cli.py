"""``engram`` commands as their own processes without paying their imports each time: a server process imports the
CLI and the libraries a command loads (sentence-transformers, torch, Qdrant Edge: ~13 s of a 15 s ``engram
search`` on a busy machine, the same for every run) once, then forks a child per command. The child is a process of
its own, with the command's environment, its own stdout and stderr, and the exit of a normal interpreter (exit
handlers run: the store's close and its manifest, as in ``python -m engram.api.cli``); it runs the console entry
point, ``engram.api.cli.main.main``, as that command does. What the fork shares is only what was imported.

Used by tests that run many short commands on many data dirs (``tests/workers/stores/test_store_damage.py``).
Run as ``python -m tests.forked_cli MODULE...`` (the modules to import first): one JSON request a line on stdin
({"env", "args", "cwd", "stdout", "stderr", "timeout"}), one JSON answer a line on stdout ({"code"}).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

#: What the server imports before it forks (what every command would import again). Not onnxruntime: it starts
#: threads of its own at import, and a child forked beside them hung at its exit.
PRELOAD = (
    "engram.api.cli.main",
    "engram.api.cli.memory",
    "engram.api.console",
    "engram.api.embedded",
    "engram.api.service.embedded",
    "engram.workers.runtime",
    "engram.workers.query",
    "engram.workers.admin",
    "engram.workers.stores.vectors.edge",
    "qdrant_edge",
    "torch",
    "transformers",
    "sentence_transformers",
)


def _child(request: dict) -> None:
    """In the forked child: become the command (environment, files, argv) and run the CLI's entry point; ends the
    process by SystemExit, so the interpreter exits as a command's does."""
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request.get("cwd") or os.getcwd())
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    signal.alarm(int(request.get("timeout", 600)))  # a hung command dies (SIGALRM) instead of the whole test
    sys.argv = ["engram", *request["args"]]
    from engram.api.cli.main import main  # imported by the server already: this is a look-up

    main()
    sys.exit(0)


def serve(preload: list[str]) -> None:
    """The server: import the modules named in ``preload`` (those missing are left out), then one forked child per
    request line, answered with its exit code (negative: the signal that ended it)."""
    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    # the preloaded objects out of the collector's reach: a child's collections (and its exit's) would otherwise
    # touch, and so copy, every page of them (gc.freeze's documented use before fork; a refused command's exit
    # 3-4 s -> 0.6-1.1 s at load 8-10)
    gc.freeze()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)  # never returns: SystemExit
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)


class ForkedCli:
    """A ``python -m tests.forked_cli`` server (``serve``) and ``run``, which answers like ``subprocess.run`` with
    ``capture_output=True, text=True``. Start it with the environment the commands share (their own ``env`` is
    set in each child); ``close`` ends it."""

    def __init__(self, env: dict[str, str], cwd: Path, scratch: Path, preload: tuple[str, ...] = PRELOAD) -> None:
        """``env``: the server's environment; ``cwd``: the commands' folder; ``scratch``: where their output is
        kept while they run; ``preload``: the modules imported before forking."""
        self.cwd, self.scratch = cwd, scratch
        self._n = 0
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.forked_cli", *preload],
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        ready = self._proc.stdout.readline()
        assert ready and json.loads(ready) == {"ready": True}, "the forked CLI server did not start"

    def run(self, env: dict[str, str], args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
        """Run ``engram ARGS`` in a child with ``env``: its exit code, stdout and stderr."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._n += 1
        out, err = self.scratch / f"cmd{self._n}.out", self.scratch / f"cmd{self._n}.err"
        request = {
            "env": env,
            "args": args,
            "cwd": str(self.cwd),
            "stdout": str(out),
            "stderr": str(err),
            "timeout": timeout,
        }
        started = time.monotonic()
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        answer = self._proc.stdout.readline()
        assert answer, f"the forked CLI server died ({time.monotonic() - started:.0f} s into {args})"
        code = json.loads(answer)["code"]
        texts = [p.read_text(errors="replace") for p in (out, err)]
        for p in (out, err):
            p.unlink()
        return subprocess.CompletedProcess(["engram", *args], code, *texts)

    def close(self) -> None:
        """End the server (its stdin closed: it leaves its loop)."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


if __name__ == "__main__":
    serve(sys.argv[1:])
