"""What the web app's screens read besides memories and people, for a client of the HTTP API
(``api.service.remote.RemoteService``): the tenant's events with their status counts (``GET /v1/events``, the
Activity screen), its users (``GET /v1/users``) and a time span's observations (``GET /v1/timeline``). Events and
users are read from the API's ledger; the timeline by a query worker (``Task.timeline``). Tenant-scoped: the key's
tenant only."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from engram.api.routes.deps import Svc, Tenant
from engram.api.routes.errors import AUTH_ERRORS, WORKER_ERRORS, responses
from engram.api.routes.queue import answered
from engram.schemas.api import EventList
from engram.schemas.events import _ID_PATTERN, EventStatus, MediaKind
from engram.schemas.memory_admin import MemoryPage
from engram.schemas.timeline import TimelineRequest

router = APIRouter(tags=["activity"])

#: The tenant's most recent events the list of its users is read from, at most.
USERS_SCAN = 20_000

UserQuery = Annotated[str | None, Query(alias="user", pattern=_ID_PATTERN, description="Only this user's.")]


@router.get("/v1/events", response_model=EventList, responses=responses(*AUTH_ERRORS, 422))
def list_events(tenant: Tenant, svc: Svc, user: UserQuery = None,
                status: Annotated[EventStatus | None, Query(description="Only events in this status.")] = None,
                limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> EventList:
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


@router.get("/v1/users", response_model=list[str], responses=responses(*AUTH_ERRORS))
def list_users(tenant: Tenant, svc: Svc) -> list[str]:
    """The tenant's users (those with events among its most recent ``USERS_SCAN``), sorted."""
    return sorted({r.user_id for r in svc.ledger.records(tenant, None, USERS_SCAN)})


@router.get("/v1/timeline", response_model=MemoryPage, responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 422))
def timeline(tenant: Tenant, svc: Svc, user: UserQuery = None,
             time_from: Annotated[datetime | None, Query(description="From (inclusive), ISO 8601 with a zone.")] = None,
             time_to: Annotated[datetime | None, Query(description="Before (exclusive), ISO 8601 with a zone.")] = None,
             kind: Annotated[list[MediaKind] | None, Query(description="Only these media kinds (repeated).")] = None,
             app: Annotated[list[str] | None, Query(description="Only these applications (repeated).")] = None,
             device: Annotated[list[str] | None, Query(description="Only these devices (repeated).")] = None,
             limit: Annotated[int, Query(ge=1, le=10_000)] = 2000,
             offset: Annotated[int, Query(ge=0, le=100_000)] = 0) -> MemoryPage:
    """The tenant's observations whose content started in ``[time_from, time_to)``, newest first, filtered by
    user, media kind, application and device (``schemas.timeline.TimelineRequest``; each record's payload holds
    the fields a timeline shows). 422 for a time without a zone or an empty span."""
    try:
        req = TimelineRequest(tenant_id=tenant, user_id=user, time_from=time_from, time_to=time_to, kinds=kind,
                              apps=app, devices=device, limit=limit, offset=offset)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False, include_context=False)) from exc
    with answered("timeline"):
        return svc.service.timeline(req)
