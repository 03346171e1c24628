"""``EmbeddedService``: the service layer on the pipeline's tasks in this process (the embedded default, eager), or
on the workers through the broker when ``ENGRAM_BROKER_URL`` is set, as ``engram search`` and ``engram mcp`` run
them (``task.delay(...).get(timeout)``, one timeout: ``ENGRAM_SERVICE_TIMEOUT_SECONDS``).

The embedded store is shared with other engram commands the way ``engram mcp`` shares it
(``workers.runtime.StoreLease``): a call that reads the vector store holds it for its duration, and it stays open
``linger`` seconds after (300 s by default) unless another engram process asks for it, which gets it within ~0.2 s.
Calls may come from several threads (a web server's pool): the lease runs one store call at a time. The ledger
and the object store are read without holding the store (SQLite and files).

Thumbnails: the one made at ingest (``workers.thumbs``), else made from the picture on first request and
stored under the same key (``api.service.media.thumbnail_object``), so forgetting the user removes them with the
event's other derived objects.
"""

from __future__ import annotations

import mimetypes
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery.exceptions import TimeoutError as CeleryTimeout

from engram.api.add import add_embedded
from engram.api.service import edits
from engram.api.service.base import (
    MediaMissing,
    MediaObject,
    MemoryService,
    NotFound,
    SampleRef,
    ServiceTimeout,
    ServiceUnavailable,
)
from engram.api.service.media import original_object, thumbnail_object
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
from engram.workers.admin import (
    delete_task,
    entity_list_task,
    entity_merge_task,
    entity_name_task,
    export_task,
    forget_scope_task,
    forget_task,
    get_task,
    list_task,
)
from engram.workers.ask import ask_task
from engram.workers.memory.entities import summary
from engram.workers.memory.timeline import TIMELINE_FIELDS, read_timeline, timeline_filter
from engram.workers.query import search_task
from engram.workers.runtime import StoreLease, runtime
from engram.workers.stores.objects import LocalObjectStore, ObjectNotFound
from engram.workers.stores.retention import storage_use
from engram.workers.stores.vectors import StoreBusy

#: How long the list of a tenant's users is reused, seconds; the ledger records it is read from, at most.
USERS_TTL_S = 30.0
#: How long the bytes stored per kind are reused, seconds (a walk of the object folder: ~0.3 s per 100 k objects).
STORAGE_TTL_S = 60.0
USERS_SCAN = 20_000


class EmbeddedService(MemoryService):
    """The service on the configured runtime (see the module's docstring). ``timeout``: seconds per call (default
    ``ENGRAM_SERVICE_TIMEOUT_SECONDS``); ``linger``: seconds the store stays open after a call (300 s, as
    ``engram mcp``).

    Raises ``ServiceUnavailable`` when another process holds the store past ``ENGRAM_STORE_WAIT_SECONDS``,
    ``ServiceTimeout`` when the workers do not answer in time."""

    def __init__(self, timeout: float | None = None, linger: float = 300.0) -> None:
        self.timeout = timeout if timeout is not None else get_settings().service_timeout_seconds
        self._lease = StoreLease(linger)
        self._users: dict[str, tuple[float, list[str]]] = {}
        self._users_lock = threading.Lock()
        self._storage: dict[str, tuple[float, StorageUse | None]] = {}

    def close(self) -> None:
        """Release the store now."""
        self._lease.close()

    def warm_up(self) -> int | None:
        """Open the store now when it exists and no other process holds it (``StoreLease.open_existing``: never
        made, waited for nor asked for); its point count, or None when it was not opened."""
        return self._lease.open_existing()

    @contextmanager
    def _session(self) -> Iterator[Any]:
        """Hold the store for one call; yields the Runtime. Maps the store's and Celery's errors to the service's."""
        try:
            with self._lease.session() as rt:
                yield rt
        except StoreBusy as exc:
            raise ServiceUnavailable(f"the store is busy: {exc}") from exc
        except CeleryTimeout as exc:
            raise ServiceTimeout(f"no answer within {self.timeout:g} s (ENGRAM_SERVICE_TIMEOUT_SECONDS)") from exc

    def _task(self, task: Any, *args: Any) -> Any:
        """Run ``task`` with ``args`` (inline when eager) holding the store; its result."""
        with self._session():
            return task.delay(*args).get(timeout=self.timeout)

    @staticmethod
    def _runtime() -> Any:
        """The runtime for reading the ledger and objects (the vector store is not opened by this)."""
        return runtime()

    # --- search and ask ---------------------------------------------------------------------------------------
    def search(self, req: SearchRequest) -> SearchResponse:
        return SearchResponse.model_validate(self._task(search_task, req))

    def ask(self, req: AskRequest) -> AskResponse:
        return AskResponse.model_validate(self._task(ask_task, req))

    def add(self, req: AddMemoryRequest, tenant_id: str, device_id: str) -> AddMemoryResponse:
        with self._session() as rt:
            return add_embedded(rt, req, tenant_id, device_id)

    # --- memories ---------------------------------------------------------------------------------------------
    def get_memory(self, tenant_id: str, memory_id: uuid.UUID) -> MemoryRecord | None:
        got = self._task(get_task, tenant_id, str(memory_id))
        return None if got is None else MemoryRecord.model_validate(got)

    def list_memories(
        self, tenant_id: str, memory_type: MemoryType, user_id: str | None = None, limit: int = 50, offset: int = 0
    ) -> MemoryPage:
        return MemoryPage.model_validate(self._task(list_task, tenant_id, memory_type.value, user_id, limit, offset))

    def update_memory(self, tenant_id: str, memory_id: uuid.UUID, text: str) -> MemoryRecord | None:
        """A new version superseding the old one (``api.service.edits.update_memory``). Raises ValueError for an
        empty text, an observation or a version already superseded."""
        with self._session() as rt:
            return edits.update_memory(rt, tenant_id, memory_id, text)

    def delete_memory(self, tenant_id: str, memory_id: uuid.UUID) -> MemoryType | None:
        kind = self._task(delete_task, tenant_id, str(memory_id))
        return None if kind is None else MemoryType(kind)

    # --- users ------------------------------------------------------------------------------------------------
    def forget_user(self, tenant_id: str, user_id: str) -> ForgetReport:
        return ForgetReport.model_validate(self._task(forget_task, tenant_id, user_id))

    def forget_scope(self, tenant_id: str, scope: ForgetScope, dry_run: bool = False) -> ForgetScopeReport:
        return ForgetScopeReport.model_validate(self._task(forget_scope_task, tenant_id, scope, dry_run))

    def export_user(self, tenant_id: str, user_id: str) -> UserExport:
        return UserExport.model_validate(self._task(export_task, tenant_id, user_id))

    # --- entities ---------------------------------------------------------------------------------------------
    def list_entities(self, tenant_id: str) -> EntityList:
        return EntityList.model_validate(self._task(entity_list_task, tenant_id))

    def name_entity(self, tenant_id: str, entity_id: uuid.UUID, name: str) -> EntitySummary | None:
        got = self._task(entity_name_task, tenant_id, str(entity_id), name)
        return None if got is None else EntitySummary.model_validate(got)

    def merge_entities(
        self, tenant_id: str, keep_id: uuid.UUID, drop_id: uuid.UUID, reason: str = "manual"
    ) -> EntitySummary | None:
        got = self._task(entity_merge_task, tenant_id, str(keep_id), str(drop_id), reason)
        return None if got is None else EntitySummary.model_validate(got)

    def split_entity(self, tenant_id: str, entity_id: uuid.UUID, sample_key: str) -> EntitySummary | None:
        """The new entity holding the sample (``api.service.edits.split_entity``); None when the entity or the
        sample is unknown."""
        with self._session() as rt:
            try:
                return summary(edits.split_entity(rt, tenant_id, entity_id, sample_key))
            except KeyError:
                return None

    def entity_samples(self, tenant_id: str, entity_id: uuid.UUID) -> list[SampleRef] | None:
        with self._session() as rt:
            return edits.entity_samples(rt, tenant_id, entity_id)

    def sample_media(self, tenant_id: str, entity_id: uuid.UUID, sample_key: str) -> MediaObject:
        with self._session() as rt:
            try:
                key, _ = edits.sample_media(rt, tenant_id, entity_id, sample_key)
            except KeyError as exc:
                raise NotFound(str(exc.args[0] if exc.args else exc)) from exc
            except LookupError as exc:
                raise MediaMissing(str(exc)) from exc
        return _read_object(self._runtime().objects, key)

    def memories_from(self, tenant_id: str, observation_id: uuid.UUID) -> list[MemoryRecord]:
        with self._session() as rt:
            return edits.memories_from(rt, tenant_id, observation_id)

    def retry_event(self, tenant_id: str, event_id: uuid.UUID) -> LedgerRecord | None:
        """Runs the event inline on the embedded default, holding the store (``api.service.edits.retry_event``)."""
        with self._session() as rt:
            return edits.retry_event(rt, tenant_id, event_id)

    # --- the ledger -------------------------------------------------------------------------------------------
    def events(
        self, tenant_id: str, user_id: str | None = None, status: EventStatus | None = None, limit: int = 100
    ) -> list[LedgerRecord]:
        ledger = self._runtime().ledger
        if user_id is None:
            return ledger.records(tenant_id, status, limit)
        mine = [r for r in ledger.user_events(tenant_id, user_id) if status is None or r.status is status]
        return sorted(mine, key=lambda r: r.updated_at, reverse=True)[:limit]

    def event_counts(self, tenant_id: str) -> dict[EventStatus, int]:
        return self._runtime().ledger.counts(tenant_id)

    def users(self, tenant_id: str) -> list[str]:
        """The users of the tenant's most recent ``USERS_SCAN`` events, reused for ``USERS_TTL_S`` seconds."""
        with self._users_lock:
            at, found = self._users.get(tenant_id, (0.0, []))
            if time.monotonic() - at > USERS_TTL_S:
                found = sorted({r.user_id for r in self._runtime().ledger.records(tenant_id, None, USERS_SCAN)})
                self._users[tenant_id] = (time.monotonic(), found)
            return list(found)

    def storage(self, tenant_id: str) -> StorageUse:
        """``storage_use`` of the configured stores (file sizes and the object listing; the vector store is not
        opened), reused for ``STORAGE_TTL_S`` seconds."""
        with self._users_lock:
            at, use = self._storage.get(tenant_id, (0.0, None))
            if use is None or time.monotonic() - at > STORAGE_TTL_S:
                use = storage_use(self._runtime(), tenant_id)
                self._storage[tenant_id] = (time.monotonic(), use)
            return use.model_copy()

    # --- timeline and media -----------------------------------------------------------------------------------
    def timeline(self, req: TimelineRequest) -> MemoryPage:
        """Each record's payload holds ``workers.memory.timeline.TIMELINE_FIELDS`` only."""
        with self._session() as rt:
            return read_timeline(rt, req)

    def _observation(self, tenant_id: str, observation_id: uuid.UUID, user_id: str | None) -> MemoryRecord:
        rec = self.get_memory(tenant_id, observation_id)
        if rec is None or rec.memory_type is not MemoryType.observation or (user_id and rec.user_id != user_id):
            raise NotFound(f"no observation {observation_id}")
        if not rec.payload.get("object_key"):
            raise MediaMissing("this observation has no stored object")
        return rec

    def media(self, tenant_id: str, observation_id: uuid.UUID, user_id: str | None = None) -> MediaObject:
        rec = self._observation(tenant_id, observation_id, user_id)
        return original_object(self._runtime().objects, rec)

    def thumbnail(self, tenant_id: str, observation_id: uuid.UUID, user_id: str | None = None) -> MediaObject:
        """The thumbnail stored at ingest, else made now and stored (``api.service.media.thumbnail_object``)."""
        rec = self.get_memory(tenant_id, observation_id)
        if rec is None or rec.memory_type is not MemoryType.observation or (user_id and rec.user_id != user_id):
            raise NotFound(f"no observation {observation_id}")
        rt = self._runtime()
        return thumbnail_object(rt.objects, rec, rt.settings.max_image_pixels)


def _read_object(objects: Any, key: str) -> MediaObject:
    """``key`` of the object store as a MediaObject: a local file's path (the embedded default's folder), else
    its bytes. Raises MediaMissing when the object is gone."""

    mime = mimetypes.guess_type(key)[0] or "application/octet-stream"
    try:
        if isinstance(objects, LocalObjectStore):
            with objects.local_file(key) as path:
                return MediaObject(key=key, mime_type=mime, size=path.stat().st_size, path=path)
        data = objects.get_bytes(key)
    except (ObjectNotFound, FileNotFoundError) as exc:
        raise MediaMissing("the original is no longer stored (deleted, or removed by retention)") from exc
    return MediaObject(key=key, mime_type=mime, size=len(data), data=data)


__all__ = ["TIMELINE_FIELDS", "EmbeddedService", "timeline_filter"]
