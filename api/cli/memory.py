"""The ``engram`` commands that read memory through the query worker: ``ask``, ``memories list|get|update|delete``,
``forget`` and ``export`` (registered on the main app by ``api.cli.main.main``).

Each calls the service layer (``api.embedded.service_call``: the tasks inline on the embedded default, through
the ``query`` queue when ``ENGRAM_BROKER_URL`` is set; one timeout, ``ENGRAM_SERVICE_TIMEOUT_SECONDS``).
The tenant is ``--tenant``, else ``ENGRAM_TENANT`` (``default``).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from engram.api.cli.archive import ApiKey, ApiUrl, export_archive
from engram.api.console import (
    console,
    counted,
    err,
    local_time,
    print_hits,
    reads_store,
    require_store,
    snippet,
    time_bound,
)
from engram.api.embedded import service_call
from engram.api.explain import empty_type_line, explain_empty, why_empty_here
from engram.api.service.base import NotOffered
from engram.schemas.ask import AskFailed, AskRequest, AskResponse
from engram.schemas.memories import MemoryType
from engram.schemas.memory_admin import ForgetScope, ForgetScopeReport, MemoryRecord
from engram.schemas.search import DEFAULT_SEARCH_TYPES, SearchResponse

TenantOpt = Annotated[str | None, typer.Option(help="Tenant (default: ENGRAM_TENANT or 'default').")]

memories_app = typer.Typer(
    help="Look at, page through and delete stored observations and memories.", no_args_is_help=True
)


def _tenant(tenant: str | None) -> str:
    from engram.schemas.settings import get_settings

    return tenant or get_settings().tenant


@reads_store
def ask(
    question: Annotated[str, typer.Argument(help="The question, in words.")],
    user: Annotated[str | None, typer.Option(help="Only this user's memories (default: all users).")] = None,
    tenant: TenantOpt = None,
    memory_type: Annotated[
        list[MemoryType] | None,
        typer.Option("--type", help="Collections to search (repeatable; default: all but the vault)."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-k", min=1, max=50, help="Hits per search round.")] = 10,
    rounds: Annotated[int, typer.Option(min=1, max=5, help="Search rounds at most (with an LLM).")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print the AskResponse as JSON.")] = False,
) -> None:
    """Answer a question from memory. With an LLM (ENGRAM_MODELS__LLM_PROVIDER), up to 5 rounds of
    search-then-decide (M3-Agent) and the memories the answer cites; without one, the ranked evidence."""
    req = AskRequest(
        question=question,
        tenant_id=_tenant(tenant),
        user_id=user,
        limit=limit,
        max_rounds=rounds,
        memory_types=memory_type or list(DEFAULT_SEARCH_TYPES),
    )
    try:
        with service_call() as service:
            resp = service.ask(req)
    except AskFailed as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(1) from exc
    if as_json:
        print(resp.model_dump_json(indent=2))
    else:
        _print_answer(question, resp)
    if not resp.evidence:  # a tenant or user that holds nothing: why, and where the data is (exit 1)
        explain_empty(resp.empty or why_empty_here(req.tenant_id, user), req.tenant_id, user)


def _print_answer(question: str, resp: AskResponse) -> None:
    if resp.llm is None:
        console.print("[dim]no LLM configured (ENGRAM_MODELS__LLM_PROVIDER): the ranked evidence[/dim]")
    elif resp.answer is None:
        console.print(f"[yellow]no answer after {counted(len(resp.rounds), 'round')}[/yellow]")
    else:
        rounds = escape(" → ".join(repr(r.query) for r in resp.rounds))
        console.print(
            f"[bold]{escape(resp.answer)}[/bold]  [dim]({escape(str(resp.llm))}, "
            f"{counted(len(resp.rounds), 'round')}: {rounds})[/dim]",
            highlight=False,
        )
    print_hits(SearchResponse(query=question, hits=resp.memories, took_ms=resp.took_ms))


def _records_table(title: str, items: list[MemoryRecord]) -> Table:
    table = Table(title=title, expand=True)
    for col, opts in (
        ("id", {"no_wrap": True, "min_width": 36}),
        ("type", {"no_wrap": True}),
        ("time", {"no_wrap": True, "min_width": 20}),
        ("user", {"no_wrap": True}),
        ("text", {"ratio": 1, "overflow": "fold"}),
    ):
        table.add_column(col, **opts)
    for m in items:  # a core block (a profile, bounded by its limit) keeps its lines: one "label: value" each
        text = m.text if m.memory_type is MemoryType.core else snippet(m.text, "")
        table.add_row(str(m.id), m.memory_type.value, local_time(m.time), m.user_id or "", Text(text))
    return table


@memories_app.command("list")
@reads_store
def memories_list(
    memory_type: Annotated[MemoryType, typer.Option("--type", help="Which collection.")] = MemoryType.episodic,
    user: Annotated[str | None, typer.Option(help="Only this user's (default: all users).")] = None,
    tenant: TenantOpt = None,
    limit: Annotated[int, typer.Option("--limit", "-k", min=1, max=500, help="Items per page.")] = 20,
    offset: Annotated[int, typer.Option(min=0, help="Items to skip (newest first).")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the page as JSON.")] = False,
) -> None:
    """A page of one memory type, newest content first."""
    with service_call() as service:
        page = service.list_memories(_tenant(tenant), memory_type, user, limit, offset)
    if as_json:
        print(page.model_dump_json(indent=2))
    else:
        last = offset + len(page.items)
        console.print(
            _records_table(f"{memory_type.value}: {offset + 1 if page.items else 0}-{last} of {page.total}", page.items)
        )
    if page.total == 0:  # why: a tenant or user that holds nothing (exit 1), or what would fill this type
        tenant = _tenant(tenant)
        reason = page.empty or why_empty_here(tenant, user)
        explain_empty(reason, tenant, user)
        if reason is not None and (line := empty_type_line(memory_type)):
            err.print(Text(line))


@memories_app.command("get")
@reads_store
def memories_get(
    memory_id: Annotated[str, typer.Argument(help="The id of an observation or memory of any type.")],
    tenant: TenantOpt = None,
) -> None:
    """Print one observation or memory as JSON (vault entries without their secret)."""
    with service_call() as service:
        got = service.get_memory(_tenant(tenant), _uuid(memory_id))
    if got is None:
        err.print(f"[red]error:[/red] no memory {escape(memory_id)}", highlight=False)
        raise typer.Exit(1)
    print(got.model_dump_json(indent=2))


@memories_app.command("delete")
@reads_store
def memories_delete(
    memory_id: Annotated[str, typer.Argument(help="The id of an observation or memory of any type.")],
    tenant: TenantOpt = None,
) -> None:
    """Delete one observation or memory."""
    with service_call() as service:
        kind = service.delete_memory(_tenant(tenant), _uuid(memory_id))
    if kind is None:
        err.print(f"[red]error:[/red] no memory {escape(memory_id)}", highlight=False)
        raise typer.Exit(1)
    console.print(f"deleted {kind.value} {escape(memory_id)}", highlight=False)


@memories_app.command("update")
@reads_store
def memories_update(
    memory_id: Annotated[
        str, typer.Argument(help="The id of a memory (not an observation: what was captured is not corrected).")
    ],
    text: Annotated[str, typer.Argument(help="The corrected text.")],
    tenant: TenantOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the new version as JSON.")] = False,
) -> None:
    """Correct a memory: the text is stored as a new version that supersedes the old one, which is kept as its
    history (as a newer fact supersedes an older one)."""
    if not text.strip():
        raise typer.BadParameter("the corrected text is empty", param_hint="TEXT")
    try:
        with service_call() as service:
            got = service.update_memory(_tenant(tenant), _uuid(memory_id), text)
    except (NotOffered, ValueError) as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(1) from exc
    if got is None:
        err.print(f"[red]error:[/red] no memory {escape(memory_id)}", highlight=False)
        raise typer.Exit(1)
    if as_json:
        print(got.model_dump_json(indent=2))
    else:
        console.print(
            f"updated {got.memory_type.value} {escape(memory_id)}: the new version is {got.id}", highlight=False
        )


def _uuid(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise typer.BadParameter(f"{value!r} is not a memory id (a UUID)") from exc


def _scope_line(r: ForgetScopeReport) -> str:
    """What a scoped forget did (or, dry, would do), in one line."""
    deleted = {c: n for c, n in r.points_deleted.items() if n and c != "observations"}
    parts = [counted(r.observations, "observation")]
    if deleted:
        parts.append(", ".join(f"{n} {c}" for c, n in deleted.items()) + " memory points")
    if rewritten := sum(r.memories_rewritten.values()):
        parts.append(f"{counted(rewritten, 'memory', 'memories')} rewritten without it")
    parts += [counted(len(r.event_ids), "event"), counted(len(r.objects_deleted), "object")]
    if r.entities_deleted:
        parts.append(counted(r.entities_deleted, "entity", "entities"))
    line = ("would forget " if r.dry_run else "forgot ") + ", ".join(parts)
    if r.objects_kept:
        line += f"; {counted(len(r.objects_kept), 'original')} kept (another item still uses it)"
    return line


@reads_store
def forget(
    user: Annotated[
        str | None,
        typer.Option(
            help="Whose memory. Alone: forget the user entirely; with a scope "
            "below: only that user's part of it (default: every user's)."
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="Forget what was captured from this time on: a span back from "
            "now (15m, 2h, 3d), ISO 8601, or words ('yesterday')."
        ),
    ] = None,
    until: Annotated[str | None, typer.Option(help="... and before this time (same forms; default: now).")] = None,
    app_name: Annotated[str | None, typer.Option("--app", help="Forget everything seen in this application.")] = None,
    device: Annotated[str | None, typer.Option(help="Forget everything from this device.")] = None,
    event: Annotated[
        list[str] | None,
        typer.Option(help="Forget everything of this event (a published file: engram status lists them; repeatable)."),
    ] = None,
    tenant: TenantOpt = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be forgotten.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Forget, leaving nothing behind: a time range (--since/--until), an application (--app), a device (--device),
    events (--event), or a user entirely (--user alone). Every memory drawn only from what goes is deleted, one
    drawn also from other sources is rewritten without it; the originals, thumbnails, cached text, ledger rows and
    the store's files keep no byte of it. Cannot be undone."""
    tenant = _tenant(tenant)
    events = [_uuid(e) for e in event or []]
    if not (since or until or app_name or device or events):
        if user is None:
            raise typer.BadParameter(
                "name what to forget: --since/--until, --app, --device, --event, or --user alone for a whole user"
            )
        if dry_run:
            raise typer.BadParameter("--dry-run is for --since/--until, --app or --device", param_hint="--dry-run")
        _forget_user(tenant, user, yes)
        return
    try:
        scope = ForgetScope(
            user_id=user,
            since=time_bound(since, "--since"),
            until=time_bound(until, "--until", end=True),
            app=app_name,
            device_id=device,
            event_ids=events,
        )
    except ValidationError as exc:
        options = {"user_id": "--user", "app": "--app", "device_id": "--device"}
        raise typer.BadParameter(
            "; ".join(
                (f"{options.get(str(e['loc'][0]), e['loc'][0])}: " if e["loc"] else "")
                + e["msg"].removeprefix("Value error, ")
                for e in exc.errors()
            )
        ) from exc
    with service_call() as service:
        if dry_run or not yes:
            preview = service.forget_scope(tenant, scope, dry_run=True)
            if dry_run:
                if as_json:
                    print(preview.model_dump_json(indent=2))
                else:
                    console.print(_scope_line(preview), highlight=False)
                return
            if not preview.observations and not preview.event_ids and not any(preview.points_deleted.values()):
                console.print("nothing to forget", highlight=False)
                return
            typer.confirm(f"{_scope_line(preview)}. This cannot be undone. Go on?", abort=True)
        report = service.forget_scope(tenant, scope)
    if as_json:
        print(report.model_dump_json(indent=2))
    else:
        console.print(_scope_line(report), highlight=False)


def _forget_user(tenant: str, user: str, yes: bool) -> None:
    """Forget ``user`` of ``tenant`` entirely (``forget --user U`` alone)."""
    if not yes:
        typer.confirm(f"Forget everything about user {user!r} of tenant {tenant!r}? This cannot be undone", abort=True)
    with service_call() as service:
        report = service.forget_user(tenant, user)
    points = ", ".join(f"{n} {c}" for c, n in report.points_deleted.items() if n) or "no points"
    console.print(
        f"forgot {escape(repr(user))}: {points}; {counted(len(report.event_ids), 'event')}, "
        f"{counted(report.entities_deleted, 'entity', 'entities')}, "
        f"{counted(len(report.objects_deleted), 'object')} deleted, "
        f"{counted(len(report.objects_kept), 'shared object')} kept",
        highlight=False,
    )


def export(
    user: Annotated[
        str | None, typer.Option(help="The user to export (with --archive, default: the whole tenant).")
    ] = None,
    tenant: TenantOpt = None,
    archive: Annotated[
        Path | None,
        typer.Option(
            help="Write an archive FILE to move the memory to another data "
            "dir (`engram import FILE`): media, observations with their "
            "vectors, memories with their history, entities, vault entries "
            "still encrypted, thumbnails.",
            metavar="FILE",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="With --archive: print a JSON summary.")] = False,
    api: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Print everything stored about a user as JSON (events, every memory type with provenance; vault
    entries without secrets), e.g. engram export --user U > file.json; or, with --archive FILE, write the
    user's (or the tenant's) whole memory into one file that `engram import FILE` reads back, ids kept."""
    if not (archive is not None and api):  # through the API no store is read here
        require_store()
    if archive is not None:
        export_archive(archive, _tenant(tenant), user, as_json, api, api_key)
        return
    if user is None:
        raise typer.BadParameter(
            "name the user to export (or give --archive FILE for the whole tenant)", param_hint="--user"
        )
    with service_call() as service:
        data = service.export_user(_tenant(tenant), user)
    print(json.dumps(data.model_dump(mode="json"), indent=2, ensure_ascii=False))


def register(app: typer.Typer) -> None:
    """Add ``ask``, ``memories``, ``forget`` and ``export`` to the ``engram`` app."""
    app.command(
        epilog='Examples:  engram ask "when is the budget review?"  ·  '
        'engram ask "where did Alice fly to?" --user alice --json'
    )(ask)
    app.add_typer(memories_app, name="memories")
    app.command(
        epilog="Examples:  engram forget --since 15m --yes  ·  engram forget --app Slack --user alice "
        "--dry-run  ·  engram forget --device phone --since 2024-05-01 --until 2024-05-02  ·  "
        "engram forget --user alice --yes"
    )(forget)
    app.command(
        epilog="Examples:  engram export --user alice > alice.json  ·  engram export --user alice --archive alice.tar"
    )(export)
