"""LongMemEval-S through the real ingest path: each question's haystack ingested fresh as its own user, and
engram's session recall_any@5 (a budget of five sessions) on the first questions at least that of RRF over
the haystack's sessions as documents. The full figures come from ``bench/retrieval.py --longmemeval``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

QUESTIONS = 3


@pytest.mark.integration
@pytest.mark.timeout(1200)
@pytest.mark.slow
def test_engram_session_recall_on_first_longmemeval_questions():
    from bench.lib.longmemeval import longmemeval_path

    if not longmemeval_path().is_dir():
        pytest.skip(f"LongMemEval-S not found at {longmemeval_path()} (set ENGRAM_EVAL_DATA)")
    from bench.lib.retrieval import evaluate_longmemeval

    result = evaluate_longmemeval(QUESTIONS, progress=False)
    rec = {s: result["recall"][s]["overall"] for s in result["systems"]}
    print(
        f"LongMemEval-S, {result['questions']} questions: "
        + "; ".join(f"{s} R@1 {r[1]:.2f} R@5 {r[5]:.2f}" for s, r in rec.items())
    )
    assert result["questions"] == QUESTIONS
    assert rec["engram"][5] >= rec["RRF"][5]
    assert rec["engram"][5] >= 2 / 3
