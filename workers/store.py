"""Stage ``store`` (queue ``store``): upsert observations into Qdrant's ``observations`` collection and
record the segment in the ledger (the event is done when all its segments are).

``store_batches`` stores the segments of many events together (one upsert): the embedded default's runner calls it
after ``link_batches`` (``workers.pipeline``), and the store worker's batched consumer ``store_batched``
(celery-batches) links and stores with them the segments it accumulated from ``embed_batched``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import structlog

from engram.schemas.jobs import EmbeddedBatch
from engram.schemas.observations import EmbeddedObservation
from engram.workers.app import task
from engram.workers.batching import consume
from engram.workers.memory.linking import link_batches
from engram.workers.metrics import OBSERVATIONS_WRITTEN, PUBLISH_TO_SEARCHABLE
from engram.workers.runtime import Runtime
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
    payload.update(
        start_ts=ts, end_ts=ts + duration, consolidated=False, memory_type="observation", stored_at=time.time()
    )  # consolidation's idle timeout counts from here
    vector = {DENSE: item.dense}
    if item.sentences:  # else the store gives it its own vector as its one row (``VectorStore.upsert``)
        vector[SENTENCES] = item.sentences
    if item.sparse_indices:
        vector[SPARSE] = qm.SparseVector(indices=item.sparse_indices, values=item.sparse_values)
    return qm.PointStruct(id=str(obs.id), vector=vector, payload=payload)


def store_batches(rt: Runtime, batches: list[EmbeddedBatch]) -> list[int]:
    """Write the observations of ``batches`` (segments of one or many events) in one store request (one
    ``retrieve`` and one ``upsert`` of the ``observations`` collection), then record the segments in the ledger
    together (``segments_done``; an event is done when all its segments are). Returns how many observations each
    batch wrote. Raises what the stores raise (``StoreBusy``...)."""
    points = [observation_point(item) for batch in batches for item in batch.items]
    if points:
        # a redelivered segment must not make consolidated observations pending again
        already = {
            str(r.id)
            for r in rt.vectors.retrieve(OBSERVATIONS, [p.id for p in points])
            if (r.payload or {}).get("consolidated")
        }
        for point in points:
            point.payload["consolidated"] = point.id in already
        rt.vectors.upsert(OBSERVATIONS, points)
    finished = rt.ledger.segments_done([(b.job.event.event_id, b.job.segment_index, len(b.items)) for b in batches])
    for batch, done in zip(batches, finished, strict=True):
        event = batch.job.event
        OBSERVATIONS_WRITTEN.labels(kind=event.kind.value).inc(len(batch.items))
        if done:
            log.info("event done", event_id=str(event.event_id))
            rec = rt.ledger.get(event.event_id)
            if rec is not None and rec.created_at is not None:
                PUBLISH_TO_SEARCHABLE.labels(kind=event.kind.value).observe(
                    (datetime.now(UTC) - rec.created_at).total_seconds()
                )
    return [len(batch.items) for batch in batches]


@task(Task.store_batched, "batch")
def store_batched(requests: list) -> int:
    """The distributed mode's link and store: a batched consumer (celery-batches) on the store worker of
    ``embed_batched``'s messages (each a list of ``EmbeddedBatch``, the segments of one pass at one priority; one
    ``EmbeddedBatch`` alone is read too), which links the segments it accumulated per tenant and writes them in
    one upsert, each segment recorded in the ledger. A bad segment fails alone; transient errors
    publish the batch again (``workers.batching.consume``). Returns the observations written."""
    _, counts = consume(store_batched, requests, EmbeddedBatch, [("link", link_batches), ("store", store_batches)])
    return sum(counts)
