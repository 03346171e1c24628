"""A chat turn is split into sentences once per process: extraction reads the split embedding made."""

from __future__ import annotations

import json

from engram.workers.extract.base import Seen
from engram.workers.text import sentences as mod
from engram.workers.text.sentences import sentences, sentences_without_prefix


def test_the_prefix_is_cut_from_the_first_sentence_or_drops_it():
    assert sentences_without_prefix("Bob: Dr. Smith came at 3 p.m. on Friday. It rained.", "Bob:") == [
        "Dr. Smith came at 3 p.m. on Friday.",
        "It rained.",
    ]
    assert sentences_without_prefix("Bob:\nHello there. Bye.", "Bob:") == ["Hello there.", "Bye."]
    assert sentences_without_prefix("Bob:", "Bob:") == []
    assert sentences_without_prefix("Ann: hi", "Bob:") == ["Ann: hi"]  # not its prefix: split as given
    assert sentences_without_prefix("", "") == []


def test_extraction_splits_a_turn_embedding_split_already():
    """``Seen.own_sentences`` reads the split of the whole text (kept per process), not syntok again."""
    text = "Melanie: I ran a charity race for mental health last Saturday. It was so rewarding!"
    sentences(text)  # what the embedding stage does for the turn
    before = mod._split_memo.cache_info()
    own = Seen(text=text, kind="text", captured_at=None, speaker="Melanie").own_sentences()  # type: ignore[arg-type]
    after = mod._split_memo.cache_info()
    assert own == ["I ran a charity race for mental health last Saturday.", "It was so rewarding!"]
    assert (after.hits - before.hits, after.misses - before.misses) == (1, 0)


def test_the_same_sentences_as_splitting_the_turn_without_its_speaker_on_every_locomo_turn(eval_data):
    turns = 0
    for sample in json.loads((eval_data / "conversations" / "locomo10.json").read_text()):
        for key, session in sample["conversation"].items():
            if not (key.startswith("session_") and isinstance(session, list)):
                continue
            for turn in session:
                prefix = f"{turn['speaker']}:"
                text = f"{prefix} {turn['text']}"
                assert sentences_without_prefix(text, prefix) == sentences(text[len(prefix) :].strip()), text
                turns += 1
    assert turns > 5000
