"""The HTTP API of the distributed mode (FastAPI): uploads, events, search, ask, memories, entities, health.

Data flow (DESIGN.md): a device asks ``POST /v1/uploads`` for a presigned PUT URL of the content-addressed
key ``media/<tenant>/<sha256>.<ext>``, PUTs the bytes straight to the object store, then publishes the
``MediaEvent`` with ``POST /v1/events``, which records it as queued in the ledger and sends it to the
``ingest`` queue. ``POST /v1/search``, ``POST /v1/ask`` and memory management (``/v1/memories``, forgetting and
exporting a user under ``/v1/users``, ``/v1/entities``) go through the ``query`` queue: the API never opens the
vector store. Every request is scoped to the tenant of its API key (``Authorization: Bearer <key>``).

Layout: one router per resource in ``api.routes`` (``health``, ``publish``, ``search``, ``memories``,
``entities``); authentication and tenancy are dependencies (``api.routes.deps``), the error handlers sit in
``api.routes.errors``; the web app is mounted at ``/ui`` (``api.ui.signin``). ``create_app`` only assembles them;
its lifespan opens the ``Services`` (Redis client, ledger, object store, Celery producer) into ``app.state``, where
the routes reach them. Run with ``uvicorn engram.api.http.app:app`` or ``engram serve``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

from celery import Celery
from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from engram.api.http.ratelimit import RateLimiter
from engram.api.http.routes import archives, entities, health, memories, publish, screens, search
from engram.api.http.routes.deps import build_services
from engram.api.http.routes.errors import HANDLERS
from engram.api.ui.app import served_ui
from engram.schemas.settings import Settings, get_settings

DESCRIPTION = (
    "Long-term multimodal memory for AI agents: publish media, follow its ingestion, search memories. "
    "Authenticate with `Authorization: Bearer <API key>`."
)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The app's lifespan: opens the services (``build_services``, from the ``settings`` and ``celery`` that
    ``create_app`` left in ``app.state``) and the rate limiter into ``app.state`` at start-up, and closes what it
    opened at shutdown (a Celery app given by the caller stays the caller's). Raises RuntimeError without Redis."""
    given = app.state.celery
    app.state.services = build_services(app.state.settings or get_settings(), given)
    app.state.rate_limiter = RateLimiter(app.state.services.settings)
    yield
    app.state.services.redis.close()
    if given is None:  # made by build_services: ours to close
        app.state.services.celery.close()


def create_app(settings: Settings | None = None, celery: Celery | None = None) -> FastAPI:
    """The FastAPI app for ``settings`` (default: read from the environment at start-up).

    ``celery``: see ``api.routes.deps.build_services``. The services are opened by the lifespan, so importing this
    module or building the app needs no server; start-up fails with a clear error without Redis (RuntimeError).
    """
    configured = settings or get_settings()
    # /docs and /redoc from the Swagger UI and ReDoc files packaged in fastapi-offline (no CDN: they load offline)
    # (served only with ENGRAM_API_PUBLIC_DOCS; else no /docs, /redoc or /openapi.json at all)
    make = (
        FastAPIOffline
        if configured.api_public_docs
        else partial(FastAPI, docs_url=None, redoc_url=None, openapi_url=None)
    )
    app = make(
        title="engram",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        max_body_size=configured.api_max_body_bytes,
        exception_handlers=dict(HANDLERS),
    )
    app.state.settings, app.state.celery = settings, celery  # read by the lifespan at start-up
    for module in (health, publish, search, memories, entities, screens, archives):
        app.include_router(module.router)
    app.mount("/ui", served_ui("/ui"))  # the web app (api.ui.signin): sign in with an API key; not in OpenAPI
    return app


app = create_app()
