"""``bench/ui.py`` runs end to end at small sizes (one real screenshot and a short chat ingested into the seed, a
store of 300 observations with a busy day of 60 frames): every figure of the issue's JSON is there and plausible
(the figures themselves are for the README, not asserted against the targets)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "ui.py"


def test_ui_bench_small(tmp_path):
    out = tmp_path / "ui.json"
    run = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--observations",
            "300",
            "--screenshots",
            "120",
            "--busy",
            "60",
            "--screens",
            "1",
            "--messages",
            "8",
            "--runs",
            "2",
            "--work-dir",
            str(tmp_path / "work"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads(out.read_text())
    assert {
        "timeline_ms",
        "timeline_html_bytes",
        "search_overhead_ms",
        "thumb_bytes_p50",
        "first_paint_ms",
        "load",
    } <= set(data)
    assert data["timeline_ms"] > 0 and len(data["timeline_runs_ms"]) == 2
    assert data["timeline_html_bytes"] > 1000
    assert data["search_ms"] > 0 and data["search_page_ms"] > 0
    assert len(data["thumb_bytes"]) == 1 and 0 < data["thumb_bytes_p50"] < 200_000  # a WebP, not the PNG
    assert data["first_paint_ms"] is not None and data["first_paint_ms"] > 0
    assert len(data["load"]["start"]) == 3 and len(data["load"]["end"]) == 3
    assert data["build"]["busy_frames"] == 60 and data["build"]["observations"] == 300
    for key in ("timeline_ms", "search_overhead_ms", "first_paint_ms"):
        assert key in run.stderr
    assert "met" in run.stderr or "MISSED" in run.stderr


def test_ui_bench_refuses_bad_sizes():
    run = subprocess.run(
        [sys.executable, str(BENCH), "--observations", "10", "--screenshots", "20"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and "sizes must satisfy" in run.stderr
