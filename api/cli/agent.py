"""The ``engram`` commands for agents: ``add`` (remember a text or chat messages now) and ``mcp`` (the MCP server,
``api/mcp_server.py``). Registered on the main app by ``api.cli.main.main``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.text import Text

from engram.api.console import STORE_HOLD_SECONDS, console, counted, default_device, default_user, err, parse_time

TenantOpt = Annotated[str | None, typer.Option(help="Tenant (default: ENGRAM_TENANT or 'default').")]


def read_messages(path: Path) -> list[dict]:
    """Chat messages from ``path``: a JSON array, ``{"messages": [...]}`` or JSONL (one message per line), each
    message with at least ``text`` (the conversation record's other fields optional: speaker, timestamp,
    message_id, session_id, attachments). Raises ValueError naming what is wrong, OSError when unreadable."""
    raw = path.read_text(encoding="utf-8")
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError:
        try:
            doc = [json.loads(line) for line in raw.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: neither JSON nor JSONL ({exc})") from exc
    if isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        doc = doc["messages"]
    if not isinstance(doc, list) or not all(isinstance(m, dict) for m in doc):
        raise ValueError(f"{path}: expected a list of messages (objects with 'text'), or {{\"messages\": [...]}}")
    return doc


def add(
    text: Annotated[str | None, typer.Argument(help="What to remember (or --file for chat messages).")] = None,
    user: Annotated[str | None, typer.Option(help="Whose memory (default: ENGRAM_USER or the OS user).")] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            help="Chat messages as JSON or JSONL (the conversation record; only 'text' is required per message).",
        ),
    ] = None,
    client_id: Annotated[
        str | None,
        typer.Option(
            "--id", help="Your id for this addition: adding again with the same id stores nothing (safe retries)."
        ),
    ] = None,
    when: Annotated[str | None, typer.Option("--time", help="When it happened, ISO 8601 (default: now).")] = None,
    source: Annotated[str | None, typer.Option(help="Where it comes from, e.g. an agent's name.")] = None,
    session: Annotated[str | None, typer.Option(help="The conversation it belongs to.")] = None,
    tenant: TenantOpt = None,
    device: Annotated[str | None, typer.Option(help="Device id (default: ENGRAM_DEVICE or the host name).")] = None,
    no_consolidate: Annotated[bool, typer.Option("--no-consolidate", help="Skip consolidation afterwards.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Remember a text or chat messages now, through the same pipeline as an ingested chat file. On the embedded
    default it is searchable when the command returns."""
    from pydantic import ValidationError

    from engram.api.add import add_embedded
    from engram.schemas.add import AddMemoryRequest
    from engram.schemas.settings import get_settings
    from engram.workers.runtime import runtime

    if (text is None) == (file is None):
        err.print("[red]error:[/red] give a TEXT or --file (one of them)")
        raise typer.Exit(2)
    try:
        messages = read_messages(file) if file is not None else None
        req = AddMemoryRequest(
            text=text,
            messages=messages,
            user_id=user or default_user(),
            id=client_id,
            time=parse_time(when),
            source=source or ("cli" if file is None else file.name),
            session_id=session,
        )
    except (OSError, ValueError, ValidationError) as exc:
        msg = (
            str(exc)
            if not isinstance(exc, ValidationError)
            else "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors())
        )
        err.print(Text.assemble(("error: ", "red"), msg))
        raise typer.Exit(2) from exc
    resp = add_embedded(
        runtime(), req, tenant or get_settings().tenant, device or default_device(), consolidate=not no_consolidate
    )
    if as_json:
        print(resp.model_dump_json(indent=2))
    elif resp.duplicate:
        console.print(
            f"already added with id {escape(repr(client_id))}: event {resp.event_id} "
            f"({resp.status.value}); nothing new stored",
            highlight=False,
        )
    else:
        console.print(
            ("resumed an interrupted addition: " if resp.resumed else "")
            + f"{resp.status.value}: event {resp.event_id}, {counted(resp.observations, 'observation')}"
            + (f" ({escape(str(resp.reason))})" if resp.reason else ""),
            highlight=False,
        )
    if resp.status.value == "failed":
        raise typer.Exit(1)


def mcp(
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="The embedded default's folder (sets ENGRAM_DATA_DIR; MCP "
            "hosts pass only HOME and PATH to the server)."
        ),
    ] = None,
    tenant: TenantOpt = None,
    user: Annotated[
        str | None,
        typer.Option(
            help="The one user served (default: ENGRAM_USER or the OS user); "
            "with --all-users, whom add_memory stores for when the model names "
            "none."
        ),
    ] = None,
    all_users: Annotated[
        bool,
        typer.Option(
            "--all-users",
            help="Serve every user of the tenant (default: only --user; calls naming another user are refused).",
        ),
    ] = False,
    device: Annotated[
        str | None, typer.Option(help="Device id recorded on added memories (default: the host name).")
    ] = None,
    http: Annotated[
        bool,
        typer.Option(
            "--http",
            help="Serve streamable HTTP at /mcp instead of stdio; every "
            "request needs an API key (engram keys create), whose tenant it uses.",
        ),
    ] = False,
    host: Annotated[str, typer.Option(help="Address to listen on, with --http.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on, with --http.")] = 8765,
    hold_seconds: Annotated[
        float,
        typer.Option(
            min=0,
            help="Keep the embedded store open up to this long after a "
            "tool call, so the next call finds it open (0.3-4 s to open); "
            "another engram command that needs it gets it at once.",
        ),
    ] = STORE_HOLD_SECONDS,
    api: Annotated[
        str | None,
        typer.Option(
            "--api",
            envvar="ENGRAM_API_URL",
            help="Call this engram API (with --api-key) instead of the embedded store.",
        ),
    ] = None,
    api_key: Annotated[
        str | None, typer.Option("--api-key", envvar="ENGRAM_API_KEY", help="API key, with --api.")
    ] = None,
) -> None:
    """Serve engram's memory to an AI agent over the Model Context Protocol: tools search, ask, add_memory,
    list_memories, get_memory, delete_memory, list_entities, name_entity. Over stdio by default (logs on
    stderr). It serves one user (--user; a call naming another is refused) unless --all-users serves the whole
    tenant; stored text comes back quoted as data. The embedded store is left to any other engram command that asks
    for it, so they keep working."""
    from engram.api.mcp_server import EngramTools, run_http, run_stdio, serve_api_tools
    from engram.schemas.settings import get_settings

    if data_dir is not None:
        os.environ["ENGRAM_DATA_DIR"] = str(data_dir.expanduser())
    settings = get_settings()
    user = _served_user(user)
    if api:  # the tools call the API (api.service.remote.RemoteService); exit 2 with one line if unusable
        serve_api_tools(api, api_key, device or default_device(), user, http, host, port, all_users)
        return
    tools = EngramTools(
        tenant or settings.tenant, device or default_device(), user, linger=hold_seconds, all_users=all_users
    )
    if not http:
        run_stdio(tools)
        return
    from engram.api.http.keys import redis_client

    try:
        r = redis_client(settings)
    except RuntimeError as exc:
        err.print(
            f"[red]error:[/red] {escape(str(exc))} (--http authenticates by API keys kept in Redis)", highlight=False
        )
        raise typer.Exit(2) from exc
    err.print(f"engram MCP server on http://{host}:{port}/mcp (API keys required)", highlight=False)
    run_http(tools, host, port, r)


def _served_user(user: str | None) -> str:
    """``--user`` checked as the HTTP API checks user ids, else the default user (``console.default_user``).
    Exits 2 with one line for an invalid id."""
    from pydantic import ValidationError

    from engram.api.mcp_server import USER_ID  # the server's module, loaded when the command runs

    if user is None:
        return default_user()
    try:
        return USER_ID.validate_python(user)
    except ValidationError as exc:
        err.print(
            Text.assemble(
                ("error: ", "red"),
                f"--user {user!r}: {exc.errors()[0]['msg']} (letters, digits and ._@:+-, at most 128 characters)",
            )
        )
        raise typer.Exit(2) from exc


def register(app: typer.Typer) -> None:
    """Add ``add`` and ``mcp`` to the ``engram`` app."""
    app.command(
        epilog='Examples:  engram add "Maria moves to Lisbon in March" --user alice  ·  '
        "engram add --file chat.json --user alice --id chat-2024-05-01"
    )(add)
    app.command(
        epilog="Example (an MCP host's config):  command: engram, args: [mcp, --data-dir, /home/me/.local/share/engram]"
    )(mcp)
