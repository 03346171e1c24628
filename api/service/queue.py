"""``QueueService``: the service layer for the HTTP routes in the distributed mode. Each call is sent to a query
worker through the ``query`` queue by its task's wire name (``workers.tasks.Task``: the API never imports a stage)
with a request's publish retry policy, and its JSON result is waited for up to one timeout,
``ENGRAM_SERVICE_TIMEOUT_SECONDS``.

Errors: ``ServiceUnavailable`` when the broker refuses the task (about 2 s when it is down), ``ServiceTimeout``
when no query worker answers in time, ``schemas.ask.AskFailed`` as the worker raised it (its message is ours),
``ServiceError`` for any other failure of the task (the reason is logged, not put in the message). Adding a memory,
the ledger, the timeline and media are the routes' own work (the object store and the ledger beside the API):
they raise ``NotOffered`` here. Safe to call from several threads (Celery's producer pool).
"""

from __future__ import annotations

import uuid
from typing import Any

import structlog
from celery.exceptions import TimeoutError as CeleryTimeout

from engram.api.service.base import (
    MediaObject,
    MemoryService,
    NotOffered,
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
from engram.schemas.settings import get_settings
from engram.workers.tasks import Task

log = structlog.get_logger(__name__)

#: A request publishing to the broker gives up within about 2 s when the broker is down (workers wait longer:
#: see ``task_publish_retry_policy`` in workers.app); the client retries the request.
REQUEST_PUBLISH_RETRY = {"max_retries": 3, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 1.0}


class QueueService(MemoryService):
    """The service on the query workers through ``celery`` (a configured producer app; see the module's
    docstring). ``timeout``: seconds per call (default ``ENGRAM_SERVICE_TIMEOUT_SECONDS``)."""

    def __init__(self, celery: Any, timeout: float | None = None) -> None:
        self.celery = celery
        self.timeout = timeout if timeout is not None else get_settings().service_timeout_seconds

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

    def list_memories(self, tenant_id: str, memory_type: MemoryType, user_id: str | None = None, limit: int = 50,
                      offset: int = 0) -> MemoryPage:
        return MemoryPage.model_validate(self._task(Task.memory_list, tenant_id, memory_type.value, user_id, limit,
                                                    offset))

    def update_memory(self, tenant_id: str, memory_id: uuid.UUID, text: str) -> MemoryRecord | None:
        raise NotOffered("editing a memory (a correction that supersedes it) is not built yet")

    def delete_memory(self, tenant_id: str, memory_id: uuid.UUID) -> MemoryType | None:
        kind = self._task(Task.memory_delete, tenant_id, str(memory_id))
        return None if kind is None else MemoryType(kind)

    def forget_user(self, tenant_id: str, user_id: str) -> ForgetReport:
        return ForgetReport.model_validate(self._task(Task.memory_forget, tenant_id, user_id))

    def forget_scope(self, tenant_id: str, scope: ForgetScope, dry_run: bool = False) -> ForgetScopeReport:
        return ForgetScopeReport.model_validate(self._task(Task.memory_forget_scope, tenant_id,
                                                           scope.model_dump(mode="json"), dry_run))

    def export_user(self, tenant_id: str, user_id: str) -> UserExport:
        return UserExport.model_validate(self._task(Task.memory_export, tenant_id, user_id))

    # --- entities ---------------------------------------------------------------------------------------------
    def list_entities(self, tenant_id: str) -> EntityList:
        return EntityList.model_validate(self._task(Task.entity_list, tenant_id))

    def name_entity(self, tenant_id: str, entity_id: uuid.UUID, name: str) -> EntitySummary | None:
        got = self._task(Task.entity_name, tenant_id, str(entity_id), name)
        return None if got is None else EntitySummary.model_validate(got)

    def merge_entities(self, tenant_id: str, keep_id: uuid.UUID, drop_id: uuid.UUID,
                       reason: str = "manual") -> EntitySummary | None:
        got = self._task(Task.entity_merge, tenant_id, str(keep_id), str(drop_id), reason)
        return None if got is None else EntitySummary.model_validate(got)

    def split_entity(self, tenant_id: str, entity_id: uuid.UUID, sample_key: str) -> EntitySummary | None:
        raise NotOffered("'not this person' (splitting a face or voice off an entity) is not built yet")

    # --- what the routes do not ask of the workers (the ledger and objects are read beside the API) -----------
    def events(self, *args: Any, **kwargs: Any) -> list[LedgerRecord]:
        raise NotOffered("the API reads events from its ledger (GET /v1/events/{id})")

    def event_counts(self, *args: Any, **kwargs: Any) -> dict[EventStatus, int]:
        raise NotOffered("event counts are not offered by the query workers")

    def users(self, *args: Any, **kwargs: Any) -> list[str]:
        raise NotOffered("listing a tenant's users is not offered by the query workers")

    def timeline(self, *args: Any, **kwargs: Any) -> MemoryPage:
        raise NotOffered("the timeline through the queue needs a task")

    def media(self, *args: Any, **kwargs: Any) -> MediaObject:
        raise NotOffered("media through the queue is not offered (the API presigns object URLs)")

    def thumbnail(self, *args: Any, **kwargs: Any) -> MediaObject:
        raise NotOffered("thumbnails through the queue are not offered")
