"""Voice entities with the real models (issue 41): the demo's two espeak-ng voices (the memo and the sprint demo's
presenter) become two entities, each recording linked as it arrives on the embedded store; the bench's threshold
rule on measured similarities."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime

import pytest

from bench.lib import entities as be


@pytest.mark.slow
def test_the_demos_two_voices_are_two_entities(engram_env, tmp_path):
    from engram.api.demo import make_samples
    from engram.workers.memory.entities import list_entities

    if not (shutil.which("espeak-ng") and shutil.which("ffmpeg")):
        pytest.skip("espeak-ng and ffmpeg make the demo's voices (scripts/setup.sh installs them)")
    made = make_samples(tmp_path / "sample", datetime(2024, 5, 1, 8, tzinfo=UTC))
    by_file = be.ingest_observations([made["voice-memo.wav"], made["sprint-demo.mp4"]], "demo")
    memo, clip = be.voice_entities(by_file["voice-memo.wav"]), be.voice_entities(by_file["sprint-demo.mp4"])
    assert len(memo) == 1 and len(clip) == 1 and memo != clip
    voices = [e for e in list_entities(engram_env, "demo") if e.voices]
    assert len(voices) == 2 and all(e.role == "person" for e in voices)


def test_the_threshold_lets_few_different_speakers_through():
    different = [i / 100 for i in range(40, 90)] + [0.95]  # 51 pairs: 2 % is one pair, the 0.95
    assert be.choose_threshold([0.9, 0.97], different) == 0.9  # 0.89 and below are let through: 0.90
    assert be.choose_threshold([0.8, 0.97], different, false_accepts=0.0) == 0.96
    assert be.choose_threshold([0.93], [0.5, 0.6]) == 0.93  # no same pair lost by going up to the lowest
    with pytest.raises(ValueError):
        be.choose_threshold([0.9], [])


def test_the_default_threshold_is_the_benchs_choice():
    """The voice threshold engram links with is the one bench/voices.py chose from its measured similarities."""
    import json
    from pathlib import Path

    from engram.schemas.settings import Settings

    measured = json.loads((Path(be.__file__).parents[1] / "results" / "voices.json").read_text())
    assert Settings.model_fields["entity_voice_similarity"].default == measured["threshold"]
