"""``bench/distributed.py`` runs end to end on a tiny workload and writes its JSON in the shape
``bench/ingest.py --json`` takes (the figures themselves are for the README, not asserted)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "distributed.py"


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed (scripts/setup.sh)")
def test_distributed_bench_smoke(tmp_path):
    out = tmp_path / "figures.json"
    run = subprocess.run([sys.executable, str(BENCH), "--events", "4", "--workers", "1", "--kinds", "text",
                          "--latency-samples", "2", "--json", str(out)], capture_output=True, text=True, timeout=580,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "events/CPU-s" in run.stdout and "load average after" in run.stdout
    data = json.loads(out.read_text())
    # the section bench/ingest.py merges: {"<workers>": {"events_per_s", "events_per_cpu_s", "store_busy"}}
    assert set(data["distributed"]) == {"1"}
    one = data["distributed"]["1"]
    assert set(one) == {"events_per_s", "events_per_cpu_s", "store_busy"}
    assert one["events_per_s"] > 0 and one["events_per_cpu_s"] > 0 and 0 < one["store_busy"] < 2, one
    figures = data["figures"]
    assert [(f["mode"], f["kind"], f["workers"]) for f in figures] == [("distributed", "text", 1),
                                                                        ("embedded", "text", 0)]
    for f in figures:
        assert f["events"] == 4 and f["failed"] == 0 and f["cpu_s"] > 0, f
        assert 0 < f["latency_p50_s"] <= f["latency_p95_s"] < 120 and f["latency_samples"] == 2, f
        assert all(0 < final <= total for final, total in zip(f["latency_final_s"], f["latency_s"], strict=True)), f
        assert f["first_search_s"] > 0, f
    assert figures[0]["store_cpu_s"] <= figures[0]["cpu_s"]
    assert set(data["load"]) == {"before", "after"}
