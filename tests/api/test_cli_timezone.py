"""ENGRAM_TIMEZONE: the CLI reads times without a zone in it and prints stored (UTC) times in it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("tz")
    chat = root / "chat.jsonl"
    chat.write_text(
        '{"message_id": "m1", "session_id": "s1", "speaker": "Ann", "text": "Lisbon is booked", '
        '"timestamp": "2024-05-02T18:03:00Z"}\n'
    )
    out = _engram(root, "UTC", "ingest", str(chat), "--user", "ann")
    assert out.returncode == 0, out.stderr[-3000:]
    return root


def _engram(root, zone: str, *args: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(root),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "COLUMNS": "250",
        "ENGRAM_DATA_DIR": str(root / "data"),
        "ENGRAM_TIMEZONE": zone,
    }
    return subprocess.run(
        [sys.executable, "-m", "engram.api.cli", *args], capture_output=True, text=True, env=env, timeout=600, cwd=REPO
    )


@pytest.mark.slow
def test_times_print_in_the_zone_and_naive_times_are_read_in_it(store):
    utc = _engram(store, "UTC", "search", "Lisbon", "--since", "2024-05-02T12:00")  # 12:00 UTC: before 18:03
    assert utc.returncode == 0 and "2024-05-02 18:03 UTC" in utc.stdout, utc.stdout + utc.stderr[-2000:]
    # 12:00 in Los Angeles is 19:00 UTC: after the message
    la = _engram(store, "America/Los_Angeles", "search", "Lisbon", "--since", "2024-05-02T12:00")
    assert la.returncode == 0 and "Lisbon is booked" not in la.stdout, la.stdout
    la = _engram(
        store, "America/Los_Angeles", "search", "what was booked yesterday", "--as-of", "2024-05-03T12:00"
    )  # 05:00 PDT on May 3: yesterday is May 2 in Los Angeles
    assert la.returncode == 0, la.stderr[-2000:]
    shown = " ".join(la.stdout.replace("│", " ").split())
    assert "2024-05-02 11:03 PDT" in shown, shown  # the message, 18:03 UTC
    assert "2024-05-02 00:00 PDT to 2024-05-03 00:00 PDT" in shown, shown


def test_an_unknown_zone_is_refused_with_its_name(store):
    out = _engram(store, "Mars/Olympus_Mons", "search", "Lisbon")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "ENGRAM_TIMEZONE: 'Mars/Olympus_Mons' is not an IANA time zone name" in " ".join(out.stderr.split())
