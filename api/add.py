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
import uuid
from datetime import UTC, datetime, timedelta

from engram.schemas.add import AddMemoryRequest, AddMemoryResponse
from engram.schemas.conversations import ConversationMessage
from engram.schemas.events import EventStatus, MediaEvent, MediaKind
from engram.workers.ids import object_key

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
        stamp = (m.timestamp if m is not None and m.timestamp is not None else when + timedelta(microseconds=n))
        msg = ConversationMessage(
            message_id=(m.message_id if m is not None and m.message_id else f"{req.id or session}:{n}"),
            session_id=(m.session_id if m is not None and m.session_id else session),
            speaker=(m.speaker if m is not None and m.speaker else req.user_id),
            text=text or "", timestamp=stamp, attachments=m.attachments if m is not None else [])
        first = min(first, msg.timestamp) if first else msg.timestamp
        lines.append(msg.model_dump_json())
    assert first is not None
    return ("\n".join(lines) + "\n").encode(), first.astimezone(UTC)


def add_event(req: AddMemoryRequest, tenant_id: str, device_id: str, data: bytes, captured_at: datetime,
              event_id: uuid.UUID) -> MediaEvent:
    """The ``text`` event publishing the conversation record ``data`` (from ``conversation_record``): its key is
    content addressed like any file's, its source name ``req.source`` (else ``add``), the client id in
    ``metadata['client_id']``."""
    digest = hashlib.sha256(data).hexdigest()
    return MediaEvent(event_id=event_id, tenant_id=tenant_id, user_id=req.user_id, device_id=device_id,
                      kind=MediaKind.text, object_key=object_key(tenant_id, digest, ADD_MIME), sha256=digest,
                      size=len(data), mime_type=ADD_MIME, captured_at=captured_at, captured_at_source="given",
                      source_name=req.source or "add",
                      metadata={"client_id": req.id} if req.id else {})


def add_embedded(rt, req: AddMemoryRequest, tenant_id: str, device_id: str, consolidate: bool = True
                 ) -> AddMemoryResponse:
    """Add ``req`` on the embedded default (``rt``: a ``workers.runtime.Runtime``): store the record, record the
    event, run the pipeline inline, then consolidate the user (``consolidate``). Returns the final status: the
    memory is searchable when this returns ``done``. A client id added before answers its first event with
    ``duplicate`` set and stores nothing.

    Raises vectorstore.StoreBusy when another process holds the store past the wait (``ENGRAM_STORE_WAIT_SECONDS``)."""
    from engram.api.local import run_event  # the workers' stack: the API image imports this module without it

    event_id = add_event_id(tenant_id, req.user_id, req.id)
    if req.id is not None and (old := rt.ledger.get(event_id)) is not None:
        return AddMemoryResponse(event_id=event_id, status=old.status, duplicate=True,
                                 observations=old.observations, reason=old.reason)
    data, when = conversation_record(req)
    event = add_event(req, tenant_id, device_id, data, when, event_id)
    if rt.settings.embedded:  # hold the store before the event is recorded: no other process's resume runs it
        rt.vectors.hold()
    if not rt.objects.exists(event.object_key):
        rt.objects.put_bytes(event.object_key, data, ADD_MIME)
    rt.ledger.record_queued(event)
    record = run_event(rt, event)
    if consolidate and record.status is EventStatus.done:
        from engram.workers.consolidate import consolidate_user  # a stage: the workers' stack, as above

        consolidate_user.delay(tenant_id, req.user_id)
    return AddMemoryResponse(event_id=event_id, status=record.status, observations=record.observations,
                             reason=record.reason, captured_at=when)
