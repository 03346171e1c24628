"""``RemoteService``: the service layer through an engram HTTP API with the SDK (``api.client.EngramClient``: its
retries; one timeout per request, ``ENGRAM_SERVICE_TIMEOUT_SECONDS``). The tenant is the API key's: the
``tenant_id`` arguments are not sent (a key of tenant A never reads tenant B).

Events, their counts and the tenant's users come from ``GET /v1/events`` and ``GET /v1/users``, the timeline from
``GET /v1/timeline``, an observation's original and thumbnail from ``GET /v1/media/{id}`` and ``GET
/v1/thumbnails/{id}`` (whole, as bytes), and the People screen's samples, their crops and clips and "not this
person" from ``/v1/entities/{id}/samples``, ``.../samples/media`` and ``.../split``, the bytes stored per kind from
``GET /v1/storage`` and a failed event's retry through ``POST /v1/events/{id}/retry``. The API's 501s raise
``NotOffered``. ``add`` waits until the
API has stored the memory (so it is searchable when it returns, as on the embedded default). Safe to call from
several threads (httpx's client is).
"""

from __future__ import annotations

import mimetypes
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from engram.api.client import EngramAPIError, EngramClient
from engram.api.service.base import (
    MediaMissing,
    MediaObject,
    MemoryService,
    NotFound,
    NotOffered,
    SampleRef,
    ServiceError,
    ServiceTimeout,
    ServiceUnavailable,
)
from engram.schemas.add import AddMemoryRequest, AddMemoryResponse
from engram.schemas.ask import AskRequest, AskResponse
from engram.schemas.entities import EntityList, EntitySummary
from engram.schemas.events import EventStatus, LedgerRecord
from engram.schemas.memories import MemoryType
from engram.schemas.memory_admin import (
    ForgetReport,
    ForgetScope,
    ForgetScopeReport,
    MemoryPage,
    MemoryRecord,
    UserExport,
)
from engram.schemas.search import SearchRequest, SearchResponse
from engram.schemas.settings import get_settings
from engram.schemas.storage import StorageUse
from engram.schemas.timeline import TimelineRequest


class _Absent(Exception):
    """A 404 inside ``RemoteService._call(absent_ok=True)``: the caller answers None."""


class RemoteService(MemoryService):
    """The service on the engram API at ``url`` with ``api_key`` (see the module's docstring). ``client``: an
    ``EngramClient`` to use instead of making one (tests). Raises ValueError without a key; calls raise
    ``ServiceTimeout`` (the request or the API's own wait timed out), ``ServiceUnavailable`` (unreachable, 502,
    503), ``ServiceError`` (any other error answer, with the API's message) and ``NotOffered`` (see above)."""

    def __init__(
        self, url: str, api_key: str, timeout: float | None = None, device: str | None = None, client: Any = None
    ) -> None:
        if not api_key:
            raise ValueError("RemoteService needs an API key (engram keys create --tenant T)")
        self.timeout = timeout if timeout is not None else get_settings().service_timeout_seconds
        self.client = client if client is not None else EngramClient(url, api_key, timeout=self.timeout, device=device)

    def close(self) -> None:
        """Close the HTTP connections."""
        self.client.close()

    @contextmanager
    def _call(self, absent_ok: bool = False) -> Iterator[None]:
        """The SDK's errors as the service's; a 404 raises ``_Absent`` with ``absent_ok``."""
        try:
            yield
        except EngramAPIError as exc:
            if exc.status == 404 and absent_ok:
                raise _Absent from exc
            if exc.status == 504:
                raise ServiceTimeout(f"engram API: {exc.detail}") from exc
            if exc.status in (502, 503):
                raise ServiceUnavailable(f"engram API: {exc.detail}") from exc
            raise ServiceError(f"engram API: {exc}") from exc
        except httpx.TimeoutException as exc:
            raise ServiceTimeout(f"engram API: no answer within {self.timeout:g} s") from exc
        except httpx.TransportError as exc:
            raise ServiceUnavailable(f"engram API unreachable: {type(exc).__name__}: {exc}") from exc

    def _maybe(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, or None when the API answers 404."""
        try:
            with self._call(absent_ok=True):
                return fn(*args)
        except _Absent:
            return None

    # --- search and ask ---------------------------------------------------------------------------------------
    def search(self, req: SearchRequest) -> SearchResponse:
        with self._call():
            return self.client.search_request(req)

    def ask(self, req: AskRequest) -> AskResponse:
        with self._call():
            return self.client.ask_request(req)

    def add(self, req: AddMemoryRequest, tenant_id: str, device_id: str) -> AddMemoryResponse:
        """Add through ``POST /v1/memories`` and wait (up to ``timeout``) until the event is final. The device is
        the client's (``device`` of the constructor)."""
        with self._call():
            resp = self.client.add_request(req)
            if resp.duplicate:
                return resp
            try:
                final = self.client.wait([resp.event_id], timeout=self.timeout, interval=0.1)[resp.event_id]
            except TimeoutError as exc:
                raise ServiceTimeout(f"event {resp.event_id} not stored within {self.timeout:g} s") from exc
        return resp.model_copy(
            update={"status": final.status, "observations": final.observations, "reason": final.reason}
        )

    # --- memories ---------------------------------------------------------------------------------------------
    def get_memory(self, tenant_id: str, memory_id: uuid.UUID) -> MemoryRecord | None:
        return self._maybe(self.client.get_memory, memory_id)

    def list_memories(
        self, tenant_id: str, memory_type: MemoryType, user_id: str | None = None, limit: int = 50, offset: int = 0
    ) -> MemoryPage:
        with self._call():
            return self.client.list_memories(memory_type, user_id, limit, offset)

    def update_memory(self, tenant_id: str, memory_id: uuid.UUID, text: str) -> MemoryRecord | None:
        """``PATCH /v1/memories/{id}``; NotOffered when the API answers 501, ValueError for its 422."""
        try:
            return self._maybe(self.client.update_memory, memory_id, text)
        except ServiceError as exc:
            cause = exc.__cause__
            if isinstance(cause, EngramAPIError) and cause.status == 501:
                raise NotOffered(str(cause.detail)) from exc
            if isinstance(cause, EngramAPIError) and cause.status == 422:
                raise ValueError(str(cause.detail)) from exc
            raise

    def delete_memory(self, tenant_id: str, memory_id: uuid.UUID) -> MemoryType | None:
        """The deleted item's type (read before deleting), or None when unknown."""
        rec = self.get_memory(tenant_id, memory_id)
        if rec is None:
            return None
        try:
            with self._call(absent_ok=True):
                self.client.delete_memory(memory_id)
        except _Absent:
            return None
        return rec.memory_type

    # --- users ------------------------------------------------------------------------------------------------
    def forget_user(self, tenant_id: str, user_id: str) -> ForgetReport:
        with self._call():
            return self.client.forget_user(user_id)

    def forget_scope(self, tenant_id: str, scope: ForgetScope, dry_run: bool = False) -> ForgetScopeReport:
        """``POST /v1/forget``; NotOffered when the API answers 501."""
        try:
            with self._call():
                return self.client.forget(
                    user=scope.user_id,
                    since=scope.since,
                    until=scope.until,
                    app=scope.app,
                    device=scope.device_id,
                    memory_ids=scope.memory_ids,
                    event_ids=scope.event_ids,
                    dry_run=dry_run,
                )
        except ServiceError as exc:
            cause = exc.__cause__
            if isinstance(cause, EngramAPIError) and cause.status == 501:
                raise NotOffered(str(cause.detail)) from exc
            raise

    def export_user(self, tenant_id: str, user_id: str) -> UserExport:
        with self._call():
            return self.client.export_user(user_id)

    # --- entities ---------------------------------------------------------------------------------------------
    def list_entities(self, tenant_id: str) -> EntityList:
        with self._call():
            return self.client.list_entities()

    def name_entity(self, tenant_id: str, entity_id: uuid.UUID, name: str) -> EntitySummary | None:
        return self._maybe(self.client.name_entity, entity_id, name)

    def merge_entities(
        self, tenant_id: str, keep_id: uuid.UUID, drop_id: uuid.UUID, reason: str = "manual"
    ) -> EntitySummary | None:
        return self._maybe(self.client.merge_entities, keep_id, drop_id, reason)

    def split_entity(self, tenant_id: str, entity_id: uuid.UUID, sample_key: str) -> EntitySummary | None:
        """``POST /v1/entities/{id}/split``; None when the entity or the sample is unknown."""
        return self._maybe(self.client.split_entity, entity_id, sample_key)

    def entity_samples(self, tenant_id: str, entity_id: uuid.UUID) -> list[SampleRef] | None:
        """``GET /v1/entities/{id}/samples``; None when the entity is unknown."""
        got = self._maybe(self.client.entity_samples, entity_id)
        return None if got is None else [SampleRef(**s.model_dump()) for s in got.items]

    def sample_media(self, tenant_id: str, entity_id: uuid.UUID, sample_key: str) -> MediaObject:
        """``GET /v1/entities/{id}/samples/media``: the crop's or clip's bytes. Raises NotFound, MediaMissing."""
        return self._bytes(f"{entity_id}-sample", lambda: self.client.sample_media(entity_id, sample_key))

    # --- the ledger and the timeline ---------------------------------------------------------------------------
    def events(
        self, tenant_id: str, user_id: str | None = None, status: EventStatus | None = None, limit: int = 100
    ) -> list[LedgerRecord]:
        """``GET /v1/events`` (at most 1,000)."""
        with self._call():
            return self.client.events(user_id, status, min(limit, 1000)).items

    def event_counts(self, tenant_id: str) -> dict[EventStatus, int]:
        """The counts ``GET /v1/events`` answers with (one event read besides)."""
        with self._call():
            return self.client.events(None, None, 1).counts

    def users(self, tenant_id: str) -> list[str]:
        """``GET /v1/users``."""
        with self._call():
            return self.client.users()

    def timeline(self, req: TimelineRequest) -> MemoryPage:
        """``GET /v1/timeline`` (the key's tenant, whatever ``req.tenant_id`` says)."""
        with self._call():
            return self.client.timeline_request(req)

    def retry_event(self, tenant_id: str, event_id: uuid.UUID) -> LedgerRecord | None:
        """``POST /v1/events/{id}/retry``, then the event's record as ``GET /v1/events`` lists it (queued unless a
        worker already took it); None when it is unknown, another tenant's or not failed."""
        if self._maybe(self.client.retry_event, event_id) is None:
            return None
        with self._call():
            found = [r for r in self.client.events(None, None, 1000).items if r.event_id == event_id]
        return found[0] if found else None

    def memories_from(self, tenant_id: str, observation_id: uuid.UUID) -> list[MemoryRecord]:
        """``GET /v1/memories/{id}/derived``."""
        with self._call():
            return self.client.memories_from(observation_id)

    def storage(self, tenant_id: str) -> StorageUse:
        """``GET /v1/storage`` (the key's tenant)."""
        with self._call():
            return self.client.storage()

    # --- media ------------------------------------------------------------------------------------------------
    def _bytes(self, name: str, fetch: Any) -> MediaObject:
        """``fetch()``'s (bytes, media type) from the SDK as a MediaObject keyed ``name`` and an extension:
        NotFound for the API's 404, MediaMissing (its reason) for its 410."""
        try:
            with self._call(absent_ok=True):
                data, mime = fetch()
        except _Absent as exc:
            raise NotFound(f"no {name}") from exc
        except ServiceError as exc:
            cause = exc.__cause__
            if isinstance(cause, EngramAPIError) and cause.status == 410:
                raise MediaMissing(str(cause.detail)) from exc
            raise
        mime = mime.split(";")[0].strip()
        key = f"{name}{mimetypes.guess_extension(mime) or ''}"
        return MediaObject(key=key, mime_type=mime, size=len(data), data=data)

    def media(self, tenant_id: str, observation_id: uuid.UUID, user_id: str | None = None) -> MediaObject:
        """``GET /v1/media/{id}``, the whole object's bytes (``key``: the observation's id and an extension)."""
        return self._bytes(str(observation_id), lambda: self.client.media(observation_id, False, user_id))

    def thumbnail(self, tenant_id: str, observation_id: uuid.UUID, user_id: str | None = None) -> MediaObject:
        """``GET /v1/thumbnails/{id}``."""
        return self._bytes(str(observation_id), lambda: self.client.media(observation_id, True, user_id))
