"""``engram backup`` / ``engram restore`` end to end through the CLI: LoCoMo conversation 0 and the demo's media
ingested by the real pipeline, backed up, restored into a new data dir, where ``engram search`` answers the same
ids in the same order; an incremental backup writes little; a non-empty data dir and a missing backup are refused
in one line; ``--help`` teaches; ``--json`` summaries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from tests.conftest import REPO

USER = "locomo-conv-26"
QUERIES = [
    "what did Caroline research?",
    "Melanie painting a sunrise",
    "LGBTQ support group",
    "reconcile_invoice_batches",
    "trip to Lisbon",
    "budget review",
]

#: The searches of ``engram search`` (``api.embedded.run_search``, the command's own path) in one process.
_SEARCH = """
import json, sys
from engram.api.embedded import run_search
from engram.schemas.search import SearchRequest
def ids(q):
    return [str(h.id) for h in run_search(SearchRequest(query=q, tenant_id="default", user_id=sys.argv[1],
                                                        limit=10)).hits]
out = {q: ids(q) for q in json.loads(sys.argv[2])}
print(json.dumps(out))
"""


def _engram(data_dir: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engram.api.cli", *args],
        capture_output=True,
        text=True,
        env=_env(data_dir),
        timeout=timeout,
        cwd=REPO,
    )


def _env(data_dir: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "250", "ENGRAM_DATA_DIR": str(data_dir)}
    for var in ("ENGRAM_BROKER_URL", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT"):
        env.pop(var, None)
    return env


def _ids(data_dir: Path) -> dict[str, list[str]]:
    """Every query's hit ids: the first through ``engram search --json``, all of them through its code path."""
    run = _engram(data_dir, "search", QUERIES[0], "--user", USER, "--limit", "10", "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    first = [hit["id"] for hit in json.loads(run.stdout)["hits"]]
    run = subprocess.run(
        [sys.executable, "-c", _SEARCH, USER, json.dumps(QUERIES)],
        capture_output=True,
        text=True,
        env=_env(data_dir),
        timeout=600,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out[QUERIES[0]] == first
    return out


@pytest.fixture(scope="module")
def ingested(tmp_path_factory, eval_data) -> Path:
    """A data dir holding LoCoMo conversation 0 and the demo's sample (screenshots, a voice memo, a clip, a chat),
    ingested for one user through one ``engram ingest``."""
    from bench.lib.locomo import load_locomo, sample_turns
    from engram.api.demo import make_samples
    from engram.workers.media.conversations import to_jsonl

    root = tmp_path_factory.mktemp("keep")
    chat = root / "conv-26.jsonl"
    chat.write_bytes(to_jsonl(sample_turns(load_locomo(eval_data)[0])))
    media = make_samples(root / "sample", datetime(2024, 5, 2, 8, 40).astimezone())
    data = root / "data"
    run = _engram(data, "ingest", str(chat), *map(str, sorted(media.values())), "--user", USER)
    assert run.returncode == 0, run.stderr[-3000:]
    return data


@pytest.mark.slow
def test_a_restored_data_dir_answers_searches_with_the_same_ids_in_the_same_order(ingested, tmp_path):
    before = _ids(ingested)
    assert all(before.values()), before
    dest = tmp_path / "backups"
    run = _engram(ingested, "backup", str(dest), "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    full = json.loads(run.stdout)
    assert full["files"] > 20 and full["written_bytes"] > 0 and full["snapshot"].endswith(".json.gz")

    restored = tmp_path / "restored"
    run = _engram(restored, "restore", str(dest), "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout)["snapshot"] == full["snapshot"]
    assert _ids(restored) == before
    status = _engram(restored, "status")
    assert status.returncode == 0, status.stderr[-2000:]
    modes = {
        oct(p.stat().st_mode & 0o777) for p in [restored, *restored.rglob("*")] if not p.name.endswith(("-wal", "-shm"))
    }  # SQLite's own side files, made by the searches above
    assert modes <= {"0o700", "0o600"}, modes

    (tmp_path / "more.jsonl").write_text(
        '{"message_id": "n1", "session_id": "s9", "speaker": "Ann", "text": '
        '"the ferry to Cacilhas leaves at nine", "timestamp": '
        '"2024-05-03T09:00:00Z"}\n'
    )
    assert _engram(ingested, "ingest", str(tmp_path / "more.jsonl"), "--user", USER).returncode == 0
    run = _engram(ingested, "backup", str(dest), "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    second = json.loads(run.stdout)
    assert 0 < second["written_bytes"] <= 0.2 * full["written_bytes"], (second, full)

    listed = _engram(restored, "restore", str(dest), "--list", "--json")
    assert [row["snapshot"] for row in json.loads(listed.stdout)] == [full["snapshot"], second["snapshot"]]
    refused = _engram(restored, "restore", str(dest))  # the restored data dir is not empty any more
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "is not empty" in " ".join(refused.stderr.split())


def test_restore_refuses_what_is_not_a_backup_in_one_line(tmp_path):
    run = _engram(tmp_path / "data", "restore", str(tmp_path / "nothing"))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "holds no engram backup" in " ".join(run.stderr.split()) and not (tmp_path / "data").exists()
    run = _engram(tmp_path / "data", "backup", str(tmp_path / "b"))
    assert run.returncode == 2 and "no engram data in" in " ".join(run.stderr.split())
    run = _engram(tmp_path / "data", "backup", "s3://bucket/prefix")
    assert run.returncode == 2 and "needs an endpoint" in " ".join(run.stderr.split())


def test_help_says_what_is_copied_and_how_to_get_it_back(tmp_path):
    run = _engram(tmp_path, "backup", "--help")
    text = " ".join(run.stdout.split())
    assert run.returncode == 0
    for words in ("s3://", "incremental", "manifest", "--include-vault-key", "Examples:"):
        assert words in text, words
    run = _engram(tmp_path, "restore", "--help")
    text = " ".join(run.stdout.split())
    for words in ("new or empty", "--list", "--snapshot", "vault key"):
        assert words in text, words


def test_a_cluster_without_its_store_worker_is_said_at_once(redis_server, tmp_path):
    """With ENGRAM_BROKER_URL set and no worker serving the store worker's queue, ``engram backup`` says so at once
    (not after waiting an hour for an answer) and writes no snapshot."""
    url = redis_server.rsplit("/", 1)[0] + "/2"  # a database no other test uses
    env = {**_env(tmp_path / "data"), "ENGRAM_BROKER_URL": url}
    run = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", "backup", str(tmp_path / "b"), "--wait", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=REPO,
    )
    assert run.returncode == 2 and "no worker serves the consolidate queue" in run.stderr, run.stderr[-2000:]
    assert not list((tmp_path / "b" / "snapshots").glob("*"))


def test_a_cluster_on_a_qdrant_server_is_refused_with_what_to_use_instead(redis_server, tmp_path):
    """A cluster whose store is a Qdrant server (ENGRAM_QDRANT_URL) is not backed up or restored by engram (its
    collections' snapshots are Qdrant's own API's): both commands say so at once, with what to use, and write
    nothing."""
    url = redis_server.rsplit("/", 1)[0] + "/2"
    env = {**_env(tmp_path / "data"), "ENGRAM_BROKER_URL": url, "ENGRAM_QDRANT_URL": "http://127.0.0.1:9"}
    for args in (("backup", str(tmp_path / "b"), "--wait", "2"), ("restore", str(tmp_path / "b"))):
        run = subprocess.run(
            [sys.executable, "-m", "engram.api.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            cwd=REPO,
        )
        said = " ".join(run.stderr.split())
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
        assert "Qdrant server" in said and "snapshot API" in said, said
    assert not list((tmp_path / "b" / "snapshots").glob("*"))
