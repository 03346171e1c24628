"""``engram backup`` / ``engram restore`` of the distributed mode on the test cluster: redis-server (broker, result
backend, ledger), SeaweedFS (objects) and ``engram worker`` processes (the store worker owning the Qdrant Edge
shards). Events are ingested, consolidated and searched; the cluster is backed up into a folder, then a second,
empty cluster (a new Redis database, bucket and data dir) is restored from it and answers the same searches with
the same ids in the same order. Restoring into it again is refused (not empty); a second backup of the first
cluster writes only what changed."""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from engram.schemas.events import EventStatus
from engram.schemas.memories import MemoryType
from engram.schemas.search import SearchRequest
from tests.cluster import ENGRAM, Cluster, drain_consolidation, producer, wait_quiet
from tests.workload import USERS, chats_and_screens

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

TENANT = "keep"
QUERIES = ["quarterly budget review", "flight to Lisbon", "dentist appointment", "kubernetes upgrade plan"]
FINAL = (EventStatus.done, EventStatus.skipped, EventStatus.failed)


def _env(redis_url: str, s3, data_dir: Path, vault_key: str) -> dict[str, str]:
    return {
        "ENGRAM_BROKER_URL": redis_url,
        "ENGRAM_DATA_DIR": str(data_dir),
        "ENGRAM_TENANT": TENANT,
        "ENGRAM_S3_ENDPOINT": s3.endpoint,
        "ENGRAM_S3_ACCESS_KEY": s3.access_key,
        "ENGRAM_S3_SECRET_KEY": s3.secret_key,
        "ENGRAM_S3_BUCKET": f"keep-{uuid.uuid4().hex[:12]}",
        "ENGRAM_VAULT_KEY": vault_key,
        "ENGRAM_CONSOLIDATE_INTERVAL_SECONDS": "3",
    }


def _searches(app) -> dict[str, list[str]]:
    """Every (query, user, memory types)'s hit ids, through the store worker's query queue."""
    out = {}
    for user in USERS:
        for q in QUERIES:
            for types in ([MemoryType.observation], [MemoryType.episodic]):
                req = SearchRequest(query=q, tenant_id=TENANT, user_id=user, memory_types=types, limit=10)
                got = app.send_task("workers.query.search", args=[req.model_dump(mode="json")]).get(timeout=120)
                out[f"{user}|{q}|{types[0].value}"] = [str(h["id"]) for h in got["hits"]]
    return out


def _engram(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [ENGRAM, *args], env=cluster.env, capture_output=True, text=True, timeout=600, cwd=cluster.root
    )


def _clean_redis(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


def _ingest(cluster: Cluster, app, tmp_path: Path, monkeypatch) -> None:
    """Publish a few chats and screenshots into the cluster (from this process, with its settings) and wait for
    them to be final and consolidated."""
    from engram.api.local import classify, publish_file
    from engram.workers.runtime import reset_runtimes, runtime

    for k, v in cluster.env.items():
        if k.startswith("ENGRAM_"):
            monkeypatch.setenv(k, v)
    reset_runtimes()
    rt = runtime()
    events = []
    for it in chats_and_screens(tmp_path / "items", 6, "keep"):
        event = publish_file(rt, classify(it.path), TENANT, it.user, it.device, it.captured_at, it.app, it.window)
        app.send_task("workers.ingest.ingest", args=[event.model_dump(mode="json")])
        events.append(event.event_id)
    deadline = time.monotonic() + 300
    while any((r := rt.ledger.get(e)) is None or r.status not in FINAL for e in events):
        assert time.monotonic() < deadline, cluster.tails()
        time.sleep(0.5)
    assert all(rt.ledger.get(e).status is EventStatus.done for e in events)
    wait_quiet(cluster.env["ENGRAM_BROKER_URL"], 120, cluster)
    drain_consolidation(app, cluster=cluster)
    reset_runtimes()


def _killed_then_again(cluster: Cluster, dest: Path, paths: list[str]) -> None:
    """``kill -9`` of a backup while it runs, then the same command: one complete snapshot, of the same objects,
    Redis keys and collections as the first backup's (``paths``)."""
    proc = subprocess.Popen(
        [ENGRAM, "backup", str(dest)],
        env=cluster.env,
        cwd=cluster.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not (dest / "packs").is_dir() and proc.poll() is None:  # under way: its repository made
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.kill()
    proc.wait(timeout=30)
    run = _engram(cluster, "backup", str(dest), "--json")
    assert run.returncode == 0, run.stderr[-3000:] + cluster.tails()
    snapshots = sorted((dest / "snapshots").glob("*.json.gz"))
    assert len(snapshots) == 1, snapshots
    got = [f["path"] for f in json.loads(gzip.decompress(snapshots[0].read_bytes()))["files"]]

    def parts(names: list[str]) -> tuple[list[str], set[str]]:  # the store's files change as searches open it
        return [n for n in names if not n.startswith("vectors/")], {
            n.split("/")[1] for n in names if n.startswith("vectors/")
        }

    assert parts(got) == parts(paths)


class _Stop(Exception):
    pass


def _interrupted_restore(cluster: Cluster, src: str, monkeypatch) -> None:
    """A restore stopped part way (after the store worker restored the store, at its first object), as a killed
    command leaves it: the marker key stays in Redis, the store is written, the Redis keys are not."""
    import redis

    from engram.api.cli.keep import _ask_store_worker, _s3_options
    from engram.schemas.settings import Settings
    from engram.workers.stores.backup import open_repository
    from engram.workers.stores.cluster_backup import RESTORE_KEY, restore_cluster

    for k, v in cluster.env.items():
        if k.startswith("ENGRAM_"):
            monkeypatch.setenv(k, v)
    settings = Settings()

    def stop(phase: str, done: int, total: int) -> None:
        if phase == "objects":
            raise _Stop

    repo = open_repository(src, create=False, s3=_s3_options(None))
    try:
        with pytest.raises(_Stop):
            restore_cluster(settings, repo, _ask_store_worker(settings), None, _s3_options(None), progress=stop)
    finally:
        repo.close()
    r = redis.Redis.from_url(settings.broker_url, decode_responses=True)
    assert r.get(RESTORE_KEY) and not list(r.scan_iter(match="engram:*"))


def test_a_cluster_backed_up_and_restored_into_an_empty_one_answers_the_same(
    redis_server, seaweedfs_s3, tmp_path, monkeypatch
):
    from engram.schemas.settings import Settings

    base = redis_server.rsplit("/", 1)[0]
    first_url, second_url = f"{base}/3", f"{base}/4"  # databases no other test uses
    _clean_redis(first_url)
    _clean_redis(second_url)
    vault_key = Fernet.generate_key().decode()
    dest = tmp_path / "backups"
    s3_dest = f"s3://keep-backups-{uuid.uuid4().hex[:12]}/cluster"

    first = Cluster.create(tmp_path / "first", _env(first_url, seaweedfs_s3, tmp_path / "first" / "data", vault_key))
    app = producer(Settings(broker_url=first_url))
    try:
        first.wait_ready(app, first.start_distributed(cpu_workers=1, beat=False, tag="keep1"), timeout=180)
        _ingest(first, app, tmp_path, monkeypatch)
        before = _searches(app)
        assert sum(map(len, before.values())) > 20, before
        run = _engram(first, "backup", str(dest), "--json")
        assert run.returncode == 0, run.stderr[-3000:] + first.tails()
        full = json.loads(run.stdout)
        paths = [
            f["path"]
            for f in json.loads(gzip.decompress((dest / "snapshots" / full["snapshot"]).read_bytes()))["files"]
        ]
        assert any(p.startswith("vectors/observations/") for p in paths), paths[:20]
        assert "redis/engram.json" in paths and any(p.startswith("objects/media/") for p in paths)
        again = _engram(first, "backup", str(dest), "--json")  # nothing new: little written, objects not read
        assert again.returncode == 0, again.stderr[-3000:]
        second_run = json.loads(again.stdout)
        assert second_run["written_bytes"] <= 0.2 * full["written_bytes"], (second_run, full)
        assert second_run["unchanged_files"] >= sum(p.startswith("objects/") for p in paths)
        assert _searches(app) == before  # the store worker opened its store again after the copy
        in_s3 = _engram(first, "backup", s3_dest, "--json")  # S3: the store worker writes there with its own keys
        assert in_s3.returncode == 0, in_s3.stderr[-3000:] + first.tails()
        _killed_then_again(first, tmp_path / "killed", paths)
    finally:
        first.stop_all()

    second = Cluster.create(
        tmp_path / "second", _env(second_url, seaweedfs_s3, tmp_path / "second" / "data", vault_key)
    )
    app2 = producer(Settings(broker_url=second_url))
    try:
        second.start(
            "store", ["worker", "--role", "store", "--pool", "solo", "--hostname", "store@keep2", "--loglevel", "INFO"]
        )
        second.wait_ready(app2, ["store@keep2"], timeout=180)
        _interrupted_restore(second, s3_dest, monkeypatch)
        run = _engram(second, "restore", s3_dest, "--json")  # the same command completes it
        assert run.returncode == 0, run.stderr[-3000:] + second.tails()
        assert json.loads(run.stdout)["resumed_files"] > 0
        assert _searches(app2) == before
        refused = _engram(second, "restore", str(dest))
        assert refused.returncode == 2 and "empty cluster" in refused.stderr, refused.stderr
        embedded = subprocess.run(
            [ENGRAM, "--data-dir", str(tmp_path / "laptop"), "restore", str(dest)],
            env={k: v for k, v in second.env.items() if not k.startswith("ENGRAM_")},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert embedded.returncode == 2 and "distributed mode" in embedded.stderr, embedded.stderr
        assert not (tmp_path / "laptop").exists()
    finally:
        second.kill("store", signal.SIGTERM)
        second.stop_all()
