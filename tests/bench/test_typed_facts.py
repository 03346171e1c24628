"""bench/lib/facts.py, the fact scoring of bench/typed.py: the rules extractor's drafts of a LoCoMo-shaped sample
matched against its ``observation`` annotations (same turn, MiniLM cosine >= MATCH_COSINE), summed per half."""

from __future__ import annotations

from collections import Counter

from bench.lib.facts import MATCH_COSINE, annotations, by_half, embedder, fact_scores


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
    embed = embedder()
    got = fact_scores(_sample(), 0, embed)
    assert (got["drafts"], got["matched_drafts"], got["annotations"], got["matched_annotations"]) == (1, 1, 2, 1)
    [(summary, best, cosine)] = got["pairs"]
    assert summary == "Ann likes painting landscapes" and best.startswith("Ann loves") and cosine >= MATCH_COSINE
    assert fact_scores(_sample(), 0, embed, threshold=0.99)["matched_drafts"] == 0


def test_counts_are_summed_per_half():
    counts = {0: Counter(drafts=4, matched_drafts=3, annotations=10, matched_annotations=2)}
    counts[7] = Counter(drafts=1, matched_drafts=0, annotations=5, matched_annotations=1)
    got = by_half(counts)
    assert (got["chosen_on"]["precision"], got["chosen_on"]["recall"]) == (0.75, 0.2)
    assert (got["held_out"]["precision"], got["held_out"]["recall"]) == (0.0, 0.2)
    assert (got["all"]["precision"], got["all"]["recall"], got["all"]["drafts"]) == (0.6, 0.2, 5)
    assert set(by_half({1: counts[0]})) == {"all", "chosen_on"}
