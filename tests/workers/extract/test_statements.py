"""What a speaker says about themselves, read by spaCy's parser (``workers.extract.statements``): clauses in the
third person with the speaker's name, questions and small talk left out, one fact per turn that tells enough; and
the profile lines the rules extractor adds to the user's core block (origin, identity, goal)."""

from __future__ import annotations

from datetime import UTC, datetime

from engram.workers.extract.base import Seen
from engram.workers.extract.rules import RulesExtractor
from engram.workers.extract.statements import statements, telling, turn_fact


def _texts(sentence: str, name: str = "Caroline") -> list[str]:
    [found] = statements([(sentence, name)])
    return [s.text for s in found]


def test_clauses_in_the_third_person():
    assert _texts("I went to a LGBTQ support group yesterday and it was so powerful.") == [
        "Caroline went to a LGBTQ support group yesterday"
    ]  # "it was so powerful" is not about her
    assert _texts("The support group has made me feel accepted and given me courage to embrace myself.") == [
        "The support group has made Caroline feel accepted and given them courage to embrace themselves"
    ]
    assert _texts(
        "I'm keen on counseling or working in mental health - I'd love to support those with similar issues."
    ) == [
        "Caroline is keen on counseling or working in mental health",
        "Caroline would love to support those with similar issues",
    ]
    assert _texts("I've been painting a lot lately, I don't have much time though.") == [
        "Caroline has been painting a lot lately",
        "Caroline doesn't have much time though",
    ]
    assert _texts("My daughter loves dinosaurs.", "Melanie") == ["Melanie's daughter loves dinosaurs"]


def test_questions_and_other_people_make_no_statement():
    assert _texts("Have you ever been to Sweden?") == []
    assert _texts("The lake was lovely.") == []  # no first person: nothing about the speaker
    assert _texts("Let's keep helping each other out.") == []  # "us": both speakers
    [found] = statements([("I'm so happy for you!", "Caroline")])
    assert [s.text for s in found] == ["Caroline is so happy for you"] and not telling(found[0])


def test_one_fact_per_turn_when_it_tells_enough():
    [short] = statements([("I'm swamped with the kids & work.", "Melanie")])
    assert turn_fact(short) == ""  # 7 words: fewer than MIN_WORDS
    found = [
        s
        for sents in statements(
            [
                ("I went to a LGBTQ support group yesterday.", "Caroline"),
                ("I'm keen on counseling or working in mental health.", "Caroline"),
            ]
        )
        for s in sents
    ]
    assert turn_fact(found) == (
        "Caroline went to a LGBTQ support group yesterday; Caroline is keen on counseling or working in mental health"
    )


def test_a_turn_becomes_one_semantic_draft_citing_it():
    when = datetime(2024, 5, 1, tzinfo=UTC)
    seen = [
        Seen(
            text="Caroline: Hey Mel! I went to a LGBTQ support group yesterday and it was so powerful. I'm "
            "keen on counseling or working in mental health. How are you?",
            kind="text",
            captured_at=when,
            speaker="Caroline",
        ),
        Seen(text="Melanie: Wow, that's cool!", kind="text", captured_at=when, speaker="Melanie"),
    ]
    [draft] = RulesExtractor().extract(seen, "user").semantic
    assert (draft.name, draft.sources, draft.attribute) == ("Caroline", [0], "")
    assert draft.summary.startswith("Caroline went to a LGBTQ support group yesterday; Caroline is keen on")


def test_profile_lines_of_the_user():
    when = datetime(2024, 5, 1, tzinfo=UTC)
    texts = [
        "This necklace is a gift from my grandma in my home country, Sweden.",
        "I made it to show my own journey as a transgender woman.",
        "My dream is to create a safe and loving home for these kids.",
    ]
    seen = [Seen(text=t, kind="text", captured_at=when, speaker="Caroline", about_user=True) for t in texts]
    got = RulesExtractor().extract(seen, "Caroline")
    assert [f for c in got.core for f in c.facts] == [
        "origin: Sweden",
        "identity: a transgender woman",
        "goal: create a safe and loving home for these kids",
    ]


def test_a_turn_too_short_to_make_a_fact_is_not_parsed():
    from engram.workers.extract.statements import turn_worth_parsing

    assert not turn_worth_parsing(["Hey Mel!", "I'm swamped with the kids & work.", "What's up with you?"])
    assert turn_worth_parsing(
        ["I went to a LGBTQ support group yesterday.", "I'm keen on counseling or working in mental health."]
    )


def test_a_turn_whose_long_sentences_speak_to_the_other_person_is_not_parsed():
    """Words of a sentence with "you" in it do not count toward a turn worth parsing (issue 45)."""
    from engram.workers.extract.statements import turn_worth_parsing

    assert not turn_worth_parsing(["I'm so proud of you, your kids must be thrilled with what you built for them!"])
    assert turn_worth_parsing(
        ["I'm so proud of you!", "I finally finished the garden shed I started in May, and I painted it green."]
    )


def test_spacy_loads_only_for_a_batch_with_something_to_parse():
    """Screens, transcripts and short turns give nothing to parse: spaCy (and the torch thinc imports with it) is not
    imported (issue 45)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from datetime import UTC, datetime\n"
        "from engram.workers.extract.base import Seen\n"
        "from engram.workers.extract.rules import RulesExtractor\n"
        "seen = [Seen(text='Invoice batch 42 is late. I will look at it.', kind='screenshot',"
        " captured_at=datetime.now(UTC)), Seen(text='Sam: Booked the flights!', kind='text',"
        " captured_at=datetime.now(UTC), speaker='Sam')]\n"
        "RulesExtractor().extract(seen, 'Sam')\n"
        "print('spacy' in sys.modules, 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"], done.stderr


def test_the_parse_runs_on_one_blas_thread_and_gives_the_threads_back():
    """The parse's matrix products run on numpy's BLAS (thinc's NumpyOps without blis) with one thread (a second one
    spun more than it worked); the process's BLAS thread counts are what they were once the parse is done
    (issue 45)."""
    from threadpoolctl import threadpool_info

    from engram.workers.extract import statements as st

    def blas_threads() -> list[tuple[str, int]]:
        return [(i["filepath"], i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"]

    nlp = st._nlp()
    assert {(type(proc.model.ops).__name__, proc.model.ops.use_blis) for _, proc in nlp.pipeline} == {
        ("NumpyOps", False)
    }
    before = blas_threads()
    with st._one_blas_thread():
        assert {n for _, n in blas_threads()} <= {1}
    assert _texts("I went to a LGBTQ support group yesterday and it was so powerful.") == [
        "Caroline went to a LGBTQ support group yesterday"
    ]
    assert blas_threads() == before


def test_parses_in_two_threads_at_once_give_the_blas_threads_back():
    """Two threads parsing at once (the extractor is shared between threads) leave the process's BLAS thread counts
    as they found them: the parses take turns (issue 45)."""
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_info

    def blas_threads() -> list[tuple[str, int]]:
        return [(i["filepath"], i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"]

    statements([("I went to a support group yesterday.", "Caroline")])  # spaCy loaded
    before = blas_threads()
    sentence = "I went to a LGBTQ support group yesterday and it was so powerful."
    with ThreadPoolExecutor(2) as pool:  # parses long enough to overlap (without the lock: 1 thread left, 2 runs of 3)
        got = list(pool.map(lambda _: statements([(sentence, "Caroline")] * 300), range(4)))
    assert {s.text for found in got for each in found for s in each} == {
        "Caroline went to a LGBTQ support group yesterday"
    }
    assert blas_threads() == before
