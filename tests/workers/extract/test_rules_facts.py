"""The rules extractor's verb frames for what a speaker does, did or is into: third-person summaries of the
speaker's own words, and no fact from a clause that says nothing ("I'm into it", "I went to bed")."""

from __future__ import annotations

from datetime import UTC, datetime

from engram.workers.extract.base import Seen
from engram.workers.extract.rules import RulesExtractor


def _summaries(*texts: str, speaker: str = "Gina") -> list[str]:
    seen = [Seen(text=t, kind="text", captured_at=datetime(2024, 5, 1, tzinfo=UTC), speaker=speaker) for t in texts]
    return [d.summary for d in RulesExtractor().extract(seen, "user").semantic]


def test_what_a_speaker_does_did_or_is_into_in_the_third_person():
    assert _summaries(
        "I just launched an ad campaign for my clothing store in hopes of growing the business.",
        "I'm starting a dance studio 'cause I'm passionate about dancing and it'd be great to share it.",
        "I've been training for a marathon since May.",
        "I used to compete in a few dance competitions and shows.",
        "Lisa is a big fan of jazz.",  # not a speaker of the conversation: not known to be anyone here
    ) == [
        "Gina is passionate about dancing",
        "Gina is starting a dance studio",
        "Gina is training for a marathon",
        "Gina used to compete in a few dance competitions",
        # a turn long enough to tell on its own: its statement (extract.statements) says the pattern's fact in full
        "Gina just launched an ad campaign for their clothing store in hopes of growing the business",
    ]


def test_clauses_that_say_nothing_make_no_fact():
    assert _summaries("I'm into it.", "I went to bed early.", "I started again!", "Yeah, I'm so into that.") == []


def test_frames_are_multi_valued():
    seen = [
        Seen(text="I'm working on my novel.", kind="text", captured_at=datetime(2024, 5, 1, tzinfo=UTC), speaker="Ann")
    ]
    [draft] = RulesExtractor().extract(seen, "user").semantic
    assert (draft.name, draft.attribute, draft.value) == ("Ann", "", "")  # never supersedes another one


def test_what_the_user_does_stays_out_of_the_profile_block():
    seen = [
        Seen(text=t, kind="text", captured_at=datetime(2024, 5, 1, tzinfo=UTC), speaker="user", about_user=True)
        for t in ("I'm working on my novel.", "I'm passionate about jazz.")
    ]
    got = RulesExtractor().extract(seen, "alice")
    assert [d.summary for d in got.semantic] == ["alice is working on their novel", "alice is passionate about jazz"]
    # no "working on" line; "my novel" says what they work on (``PROFILE_PATTERNS``, tests/.../test_rules_profile.py)
    assert [c.facts for c in got.core] == [["works on: novel"], ["interest: passionate about jazz"]]
