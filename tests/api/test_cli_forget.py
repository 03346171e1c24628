"""``engram forget`` and ``engram memories update`` on bad input: a clear error and exit 2, never a traceback, before
anything is deleted; a dry run on a store that holds nothing says so and deletes nothing (issue 44; what a forget
leaves behind is ``tests/workers/memory/test_forget_nowhere.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


def run(data, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engram.api.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "ENGRAM_DATA_DIR": str(data), "COLUMNS": "200"},
        timeout=300,
    )


@pytest.fixture
def data(tmp_path):
    """A data dir that holds a store with nothing in it (an empty vector store folder)."""
    (tmp_path / "data" / "vectors").mkdir(parents=True)
    return tmp_path / "data"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "name what to forget"),
        (("--event", "not-a-uuid"), "is not a memory id"),
        (("--since", "the day the music died"), "is not a time"),
        (("--since", "2024-05-02", "--until", "2024-05-01"), "since must be before until"),
        (("--user", "bob", "--dry-run"), "--dry-run is for"),
        (("--app", "Slack", "--user", "not a user id!"), "--user: String should match pattern"),
    ],
)
def test_forget_refuses_bad_input_in_words(data, args, said):
    proc = run(data, "forget", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_dry_run_deletes_nothing_and_update_refuses_an_empty_text(data):
    proc = run(data, "forget", "--since", "15m", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("would forget 0 observations"), proc.stdout
    proc = run(data, "memories", "update", "00000000-0000-4000-8000-000000000000", "  ")
    assert proc.returncode == 2 and "the corrected text is empty" in proc.stderr, proc.stderr
    proc = run(data, "memories", "update", "not-an-id", "text")
    assert proc.returncode == 2 and "is not a memory id" in proc.stderr, proc.stderr
