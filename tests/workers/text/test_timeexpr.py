"""Time expressions in queries resolved against fixed reference dates (``workers.text.timeexpr``)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from engram.workers.text.timeexpr import resolve

REF = datetime(2023, 5, 20, 15, 30, tzinfo=UTC)  # a Saturday


def day(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("What did I do last Tuesday?", day(2023, 5, 16), day(2023, 5, 17)),
        ("What happened in May 2023?", day(2023, 5, 1), day(2023, 6, 1)),
        ("Who did I meet yesterday?", day(2023, 5, 19), day(2023, 5, 20)),
        ("What did I buy two weeks ago?", day(2023, 5, 1), day(2023, 5, 8)),  # the ISO week of May 6
        ("What did we discuss last month?", day(2023, 4, 1), day(2023, 5, 1)),
        ("Where did I travel last year?", day(2022, 1, 1), day(2023, 1, 1)),
        ("What did I eat on 7 May 2023?", day(2023, 5, 7), day(2023, 5, 8)),
        ("What did Maria do on April 10, 2023?", day(2023, 4, 10), day(2023, 4, 11)),  # one date, not three
        ("Which book did Jolene read in January 2023?", day(2023, 1, 1), day(2023, 2, 1)),
        ("Which outdoor spot did Joanna visit in June?", day(2022, 6, 1), day(2022, 7, 1)),  # the June before REF
        ("Where was John between August 11 and August 15 2022?", day(2022, 8, 11), day(2022, 8, 16)),
        ("What did they do the weekend before 4th October, 2022?", day(2022, 9, 20), day(2022, 10, 5)),
        ("What did they plan on the Saturday after October 28, 2022?", day(2022, 10, 28), day(2022, 11, 12)),
        ("I cooked something for a friend a couple of days ago. What was it?", day(2023, 5, 17), day(2023, 5, 20)),
        ("Which museum did I visit a few weeks ago?", day(2023, 4, 15), day(2023, 5, 7)),
        ("What did I start several months ago?", day(2022, 9, 22), day(2023, 2, 20)),
    ],
)
def test_expressions_resolve_to_their_range(query, start, end):
    got = resolve(query, REF)
    assert got is not None, query
    assert (got.start, got.end) == (start, end), got.expression
    assert got.reference_time == REF


@pytest.mark.parametrize(
    "query",
    [
        "When did Caroline go to the LGBTQ support group?",
        "May I ask what you recommended for my headache?",  # the modal verb, not the month
        "How long ago was Caroline's 18th birthday?",  # an ordinal alone is no date
        "How many days a week do I attend fitness classes?",
        "When did James try Cyberpunk 2077?",  # a number past the reference year is no date
        "What do 6S and MAJA implement?",
        "What did we discuss?",
    ],
)
def test_words_that_only_look_like_dates_are_ignored(query):
    assert resolve(query, REF) is None


def test_reference_defaults_to_now():
    got = resolve("what did I read yesterday")
    assert got is not None and (datetime.now(UTC) - got.end).total_seconds() < 86400 + 60


@pytest.mark.parametrize(
    ("reference", "zone", "start", "end"),
    [
        # 15:30 UTC is 08:30 in Los Angeles (PDT, UTC-7): the same calendar day, its midnight 7 hours later
        (REF, "UTC", day(2023, 5, 19), day(2023, 5, 20)),
        (REF, "America/Los_Angeles", datetime(2023, 5, 19, 7, tzinfo=UTC), datetime(2023, 5, 20, 7, tzinfo=UTC)),
        # 03:00 UTC on the 20th is still the 19th in Los Angeles: its yesterday is the 18th
        (datetime(2023, 5, 20, 3, tzinfo=UTC), "UTC", day(2023, 5, 19), day(2023, 5, 20)),
        (
            datetime(2023, 5, 20, 3, tzinfo=UTC),
            "America/Los_Angeles",
            datetime(2023, 5, 18, 7, tzinfo=UTC),
            datetime(2023, 5, 19, 7, tzinfo=UTC),
        ),
    ],
)
def test_yesterday_is_the_day_before_in_the_configured_zone(monkeypatch, reference, zone, start, end):
    monkeypatch.setenv("ENGRAM_TIMEZONE", zone)
    got = resolve("Who did I meet yesterday?", reference)
    assert got is not None and (got.start, got.end) == (start, end)
    assert got.start.tzinfo == UTC and got.reference_time == reference


def test_a_month_in_a_zone_across_a_dst_change():
    got = resolve("What happened in March 2024?", datetime(2024, 5, 1, tzinfo=UTC), tz=ZoneInfo("Europe/Berlin"))
    # March 1 00:00 CET (UTC+1) to April 1 00:00 CEST (UTC+2)
    assert got is not None
    assert (got.start, got.end) == (datetime(2024, 2, 29, 23, tzinfo=UTC), datetime(2024, 3, 31, 22, tzinfo=UTC))


def _real_questions(data) -> list[tuple[str, datetime]]:
    """Every LoCoMo question (against REF: they carry no date) and every LongMemEval question against its date."""
    import json

    out = [
        (qa["question"], REF)
        for sample in json.loads((data / "conversations" / "locomo10.json").read_text())
        for qa in sample["qa"]
    ]
    for path in sorted((data / "conversations" / "longmemeval_s").glob("*.json")):
        q = json.loads(path.read_text())
        date = q["question_date"].split(" (")[0] + " " + q["question_date"].split(") ")[-1]
        out.append((q["question"], datetime.strptime(date, "%Y/%m/%d %H:%M").replace(tzinfo=UTC)))
    return out


def test_questions_without_a_time_cue_resolve_as_dateparser_reads_them(eval_data):
    """The shortcut (no ``dateparser`` for a query without a time cue) changes no question's range: every real
    question resolves to what ``dateparser`` reading it finds."""
    from engram.workers.text import timeexpr

    questions = _real_questions(eval_data)
    assert len(questions) > 2000
    cued = 0
    for question, ref in questions:
        cued += timeexpr.has_time_cue(question)
        assert timeexpr.resolve(question, ref, UTC) == timeexpr._resolve(question, ref, UTC), question
    assert 0 < cued < len(questions) / 2  # the shortcut answers most questions


@pytest.mark.parametrize(
    ("query", "cue"),
    [
        ("What did Caroline research?", False),
        ("When did Melanie paint a sunrise?", False),
        ("Would Caroline still want to pursue counseling?", False),
        ("What did I do last Tuesday?", True),
        ("What happened in 2022?", True),
        ("Who called two days ago?", True),
        ("What did Joanna do on 3 May?", True),
        ("What did we do this weekend?", True),
    ],
)
def test_time_cues(query, cue):
    from engram.workers.text.timeexpr import has_time_cue

    assert has_time_cue(query) is cue


def test_a_query_without_a_time_cue_does_not_import_dateparser():
    import subprocess
    import sys

    code = (
        "import sys; from engram.workers.text.timeexpr import resolve; "
        "print(resolve('What did Caroline research?'), 'dateparser' in sys.modules); "
        "resolve('What did Caroline do last week?'); print('dateparser' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["None", "False", "True"]


def test_date_order_is_read_from_the_dates_that_can_be_read_one_way_only():
    """``date_order``: a first number above 12 says day-first, a second one month-first; year-first, named months
    and dates that could be either say nothing; both orders in one file are refused naming one date of each."""
    from engram.workers.text.timeexpr import date_order

    assert date_order([("a", "03.04.2024, 18:20:05"), ("b", "14.03.2024, 09:12:45")]) == "DMY"
    assert date_order([("a", "3/14/24, 9:41 PM"), ("b", "04/03/2024")]) == "MDY"
    assert date_order([("a", "03.04.2024"), ("b", "2024-03-14"), ("c", "1:56 pm on 8 May, 2023")]) is None
    assert date_order([]) is None
    with pytest.raises(
        ValueError,
        match=r"^line 1 \('13.03.2024'\) is day-first but line 3 \('03.14.2024'\) "
        r"month-first$",
    ):
        date_order([("line 1", "13.03.2024"), ("line 2", "01.02.2024"), ("line 3", "03.14.2024")])
