"""LoCoMo conversation 0 through the real ingest path: engram's evidence recall@10 (categories 1-4, at a
budget of 10 turns) must reach a floor (0.75; 0.81 measured) and beat reciprocal rank fusion of BM25
and dense over the raw turns of the same conversation overall and in every category."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.mark.integration
@pytest.mark.timeout(1200)
@pytest.mark.slow
def test_engram_recall_at_10_beats_raw_turn_rrf_on_conversation_0(tmp_path):
    from bench.lib.locomo import locomo_path

    if not locomo_path().exists():
        pytest.skip(f"LoCoMo not found at {locomo_path()} (set ENGRAM_EVAL_DATA)")
    from bench.lib.retrieval import evaluate

    result = evaluate([0], ks=(5, 10, 25), data_dir=tmp_path / "data", progress=False)
    engram = result["recall"]["engram"]["overall"][10]
    bm25 = result["recall"]["BM25"]["overall"][10]
    print(
        f"LoCoMo {result['conversations'][0]}, {result['questions']} questions: evidence recall@10 "
        f"engram {engram:.3f}, BM25 {bm25:.3f}, dense {result['recall']['dense']['overall'][10]:.3f}, "
        f"RRF {result['recall']['RRF']['overall'][10]:.3f}"
    )
    assert result["questions"] > 100
    assert result["ingest_files"][result["conversations"][0]]["done"] == 1
    assert engram >= 0.75
    assert engram >= bm25 + 0.1
    for cat, rec in result["recall"]["engram"]["by_category"].items():
        assert rec[10] > result["recall"]["RRF"]["by_category"][cat][10], cat
