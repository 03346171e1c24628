"""The API's errors: what each status means, the ``responses`` a route documents, and the app's exception
handlers. Every error body is an ``ApiError`` (``{"detail": ...}``); a route lists only the statuses it can
return (tests/api/test_openapi.py holds them).
"""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from engram.schemas.api import ApiError

log = structlog.get_logger(__name__)

#: What each error status means on this API; every error body is an ``ApiError``. Each route lists the statuses it
#: can return (``responses``), a route-specific meaning where it has one.
ERROR_MEANINGS = {
    401: "No API key, or an unknown one (`Authorization: Bearer <key>`).",
    403: "The body names another tenant than the API key's.",
    404: "Not found, or another tenant's (the two are indistinguishable).",
    409: "A conflict with what is stored.",
    413: "The request body is larger than ENGRAM_API_MAX_BODY_BYTES, or the object than ENGRAM_MAX_OBJECT_BYTES.",
    422: "An invalid request: `detail` lists each invalid field as {loc, msg, type}.",
    429: "The API key's rate limit is exceeded: retry after the Retry-After header's seconds.",
    501: "Not offered by this server's configuration.",
    502: "The query worker failed the request (the reason is given when it is the LLM's).",
    503: "Redis, the broker or the object store is unavailable: try again.",
    504: "No query worker answered in time.",
}
#: Every route behind an API key can answer these: no or a bad key, its rate limit, Redis (keys) down.
AUTH_ERRORS = (401, 429, 503)
#: Routes that wait for a query worker.
WORKER_ERRORS = (502, 504)


def responses(*codes: int, **meanings: str) -> dict[int | str, dict[str, Any]]:
    """FastAPI ``responses`` for the error statuses ``codes``, each an ``ApiError`` described by ``ERROR_MEANINGS``
    or by ``meanings`` (``e404="event not found"`` overrides 404's). Raises KeyError for a status without a
    meaning."""
    return {c: {"model": ApiError, "description": meanings.get(f"e{c}", ERROR_MEANINGS[c])} for c in sorted(codes)}


def invalid(field: str, msg: str) -> HTTPException:
    """A 422 shaped like a body validation error, naming ``field``."""
    return HTTPException(422, [{"loc": ["body", field], "msg": msg, "type": "value_error"}])


def unavailable(what: str, exc: Exception) -> HTTPException:
    """A 503 saying ``what`` is unavailable; the cause ``exc`` is logged, not sent."""
    log.error(f"{what} unavailable", error=f"{type(exc).__name__}: {exc}")
    return HTTPException(503, f"{what} unavailable, try again")


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 listing each invalid field as {loc, msg, type}; the offending input is not echoed back (it may be
    10 kB of hostile text)."""
    detail = [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", "invalid"), "type": e.get("type", "")} for e in exc.errors()
    ]
    return JSONResponse({"detail": detail}, status_code=422)


async def redis_down(request: Request, exc: RedisError) -> JSONResponse:
    """503 when Redis (API keys, publish claims, the ledger) fails."""
    log.error("redis unavailable", path=request.url.path, error=f"{type(exc).__name__}: {exc}")
    return JSONResponse({"detail": "service unavailable, try again"}, status_code=503)


async def internal_error(request: Request, exc: Exception) -> JSONResponse:
    """500 with no detail (the cause is logged)."""
    log.error("request failed", path=request.url.path, error=f"{type(exc).__name__}: {exc}")
    return JSONResponse({"detail": "internal error"}, status_code=500)


#: The app's exception handlers by exception type (``FastAPI(exception_handlers=HANDLERS)``).
HANDLERS = {RequestValidationError: validation_error, RedisError: redis_down, Exception: internal_error}
