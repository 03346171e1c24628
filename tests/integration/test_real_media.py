"""The main job on real media (ENGRAM_EVAL_DATA): everything under screens/ and audio/ and the Hamilton
clip, ingested through the CLI's path on the embedded default, then searched."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engram.schemas.events import EventStatus, MediaKind
from engram.schemas.memories import MemoryType
from engram.schemas.search import SearchRequest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ingested(eval_data: Path, tmp_path_factory):
    """Ingest the real media once for this module; yields (runtime, ingest result)."""
    from engram.api.cli.main import ingest_paths
    from engram.workers.runtime import reset_runtimes, runtime

    data_dir = tmp_path_factory.mktemp("real-media")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENGRAM_DATA_DIR", str(data_dir))
        reset_runtimes()
        result = ingest_paths(
            [eval_data / "screens", eval_data / "audio", eval_data / "video" / "short_hamilton_clip.mp4"],
            tenant="eval",
            user="tester",
            device="laptop",
            quiet=True,
        )
        yield runtime(), result, data_dir
        reset_runtimes()


def _search(query: str, limit: int = 5):
    from engram.api.cli.main import run_search

    return run_search(SearchRequest(query=query, tenant_id="eval", limit=limit)).hits


def _obs_source(hit) -> str:
    assert hit.memory_type is MemoryType.observation, f"first hit is a {hit.memory_type}: {hit.text[:80]}"
    return Path(hit.source_name).name


@pytest.mark.slow
def test_everything_ingests(ingested, eval_data):
    rt, result, _ = ingested
    assert not result["failed"], result["failed"]
    media = [p for p in (eval_data / "screens").rglob("*") if p.suffix in (".png", ".webp")]
    media += [p for p in (eval_data / "audio").glob("*") if p.suffix in (".wav", ".flac")]
    assert len(result["done"]) + len(result["skipped"]) == len(media) + 1
    ignored = {p.name for p, _ in result["ignored"]}
    assert "leopard_test_data.json" in ignored and "LICENSE-screenpipe.txt" in ignored
    counts = rt.ledger.counts("eval")
    assert counts.get(EventStatus.failed, 0) == 0
    assert counts.get(EventStatus.done, 0) == len(result["done"])


def test_receiver_count_finds_the_code_editor(ingested):
    hits = _search("receiver_count")
    assert _obs_source(hits[0]) == "screenpipe_testing_OCR.png"
    assert "receiver_count" in hits[0].text


def test_receiver_count_through_the_cli(ingested):
    from engram.api.cli.main import app

    _, _, data_dir = ingested
    out = CliRunner().invoke(
        app, ["--data-dir", str(data_dir), "search", "receiver_count", "--tenant", "eval", "--limit", "3"]
    )
    assert out.exit_code == 0, out.output
    first_row = next(line for line in out.output.splitlines() if re.match(r"^│\s*1\s*│", line))
    assert "screenpipe_testing_OCR.png" in first_row


def test_chinese_ui_text_is_read(ingested):
    hits = _search("管理分支", limit=3)
    assert any(
        h.source_name and h.source_name.endswith("screenpipe_testing_OCR_chinese.png") and "管理分支" in h.text
        for h in hits
    )


def test_jfk_quote_finds_jfk(ingested):
    hits = _search("ask not what your country can do for you")
    assert _obs_source(hits[0]) == "jfk.flac"
    assert hits[0].start_s is not None and hits[0].end_s is not None


def test_leopard_transcript_words_find_leopard(ingested, eval_data):
    tests = json.loads((eval_data / "audio" / "leopard_test_data.json").read_text())["tests"]["language_tests"]
    reference = next(t["transcript"] for t in tests if t["audio_file"] == "test.wav")
    hits = _search(reference)
    assert _obs_source(hits[0]) == "leopard_test.wav"


def test_hamilton_clip_has_a_transcript_at_its_offset(ingested):
    from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter

    rt, _, _ = ingested
    clip_obs = [r.payload for r in rt.vectors.scroll(OBSERVATIONS, tenant_filter("eval", kind=MediaKind.clip.value))]
    assert clip_obs, "the clip produced no observation"
    with_speech = [p for p in clip_obs if p.get("transcript")]
    assert with_speech, clip_obs
    first = min(with_speech, key=lambda p: p["start_s"])
    assert first["start_s"] == 0.0 and 0 < first["end_s"] <= 30.0
    assert first["source_name"].endswith("short_hamilton_clip.mp4")
    assert len(first["transcript"].split()) >= 3


def test_episodic_memories_cite_their_sources(ingested):
    from engram.workers.stores.vectors import tenant_filter

    rt, _, _ = ingested
    episodes = rt.vectors.scroll(MemoryType.episodic.value, tenant_filter("eval", "tester"))
    assert episodes
    cited = {o for e in episodes for o in e.payload["provenance"]["observation_ids"]}
    from engram.workers.stores.vectors import OBSERVATIONS

    observations = rt.vectors.scroll(OBSERVATIONS, tenant_filter("eval", "tester"))
    assert cited == {str(o.id) for o in observations}  # every observation consolidated, exactly once
    assert all(o.payload["consolidated"] for o in observations)
    assert sum(len(e.payload["provenance"]["observation_ids"]) for e in episodes) == len(observations)
