"""``QueueService``: the service layer for the HTTP routes in the distributed mode. Each call is sent to a query
worker through the ``query`` queue by its task's wire name (``workers.tasks.Task``: the API never imports a stage)
with a request's publish retry policy, and its JSON result is waited for up to one timeout,
``ENGRAM_SERVICE_TIMEOUT_SECONDS``.

Errors: ``ServiceUnavailable`` when the broker refuses the task (about 2 s when it is down), ``ServiceTimeout``
when no query worker answers in time, ``schemas.ask.AskFailed`` as the worker raised it (its message is ours),
``ServiceError`` for any other failure of the task (the reason is logged, not put in the message). Adding a memory
is the route's own work (``NotOffered`` here). The timeline is a query task (``Task.timeline``), and so are the web
app's changes (a memory's correction, "not this person") and an entity's samples; a sample's face crop or voice clip
is made and stored by a query worker and read here from the object store. The ledger (events,
their counts, the tenant's users) and media (originals, thumbnails) are read beside the API from the ``ledger`` and
``objects`` it was given (the API's own: ``api.routes.deps.Services``), ``NotOffered`` without them; so are the
bytes stored per kind (``storage``: the object store's listing and the API's data dir, with ``settings``). Safe to
call from several threads (Celery's producer pool).
"""

from __future__ import annotations

import threading
import time
import uuid
from types import SimpleNamespace
from typing import Any

import structlog
from celery.exceptions import TimeoutError as CeleryTimeout

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
from engram.schemas.ask import AskFailed, AskRequest, AskResponse
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
from engram.schemas.settings import Settings, get_settings
from engram.schemas.storage import StorageUse
from engram.schemas.timeline import TimelineRequest
from engram.workers.tasks import Task

log = structlog.get_logger(__name__)

#: A request publishing to the broker gives up within about 2 s when the broker is down (workers wait longer:
#: see ``task_publish_retry_policy`` in workers.app); the client retries the request.
REQUEST_PUBLISH_RETRY = {"max_retries": 3, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 1.0}
#: How long the list of a tenant's users is reused, seconds; the ledger records it is read from, at most.
USERS_TTL_S = 30.0
USERS_SCAN = 20_000
#: How long the bytes stored per kind are reused, seconds (each measure lists the whole object store).
STORAGE_TTL_S = 60.0


class QueueService(MemoryService):
    """The service on the query workers through ``celery`` (a configured producer app; see the module's
    docstring). ``timeout``: seconds per call (default ``ENGRAM_SERVICE_TIMEOUT_SECONDS``); ``ledger`` and
    ``objects``: the API's ledger and object store, for the ledger's calls and media (else ``NotOffered``);
    ``settings``: the API's (its data dir, cap and retention rules, for ``storage``; default ``get_settings()``)."""

    def __init__(
        self,
        celery: Any,
        timeout: float | None = None,
        ledger: Any = None,
        objects: Any = None,
        settings: Settings | None = None,
    ) -> None:
        self.celery = celery
        self.settings = settings if settings is not None else get_settings()
        self.timeout = timeout if timeout is not None else self.settings.service_timeout_seconds
        self.ledger, self.objects = ledger, objects
        self._users: dict[str, tuple[float, list[str]]] = {}
        self._users_lock = threading.Lock()
        self._storage: dict[str, tuple[float, StorageUse]] = {}

    def _task(self, task: Task, *args: Any) -> Any:
        """Send ``task`` by name with JSON ``args`` and wait for its result (see the module's docstring)."""
        try:
            result = self.celery.send_task(task.value, args=list(args), retry_policy=REQUEST_PUBLISH_RETRY)
        except Exception as exc:
            raise ServiceUnavailable(f"the queue is unavailable: {type(exc).__name__}: {exc}") from exc
        try:
            return result.get(timeout=self.timeout)
        except CeleryTimeout as exc:
            raise ServiceTimeout(f"no query worker answered within {self.timeout:g} s") from exc
        except AskFailed:
            raise
        except Exception as exc:
            log.error(f"{task.value} failed", error=f"{type(exc).__name__}: {exc}")
            raise ServiceError(f"{task.value} failed") from exc
        finally:
            result.forget()

    # --- search and ask ---------------------------------------------------------------------------------------
    def search(self, req: SearchRequest) -> SearchResponse:
        return SearchResponse.model_validate(self._task(Task.search, req.model_dump(mode="json")))

    def ask(self, req: AskRequest) -> AskResponse:
        return AskResponse.model_validate(self._task(Task.ask, req.model_dump(mode="json")))

    def add(self, req: AddMemoryRequest, tenant_id: str, device_id: str) -> AddMemoryResponse:
        raise NotOffered("adding is published by the API's route (POST /v1/memories)")

    # --- memories and users -----------------------------------------------------------------------------------
    def get_memory(self, tenant_id: str, memory_id: uuid.UUID) -> MemoryRecord | None:
        got = self._task(Task.memory_get, tenant_id, str(memory_id))
        return None if got is None else MemoryRecord.model_validate(got)

    def list_memories(
        self, tenant_id: str, memory_type: MemoryType, user_id: str | None = None, limit: int = 50, offset: int = 0
    ) -> MemoryPage:
        return MemoryPage.model_validate(
            self._task(Task.memory_list, tenant_id, memory_type.value, user_id, limit, offset)
        )

    def update_memory(self, tenant_id: str, memory_id: uuid.UUID, text: str) -> MemoryRecord | None:
        """A new version superseding the old one, written by a query worker (``Task.memory_update``,
        ``workers.memory.corrections.update_memory``). Raises ValueError (the worker's reason) for an empty text,
        an observation or a version already superseded."""
        got = self._task(Task.memory_update, tenant_id, str(memory_id), text)
        if got is None:
            return None
        if "refused" in got:
            raise ValueError(got["refused"])
        return MemoryRecord.model_validate(got["record"])

    def delete_memory(self, tenant_id: str, memory_id: uuid.UUID) -> MemoryType | None:
        kind = self._task(Task.memory_delete, tenant_id, str(memory_id))
        return None if kind is None else MemoryType(kind)

    def memories_from(self, tenant_id: str, observation_id: uuid.UUID) -> list[MemoryRecord]:
        """``Task.memories_from`` on a query worker."""
        return [MemoryRecord.model_validate(r) for r in self._task(Task.memories_from, tenant_id, str(observation_id))]

    def forget_user(self, tenant_id: str, user_id: str) -> ForgetReport:
        return ForgetReport.model_validate(self._task(Task.memory_forget, tenant_id, user_id))

    def forget_scope(self, tenant_id: str, scope: ForgetScope, dry_run: bool = False) -> ForgetScopeReport:
        return ForgetScopeReport.model_validate(
            self._task(Task.memory_forget_scope, tenant_id, scope.model_dump(mode="json"), dry_run)
        )

    def export_user(self, tenant_id: str, user_id: str) -> UserExport:
        return UserExport.model_validate(self._task(Task.memory_export, tenant_id, user_id))

    # --- entities ---------------------------------------------------------------------------------------------
    def list_entities(self, tenant_id: str) -> EntityList:
        return EntityList.model_validate(self._task(Task.entity_list, tenant_id))

    def name_entity(self, tenant_id: str, entity_id: uuid.UUID, name: str) -> EntitySummary | None:
        got = self._task(Task.entity_name, tenant_id, str(entity_id), name)
        return None if got is None else EntitySummary.model_validate(got)

    def merge_entities(
        self, tenant_id: str, keep_id: uuid.UUID, drop_id: uuid.UUID, reason: str = "manual"
    ) -> EntitySummary | None:
        got = self._task(Task.entity_merge, tenant_id, str(keep_id), str(drop_id), reason)
        return None if got is None else EntitySummary.model_validate(got)

    def split_entity(self, tenant_id: str, entity_id: uuid.UUID, sample_key: str) -> EntitySummary | None:
        """ "Not this person" on a query worker (``Task.entity_split``): the new entity holding the sample; None
        when the entity or the sample is unknown."""
        got = self._task(Task.entity_split, tenant_id, str(entity_id), sample_key)
        return None if got is None else EntitySummary.model_validate(got)

    def entity_samples(self, tenant_id: str, entity_id: uuid.UUID) -> list[SampleRef] | None:
        """The entity's samples as a query worker reads them (``Task.entity_samples``); None when unknown."""
        got = self._task(Task.entity_samples, tenant_id, str(entity_id))
        return None if got is None else [SampleRef(**s) for s in got]

    def entities_samples(self, tenant_id: str, entity_ids: list[uuid.UUID]) -> dict[uuid.UUID, list[SampleRef]]:
        """Several entities' samples in one request task (``Task.entity_samples_many``, at most 200 entities): one
        round trip to a query worker for the People page instead of one per person."""
        got = self._task(Task.entity_samples_many, tenant_id, [str(e) for e in entity_ids])
        return {uuid.UUID(eid): [SampleRef(**s) for s in samples] for eid, samples in got.items()}

    def sample_media(self, tenant_id: str, entity_id: uuid.UUID, sample_key: str) -> MediaObject:
        """A face crop (WebP) or voice clip (WAV) made once by a query worker and stored beside the event's derived
        objects (``Task.entity_sample_media``), read here from the API's object store (its bytes: a crop is a few
        kB, a clip at most ``VOICE_CLIP_S`` seconds). Raises NotFound, MediaMissing (the reason), NotOffered
        without the object store."""
        from engram.api.service.media import read_object  # the stores, when a page asks for a sample

        if self.objects is None:
            raise NotOffered("media are read beside the API: this service was made without its object store")
        got = self._task(Task.entity_sample_media, tenant_id, str(entity_id), sample_key)
        if got is None:
            raise NotFound(f"no sample {sample_key[:80]} of entity {entity_id}")
        if "missing" in got:
            raise MediaMissing(got["missing"])
        return read_object(self.objects, got["key"], whole=True, mime=got["mime"])

    # --- the ledger and media, read beside the API ---------------------------------------------------------------
    def _ledger(self) -> Any:
        if self.ledger is None:
            raise NotOffered("the ledger is read beside the API: this service was made without it")
        return self.ledger

    def events(
        self, tenant_id: str, user_id: str | None = None, status: EventStatus | None = None, limit: int = 100
    ) -> list[LedgerRecord]:
        ledger = self._ledger()
        if user_id is None:
            return ledger.records(tenant_id, status, limit)
        mine = [r for r in ledger.user_events(tenant_id, user_id) if status is None or r.status is status]
        return sorted(mine, key=lambda r: r.updated_at, reverse=True)[:limit]

    def event_counts(self, tenant_id: str) -> dict[EventStatus, int]:
        return self._ledger().counts(tenant_id)

    def retry_event(self, tenant_id: str, event_id: uuid.UUID) -> LedgerRecord | None:
        """The failed event queued again in the ledger (``Ledger.retry``) and published to ``ingest``; its record
        (queued) after, or None when it is unknown, another tenant's or not failed. A publish that fails leaves it
        queued: beat's sweep for stalled events publishes it again (``workers.ingest.redeliver_stalled``)."""
        ledger = self._ledger()
        rec = ledger.get(event_id)
        if rec is None or rec.tenant_id != tenant_id:
            return None
        event = ledger.retry(event_id)
        if event is None:
            return None
        try:
            self.celery.send_task(
                Task.ingest.value,
                args=[event.model_dump(mode="json")],
                task_id=str(event_id),
                retry_policy=REQUEST_PUBLISH_RETRY,
                ignore_result=True,
            )
        except Exception as exc:  # noqa: BLE001 (the broker's errors are many: queued, the sweep publishes it)
            log.warning(
                "retry not published; the stalled-event sweep will",
                event_id=str(event_id),
                error=f"{type(exc).__name__}: {exc}",
            )
        return ledger.get(event_id)

    def users(self, tenant_id: str) -> list[str]:
        """The users of the tenant's most recent ``USERS_SCAN`` events, reused for ``USERS_TTL_S`` seconds."""
        ledger = self._ledger()
        with self._users_lock:
            at, found = self._users.get(tenant_id, (0.0, []))
            if time.monotonic() - at > USERS_TTL_S:
                found = sorted({r.user_id for r in ledger.records(tenant_id, None, USERS_SCAN)})
                self._users[tenant_id] = (time.monotonic(), found)
            return list(found)

    def storage(self, tenant_id: str) -> StorageUse:
        """``workers.stores.retention.storage_use`` beside the API: the tenant's objects by kind from the object
        store's listing (every tenant's objects are listed: the measure is reused for ``STORAGE_TTL_S`` seconds),
        the API's data dir's files (null store and ledger where they are a Qdrant server and Redis). Raises
        NotOffered without the ledger or the object store."""
        from engram.workers.stores.retention import storage_use  # the stores' listing, when a page asks for it

        if self.objects is None:
            raise NotOffered(
                "the bytes stored are measured beside the API: this service was made without its object store"
            )
        rt = SimpleNamespace(settings=self.settings, objects=self.objects, ledger=self._ledger())
        with self._users_lock:
            found = self._storage.get(tenant_id)
            if found is None or time.monotonic() - found[0] > STORAGE_TTL_S:
                found = (time.monotonic(), storage_use(rt, tenant_id))
                self._storage[tenant_id] = found
            return found[1].model_copy()

    def timeline(self, req: TimelineRequest) -> MemoryPage:
        """``workers.memory.timeline.read_timeline`` on a query worker."""
        return MemoryPage.model_validate(self._task(Task.timeline, req.model_dump(mode="json")))

    def _observation(self, tenant_id: str, observation_id: uuid.UUID, user_id: str | None) -> MemoryRecord:
        if self.objects is None:
            raise NotOffered("media are read beside the API: this service was made without its object store")
        rec = self.get_memory(tenant_id, observation_id)
        if rec is None or rec.memory_type is not MemoryType.observation or (user_id and rec.user_id != user_id):
            raise NotFound(f"no observation {observation_id}")
        return rec

    def media(self, tenant_id: str, observation_id: uuid.UUID, user_id: str | None = None) -> MediaObject:
        """The original's key, type and size; its ``path`` on a local object store, else neither path nor data:
        read it from ``objects`` (the web app streams it with HTTP ranges, ``api.ui.signin``)."""
        from engram.api.service.media import original_object  # Pillow and the stores, when a page asks for media

        return original_object(self.objects, self._observation(tenant_id, observation_id, user_id), whole=False)

    def thumbnail(self, tenant_id: str, observation_id: uuid.UUID, user_id: str | None = None) -> MediaObject:
        """The thumbnail stored at ingest, else made now and stored (``api.service.media.thumbnail_object``)."""
        from engram.api.service.media import thumbnail_object  # Pillow and the stores, when a page asks for one

        return thumbnail_object(self.objects, self._observation(tenant_id, observation_id, user_id))
