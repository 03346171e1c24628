"""The user's profile lines (the core ``human`` block) the rules extractor reads from the user's own words: family,
pets, occupation, a job left, what they work on, study, are allergic to and where they lived (``PROFILE_PATTERNS``),
cleaner likes, and the block merge that keeps several values of these labels (``dynamics.merge_block``). The
sentences are LoCoMo's (conversations 0-4, the first speakers'), run through the whole extractor, statements'
parse included."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engram.workers.extract.base import Seen
from engram.workers.extract.rules import PROFILE_PATTERNS, RulesExtractor
from engram.workers.memory.dynamics import merge_block


def _profile(*turns: str, user: str = "John", other: str = "Maria") -> list[str]:
    """The core lines the user's ``turns`` give, in order (one turn of ``other`` between them)."""
    when = datetime(2024, 5, 1, tzinfo=UTC)
    seen = []
    for t in turns:
        seen.append(Seen(text=t, kind="text", captured_at=when, speaker=user, about_user=True))
        seen.append(Seen(text=f"That's great, {user}!", kind="text", captured_at=when, speaker=other))
    return [f for c in RulesExtractor().extract(seen, user).core for f in c.facts]


@pytest.mark.parametrize(
    ("turn", "lines"),
    [
        (
            "That picture was from a trip we took last year for my daughter Sara's birthday - so much fun and good "
            "memories!",
            ["family: daughter Sara"],
        ),
        ("Yeah, my family is awesome - me, the missus, and the kids.", ["family: wife"]),
        ("Best of all, my kids are getting excited about staying active!", ["family: kids"]),
        ("And yup, I do- Oscar, my guinea pig.", ["pets: guinea pig Oscar"]),
        (
            "Lost my job as a banker yesterday, so I'm gonna take a shot at starting my own business.",
            ["former job: banker", "works on: business"],
        ),
        ("I lost my job at the mechanical engineering company.", ["former job: mechanical engineering company"]),
        (
            "It feels like all the hard work I've put in has paid off now that I'm an assistant manager- it's like a "
            "stepping stone for bigger things.",
            ["occupation: assistant manager"],
        ),
        (
            "As a writer, my laptop is like half of my lifeline so losing all progress was like a major blow.",
            ["occupation: writer"],
        ),
        ("Hoping my screenplay gets noticed and makes it to the screen.", ["works on: screenplay"]),
        ("Hey John, I had a tough time with my English lit class.", ["student: English lit class"]),
        ("I'm allergic to most reptiles and animals with fur.", ["allergic to: most reptiles and animals with fur"]),
        (
            "I used to have a dog back in Michigan with that name, but then I got allergic and we had to get rid of "
            "her.",
            ["lived in: Michigan"],
        ),
    ],
)
def test_profile_lines_from_the_users_own_words(turn, lines):
    assert _profile(turn) == lines


def test_no_profile_line_from_words_that_name_no_such_thing():
    assert _profile(
        "I'm a huge fan of this genre!",  # no occupation: "fan" is none
        "I think I am an expert hiker now.",
        "This is my book collection so far.",  # no "works on": a collection
        "I'm considering going into policymaking because of my degree.",  # a degree is no class being taken
        "Hey Maria, my dog is sick.",  # the pet is named nowhere here: no "dog Maria"
        "I lost it back in March.",
    ) == ["pets: dog"]


def test_only_the_users_words_give_profile_lines():
    when = datetime(2024, 5, 1, tzinfo=UTC)
    seen = [Seen(text="I'm allergic to cats.", kind="text", captured_at=when, speaker="Maria")]
    assert RulesExtractor().extract(seen, "John").core == []


def test_likes_said_of_what_the_other_shows_give_no_profile_line():
    lines = _profile(
        "They created all the props for the Harry Potter films, and I love their work.",
        "Connecting with the things I love makes writing even more fun.",
        "I love the color and texture.",
        "I love the thought Nate!",
        "I love running my own studio.",
        "I found this opportunity on a fantasy lit forum and thought it'd be perfect since I love fantasy.",
        user="Tim",
        other="Nate",
    )
    assert lines == ["likes: running their own studio", "works on: studio", "likes: fantasy"]


def test_likes_pointing_at_what_only_the_conversation_shows_give_no_profile_line():
    """A like read alone must name its thing: "this cake" and "him" are the chat's, not the profile's (LoCoMo's
    conversation 3, and a like of the held-out half's kind); "that" inside a line stays."""
    lines = _profile(
        "Hey Nate, I love making this dairy-free chocolate cake with raspberries.",
        "I love making him happy.",
        "I love songs that rhyme.",
        "I love painting landscapes.",
        user="Joanna",
        other="Nate",
    )
    assert lines == ["likes: songs that rhyme", "likes: painting landscapes"]


def test_a_clause_line_ends_at_a_dash():
    assert _profile(
        "Lately, I've been looking into counseling and mental health as a career. I'm keen on counseling or working in "
        "mental health - I'd love to support those with similar issues.",
        user="Caroline",
        other="Melanie",
    ) == ["interest: keen on counseling or working in mental health"]


def test_every_profile_pattern_passes_its_gate():
    examples = [
        "my daughter Sara",
        "the missus and the kids",
        "My dog, Max, is great.",
        "Oscar, my guinea pig.",
        "I have three dogs.",
        "I'm an assistant manager now.",
        "I am a nurse.",
        "As a writer, I know.",
        "Lost my job as a banker yesterday.",
        "I quit my job at the bank.",
        "I love my own dance studio.",
        "My English lit class.",
        "back in Michigan",
        "I'm allergic to cats.",
    ]
    for label, gate, pattern in PROFILE_PATTERNS:
        for text in examples:
            if pattern.search(text):
                assert any(lit in text for lit in gate), (label, text)
    assert all(any(p.search(t) for _, _, p in PROFILE_PATTERNS) for t in examples)


def test_merge_keeps_the_values_of_multi_valued_labels():
    block = merge_block(
        "interest: passionate about dancing\nfamily: son",
        [
            "interest: passionate about helping people",
            "family: son Kyle",
            "works on: studio",
            "works on: dance studio",
            "likes: fantasy",
            "likes: getting lost in fantasy stories",
            "family: son",
        ],
        2000,
    )
    assert block.splitlines() == [
        "interest: passionate about dancing, passionate about helping people",
        "works on: dance studio",
        "likes: fantasy, getting lost in fantasy stories",
        "family: son Kyle",  # "son" said again: said in full already, kept as it was
    ]


def test_a_value_said_again_in_the_other_number_is_one_value():
    block = merge_block(
        "pets: dog\nfamily: kids",
        ["pets: dogs", "pets: puppies", "pets: puppy", "family: kid", "pets: three dogs", "pets: dog"],
        2000,
    )
    # "dog" then "dogs" then "three dogs" keep the fullest; "puppy" after "puppies" is said by it already
    assert block.splitlines() == ["family: kids", "pets: puppies, three dogs"]


@pytest.mark.parametrize(
    ("turn", "lines"),
    [
        ("I go to my gym every morning before work, it keeps me sane and happy all day.", []),  # where one trains
        ("I finally opened my own gym last month!", ["works on: gym"]),
        ("I'm a big fan of scents like this.", []),  # "this" is what the other person showed
        ("I'm a big fan of lavender scents.", ["interest: a big fan of lavender scents"]),
        ("I love the taste of these.", []),
    ],
)
def test_no_profile_line_for_a_gym_one_trains_at_or_for_what_was_shown(turn, lines):
    assert _profile(turn) == lines
