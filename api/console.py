"""What the ``engram`` commands print to and share: the consoles, the search-hit table, the defaults of the
user, device and time options, the API client of the producer commands, and the guard of the commands that only
read a store.

``console`` is stdout (tables, results), ``err`` is stderr (progress, one line per failed file). Text that was
stored or typed by a user is printed through ``rich.markup.escape`` or ``rich.text.Text``, never as markup, and
both consoles show the control characters it may hold instead of passing them to the terminal (``SafeConsole``).
This module sits below every command module (``api.cli.main``, ``cli.memory``, ``cli.agent``, ``capture``, ``demo``),
which import from it and never from each other.
"""

from __future__ import annotations

import functools
import getpass
import os
import re
import socket
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from engram.schemas.memories import MemoryType
from engram.schemas.search import SearchHit, SearchResponse

if TYPE_CHECKING:
    from engram.api.client import EngramClient

#: Seconds a long-running command (``engram mcp``, ``watch``) keeps the embedded store open after its last unit of
#: work, for the next, unless another engram process asks for it first (``workers.runtime.StoreLease``).
STORE_HOLD_SECONDS = 300.0

#: Characters a terminal would act on instead of showing: C0 controls but tab and newline, DEL, C1 controls (ESC
#: starts the sequences that recolour, move the cursor, set the window title), and the bidirectional overrides and
#: isolates that make a name read in another order than it is stored ("Trojan Source", CVE-2021-42574).
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
_UNSHOWABLE = re.compile(f"[{_CONTROLS}]")
#: In a name, also the line breaks and tabs a stored message keeps.
_UNSHOWABLE_IN_NAME = re.compile(f"[{_CONTROLS}\t\n\u2028\u2029]")


def _as_escape(match: re.Match) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def shown(text: str) -> str:
    """``text`` with each character a terminal would act on (``_UNSHOWABLE``) written as its Python escape
    (``\\x1b``, ``\\u202e``): a file name or a stored message holding them shows every character it holds,
    and none of them recolours the terminal, moves its cursor or reorders what follows."""
    return _UNSHOWABLE.sub(_as_escape, text)


def shown_name(name: object) -> str:
    """A file name or object key (``str(name)``) as ``shown`` writes it, with its line breaks and tabs as escapes
    too (``\\n``, ``\\t``, ``\\u2028``): a name is printed on the one line of its file's outcome ("failed
    <name>: <reason>"), which a name holding a newline would otherwise split into a line that reads as another
    file's. Stored messages keep their line breaks (``shown``)."""
    return _UNSHOWABLE_IN_NAME.sub(_as_escape, str(name))


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: "1 observation", "17 observations"; ``plural`` for a noun whose
    plural is not ``noun`` + "s" (``counted(2, "entity", "entities")``)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def ingest_summary(result: dict[str, list]) -> str:
    """The one line (Rich markup) that ends an ingest: files done with the observations they gave, skipped, failed,
    not media; ``result`` as ``api.embedded.ingest_paths`` returns it."""
    obs = sum(r.observations for _, r in result["done"])
    return (
        f"[green]{len(result['done'])} done[/green] ({counted(obs, 'observation')}), "
        f"{len(result['skipped'])} skipped, [red]{len(result['failed'])} failed[/red], "
        f"{len(result['ignored'])} not media"
    )


class SafeConsole(Console):
    """A rich ``Console`` whose text passes through ``shown`` as it is rendered, whatever printed it (a ``Text``,
    a table cell, a progress bar's field): Rich writes a string's control characters to the terminal as they are.
    Rich's own output (colours, cursor moves of a progress display) is made from styles and control segments,
    which pass unchanged."""

    def render(self, renderable, options=None):  # noqa: ANN001, ANN201 (rich's own signature)
        for segment in super().render(renderable, options):
            if segment.control is None and _UNSHOWABLE.search(segment.text):
                yield Segment(shown(segment.text), segment.style, segment.control)
            else:
                yield segment


# piped: wide enough for a hit row, unless COLUMNS says how wide (rich reads it when the width is left open)
console = SafeConsole(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 180)
err = SafeConsole(stderr=True, soft_wrap=True)  # per-file failure lines stay one line each, however long


def local_time(t: datetime | None, fmt: str = "%Y-%m-%d %H:%M %Z") -> str:
    """``t`` in the zone of ``ENGRAM_TIMEZONE`` (default: the system's), as ``fmt`` (default ``2024-05-01 09:30
    CEST``: the zone's abbreviation says which zone); ``""`` for None. A naive ``t`` is read as UTC (stored
    times are UTC)."""
    if t is None:
        return ""
    from engram.schemas.settings import get_settings

    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(get_settings().tzinfo).strftime(fmt)


P = ParamSpec("P")
R = TypeVar("R")


def require_store() -> None:
    """Exit 2 with the folder and a hint when the embedded default's data dir holds no store (no vector store,
    no ledger). Does nothing with a broker or a Qdrant server configured.

    Raises:
        typer.Exit: code 2, after one line on stderr.
    """
    from engram.schemas.settings import get_settings
    from engram.workers.stores.vectors import embedded_store_dir, legacy_store_dir

    settings = get_settings()
    if settings.qdrant_url or settings.broker_url:
        return
    if not (
        embedded_store_dir(settings).is_dir()
        or legacy_store_dir(settings).is_dir()
        or (settings.data_dir / "ledger.sqlite").is_file()
    ):  # only failed files so far: status shows them
        err.print(
            Text.assemble(
                ("error: ", "red"),
                f"no engram store in {settings.data_dir}: nothing was ingested "
                "there. `engram ingest FILES` makes one; --data-dir or ENGRAM_DATA_DIR chooses "
                "the folder.",
            )
        )
        raise typer.Exit(2)


def reads_store(command: Callable[P, R]) -> Callable[P, R]:
    """Decorator of a command that only reads what is stored: it refuses a data dir that holds no store
    (``require_store``) instead of making an empty one and answering "no results". Its ``--help`` still
    answers anywhere (the check runs in the command's body)."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        require_store()
        return command(*args, **kwargs)

    return run


def safe_id(value: str) -> str:
    """``value`` as an id engram accepts: characters other than letters, digits and ``._@:+-`` become ``-``, at most
    128 characters, ``unknown`` when nothing is left."""
    cleaned = "".join(c if c.isalnum() or c in "._@:+-" else "-" for c in value).strip("-")
    return cleaned[:128] or "unknown"


def default_user() -> str:
    """The user of a command without ``--user``: ``ENGRAM_USER``, else the OS user (as a ``safe_id``)."""
    from engram.schemas.settings import get_settings

    return get_settings().user or safe_id(getpass.getuser())


def default_device() -> str:
    """The device of a command without ``--device``: ``ENGRAM_DEVICE``, else the host name (as a ``safe_id``)."""
    from engram.schemas.settings import get_settings

    return get_settings().device or safe_id(socket.gethostname())


def parse_time(value: str | None) -> datetime | None:
    """An ISO 8601 time as UTC; one without a zone is read in ``ENGRAM_TIMEZONE`` (default: the system's).
    None for None. Raises typer.BadParameter."""
    if value is None:
        return None
    from engram.schemas.settings import get_settings

    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise typer.BadParameter(f"{value!r} is not an ISO 8601 time (e.g. 2024-05-01T14:30:00Z)") from exc
    return (t if t.tzinfo else t.replace(tzinfo=get_settings().tzinfo)).astimezone(UTC)


def time_bound(value: str | None, option: str, end: bool = False) -> datetime | None:
    """A ``--since``/``--until`` value as UTC: a span back from now (``15m``, ``2h``, ``3d``, ``1w``), an ISO 8601
    time (``parse_time``: one without a zone in ``ENGRAM_TIMEZONE``), or the words a query may use ("yesterday",
    "last week", "2024-05", "May 2023"; ``workers.text.timeexpr``): the start of the range they name, its end with
    ``end`` (for ``--until``). None for None. Raises typer.BadParameter naming the option."""
    if value is None:
        return None
    if m := re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", value.lower()):
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
        return datetime.now(UTC) - timedelta(seconds=float(m.group(1)) * unit)
    try:
        return parse_time(value)
    except typer.BadParameter:
        pass
    from engram.workers.text.timeexpr import resolve  # the time words' parser, only for words

    span = resolve(value)
    if span is None:
        raise typer.BadParameter(
            f"{value!r} is not a time: give a span back from now (15m, 2h, 3d), ISO 8601 "
            "(2024-05-01T14:30:00Z) or words such as 'yesterday', 'last week', '2024-05'",
            param_hint=option,
        )
    return span.end if end else span.start


def api_client(api: str | None, api_key: str | None, user: str | None, device: str | None) -> EngramClient:
    """The API client of a producer command (``publish``, ``watch``, ``capture`` with ``--api``). Exits 2 with one
    line on stderr when the API URL or key is missing.

    Raises:
        typer.Exit: code 2.
    """
    from engram.api.client import EngramClient

    if not api or not api_key:
        err.print("[red]error:[/red] give --api and --api-key (or set ENGRAM_API_URL and ENGRAM_API_KEY)")
        raise typer.Exit(2)
    return EngramClient(api, api_key, user=user, device=device)


def snippet(text: str, query: str, width: int = 110) -> str:
    """A one-line excerpt of ``text``, at most ``width`` characters plus ellipses, around the first query word (of
    three letters or more) it contains."""
    flat = " ".join(text.split())
    low = flat.lower()
    pos = min((i for w in query.lower().split() if len(w) > 2 and (i := low.find(w)) >= 0), default=0)
    start = max(0, pos - width // 3)
    out = flat[start : start + width]
    return ("…" if start else "") + out + ("…" if start + width < len(flat) else "")


def why_found(hit: SearchHit) -> str:
    """Why a hit was found, for a reader (``SearchHit.matched``): "words: budget, review" (BM25 found it and its text
    holds these query words; "words (nearby)" when they are in the turns it is indexed with), "meaning" (the
    dense ranking found it), both joined by " + ", then "time" (inside the query's time words), "person" (linked
    to an entity the query names), "memory" (raised by a memory built from it) and "N frames" for a burst of
    near-duplicate screenshots. The fused scores stay in ``--json``."""
    m = hit.matched
    parts: list[str] = []
    if m is not None:
        if m.sparse_rank is not None:
            parts.append(f"words: {', '.join(m.words)}" if m.words else "words (nearby)")
        if m.dense_rank is not None:
            parts.append("meaning")
        parts += [name for name, on in (("time", m.time), ("person", m.entity), ("memory", m.memory)) if on]
    if hit.burst_size > 1:
        parts.append(f"{hit.burst_size} frames")
    return " + ".join(parts)


def print_hits(resp: SearchResponse, out: Console | None = None) -> None:
    """The hits as a table on ``out`` (default: stdout): rank, why it was found (``why_found``), type, time, source,
    snippet."""
    out = out or console
    if resp.time_range:
        tr = resp.time_range
        out.print(
            f"time: {escape(repr(tr.expression))} → {local_time(tr.start)} to {local_time(tr.end)} "
            f"(as of {local_time(tr.reference_time, '%Y-%m-%d')}; ranked first, not a filter)"
        )
    if not resp.hits:
        out.print(f"no results for {escape(repr(resp.query))}")
        return
    table = Table(
        title=f"{escape(repr(resp.query))} — {counted(len(resp.hits), 'result')} in {resp.took_ms:.0f} ms", expand=True
    )
    table.add_column("#", no_wrap=True, min_width=2)
    table.add_column("matched", max_width=24, overflow="fold")
    table.add_column("type", no_wrap=True, min_width=11)
    table.add_column("time", no_wrap=True, min_width=20)
    table.add_column("source", no_wrap=True, max_width=34, overflow="ellipsis")
    table.add_column("snippet", ratio=1, min_width=30, overflow="fold")
    for i, hit in enumerate(resp.hits, 1):
        when = local_time(hit.time)
        # a file's name without its folders; a memory's sources (``memory.search``: up to three names joined by
        # ", ", then " …") each the same way (an observation's one name may hold ", " itself)
        if not hit.source_name:
            src = ""
        elif hit.memory_type is MemoryType.observation:
            src = Path(hit.source_name).name
        else:
            src = ", ".join(Path(name).name for name in hit.source_name.split(", "))
        if hit.start_s is not None:
            src += f" @{hit.start_s:.1f}s"
        if hit.message_ids and hit.memory_type is MemoryType.observation:
            src += f" {hit.message_ids[0]}"
        table.add_row(
            str(i),
            Text(why_found(hit)),
            hit.memory_type.value,
            when,
            Text(src[:40]),
            Text(snippet(hit.text, resp.query)),
        )
    out.print(table)
