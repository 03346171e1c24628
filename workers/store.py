"""Stage ``store`` (queue ``store``): upsert observations into Qdrant's ``observations`` collection and
record the segment in the ledger (the event is done when all its segments are)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import structlog

from engram.schemas.jobs import EmbeddedBatch
from engram.schemas.observations import EmbeddedObservation
from engram.workers.app import task
from engram.workers.metrics import OBSERVATIONS_WRITTEN, PUBLISH_TO_SEARCHABLE
from engram.workers.runtime import runtime, stage
from engram.workers.stores import models as qm
from engram.workers.stores.vectors import DENSE, OBSERVATIONS, SENTENCES, SPARSE
from engram.workers.tasks import Task

log = structlog.get_logger(__name__)


def observation_point(item: EmbeddedObservation) -> qm.PointStruct:
    """The Qdrant point of an observation: payload is the observation plus float time fields
    (``start_ts``/``end_ts``, epoch seconds) for range filters, ``consolidated`` for the watermark and
    ``stored_at`` (epoch seconds) for consolidation's idle timeout."""
    obs = item.observation
    payload = obs.model_dump(mode="json")
    ts = obs.captured_at.timestamp()
    duration = (obs.end_s - obs.start_s) if obs.start_s is not None and obs.end_s is not None else 0.0
    payload.update(start_ts=ts, end_ts=ts + duration, consolidated=False, memory_type="observation",
                   stored_at=time.time())  # consolidation's idle timeout counts from here
    vector = {DENSE: item.dense}
    if item.sentences:  # else the store gives it its own vector as its one row (``VectorStore.upsert``)
        vector[SENTENCES] = item.sentences
    if item.sparse_indices:
        vector[SPARSE] = qm.SparseVector(indices=item.sparse_indices, values=item.sparse_values)
    return qm.PointStruct(id=str(obs.id), vector=vector, payload=payload)


@task(Task.store)
def store(batch: EmbeddedBatch) -> int:
    """Write the segment's observations; returns how many were written."""
    rt = runtime()
    event = batch.job.event
    with stage(rt, event, "store"):
        points = [observation_point(item) for item in batch.items]
        # a redelivered segment must not make consolidated observations pending again
        already = {str(r.id) for r in rt.vectors.retrieve(OBSERVATIONS, [p.id for p in points])
                   if (r.payload or {}).get("consolidated")}
        for point in points:
            point.payload["consolidated"] = point.id in already
        rt.vectors.upsert(OBSERVATIONS, points)
        OBSERVATIONS_WRITTEN.labels(kind=event.kind.value).inc(len(points))
        if rt.ledger.segment_done(event.event_id, batch.job.segment_index, len(batch.items)):
            log.info("event done")
            rec = rt.ledger.get(event.event_id)
            if rec is not None and rec.created_at is not None:
                PUBLISH_TO_SEARCHABLE.labels(kind=event.kind.value).observe(
                    (datetime.now(UTC) - rec.created_at).total_seconds())
    return len(batch.items)
