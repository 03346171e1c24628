"""``engram retention``: remove originals past their kind's age or the storage cap, keeping their text, vectors,
thumbnails and memories (``workers.stores.retention``); and the bytes-per-kind table of ``engram status``
(``print_storage``). Registered on the main app by ``api.cli.main.main``.

On the embedded default the command runs in this process, with a progress bar on stderr; with
``ENGRAM_BROKER_URL`` set it sends the ``retention`` task to the workers (queue ``consolidate``) and waits for its
report (``ENGRAM_SERVICE_TIMEOUT_SECONDS``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from engram.api.console import console, err, parse_time, reads_store

_EPILOG = (
    "Examples:  engram retention --dry-run  ·  ENGRAM_RETENTION_SCREENSHOT_DAYS=30 engram retention  ·  "
    "engram retention --dry-run --at 2027-01-01 --json"
)


@reads_store
def retention(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be removed; change nothing.")] = False,
    at: Annotated[
        str | None,
        typer.Option(
            help="Count ages from this time instead of now (ISO 8601), e.g. with "
            "--dry-run to see what a later run would remove."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the RetentionReport as JSON.")] = False,
) -> None:
    """Remove originals (screenshots, recordings, videos, conversation files) older than their kind's
    ENGRAM_RETENTION_<KIND>_DAYS, then the oldest while over ENGRAM_STORAGE_CAP_BYTES. Their text, vectors,
    thumbnails and memories stay; search and the web app say the original was removed by retention."""
    from engram.schemas.settings import get_settings  # the workers' stack, when the command runs
    from engram.schemas.storage import RetentionReport  # the workers' stack, when the command runs
    from engram.workers.stores.retention import configured, describe  # the workers' stack, when the command runs

    settings = get_settings()
    when = parse_time(at) if at else None
    if not configured(settings):
        err.print(
            "no retention rule is set (ENGRAM_RETENTION_SCREENSHOT_DAYS, _AUDIO_DAYS, _CLIP_DAYS, _TEXT_DAYS, "
            "ENGRAM_STORAGE_CAP_BYTES): nothing is removed",
            highlight=False,
        )
    if settings.embedded:
        report = _run_here(dry_run, when, quiet=as_json)
    else:
        from engram.workers.app import load_tasks  # the workers' stack, when the command runs
        from engram.workers.tasks import Task  # the workers' stack, when the command runs

        result = load_tasks().tasks[Task.retention.value].delay(dry_run, when.isoformat() if when else None)
        report = RetentionReport.model_validate(result.get(timeout=settings.service_timeout_seconds))
    if as_json:
        print(report.model_dump_json(indent=2))
        return
    for line in describe(report):
        console.print(escape(line), highlight=False)


def _run_here(dry_run: bool, when: datetime | None, quiet: bool) -> Any:
    """``apply_retention`` in this process, with a progress bar of the deletions on stderr (none when ``quiet``)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from engram.workers.runtime import runtime  # the workers' stack, when the command runs
    from engram.workers.stores.retention import apply_retention  # the workers' stack, when the command runs

    with Progress(
        TextColumn("[bold]retention"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err,
        disable=quiet or dry_run,
        transient=True,
    ) as progress:
        task = progress.add_task("remove", total=None)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        return apply_retention(runtime(), dry_run=dry_run, now=when, progress=advance)


def print_storage(rt: Any, tenant: str) -> None:
    """The bytes ``rt`` keeps by kind (``workers.stores.retention.storage_use``) as a table on stdout: the tenant's
    originals per kind, thumbnails, OCR cache and vault, then the data dir's shared store, ledger and caches, and
    where the storage cap and the retention rules stand."""
    from engram.workers.stores.retention import human_bytes, storage_use  # the workers' stack, when the command runs

    use = storage_use(rt, tenant)
    table = Table(title="bytes stored")
    table.add_column("what")
    table.add_column("objects", justify="right")
    table.add_column("bytes", justify="right")
    for kind, kb in sorted(use.originals.items()):
        table.add_row(f"{kind.value} originals", str(kb.count), human_bytes(kb.bytes))
    for name, kb in (
        ("thumbnails", use.thumbnails),
        ("OCR cache", use.ocr_cache),
        ("vault", use.vault),
        ("other objects", use.other_objects),
    ):
        if kb.count:
            table.add_row(name, str(kb.count), human_bytes(kb.bytes))
    for name, size in (
        ("store (all tenants)", use.store),
        ("ledger (all tenants)", use.ledger),
        ("embedding cache", use.embedding_cache),
        ("other files", use.other_files),
    ):
        if size is not None:
            table.add_row(name, "", human_bytes(size))
    table.add_row("total", "", human_bytes(use.total))
    console.print(table)
    rules = [f"{k.value} {d:g} d" for k, d in sorted(use.retention_days.items())]
    cap = (
        f"{human_bytes(use.capped_total)} of a {human_bytes(use.cap_bytes)} cap"
        if use.cap_bytes is not None
        else "no storage cap"
    )
    console.print(f"retention: {', '.join(rules) or 'originals kept'}; {cap}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``engram retention`` to the main app."""
    app.command("retention", epilog=_EPILOG)(retention)
