"""``engram ui``: the web app (``api.ui``) on the embedded default, at http://127.0.0.1:PORT/ (registered on the
main app by ``api.cli.main.main``). The store is shared with the other engram commands as ``engram mcp`` shares it
(``api.service.embedded.EmbeddedService``: held during a page's reads, let go when another command asks)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated

import typer

from engram.api.console import err

HOST = "127.0.0.1"


def ui(
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port on 127.0.0.1 (0: any free port).")] = 8780,
    tenant: Annotated[str | None, typer.Option(help="Tenant shown (default: ENGRAM_TENANT or 'default').")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="The embedded default's folder (sets ENGRAM_DATA_DIR).")] = None,
) -> None:
    """See what engram remembers in a browser: timeline, search, people, memories, activity and how to connect
    an assistant. Listens on 127.0.0.1 only and answers only requests addressed to it; the store stays usable by
    other engram commands while it runs. Ctrl+C stops it."""
    import uvicorn  # the server and the workers' stack load when the command runs, not with `engram --help`

    from engram.api.ui.app import embedded_ui  # idem
    from engram.schemas.settings import get_settings  # idem

    if data_dir is not None:
        os.environ["ENGRAM_DATA_DIR"] = str(data_dir.expanduser())
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as exc:
        err.print(f"[red]error:[/red] cannot listen on {HOST}:{port}: {exc.strerror} (try --port 0)", highlight=False)
        raise typer.Exit(2) from exc
    sock.listen(128)  # from now on a browser's connection waits in the backlog until the server accepts it
    bound = sock.getsockname()[1]
    app = embedded_ui(HOST, bound, tenant or get_settings().tenant)
    print(f"engram ui on http://{HOST}:{bound}/  (Ctrl+C to stop)", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    try:
        server.run(sockets=[sock])
    finally:
        app.app.state.cfg.service.close()  # let the store go at once
