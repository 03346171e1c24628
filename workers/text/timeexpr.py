"""Time expressions in queries ("last Tuesday", "in May 2023", "yesterday", "two weeks ago") resolved into a
UTC range against a reference time (the question's date).

``dateparser`` (``search_dates`` with ``RELATIVE_BASE``, dates preferred from the past, as memory questions
look back) finds the expressions and their dates; ``DateDataParser`` gives each one's period (day, week,
month, year), which becomes the range: the day, the ISO week (Monday to Monday), the calendar month or the
calendar year around the resolved date. Matches that only spaces or commas separate are read as one
("April 10, 2023"); of nested ranges the narrowest is kept; several others give the span covering them all.

``search_dates`` also reads ordinary words as dates ("may" the verb, "we" as Wednesday, "second"); a match
is kept only when it carries a year (19xx, 20xx), a relative word (yesterday, ago, last, this, ...) or a
capitalised month or weekday name ("May" not at the start of the query, where it is the modal verb).
An expression relative to another date ("the week before August 3", "the Saturday after October 28")
resolves to that date's range widened by ``RELATION_WINDOW`` on the side the relation points to.

What ``dateparser`` does not read is resolved here first: vague counts back in time ("a couple of days ago",
"a few weeks ago", "several months ago": ``VAGUE_COUNTS`` units back, a range as wide as the vagueness).
"Last weekend" is left unresolved: as a boost of Saturday to Monday it lost a LongMemEval question whose answer
was told on the Friday before (a message is written after the event it tells, and questions date loosely).

A query without any of those cues (a year, a relative word, a capitalised month or weekday name, "May") names no
time that would be kept, so it is answered None without ``dateparser`` (``has_time_cue``; importing it and its
first search cost a cold ``engram search`` ~0.2 CPU s; 371 of LoCoMo's and LongMemEval's 2,088 questions have a
cue, and every question resolves as it did without this shortcut: ``tests/workers/text/test_timeexpr.py``).

Expressions are read in a time zone (``ENGRAM_TIMEZONE``, default the system's): "yesterday" in Los Angeles is
the Los Angeles calendar day before the reference time, 07:00 or 08:00 UTC to the same the next day. The range
returned is in UTC, as stored times are.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, tzinfo

from engram.schemas.search import TimeRange
from engram.schemas.settings import get_settings

_RELATIVE = re.compile(r"\b(yesterday|today|tonight|ago|last|past|previous|this|next|recently)\b", re.IGNORECASE)
_NAMES = re.compile(
    r"\b(January|February|March|April|June|July|August|September|October|November|December|Monday|"
    r"Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday|Jan|Feb|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|"
    r"Dec)\b"
)
_YEAR = re.compile(r"\b(19|20)\d\d\b")
_MAY = re.compile(r"\bMay\b")
_RELATION = re.compile(r"\b(before|after|since|until)\b", re.IGNORECASE)
RELATION_WINDOW = timedelta(days=14)  # "before/after <date>": the range reaches this far from the date
_STANDALONE_WORDS = {"now", "today", "this", "next", "last", "past", "ago", "recently"}
#: "a couple of days ago" reaches 1 to 3 days back, "a few" 2 to 5, "several" 3 to 8 (units back, inclusive)
VAGUE_COUNTS = {"couple": (1, 3), "few": (2, 5), "several": (3, 8)}
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
_VAGUE_AGO = re.compile(r"\b(?:an?\s+)?(couple|few|several)(?:\s+of)?\s+(day|week|month|year)s?\s+ago\b", re.I)


def _vague(query: str, reference: datetime) -> tuple[str, list[tuple[datetime, datetime]], list[str]]:
    """The vague expressions of ``query`` (see the module docstring) as ranges, and the query with them blanked
    out (so ``search_dates`` does not read "days ago" again)."""
    today = reference.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    spans, exprs = [], []
    for m in _VAGUE_AGO.finditer(query):
        lo, hi = VAGUE_COUNTS[m.group(1).lower()]
        unit = timedelta(days=_UNIT_DAYS[m.group(2).lower()])
        spans.append((today - hi * unit, today - lo * unit + timedelta(days=1)))
        exprs.append(m.group(0))
    blanked = _VAGUE_AGO.sub(lambda m: " " * len(m.group(0)), query)
    return blanked, spans, exprs


def _plausible(expr: str, query: str) -> bool:
    """Whether a ``search_dates`` match looks like a real time expression (see the module docstring)."""
    words = expr.lower().split()
    if len(words) == 1 and words[0] in _STANDALONE_WORDS:
        return False
    if _YEAR.search(expr) or _RELATIVE.search(expr) or _NAMES.search(expr):
        return True
    return bool(_MAY.search(expr)) and not query.lstrip().startswith(expr.lstrip())


def has_time_cue(query: str) -> bool:
    """Whether ``query`` holds what every kept time expression holds (``_plausible``): a year (19xx, 20xx), a
    relative word (yesterday, ago, last, this, ...), a capitalised month or weekday name, or "May". Without one,
    ``resolve`` finds nothing, and is answered without ``dateparser``."""
    return bool(_YEAR.search(query) or _RELATIVE.search(query) or _NAMES.search(query) or _MAY.search(query))


def _merge_adjacent(query: str, found: list[tuple[str, datetime]]) -> list[tuple[int | None, str]]:
    """The matched substrings with their positions in ``query`` (None when not found verbatim), matches
    separated only by spaces or commas joined into one ("April", "10", "2023" become "April 10, 2023")."""
    spans, pos = [], 0
    for expr, _ in found:
        i = query.find(expr, pos)
        if i < 0:
            spans.append([None, None, expr])
            continue
        if spans and spans[-1][1] is not None and re.fullmatch(r"[\s,]*", query[spans[-1][1] : i]):
            spans[-1][1] = i + len(expr)
            spans[-1][2] = query[spans[-1][0] : i + len(expr)]
        else:
            spans.append([i, i + len(expr), expr])
        pos = i + len(expr)
    return [(i, e) for i, _, e in spans]


def _bounds(when: datetime, period: str) -> tuple[datetime, datetime]:
    day = when.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "year":
        return day.replace(month=1, day=1), day.replace(year=day.year + 1, month=1, day=1)
    if period == "month":
        start = day.replace(day=1)
        return start, (start + timedelta(days=32)).replace(day=1)
    if period == "week":
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    return day, day + timedelta(days=1)  # day, time


def resolve(query: str, reference: datetime | None = None, tz: tzinfo | None = None) -> TimeRange | None:
    """The UTC range ``[start, end)`` the time expressions of ``query`` name, resolved against ``reference``
    (timezone-aware; default: now), or None when the query names no time. Dates and days are those of the time
    zone ``tz`` (default: ``Settings.tzinfo``, i.e. ``ENGRAM_TIMEZONE`` or the system's); the range is
    returned in UTC. A query without a time cue (``has_time_cue``) is answered None at once."""
    if not has_time_cue(query):
        return None
    return _resolve(query, reference, tz)


def _resolve(query: str, reference: datetime | None, tz: tzinfo | None) -> TimeRange | None:
    """``resolve`` without its shortcut for a query that has no time cue: ``dateparser`` reads every query."""
    from dateparser.date import DateDataParser  # start-up time: ~0.2 s to import, only for a query with a time cue
    from dateparser.search import search_dates  # idem

    if tz is None:
        tz = get_settings().tzinfo
    reference = (reference or datetime.now(UTC)).astimezone(UTC)
    local_ref = reference.astimezone(tz)  # wall-clock time in tz: what "today" and "yesterday" count from
    settings = {
        "RELATIVE_BASE": local_ref.replace(tzinfo=None),
        "PREFER_DATES_FROM": "past",
        "RETURN_AS_TIMEZONE_AWARE": False,
    }
    query, spans, exprs = _vague(query, local_ref)
    found = search_dates(query, languages=["en"], settings=settings) or []
    parser = DateDataParser(languages=["en"], settings=settings)
    for pos, expr in _merge_adjacent(query, found):
        relation = None
        if (rel := _RELATION.search(expr)) is not None:  # "the Saturday after October 28": October 28 is the anchor
            before, after = expr[: rel.start()].strip(" ,"), expr[rel.end() :].strip(" ,")
            if after and _plausible(after, query):
                relation, expr = rel.group(1).lower(), after
            else:  # "in December 2023 after a long time"
                expr = before
        elif pos is not None and (rel := re.search(r"\b(before|after|since|until)\s+(the\s+)?$", query[:pos], re.I)):
            relation = rel.group(1).lower()  # "the week before April 10, 2023"
        expr = expr.strip(" ,")
        if not expr or not _plausible(expr, query):
            continue
        data = parser.get_date_data(re.sub(r"^(in|on|at|of|during|from|by|as of)\s+", "", expr, flags=re.I))
        if data.date_obj is None or data.date_obj.year > reference.year + 1:
            continue  # unreadable once joined, or a number that only looks like a year ("Cyberpunk 2077")
        start, end = _bounds(data.date_obj, data.period or "day")
        if relation in ("before", "until"):
            start -= RELATION_WINDOW
        elif relation in ("after", "since"):
            end += RELATION_WINDOW
        spans.append((start, end))
        exprs.append(f"{relation} {expr}" if relation else expr)
    # an expression inside another's range is the more specific one ("on May 3" beside "in 2023")
    narrow = [
        i
        for i, (s, e) in enumerate(spans)
        if not any(j != i and s <= s2 and e2 <= e and (s2, e2) != (s, e) for j, (s2, e2) in enumerate(spans))
    ]
    spans, exprs = [spans[i] for i in narrow], [exprs[i] for i in narrow]
    if not spans:
        return None
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    return TimeRange(
        expression="; ".join(exprs),
        start=start.replace(tzinfo=tz).astimezone(UTC),
        end=end.replace(tzinfo=tz).astimezone(UTC),
        reference_time=reference,
    )


def warm_up() -> float:
    """Resolve one query with a time cue, so this process has imported ``dateparser`` and built what it builds on
    first use (its locale data, ~100 compiled patterns): ~0.5-0.8 s on 2 cores, which the first search that names
    a time would otherwise wait for (a query worker calls it as it starts: ``api.processes.load_time_parser``).
    Returns the seconds it took."""
    t0 = time.perf_counter()
    resolve("what happened yesterday at noon", tz=UTC)
    return time.perf_counter() - t0


LOCOMO_TIME_FORMAT = "%I:%M %p on %d %B, %Y"  # LoCoMo's own: "1:56 pm on 8 May, 2023"


#: A numeric date with the year last (``14.03.2024``, ``3/14/24``): its first two numbers are day and month in an
#: order the text does not say (a year-first ``2024-03-14`` does not match).
_NUMERIC_DATE = re.compile(r"(?<![\d./:-])(\d{1,2})([./-])(\d{1,2})\2(\d{4}|\d{2})(?!\d)")
DATE_ORDERS = ("DMY", "MDY")  # day first, month first (dateparser's DATE_ORDER values)


def date_order(dates: Iterable[tuple[str, str]]) -> str | None:
    """The order one file writes its numeric dates in, from those that can be read one way only: a first number
    above 12 (``14.03.2024``) says day-first (``"DMY"``), a second one above 12 (``03.14.2024``) month-first
    (``"MDY"``). ``dates`` are (where, text) pairs, ``where`` naming the place for a message ("line 3",
    "sample conv-1, session_2_date_time"). Returns None when no date tells (every date is unambiguous by
    itself, or could be either). Raises ValueError naming a day-first date and a month-first one when both occur:
    the file contradicts itself and is not guessed. The same rule as spreadsheet and chat importers that read
    the order off the data (e.g. WhatsApp's, ``media.importers``)."""
    found: dict[str, tuple[str, str]] = {}
    for where, text in dates:
        m = _NUMERIC_DATE.search(str(text))
        if not m:
            continue
        first, second = int(m[1]), int(m[3])
        if first > 12 >= second:
            found.setdefault("DMY", (where, str(text)))
        elif second > 12 >= first:
            found.setdefault("MDY", (where, str(text)))
        if len(found) == 2:
            (w1, t1), (w2, t2) = found["DMY"], found["MDY"]
            raise ValueError(f"{w1} ({t1!r}) is day-first but {w2} ({t2!r}) month-first")
    return next(iter(found), None)


def parse_locomo_datetime(text: str, tz: tzinfo = UTC, order: str | None = None) -> datetime:
    """A LoCoMo-format session time as UTC: LoCoMo's own ``"1:56 pm on 8 May, 2023"``, or any absolute date
    with day, month and year (``"29.12.2023, 00:51:12"``, ``"2023-05-08 13:56"``, ``"8 May 2023"``). ``order``
    (``"DMY"`` or ``"MDY"``, from ``date_order`` over the file's dates) reads a numeric date whose day and month
    could be swapped; without it such a date must read the same both ways. A time without a zone is read in
    ``tz`` (a ``ZoneInfo``; default UTC). Raises ValueError naming the text when it is no such date, is relative
    ("yesterday") or is ambiguous without an ``order`` (``"03.04.2023"``: 3 April or March 4)."""
    stripped = str(text).strip()
    try:
        return datetime.strptime(stripped, LOCOMO_TIME_FORMAT).replace(tzinfo=tz).astimezone(UTC)
    except ValueError:
        pass
    import dateparser  # only for files in another format

    zone = getattr(tz, "key", None) or "UTC"
    read = {
        o: dateparser.parse(
            stripped,
            languages=["en"],
            settings={
                "DATE_ORDER": o,
                "TIMEZONE": zone,
                "TO_TIMEZONE": "UTC",
                "RETURN_AS_TIMEZONE_AWARE": True,
                "PARSERS": ["timestamp", "custom-formats", "absolute-time"],
                "REQUIRE_PARTS": ["day", "month", "year"],
            },
        )
        for o in ([order] if order else DATE_ORDERS)
    }
    found = {d for d in read.values() if d is not None}
    if not found:
        raise ValueError(f"not a date with day, month and year: {stripped!r}")
    if len(found) > 1:
        raise ValueError(
            f"ambiguous date {stripped!r}: day-first it is {read['DMY']:%d %B %Y}, month-first "
            f"{read['MDY']:%d %B %Y}, and no date in the file has a day above 12 to tell which (one "
            "such date, or dates written year first, 2024-04-03, settle it)"
        )
    return found.pop().astimezone(UTC)
