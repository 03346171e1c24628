"""Adding memories directly: an ``AddMemoryRequest`` (one text or chat messages) becomes a conversation record
(JSONL, ``schemas.conversations``) stored at its content-addressed key and published as a ``text`` event, exactly
as a conversation file would be, so it goes through the same pipeline (ingest → perceive → embed → link → store;
consolidation as usual).

Used by ``engram add`` and the MCP server on the embedded default (``add_embedded``: the pipeline runs inline,
the memory is searchable when it returns) and by ``POST /v1/memories`` in the distributed mode
(``conversation_record`` and ``add_event_id``; ``api.routes.memories`` stores the object and publishes the
event).
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from engram.schemas.add import AddMemoryRequest, AddMemoryResponse
from engram.schemas.conversations import ConversationMessage
from engram.schemas.events import EventStatus, MediaEvent, MediaKind
from engram.schemas.ids import object_key

#: The mime type an addition is stored as (one ConversationMessage per line).
ADD_MIME = "application/x-ndjson"
_ADD_NAMESPACE = uuid.UUID("5d0f3c4e-8f41-4c1b-9a57-2f5b0c1d7e61")


def add_event_id(tenant_id: str, user_id: str, client_id: str | None) -> uuid.UUID:
    """The event id of an addition: UUIDv5 of (tenant, user, client id) when the client gave an id, so the same
    id always names the same event (idempotency); a fresh UUIDv4 otherwise."""
    if client_id is None:
        return uuid.uuid4()
    return uuid.uuid5(_ADD_NAMESPACE, f"{tenant_id}\x1f{user_id}\x1f{client_id}")


def conversation_record(req: AddMemoryRequest, now: datetime | None = None) -> tuple[bytes, datetime]:
    """``req`` as a conversation record: JSONL bytes (one ``ConversationMessage`` per line, UTF-8) and the time of
    its first message (UTC). Missing fields are filled in: the speaker is the user, each message's time the
    request's ``time`` (default ``now``, default the current time) plus its position in microseconds (so the
    turns keep their order), message ids ``<id or session>:<n>``, the session ``req.session_id``, else the
    client id, else ``add-<time>``."""
    when = (req.time or now or datetime.now(UTC)).astimezone(UTC)
    session = req.session_id or req.id or f"add-{when:%Y%m%dT%H%M%S%fZ}"
    lines: list[str] = []
    first: datetime | None = None
    for n, m in enumerate(req.messages or [None]):
        text = req.text if m is None else m.text
        stamp = m.timestamp if m is not None and m.timestamp is not None else when + timedelta(microseconds=n)
        msg = ConversationMessage(
            message_id=(m.message_id if m is not None and m.message_id else f"{req.id or session}:{n}"),
            session_id=(m.session_id if m is not None and m.session_id else session),
            speaker=(m.speaker if m is not None and m.speaker else req.user_id),
            text=text or "",
            timestamp=stamp,
            attachments=m.attachments if m is not None else [],
        )
        first = min(first, msg.timestamp) if first else msg.timestamp
        lines.append(msg.model_dump_json())
    assert first is not None
    return ("\n".join(lines) + "\n").encode(), first.astimezone(UTC)


def add_event(
    req: AddMemoryRequest, tenant_id: str, device_id: str, data: bytes, captured_at: datetime, event_id: uuid.UUID
) -> MediaEvent:
    """The ``text`` event publishing the conversation record ``data`` (from ``conversation_record``): its key is
    content addressed like any file's, its source name ``req.source`` (else ``add``), the client id in
    ``metadata['client_id']``."""
    digest = hashlib.sha256(data).hexdigest()
    return MediaEvent(
        event_id=event_id,
        tenant_id=tenant_id,
        user_id=req.user_id,
        device_id=device_id,
        kind=MediaKind.text,
        object_key=object_key(tenant_id, digest, ADD_MIME),
        sha256=digest,
        size=len(data),
        mime_type=ADD_MIME,
        captured_at=captured_at,
        captured_at_source="given",
        source_name=req.source or "add",
        metadata={"client_id": req.id} if req.id else {},
    )


_running: set[uuid.UUID] = set()  # additions this process is running now, in any thread
_running_lock = threading.Lock()


@contextmanager
def _running_here(event_id: uuid.UUID) -> Iterator[bool]:
    """Mark ``event_id`` as run by this process while the block runs; yields whether no other thread of this
    process was running it (then an unfinished event of this process's is one whose attempt ended)."""
    with _running_lock:
        idle = event_id not in _running
        _running.add(event_id)
    try:
        yield idle
    finally:
        if idle:
            with _running_lock:
                _running.discard(event_id)


#: Seconds an addition waits for another live process that is storing the same client id (``add_embedded``).
ADD_WAIT_S = 600.0


def add_embedded(
    rt, req: AddMemoryRequest, tenant_id: str, device_id: str, consolidate: bool = True
) -> AddMemoryResponse:
    """Add ``req`` on the embedded default (``rt``: a ``workers.runtime.Runtime``): store the record, record the
    event, run the pipeline inline, then consolidate the user (``consolidate``). Returns the final status: the
    memory is searchable when this returns ``done``. A client id added before is answered by ``added_before``:
    ``duplicate`` when its event is final, ``resumed`` when it was interrupted and is finished now.

    Raises vectorstore.StoreBusy when another process holds the store past the wait (``ENGRAM_STORE_WAIT_SECONDS``)
    or stores the same client id for longer than ``ADD_WAIT_S``."""
    from engram.api.local import run_event  # the workers' stack: the API image imports this module without it

    event_id = add_event_id(tenant_id, req.user_id, req.id)
    if req.id is not None and rt.ledger.get(event_id) is not None:
        return added_before(rt, event_id, tenant_id, req.user_id, consolidate)
    data, when = conversation_record(req)
    event = add_event(req, tenant_id, device_id, data, when, event_id)
    if rt.settings.embedded:  # hold the store before the event is recorded: one process at a time stores
        rt.vectors.hold()
    if not rt.objects.exists(event.object_key):
        rt.objects.put_bytes(event.object_key, data, ADD_MIME)
    rt.ledger.record_queued(event)  # this process its owner: another one takes it over only once this one is gone
    with _running_here(event_id):
        record = run_event(rt, event)
    _consolidate(record, tenant_id, req.user_id, consolidate)
    return AddMemoryResponse(
        event_id=event_id,
        status=record.status,
        observations=record.observations,
        reason=record.reason,
        captured_at=when,
    )


def _consolidate(record, tenant_id: str, user_id: str, consolidate: bool) -> None:
    if consolidate and record.status is EventStatus.done:
        from engram.workers.consolidate import consolidate_user  # a stage: the workers' stack, as above

        consolidate_user.delay(tenant_id, user_id)


def added_before(rt, event_id: uuid.UUID, tenant_id: str, user_id: str, consolidate: bool = True) -> AddMemoryResponse:
    """The answer to adding a client id again whose event ``event_id`` is in the ledger, once it is stored:

    - its event is final (done, skipped, failed): that status, ``duplicate`` set; nothing is stored again;
    - it never finished and the process that held it is gone (killed, crashed: ``Ledger.claim_interrupted``): this
      process takes it over and runs it now (what was stored is kept), ``resumed`` set; one interrupted
      ``max_redeliveries`` times is failed instead;
    - its process still lives (the same id being added at once elsewhere): this waits for it to end, polling.

    Raises vectorstore.StoreBusy after ``ADD_WAIT_S`` seconds of another live process holding it."""
    from engram.api.local import run_events  # the workers' stack, as in add_embedded
    from engram.workers.stores.vectors import StoreBusy  # idem

    deadline = time.monotonic() + ADD_WAIT_S
    while True:
        old = rt.ledger.get(event_id)
        if old is None:  # its user forgotten meanwhile
            return AddMemoryResponse(event_id=event_id, status=EventStatus.failed, reason="forgotten meanwhile")
        if old.status in (EventStatus.done, EventStatus.skipped, EventStatus.failed):
            return AddMemoryResponse(
                event_id=event_id, status=old.status, duplicate=True, observations=old.observations, reason=old.reason
            )
        if rt.settings.embedded:
            rt.vectors.hold()  # one process at a time stores: the holder, if alive, finishes meanwhile
        with _running_here(event_id) as own_idle:  # this process's own attempt, if any, ended (an exception)
            events, given_up = rt.ledger.claim_interrupted(
                rt.settings.max_redeliveries, event_ids=[event_id], include_own=own_idle
            )
            record = run_events(rt, events)[0] if events else rt.ledger.get(event_id)
        if events or given_up:
            _consolidate(record, tenant_id, user_id, consolidate)
            return AddMemoryResponse(
                event_id=event_id,
                status=record.status,
                resumed=bool(events),
                observations=record.observations,
                reason=record.reason,
            )
        if time.monotonic() > deadline:
            raise StoreBusy(f"the addition {event_id} is being stored by another engram process; try again later")
        time.sleep(0.2)
