"""What the web app's screens read besides memories and people, for a client of the HTTP API
(``api.service.remote.RemoteService``): the tenant's events with their status counts (``GET /v1/events``, the
Activity screen), its users (``GET /v1/users``), a time span's observations (``GET /v1/timeline``), an observation's
original (``GET /v1/media/{id}``, HTTP ranges passed through to S3) and its thumbnail (``GET /v1/thumbnails/{id}``,
with ``ETag``). Events and users are read from the API's ledger, the timeline and the observations by a query worker,
the objects from the API's object store. The People screen's entity samples (``GET /v1/entities/{id}/samples``), a
sample's face crop or voice clip (``GET /v1/entities/{id}/samples/media``, made and stored once by a query worker)
and "not this person" (``POST /v1/entities/{id}/split``) go through the query workers too. The Activity screen's
storage table (``GET /v1/storage``: the bytes kept per kind, measured beside the API from the object store's listing)
and a failed event's retry (``POST /v1/events/{id}/retry``: queued again in the ledger and published to ``ingest``)
go through the routes' ``QueueService``. Tenant-scoped: another tenant's ids answer 404 like unknown ones; an object
that is gone answers 410 with the reason. An observation's page lists the memories it fed (``GET
/v1/memories/{id}/derived``)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError

from engram.api.http.routes.deps import Services, Svc, Tenant
from engram.api.http.routes.errors import AUTH_ERRORS, WORKER_ERRORS, responses
from engram.api.http.routes.queue import answered
from engram.api.service.base import MediaMissing, NotFound
from engram.api.service.media import original_object, thumbnail_object
from engram.api.ui.pages import media_response
from engram.api.ui.signin import stream_object, thumbnail_response
from engram.schemas.api import ApiError, EventList, EventStatusResponse
from engram.schemas.entities import EntitySampleList, EntitySplitRequest, EntitySummary, SampleInfo
from engram.schemas.events import _ID_PATTERN, EventStatus, MediaKind
from engram.schemas.memories import MemoryType
from engram.schemas.memory_admin import MemoryPage, MemoryRecord
from engram.schemas.storage import StorageUse
from engram.schemas.timeline import TimelineRequest

router = APIRouter(tags=["activity"])

#: The tenant's most recent events the list of its users is read from, at most.
USERS_SCAN = 20_000

UserQuery = Annotated[str | None, Query(alias="user", pattern=_ID_PATTERN, description="Only this user's.")]


@router.get("/v1/events", response_model=EventList, responses=responses(*AUTH_ERRORS, 422))
def list_events(
    tenant: Tenant,
    svc: Svc,
    user: UserQuery = None,
    status: Annotated[EventStatus | None, Query(description="Only events in this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> EventList:
    """The tenant's events (``user``'s when given), most recently changed first, optionally of one ``status``
    (``failed``: the failures with their stage and reason), and how many of the tenant's events are in each
    status."""
    ledger = svc.ledger
    if user is None:
        items = ledger.records(tenant, status, limit)
    else:
        mine = [r for r in ledger.user_events(tenant, user) if status is None or r.status is status]
        items = sorted(mine, key=lambda r: r.updated_at, reverse=True)[:limit]
    return EventList(items=items, counts=ledger.counts(tenant))


@router.post(
    "/v1/events/{event_id}/retry", response_model=EventStatusResponse, responses=responses(*AUTH_ERRORS, 404, 422)
)
def retry_event(event_id: uuid.UUID, tenant: Tenant, svc: Svc) -> EventStatusResponse:
    """Run a failed event again: it is queued again in the ledger (its reason cleared; the segments already stored
    are kept) and published to the ``ingest`` queue; answers its status (as ``GET /v1/events/{id}``), ``queued``.
    A publish the broker refuses leaves it queued for beat's sweep of stalled events. 404 for an unknown event,
    another tenant's, or one that is not failed (a second retry of the same failure)."""
    rec = svc.service.retry_event(tenant, event_id)
    if rec is None:
        raise HTTPException(404, "no failed event with this id")
    return EventStatusResponse.model_validate(rec.model_dump())


@router.get("/v1/storage", response_model=StorageUse, responses=responses(*AUTH_ERRORS))
def storage(tenant: Tenant, svc: Svc) -> StorageUse:
    """The bytes kept per kind (``schemas.storage.StorageUse``): the tenant's originals per media kind, thumbnails,
    OCR cache and vault from the object store's listing, the API's data dir's files (null store and ledger where
    they are a Qdrant server and Redis), the storage cap and the retention rules. Measured at most once a minute
    per tenant (``measured_at`` says when)."""
    return svc.service.storage(tenant)


@router.get("/v1/users", response_model=list[str], responses=responses(*AUTH_ERRORS))
def list_users(tenant: Tenant, svc: Svc) -> list[str]:
    """The tenant's users (those with events among its most recent ``USERS_SCAN``), sorted."""
    return sorted({r.user_id for r in svc.ledger.records(tenant, None, USERS_SCAN)})


@router.get("/v1/timeline", response_model=MemoryPage, responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 422))
def timeline(
    tenant: Tenant,
    svc: Svc,
    user: UserQuery = None,
    time_from: Annotated[datetime | None, Query(description="From (inclusive), ISO 8601 with a zone.")] = None,
    time_to: Annotated[datetime | None, Query(description="Before (exclusive), ISO 8601 with a zone.")] = None,
    kind: Annotated[list[MediaKind] | None, Query(description="Only these media kinds (repeated).")] = None,
    app: Annotated[list[str] | None, Query(description="Only these applications (repeated).")] = None,
    device: Annotated[list[str] | None, Query(description="Only these devices (repeated).")] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 2000,
    offset: Annotated[int, Query(ge=0, le=100_000)] = 0,
) -> MemoryPage:
    """The tenant's observations whose content started in ``[time_from, time_to)``, newest first, filtered by
    user, media kind, application and device (``schemas.timeline.TimelineRequest``; each record's payload holds
    the fields a timeline shows). 422 for a time without a zone or an empty span."""
    try:
        req = TimelineRequest(
            tenant_id=tenant,
            user_id=user,
            time_from=time_from,
            time_to=time_to,
            kinds=kind,
            apps=app,
            devices=device,
            limit=limit,
            offset=offset,
        )
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False, include_context=False)) from exc
    with answered("timeline"):
        return svc.service.timeline(req)


MEDIA_ERRORS = {
    **responses(*AUTH_ERRORS, *WORKER_ERRORS, 404, 422),
    410: {
        "model": ApiError,
        "description": "Its object is gone (deleted, or removed by retention), or it has no "
        "picture (a thumbnail of a recording or a chat): `detail` says which.",
    },
    416: {"description": "The range asked lies past the object's end (no body; `Content-Range: bytes */size`)."},
}


def _observation(svc: Services, tenant: str, observation_id: uuid.UUID, user: str | None) -> MemoryRecord:
    """The tenant's observation (``user``'s when given), read by a query worker; 404 otherwise."""
    with answered("media"):
        rec = svc.service.get_memory(tenant, observation_id)
    if rec is None or rec.memory_type is not MemoryType.observation or (user and rec.user_id != user):
        raise HTTPException(404, "no such observation")
    return rec


@router.get("/v1/media/{observation_id}", response_class=Response, responses=MEDIA_ERRORS)
def media(observation_id: uuid.UUID, request: Request, tenant: Tenant, svc: Svc, user: UserQuery = None) -> Response:
    """The original an observation was read from (a picture, recording, clip or chat file), streamed with HTTP
    range requests (206 with ``Content-Range``, 416 past the end). Anything but a picture, recording or video is
    sent as an attachment. 404 for an unknown observation or another tenant's; 410 when its object is gone."""
    rec = _observation(svc, tenant, observation_id, user)
    try:
        obj = original_object(svc.objects, rec, whole=False)
    except MediaMissing as exc:
        raise HTTPException(410, str(exc)) from exc
    kind = obj.mime_type.split("/")[0]
    if obj.path is not None or kind not in ("image", "audio", "video") or obj.mime_type == "image/svg+xml":
        whole = obj if obj.path is not None else original_object(svc.objects, rec)
        return media_response(whole)
    return stream_object(svc.objects, obj, request.headers.get("range"))


@router.get(
    "/v1/thumbnails/{observation_id}",
    response_class=Response,
    responses={k: v for k, v in MEDIA_ERRORS.items() if k != 416},
)
def thumbnail(
    observation_id: uuid.UUID, request: Request, tenant: Tenant, svc: Svc, user: UserQuery = None
) -> Response:
    """A small WebP of an observation's picture (made at ingest), with ``ETag`` and ``Cache-Control: private``;
    304 to a matching ``If-None-Match``. 404 for an unknown observation or another tenant's; 410 when it has no
    picture (a recording, a chat) or its original is gone."""
    rec = _observation(svc, tenant, observation_id, user)
    try:
        return thumbnail_response(request, thumbnail_object(svc.objects, rec, svc.settings.max_image_pixels))
    except MediaMissing as exc:
        raise HTTPException(410, str(exc)) from exc


@router.get(
    "/v1/memories/{observation_id}/derived",
    response_model=list[MemoryRecord],
    tags=["memories"],
    responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 422),
)
def derived_memories(observation_id: uuid.UUID, tenant: Tenant, svc: Svc) -> list[MemoryRecord]:
    """The memories drawn from an observation (its id in their ``provenance.observation_ids``): current versions
    only, newest content first, at most 50; read by a query worker. Empty for an unknown id or another tenant's."""
    with answered("derived memories"):
        return svc.service.memories_from(tenant, observation_id)


# --- the People screen: an entity's samples, their media, "not this person" -------------------------------------


@router.get(
    "/v1/entities/{entity_id}/samples",
    response_model=EntitySampleList,
    tags=["entities"],
    responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 404, 422),
)
def entity_samples(entity_id: uuid.UUID, tenant: Tenant, svc: Svc) -> EntitySampleList:
    """The entity's face and voice samples (faces first, newest first), each with the observation it came from.
    404 for an unknown entity or another tenant's."""
    with answered("samples"):
        got = svc.service.entity_samples(tenant, entity_id)
    if got is None:
        raise HTTPException(404, "entity not found")
    return EntitySampleList(items=[SampleInfo(**dataclasses.asdict(s)) for s in got])


@router.get(
    "/v1/entities/{entity_id}/samples/media",
    response_class=Response,
    tags=["entities"],
    responses={k: v for k, v in MEDIA_ERRORS.items() if k != 416},
)
def sample_media(
    entity_id: uuid.UUID,
    tenant: Tenant,
    svc: Svc,
    key: Annotated[str, Query(min_length=1, max_length=300, description="The sample's key.")],
) -> Response:
    """A sample's face crop (WebP) or voice clip (WAV, at most a few seconds), made and stored once by a query
    worker. 404 for an unknown entity or sample (or another tenant's); 410 with the reason when it cannot be made
    (the original gone, no face box, an unreadable recording)."""
    with answered("sample"):
        try:
            obj = svc.service.sample_media(tenant, entity_id, key)
        except MediaMissing as exc:
            raise HTTPException(410, str(exc)) from exc
        except NotFound as exc:
            raise HTTPException(404, "no such sample") from exc
    return media_response(obj)


@router.post(
    "/v1/entities/{entity_id}/split",
    response_model=EntitySummary,
    tags=["entities"],
    responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 404, 413, 422),
)
def split_entity(entity_id: uuid.UUID, body: EntitySplitRequest, tenant: Tenant, svc: Svc) -> EntitySummary:
    """ "Not this person": move the face or voice sample ``body.sample_key`` off the entity into a new entity
    (unnamed), with the observations it came from relinked; returns the new entity. 404 for an unknown entity or
    sample (or another tenant's)."""
    with answered("split"):
        new = svc.service.split_entity(tenant, entity_id, body.sample_key)
    if new is None:
        raise HTTPException(404, "entity or sample not found")
    return new
