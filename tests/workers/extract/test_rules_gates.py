"""The rules extractor's literal gates (``workers.extract.rules.FACT_GATES``, and the URL and file-name
pre-scans of ``resources``) skip only texts a pattern cannot match: on example sentences of every pattern and on
every turn of LoCoMo's conversations (when the evaluation data is there), a pattern that matches a text always
passes its gate, and the gated extractor gives the same drafts as running every fact pattern on every sentence."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from engram.schemas.settings import get_settings
from engram.workers.extract.base import Seen
from engram.workers.extract.rules import (
    _FILE,
    _FILE_EXT,
    _URL,
    FACT_GATES,
    FACT_PATTERNS,
    RulesExtractor,
    _passes,
    sentences,
)

EXAMPLES = [
    "I live in Paris now.",
    "Ann lives in New York, and she likes it.",
    "I'm living in Berlin",
    "I am living in Rome.",
    "I've just moved to Lisbon.",
    "Ann has relocated to San Francisco",
    "I work at Google.",
    "I'm working for Acme Corp.",
    "Ann got a job at Siemens.",
    "I started working at the Louvre",
    "I work as a nurse.",
    "I'm working as an engineer at a startup.",
    "I am 34 years old.",
    "I just turned 40 years old",
    "I'm from Lyon.",
    "Ann comes originally from Osaka.",
    "I grew up in Ohio.",
    "I'm married to John.",
    "My birthday is on 3rd May.",
    "Ann's birthday is June 12th",
    "My favourite band is Muse.",
    "My all-time favorite film genre is horror, but I watch dramas too.",
    "I study physics.",
    "I'm studying law at Yale.",
    "Ann majored in history",
    "I have a dog named Rex.",
    "I adopted an old cat.",
    "Ann got a puppy",
    "I love hiking in the Alps.",
    "I really enjoy to cook with friends.",
    "Ann loves jazz",
    "I'm passionate about dancing and music.",
    "Ann is a huge fan of jazz",
    "I'm working on my business.",
    "I've been training for a marathon since May.",
    "I just launched an ad campaign for my clothing store.",
    "Ann used to compete in dance shows, and won.",
    "I lost my job as a banker.",
    "See https://example.org/a and www.b.com",
    "open notes_v2.md then report.PDF and data.json or budget.xlsx",
]


def _ungated(extractor: RulesExtractor, seen: list[Seen], user_id: str):
    """The extraction with every pattern run on every sentence (the gates bypassed)."""
    import engram.workers.extract.rules as rules

    saved = rules.FACT_GATES
    rules.FACT_GATES = [()] * len(FACT_PATTERNS)  # an empty gate passes every sentence
    try:
        return extractor.extract(seen, user_id)
    finally:
        rules.FACT_GATES = saved


def _check(texts: list[str], speakers: list[str | None]) -> None:
    for text in texts:
        if _FILE.search(text):  # resources() skips the file-name scan of a text without a .<extension>
            assert _FILE_EXT.search(text), text
        if _URL.search(text):  # ... and the URL scan of a text without "http" or "www."
            assert "http" in text or "www." in text, text
        for sentence in sentences(text):
            for (attribute, _, _, pattern), gate in zip(FACT_PATTERNS, FACT_GATES, strict=True):
                if pattern.search(sentence):
                    assert _passes(sentence, gate), (attribute, sentence)
    when = datetime(2024, 5, 1, tzinfo=UTC)
    seen = [
        Seen(text=t, kind="text", captured_at=when, speaker=s, about_user=s == "user")
        for t, s in zip(texts, speakers, strict=True)
    ]
    extractor = RulesExtractor()
    assert extractor.extract(seen, "user") == _ungated(extractor, seen, "user")


def test_gates_pass_every_example():
    assert len(FACT_GATES) == len(FACT_PATTERNS)
    _check(EXAMPLES, ["user" if i % 2 else "Ann" for i in range(len(EXAMPLES))])
    assert (
        RulesExtractor()
        .extract(
            [
                Seen(text=t, kind="text", captured_at=datetime(2024, 5, 1, tzinfo=UTC), speaker="user", about_user=True)
                for t in EXAMPLES
            ],
            "user",
        )
        .semantic
    )


@pytest.mark.slow  # ~40 s: every LoCoMo turn extracted twice, each time parsed by spaCy (extract.statements)
def test_gates_on_locomo():
    path = get_settings().eval_data / "conversations" / "locomo10.json"
    if not path.exists():
        pytest.skip(f"no LoCoMo data at {path}")
    texts, speakers = [], []
    for sample in json.loads(path.read_text()):
        conv = sample["conversation"]
        for key, turns in conv.items():
            if key.startswith("session_") and isinstance(turns, list):
                for turn in turns:
                    texts.append(turn.get("text") or "")
                    speakers.append(turn.get("speaker"))
    assert len(texts) > 1000
    _check(texts, speakers)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (
            "I met Dr. Smith at 3 p.m. on Friday. He served in the U.S. Navy! Did you?",
            ["I met Dr. Smith at 3 p.m. on Friday.", "He served in the U.S. Navy!", "Did you?"],
        ),
        (
            "It costs 2.5 dollars, e.g. a coffee. Then  we left.",
            ["It costs 2.5 dollars, e.g. a coffee.", "Then  we left."],
        ),
        ("first line\nsecond line. And more", ["first line", "second line.", "And more"]),
        ("", []),
    ],
)
def test_sentences_keep_abbreviations_and_the_text_as_written(text, want):
    assert sentences(text) == want
