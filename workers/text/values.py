"""Short values compared as phrases: whether a profile value is said in full by a longer one ("son" by "son Kyle",
"dog" by "three dogs"), so a block keeps the fuller one once (``extract.rules.profile_lines`` within a sentence,
``memory.dynamics.merge_block`` across a user's block)."""

from __future__ import annotations


def regular_forms(word: str) -> tuple[str, ...]:
    """``word`` and its regular plurals ("dog": "dogs", "doges"; "puppy": "puppies"): enough to see a value again
    where a pet or a relative is said in either number ("my dog", "the dogs"); an irregular plural ("child",
    "children") is another value."""
    forms = (word, f"{word}s", f"{word}es")
    return (*forms, f"{word[:-1]}ies") if word.endswith("y") else forms


def said_in(short: str, long: str) -> bool:
    """Whether ``short`` is ``long``, its first words or its last ones, its last word in either number ("son" in
    "son Kyle", "studio" in "dance studio", "dog" in "three dogs"; not "fantasy" in "getting lost in fantasy
    stories"). Case-sensitive (``merge_block`` lower-cases both, ``profile_lines`` compares values as read)."""
    return any(long == f or long.startswith(f"{f} ") or long.endswith(f" {f}") for f in regular_forms(short))
