"""The timeline read (the web app's Timeline screen, issue 42): a tenant's observations in a time span, newest
first, with only the payload fields a timeline shows. Used by ``api.service.embedded.EmbeddedService`` in process
and by the query worker's ``Task.timeline`` (``workers.admin.timeline_task``) for ``api.service.queue``.

Cost: Qdrant Edge reads a point's whole payload (its OCR boxes and words too) whatever fields are asked for: on a
day of 1,680 frames at load 11, the ordered scroll takes 12 ms without payloads and 280-340 ms with only the
timeline's fields. So a timeline is read in two steps through the store's public API: the span's ids in order
without payloads (``VectorStore.newest(with_payload=False)``), then the payloads of the ids not read lately
(``VectorStore.retrieve`` with ``TIMELINE_FIELDS``). Records read are kept per open store (``CACHE_SIZE`` points,
``CACHE_TTL_S`` seconds: a record's fields do not change once stored, but for an entity merge's ``entity_ids``), so a
day shown again, or a range that overlaps it, reads only the ids: the first view still reads every payload. A point
deleted is gone from the ids at once. The count is exact (``VectorStore.count``).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from cachetools import TTLCache

from engram.schemas.memories import MemoryType
from engram.schemas.memory_admin import MemoryPage, MemoryRecord
from engram.schemas.timeline import TimelineRequest
from engram.workers.memory.records import to_record
from engram.workers.stores import models as qm
from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter

#: The payload fields a timeline's records carry: where, when, whose, what it says in brief. A screenshot's OCR
#: text is left out (a frame is drawn as its thumbnail; its text is on the item's page), as are the OCR boxes,
#: words, faces and voices.
TIMELINE_FIELDS = (
    "tenant_id",
    "user_id",
    "device_id",
    "event_id",
    "segment_index",
    "kind",
    "app",
    "window",
    "start_ts",
    "end_ts",
    "text",
    "speaker",
    "session_id",
    "message_id",
    "object_key",
    "source_name",
    "start_s",
    "end_s",
    "entity_ids",
)


#: Timeline records kept per process (a busy day is 1,680; ~2 kB each), and for how long, seconds.
CACHE_SIZE = 20_000
CACHE_TTL_S = 300.0
#: Each open store's records (a store reopened, or another data dir, starts with none).
_caches: weakref.WeakKeyDictionary[Any, TTLCache[str, MemoryRecord]] = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def clear_cache() -> None:
    """Forget the records kept (the next timeline reads every payload again)."""
    with _cache_lock:
        _caches.clear()


def timeline_filter(req: TimelineRequest) -> qm.Filter:
    """The vector-store filter of a timeline request: tenant and user, the time span on ``start_ts`` (epoch
    seconds, ``[time_from, time_to)``), and the kinds, apps and devices matched exactly."""
    conds: list[Any] = list(tenant_filter(req.tenant_id, req.user_id).must or [])
    if req.time_from or req.time_to:
        conds.append(
            qm.FieldCondition(
                key="start_ts",
                range=qm.Range(
                    gte=req.time_from.timestamp() if req.time_from else None,
                    lt=req.time_to.timestamp() if req.time_to else None,
                ),
            )
        )
    for key, values in (("kind", [k.value for k in req.kinds or []]), ("app", req.apps), ("device_id", req.devices)):
        if values:
            conds.append(qm.FieldCondition(key=key, match=qm.MatchAny(any=list(values))))
    return qm.Filter(must=conds)


def read_timeline(rt: Any, req: TimelineRequest, fields: tuple[str, ...] = TIMELINE_FIELDS) -> MemoryPage:
    """``req``'s page of observations from ``rt``'s vector store (a ``workers.runtime.Runtime``), newest first,
    each record's payload holding ``fields`` only, and the total in the span (see the module's docstring for how
    it is read; records of ``TIMELINE_FIELDS`` are kept)."""
    flt = timeline_filter(req)
    ids = [
        str(p.id)
        for p in rt.vectors.newest(OBSERVATIONS, flt, req.offset + req.limit, with_payload=False)[req.offset :]
    ]
    keep = fields == TIMELINE_FIELDS
    with _cache_lock:
        cache = _caches.setdefault(rt.vectors, TTLCache(CACHE_SIZE, CACHE_TTL_S))
        found: dict[str, MemoryRecord | None] = {i: cache.get(i) if keep else None for i in ids}
    missing = [i for i, rec in found.items() if rec is None]
    if missing:
        read = {
            str(p.id): to_record(MemoryType.observation, p)
            for p in rt.vectors.retrieve(OBSERVATIONS, missing, with_payload=list(fields))
        }
        found.update(read)
        if keep:
            with _cache_lock:
                cache.update(read)
    total = rt.vectors.count(OBSERVATIONS, flt)
    items = [rec for i in ids if (rec := found.get(i)) is not None]  # one deleted between the two reads is gone
    return MemoryPage(
        memory_type=MemoryType.observation,
        user_id=req.user_id,
        total=total,
        limit=req.limit,
        offset=req.offset,
        items=items,
    )
