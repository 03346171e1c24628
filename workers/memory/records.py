"""Memory records: get, list, delete, export, and forget a user entirely (the tasks: ``workers.admin``).

Every call is scoped to a tenant: an id of another tenant is treated as unknown. Items are read from the
vector store as stored, with ``schemas.memory_admin.HIDDEN_FIELDS`` removed (a knowledge-vault entry comes
without its encrypted secret).

Forgetting a user (the right to erasure) deletes, for one (tenant, user):

1. the user's points in every collection (observations, the six memory types including the knowledge
   vault), and the user's encrypted vault entries at rest, through the vault's
   own API (``workers.memory.vault.list_entries`` / ``delete_entries``): every entry kept for the user, those
   indexed in ``knowledge_vault`` and those the user's observations point to with a
   ``[vault:<entry id> ...]`` placeholder;
2. the tenant's entities that only the user's observations named (a chat speaker known from the user's
   chats alone), the user's own entity included; one that other users' observations still name (the user as a
   chat partner of another user's) stays as a person, without the user's samples, links and the names only the
   user gave it (``workers.memory.entities.forget_user_entities``);
3. the ledger's records of the user's events (with their segments, content hashes and last kept frames);
4. the objects of those events: what ingest cut from them (``derived/<tenant>/<event>/``: keyframes, audio
   chunks) and each published object (``media/<tenant>/<sha256>.<ext>``) that no remaining event of the
   tenant references in the ledger and no remaining observation names as its ``object_key``. Objects are
   content-addressed per tenant, so another user who published the same bytes keeps them. The OCR text
   cached for a deleted image (``cache/<tenant>/ocr/<model>/<sha256 of its pixels>.json``) goes with it: the
   observations keep the digest of the pixels they read (``pixel_digests``), so no image is decoded for it
   (but those of observations stored before they kept it: ``workers.memory.forget.delete_objects``).

5. then what every forget ends with (``workers.memory.forget.leave_nothing``): the embedding cache emptied,
   SQLite's freed pages overwritten and dropped, and the embedded store's collections rewritten without the
   deleted points' bytes.

Deleting one observation or memory by id is a scoped forget (``workers.memory.forget``).

Events of the user still queued or processing may write points after a forget; forget once ingestion
has settled (``engram status``).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import structlog

from engram.schemas.memories import MemoryType
from engram.schemas.memory_admin import (
    HIDDEN_FIELDS,
    ForgetReport,
    ForgetScope,
    MemoryPage,
    MemoryRecord,
    UserExport,
)
from engram.workers.memory import vault
from engram.workers.memory.entities import forget_user_entities
from engram.workers.memory.forget import delete_objects, forget, leave_nothing, pixel_digests
from engram.workers.memory.holdings import why_empty
from engram.workers.runtime import Runtime
from engram.workers.stores import models as qm
from engram.workers.stores.vectors import COLLECTIONS, ENTITIES, OBSERVATIONS, collection_for, tenant_filter

log = structlog.get_logger(__name__)


def _time(ts: float | None) -> datetime | None:
    return datetime.fromtimestamp(ts, UTC) if ts is not None else None


def to_record(memory_type: MemoryType, point: qm.Record) -> MemoryRecord:
    """A stored point as a MemoryRecord (hidden fields removed)."""
    p = point.payload or {}
    return MemoryRecord(
        id=uuid.UUID(str(point.id)),
        memory_type=memory_type,
        tenant_id=p["tenant_id"],
        user_id=p.get("user_id"),
        time=_time(p.get("start_ts")),
        time_end=_time(p.get("end_ts")),
        text=p.get("text") or p.get("summary") or p.get("caption") or p.get("value") or p.get("title") or "",
        payload={k: v for k, v in p.items() if k not in HIDDEN_FIELDS},
    )


def _find(rt: Runtime, tenant_id: str, memory_id: uuid.UUID) -> tuple[MemoryType, qm.Record] | None:
    for mtype in MemoryType:
        for point in rt.vectors.retrieve(collection_for(mtype), [memory_id]):
            if (point.payload or {}).get("tenant_id") == tenant_id:
                return mtype, point
    return None


def get_memory(rt: Runtime, tenant_id: str, memory_id: uuid.UUID) -> MemoryRecord | None:
    """The tenant's observation or memory with this id (any type), or None (unknown or another tenant's)."""
    found = _find(rt, tenant_id, memory_id)
    return to_record(*found) if found else None


def list_memories(
    rt: Runtime, tenant_id: str, memory_type: MemoryType, user_id: str | None = None, limit: int = 50, offset: int = 0
) -> MemoryPage:
    """A page of one type, newest content first (by the start of the span it covers); an empty one says why
    (``MemoryPage.empty``: ``workers.memory.holdings.why_empty``). Cost grows with ``offset + limit`` (Qdrant's
    ordered scroll has no offset)."""
    flt = tenant_filter(tenant_id, user_id)
    coll = collection_for(memory_type)
    points = rt.vectors.newest(coll, flt, offset + limit)[offset:]
    total = rt.vectors.count(coll, flt)
    return MemoryPage(
        memory_type=memory_type,
        user_id=user_id,
        total=total,
        limit=limit,
        offset=offset,
        items=[to_record(memory_type, p) for p in points],
        empty=None if total else why_empty(rt, tenant_id, user_id),
    )


def delete_memory(rt: Runtime, tenant_id: str, memory_id: uuid.UUID) -> MemoryType | None:
    """Delete the tenant's observation or memory with this id, leaving nothing of it behind
    (``workers.memory.forget``: an observation's memories rewritten without it or deleted, its objects, cached
    text and the store's files); returns its type, or None when unknown."""
    found = _find(rt, tenant_id, memory_id)
    if found is None:
        return None
    forget(rt, tenant_id, ForgetScope(memory_ids=[memory_id]))
    log.info("memory deleted", tenant=tenant_id, memory_id=str(memory_id), memory_type=found[0].value)
    return found[0]


def export_user(rt: Runtime, tenant_id: str, user_id: str) -> UserExport:
    """Everything stored about the user: ledger events and every observation and memory, with provenance,
    each type newest first, vault entries without their secrets."""
    flt = tenant_filter(tenant_id, user_id)
    memories = {}
    for mtype in MemoryType:
        points = rt.vectors.scroll(collection_for(mtype), flt)
        points.sort(key=lambda p: -(p.payload or {}).get("start_ts", float("-inf")))
        memories[mtype] = [to_record(mtype, p) for p in points]
    return UserExport(
        tenant_id=tenant_id,
        user_id=user_id,
        exported_at=datetime.now(UTC),
        events=rt.ledger.user_events(tenant_id, user_id),
        memories=memories,
    )


def forget_user(rt: Runtime, tenant_id: str, user_id: str) -> ForgetReport:
    """Delete everything stored about one user of a tenant (see the module docstring for what and in which
    order); returns what was deleted and which shared objects were kept."""
    owned = tenant_filter(tenant_id, user_id)
    events = rt.ledger.user_events(tenant_id, user_id)
    observations = rt.vectors.scroll(OBSERVATIONS, owned)
    payloads = [o.payload or {} for o in observations]
    event_ids = list(
        dict.fromkeys(
            [*(r.event_id for r in events), *(uuid.UUID(p["event_id"]) for p in payloads if p.get("event_id"))]
        )
    )
    media_keys = sorted({r.object_key for r in events} | {p["object_key"] for p in payloads if p.get("object_key")})
    vault_ids = sorted(
        {str(p.id) for p in rt.vectors.scroll(collection_for(MemoryType.knowledge_vault), owned)}
        | {str(v) for v in vault.referenced_entries([json.dumps(p) for p in payloads])}
        | {str(e.id) for e in vault.list_entries(rt, tenant_id, user_id)}
    )

    deleted: dict[str, int] = {}
    for coll in (c for c in COLLECTIONS if c != ENTITIES):  # the user's own entity may be others' memory too
        deleted[coll] = rt.vectors.count(coll, owned)
        if deleted[coll]:
            rt.vectors.delete(coll, owned)
    entities_deleted = forget_user_entities(rt, tenant_id, user_id, observations)
    rt.ledger.forget_events(tenant_id, event_ids)

    doomed, objects_kept = [], []
    # vault entry ids are per user (an HMAC over tenant, user and secret): never shared
    vault_deleted = vault.delete_entries(rt, tenant_id, vault_ids)
    for eid in event_ids:
        doomed += rt.objects.keys(f"derived/{tenant_id}/{eid}/")
    for key in media_keys:
        if not key.startswith(f"media/{tenant_id}/"):
            continue  # not this tenant's content-addressed media: never ours to delete
        if rt.ledger.object_references(tenant_id, key) or rt.vectors.count(
            OBSERVATIONS, tenant_filter(tenant_id, object_key=key)
        ):
            objects_kept.append(key)
        elif rt.objects.exists(key):
            doomed.append(key)
    digests = pixel_digests(tenant_id, payloads, objects_kept)
    objects_deleted = [*vault_deleted, *delete_objects(rt, tenant_id, doomed, digests)]
    leave_nothing(rt, [c for c, n in deleted.items() if n] + [ENTITIES])
    report = ForgetReport(
        tenant_id=tenant_id,
        user_id=user_id,
        points_deleted=deleted,
        event_ids=event_ids,
        objects_deleted=objects_deleted,
        objects_kept=objects_kept,
        entities_deleted=entities_deleted,
    )
    log.info(
        "user forgotten",
        tenant=tenant_id,
        user=user_id,
        points=sum(deleted.values()),
        events=len(event_ids),
        objects_deleted=len(objects_deleted),
        objects_kept=len(objects_kept),
        entities=entities_deleted,
    )
    return report
