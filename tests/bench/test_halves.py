"""The two halves of the retrieval bench (issue 45): which LoCoMo conversations and LongMemEval questions are
chosen on and which are held out, and a LoCoMo-format file too small for a held-out half."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.lib.locomo import (  # noqa: E402
    CATEGORIES,
    HALVES,
    all_questions,
    load_locomo,
    locomo_half,
    locomo_path,
    recall_at_budget,
)
from bench.lib.longmemeval import load_longmemeval, longmemeval_half, longmemeval_path  # noqa: E402
from bench.lib.retrieval import SYSTEMS, half_summaries, print_halves  # noqa: E402

KS = [5, 10, 25]


def test_locomo_conversations_0_to_4_are_chosen_on_5_and_up_held_out():
    assert [locomo_half(i) for i in range(12)] == ["chosen_on"] * 5 + ["held_out"] * 7
    assert HALVES == ("chosen_on", "held_out")


def test_longmemeval_half_is_the_parity_of_the_md5_of_the_question_id():
    for qid in ["07741c45", "078150f1", "gpt4_8279ba03", "9a707b82", "75832dbd", "x"]:
        even = int(hashlib.md5(qid.encode()).hexdigest(), 16) % 2 == 0
        assert longmemeval_half(qid) == ("chosen_on" if even else "held_out")
    assert longmemeval_half("07741c45") == "chosen_on"
    assert longmemeval_half("078150f1") == "held_out"


def test_public_sets_split_near_evenly():
    if not locomo_path().exists() or not longmemeval_path().is_dir():
        pytest.skip("LoCoMo or LongMemEval-S not found (set ENGRAM_EVAL_DATA)")
    qs = all_questions(load_locomo())
    assert sum(locomo_half(q.conversation) == "chosen_on" for q in qs) == 760
    assert sum(locomo_half(q.conversation) == "held_out" for q in qs) == 776
    lme = load_longmemeval()
    assert sum(longmemeval_half(q.question_id) == "chosen_on" for q in lme) == 51
    assert sum(longmemeval_half(q.question_id) == "held_out" for q in lme) == 47


def _conversation(n: int) -> dict:
    turns = [
        {"speaker": "A", "dia_id": "D1:1", "text": f"I adopted a cat called Tom{n}."},
        {"speaker": "B", "dia_id": "D1:2", "text": "Lovely, how old is he?"},
        {"speaker": "A", "dia_id": "D1:3", "text": "Two years old."},
    ]
    return {
        "sample_id": f"conv-{n}",
        "conversation": {
            "speaker_a": "A",
            "speaker_b": "B",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": turns,
        },
        "qa": [
            {"question": "What is A's cat called?", "evidence": ["D1:1"], "category": 4},
            {"question": "How old is the cat?", "evidence": ["D1:3", "D1:2"], "category": 1},
        ],
    }


def _rows(samples: list[dict]) -> list[dict]:
    """Per-question rows as ``bench.lib.retrieval.evaluate`` makes them, from fixed rankings (no ingest)."""
    rows = []
    for q in all_questions(samples):
        ranked = {"engram": [["D1:1"], ["D1:3"]], "BM25": [["D1:2"]], "dense": [["D1:3"]], "RRF": [["D1:1"]]}
        rows.append(
            {
                "sample_id": q.sample_id,
                "conversation": q.conversation,
                "half": locomo_half(q.conversation),
                "category": q.category,
                "recall": {s: {k: recall_at_budget(ranked[s], set(q.evidence), k) for k in KS} for s in SYSTEMS},
            }
        )
    return rows


def test_a_three_conversation_file_has_an_empty_held_out_half(tmp_path):
    folder = tmp_path / "conversations"
    folder.mkdir()
    (folder / "locomo10.json").write_text(json.dumps([_conversation(n) for n in range(3)]))
    samples = load_locomo(tmp_path)
    rows = _rows(samples)
    out = half_summaries(rows, KS, SYSTEMS, "category", list(CATEGORIES))
    assert out["halves"]["chosen_on"] == {"questions": 6, "category_counts": {1: 3, 4: 3}}
    assert out["halves"]["held_out"] == {"questions": 0, "category_counts": {}}
    assert out["recall_halves"]["engram"]["held_out"] == {"overall": {}, "by_category": {}}
    chosen = out["recall_halves"]["engram"]["chosen_on"]
    assert chosen["overall"] == {5: 0.75, 10: 0.75, 25: 0.75}  # cat 4: 1.0; cat 1: D1:3 of D1:3, D1:2 = 0.5
    assert chosen["by_category"] == {1: {5: 0.5, 10: 0.5, 25: 0.5}, 4: {5: 1.0, 10: 1.0, 25: 1.0}}
    assert out["lift_halves"] == {"chosen_on": {5: 0.25, 10: 0.25, 25: 0.25}}  # RRF: 1.0 and 0.0
    json.dumps(out)  # serialisable, no NaN from the empty half
    assert "NaN" not in json.dumps(out)

    result = {"ks": KS, "systems": list(SYSTEMS), "conversations_total": len(samples), **out}
    for half in HALVES:
        result["halves"][half]["conversations"] = [
            s["sample_id"] for i, s in enumerate(samples) if locomo_half(i) == half
        ]
    console = Console(record=True, width=200)
    print_halves(result, "category", CATEGORIES, console)
    text = console.export_text()
    assert "held out half: empty" in text and "holds 3 conversations" in text
    assert "0.750 / —" in text


def test_halves_of_ten_conversations_and_of_longmemeval_types():
    samples = [_conversation(n) for n in range(10)]
    out = half_summaries(_rows(samples), KS, SYSTEMS, "category", list(CATEGORIES))
    assert out["halves"]["chosen_on"]["questions"] == out["halves"]["held_out"]["questions"] == 10
    assert out["recall_halves"]["RRF"]["held_out"]["by_category"][1][10] == 0.0
    rows = [
        {
            "question_id": qid,
            "half": longmemeval_half(qid),
            "type": t,
            "recall": {s: {k: float(qid == "07741c45") for k in (1, 5)} for s in SYSTEMS},
        }
        for qid, t in [("07741c45", "temporal-reasoning"), ("078150f1", "multi-session")]
    ]
    out = half_summaries(rows, [1, 5], SYSTEMS, "type", ["multi-session", "temporal-reasoning"])
    assert out["halves"]["chosen_on"] == {"questions": 1, "type_counts": {"temporal-reasoning": 1}}
    assert out["recall_halves"]["engram"]["held_out"] == {
        "overall": {1: 0.0, 5: 0.0},
        "by_type": {"multi-session": {1: 0.0, 5: 0.0}},
    }
    console = Console(record=True, width=200)
    print_halves({"ks": [1, 5], "systems": list(SYSTEMS), **out}, "type", console=console)
    assert "1.000 / 0.000" in console.export_text()
