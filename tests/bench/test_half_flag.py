"""``bench/retrieval.py --half``: which LoCoMo conversations one half runs (issue 45, ``docs/quality.md``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.lib.locomo import half_conversations  # noqa: E402


def test_a_half_of_the_ten_conversations():
    assert half_conversations(10, "chosen_on") == [0, 1, 2, 3, 4]
    assert half_conversations(10, "held_out") == [5, 6, 7, 8, 9]


def test_a_half_of_the_conversations_picked_keeps_their_order():
    assert half_conversations(10, "held_out", [7, 2, 5]) == [7, 5]
    assert half_conversations(10, "chosen_on", [7, 2, 5]) == [2]


def test_no_half_runs_what_was_picked():
    assert half_conversations(10, None) is None
    assert half_conversations(10, None, [3, 8]) == [3, 8]


def test_a_small_file_has_no_held_out_conversation():
    assert half_conversations(3, "held_out") == []
    assert half_conversations(3, "chosen_on") == [0, 1, 2]


def test_an_unknown_half_is_refused():
    with pytest.raises(ValueError, match="half must be one of"):
        half_conversations(10, "train")
