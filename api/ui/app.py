"""The web app (issue 42): server-rendered pages over the service layer (``api.service.MemoryService``), served by
``engram ui`` on the embedded default (``embedded_ui``) and by ``engram serve`` at ``/ui`` (``api.ui.signin``: sign-in
with an API key, one app per tenant). Pages: ``api.ui.pages``; routes: ``api.ui.routes``; guards (Host check, CSP,
CSRF): ``api.ui.security``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from engram.api.ui import routes, signin
from engram.api.ui.pages import HERE, Pages, UiConfig
from engram.api.ui.security import Guard, loopback_hosts
from engram.schemas.settings import get_settings


def create_ui(cfg: UiConfig, serve: Any = None) -> Any:
    """The web app for ``cfg``: a FastAPI app without OpenAPI, docs or ReDoc routes, inside the ``Guard`` (Host
    check, security headers). An ASGI app; its FastAPI app is ``.app``. ``serve``: an ``api.ui.signin.ServeContext``
    under ``engram serve`` (the tenant's API keys on the Connect page, originals streamed from S3), None for
    ``engram ui``."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None, title="engram ui")
    app.state.cfg = cfg
    app.state.pages = pages = Pages(cfg)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    if serve is not None:
        signin.register(app, cfg, pages, serve)  # before the shared routes: its /connect, /media, /thumb win
    routes.register(app, cfg, pages)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        message = "Nothing here: it was deleted, or never was." if exc.detail == "Not Found" else str(exc.detail)
        return await run_in_threadpool(pages.error, request, exc.status_code, message)

    return Guard(app, cfg.allowed_hosts)


def embedded_ui(host: str, port: int, tenant: str) -> Any:
    """The ASGI app of ``engram ui``: the web app on an ``EmbeddedService`` for ``tenant``, answering only Host
    values of ``host``:``port`` (``loopback_hosts``)."""
    from engram.api.service.embedded import EmbeddedService  # the workers' stack, when the UI starts

    cfg = UiConfig(EmbeddedService(), tenant, get_settings().data_dir, loopback_hosts(host, port))
    return create_ui(cfg)


def served_ui(prefix: str = "/ui") -> Any:
    """The ASGI app ``engram serve`` mounts at ``prefix`` (``api.ui.signin.ServedUi``): sign-in with an API key,
    then the web app of the key's tenant (``create_ui`` on the API's ``QueueService``)."""
    return signin.ServedUi(create_ui, prefix)
