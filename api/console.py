"""What the ``engram`` commands print to, and the guard of the commands that only read a store.

``console`` is stdout (tables, results), ``err`` is stderr (progress, one line per failed file). Text that was
stored or typed by a user is printed through ``rich.markup.escape`` or ``rich.text.Text``, never as markup.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.text import Text

console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True)  # per-file failure lines stay one line each, however long

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
    if not (embedded_store_dir(settings).is_dir() or legacy_store_dir(settings).is_dir()
            or (settings.data_dir / "ledger.sqlite").is_file()):  # only failed files so far: status shows them
        err.print(Text.assemble(("error: ", "red"), f"no engram store in {settings.data_dir}: nothing was ingested "
                                "there. `engram ingest FILES` makes one; --data-dir or ENGRAM_DATA_DIR chooses "
                                "the folder."))
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
