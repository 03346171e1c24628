"""``bench/retrieval.py``'s report of how engram's budget of k turns is spent between turns and memories, and how
often a returned memory brings evidence that no turn in the top k did (issue 45: memories that earn their place)."""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.lib.retrieval import budget_diagnostics  # noqa: E402


def _diag(sources, types, ks, evidence):
    diag: dict[str, list] = defaultdict(list)
    budget_diagnostics(diag, sources, types, ks, evidence)
    return {key: vals[0] for key, vals in diag.items()}


def test_a_memory_within_the_budget_that_brings_new_evidence_is_counted():
    # two turns, then an episode citing one turn already shown and the evidence D1:9
    d = _diag([["D1:1"], ["D1:2"], ["D1:1", "D1:9", "D1:8"]], ["observation", "observation", "episodic"], [3], {"D1:9"})
    assert d["@3 turns from memories (share)"] == 1 / 3  # D1:9 only: D1:1 was a turn's
    assert d["@3 memory-only evidence (share of questions)"] == 1.0
    assert d["@3 evidence a returned memory cites beyond the top k (share of questions)"] == 0.0
    assert d["memory hits among returned (count)"] == 1
    assert d["rank of the first memory hit returned"] == 3


def test_a_memory_below_the_budget_that_cites_missed_evidence_is_what_memories_could_have_brought():
    d = _diag([["D1:1"], ["D1:2"], ["D2:4", "D1:9"]], ["observation", "observation", "semantic"], [2], {"D1:9"})
    assert d["@2 turns from memories (share)"] == 0.0
    assert d["@2 memory-only evidence (share of questions)"] == 0.0
    assert d["@2 evidence a returned memory cites beyond the top k (share of questions)"] == 1.0


def test_turns_only_spend_nothing_on_memories():
    d = _diag([["D1:1"], ["D1:9"]], ["observation", "observation"], [2], {"D1:9"})
    assert d["questions with a memory hit returned (share)"] == 0.0
    assert "rank of the first memory hit returned" not in d
    assert d["@2 memory-only evidence (share of questions)"] == 0.0
    assert d["@2 hits consumed"] == 2
