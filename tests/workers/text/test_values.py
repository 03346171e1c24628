"""``workers.text.values``: when one profile value is said in full by a longer one."""

from __future__ import annotations

import pytest

from engram.workers.text.values import said_in


@pytest.mark.parametrize(
    ("short", "long", "said"),
    [
        ("son", "son kyle", True),  # its first words
        ("studio", "dance studio", True),  # its last words
        ("dog", "dogs", True),  # the other number
        ("dog", "three dogs", True),
        ("puppy", "puppies", True),
        ("class", "english lit classes", True),
        ("fantasy", "getting lost in fantasy stories", False),  # in the middle: another thought
        ("dogs", "dog", False),  # the longer value is the fuller one
        ("child", "children", False),  # irregular plurals are other values
        ("art", "artist", False),  # a word, not a prefix
    ],
)
def test_a_value_said_in_full_by_a_longer_one(short, long, said):
    assert said_in(short, long) is said
