"""What the routes depend on (FastAPI ``Depends``): the services shared by the request threads, and the tenant of
the request's API key.

Ownership: ``build_services`` opens the ``Services`` (Redis client, ledger, object store, Celery producer, metrics
registry) once per app, from the lifespan in ``api.app``, into ``app.state.services``; the rate limiter sits beside
them in ``app.state.rate_limiter``. The routes reach both through the request (``Svc``, ``Tenant``), never through
a module global, so two apps in one process (the tests) keep their own. FastAPI runs the sync endpoints in its
thread pool; each client here is thread-safe, and Celery keeps one result backend per thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlsplit

import certifi
import urllib3
from celery import Celery
from fastapi import Depends, HTTPException, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from minio import Minio

from engram.api.http import keys
from engram.api.service.queue import QueueService
from engram.schemas.events import _ID_PATTERN
from engram.schemas.settings import Settings
from engram.workers.app import configure
from engram.workers.metrics import registry as metrics_registry
from engram.workers.stores.ledger import open_ledger
from engram.workers.stores.objects import S3ObjectStore, open_object_store
from engram.workers.tasks import Queue


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
    service: Any = None  # api.service.queue.QueueService over ``celery``, ``ledger`` and ``objects``


def _minio(endpoint: str, settings: Settings, secure: bool) -> Minio:
    """A Minio client with short timeouts (the SDK's default connect timeout is 5 minutes) and the region
    set, so presigning never needs a network round trip."""
    http = urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=3, read=30),
        maxsize=16,
        cert_reqs="CERT_REQUIRED",
        ca_certs=os.environ.get("SSL_CERT_FILE") or certifi.where(),
        retries=urllib3.Retry(total=2, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]),
    )
    return Minio(
        endpoint,
        access_key=settings.s3_access_key,
        secret_key=settings.s3_secret_key,
        secure=secure,
        region=settings.s3_region or "us-east-1",
        http_client=http,
    )


def build_services(settings: Settings, celery: Celery | None = None) -> Services:
    """Open the API's clients for ``settings``. ``celery``: a configured producer app (default: a new
    Celery app configured from ``settings``, so the API never depends on the process-wide one).
    Raises RuntimeError without a Redis URL (API keys, claims and the ledger live in Redis)."""
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
    registry = metrics_registry(settings.redis_url or settings.broker_url, [q.value for q in Queue])
    ledger = open_ledger(settings)
    return Services(
        settings,
        r,
        ledger,
        objects,
        presigner,
        celery,
        registry,
        QueueService(celery, settings.service_timeout_seconds, ledger, objects, settings),
    )


#: The bearer credentials of a request, None without an ``Authorization`` header (each route says what that means).
bearer = HTTPBearer(auto_error=False, description="An API key from `engram keys create --tenant T`.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def services(request: Request) -> Services:
    """The app's ``Services`` (opened by its lifespan)."""
    return request.app.state.services


def tenant_of(request: Request, creds: Credentials) -> str:
    """The tenant of the request's API key: 401 without a key or with an unknown one, 429 past the key's rate
    limit (``api.ratelimit``), 503 when Redis (which holds the keys) is down (``RedisError``, see
    ``api.routes.errors``)."""
    if creds is None:
        raise HTTPException(
            401, "missing API key (send Authorization: Bearer <key>)", headers={"WWW-Authenticate": "Bearer"}
        )
    tenant = keys.tenant_for(services(request).redis, creds.credentials)
    if tenant is None:
        raise HTTPException(401, "invalid API key", headers={"WWW-Authenticate": "Bearer"})
    request.app.state.rate_limiter.check(creds.credentials)  # 429 past ENGRAM_API_RATE_LIMIT (api.ratelimit)
    return tenant


Svc = Annotated[Services, Depends(services)]
Tenant = Annotated[str, Depends(tenant_of)]
UserId = Annotated[str, Path(pattern=_ID_PATTERN, description="A user of the key's tenant.")]
