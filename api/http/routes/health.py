"""Health routes: ``/metrics`` (Prometheus), ``/healthz`` (liveness) and ``/readyz`` (readiness). None needs an
API key; ``/metrics`` may need the metrics token."""

from __future__ import annotations

import secrets

import structlog
from fastapi import APIRouter, HTTPException
from fastapi.responses import JSONResponse, Response

from engram.api.http.routes.deps import Credentials, Services, Svc
from engram.api.http.routes.errors import responses
from engram.workers.metrics import render
from engram.workers.tasks import Queue

log = structlog.get_logger(__name__)

router = APIRouter(tags=["health"])


@router.get(
    "/metrics",
    response_class=Response,
    responses=responses(
        401,
        404,
        e401="ENGRAM_API_METRICS_TOKEN is set and not given.",
        e404="No metrics token is set and ENGRAM_API_PUBLIC_METRICS is off.",
    ),
)
def metrics(svc: Svc, creds: Credentials) -> Response:
    """Prometheus metrics: this process's (or, with PROMETHEUS_MULTIPROC_DIR, every api process's) and
    the depth of each Celery queue, read from the broker now. Open with ENGRAM_API_PUBLIC_METRICS; else
    only with ``Authorization: Bearer <ENGRAM_API_METRICS_TOKEN>`` (401), 404 without a token set."""
    if not svc.settings.api_public_metrics:
        token = svc.settings.api_metrics_token
        if token is None:
            raise HTTPException(404, "not found")
        if creds is None or not secrets.compare_digest(creds.credentials.encode(), token.get_secret_value().encode()):
            raise HTTPException(401, "metrics need the metrics token", headers={"WWW-Authenticate": "Bearer"})
    body, content_type = render(svc.metrics)
    return Response(body, media_type=content_type)


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "a dependency is not ready"}})
def readyz(svc: Svc) -> JSONResponse:
    """Readiness: the broker answers, the object store is reachable and a worker consumes the query
    queue. 200 with every check ``ok``, else 503 naming the failed ones."""
    broker = _check_broker(svc)
    checks = {
        "broker": broker,
        "object_store": _check_objects(svc),
        "query_worker": _check_query_worker(svc) if broker == "ok" else "unknown (no broker)",
    }
    ok = all(v == "ok" for v in checks.values())
    return JSONResponse({"status": "ready" if ok else "not ready", "checks": checks}, status_code=200 if ok else 503)


def _check_broker(svc: Services) -> str:
    try:
        with svc.celery.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=2)
        return "ok"
    except Exception as exc:
        log.warning("broker not ready", error=f"{type(exc).__name__}: {exc}")
        return "unreachable"


def _check_objects(svc: Services) -> str:
    try:
        svc.objects.ping()
        return "ok"
    except Exception as exc:
        log.warning("object store not ready", error=f"{type(exc).__name__}: {exc}")
        return "unreachable"


def _check_query_worker(svc: Services) -> str:
    try:
        queues = svc.celery.control.inspect(timeout=1.0).active_queues() or {}
    except Exception as exc:
        log.warning("cannot ask workers", error=f"{type(exc).__name__}: {exc}")
        return "unreachable"
    if any(q.get("name") == Queue.query for qs in queues.values() for q in qs or ()):
        return "ok"
    return "no worker consumes the query queue"
