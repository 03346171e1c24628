"""Publishing routes: ``POST /v1/uploads`` (a presigned PUT URL), ``POST /v1/events`` (publish a ``MediaEvent``)
and ``GET /v1/events/{event_id}`` (its ledger status).

Data flow (DESIGN.md): a device asks for a presigned PUT URL of the content-addressed key
``media/<tenant>/<sha256>.<ext>``, PUTs the bytes straight to the object store (a staging key, verified and moved
on publish: ``api.uploads``), then publishes the event, which is recorded as queued in the ledger and sent to the
``ingest`` queue. A publish claim in Redis (``CLAIM_PREFIX`` + event id, holding the tenant) makes publishing
idempotent by event id.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import structlog
from fastapi import APIRouter, HTTPException

from engram.api.http.routes.deps import Services, Svc, Tenant
from engram.api.http.routes.errors import AUTH_ERRORS, ERROR_MEANINGS, invalid, responses, unavailable
from engram.api.http.routes.queue import REQUEST_PUBLISH_RETRY
from engram.api.http.uploads import UploadRejected, promote, staging_key
from engram.schemas.api import EventStatusResponse, PublishRequest, PublishResponse, UploadRequest, UploadResponse
from engram.schemas.events import EventStatus, MediaEvent, MediaKind
from engram.schemas.ids import EXTENSIONS, object_key
from engram.workers.fairness import tenant_priority
from engram.workers.stores.objects import ObjectNotFound
from engram.workers.tasks import Task

log = structlog.get_logger(__name__)

router = APIRouter(tags=["publish"])

#: Redis key prefix of an event's publish claim (its value: the publishing tenant).
CLAIM_PREFIX = "engram:published:"

#: Which event kinds each supported mime type may carry (audio may come in a video container).
_TEXT_MIMES = {"application/json", "application/x-ndjson", "text/plain", "application/zip"}  # zip: a ChatGPT export


def kinds_for_mime(mime_type: str) -> set[MediaKind]:
    """The event kinds ``mime_type`` may carry; empty when it is not a supported type
    (``schemas.ids.EXTENSIONS`` lists the supported ones)."""
    if mime_type not in EXTENSIONS:
        return set()
    if mime_type in _TEXT_MIMES:
        return {MediaKind.text}
    family = mime_type.split("/", 1)[0]
    return {
        "image": {MediaKind.screenshot},
        "audio": {MediaKind.audio},
        "video": {MediaKind.clip, MediaKind.audio},
    }.get(family, set())


def stored_size(svc: Services, key: str) -> int | None:
    """The stored object's size in bytes, or None when it is absent."""
    try:
        return svc.objects.size(key)
    except ObjectNotFound:
        return None


def already_published(svc: Services, event_id: uuid.UUID, owner: str | None, tenant: str) -> PublishResponse:
    """The answer to publishing ``event_id`` again, whose claim holds ``owner``: its current status with
    ``duplicate`` set. Raises HTTPException 409 when another tenant claimed it."""
    if owner != tenant:
        raise HTTPException(409, "event_id already in use; publish with a new event id")
    rec = svc.ledger.get(event_id)
    return PublishResponse(event_id=event_id, status=rec.status if rec else EventStatus.queued, duplicate=True)


def _redact(svc: Services, event: MediaEvent) -> MediaEvent:
    """``event`` with the secrets of its app name, window title and metadata values in the vault
    (``workers.memory.vault.redact_event``); 503 when one is found and the API has no ``ENGRAM_VAULT_KEY``."""
    from engram.workers.memory.vault import VaultKeyMissing, redact_event  # secret detectors: loaded on first publish

    try:
        return redact_event(svc, event)
    except VaultKeyMissing as exc:
        raise HTTPException(503, str(exc)) from exc


def _check_size(size: int, svc: Services) -> None:
    if size > svc.settings.max_object_bytes:
        raise HTTPException(413, f"object too large: {size} bytes exceeds the limit of {svc.settings.max_object_bytes}")


@router.post(
    "/v1/uploads",
    response_model=UploadResponse,
    responses=responses(*AUTH_ERRORS, 413, 422, 501, e501="No S3 object store (ENGRAM_S3_ENDPOINT)."),
)
def create_upload(body: UploadRequest, tenant: Tenant, svc: Svc) -> UploadResponse:
    """A presigned PUT URL for the content-addressed key of (sha256, mime type), or ``exists`` when the
    object is already stored with this size (the client then skips the PUT). The URL writes a staging key
    of its own, never the content-addressed one: publishing checks the bytes' size and sha256 and moves them
    there (``api.uploads``). 413 over the size limit, 422 for an unsupported mime type."""
    if not kinds_for_mime(body.mime_type):
        raise invalid("mime_type", f"unsupported mime type; supported: {', '.join(sorted(EXTENSIONS))}")
    _check_size(body.size, svc)
    key = object_key(tenant, body.sha256, body.mime_type)
    stored = stored_size(svc, key)
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
    url = svc.presigner.presigned_put_object(svc.objects.bucket, staging_key(key), expires=timedelta(seconds=expiry))
    return UploadResponse(object_key=key, url=url, exists=False, expires_in=expiry)


def _event_of(body: PublishRequest, tenant: str) -> MediaEvent:
    """The ``MediaEvent`` ``body`` publishes for ``tenant``, its object key the content-addressed one. Raises
    HTTPException 403 for a body naming another tenant, 422 for a mime type or kind it cannot be."""
    if body.tenant_id is not None and body.tenant_id != tenant:
        raise HTTPException(403, "this API key cannot publish for another tenant")
    kinds = kinds_for_mime(body.mime_type)
    if not kinds:
        raise invalid("mime_type", f"unsupported mime type; supported: {', '.join(sorted(EXTENSIONS))}")
    if body.kind not in kinds:
        raise invalid("kind", f"a {body.mime_type} object cannot be a {body.kind.value} event")
    key = object_key(tenant, body.sha256, body.mime_type)
    if body.object_key is not None and body.object_key != key:
        raise invalid("object_key", f"must be {key} (as returned by POST /v1/uploads), or left out")
    return MediaEvent.model_validate(
        {**body.model_dump(exclude={"tenant_id", "object_key"}), "tenant_id": tenant, "object_key": key}
    )


def _check_stored(svc: Services, event: MediaEvent) -> None:
    """Raise HTTPException 404 when ``event``'s object is not stored (a staged upload is verified and moved first),
    409 when it is not the declared size and sha256."""
    stored = stored_size(svc, event.object_key)
    if stored is None and svc.presigner is not None:  # a staged upload: its size and sha256 checked first
        try:
            stored = event.size if promote(svc.objects, event.object_key, event.size, event.sha256) else None
        except UploadRejected as exc:
            raise HTTPException(409, str(exc)) from exc
    if stored is None:
        raise HTTPException(404, "object not uploaded: PUT it to the URL from POST /v1/uploads first")
    if stored != event.size:
        raise HTTPException(409, f"stored object has {stored} bytes, the event says {event.size}")


@router.post(
    "/v1/events",
    status_code=202,
    response_model=PublishResponse,
    responses=responses(
        *AUTH_ERRORS,
        403,
        404,
        409,
        413,
        422,
        e404="The object was not uploaded.",
        e409="The stored object's size or sha256 differs, or the event id is another tenant's.",
        e503=ERROR_MEANINGS[503] + " Or a secret was found in the event's "
        "names or metadata and the API has no ENGRAM_VAULT_KEY.",
    ),
)
def publish_event(body: PublishRequest, tenant: Tenant, svc: Svc) -> PublishResponse:
    """Publish a MediaEvent whose object was uploaded: record it as queued and send it to ingest.

    Idempotent by ``event_id``: publishing it again returns its current status with ``duplicate`` set
    and enqueues nothing. 403 for a body naming another tenant; 404 when the object is not stored,
    409 when its size differs, when the uploaded bytes are not the declared size and sha256 (the upload is
    deleted) or the event id belongs to someone else; 413 over the size limit;
    422 for an invalid body.
    """
    event = _event_of(body, tenant)
    claim = CLAIM_PREFIX + str(event.event_id)
    if (owner := svc.redis.get(claim)) is not None:
        return already_published(svc, event.event_id, owner, tenant)
    if (rec := svc.ledger.get(event.event_id)) is not None and rec.tenant_id != tenant:
        raise HTTPException(409, "event_id already in use; publish with a new event id")
    _check_size(event.size, svc)
    _check_stored(svc, event)
    event = _redact(svc, event)  # no secret of its window title or metadata reaches the ledger or the broker
    if not svc.redis.set(claim, tenant, nx=True):  # another request published it a moment ago
        return already_published(svc, event.event_id, svc.redis.get(claim), tenant)
    try:
        svc.ledger.record_queued(event)
        svc.celery.send_task(
            Task.ingest.value,
            args=[event.model_dump(mode="json")],
            task_id=str(event.event_id),
            retry_policy=REQUEST_PUBLISH_RETRY,  # lower while the tenant has much in flight
            priority=tenant_priority(svc.ledger, tenant, svc.settings),
            ignore_result=True,
        )  # the ledger has its outcome: no result channel to subscribe to
    except Exception as exc:
        svc.redis.delete(claim)  # not enqueued: publishing it again must enqueue it
        raise unavailable("queue", exc) from exc
    log.info("event published", tenant=tenant, event_id=str(event.event_id), kind=event.kind.value, size=event.size)
    return PublishResponse(event_id=event.event_id, status=EventStatus.queued)


@router.get("/v1/events/{event_id}", response_model=EventStatusResponse, responses=responses(*AUTH_ERRORS, 404, 422))
def event_status(event_id: uuid.UUID, tenant: Tenant, svc: Svc) -> EventStatusResponse:
    """The event's ledger status (queued, processing, done, skipped, failed with stage and reason).
    404 for an unknown event and for another tenant's (the two are indistinguishable)."""
    rec = svc.ledger.get(event_id)
    if rec is None or rec.tenant_id != tenant:
        raise HTTPException(404, "event not found")
    return EventStatusResponse.model_validate(rec.model_dump())
