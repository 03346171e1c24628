"""LongMemEval helpers: session recall_any at a budget of k sessions, the counted questions, session texts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.lib.longmemeval import (  # noqa: E402
    EXPECTED_QUESTIONS,
    SessionBaselines,
    load_longmemeval,
    longmemeval_path,
    recall_any_at_budget,
    session_texts,
)

ITEM = {
    "question_id": "q1",
    "question": "Where did I park the blue bicycle?",
    "question_type": "single-session-user",
    "question_date": "2023/05/30 (Tue) 10:00",
    "answer_session_ids": ["s2"],
    "haystack_session_ids": ["s1", "s2", "s3"],
    "haystack_dates": ["2023/05/01 (Mon) 09:00", "2023/05/02 (Tue) 09:00", "2023/05/03 (Wed) 09:00"],
    "haystack_sessions": [
        [{"role": "user", "content": "Recommend a pasta recipe."}, {"role": "assistant", "content": "Try carbonara."}],
        [
            {"role": "user", "content": "I parked my blue bicycle by the library."},
            {"role": "assistant", "content": "Noted, by the library.", "has_answer": True},
        ],
        [{"role": "user", "content": "What is the capital of Peru?"}, {"role": "assistant", "content": "Lima."}],
    ],
}


def test_recall_any_expands_results_into_distinct_sessions():
    ranked = [["s1"], ["s1", "s3"], ["s2"]]  # a memory citing two sessions spends two
    assert recall_any_at_budget(ranked, {"s2"}, 2) == 0.0
    assert recall_any_at_budget(ranked, {"s2"}, 3) == 1.0
    assert recall_any_at_budget(ranked, {"s3", "s9"}, 2) == 1.0
    assert recall_any_at_budget([], {"s1"}, 5) == 0.0
    with pytest.raises(ValueError):
        recall_any_at_budget(ranked, set(), 1)


def test_session_texts_and_bm25_baseline():
    ids, texts = session_texts(ITEM)
    assert ids == ["s1", "s2", "s3"]
    assert texts[1] == "user: I parked my blue bicycle by the library.\nassistant: Noted, by the library."
    ranks = SessionBaselines(ITEM).rankings(ITEM["question"])
    assert ranks["BM25"][0] == "s2" and ranks["RRF"][0] == "s2"
    assert sorted(ranks["dense"]) == ["s1", "s2", "s3"]


def test_longmemeval_counts_98_questions():
    if not longmemeval_path().is_dir():
        pytest.skip(f"LongMemEval-S not found at {longmemeval_path()} (set ENGRAM_EVAL_DATA)")
    qs = load_longmemeval()
    assert len(qs) == EXPECTED_QUESTIONS
    assert all(not q.question_id.endswith("_abs") and q.answer_sessions for q in qs)
