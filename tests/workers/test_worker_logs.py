"""A real `engram worker` (prefork pool, console log format) on a real redis-server keeps each log line's level:
structlog's info lines from a pool process are info, not the WARNING Celery gives writes to a redirected stderr."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from celery import Celery
from cryptography.fernet import Fernet

from engram.schemas.events import EventStatus, MediaEvent, MediaKind
from engram.schemas.settings import Settings
from engram.workers.app import configure
from engram.workers.stores.ledger import open_ledger

REPO = Path(__file__).resolve().parents[2]


def _event(tenant: str) -> MediaEvent:
    return MediaEvent(
        event_id=uuid.uuid4(),
        tenant_id=tenant,
        user_id="u",
        device_id="d",
        kind=MediaKind.text,
        object_key=f"media/{tenant}/missing",
        sha256=uuid.uuid4().hex * 2,
        size=10,
        mime_type="application/x-ndjson",
        captured_at=datetime.now(UTC),
    )


def test_worker_log_lines_keep_their_level(redis_server, tmp_path):
    import redis

    url = redis_server.rsplit("/", 1)[0] + "/15"
    redis.Redis.from_url(url).flushdb()
    settings = Settings(broker_url=url, data_dir=tmp_path / "data")
    app = Celery("engram-test")
    configure(app, settings)
    ledger = open_ledger(settings)
    final, missing = _event("t1"), _event("t2")
    ledger.record_queued(final)
    ledger.mark(final.event_id, EventStatus.done)  # its ingest logs "event already final" at info
    ledger.record_queued(missing)  # its object is missing: "event failed" at warning
    for event in (final, missing):
        app.send_task("workers.ingest.ingest", args=[event.model_dump(mode="json")], task_id=str(event.event_id))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(
        ENGRAM_BROKER_URL=url, ENGRAM_DATA_DIR=str(tmp_path / "data"), ENGRAM_VAULT_KEY=Fernet.generate_key().decode()
    )
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "engram.api.cli",
                "worker",
                "--role",
                "cpu",
                "--concurrency",
                "1",
                "--loglevel",
                "INFO",
                "--hostname",
                f"logs-{uuid.uuid4().hex[:6]}@%h",
            ],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 180
        while (
            ledger.get(missing.event_id).status is not EventStatus.failed
            or "event already final" not in log.read_text()
        ):
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    lines = log.read_text().splitlines()
    [info] = [ln for ln in lines if "event already final" in ln]
    assert "[info" in info and "process=ForkPoolWorker-1" in info, info  # logged in the pool's child process
    [failed] = [ln for ln in lines if "event failed" in ln]
    assert "[warning" in failed and "stage=ingest" in failed, failed
    assert any("[info" in ln and "ready." in ln for ln in lines)  # Celery's own lines, in the same format
    assert not [ln for ln in lines if "WARNING/" in ln or "[info" in ln and "warning" in ln.split("[info")[0]]
