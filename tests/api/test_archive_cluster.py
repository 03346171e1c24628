"""``engram import`` / ``engram export --archive`` of the distributed mode on the test cluster: redis-server (broker,
result backend, ledger), SeaweedFS (objects) and the store worker (``engram worker --role store``, the owner of the
Qdrant Edge shards). A user's memory ingested on the embedded default (``tests.workers.memory.test_records``'
template: chats, a screenshot, a vault entry) is moved into the cluster, where the same searches answer the same
ids in the same order, through the HTTP API (``engram import FILE --api URL``: an API key of another tenant refused)
and through the broker; imported again, nothing is written; exported from the cluster (through the API and the
broker) and imported into a new data dir, the same again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from engram.schemas.search import SearchRequest
from tests.api.test_archive import QUERIES, _searches
from tests.cluster import ENGRAM, Cluster, producer, serve_api
from tests.files import copy_tree
from tests.workers.memory.test_records import T, template, use_data_dir  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

DB = 10


def _cluster_searches(app, user: str) -> dict[str, list[str]]:
    """The searches of ``tests.api.test_archive._searches``, through the store worker's query queue."""
    out = {}
    for q in QUERIES:
        req = SearchRequest(query=q, tenant_id=T, user_id=user, limit=10)
        got = app.send_task("workers.query.search", args=[req.model_dump(mode="json")]).get(timeout=300)
        out[q] = [str(h["id"]) for h in got["hits"]]
    return out


def _engram(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([ENGRAM, *args], env=env, capture_output=True, text=True, timeout=600, cwd=cwd)


def test_a_user_moved_from_a_laptop_into_a_cluster_and_back_answers_the_same(
    template,  # noqa: F811
    redis_server,  # noqa: F811
    seaweedfs_s3,
    tmp_path,
    monkeypatch,
):
    import redis

    from engram.api.http.keys import create_key
    from engram.schemas.settings import Settings
    from engram.workers.runtime import reset_runtimes

    copy_tree(template / "data", tmp_path / "laptop")
    use_data_dir(monkeypatch, tmp_path / "laptop")
    before = _searches("alice")
    assert before["budget review"], before
    reset_runtimes()
    laptop_env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")} | {"HF_HUB_OFFLINE": "1"}
    archive = tmp_path / "alice.tar"
    run = _engram(
        {**laptop_env, "ENGRAM_DATA_DIR": str(tmp_path / "laptop")},
        tmp_path,
        "export",
        "--user",
        "alice",
        "--archive",
        str(archive),
    )
    assert run.returncode == 0, run.stderr[-3000:]

    url = redis_server.rsplit("/", 1)[0] + f"/{DB}"
    r = redis.Redis.from_url(url, decode_responses=True)
    r.flushdb()
    values = dict(
        broker_url=url,
        data_dir=tmp_path / "cluster" / "data",
        s3_endpoint=seaweedfs_s3.endpoint,
        s3_access_key=seaweedfs_s3.access_key,
        s3_secret_key=seaweedfs_s3.secret_key,
        s3_bucket=f"archive-{uuid.uuid4().hex[:12]}",
    )
    cluster = Cluster.create(
        tmp_path / "cluster",
        {f"ENGRAM_{k.upper()}": str(v) for k, v in values.items()}
        | {"ENGRAM_TENANT": T, "ENGRAM_VAULT_KEY": Fernet.generate_key().decode()},
    )
    settings = Settings(**values, api_rate_limit="")
    app = producer(settings)
    key, other = create_key(r, T), create_key(r, "other")
    try:
        cluster.start(
            "store",
            ["worker", "--role", "store", "--pool", "solo", "--hostname", "store@archive", "--loglevel", "INFO"],
        )
        cluster.wait_ready(app, ["store@archive"], timeout=300)
        with serve_api(settings) as api:
            run = _engram(laptop_env, tmp_path, "import", str(archive), "--api", api, "--api-key", other)
            assert run.returncode == 2 and "the archive is of tenant 'default'" in run.stderr, run.stderr
            run = _engram(laptop_env, tmp_path, "import", str(archive), "--api", api, "--api-key", key, "--json")
            assert run.returncode == 0, run.stderr[-3000:] + cluster.tails()
            assert json.loads(run.stdout)["written"]["points"]["observations"] == 5
            assert _cluster_searches(app, "alice") == before
            through_api = tmp_path / "through-api.tar"
            run = _engram(
                laptop_env,
                tmp_path,
                "export",
                "--user",
                "alice",
                "--archive",
                str(through_api),
                "--api",
                api,
                "--api-key",
                key,
            )
            assert run.returncode == 0, run.stderr[-3000:] + cluster.tails()
        again = _engram(cluster.env, cluster.root, "import", str(archive), "--json")  # through the broker
        assert again.returncode == 0, again.stderr[-3000:]
        written = json.loads(again.stdout)["written"]
        assert written["objects"] == 0 and written["events"] == 0 and not any(written["points"].values()), written
        back = tmp_path / "back.tar"
        run = _engram(cluster.env, cluster.root, "export", "--user", "alice", "--archive", str(back), "--json")
        assert run.returncode == 0, run.stderr[-3000:] + cluster.tails()
    finally:
        cluster.kill("store", signal.SIGTERM)
        cluster.stop_all()
        app.close()
        r.close()
    with tarfile.open(archive) as a, tarfile.open(back) as b, tarfile.open(through_api) as c:
        names = sorted(n for n in a.getnames() if n.startswith("objects/"))
        assert names == sorted(n for n in b.getnames() if n.startswith("objects/"))
        assert names == sorted(n for n in c.getnames() if n.startswith("objects/"))
        assert any("/vault/" in n for n in names) and any("/thumb-" in n for n in names), names
    for got in (back, through_api):  # back on a laptop: the same searches again
        run = _engram({**laptop_env, "ENGRAM_DATA_DIR": str(tmp_path / got.stem)}, tmp_path, "import", str(got))
        assert run.returncode == 0, run.stderr[-3000:]
        use_data_dir(monkeypatch, tmp_path / got.stem)
        assert _searches("alice") == before
        reset_runtimes()
