"""bench/typed.py's fact scoring: the rules extractor's drafts of a LoCoMo-shaped sample matched against its
``observation`` annotations (same turn, MiniLM cosine >= MATCH_COSINE)."""

from __future__ import annotations

import numpy as np

from bench.typed import MATCH_COSINE, annotations, fact_scores


def _sample() -> dict:
    return {
        "sample_id": "conv-t",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I love painting landscapes, it calms me."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice! The lake was lovely yesterday."},
            ],
        },
        "observation": {
            "session_1_observation": {
                "Ann": [["Ann loves painting landscapes because it calms her.", "D1:1"]],
                "Bob": [["Bob found the lake lovely the day before.", ["D1:2"]]],
            }
        },
    }


def test_annotations_are_read_with_their_turns():
    assert annotations(_sample()) == [
        ("Ann loves painting landscapes because it calms her.", {"D1:1"}),
        ("Bob found the lake lovely the day before.", {"D1:2"}),
    ]


def test_a_draft_matches_the_annotation_of_its_turn():
    from engram.schemas.settings import get_settings
    from engram.workers.models import get_model

    model = get_model("embedding", get_settings())

    def embed(texts):
        v = np.asarray(model.embed(texts), dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    got = fact_scores(_sample(), 0, embed)
    assert (got["drafts"], got["matched_drafts"], got["annotations"], got["matched_annotations"]) == (1, 1, 2, 1)
    [(summary, best, cosine)] = got["pairs"]
    assert summary == "Ann likes painting landscapes" and best.startswith("Ann loves") and cosine >= MATCH_COSINE
    assert fact_scores(_sample(), 0, embed, threshold=0.99)["matched_drafts"] == 0
