"""``engram retention`` and the bytes per kind of ``engram status``, run as a user runs them (a subprocess on an
embedded data dir holding one ingested chat)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow  # each command loads the embedding model in a new process


def _engram(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "COLUMNS": "250",
        "ENGRAM_TIMEZONE": "UTC",
    }
    return subprocess.run(
        [sys.executable, "-m", "engram.api.cli", "--data-dir", str(tmp_path / "data"), *args],
        capture_output=True,
        text=True,
        env={**base, **env},
        timeout=600,
        cwd=REPO,
    )


def test_retention_dry_run_then_run_and_status(tmp_path):
    chat = tmp_path / "chat.jsonl"
    chat.write_text(
        '{"message_id": "m1", "session_id": "s1", "speaker": "Ann", "text": "Lisbon is booked", '
        '"timestamp": "2024-05-02T18:03:00Z"}\n'
    )
    assert _engram(tmp_path, "ingest", str(chat), "--user", "ann").returncode == 0
    originals = tmp_path / "data" / "objects" / "media" / "default"
    assert len(list(originals.iterdir())) == 1

    status = _engram(tmp_path, "status")
    assert status.returncode == 0, status.stderr
    assert "bytes stored" in status.stdout and "text originals" in status.stdout
    assert "store (all tenants)" in status.stdout and "originals kept; no storage cap" in status.stdout

    none = _engram(tmp_path, "retention", "--dry-run", "--json")
    assert none.returncode == 0 and "no retention rule is set" in none.stderr
    assert json.loads(none.stdout)["items_total"] == 0

    later = (datetime.now(UTC) + timedelta(days=3)).isoformat()
    rule = {"ENGRAM_RETENTION_TEXT_DAYS": "1"}
    dry = _engram(tmp_path, "retention", "--dry-run", "--at", later, "--json", **rule)
    report = json.loads(dry.stdout)
    assert dry.returncode == 0 and report["dry_run"] and report["items_total"] == 1
    assert report["items"][0]["kind"] == "text" and len(list(originals.iterdir())) == 1

    run = _engram(tmp_path, "retention", "--at", later, **rule)
    assert run.returncode == 0, run.stderr
    assert "removed 1 text original," in run.stdout and list(originals.iterdir()) == []

    found = _engram(tmp_path, "search", "Lisbon", "--json")
    hit = json.loads(found.stdout)["hits"][0]
    assert hit["text"].endswith("Lisbon is booked") and hit["original_removed_at"] is not None

    bad = _engram(tmp_path, "retention", "--at", "banana")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "banana" in bad.stderr
