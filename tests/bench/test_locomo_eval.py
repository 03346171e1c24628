"""LoCoMo evaluation helpers: evidence ids as the data README defines them, and recall at a turn budget."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.lib.locomo import (  # noqa: E402
    EXPECTED_QUESTIONS,
    all_questions,
    kept_turns,
    load_locomo,
    locomo_path,
    normalize_evidence_id,
    parse_evidence,
    recall_at_budget,
    rrf_fuse,
    sample_questions,
)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("D1:3", "D1:3"),
        ("D:11:26", "D11:26"),
        ("D30:05", "D30:5"),
        ("D:03:007", "D3:7"),
        (" D2:8 ", "D2:8"),
    ],
)
def test_normalize_evidence_id_readme_examples(raw, canonical):
    assert normalize_evidence_id(raw) == canonical


@pytest.mark.parametrize("raw", ["D", "", "D1", "D1:", ":1:2", "1:2", "D1:2:3", "Dx:2", "D1;2", "S1:2"])
def test_malformed_evidence_ids_are_none(raw):
    assert normalize_evidence_id(raw) is None


def test_parse_evidence_splits_on_semicolon_comma_and_space():
    entries = ["D8:6; D9:17", "D9:1 D4:4 D4:6", "D1:1,D1:2", "D22:1\tD22:2\nD9:10"]
    assert parse_evidence(entries) == [
        "D8:6",
        "D9:17",
        "D9:1",
        "D4:4",
        "D4:6",
        "D1:1",
        "D1:2",
        "D22:1",
        "D22:2",
        "D9:10",
    ]


def test_parse_evidence_drops_malformed_and_repeats():
    assert parse_evidence(["D", "D:11:26", "D11:26", "D30:05", "junk"]) == ["D11:26", "D30:5"]


def test_parse_evidence_drops_ids_absent_from_conversation():
    turns = {"D1:1", "D1:2", "D11:26"}
    assert parse_evidence(["D1:1", "D9:9", "D:11:26", "D1:02"], turns) == ["D1:1", "D11:26", "D1:2"]
    assert parse_evidence(["D9:9", "D"], turns) == []


def _sample(qa):
    return {
        "sample_id": "s",
        "conversation": {
            "speaker_a": "A",
            "speaker_b": "B",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "A", "dia_id": "D1:1", "text": "hi"},
                {"speaker": "B", "dia_id": "D1:2", "text": "hello"},
            ],
        },
        "qa": qa,
    }


def test_questions_without_evidence_or_of_category_5_are_not_counted():
    qa = [
        {"question": "q1", "evidence": ["D1:1"], "category": 4},
        {"question": "q2", "evidence": ["D"], "category": 1},  # malformed only
        {"question": "q3", "evidence": ["D7:1"], "category": 2},  # absent only
        {"question": "q4", "evidence": ["D1:2"], "category": 5},  # adversarial
        {"question": "q5", "evidence": [], "category": 3},
        {"question": "q6", "evidence": ["D:1:02; D9:9"], "category": 1},
    ]
    qs = sample_questions(_sample(qa))
    assert [(q.question, q.evidence) for q in qs] == [("q1", ("D1:1",)), ("q6", ("D1:2",))]


def test_recall_expands_results_in_their_own_order():
    ranked = [["D1:1", "D1:2", "D1:3"], ["D2:1"]]
    assert kept_turns(ranked, 2) == ["D1:1", "D1:2"]
    assert recall_at_budget(ranked, {"D1:3"}, 2) == 0.0
    assert recall_at_budget(ranked, {"D1:3"}, 3) == 1.0
    assert recall_at_budget(ranked, {"D1:2", "D2:1"}, 3) == 0.5
    assert recall_at_budget(ranked, {"D1:2", "D2:1"}, 4) == 1.0


def test_recall_counts_repeated_turns_once():
    ranked = [["D1:1", "D1:2"], ["D1:2", "D1:1"], ["D1:1"], ["D3:3"]]
    assert kept_turns(ranked, 3) == ["D1:1", "D1:2", "D3:3"]
    assert recall_at_budget(ranked, {"D3:3"}, 3) == 1.0


def test_recall_budget_cut_and_short_results():
    ranked = [[f"D1:{i}"] for i in range(1, 31)]
    assert len(kept_turns(ranked, 10)) == 10
    assert recall_at_budget(ranked, {"D1:10", "D1:11"}, 10) == 0.5
    assert recall_at_budget([["D1:1"]], {"D1:1", "D1:2"}, 25) == 0.5  # fewer turns than the budget
    assert recall_at_budget([], {"D1:1"}, 5) == 0.0
    assert recall_at_budget([[], ["D1:1"]], {"D1:1"}, 1) == 1.0  # a result without sources spends nothing


def test_recall_of_a_big_memory_spends_its_turns():
    memory = [f"D1:{i}" for i in range(1, 31)]  # a memory citing 30 turns
    assert recall_at_budget([memory, ["D5:5"]], {"D5:5"}, 25) == 0.0
    assert recall_at_budget([["D5:5"], memory], {"D5:5"}, 1) == 1.0


def test_recall_without_evidence_is_an_error():
    with pytest.raises(ValueError):
        recall_at_budget([["D1:1"]], set(), 5)


def test_rrf_fuse():
    # a: 1/61 + 1/63, b: 1/62 + 1/61, c: 1/63 + 1/62
    assert rrf_fuse([["a", "b", "c"], ["b", "c", "a"]]) == ["b", "a", "c"]
    assert rrf_fuse([["a"], []]) == ["a"]


def test_locomo_counts_1536_questions():
    path = locomo_path()
    if not path.exists():
        pytest.skip(f"LoCoMo not found at {path} (set ENGRAM_EVAL_DATA)")
    samples = load_locomo()
    assert len(samples) == 10
    qs = all_questions(samples)
    print(f"{len(qs)} counted LoCoMo questions")
    assert len(qs) == EXPECTED_QUESTIONS
    assert {q.category for q in qs} == {1, 2, 3, 4}
