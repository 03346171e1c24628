"""The ``engram`` command line.

Runs on the embedded default (no servers: a local folder, Qdrant Edge and a SQLite ledger under
``ENGRAM_DATA_DIR``) unless ``ENGRAM_BROKER_URL`` points at a Redis broker.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.progress import (  # noqa: E402
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.table import Table  # noqa: E402
from rich.text import Text  # noqa: E402

from engram.api.console import (  # noqa: E402
    STORE_HOLD_SECONDS,
    api_client,
    console,
    counted,
    default_device,
    default_user,
    err,
    ingest_summary,
    local_time,
    parse_time,
    print_hits,
    reads_store,
    shown_name,
    time_bound,
)
from engram.api.embedded import ingest_paths, run_search, service_call  # noqa: E402
from engram.api.explain import explain_empty  # noqa: E402
from engram.schemas.events import EventStatus, MediaKind  # noqa: E402
from engram.schemas.memories import MemoryType  # noqa: E402
from engram.schemas.search import DEFAULT_SEARCH_TYPES, SearchRequest  # noqa: E402

app = typer.Typer(
    name="engram",
    help="Long-term multimodal memory for AI agents: ingest screenshots, audio, clips and chats, then search "
    "them. Runs on the embedded default (no servers; data under ENGRAM_DATA_DIR) unless "
    "ENGRAM_BROKER_URL is set.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _configure_logging(verbose: bool, log_format: str) -> None:
    from engram.workers.logs import configure_logging

    level = logging.INFO if verbose else logging.ERROR
    configure_logging(level, "json" if log_format == "json" else "console")  # structlog's and Celery's lines alike
    for noisy in ("RapidOCR", "faster_whisper", "sentence_transformers", "httpx", "celery"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    if not verbose and not os.environ.get("ENGRAM_BROKER_URL"):
        # the embedded default runs tasks inline: a task's error reaches the command, which says it in one line;
        # Celery's own traceback of it would repeat it (-v shows it)
        logging.getLogger("celery.app.trace").setLevel(logging.CRITICAL)


@app.callback()
def main_options(
    data_dir: Annotated[
        Path | None, typer.Option(help="Where the embedded default keeps everything (sets ENGRAM_DATA_DIR).")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log pipeline progress to stderr.")] = False,
    log_format: Annotated[str, typer.Option(help="Log lines as 'console' or 'json'.")] = "console",
) -> None:
    """Global options."""
    if data_dir is not None:
        os.environ["ENGRAM_DATA_DIR"] = str(data_dir)
    _configure_logging(verbose, log_format)


def _runtime():
    from engram.workers.runtime import runtime

    return runtime()


@app.command(
    epilog="Examples:  engram ingest ~/Pictures/Screenshots --user alice  ·  "
    "engram ingest memo.m4a chat.jsonl --captured-at 2024-05-01T09:30:00Z"
)
def ingest(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Files or folders (recursively). Kind is detected by "
            "content: images, audio, video, conversation JSON/JSONL, ChatGPT and "
            "WhatsApp exports, Markdown notes."
        ),
    ],
    user: Annotated[str | None, typer.Option(help="User id (default: ENGRAM_USER or the OS user).")] = None,
    device: Annotated[str | None, typer.Option(help="Device id (default: ENGRAM_DEVICE or the host name).")] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant (default: ENGRAM_TENANT or 'default').")] = None,
    captured_at: Annotated[
        str | None, typer.Option(help="When the media was captured, ISO 8601 (default: each file's modification time).")
    ] = None,
    app_name: Annotated[str | None, typer.Option("--app", help="Foreground application, for screenshots.")] = None,
    window: Annotated[str | None, typer.Option(help="Window title, for screenshots.")] = None,
    no_consolidate: Annotated[bool, typer.Option("--no-consolidate", help="Skip consolidation afterwards.")] = False,
) -> None:
    """Ingest media and conversations: validate, perceive (OCR, speech-to-text), embed, store, consolidate.

    Files that are neither media nor conversations are reported as skipped; bad media (empty, truncated,
    corrupt, too large) is recorded as failed with its reason and does not stop the rest.
    """
    from engram.schemas.settings import get_settings

    try:
        result = ingest_paths(
            paths,
            tenant or get_settings().tenant,
            user or default_user(),
            device or default_device(),
            parse_time(captured_at),
            app_name,
            window,
            consolidate=not no_consolidate,
        )
    except FileNotFoundError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    _print_ingest_summary(result)
    if result["failed"] and not (result["done"] or result["skipped"]):
        raise typer.Exit(1)


def _print_ingest_summary(result: dict[str, list]) -> None:
    console.print(ingest_summary(result))
    for path, record in result["skipped"]:
        console.print(
            f"  skipped {escape(shown_name(path))}: {escape(str(record.reason))}", highlight=False, soft_wrap=True
        )
    for path, why in result["ignored"][:10]:
        console.print(f"  skipped {escape(shown_name(path))}: {escape(str(why))}", highlight=False, soft_wrap=True)
    if len(result["ignored"]) > 10:
        console.print(f"  … and {len(result['ignored']) - 10} more files that are not media")


@app.command(
    epilog='Examples:  engram search "budget review" --since 2024-05-01  ·  '
    'engram search receiver_count --kind screenshot -k 3  ·  engram search "trip" --type episodic'
)
@reads_store
def search(
    query: Annotated[str, typer.Argument(help="What to look for, in words.")],
    user: Annotated[str | None, typer.Option(help="Only this user's memories (default: all users).")] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant (default: ENGRAM_TENANT or 'default').")] = None,
    memory_type: Annotated[
        list[MemoryType] | None,
        typer.Option("--type", help="Collections to search (repeatable; default: all but the vault)."),
    ] = None,
    kind: Annotated[list[MediaKind] | None, typer.Option(help="Only content from these media kinds.")] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="Only content from this time on: a span back from now (2h, "
            "3d), ISO 8601 or words ('last week', '2024-05', 'yesterday')."
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            help="Only content up to this time: a span back from now, ISO 8601 "
            "or words (the end of the range they name)."
        ),
    ] = None,
    entity: Annotated[
        list[str] | None,
        typer.Option(help="Only content linked to these entities (ids from `engram entities`; repeatable)."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-k", min=1, max=1000, help="Number of results.")] = 10,
    as_of: Annotated[
        str | None,
        typer.Option(
            help='Resolve time words in the query ("last Tuesday") against this time (ISO 8601; default: now).'
        ),
    ] = None,
    history: Annotated[bool, typer.Option("--history", help="Include superseded and archived memories.")] = False,
    no_collapse: Annotated[
        bool,
        typer.Option(
            "--no-collapse", help="Show every near-duplicate screenshot of a burst (default: one hit per burst)."
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the SearchResponse as JSON (with the fused scores).")
    ] = False,
) -> None:
    """Hybrid search (dense MiniLM + BM25, fused by reciprocal rank fusion) over observations and memories.

    Each hit shows what matched (query words, meaning, time words); a burst of near-duplicate screenshots of one
    window is one hit. A tenant or user that holds nothing is named on stderr (exit 1)."""
    from engram.schemas.settings import get_settings

    req = SearchRequest(
        query=query,
        tenant_id=tenant or get_settings().tenant,
        user_id=user,
        memory_types=memory_type or list(DEFAULT_SEARCH_TYPES),
        kinds=kind,
        entities=entity,
        time_from=time_bound(since, "--since"),
        time_to=time_bound(until, "--until", end=True),
        limit=limit,
        collapse=not no_collapse,
        reference_time=parse_time(as_of),
        include_history=history,
    )
    resp = run_search(req)
    if as_json:
        print(resp.model_dump_json(indent=2))
    else:
        print_hits(resp)
    if not resp.hits:  # a tenant or user that holds nothing: why, and where the data is (exit 1)
        explain_empty(resp.empty, req.tenant_id, user)


@app.command()
@reads_store
def status(
    tenant: Annotated[str | None, typer.Option(help="Tenant (default: ENGRAM_TENANT or 'default').")] = None,
    failures: Annotated[int, typer.Option(help="How many failed events to list with their reasons.")] = 20,
) -> None:
    """Event counts by status from the ledger, stored points per collection, and recent failures."""
    from engram.schemas.settings import get_settings
    from engram.workers.stores.ledger import SqliteLedger  # the workers' stack, when the command runs
    from engram.workers.stores.vectors import COLLECTIONS, tenant_filter

    tenant = tenant or get_settings().tenant
    rt = _runtime()
    if isinstance(rt.ledger, SqliteLedger):
        rt.ledger.check()  # every page read: damage no query below touches is named too (StoreCorrupt, exit 3)
    counts = rt.ledger.counts(tenant)
    table = Table(title=f"events of tenant {tenant!r}")
    table.add_column("status")
    table.add_column("events", justify="right")
    for st in EventStatus:
        table.add_row(st.value, str(counts.get(st, 0)))
    console.print(table)
    coll = Table(title="stored")
    coll.add_column("collection")
    coll.add_column("points", justify="right")
    for name in COLLECTIONS:
        coll.add_row(name, str(rt.vectors.count(name, tenant_filter(tenant))))
    console.print(coll)
    failed = rt.ledger.records(tenant, EventStatus.failed, limit=failures)
    for rec in failed:
        console.print(
            f"[red]failed[/red] {escape(shown_name(rec.source_name or rec.object_key))} \\[{rec.stage}]: "
            f"{escape(str(rec.reason))}",
            highlight=False,
        )
    skipped = rt.ledger.records(tenant, EventStatus.skipped, limit=failures)
    for rec in skipped:
        console.print(
            f"skipped {escape(shown_name(rec.source_name or rec.object_key))}: {escape(str(rec.reason))}",
            highlight=False,
        )
    unfinished = [
        r for st in (EventStatus.processing, EventStatus.queued) for r in rt.ledger.records(tenant, st, limit=failures)
    ]
    running = rt.ledger.running([r.event_id for r in unfinished])  # its process lives: not interrupted
    for rec in unfinished:
        console.print(
            f"{'[cyan]in progress[/cyan]' if rec.event_id in running else '[yellow]unfinished[/yellow]'} "
            f"{escape(shown_name(rec.source_name or rec.object_key))} "
            f"({rec.status.value}, stage {rec.stage or 'ingest'})",
            highlight=False,
        )
    stuck = [r for r in unfinished if r.event_id not in running]
    if stuck and rt.settings.embedded:
        what = ("1 event was", "it", "it") if len(stuck) == 1 else (f"{len(stuck)} events were", "them", "they")
        console.print(
            "{} interrupted: the next `engram ingest` (of any file) runs {} again first, keeping what {} stored".format(
                *what
            ),
            highlight=False,
        )
    from engram.api.cli.retention import print_storage

    print_storage(rt, tenant)  # bytes per kind: originals, thumbnails, store, ledger, caches
    if reveals := rt.ledger.reveal_count(tenant):
        console.print(
            f"vault: {counted(reveals, 'reveal')} of a secret audited (who, when, which entry)", highlight=False
        )


entities_app = typer.Typer(no_args_is_help=False)
app.add_typer(entities_app, name="entities")


@entities_app.callback(
    invoke_without_command=True,
    epilog="Examples:  engram entities --tenant acme  ·  engram entities --merge <kept id> "
    "<merged id>  ·  engram entities name <id> Maria",
)
@reads_store
def entities(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(help="Tenant (default: ENGRAM_TENANT or 'default').")] = None,
    merge: Annotated[
        tuple[str, str] | None,
        typer.Option(
            help="Merge the second entity into the first (samples, names and links move; recorded in the first).",
            metavar="KEEP DROP",
        ),
    ] = None,
) -> None:
    """People linked from faces, voices and chat speakers (M3-Agent's entities): names and counts."""
    if ctx.invoked_subcommand is None:
        show_entities(tenant, merge)


def show_entities(tenant: str | None = None, merge: tuple[str, str] | None = None) -> None:
    """Print the tenant's entities as a table (``engram entities``), after merging ``merge`` = (kept, dropped)
    when given. Exits 1 with the reason when the merge is refused."""
    from engram.schemas.settings import get_settings
    from engram.workers.memory.entities import list_entities, merge_entities

    tenant = tenant or get_settings().tenant
    rt = _runtime()
    if merge:
        try:
            kept = merge_entities(rt, tenant, *merge)
        except (KeyError, ValueError) as exc:
            err.print(f"cannot merge: {escape(str(exc.args[0]))}")
            raise typer.Exit(1) from exc
        console.print(f"merged {escape(merge[1])} into {kept.id} ({escape(str(kept.label))})")
    table = Table(title=f"entities of tenant {tenant!r}")
    for column in ("id", "role", "names", "faces", "voices", "observations", "first seen", "last seen", "merged from"):
        table.add_column(column, justify="right" if column in ("faces", "voices", "observations") else "left")
    for e in list_entities(rt, tenant):
        role = {"self": "you", "assistant": "assistant"}.get(e.role, "")
        table.add_row(
            str(e.id),
            role,
            Text(", ".join(e.names)),
            str(e.faces),
            str(e.voices),
            str(e.observations),
            local_time(e.first_seen),
            local_time(e.last_seen),
            ", ".join(m[:8] for m in e.merged_from),
        )
    console.print(table)


@entities_app.command("name", epilog="Example:  engram entities name 3f2a9c1e-... Maria")
@reads_store
def entities_name(
    entity_id: Annotated[str, typer.Argument(help="The entity's id (from `engram entities`).")],
    name: Annotated[str, typer.Argument(help="The person's name.")],
    tenant: Annotated[str | None, typer.Option(help="Tenant (default: ENGRAM_TENANT or 'default').")] = None,
) -> None:
    """Name a person entity (a face or voice found without a name): searches naming them then filter to them,
    and ask shows the name in its evidence."""
    import uuid

    from engram.schemas.settings import get_settings

    try:
        eid = uuid.UUID(entity_id)
    except ValueError as exc:
        raise typer.BadParameter(f"{entity_id!r} is not an entity id (a UUID)", param_hint="ENTITY_ID") from exc
    try:
        with service_call() as service:
            named = service.name_entity(tenant or get_settings().tenant, eid, name)
    except ValueError as exc:  # an empty name
        err.print(Text.assemble(("error: ", "red"), str(exc)))
        raise typer.Exit(2) from exc
    if named is None:
        err.print(Text.assemble(("error: ", "red"), f"no entity {entity_id}"))
        raise typer.Exit(1)
    console.print(Text(f"{named.id}: {', '.join(named.names)}"))


@app.command()
@reads_store
def consolidate(
    user: Annotated[
        str | None, typer.Option(help="Only this user (default: every user with new observations).")
    ] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant (with --user).")] = None,
) -> None:
    """Turn new observations into memories now (beat does this periodically in the distributed mode)."""
    from engram.schemas.settings import get_settings
    from engram.workers.consolidate import consolidate_user
    from engram.workers.memory.episodes import pending_users

    rt = _runtime()
    pairs = [(tenant or get_settings().tenant, user)] if user else pending_users(rt)
    total = 0
    for t, u in pairs:
        total += consolidate_user.delay(t, u).get()
    console.print(f"{counted(total, 'episodic memory', 'episodic memories')} written for {counted(len(pairs), 'user')}")


@app.command()
def migrate() -> None:
    """Move an embedded store written by engram before Qdrant Edge (ENGRAM_DATA_DIR/qdrant, qdrant-client's local
    mode) into the Qdrant Edge store (ENGRAM_DATA_DIR/vectors), showing progress. Every point is copied with its
    vectors and payload, the copy is checked id by id, and only then is the old folder removed. Any command
    that opens the store does the same on first use; this one does it now and says what it did."""
    from engram.schemas.settings import get_settings
    from engram.workers.stores.vectors import embedded_store_dir, legacy_store_dir, migrate_local_store

    settings = get_settings()
    if settings.qdrant_url:
        err.print("nothing to migrate: ENGRAM_QDRANT_URL names a Qdrant server", highlight=False)
        return
    old = legacy_store_dir(settings)
    if not old.is_dir():
        console.print(Text(f"nothing to migrate: no old store at {old}"))
        return
    bar = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err
    )
    tasks: dict[str, int] = {}

    def told(collection: str, done: int, total: int) -> None:
        if collection not in tasks:
            tasks[collection] = bar.add_task(collection, total=total)
        bar.update(tasks[collection], completed=done)

    with bar:
        copied = migrate_local_store(settings, told)
    console.print(
        Text(
            f"migrated {sum(copied.values())} points in {len(copied)} collections from {old} to "
            f"{embedded_store_dir(settings)}; the old folder is removed"
        )
    )


@app.command()
def convert(
    source: Annotated[Path, typer.Argument(help="A LoCoMo file (all samples) or a LongMemEval question file.")],
    out: Annotated[Path, typer.Option(help="Folder for the JSONL conversation records.")] = Path("conversations"),
) -> None:
    """Write benchmark conversations as engram's conversation record (JSONL), one file per conversation.

    Only dialog turns and image captions are carried over, never the benchmark's annotations.
    """
    from engram.workers.media.conversations import (
        locomo_date_order,
        locomo_sample_id,
        locomo_sample_messages,
        longmemeval_messages,
        to_jsonl,
    )

    doc = json.loads(source.read_bytes())
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(doc, dict) and "haystack_sessions" in doc:
        convs = {str(doc.get("question_id", source.stem)): longmemeval_messages(doc)}
    else:
        samples = doc if isinstance(doc, list) else [doc]
        order = locomo_date_order(samples)  # the file's dates settle the order of its ambiguous ones
        convs = {locomo_sample_id(s, i): locomo_sample_messages(s, i, order) for i, s in enumerate(samples)}
    for name, msgs in convs.items():
        (out / f"{name}.jsonl").write_bytes(to_jsonl(msgs))
        console.print(Text(f"{out / (name + '.jsonl')}: {counted(len(msgs), 'message')}"))


@app.command()
def demo(
    workdir: Annotated[
        Path | None,
        typer.Option(help="Where to write the sample media and the demo's data (default: a fresh temporary folder)."),
    ] = None,
) -> None:
    """Make a small realistic sample (rendered screenshots, synthetic speech, a short clip, a chat), run the
    whole pipeline on it on the embedded default, and show what was stored and a few searches."""
    from engram.api.demo import run_demo

    run_demo(workdir, console)


# ask, memories list|get|delete, forget, export: through the query worker (api/cli/memory.py)
from engram.api.cli.memory import register as _register_memory_commands  # noqa: E402

_register_memory_commands(app)

# add, mcp: for agents (api/cli/agent.py, api/mcp_server.py)
from engram.api.cli.agent import register as _register_agent_commands  # noqa: E402

_register_agent_commands(app)

# ui: the web app on the embedded default (api/cli/ui.py, api/ui/)
from engram.api.cli.ui import ui as _ui  # noqa: E402

app.command("ui", epilog="Example:  engram ui --port 8780")(_ui)

# retention: originals past their kind's age or the storage cap (api/cli/retention.py, workers/stores/retention.py)
from engram.api.cli.retention import register as _register_retention_command  # noqa: E402

_register_retention_command(app)

# backup, restore: the embedded default's data dir (api/cli/keep.py, workers/stores/backup.py)
from engram.api.cli.keep import register as _register_keep_commands  # noqa: E402

_register_keep_commands(app)

# import: an archive of `engram export --archive` (api/cli/archive.py, workers/memory/archive.py)
from engram.api.cli.archive import register as _register_archive_commands  # noqa: E402

_register_archive_commands(app)


# --- distributed mode: worker and beat processes (api/processes.py holds the rules) ---------------------


def _celery_logging(ctx: typer.Context, loglevel: str) -> None:
    """structlog at the worker's log level, in the format chosen by the global ``--log-format``; Celery's
    ``setup_logging`` signal then applies the same format at ``--loglevel`` (``workers.logs``)."""
    fmt = (ctx.parent.params.get("log_format") if ctx.parent else None) or "console"
    _configure_logging(loglevel.upper() in ("DEBUG", "INFO"), fmt)
    logging.getLogger("celery").setLevel(logging.NOTSET)  # task received/succeeded lines at the worker's level


@app.command(
    epilog="Examples:  engram worker --role cpu --concurrency 2  ·  engram worker --role store  ·  "
    "engram worker --queues perceive.gpu --pool threads"
)
def worker(
    ctx: typer.Context,
    queues: Annotated[
        str | None,
        typer.Option(help="Comma-separated queues: ingest, perceive.cpu, perceive.gpu, store, consolidate, query."),
    ] = None,
    role: Annotated[
        str | None,
        typer.Option(
            help="Queue set shortcut: cpu (ingest, perceive.*), gpu "
            "(perceive.gpu), store (store, consolidate, query), all."
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency", "-c", help="Worker processes or threads (default: the number of CPUs; 1 with --pool solo)."
        ),
    ] = None,
    pool: Annotated[
        str | None,
        typer.Option(
            "--pool",
            "-P",
            help="prefork, solo or threads (default: solo for the store worker on the embedded store, else prefork).",
        ),
    ] = None,
    loglevel: Annotated[str, typer.Option("--loglevel", "-l", help="DEBUG, INFO, WARNING or ERROR.")] = "INFO",
    hostname: Annotated[
        str | None, typer.Option("--hostname", "-n", help="Celery node name (default: <role>-<pid>@<host>).")
    ] = None,
    events: Annotated[bool, typer.Option("--events", "-E", help="Send task events (for Flower).")] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            help="Serve Prometheus /metrics on this port (default: ENGRAM_METRICS_PORT; unset: no metrics server)."
        ),
    ] = None,
) -> None:
    """Run a Celery worker of the distributed mode (needs ENGRAM_BROKER_URL).

    With the embedded store (no ENGRAM_QDRANT_URL) exactly one worker serves the Qdrant-bound queues
    (store, consolidate, query), all three, with --pool solo; the others serve ingest and perceive.*.
    With a metrics port, the worker serves the metrics of all its pool processes there (prometheus-client's
    multiprocess mode, in PROMETHEUS_MULTIPROC_DIR or a fresh temporary folder). A worker that Celery stops on an
    unrecoverable error (seen when Redis restarts under a worker holding prefetched messages) starts itself again,
    waiting 1 s, or longer when it keeps stopping; a shutdown asked for (SIGTERM, Ctrl-C) is a shutdown.
    """
    from engram.api.processes import WorkerConfigError, plan_worker, worker_argv
    from engram.schemas.settings import get_settings

    if metrics_port is not None:
        os.environ["ENGRAM_METRICS_PORT"] = str(metrics_port)
    settings = get_settings()
    if settings.metrics_port:
        _prepare_multiprocess_metrics()
    try:
        plan = plan_worker(settings, queues, role, pool, concurrency)
    except WorkerConfigError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from exc
    if not settings.qdrant_url and set(plan.queues) & {"store", "consolidate", "query"}:
        # the one store worker of the embedded store opens the store now (its solo pool runs tasks in this
        # process), so a second one fails here with the reason instead of failing every task
        from engram.workers.runtime import runtime
        from engram.workers.stores.vectors import StoreBusy

        try:
            # at once, without waiting for the store's lock (ENGRAM_STORE_WAIT_SECONDS): it is held by a live worker
            runtime(settings.model_copy(update={"store_wait_seconds": 0.0})).vectors.count("observations")
        except StoreBusy as exc:
            err.print(
                f"[red]error:[/red] {escape(str(exc))}; only one store worker may run on the embedded store",
                highlight=False,
            )
            raise typer.Exit(3) from exc
    _celery_logging(ctx, loglevel)
    from engram.api.processes import UnrecoverableWatch, pool_model_environment, restart_worker, warm_up_models
    from engram.workers.app import app as celery_app

    os.environ.update(pool_model_environment(plan, settings))  # read by the pool processes' settings
    warm_up_models(plan)  # the text embedder loads as the pool processes start, not in their first task

    with UnrecoverableWatch() as watch:
        code = celery_app.start(worker_argv(plan, loglevel, hostname, events)) or 0  # = `celery worker ...`
    if watch.restart:  # stopped without being asked to (Celery's "Unrecoverable error"): start again, backing off
        restart_worker(watch)
    sys.exit(code)


def _prepare_multiprocess_metrics() -> None:
    """Point prometheus-client's multiprocess mode at an empty folder of this worker's own, before any
    metric is created (the variable is read when prometheus_client is imported)."""
    import shutil
    import tempfile

    if "prometheus_client" in sys.modules and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        raise RuntimeError("prometheus_client was imported before its multiprocess folder was set")
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder:  # given by the operator (e.g. an emptyDir volume): start from an empty folder
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder, exist_ok=True)
    else:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="engram-metrics-")


@app.command()
def beat(
    ctx: typer.Context,
    loglevel: Annotated[str, typer.Option("--loglevel", "-l", help="DEBUG, INFO, WARNING or ERROR.")] = "INFO",
) -> None:
    """Run Celery beat: starts consolidation every ENGRAM_CONSOLIDATE_INTERVAL_SECONDS (run exactly one).

    Its schedule state is kept under ENGRAM_DATA_DIR/beat/.
    """
    from engram.api.processes import WorkerConfigError, beat_argv
    from engram.schemas.settings import get_settings

    try:
        argv = beat_argv(get_settings(), loglevel)
    except WorkerConfigError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from exc
    _celery_logging(ctx, loglevel)
    from engram.workers.app import app as celery_app

    sys.exit(celery_app.start(argv) or 0)


# --- the knowledge vault (workers/memory/vault.py): secrets redacted in perceive, kept Fernet-encrypted ---

vault_app = typer.Typer(
    help="Secrets found in content (keys, passwords, card numbers, ...), kept encrypted.", no_args_is_help=True
)
app.add_typer(vault_app, name="vault")


@vault_app.command("list")
def vault_list(
    tenant: Annotated[str | None, typer.Option(help="Tenant (default ENGRAM_TENANT).")] = None,
    user: Annotated[str | None, typer.Option(help="Only this user's entries.")] = None,
) -> None:
    """List vault entries: id, type, sensitivity, user and caption (never the secret)."""
    from engram.schemas.settings import get_settings
    from engram.workers.memory.vault import list_entries

    rt = _runtime()
    table = Table("id", "type", "sensitivity", "user", "caption")
    for entry in list_entries(rt, tenant or get_settings().tenant, user):
        table.add_row(str(entry.id), entry.entry_type, entry.sensitivity, entry.user_id, Text(entry.caption or ""))
    console.print(table)


@vault_app.command("reveal")
def vault_reveal(
    entry_id: Annotated[str, typer.Argument(help=escape("The entry id (from a [vault:ID type] placeholder)."))],
    tenant: Annotated[str | None, typer.Option(help="Tenant (default ENGRAM_TENANT).")] = None,
) -> None:
    """Print one entry's decrypted secret (the only way to read a secret back). Each reveal is audited (OS user,
    pid, time, entry; never the secret) and counted by `engram status`."""
    from engram.schemas.settings import get_settings
    from engram.workers.memory.vault import VaultError, reveal

    try:
        print(reveal(_runtime(), tenant or get_settings().tenant, entry_id))
    except VaultError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(1) from exc


@vault_app.command("keygen")
def vault_keygen() -> None:
    """Print a new Fernet key for ENGRAM_VAULT_KEY (the same on every worker)."""
    from cryptography.fernet import Fernet

    print(Fernet.generate_key().decode())


# --- distributed mode: API keys, the API server, and publishing through it (api/http/app.py, api/client.py) ---

keys_app = typer.Typer(
    help="API keys per tenant, stored hashed in Redis (ENGRAM_BROKER_URL or ENGRAM_REDIS_URL).", no_args_is_help=True
)
app.add_typer(keys_app, name="keys")

ApiUrl = Annotated[
    str | None,
    typer.Option(
        "--api", envvar="ENGRAM_API_URL", show_envvar=True, help="The engram API, e.g. http://127.0.0.1:8000."
    ),
]
ApiKey = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar="ENGRAM_API_KEY",
        show_envvar=True,
        show_default=False,
        help="API key of the tenant to publish as.",
    ),
]


def _keys_redis():
    from engram.api.http.keys import redis_client
    from engram.schemas.settings import get_settings

    try:
        return redis_client(get_settings())
    except RuntimeError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from exc


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="The tenant the key publishes and reads as.")],
    label: Annotated[str | None, typer.Option(help="A note to recognise the key by in `engram keys list`.")] = None,
) -> None:
    """Make an API key for TENANT and print it. It is shown only this once: only its hash is stored."""
    from engram.api.http.keys import create_key

    try:
        key = create_key(_keys_redis(), tenant, label)
    except ValueError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from exc
    print(key)
    err.print(f"API key for tenant {escape(repr(tenant))} (store it now: it cannot be shown again)", highlight=False)


@keys_app.command("list")
def keys_list(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
) -> None:
    """List the stored keys (their ids, never the keys themselves)."""
    from engram.api.http.keys import list_keys

    table = Table(title="API keys")
    for col in ("key id", "tenant", "created", "label"):
        table.add_column(col)
    for k in list_keys(_keys_redis(), tenant):
        table.add_row(k.key_id, k.tenant, local_time(k.created_at), Text(k.label or ""))
    console.print(table)


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="Key id from `engram keys list` (≥ 8 characters).")],
) -> None:
    """Delete a key: requests with it are refused (401) from now on."""
    from engram.api.http.keys import revoke_key

    try:
        n = revoke_key(_keys_redis(), key_id)
    except ValueError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from exc
    console.print(f"{counted(n, 'key')} revoked")
    if n == 0:
        raise typer.Exit(1)


def _publish_error(exc: Exception) -> str:
    import httpx

    from engram.api.client import EngramAPIError

    if isinstance(exc, EngramAPIError):
        detail = (
            exc.detail
            if isinstance(exc.detail, str)
            else "; ".join(f"{'.'.join(str(x) for x in d.get('loc', [])[1:])}: {d.get('msg')}" for d in exc.detail)
        )
        return f"HTTP {exc.status}: {detail}"
    if isinstance(exc, httpx.TransportError):
        return f"cannot reach the API or object store ({type(exc).__name__})"
    if isinstance(exc, OSError):
        return f"cannot read: {exc.strerror or exc}"
    return str(exc).splitlines()[0]


@app.command(
    epilog="Examples:  engram publish ~/Pictures/Screenshots --api http://engram:8000 --api-key $KEY  ·  "
    "ENGRAM_API_URL=... ENGRAM_API_KEY=... engram publish memo.m4a --wait"
)
def publish(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders (recursively); kind detected by content.")],
    api: ApiUrl = None,
    api_key: ApiKey = None,
    user: Annotated[str | None, typer.Option(help="User id (default: ENGRAM_USER or the OS user).")] = None,
    device: Annotated[str | None, typer.Option(help="Device id (default: ENGRAM_DEVICE or the host name).")] = None,
    kind: Annotated[MediaKind | None, typer.Option(help="Publish as this kind (default: detected).")] = None,
    captured_at: Annotated[str | None, typer.Option(help="When captured, ISO 8601 (default: file times).")] = None,
    app_name: Annotated[str | None, typer.Option("--app", help="Foreground application, for screenshots.")] = None,
    window: Annotated[str | None, typer.Option(help="Window title, for screenshots.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until every event is done, skipped or failed.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait with --wait.")] = 600.0,
) -> None:
    """Publish files to a running engram (distributed mode): hash, upload through a presigned URL, publish.

    Resumable: content the object store already has is not sent again, and a file published before from
    the same user and device is not enqueued again, so an interrupted run can simply be repeated.
    """
    from engram.api.client import NotMedia
    from engram.api.local import iter_files

    try:
        files = list(iter_files(paths))
    except FileNotFoundError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    when = parse_time(captured_at)
    counts = {"published": 0, "uploaded": 0, "stored": 0, "again": 0, "not media": 0, "failed": 0}
    ids = []
    with api_client(api, api_key, user, device) as client:
        total = sum(p.stat().st_size for p in files if p.exists())
        progress = Progress(
            TextColumn("[bold]publish"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[current]}"),
            console=err,
        )
        with progress:
            task = progress.add_task("publish", total=total, current="")
            for path in files:
                progress.update(task, current=path.name[:40])
                size = path.stat().st_size if path.exists() else 0
                try:
                    res = client.publish(path, kind, captured_at=when, app=app_name, window=window)
                except NotMedia:
                    counts["not media"] += 1
                except Exception as exc:  # one bad file does not stop the rest
                    counts["failed"] += 1
                    err.print(
                        f"[red]failed[/red] {escape(shown_name(path))}: {escape(_publish_error(exc))}", highlight=False
                    )
                else:
                    ids.append(res.event_id)
                    counts["published"] += 1
                    counts["uploaded" if res.uploaded else "stored"] += 1
                    counts["again"] += res.duplicate
                progress.advance(task, size)
        console.print(
            f"{counts['published']} published ({counts['uploaded']} uploaded, {counts['stored']} "
            f"already stored, {counts['again']} published before), {counts['not media']} not media, "
            f"[red]{counts['failed']} failed[/red]"
        )
        if wait and ids:
            try:
                final = client.wait(ids, timeout=timeout)
            except TimeoutError as exc:
                err.print(f"[red]error:[/red] {escape(str(exc))}")
                raise typer.Exit(1) from exc
            by = {
                s: sum(1 for r in final.values() if r.status is s)
                for s in (EventStatus.done, EventStatus.skipped, EventStatus.failed)
            }
            console.print(
                f"{by[EventStatus.done]} done, {by[EventStatus.skipped]} skipped, "
                f"[red]{by[EventStatus.failed]} failed[/red]"
            )
            for eid, r in final.items():
                if r.status is EventStatus.failed:
                    console.print(f"  failed {eid} \\[{r.stage}]: {escape(str(r.reason))}", highlight=False)
    if counts["failed"] and not counts["published"]:
        raise typer.Exit(1)


@app.command(
    epilog="Examples:  engram watch ~/Pictures/Screenshots  ·  "
    "engram watch ~/Pictures/Screenshots --api http://engram:8000 --api-key $KEY"
)
def watch(
    folder: Annotated[Path, typer.Argument(help="The folder to watch (recursively).")],
    api: ApiUrl = None,
    api_key: ApiKey = None,
    user: Annotated[str | None, typer.Option(help="User id (default: ENGRAM_USER or the OS user).")] = None,
    device: Annotated[str | None, typer.Option(help="Device id (default: ENGRAM_DEVICE or the host name).")] = None,
    settle: Annotated[
        float, typer.Option(help="Seconds a file's size must stay unchanged before it is published.")
    ] = 2.0,
    existing: Annotated[
        bool,
        typer.Option(
            "--existing",
            help="Also publish the files already in the folder (those published before are not sent again).",
        ),
    ] = False,
    tenant: Annotated[str | None, typer.Option(help="Tenant without --api (default: ENGRAM_TENANT).")] = None,
) -> None:
    """Publish new files in FOLDER as they appear, once each is completely written. Ctrl-C stops.

    Without --api, ingests them on the embedded default (no servers), a batch at a time, holding the store only
    while a batch is ingested."""

    from engram.api.capture.watch import FolderWatcher
    from engram.api.client import NotMedia

    if not api:
        _watch_embedded(folder, tenant, user, device, settle, existing)
        return
    with api_client(api, api_key, user, device) as client:

        def send(path: Path) -> None:
            res = client.publish(path)
            note = "published before" if res.duplicate else ("uploaded" if res.uploaded else "already stored")
            console.print(
                f"published {escape(shown_name(path))} ({note}): {res.event_id}", highlight=False, soft_wrap=True
            )

        def failed(path: Path, exc: Exception) -> None:
            if not isinstance(exc, NotMedia):
                err.print(
                    f"[red]failed[/red] {escape(shown_name(path))}: {escape(_publish_error(exc))}", highlight=False
                )

        try:
            watcher = FolderWatcher(
                folder,
                send,
                settle=settle,
                existing=existing,
                on_error=failed,
                on_ready=lambda: err.print(f"watching {escape(str(folder))} (Ctrl-C stops)", highlight=False),
            )
        except NotADirectoryError as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))}")
            raise typer.Exit(2) from exc
        _run_watcher(watcher)


def _register_capture() -> None:
    from engram.api.capture.agent import capture_command

    app.command(
        "capture",
        epilog="Examples:  engram capture  ·  engram capture --duration 600 --deny-title 'Bank'  "
        "·  engram capture --api http://engram:8000 --api-key $KEY",
    )(capture_command)


_register_capture()


def _watch_embedded(
    folder: Path, tenant: str | None, user: str | None, device: str | None, settle: float, existing: bool
) -> None:
    """``engram watch`` without --api: each batch of settled files through ``ingest_paths`` (api.capture.watch)."""

    from engram.api.capture.watch import EmbeddedBatches, FolderWatcher
    from engram.schemas.settings import get_settings

    tenant, user, device = tenant or get_settings().tenant, user or default_user(), device or default_device()

    def report(result: dict[str, list]) -> None:
        for path, rec in result["done"] + result["resumed"]:
            console.print(
                Text(f"ingested {shown_name(path)}: {rec.status.value} ({counted(rec.observations, 'observation')})")
            )
        for path, rec in result["skipped"]:
            console.print(Text(f"skipped {shown_name(path)}: {rec.reason}"))
        for path, why in result["failed"]:
            err.print(Text.assemble(("failed ", "red"), f"{shown_name(path)}: {getattr(why, 'reason', why)}"))

    batches = EmbeddedBatches(
        lambda paths: ingest_paths(paths, tenant, user, device, quiet=True),
        report,
        on_busy=lambda exc: err.print(Text(f"waiting: {exc}")),
        linger=STORE_HOLD_SECONDS,
    )
    try:
        watcher = FolderWatcher(
            folder,
            batches.publish,
            settle=settle,
            existing=existing,
            on_batch=batches.on_batch,
            on_ready=lambda: err.print(Text(f"watching {folder} (embedded; Ctrl-C stops)")),
        )
    except NotADirectoryError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    batches.watcher = watcher
    try:
        _run_watcher(watcher)
    finally:
        batches.close()


def _run_watcher(watcher) -> None:
    """Run ``watcher`` (api.capture.watch.FolderWatcher) until Ctrl-C (SIGINT) or SIGTERM, which set its stop event: the
    publish or batch under way is finished and it returns, instead of a KeyboardInterrupt raised wherever the main
    thread is (inside a lock, a request)."""
    import signal
    import threading

    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        watcher.run(stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    err.print("stopped")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(help="Server processes.")] = 1,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Run the HTTP API (uvicorn api.app:app). Needs ENGRAM_BROKER_URL (Redis) and, for uploads, S3."""
    import uvicorn

    from engram.api.http.keys import redis_client
    from engram.schemas.settings import get_settings

    try:
        redis_client(get_settings())
    except RuntimeError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from exc
    uvicorn.run("engram.api.http.app:app", host=host, port=port, workers=workers, log_level=log_level)


def main() -> None:
    """Console entry point."""
    try:
        app()
    except Exception as exc:  # a last line of defence: one clear line, not a traceback
        from rich.text import Text

        from engram.schemas.errors import StoreError

        if isinstance(exc, StoreError):  # busy, damaged, unreachable: one line naming the folder or the file
            err.print(Text.assemble(("error: ", "red"), " ".join(str(exc).split())), soft_wrap=True)
            sys.exit(3)
        from pydantic import ValidationError

        if isinstance(exc, ValidationError) and exc.title == "Settings":  # a bad ENGRAM_* variable: name it
            for e in exc.errors():
                name = "ENGRAM_" + "__".join(str(p) for p in e["loc"]).upper()
                err.print(Text.assemble(("error: ", "red"), f"{name}: {e['msg'].removeprefix('Value error, ')}"))
            sys.exit(2)
        if isinstance(exc, ValidationError):  # a request built from the command's arguments (an empty query)
            for e in exc.errors(include_url=False):
                field = ".".join(str(p) for p in e["loc"]) or exc.title
                err.print(
                    Text.assemble(
                        ("error: ", "red"),
                        f"{field}: {e['msg'].removeprefix('Value error, ')} (given {e['input']!r:.80})",
                    )
                )
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()
