"""``bench/distributed.py`` runs end to end on a tiny workload and writes its JSON in the shape
``bench/ingest.py --json`` takes (the figures themselves are for the README, not asserted)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.lib.distributed import Figure, checks, contention_line, efficiency_ratios, machine_contention, rates

BENCH = Path(__file__).resolve().parents[2] / "bench" / "distributed.py"


def _row(workers: int, round_no: int, events_per_cpu_s: float, store_busy: float = 0.1) -> Figure:
    return Figure(
        "distributed",
        "text",
        workers,
        300,
        0,
        wall_s=10.0,
        events_per_s=30.0 + workers,
        cpu_s=300 / events_per_cpu_s,
        events_per_cpu_s=events_per_cpu_s,
        store_busy=store_busy,
        round=round_no,
    )


def test_rounds_give_medians_and_each_rounds_ratio_to_its_own_one_worker_row():
    # round 2's one-worker row was slow (a neighbour's job): its 4-worker row is compared with it, not with round 1's
    figures = [
        _row(1, 1, 40.0),
        _row(4, 1, 38.0, 0.3),
        _row(1, 2, 30.0),
        _row(4, 2, 28.5, 0.2),
        _row(1, 3, 44.0),
        _row(4, 3, 35.2, 0.4),
    ]
    assert efficiency_ratios(figures) == {4: pytest.approx([0.95, 0.95, 0.8])}
    assert rates(figures) == {
        "1": {"events_per_s": 31.0, "events_per_cpu_s": 40.0, "store_busy": 0.1, "efficiency_vs_fewest": 1.0},
        "4": {"events_per_s": 34.0, "events_per_cpu_s": 35.2, "store_busy": 0.3, "efficiency_vs_fewest": 0.95},
    }
    lines = checks(figures)
    assert (
        "text: events/CPU-s 4 vs 1 worker(s) x0.95 median of the rounds (rounds: x0.95, x0.95, x0.80) (ok: at "
        "most 10 % lower)" in lines
    ), lines
    assert any(
        line.startswith("text: store busy at the highest rate (4 worker(s), 34.00 events/s) 30%") for line in lines
    ), lines


def test_one_round_has_no_median_to_speak_of():
    lines = checks([_row(1, 1, 40.0), _row(2, 1, 34.0)])
    assert "text: events/CPU-s 2 vs 1 worker(s) x0.85 (MISSED: at most 10 % lower)" in lines, lines


def test_the_machine_control_times_the_same_python_work_alone_and_beside_busy_cores():
    control = machine_contention(pairs=1)
    assert set(control) == {"alone_cpu_s", "beside_busy_cpu_s", "factor"}
    assert control["alone_cpu_s"] > 0.05 and control["beside_busy_cpu_s"] > 0.05, control
    assert control["factor"] == pytest.approx(control["beside_busy_cpu_s"] / control["alone_cpu_s"], abs=0.01)
    assert 0.5 < control["factor"] < 3, control  # the same work: CPU seconds of one order either way
    # each row's cores kept busy: CPU seconds over wall seconds (10 s), medians by worker count
    line = contention_line(
        {"alone_cpu_s": 0.4, "beside_busy_cpu_s": 0.48, "factor": 1.2},
        [_row(1, 1, 30.0), _row(1, 2, 25.0), _row(4, 1, 20.0)],
        "text",
    )
    assert "x1.20 its CPU seconds with the other cores busy (0.40 s alone, 0.48 s beside)" in line, line
    assert line.endswith("cores kept busy by the workers: 1 worker(s) 1.10, 4 worker(s) 1.50"), line


@pytest.mark.integration
@pytest.mark.timeout(600)
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed (scripts/setup.sh)")
@pytest.mark.slow
def test_distributed_bench_smoke(tmp_path):
    out = tmp_path / "figures.json"
    run = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--events",
            "4",
            "--workers",
            "1",
            "--kinds",
            "text",
            "--latency-samples",
            "2",
            "--rounds",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=580,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "events/CPU-s" in run.stdout and "load average after" in run.stdout
    by_task = [line for line in run.stdout.splitlines() if "CPU s by task" in line]  # from the workers' /metrics
    assert len(by_task) == 1 and "ingest" in by_task[0] and "embed_batched" in by_task[0], run.stdout
    data = json.loads(out.read_text())
    # the section bench/ingest.py merges: {"<workers>": {"events_per_s", "events_per_cpu_s", "store_busy", ...}}
    assert set(data["distributed"]) == {"1"}
    one = data["distributed"]["1"]
    assert set(one) == {"events_per_s", "events_per_cpu_s", "store_busy", "efficiency_vs_fewest"}
    assert one["efficiency_vs_fewest"] == 1.0
    assert one["events_per_s"] > 0 and one["events_per_cpu_s"] > 0 and 0 < one["store_busy"] < 2, one
    figures = data["figures"]
    assert [(f["mode"], f["kind"], f["workers"]) for f in figures] == [
        ("distributed", "text", 1),
        ("embedded", "text", 0),
    ]
    for f in figures:
        assert f["events"] == 4 and f["failed"] == 0 and f["cpu_s"] > 0, f
        assert 0 < f["latency_p50_s"] <= f["latency_p95_s"] < 120 and f["latency_samples"] == 2, f
        assert all(0 < final <= total for final, total in zip(f["latency_final_s"], f["latency_s"], strict=True)), f
        assert f["first_search_s"] > 0, f
    assert figures[0]["store_cpu_s"] <= figures[0]["cpu_s"]
    tasks = figures[0]["task_cpu_s"]
    assert tasks["workers.ingest.ingest"] > 0 and sum(tasks.values()) <= figures[0]["cpu_s"], tasks
    assert set(data["load"]) == {"before", "after"}
    assert data["contention"]["factor"] > 0 and "the machine (control)" in run.stdout, data["contention"]
