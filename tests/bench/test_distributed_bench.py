"""``bench/distributed.py`` runs end to end on a tiny workload and prints sane figures (the figures
themselves are for the closing note, not asserted)."""

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
    out = subprocess.run([sys.executable, str(BENCH), "--events", "4", "--workers", "1", "--kinds", "text",
                          "--latency-samples", "2", "--json"], capture_output=True, text=True, timeout=580,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    figures = json.loads(out.stdout)
    assert [(f["mode"], f["kind"], f["workers"]) for f in figures] == [("distributed", "text", 1),
                                                                        ("embedded", "text", 0)]
    for f in figures:
        assert f["events"] == 4 and f["failed"] == 0 and f["events_per_s"] > 0, f
        assert 0 < f["latency_p50_s"] <= f["latency_p95_s"] < 120, f
