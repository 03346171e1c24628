"""``engram demo`` end to end: the sample is made, ingested by the real pipeline, and found again."""

from __future__ import annotations

import os
import shutil

import pytest
from typer.testing import CliRunner

import engram.api.demo
from engram.api.cli.main import app


@pytest.mark.slow
def test_demo_ingests_its_sample_and_finds_each_part(tmp_path, monkeypatch):
    """One run through the CLI (``engram demo --workdir``); the returned dict is captured for assertions."""
    from engram.workers.runtime import reset_runtimes

    for var in ("ENGRAM_BROKER_URL", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(tmp_path / "elsewhere"))
    captured = {}

    def run_and_keep(workdir, console):
        captured.update(real_run_demo(workdir, console))
        return captured

    real_run_demo = engram.api.demo.run_demo
    monkeypatch.setattr(engram.api.demo, "run_demo", run_and_keep)
    try:
        result = CliRunner().invoke(app, ["demo", "--workdir", str(tmp_path)])
    finally:
        reset_runtimes()
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "trip to Lisbon" in result.output and str(tmp_path / "data") in result.output

    espeak, ffmpeg = shutil.which("espeak-ng") is not None, shutil.which("ffmpeg") is not None
    expected = {"1-code-editor.png", "2-terminal.png", "3-email.png", "chat-maya.jsonl"}
    expected |= {"voice-memo.wav"} if espeak else set()  # without espeak-ng there is no voice memo
    expected |= {"sprint-demo.mp4"} if ffmpeg else set()  # without ffmpeg there is no clip
    assert set(captured["files"]) == expected | {"README.txt"}

    ingest = captured["ingest"]
    assert ingest["failed"] == [] and ingest["skipped"] == []  # distinct screens: none near-duplicate
    assert {p.name for p, _ in ingest["done"]} == expected
    assert all(record.observations > 0 for _, record in ingest["done"])
    assert [p.name for p, _ in ingest["ignored"]] == ["README.txt"]  # reported, not media
    assert captured["counts"]["observations"] >= len(expected)
    assert captured["counts"]["episodic"] >= 1  # consolidation ran
    # the user's chat turns give statement facts and a profile (issue 45)
    assert captured["counts"]["semantic"] >= 3 and captured["counts"]["core"] == 1
    assert "occupation: database engineer" in captured["profile"] and "grew up in: Cork" in captured["profile"]
    assert "What engram knows about Sam" in result.output
    assert str(tmp_path / "elsewhere") == os.environ["ENGRAM_DATA_DIR"]  # restored
    try:  # the profile listed as a person reads it: one "label: value" a line, not run together
        listed = CliRunner().invoke(
            app, ["--data-dir", str(tmp_path / "data"), "memories", "list", "--type", "core", "--tenant", "demo"]
        )
    finally:
        reset_runtimes()
    assert listed.exit_code == 0, listed.output + repr(listed.exception)
    [occupation] = [line for line in listed.output.splitlines() if "occupation: database engineer" in line]
    assert "grew up in" not in occupation and any("grew up in: Cork" in line for line in listed.output.splitlines())

    searches = {s["query"]: s for s in captured["searches"]}
    assert "reconcile_invoice_batches" in searches and "trip to Lisbon" in searches
    assert ("when is the budget review" in searches) == espeak
    assert ("what ships on Friday" in searches) == ffmpeg
    for query, search in searches.items():
        top = search["response"].hits[0]
        assert top.source_name and top.source_name.endswith(search["expect"]), (query, top)
        if search["message_id"]:
            assert search["message_id"] in top.message_ids, (query, top.message_ids)


def test_sample_without_espeak_has_a_silent_clip_and_distinct_screens(tmp_path, monkeypatch):
    """Without espeak-ng there is no voice memo and the clip gets a silent track; the three screenshots
    are far from near-duplicates of each other (the filter drops pHash similarity ≥ 0.92)."""
    from datetime import datetime

    from PIL import Image

    from engram.workers.media import decode as media

    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == "espeak-ng" else real_which(tool))
    files = engram.api.demo.make_samples(tmp_path, datetime(2024, 5, 2, 8, 40).astimezone())
    assert "voice-memo.wav" not in files
    screens = [p for name, p in files.items() if name.endswith(".png")]
    hashes = [media.perceptual_hash(Image.open(p)) for p in screens]
    assert len(hashes) == 3
    assert max(media.hash_similarity(a, b) for i, a in enumerate(hashes) for b in hashes[i + 1 :]) < 0.8
    assert len({p.stat().st_mtime for p in screens}) == 3
    if real_which("ffmpeg"):
        info = media.probe(files["sprint-demo.mp4"])
        assert info.has_video and info.has_audio and 7 < info.duration < 9
