"""Fixtures of the API tests: the API on a real redis-server (broker, ledger, keys) and a real SeaweedFS S3.

The API builds its own Celery producer from its settings (``api.routes.deps.build_services``), so nothing here
touches the process-wide Celery app: the rest of the suite keeps running eagerly. The API tests use
their own Redis databases: ``API_DB`` has no worker (messages stay in the ``ingest`` list, so tests can
count them); ``WORKER_DB`` is served by a real Celery worker process (``query_worker``).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from engram.schemas.settings import Settings
from tests.servers import free_ports

API_DB = 11
WORKER_DB = 12
REPO = Path(__file__).resolve().parents[2]


def db_url(redis_url: str, db: int) -> str:
    """``redis_url`` with its database number replaced by ``db``."""
    return redis_url.rsplit("/", 1)[0] + f"/{db}"


def make_settings(redis_url: str, s3, data_dir: Path, db: int = API_DB, **overrides) -> Settings:
    """Distributed-mode settings on the test servers (bucket ``engram-api-test``)."""
    values = dict(
        broker_url=db_url(redis_url, db),
        s3_endpoint=s3.endpoint,
        s3_access_key=s3.access_key,
        s3_secret_key=s3.secret_key,
        s3_bucket="engram-api-test",
        data_dir=data_dir,
        max_object_bytes=5_000_000,
        api_max_body_bytes=64 * 1024,
        api_public_docs=True,
        api_rate_limit="",
    )  # rate limits: tests/api/test_ratelimit.py
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="session")
def api_settings(redis_server, seaweedfs_s3, tmp_path_factory) -> Settings:
    """Settings of the API under test (no worker consumes its queues)."""
    return make_settings(redis_server, seaweedfs_s3, tmp_path_factory.mktemp("api-data"))


@pytest.fixture(scope="session")
def api_redis(api_settings):
    """A redis-py client on the API's database (keys, claims, ledger, and the broker's queue lists)."""
    import redis

    r = redis.Redis.from_url(api_settings.broker_url, decode_responses=True)
    yield r
    r.close()


@pytest.fixture(scope="session")
def api_keys(api_redis) -> dict[str, str]:
    """One API key per test tenant: ``acme`` and ``globex``."""
    from engram.api.http.keys import create_key

    return {t: create_key(api_redis, t) for t in ("acme", "globex")}


def queue_length(r, queue: str = "ingest") -> int:
    """Messages waiting in a Celery queue on the Redis broker, every priority step (``workers.fairness``)."""
    from engram.workers.fairness import queue_depth

    return queue_depth(r, queue)


def png_bytes(seed: int = 0, size: int = 48) -> bytes:
    """A small real PNG whose content depends on ``seed``."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def wav_bytes(seconds: float = 0.5, freq: float = 440.0) -> bytes:
    """A short mono 16 kHz sine tone as WAV."""
    import wave

    import numpy as np

    t = np.arange(int(16_000 * seconds)) / 16_000
    pcm = (np.sin(2 * np.pi * freq * t) * 8000).astype("<i2").tobytes()
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes(pcm)
    return buf.getvalue()


def chat_jsonl(lines: list[tuple[str, str]], session: str = "s1") -> bytes:
    """A conversation file (JSONL of engram's conversation record) from (speaker, text) pairs."""
    start = datetime(2024, 5, 1, 9, tzinfo=UTC).timestamp()
    recs = [
        {
            "message_id": f"{session}-{i}",
            "session_id": session,
            "speaker": who,
            "text": text,
            "timestamp": datetime.fromtimestamp(start + 60 * i, UTC).isoformat(),
        }
        for i, (who, text) in enumerate(lines)
    ]
    return "\n".join(json.dumps(r) for r in recs).encode() + b"\n"


@contextmanager
def served(settings: Settings) -> Iterator[str]:
    """The API for ``settings`` served by uvicorn in a thread on a free port; yields its base URL."""
    import uvicorn

    from engram.api.http.app import create_app

    (port,) = free_ports(1)
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def api_server(api_settings) -> Iterator[str]:
    """The API served by uvicorn in a thread on a free port (``served``); yields its base URL."""
    with served(api_settings) as url:
        yield url


@contextmanager
def worker_process(settings: Settings, s3, **env: str) -> Iterator[None]:
    """A real Celery worker process (``celery -A engram.workers.app worker --pool solo``) serving every queue for
    ``settings`` (its broker, the S3 server ``s3`` and its data dir, Qdrant's local mode), with ``env`` added
    to its environment; terminated on exit. Its log is ``<data dir>/worker.log``."""
    data = settings.data_dir
    base = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    base.update(
        ENGRAM_BROKER_URL=settings.broker_url,
        ENGRAM_S3_ENDPOINT=s3.endpoint,
        ENGRAM_S3_ACCESS_KEY=s3.access_key,
        ENGRAM_S3_SECRET_KEY=s3.secret_key,
        ENGRAM_S3_BUCKET=settings.s3_bucket,
        ENGRAM_DATA_DIR=str(data),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        **env,
    )
    base.setdefault("ENGRAM_VAULT_KEY", Fernet.generate_key().decode())  # distributed workers need one
    queues = "ingest,perceive.cpu,perceive.gpu,store,consolidate,query"
    with open(data / "worker.log", "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "engram.workers.app",
                "worker",
                "-Q",
                queues,
                "--pool",
                "solo",
                "-n",
                f"apitest-{uuid.uuid4().hex[:6]}@%h",
                "--without-gossip",
                "--without-mingle",
                "-l",
                "warning",
            ],
            cwd=REPO,
            env=base,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture(scope="module")
def query_worker(redis_server, seaweedfs_s3, tmp_path_factory) -> Iterator[Settings]:
    """A real Celery worker process serving every queue on ``WORKER_DB`` (``worker_process``), with Qdrant's
    local mode in a temporary data dir; yields the settings of an API that talks to it."""
    settings = make_settings(redis_server, seaweedfs_s3, tmp_path_factory.mktemp("worker-data"), db=WORKER_DB)
    with worker_process(settings, seaweedfs_s3):
        yield settings
