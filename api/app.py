"""The HTTP API of the distributed mode (FastAPI): uploads, events, search, health.

Data flow (DESIGN.md): a device asks ``POST /v1/uploads`` for a presigned PUT URL of the content-addressed
key ``media/<tenant>/<sha256>.<ext>``, PUTs the bytes straight to the object store, then publishes the
``MediaEvent`` with ``POST /v1/events``, which records it as queued in the ledger and sends it to the
``ingest`` queue. ``POST /v1/search``, ``POST /v1/ask`` and memory management (``/v1/memories``, forgetting and
exporting a user under ``/v1/users``) go through the ``query`` queue: the API never opens the vector store.
Every request is scoped to the tenant of its API key (``Authorization: Bearer <key>``).

Ownership: ``create_app`` builds the app; its ``Services`` (Redis client, ledger, object store, Celery
producer) are made at start-up by the lifespan and shared by the request threads (FastAPI runs the sync
endpoints in its thread pool; each client here is thread-safe, and Celery keeps one result backend per
thread). Run with ``uvicorn api.app:app`` or ``engram serve``.
"""

from __future__ import annotations

import os
import secrets
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Annotated, Any
from urllib.parse import urlsplit

import structlog
from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi_offline import FastAPIOffline
from redis.exceptions import RedisError

from engram.api import keys
from engram.api.ratelimit import RateLimiter
from engram.api.uploads import UploadRejected, promote, staging_key
from engram.schemas.add import AddMemoryQuery, AddMemoryResponse
from engram.schemas.api import (
    ApiError,
    EventStatusResponse,
    PublishRequest,
    PublishResponse,
    SearchQuery,
    UploadRequest,
    UploadResponse,
)
from engram.schemas.ask import AskFailed, AskQuery, AskRequest, AskResponse
from engram.schemas.entities import EntityList, EntityMergeRequest, EntitySummary
from engram.schemas.events import _ID_PATTERN, EventStatus, MediaEvent, MediaKind
from engram.schemas.memories import MemoryType
from engram.schemas.memory_admin import ForgetReport, MemoryPage, MemoryRecord, UserExport
from engram.schemas.search import SearchRequest, SearchResponse
from engram.schemas.settings import Settings, get_settings
from engram.schemas.tools import EntityNameRequest
from engram.workers.fairness import tenant_priority
from engram.workers.ids import EXTENSIONS, object_key
from engram.workers.metrics import SEARCH_SECONDS, render
from engram.workers.metrics import registry as metrics_registry

log = structlog.get_logger(__name__)

INGEST_TASK = "workers.ingest.ingest"
SEARCH_TASK = "workers.query.search"
ASK_TASK = "workers.ask.ask"
MEMORY_TASK = "workers.memory_admin."  # + get, list, delete, export, forget
ENTITY_TASK = "workers.entities."  # + list, merge
#: A request publishing to the broker answers 503 within about 2 s when the broker is down (workers wait
#: longer: see ``task_publish_retry_policy`` in workers.app); the client retries the request.
REQUEST_PUBLISH_RETRY = {"max_retries": 3, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 1.0}
CLAIM_PREFIX = "engram:published:"

#: Which event kinds each supported mime type may carry (audio may come in a video container).
_TEXT_MIMES = {"application/json", "application/x-ndjson", "text/plain"}


def kinds_for_mime(mime_type: str) -> set[MediaKind]:
    """The event kinds ``mime_type`` may carry; empty when it is not a supported type
    (``workers.ids.EXTENSIONS`` lists the supported ones)."""
    if mime_type not in EXTENSIONS:
        return set()
    if mime_type in _TEXT_MIMES:
        return {MediaKind.text}
    family = mime_type.split("/", 1)[0]
    return {"image": {MediaKind.screenshot}, "audio": {MediaKind.audio},
            "video": {MediaKind.clip, MediaKind.audio}}.get(family, set())


@dataclass
class Services:
    """What the endpoints use, made once per app at start-up (see the module docstring for ownership)."""

    settings: Settings
    redis: Any  # redis.Redis: API keys and publish claims
    ledger: Any  # workers.stores.ledger.Ledger
    objects: Any  # workers.stores.objects.ObjectStore
    presigner: Any | None  # minio.Minio for the public S3 endpoint, None without S3
    celery: Any  # celery.Celery producer configured from ``settings``
    metrics: Any  # prometheus_client.CollectorRegistry served on /metrics


def _minio(endpoint: str, settings: Settings, secure: bool):
    """A Minio client with short timeouts (the SDK's default connect timeout is 5 minutes) and the region
    set, so presigning never needs a network round trip."""
    import certifi
    import urllib3
    from minio import Minio

    http = urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=3, read=30), maxsize=16, cert_reqs="CERT_REQUIRED",
        ca_certs=os.environ.get("SSL_CERT_FILE") or certifi.where(),
        retries=urllib3.Retry(total=2, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]))
    return Minio(endpoint, access_key=settings.s3_access_key, secret_key=settings.s3_secret_key, secure=secure,
                 region=settings.s3_region or "us-east-1", http_client=http)


def build_services(settings: Settings, celery=None) -> Services:
    """Open the API's clients for ``settings``. ``celery``: a configured producer app (default: a new
    Celery app configured from ``settings``, so the API never depends on the process-wide one).
    Raises RuntimeError without a Redis URL (API keys, claims and the ledger live in Redis)."""
    from celery import Celery

    from engram.workers.app import configure
    from engram.workers.stores.ledger import open_ledger
    from engram.workers.stores.objects import S3ObjectStore, open_object_store

    r = keys.redis_client(settings)
    if celery is None:
        celery = Celery("engram-api")
        configure(celery, settings)
    objects = open_object_store(settings)
    presigner = None
    if isinstance(objects, S3ObjectStore):
        objects.client = _minio(settings.s3_endpoint, settings, settings.s3_secure)
        public = settings.s3_public_endpoint or settings.s3_endpoint
        secure = settings.s3_secure
        if "://" in public:
            parts = urlsplit(public)
            public, secure = parts.netloc, parts.scheme == "https"
        presigner = _minio(public, settings, secure)
    from engram.workers.app import Queue

    registry = metrics_registry(settings.redis_url or settings.broker_url, [q.value for q in Queue])
    return Services(settings, r, open_ledger(settings), objects, presigner, celery, registry)


#: What each error status means on this API; every error body is an ``ApiError``. Each route lists the statuses it
#: can return (``_errors``), a route-specific meaning where it has one.
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


def _errors(*codes: int, **meanings: str) -> dict[int | str, dict[str, Any]]:
    """FastAPI ``responses`` for the error statuses ``codes``, each an ``ApiError`` described by ``ERROR_MEANINGS``
    or by ``meanings`` (``e404="event not found"`` overrides 404's)."""
    return {c: {"model": ApiError, "description": meanings.get(f"e{c}", ERROR_MEANINGS[c])} for c in sorted(codes)}


def _invalid(field: str, msg: str) -> HTTPException:
    """A 422 shaped like a body validation error, naming ``field``."""
    return HTTPException(422, [{"loc": ["body", field], "msg": msg, "type": "value_error"}])


_bearer = HTTPBearer(auto_error=False, description="An API key from `engram keys create --tenant T`.")


def _redact(svc: Services, event: MediaEvent) -> MediaEvent:
    """``event`` with the secrets of its app name, window title and metadata values in the vault
    (``workers.memory.vault.redact_event``); 503 when one is found and the API has no ``ENGRAM_VAULT_KEY``."""
    from engram.workers.memory.vault import VaultKeyMissing, redact_event

    try:
        return redact_event(svc, event)
    except VaultKeyMissing as exc:
        raise HTTPException(503, str(exc)) from exc


def _services(request: Request) -> Services:
    return request.app.state.services


def _tenant_of(request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> str:
    """The tenant of the request's API key; 401 without a key or with an unknown one."""
    if creds is None:
        raise HTTPException(401, "missing API key (send Authorization: Bearer <key>)",
                            headers={"WWW-Authenticate": "Bearer"})
    tenant = keys.tenant_for(_services(request).redis, creds.credentials)
    if tenant is None:
        raise HTTPException(401, "invalid API key", headers={"WWW-Authenticate": "Bearer"})
    request.app.state.rate_limiter.check(creds.credentials)  # 429 past ENGRAM_API_RATE_LIMIT (api.ratelimit)
    return tenant


Svc = Annotated[Services, Depends(_services)]
Tenant = Annotated[str, Depends(_tenant_of)]
UserId = Annotated[str, Path(pattern=_ID_PATTERN, description="A user of the key's tenant.")]


def create_app(settings: Settings | None = None, celery=None) -> FastAPI:
    """The FastAPI app for ``settings`` (default: read from the environment at start-up).

    ``celery``: see ``build_services``. The services are opened by the lifespan, so importing this
    module or building the app needs no server; start-up fails with a clear error without Redis.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.services = build_services(settings or get_settings(), celery)
        app.state.rate_limiter = RateLimiter(app.state.services.settings)
        yield
        app.state.services.redis.close()
        if celery is None:  # made by build_services: ours to close
            app.state.services.celery.close()

    limit = (settings or get_settings()).api_max_body_bytes
    public_docs = (settings or get_settings()).api_public_docs
    # /docs and /redoc from the Swagger UI and ReDoc files packaged in fastapi-offline (no CDN: they load offline)
    # (served only with ENGRAM_API_PUBLIC_DOCS; else no /docs, /redoc or /openapi.json at all)
    make = FastAPIOffline if public_docs else partial(FastAPI, docs_url=None, redoc_url=None, openapi_url=None)
    app = make(title="engram", version="0.1.0", lifespan=lifespan, max_body_size=limit,
                  description="Long-term multimodal memory for AI agents: publish media, follow its "
                              "ingestion, search memories. Authenticate with `Authorization: Bearer <API key>`.")
    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        # the offending input is not echoed back: it may be 10 kB of hostile text
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "invalid"), "type": e.get("type", "")}
                  for e in exc.errors()]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(RedisError)
    async def _redis_down(request: Request, exc: RedisError) -> JSONResponse:
        log.error("redis unavailable", path=request.url.path, error=f"{type(exc).__name__}: {exc}")
        return JSONResponse({"detail": "service unavailable, try again"}, status_code=503)

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.error("request failed", path=request.url.path, error=f"{type(exc).__name__}: {exc}")
        return JSONResponse({"detail": "internal error"}, status_code=500)

    def _unavailable(what: str, exc: Exception) -> HTTPException:
        log.error(f"{what} unavailable", error=f"{type(exc).__name__}: {exc}")
        return HTTPException(503, f"{what} unavailable, try again")

    def _on_query_worker(svc: Services, task: str, args: list, timeout: float, what: str,
                         timer: AbstractContextManager | None = None) -> Any:
        """Send ``task`` to the query queue and wait for its JSON result. 503 when the broker refuses it,
        504 when no query worker answers within ``timeout`` seconds, 502 when the task failed (with the
        reason when it is an ``AskFailed``, whose message is ours)."""
        from celery.exceptions import TimeoutError as CeleryTimeout

        try:
            result = svc.celery.send_task(task, args=args, retry_policy=REQUEST_PUBLISH_RETRY)
        except Exception as exc:
            raise _unavailable("queue", exc) from exc
        try:
            with timer or nullcontext():
                return result.get(timeout=timeout)
        except CeleryTimeout as exc:
            raise HTTPException(504, f"no query worker answered within {timeout:g} s") from exc
        except AskFailed as exc:
            raise HTTPException(502, f"{what} failed: {exc}") from exc
        except Exception as exc:
            log.error(f"{what} failed", error=f"{type(exc).__name__}: {exc}")
            raise HTTPException(502, f"{what} failed") from exc
        finally:
            result.forget()

    @app.get("/metrics", tags=["health"], response_class=Response, responses=_errors(
        401, 404, e401="ENGRAM_API_METRICS_TOKEN is set and not given.", e404="No metrics token is set and "
        "ENGRAM_API_PUBLIC_METRICS is off."))
    def metrics(svc: Svc, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Response:
        """Prometheus metrics: this process's (or, with PROMETHEUS_MULTIPROC_DIR, every api process's) and
        the depth of each Celery queue, read from the broker now. Open with ENGRAM_API_PUBLIC_METRICS; else
        only with ``Authorization: Bearer <ENGRAM_API_METRICS_TOKEN>`` (401), 404 without a token set."""
        if not svc.settings.api_public_metrics:
            token = svc.settings.api_metrics_token
            if token is None:
                raise HTTPException(404, "not found")
            if creds is None or not secrets.compare_digest(creds.credentials.encode(),
                                                           token.get_secret_value().encode()):
                raise HTTPException(401, "metrics need the metrics token", headers={"WWW-Authenticate": "Bearer"})
        body, content_type = render(svc.metrics)
        return Response(body, media_type=content_type)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], responses={503: {"description": "a dependency is not ready"}})
    def readyz(svc: Svc) -> JSONResponse:
        """Readiness: the broker answers, the object store is reachable and a worker consumes the query
        queue. 200 with every check ``ok``, else 503 naming the failed ones."""
        broker = _check_broker(svc)
        checks = {"broker": broker, "object_store": _check_objects(svc),
                  "query_worker": _check_query_worker(svc) if broker == "ok" else "unknown (no broker)"}
        ok = all(v == "ok" for v in checks.values())
        return JSONResponse({"status": "ready" if ok else "not ready", "checks": checks},
                            status_code=200 if ok else 503)

    @app.post("/v1/uploads", tags=["publish"], response_model=UploadResponse,
              responses=_errors(*AUTH_ERRORS, 413, 422, 501, e501="No S3 object store (ENGRAM_S3_ENDPOINT)."))
    def create_upload(body: UploadRequest, tenant: Tenant, svc: Svc) -> UploadResponse:
        """A presigned PUT URL for the content-addressed key of (sha256, mime type), or ``exists`` when the
        object is already stored with this size (the client then skips the PUT). The URL writes a staging key
        of its own, never the content-addressed one: publishing checks the bytes' size and sha256 and moves them
        there (``api.uploads``). 413 over the size limit, 422 for an unsupported mime type."""
        if not kinds_for_mime(body.mime_type):
            raise _invalid("mime_type", f"unsupported mime type; supported: {', '.join(sorted(EXTENSIONS))}")
        if body.size > svc.settings.max_object_bytes:
            raise HTTPException(413, f"object too large: {body.size} bytes exceeds the limit of "
                                     f"{svc.settings.max_object_bytes}")
        key = object_key(tenant, body.sha256, body.mime_type)
        stored = _stored_size(svc, key)
        if stored is None and svc.presigner is not None:  # uploaded before but not yet published: verify it now
            try:
                stored = body.size if promote(svc.objects, key, body.size, body.sha256) else None
            except UploadRejected:
                stored = None  # deleted; a new URL follows
        if stored == body.size:
            return UploadResponse(object_key=key, url="", exists=True, expires_in=0)
        if svc.presigner is None:
            raise HTTPException(501, "this server has no S3 object store for uploads (set ENGRAM_S3_ENDPOINT)")
        expiry = svc.settings.upload_url_expiry_seconds
        # the URL writes a staging key of its own; publishing verifies it and moves it to ``key`` (api.uploads)
        url = svc.presigner.presigned_put_object(svc.objects.bucket, staging_key(key),
                                                 expires=timedelta(seconds=expiry))
        return UploadResponse(object_key=key, url=url, exists=False, expires_in=expiry)

    @app.post("/v1/events", tags=["publish"], status_code=202, response_model=PublishResponse,
              responses=_errors(*AUTH_ERRORS, 403, 404, 409, 413, 422, e404="The object was not uploaded.",
                                e409="The stored object's size or sha256 differs, or the event id is another "
                                "tenant's.", e503=ERROR_MEANINGS[503] + " Or a secret was found in the event's "
                                "names or metadata and the API has no ENGRAM_VAULT_KEY."))
    def publish_event(body: PublishRequest, tenant: Tenant, svc: Svc) -> PublishResponse:
        """Publish a MediaEvent whose object was uploaded: record it as queued and send it to ingest.

        Idempotent by ``event_id``: publishing it again returns its current status with ``duplicate`` set
        and enqueues nothing. 403 for a body naming another tenant; 404 when the object is not stored,
        409 when its size differs, when the uploaded bytes are not the declared size and sha256 (the upload is
        deleted) or the event id belongs to someone else; 413 over the size limit;
        422 for an invalid body.
        """
        if body.tenant_id is not None and body.tenant_id != tenant:
            raise HTTPException(403, "this API key cannot publish for another tenant")
        kinds = kinds_for_mime(body.mime_type)
        if not kinds:
            raise _invalid("mime_type", f"unsupported mime type; supported: {', '.join(sorted(EXTENSIONS))}")
        if body.kind not in kinds:
            raise _invalid("kind", f"a {body.mime_type} object cannot be a {body.kind.value} event")
        key = object_key(tenant, body.sha256, body.mime_type)
        if body.object_key is not None and body.object_key != key:
            raise _invalid("object_key", f"must be {key} (as returned by POST /v1/uploads), or left out")
        event = MediaEvent.model_validate({**body.model_dump(exclude={"tenant_id", "object_key"}),
                                           "tenant_id": tenant, "object_key": key})
        claim = CLAIM_PREFIX + str(event.event_id)
        if (owner := svc.redis.get(claim)) is not None:
            return _already_published(svc, event.event_id, owner, tenant)
        if (rec := svc.ledger.get(event.event_id)) is not None and rec.tenant_id != tenant:
            raise HTTPException(409, "event_id already in use; publish with a new event id")
        if event.size > svc.settings.max_object_bytes:
            raise HTTPException(413, f"object too large: {event.size} bytes exceeds the limit of "
                                     f"{svc.settings.max_object_bytes}")
        stored = _stored_size(svc, key)
        if stored is None and svc.presigner is not None:  # a staged upload: its size and sha256 checked first
            try:
                stored = event.size if promote(svc.objects, key, event.size, event.sha256) else None
            except UploadRejected as exc:
                raise HTTPException(409, str(exc)) from exc
        if stored is None:
            raise HTTPException(404, "object not uploaded: PUT it to the URL from POST /v1/uploads first")
        if stored != event.size:
            raise HTTPException(409, f"stored object has {stored} bytes, the event says {event.size}")
        event = _redact(svc, event)  # no secret of its window title or metadata reaches the ledger or the broker
        if not svc.redis.set(claim, tenant, nx=True):  # another request published it a moment ago
            return _already_published(svc, event.event_id, svc.redis.get(claim), tenant)
        try:
            svc.ledger.record_queued(event)
            svc.celery.send_task(INGEST_TASK, args=[event.model_dump(mode="json")], task_id=str(event.event_id),
                                 retry_policy=REQUEST_PUBLISH_RETRY,  # lower while the tenant has much in flight
                                 priority=tenant_priority(svc.ledger, tenant, svc.settings))
        except Exception as exc:
            svc.redis.delete(claim)  # not enqueued: publishing it again must enqueue it
            raise _unavailable("queue", exc) from exc
        log.info("event published", tenant=tenant, event_id=str(event.event_id), kind=event.kind.value, size=event.size)
        return PublishResponse(event_id=event.event_id, status=EventStatus.queued)

    @app.get("/v1/events/{event_id}", tags=["publish"], response_model=EventStatusResponse,
             responses=_errors(*AUTH_ERRORS, 404, 422))
    def event_status(event_id: uuid.UUID, tenant: Tenant, svc: Svc) -> EventStatusResponse:
        """The event's ledger status (queued, processing, done, skipped, failed with stage and reason).
        404 for an unknown event and for another tenant's (the two are indistinguishable)."""
        rec = svc.ledger.get(event_id)
        if rec is None or rec.tenant_id != tenant:
            raise HTTPException(404, "event not found")
        return EventStatusResponse.model_validate(rec.model_dump())

    @app.post("/v1/search", tags=["search"], response_model=SearchResponse,
              responses=_errors(*AUTH_ERRORS, *WORKER_ERRORS, 403, 413, 422))
    def search(body: SearchQuery, tenant: Tenant, svc: Svc) -> SearchResponse:
        """Hybrid search over the key's tenant, run by a query worker. 403 for a body naming another
        tenant; 504 when no query worker answers in time; 502 when the search failed."""
        if body.tenant_id is not None and body.tenant_id != tenant:
            raise HTTPException(403, "this API key cannot search another tenant")
        req = SearchRequest.model_validate({**body.model_dump(exclude={"tenant_id"}), "tenant_id": tenant})
        return SearchResponse.model_validate(_on_query_worker(
            svc, SEARCH_TASK, [req.model_dump(mode="json")], svc.settings.api_search_timeout_seconds, "search",
            SEARCH_SECONDS.time()))

    @app.post("/v1/ask", tags=["search"], response_model=AskResponse,
              responses=_errors(*AUTH_ERRORS, *WORKER_ERRORS, 403, 413, 422))
    def ask(body: AskQuery, tenant: Tenant, svc: Svc) -> AskResponse:
        """Answer a question from the tenant's memories, run by a query worker: with an LLM configured on
        the workers, up to ``max_rounds`` rounds of search-then-decide (M3-Agent), returning the answer and
        the memories it cites; without one, the ranked evidence with ``answer`` null. 403 for a body naming
        another tenant; 502 when the LLM failed (the reason is given) or the ask failed; 504 when no query
        worker answers within ``ENGRAM_API_ASK_TIMEOUT_SECONDS``."""
        if body.tenant_id is not None and body.tenant_id != tenant:
            raise HTTPException(403, "this API key cannot ask about another tenant")
        req = AskRequest.model_validate({**body.model_dump(exclude={"tenant_id"}), "tenant_id": tenant})
        return AskResponse.model_validate(_on_query_worker(
            svc, ASK_TASK, [req.model_dump(mode="json")], svc.settings.api_ask_timeout_seconds, "ask"))

    # --- memory management (tenant-scoped; another tenant's ids answer 404 like unknown ones) ---------------

    @app.post("/v1/memories", tags=["memories"], status_code=202, response_model=AddMemoryResponse,
              responses=_errors(*AUTH_ERRORS, 409, 413, 422, e409="The id was added by another tenant."))
    def add_memory(body: AddMemoryQuery, tenant: Tenant, svc: Svc) -> AddMemoryResponse:
        """Remember one ``text`` or chat ``messages`` for ``user_id``: written as a conversation record to the object
        store and published as a ``text`` event like an uploaded chat file (``POST /v1/events``), so the same
        pipeline stores it. Poll ``GET /v1/events/{event_id}`` for its status. Idempotent on ``id``: adding again
        with the same id answers the first addition's event with ``duplicate`` set and stores nothing. 413 over
        the size limit; 422 for an invalid body."""
        from engram.api.add import ADD_MIME, add_event, add_event_id, conversation_record

        event_id = add_event_id(tenant, body.user_id, body.id)
        if body.id is not None and (owner := svc.redis.get(CLAIM_PREFIX + str(event_id))) is not None:
            dup = _already_published(svc, event_id, owner, tenant)
            return AddMemoryResponse(event_id=event_id, status=dup.status, duplicate=True)
        data, when = conversation_record(body)
        event = add_event(body, tenant, "api", data, when, event_id)
        if len(data) > svc.settings.max_object_bytes:
            raise HTTPException(413, f"too large: {len(data)} bytes exceeds the limit of "
                                     f"{svc.settings.max_object_bytes}")
        if _stored_size(svc, event.object_key) != len(data):
            svc.objects.put_bytes(event.object_key, data, ADD_MIME)
        published = publish_event(PublishRequest.model_validate(event.model_dump()), tenant, svc)
        return AddMemoryResponse(event_id=published.event_id, status=published.status,
                                 duplicate=published.duplicate, captured_at=when)

    @app.get("/v1/memories/{memory_id}", tags=["memories"], response_model=MemoryRecord,
             responses=_errors(*AUTH_ERRORS, *WORKER_ERRORS, 404, 422))
    def get_memory(memory_id: uuid.UUID, tenant: Tenant, svc: Svc) -> MemoryRecord:
        """One observation or memory of any type, as stored (vault entries without their secret). 404 for
        an unknown id and for another tenant's."""
        got = _on_query_worker(svc, MEMORY_TASK + "get", [tenant, str(memory_id)],
                               svc.settings.api_search_timeout_seconds, "get")
        if got is None:
            raise HTTPException(404, "memory not found")
        return MemoryRecord.model_validate(got)

    @app.get("/v1/memories", tags=["memories"], response_model=MemoryPage,
             responses=_errors(*AUTH_ERRORS, *WORKER_ERRORS, 422))
    def list_memories(tenant: Tenant, svc: Svc,
                      memory_type: Annotated[MemoryType, Query(alias="type", description="Which collection.")],
                      user: Annotated[str | None, Query(pattern=_ID_PATTERN, description="Only this user's.")] = None,
                      limit: Annotated[int, Query(ge=1, le=500)] = 50,
                      offset: Annotated[int, Query(ge=0, le=100_000)] = 0) -> MemoryPage:
        """A page of one memory type of the tenant, newest content first, with the total."""
        return MemoryPage.model_validate(_on_query_worker(
            svc, MEMORY_TASK + "list", [tenant, memory_type.value, user, limit, offset],
            svc.settings.api_search_timeout_seconds, "list"))

    @app.delete("/v1/memories/{memory_id}", tags=["memories"], status_code=204, response_class=Response,
                responses=_errors(*AUTH_ERRORS, *WORKER_ERRORS, 404, 422))
    def delete_memory(memory_id: uuid.UUID, tenant: Tenant, svc: Svc) -> Response:
        """Delete one observation or memory. 404 for an unknown id and for another tenant's."""
        if _on_query_worker(svc, MEMORY_TASK + "delete", [tenant, str(memory_id)],
                            svc.settings.api_search_timeout_seconds, "delete") is None:
            raise HTTPException(404, "memory not found")
        return Response(status_code=204)

    @app.delete("/v1/users/{user_id}", tags=["memories"], response_model=ForgetReport,
                responses=_errors(*AUTH_ERRORS, *WORKER_ERRORS, 422))
    def forget_user(user_id: UserId, tenant: Tenant, svc: Svc) -> ForgetReport:
        """Forget a user entirely: every collection (the knowledge vault included), the ledger's records of
        the user's events, and the objects no other user of the tenant references. Publishing the same
        files again afterwards ingests them anew."""
        report = ForgetReport.model_validate(_on_query_worker(
            svc, MEMORY_TASK + "forget", [tenant, user_id], svc.settings.api_ask_timeout_seconds, "forget"))
        if report.event_ids:  # the events' publish claims: a device publishing them again is heard again
            svc.redis.delete(*(CLAIM_PREFIX + str(e) for e in report.event_ids))
        log.info("user forgotten", tenant=tenant, user=user_id, events=len(report.event_ids))
        return report

    @app.get("/v1/users/{user_id}/export", tags=["memories"], response_model=UserExport,
             responses=_errors(*AUTH_ERRORS, *WORKER_ERRORS, 422))
    def export_user(user_id: UserId, tenant: Tenant, svc: Svc) -> UserExport:
        """Everything stored about a user as JSON: ledger events and every observation and memory with its
        provenance, newest first per type; vault entries without their secrets."""
        return UserExport.model_validate(_on_query_worker(
            svc, MEMORY_TASK + "export", [tenant, user_id], svc.settings.api_ask_timeout_seconds, "export"))

    # --- entities (M3-Agent's people; tenant-scoped like memories) ----------------------------------------------

    @app.get("/v1/entities", tags=["entities"], response_model=EntityList,
             responses=_errors(*AUTH_ERRORS, *WORKER_ERRORS))
    def list_entities(tenant: Tenant, svc: Svc) -> EntityList:
        """The tenant's person entities (faces, voices and names linked across recordings) with their names,
        counts and first/last seen, most observations first."""
        return EntityList.model_validate(_on_query_worker(
            svc, ENTITY_TASK + "list", [tenant], svc.settings.api_search_timeout_seconds, "entities"))

    @app.post("/v1/entities/{entity_id}/merge", tags=["entities"], response_model=EntitySummary,
              responses=_errors(*AUTH_ERRORS, *WORKER_ERRORS, 404, 413, 422))
    def merge_entities(entity_id: uuid.UUID, body: EntityMergeRequest, tenant: Tenant, svc: Svc) -> EntitySummary:
        """Merge ``body.entity_id`` into ``entity_id`` (two entities found for one person): the kept entity takes
        the other's samples, names, links and counts, the merge is recorded in its ``merged_from``, and stored
        observations and memories naming the other name it. 404 when either is unknown or another tenant's;
        422 for an entity merged with itself."""
        if body.entity_id == entity_id:
            raise _invalid("entity_id", "an entity cannot be merged with itself")
        kept = _on_query_worker(svc, ENTITY_TASK + "merge", [tenant, str(entity_id), str(body.entity_id), body.reason],
                                svc.settings.api_ask_timeout_seconds, "merge")
        if kept is None:
            raise HTTPException(404, "entity not found")
        log.info("entities merged", tenant=tenant, kept=str(entity_id), dropped=str(body.entity_id))
        return EntitySummary.model_validate(kept)

    @app.post("/v1/entities/{entity_id}/name", tags=["entities"], response_model=EntitySummary,
              responses=_errors(*AUTH_ERRORS, *WORKER_ERRORS, 404, 413, 422))
    def name_entity(entity_id: uuid.UUID, body: EntityNameRequest, tenant: Tenant, svc: Svc) -> EntitySummary:
        """Give a person entity (a face or voice found without a name, or another name for someone) the name
        ``body.name``, first among its names: a search naming it then filters to it and ``ask`` shows it in its
        evidence. 404 when the entity is unknown or another tenant's."""
        named = _on_query_worker(svc, ENTITY_TASK + "name", [tenant, str(entity_id), body.name],
                                 svc.settings.api_search_timeout_seconds, "name")
        if named is None:
            raise HTTPException(404, "entity not found")
        return EntitySummary.model_validate(named)

    return app


def _stored_size(svc: Services, key: str) -> int | None:
    """The stored object's size in bytes, or None when it is absent."""
    from engram.workers.stores.objects import ObjectNotFound

    try:
        return svc.objects.size(key)
    except ObjectNotFound:
        return None


def _already_published(svc: Services, event_id: uuid.UUID, owner: str | None, tenant: str) -> PublishResponse:
    if owner != tenant:
        raise HTTPException(409, "event_id already in use; publish with a new event id")
    rec = svc.ledger.get(event_id)
    return PublishResponse(event_id=event_id, status=rec.status if rec else EventStatus.queued, duplicate=True)


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
    if any(q.get("name") == "query" for qs in queues.values() for q in qs or ()):
        return "ok"
    return "no worker consumes the query queue"


app = create_app()
