"""The timeline read (the web app's Timeline screen, issue 42): a tenant's observations in a time span, newest
first, with only the payload fields a timeline shows. Used by ``api.service.embedded.EmbeddedService`` in process
and by the query worker's ``Task.timeline`` (``workers.admin.timeline_task``) for ``api.service.queue``.

Cost: the engine orders by ``start_ts`` (a payload index) and returns the fields asked for; the OCR boxes, words,
faces and voices of a frame stay on disk (the item's own page reads them with ``get_memory``). The day's count is
exact (``VectorStore.count``).
"""

from __future__ import annotations

from typing import Any

from engram.schemas.memories import MemoryType
from engram.schemas.memory_admin import MemoryPage
from engram.schemas.timeline import TimelineRequest
from engram.workers.memory.records import to_record
from engram.workers.stores import models as qm
from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter

#: The payload fields a timeline's records carry: where, when, whose, what it says in brief. A screenshot's OCR
#: text is left out (a frame is drawn as its thumbnail; its text is on the item's page), as are the OCR boxes,
#: words, faces and voices.
TIMELINE_FIELDS = ("tenant_id", "user_id", "device_id", "event_id", "segment_index", "kind", "app", "window",
                   "start_ts", "end_ts", "text", "speaker", "session_id", "message_id", "object_key", "source_name",
                   "start_s", "end_s", "entity_ids")


def timeline_filter(req: TimelineRequest) -> qm.Filter:
    """The vector-store filter of a timeline request: tenant and user, the time span on ``start_ts`` (epoch
    seconds, ``[time_from, time_to)``), and the kinds, apps and devices matched exactly."""
    conds: list[Any] = list(tenant_filter(req.tenant_id, req.user_id).must or [])
    if req.time_from or req.time_to:
        conds.append(qm.FieldCondition(key="start_ts", range=qm.Range(
            gte=req.time_from.timestamp() if req.time_from else None,
            lt=req.time_to.timestamp() if req.time_to else None)))
    for key, values in (("kind", [k.value for k in req.kinds or []]), ("app", req.apps), ("device_id", req.devices)):
        if values:
            conds.append(qm.FieldCondition(key=key, match=qm.MatchAny(any=list(values))))
    return qm.Filter(must=conds)


def read_timeline(rt: Any, req: TimelineRequest, fields: tuple[str, ...] = TIMELINE_FIELDS) -> MemoryPage:
    """``req``'s page of observations from ``rt``'s vector store (a ``workers.runtime.Runtime``), newest first,
    each record's payload holding ``fields`` only, and the total in the span."""
    flt = timeline_filter(req)
    points = rt.vectors.newest(OBSERVATIONS, flt, req.offset + req.limit, with_payload=list(fields))[req.offset:]
    total = rt.vectors.count(OBSERVATIONS, flt)
    return MemoryPage(memory_type=MemoryType.observation, user_id=req.user_id, total=total, limit=req.limit,
                      offset=req.offset, items=[to_record(MemoryType.observation, p) for p in points])
