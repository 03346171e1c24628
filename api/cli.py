"""The ``engram`` command line.

Runs on the embedded default (no servers: a local folder, Qdrant's local mode and a SQLite ledger under
``ENGRAM_DATA_DIR``) unless ``ENGRAM_BROKER_URL`` points at a Redis broker.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from schemas.events import EventStatus, MediaKind  # noqa: E402
from schemas.memories import MemoryType  # noqa: E402
from schemas.search import DEFAULT_SEARCH_TYPES, SearchRequest, SearchResponse  # noqa: E402

app = typer.Typer(
    name="engram",
    help="Long-term multimodal memory for AI agents: ingest screenshots, audio, clips and chats, then search "
         "them. Runs on the embedded default (no servers; data under ENGRAM_DATA_DIR) unless "
         "ENGRAM_BROKER_URL is set.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True)  # per-file failure lines stay one line each, however long


def _configure_logging(verbose: bool, log_format: str) -> None:
    import structlog

    level = logging.INFO if verbose else logging.ERROR
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("RapidOCR", "faster_whisper", "sentence_transformers", "httpx", "celery"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    renderer = structlog.processors.JSONRenderer() if log_format == "json" else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=lambda *_: structlog.PrintLogger(sys.stderr))  # the current stderr, not the first one


@app.callback()
def main_options(
    data_dir: Annotated[Path | None, typer.Option(help="Where the embedded default keeps everything "
                                                  "(sets ENGRAM_DATA_DIR).")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log pipeline progress to stderr.")] = False,
    log_format: Annotated[str, typer.Option(help="Log lines as 'console' or 'json'.")] = "console",
) -> None:
    """Global options."""
    if data_dir is not None:
        os.environ["ENGRAM_DATA_DIR"] = str(data_dir)
    _configure_logging(verbose, log_format)


def _runtime():
    from workers.runtime import runtime

    return runtime()


def _default_user() -> str:
    from schemas.settings import get_settings

    return get_settings().user or _safe_id(getpass.getuser())


def _default_device() -> str:
    from schemas.settings import get_settings

    return get_settings().device or _safe_id(socket.gethostname())


def _safe_id(value: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "._@:+-" else "-" for c in value).strip("-")
    return cleaned[:128] or "unknown"


def _parse_time(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise typer.BadParameter(f"{value!r} is not an ISO 8601 time (e.g. 2024-05-01T14:30:00Z)") from exc
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def ingest_paths(paths: list[Path], tenant: str, user: str, device: str, captured_at: datetime | None = None,
                 app_name: str | None = None, window: str | None = None, consolidate: bool = True,
                 quiet: bool = False) -> dict[str, list]:
    """Ingest files and folders on the configured runtime; returns {'done'|'skipped'|'failed'|'ignored': [...]}
    where each item is (path, record or reason). Used by ``engram ingest`` and ``engram demo``."""
    from api.local import classify, iter_files, publish_file, run_event

    rt = _runtime()
    files = list(iter_files(paths))
    out: dict[str, list] = {"done": [], "skipped": [], "failed": [], "ignored": []}
    users: set[tuple[str, str]] = set()
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("{task.fields[current]}"), console=err,
                        disable=quiet, transient=False)
    with progress:
        task = progress.add_task("ingest", total=len(files), current="")
        for path in files:
            progress.update(task, current=path.name[:50])
            try:
                cand = classify(path)
            except OSError as exc:
                out["failed"].append((path, f"cannot read: {exc.strerror or exc}"))
                err.print(f"[red]failed[/red] {path}: cannot read: {exc.strerror or exc}")
                progress.advance(task)
                continue
            if cand.kind is None:
                out["ignored"].append((path, "not media or a conversation file"))
                progress.advance(task)
                continue
            event = publish_file(rt, cand, tenant, user, device, captured_at, app_name, window)
            record = run_event(rt, event)
            status = record.status.value if record.status in (EventStatus.done, EventStatus.skipped,
                                                              EventStatus.failed) else "failed"
            out[status].append((path, record))
            if record.status is EventStatus.failed:
                err.print(f"[red]failed[/red] {path}: {record.reason} (stage {record.stage})", highlight=False)
            users.add((tenant, user))
            progress.advance(task)
    if consolidate and users:
        from workers.consolidate import consolidate_user

        for t, u in sorted(users):
            consolidate_user.delay(t, u)
    return out


@app.command(epilog="Examples:  engram ingest ~/Pictures/Screenshots --user alice  ·  "
                     "engram ingest memo.m4a chat.jsonl --captured-at 2024-05-01T09:30:00Z")
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders (recursively). Kind is detected by "
                                                "content: images, audio, video, conversation JSON/JSONL.")],
    user: Annotated[str | None, typer.Option(help="User id (default: ENGRAM_USER or the OS user).")] = None,
    device: Annotated[str | None, typer.Option(help="Device id (default: ENGRAM_DEVICE or the host name).")] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant (default: ENGRAM_TENANT or 'default').")] = None,
    captured_at: Annotated[str | None, typer.Option(help="When the media was captured, ISO 8601 "
                                                    "(default: each file's modification time).")] = None,
    app_name: Annotated[str | None, typer.Option("--app", help="Foreground application, for screenshots.")] = None,
    window: Annotated[str | None, typer.Option(help="Window title, for screenshots.")] = None,
    no_consolidate: Annotated[bool, typer.Option("--no-consolidate", help="Skip consolidation afterwards.")] = False,
) -> None:
    """Ingest media and conversations: validate, perceive (OCR, speech-to-text), embed, store, consolidate.

    Files that are neither media nor conversations are reported as skipped; bad media (empty, truncated,
    corrupt, too large) is recorded as failed with its reason and does not stop the rest.
    """
    from schemas.settings import get_settings

    try:
        result = ingest_paths(paths, tenant or get_settings().tenant, user or _default_user(),
                              device or _default_device(), _parse_time(captured_at), app_name, window,
                              consolidate=not no_consolidate)
    except FileNotFoundError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    _print_ingest_summary(result)
    if result["failed"] and not (result["done"] or result["skipped"]):
        raise typer.Exit(1)


def _print_ingest_summary(result: dict[str, list]) -> None:
    obs = sum(r.observations for _, r in result["done"])
    console.print(f"[green]{len(result['done'])} done[/green] ({obs} observations), "
                  f"{len(result['skipped'])} skipped, [red]{len(result['failed'])} failed[/red], "
                  f"{len(result['ignored'])} not media")
    for path, record in result["skipped"]:
        console.print(f"  skipped {path}: {record.reason}", highlight=False, soft_wrap=True)
    for path, why in result["ignored"][:10]:
        console.print(f"  skipped {path}: {why}", highlight=False, soft_wrap=True)
    if len(result["ignored"]) > 10:
        console.print(f"  … and {len(result['ignored']) - 10} more files that are not media")


def snippet(text: str, query: str, width: int = 110) -> str:
    """A one-line excerpt of ``text`` around the first query word it contains."""
    flat = " ".join(text.split())
    low = flat.lower()
    pos = min((i for w in query.lower().split() if len(w) > 2 and (i := low.find(w)) >= 0), default=0)
    start = max(0, pos - width // 3)
    out = flat[start:start + width]
    return ("…" if start else "") + out + ("…" if start + width < len(flat) else "")


@app.command(epilog="Examples:  engram search \"budget review\" --since 2024-05-01  ·  "
                     "engram search receiver_count --kind screenshot -k 3  ·  engram search \"trip\" --type episodic")
def search(
    query: Annotated[str, typer.Argument(help="What to look for, in words.")],
    user: Annotated[str | None, typer.Option(help="Only this user's memories (default: all users).")] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant (default: ENGRAM_TENANT or 'default').")] = None,
    memory_type: Annotated[list[MemoryType] | None, typer.Option("--type", help="Collections to search "
                                                                 "(repeatable; default: all but the vault).")] = None,
    kind: Annotated[list[MediaKind] | None, typer.Option(help="Only content from these media kinds.")] = None,
    since: Annotated[str | None, typer.Option(help="Only content from this time on (ISO 8601).")] = None,
    until: Annotated[str | None, typer.Option(help="Only content up to this time (ISO 8601).")] = None,
    limit: Annotated[int, typer.Option("--limit", "-k", min=1, max=1000, help="Number of results.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print the SearchResponse as JSON.")] = False,
) -> None:
    """Hybrid search (dense MiniLM + BM25, fused by reciprocal rank fusion) over observations and memories."""
    from schemas.settings import get_settings

    req = SearchRequest(query=query, tenant_id=tenant or get_settings().tenant, user_id=user,
                        memory_types=memory_type or list(DEFAULT_SEARCH_TYPES), kinds=kind,
                        time_from=_parse_time(since), time_to=_parse_time(until), limit=limit)
    resp = run_search(req)
    if as_json:
        print(resp.model_dump_json(indent=2))
        return
    print_hits(resp)


def run_search(req: SearchRequest) -> SearchResponse:
    """Run a search through the query task (inline on the embedded default)."""
    from workers.query import search_task

    return SearchResponse.model_validate(search_task.delay(req).get(timeout=120))


def print_hits(resp: SearchResponse, out: Console | None = None) -> None:
    """The hits as a table on ``out`` (default: stdout): score, type, time, source, snippet."""
    out = out or console
    if not resp.hits:
        out.print(f"no results for {resp.query!r}")
        return
    table = Table(title=f"{resp.query!r} — {len(resp.hits)} results in {resp.took_ms:.0f} ms", expand=True)
    table.add_column("#", no_wrap=True, min_width=2)
    table.add_column("score", no_wrap=True, min_width=6)
    table.add_column("type", no_wrap=True, min_width=11)
    table.add_column("time", no_wrap=True, min_width=16)
    table.add_column("source", no_wrap=True, max_width=34, overflow="ellipsis")
    table.add_column("snippet", ratio=1, min_width=30, overflow="fold")
    for i, hit in enumerate(resp.hits, 1):
        when = hit.time.strftime("%Y-%m-%d %H:%M") if hit.time else ""
        src = Path(hit.source_name).name if hit.source_name and "," not in hit.source_name else (hit.source_name or "")
        if hit.start_s is not None:
            src += f" @{hit.start_s:.1f}s"
        if hit.message_ids and hit.memory_type is MemoryType.observation:
            src += f" {hit.message_ids[0]}"
        table.add_row(str(i), f"{hit.score:.4f}", hit.memory_type.value, when, src[:40], snippet(hit.text, resp.query))
    out.print(table)


@app.command()
def status(
    tenant: Annotated[str | None, typer.Option(help="Tenant (default: ENGRAM_TENANT or 'default').")] = None,
    failures: Annotated[int, typer.Option(help="How many failed events to list with their reasons.")] = 20,
) -> None:
    """Event counts by status from the ledger, stored points per collection, and recent failures."""
    from schemas.settings import get_settings
    from workers.vectorstore import COLLECTIONS, tenant_filter

    tenant = tenant or get_settings().tenant
    rt = _runtime()
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
        console.print(f"[red]failed[/red] {rec.source_name or rec.object_key} [{rec.stage}]: {rec.reason}",
                      highlight=False)
    skipped = rt.ledger.records(tenant, EventStatus.skipped, limit=failures)
    for rec in skipped:
        console.print(f"skipped {rec.source_name or rec.object_key}: {rec.reason}", highlight=False)


@app.command()
def consolidate(
    user: Annotated[str | None, typer.Option(
        help="Only this user (default: every user with new observations).")] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant (with --user).")] = None,
) -> None:
    """Turn new observations into memories now (beat does this periodically in the distributed mode)."""
    from schemas.settings import get_settings
    from workers.consolidate import consolidate_user, pending_users

    rt = _runtime()
    pairs = [(tenant or get_settings().tenant, user)] if user else pending_users(rt)
    total = 0
    for t, u in pairs:
        total += consolidate_user.delay(t, u).get()
    console.print(f"{total} episodic memories written for {len(pairs)} user(s)")


@app.command()
def convert(
    source: Annotated[Path, typer.Argument(help="A LoCoMo file (all samples) or a LongMemEval question file.")],
    out: Annotated[Path, typer.Option(help="Folder for the JSONL conversation records.")] = Path("conversations"),
) -> None:
    """Write benchmark conversations as engram's conversation record (JSONL), one file per conversation.

    Only dialog turns and image captions are carried over, never the benchmark's annotations.
    """
    from workers.adapters import locomo_sample_messages, longmemeval_messages, to_jsonl

    doc = json.loads(source.read_bytes())
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(doc, dict) and "haystack_sessions" in doc:
        convs = {str(doc.get("question_id", source.stem)): longmemeval_messages(doc)}
    else:
        samples = doc if isinstance(doc, list) else [doc]
        convs = {str(s.get("sample_id", i)): locomo_sample_messages(s) for i, s in enumerate(samples)}
    for name, msgs in convs.items():
        (out / f"{name}.jsonl").write_bytes(to_jsonl(msgs))
        console.print(f"{out / (name + '.jsonl')}: {len(msgs)} messages")


@app.command()
def demo(
    workdir: Annotated[Path | None, typer.Option(help="Where to write the sample media and the demo's data "
                                                 "(default: a fresh temporary folder).")] = None,
) -> None:
    """Make a small realistic sample (rendered screenshots, synthetic speech, a short clip, a chat), run the
    whole pipeline on it on the embedded default, and show what was stored and a few searches."""
    from api.demo import run_demo

    run_demo(workdir, console)


def main() -> None:
    """Console entry point."""
    try:
        app()
    except Exception as exc:  # a last line of defence: one clear line, not a traceback
        from workers.vectorstore import StoreBusy

        if isinstance(exc, StoreBusy):
            err.print(f"[red]error:[/red] {exc}")
            sys.exit(3)
        raise


if __name__ == "__main__":
    main()
