"""Segments of many events run together on the embedded default, so the embedding model sees them in one
pass instead of one call per segment (issue 15, "batching across events").

Inside ``deferred_segments()`` the ``ingest`` stage plans each event as usual (validation, duplicates, the
segments) but its ``dispatch`` hands the segments' jobs to the context instead of starting one perceive → embed
→ link → store chain each; ``run_segments`` then runs them: perceive for each segment (its own task, so a bad
segment fails only its event, with its stage and reason, through ``workers.runtime.stage``), one embedding pass
over the observations of all of them (``memory.vectors.dense_vectors``: each distinct text encoded once, in
batches of ``models.embedding_batch_size`` sorted by length, written to the embedding cache), then each
segment's embed → link → store chain, whose embed finds its vectors in the cache. When the joint pass raises,
the segments embed alone, so one bad item fails only its own event.

Used by ``api.local.run_events`` (``engram ingest`` of many files). The distributed mode keeps one chain per
segment on its queues (the tasks there run in other processes).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import structlog
from celery import chain

from engram.schemas.jobs import ObservationBatch, SegmentJob
from engram.workers.app import signature
from engram.workers.memory.vectors import dense_vectors
from engram.workers.runtime import Runtime
from engram.workers.tasks import Task

log = structlog.get_logger(__name__)

_DEFERRED: ContextVar[list[SegmentJob] | None] = ContextVar("engram_deferred_segments", default=None)


def defer(job: SegmentJob) -> bool:
    """Collect ``job`` when called inside ``deferred_segments`` (``workers.ingest.dispatch`` asks first) and
    return True; False outside (the caller starts the job's chain itself)."""
    pending = _DEFERRED.get()
    if pending is None:
        return False
    pending.append(job)
    return True


@contextmanager
def deferred_segments() -> Iterator[list[SegmentJob]]:
    """Inside, ``ingest`` collects segment jobs into the yielded list instead of running them; run them
    afterwards with ``run_segments``. Contexts nest (each has its own list)."""
    token = _DEFERRED.set([])
    try:
        yield _DEFERRED.get()
    finally:
        _DEFERRED.reset(token)


def run_segments(rt: Runtime, jobs: list[SegmentJob]) -> int:
    """Run collected segment jobs inline (embedded default): perceive each, embed the observations of all of
    them in one pass, then each segment's embed → link → store chain. Failures stay with their own event (the
    stage marks it failed with its reason). Returns how many observations were embedded together (0 when the
    joint pass failed or nothing was perceived)."""
    batches: list[ObservationBatch] = []
    for job in jobs:
        result = signature(Task.perceive).apply(args=[job])
        if result.successful():
            value = result.result
            batches.append(value if isinstance(value, ObservationBatch) else ObservationBatch.model_validate(value))
    observations = [o for b in batches for o in b.observations]
    together = 0
    if observations:
        try:
            dense_vectors(rt, observations)  # fills the embedding cache for every segment's embed
            together = len(observations)
        except Exception as exc:  # noqa: BLE001 (each segment's own embed then meets its own error)
            log.warning("batched embedding failed; each segment embeds alone", segments=len(batches),
                        error=f"{type(exc).__name__}: {exc}"[:300])
    for batch in batches:
        chain(signature(Task.embed, batch), signature(Task.link), signature(Task.store)).apply_async()
    return together
