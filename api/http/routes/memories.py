"""Memory routes: add (``POST /v1/memories``), get, list and delete one memory, and forget or export a user
(``/v1/users/{user_id}``). Tenant-scoped: another tenant's ids answer 404 like unknown ones. Adding writes a
conversation record and publishes it like an uploaded chat file (``api.routes.publish``); adding a client id again
whose event never finished takes it up (``added_before``); the rest is run by a query worker (``workers.admin``)
through the ``query`` queue.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated

import structlog
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import Response

from engram.api.add import ADD_MIME, add_event, add_event_id, conversation_record
from engram.api.http.routes.deps import Services, Svc, Tenant, UserId
from engram.api.http.routes.errors import AUTH_ERRORS, WORKER_ERRORS, responses, unavailable
from engram.api.http.routes.publish import CLAIM_PREFIX, already_published, publish_event, stored_size
from engram.api.http.routes.queue import REQUEST_PUBLISH_RETRY, answered
from engram.api.service.base import NotOffered
from engram.schemas.add import AddMemoryQuery, AddMemoryResponse
from engram.schemas.api import PublishRequest
from engram.schemas.events import _ID_PATTERN, LedgerRecord
from engram.schemas.memories import MemoryType
from engram.schemas.memory_admin import (
    ForgetReport,
    ForgetScope,
    ForgetScopeReport,
    MemoryPage,
    MemoryRecord,
    MemoryUpdate,
    UserExport,
)
from engram.workers.fairness import tenant_priority
from engram.workers.stores.ledger import FINAL_STATUSES
from engram.workers.tasks import Task

log = structlog.get_logger(__name__)

router = APIRouter(tags=["memories"])

#: Seconds without progress after which a retried addition whose event is unfinished takes it up (before, a first
#: attempt that is running, its ledger record moving on, is waited for, up to ``RESUME_WAIT_S``).
RESUME_GRACE_S = 2.0
#: Seconds a retry that took an addition up waits for it to be stored before answering its status as it is: under
#: the SDK's request timeout (30 s), so its client is not cut off and retrying meanwhile.
RESUME_WAIT_S = 20.0
#: Redis key prefix marking an addition published again by a retry (``SET NX`` for ``RESUME_WAIT_S``): retries at
#: once publish it once, a retry after that publishes it again if it is still unfinished.
RESUME_PREFIX = "engram:add-resumed:"


def _final(svc: Services, event_id: uuid.UUID, wait_s: float, idle_s: float | None = None) -> LedgerRecord | None:
    """The event's record once it is final, polling the ledger for up to ``wait_s`` seconds, or until it made no
    progress (its record's ``updated_at`` unchanged) for ``idle_s`` seconds; else its record as it is then (None:
    unknown)."""
    start = time.monotonic()
    last: datetime | None = None
    moved = start
    while True:
        rec = svc.ledger.get(event_id)
        now = time.monotonic()
        if rec is not None and rec.updated_at != last:
            last, moved = rec.updated_at, now
        if (
            (rec is not None and rec.status in FINAL_STATUSES)
            or now - start >= wait_s
            or (idle_s is not None and now - moved >= idle_s)
        ):
            return rec
        time.sleep(0.1)


def added_before(svc: Services, event_id: uuid.UUID, owner: str, tenant: str) -> AddMemoryResponse | None:
    """The answer to adding a client id again whose publish claim holds ``owner``, given once it is stored:

    - its event is final (done, skipped, failed), or becomes so while its record moves on (progress at least
      every ``RESUME_GRACE_S``, for ``RESUME_WAIT_S`` at most): that status, ``duplicate`` set; nothing is stored
      again;
    - it is queued or processing after ``RESUME_GRACE_S`` without progress: its task was lost (acknowledged and
      dropped while the broker restarted) or is held by a worker that died (the broker gives it back only after its
      visibility timeout, beat's sweep after twice that): it is published again from the ledger
      (``RedisLedger.take_up``; the pipeline is idempotent and skips the segments already stored), ``resumed`` set,
      and waited for up to ``RESUME_WAIT_S``; still unfinished then (or still moving on after the first wait), its
      current status is answered (poll ``GET /v1/events/{id}``);
    - the claim names no event in the ledger (the request that claimed it died before recording it): None, and the
      claim is dropped, for the caller to publish it anew.

    Raises HTTPException 409 when another tenant claimed the id, 503 when the queue refuses the task."""
    already_published(svc, event_id, owner, tenant)  # 409 for another tenant's
    rec = _final(svc, event_id, RESUME_WAIT_S, idle_s=RESUME_GRACE_S)
    if rec is None:
        svc.redis.delete(CLAIM_PREFIX + str(event_id))
        return None
    resumed = False
    idle = datetime.now(UTC) - rec.updated_at >= timedelta(seconds=RESUME_GRACE_S)  # not still moving on
    if (
        rec.status not in FINAL_STATUSES
        and idle
        and svc.redis.set(RESUME_PREFIX + str(event_id), tenant, nx=True, ex=int(RESUME_WAIT_S))
    ):
        event = svc.ledger.take_up(event_id)
        if event is not None:
            try:
                svc.celery.send_task(
                    Task.ingest.value,
                    args=[event.model_dump(mode="json")],
                    task_id=str(event_id),
                    retry_policy=REQUEST_PUBLISH_RETRY,
                    priority=tenant_priority(svc.ledger, tenant, svc.settings),
                    ignore_result=True,
                )
            except Exception as exc:
                svc.redis.delete(RESUME_PREFIX + str(event_id))  # not enqueued: the next retry publishes it
                raise unavailable("queue", exc) from exc
            resumed = True
            log.warning(
                "unfinished addition published again", tenant=tenant, event_id=str(event_id), status=rec.status.value
            )
    if idle and rec.status not in FINAL_STATUSES:  # taken up by this retry, or by another one at once
        rec = _final(svc, event_id, RESUME_WAIT_S) or rec
    return AddMemoryResponse(
        event_id=event_id,
        status=rec.status,
        duplicate=True,
        resumed=resumed,
        observations=rec.observations,
        reason=rec.reason,
    )


@router.post(
    "/v1/memories",
    status_code=202,
    response_model=AddMemoryResponse,
    responses=responses(*AUTH_ERRORS, 409, 413, 422, e409="The id was added by another tenant."),
)
def add_memory(body: AddMemoryQuery, tenant: Tenant, svc: Svc) -> AddMemoryResponse:
    """Remember one ``text`` or chat ``messages`` for ``user_id``: written as a conversation record to the object
    store and published as a ``text`` event like an uploaded chat file (``POST /v1/events``), so the same
    pipeline stores it. Poll ``GET /v1/events/{event_id}`` for its status. Idempotent on ``id``: adding again
    with the same id answers the first addition's event with ``duplicate`` set and stores nothing; when that event
    never finished (its task lost, its worker killed), the retry publishes it again and answers once it is stored,
    with ``resumed`` set (waiting 20 s at most: then its status as it is). 413 over the size limit; 422 for an
    invalid body."""
    event_id = add_event_id(tenant, body.user_id, body.id)
    if body.id is not None and (owner := svc.redis.get(CLAIM_PREFIX + str(event_id))) is not None:
        if (answer := added_before(svc, event_id, owner, tenant)) is not None:
            return answer
    data, when = conversation_record(body)
    event = add_event(body, tenant, "api", data, when, event_id)
    if len(data) > svc.settings.max_object_bytes:
        raise HTTPException(413, f"too large: {len(data)} bytes exceeds the limit of {svc.settings.max_object_bytes}")
    if stored_size(svc, event.object_key) != len(data):
        svc.objects.put_bytes(event.object_key, data, ADD_MIME)
    published = publish_event(PublishRequest.model_validate(event.model_dump()), tenant, svc)
    return AddMemoryResponse(
        event_id=published.event_id, status=published.status, duplicate=published.duplicate, captured_at=when
    )


@router.get(
    "/v1/memories/{memory_id}", response_model=MemoryRecord, responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 404, 422)
)
def get_memory(memory_id: uuid.UUID, tenant: Tenant, svc: Svc) -> MemoryRecord:
    """One observation or memory of any type, as stored (vault entries without their secret). 404 for
    an unknown id and for another tenant's."""
    with answered("get"):
        got = svc.service.get_memory(tenant, memory_id)
    if got is None:
        raise HTTPException(404, "memory not found")
    return got


@router.get("/v1/memories", response_model=MemoryPage, responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 422))
def list_memories(
    tenant: Tenant,
    svc: Svc,
    memory_type: Annotated[MemoryType, Query(alias="type", description="Which collection.")],
    user: Annotated[str | None, Query(pattern=_ID_PATTERN, description="Only this user's.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=100_000)] = 0,
) -> MemoryPage:
    """A page of one memory type of the tenant, newest content first, with the total."""
    with answered("list"):
        return svc.service.list_memories(tenant, memory_type, user, limit, offset)


@router.delete(
    "/v1/memories/{memory_id}",
    status_code=204,
    response_class=Response,
    responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 404, 422),
)
def delete_memory(memory_id: uuid.UUID, tenant: Tenant, svc: Svc) -> Response:
    """Delete one observation or memory. 404 for an unknown id and for another tenant's."""
    with answered("delete"):
        kind = svc.service.delete_memory(tenant, memory_id)
    if kind is None:
        raise HTTPException(404, "memory not found")
    return Response(status_code=204)


@router.delete(
    "/v1/users/{user_id}", response_model=ForgetReport, responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 422)
)
def forget_user(user_id: UserId, tenant: Tenant, svc: Svc) -> ForgetReport:
    """Forget a user entirely: every collection (the knowledge vault included), the ledger's records of
    the user's events, and the objects no other user of the tenant references. Publishing the same
    files again afterwards ingests them anew."""
    with answered("forget"):
        report = svc.service.forget_user(tenant, user_id)
    if report.event_ids:  # the events' publish claims: a device publishing them again is heard again
        svc.redis.delete(*(CLAIM_PREFIX + str(e) for e in report.event_ids))
    log.info("user forgotten", tenant=tenant, user=user_id, events=len(report.event_ids))
    return report


@router.get(
    "/v1/users/{user_id}/export", response_model=UserExport, responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 422)
)
def export_user(user_id: UserId, tenant: Tenant, svc: Svc) -> UserExport:
    """Everything stored about a user as JSON: ledger events and every observation and memory with its
    provenance, newest first per type; vault entries without their secrets."""
    with answered("export"):
        return svc.service.export_user(tenant, user_id)


@router.patch(
    "/v1/memories/{memory_id}",
    response_model=MemoryRecord,
    responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 404, 422, 501),
)
def update_memory(memory_id: uuid.UUID, body: MemoryUpdate, tenant: Tenant, svc: Svc) -> MemoryRecord:
    """Correct a memory: ``text`` is stored as a new version that supersedes the old one, which is kept as its
    history; the new version is returned. 404 for an unknown id and another tenant's; 422 for an observation
    (what was captured is not corrected) or a memory already superseded; 501 where corrections are not built."""
    with answered("update"):
        try:
            got = svc.service.update_memory(tenant, memory_id, body.text)
        except NotOffered as exc:
            raise HTTPException(501, str(exc)) from exc
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
    if got is None:
        raise HTTPException(404, "memory not found")
    return got


@router.post(
    "/v1/forget", response_model=ForgetScopeReport, responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 413, 422, 501)
)
def forget_scope(
    body: ForgetScope,
    tenant: Tenant,
    svc: Svc,
    dry_run: Annotated[bool, Query(description="Only count what would be forgotten.")] = False,
) -> ForgetScopeReport:
    """Forget, leaving nothing behind, what ``body`` selects of the tenant: a time range (``since``/``until``), an
    application, a device, events or ids, optionally of one user. Memories drawn only from it are deleted, those
    drawn also from other sources rewritten without it; its originals, derived objects, cached text, ledger rows
    and the store's files keep no byte of it. With ``dry_run`` nothing changes and the report says what would go.
    422 for a body that names nothing."""
    with answered("forget"):
        try:
            report = svc.service.forget_scope(tenant, body, dry_run)
        except NotOffered as exc:
            raise HTTPException(501, str(exc)) from exc
    if report.event_ids and not dry_run:  # the events' publish claims: publishing them again is heard again
        svc.redis.delete(*(CLAIM_PREFIX + str(e) for e in report.event_ids))
    log.info(
        "forgotten by scope",
        tenant=tenant,
        dry_run=dry_run,
        observations=report.observations,
        events=len(report.event_ids),
    )
    return report
