"""``bench/ingest.py`` runs end to end on a few LoCoMo messages and merges its section into an existing JSON
file, keeping the other sections (the figures themselves are for the README, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "ingest.py"


@pytest.mark.slow
def test_ingest_bench_merges_its_section(tmp_path, eval_data):
    out = tmp_path / "figures.json"
    out.write_text(json.dumps({"audio": {"x_real_time": 25.0}, "load": 9.0}))
    run = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--sections",
            "text",
            "--conversations",
            "1",
            "--limit",
            "40",
            "--rounds",
            "2",
            "--eval-data",
            str(eval_data),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "of the ceiling" in run.stdout
    data = json.loads(out.read_text())
    assert data["audio"] == {"x_real_time": 25.0} and data["load"] != 9.0
    text = data["text"]
    assert text["messages"] == 40
    assert {"ceiling_msgs_per_s", "cold_msgs_per_s", "warm_msgs_per_s", "cold_ratio", "encodes_per_msg"} <= set(text)
    assert len(text["rounds"]) == 2 and all(r["cold_ratio"] > 0 for r in text["rounds"])  # medians of 2 rounds
    for r in text["rounds"]:  # a round's ceiling: the mean of its timings before and after its cold run
        before, after = r["ceiling_s_around"]
        assert before > 0 and after > 0 and abs(r["ceiling_s"] - (before + after) / 2) < 0.002
    assert " before, " in run.stdout and " after), cold " in run.stdout
    assert 1.0 <= text["encodes_per_msg"] < 2.0  # each distinct text once (plus a few memories and names)
    # where a cold run's CPU goes, by the embedded default's stage tasks, within the run's own CPU seconds
    tasks = text["cold_task_cpu_s"]
    assert {"ingest", "perceive", "embed_many", "store_many", "consolidate_user"} <= set(tasks), tasks
    assert all(r["cold_task_cpu_s"] for r in text["rounds"])
    assert sum(tasks.values()) <= text["cpu_s"]["cold"] * 1.05 and "its CPU s by task: embed_many" in run.stdout


@pytest.mark.slow
def test_ingest_bench_runs_the_audio_section_in_its_own_process(tmp_path, eval_data):
    """``--sections audio`` runs ``bench/perception_speed.py`` in a process of its own and merges its figures
    under ``audio`` (the text section's figures kept); ``--long-seconds`` and ``--audio-runs`` reach it."""
    out = tmp_path / "figures.json"
    out.write_text(json.dumps({"text": {"cold_ratio": 0.8}}))
    run = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--sections",
            "audio",
            "--long-seconds",
            "12",
            "--audio-runs",
            "1",
            "--eval-data",
            str(eval_data),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["text"] == {"cold_ratio": 0.8} and "load" in data
    audio = data["audio"]
    assert audio["x_real_time"] > 0 and audio["long_seconds"] >= 12 and len(audio["runs_x_real_time"]) == 1
    assert audio["wer"]["jfk.flac"] < 0.1 and set(audio["speaker_f1"]) == {
        "leopard_diarization_test.wav",
        "pyannote_sample.wav",
    }
    assert audio["before"]["x_real_time"] > 0  # the former settings, in the same run
    assert "merged into" in run.stdout  # perception_speed's rows printed, not its JSON again


def test_ingest_bench_longmemeval_needs_an_embedding_cache():
    """``--sections longmemeval`` (warm ingest of LongMemEval-S haystacks, was ``bench/ingest_speed.py``) measures a
    warm cache: without ``--embedding-cache`` it refuses before any work."""
    run = subprocess.run(
        [sys.executable, str(BENCH), "--sections", "longmemeval"], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 2 and "--sections longmemeval needs --embedding-cache" in run.stderr
