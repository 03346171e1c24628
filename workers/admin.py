"""Stage ``admin`` (queues ``query``, ``consolidate`` and ``maintenance``): the tasks that manage what is
remembered, run where the vector store is: memory records (``memory.records``: get, list, delete, export, forget a
user; ``memory.corrections``: a user's correction), entities (``memory.entities``: list, name, merge;
``memory.corrections``: "not this person", samples and their media), beat's archive of faded memories
(``memory.dynamics``) and its hourly sweep of staged uploads (``stores.objects.expire_staged``). The API never
opens the vector store: it sends these by name (``workers.tasks.Task``) and awaits the answer.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import structlog

from engram.schemas.entities import EntityList, EntitySummary
from engram.schemas.memories import MemoryType
from engram.schemas.memory_admin import (
    ForgetReport,
    ForgetScope,
    ForgetScopeReport,
    MemoryPage,
    MemoryRecord,
    UserExport,
)
from engram.schemas.timeline import TimelineRequest
from engram.workers.app import task
from engram.workers.memory import corrections
from engram.workers.memory.dynamics import archive_decayed
from engram.workers.memory.entities import list_entities, merge_entities, name_entity, summary
from engram.workers.memory.forget import forget
from engram.workers.memory.records import delete_memory, export_user, forget_user, get_memory, list_memories
from engram.workers.memory.timeline import read_timeline
from engram.workers.runtime import runtime
from engram.workers.stores.objects import STAGING_GRACE, expire_staged
from engram.workers.tasks import Task

#: The most entities ``entity_samples_many_task`` reads in one request.
SAMPLES_MANY = 200

log = structlog.get_logger(__name__)


# --- memory records ---------------------------------------------------------------------------------------------


@task(Task.memory_get, "request")
def get_task(tenant_id: str, memory_id: str) -> MemoryRecord | None:
    """``get_memory`` on the query worker."""
    return get_memory(runtime(), tenant_id, uuid.UUID(memory_id))


@task(Task.memory_list, "request")
def list_task(
    tenant_id: str, memory_type: str, user_id: str | None = None, limit: int = 50, offset: int = 0
) -> MemoryPage:
    """``list_memories`` on the query worker."""
    return list_memories(runtime(), tenant_id, MemoryType(memory_type), user_id, limit, offset)


@task(Task.memory_delete, "request")
def delete_task(tenant_id: str, memory_id: str) -> str | None:
    """``delete_memory`` on the query worker; returns the deleted item's type, or None."""
    found = delete_memory(runtime(), tenant_id, uuid.UUID(memory_id))
    return found.value if found else None


@task(Task.memory_export, "request")
def export_task(tenant_id: str, user_id: str) -> UserExport:
    """``export_user`` on the query worker."""
    return export_user(runtime(), tenant_id, user_id)


@task(Task.memory_forget, "request")
def forget_task(tenant_id: str, user_id: str) -> ForgetReport:
    """``forget_user`` on the query worker."""
    return forget_user(runtime(), tenant_id, user_id)


@task(Task.timeline, "request")
def timeline_task(request: TimelineRequest) -> MemoryPage:
    """``read_timeline`` on the query worker (the web app's Timeline screen in the distributed mode)."""
    return read_timeline(runtime(), request)


@task(Task.memory_update, "request")
def update_task(tenant_id: str, memory_id: str, text: str) -> dict | None:
    """``corrections.update_memory`` (a new version superseding the old one) on the query worker: ``{"record":
    the new version's MemoryRecord as JSON}``, ``{"refused": why}`` for a correction it refuses (an empty text,
    an observation, a version already superseded: its ValueError's message, for the person), or None when the id
    is no memory of the tenant's."""
    try:
        new = corrections.update_memory(runtime(), tenant_id, uuid.UUID(memory_id), text)
    except ValueError as exc:
        return {"refused": str(exc)}
    return None if new is None else {"record": new.model_dump(mode="json")}


@task(Task.memory_forget_scope, "request")
def forget_scope_task(tenant_id: str, scope: ForgetScope, dry_run: bool = False) -> ForgetScopeReport:
    """``workers.memory.forget.forget`` (a time range, an app, a device, events or ids) on the query worker."""
    return forget(runtime(), tenant_id, ForgetScope.model_validate(scope), dry_run)


# --- entities (``GET /v1/entities``, ``POST /v1/entities/{id}/name`` and ``/merge``) -----------------------------


@task(Task.entity_list, "request")
def entity_list_task(tenant_id: str) -> EntityList:
    """``list_entities`` on the query worker."""
    items = list_entities(runtime(), tenant_id)
    return EntityList(items=items, total=len(items))


@task(Task.entity_name, "request")
def entity_name_task(tenant_id: str, entity_id: str, name: str) -> EntitySummary | None:
    """``name_entity`` on the query worker, returning the named entity; None when it is not the tenant's."""
    try:
        return summary(name_entity(runtime(), tenant_id, entity_id, name))
    except KeyError:
        return None


@task(Task.entity_merge, "request")
def entity_merge_task(tenant_id: str, keep_id: str, drop_id: str, reason: str = "manual") -> EntitySummary | None:
    """``merge_entities`` on the query worker, returning the kept entity; None when either is not the tenant's."""
    try:
        return summary(merge_entities(runtime(), tenant_id, keep_id, drop_id, reason))
    except KeyError:
        return None


@task(Task.entity_split, "request")
def entity_split_task(tenant_id: str, entity_id: str, sample_key: str) -> EntitySummary | None:
    """ "Not this person" (``corrections.split_entity``) on the query worker: the new entity holding the sample;
    None when the entity or the sample is not the tenant's."""
    try:
        return summary(corrections.split_entity(runtime(), tenant_id, uuid.UUID(entity_id), sample_key))
    except KeyError:
        return None


@task(Task.entity_samples, "request")
def entity_samples_task(tenant_id: str, entity_id: str) -> list[dict] | None:
    """``corrections.entity_samples`` on the query worker (each sample's key, modality, time and observation), or
    None when the entity is not the tenant's."""
    return corrections.entity_samples(runtime(), tenant_id, uuid.UUID(entity_id))


@task(Task.entity_samples_many, "request")
def entity_samples_many_task(tenant_id: str, entity_ids: list[str]) -> dict[str, list[dict]]:
    """``corrections.entity_samples`` of each of ``entity_ids`` (at most ``SAMPLES_MANY``) in one request: the
    People page's persons, read with one round trip instead of one per person. Keyed by entity id; an entity that
    is not the tenant's is left out."""
    rt, out = runtime(), {}
    for eid in entity_ids[:SAMPLES_MANY]:
        got = corrections.entity_samples(rt, tenant_id, uuid.UUID(eid))
        if got is not None:
            out[eid] = got
    return out


@task(Task.memories_from, "request")
def memories_from_task(tenant_id: str, observation_id: str) -> list[dict]:
    """``corrections.memories_from`` on the query worker: the memories the observation fed (an item's page), as
    MemoryRecords' JSON."""
    return [
        r.model_dump(mode="json") for r in corrections.memories_from(runtime(), tenant_id, uuid.UUID(observation_id))
    ]


@task(Task.entity_sample_media, "request")
def entity_sample_media_task(tenant_id: str, entity_id: str, sample_key: str) -> dict | None:
    """A sample's face crop or voice clip made (once) and stored in the object store by the query worker
    (``corrections.sample_media``): ``{"key", "mime"}`` of the derived object, ``{"missing": why}`` when it
    cannot be made (the original gone, no face box, an unreadable recording), None for an unknown entity or
    sample. The API reads the object itself from the store."""
    try:
        key, mime = corrections.sample_media(runtime(), tenant_id, uuid.UUID(entity_id), sample_key)
    except KeyError:
        return None
    except LookupError as exc:
        return {"missing": str(exc)}
    return {"key": key, "mime": mime}


# --- beat's sweeps ------------------------------------------------------------------------------------------------


@task(Task.archive_decayed, "beat")
def archive_task() -> dict[str, int]:
    """Beat entry point (queue ``consolidate``): archive faded memories (``memory.dynamics.archive_decayed``)."""
    return archive_decayed(runtime())


@task(Task.expire_staged, "beat")
def expire_staged_task() -> dict[str, int]:
    """Beat's hourly sweep (queue ``maintenance``): staged uploads older than the URL lifetime
    (``upload_url_expiry_seconds``) plus an hour are deleted. Returns {"deleted": n}."""
    rt = runtime()
    n = expire_staged(rt.objects, timedelta(seconds=rt.settings.upload_url_expiry_seconds) + STAGING_GRACE)
    if n:
        log.info("staged uploads expired", deleted=n)
    return {"deleted": n}
