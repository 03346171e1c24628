"""Segments of many events run together on the embedded default, so the embedding model sees them in one
pass and the store one request, instead of one call and one upsert per segment (issue 15, "batching across
events").

Inside ``deferred_segments()`` the ``ingest`` stage plans each event as usual (validation, duplicates, the
segments) but its ``dispatch`` hands the segments' jobs to the context instead of starting one perceive → embed
→ link → store chain each; ``run_segments`` then runs them: perceive for each segment (its own task, so a bad
segment fails only its event, with its stage and reason, through ``workers.runtime.stage``), one embedding pass
over the observations of all of them (``embed_many``: each distinct text encoded once, in batches of
``models.embedding_batch_size`` sorted by length), then one link and one store over all of them
(``store_many``: an entity save per tenant, one upsert, the ledger updated per segment). When a joint step
raises, its segments run one by one, so one bad item fails only its own event (``runtime.run_together``).

Used by ``api.local.run_events`` (``engram ingest`` of many files). The distributed mode batches on its workers
instead (``workers.ingest.dispatch``: batched consumers of ``embed_many`` and ``store_many``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import structlog
from engram.schemas.jobs import ObservationBatch, ObservationBatches, SegmentJob
from engram.workers.app import signature
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
    """Run collected segment jobs inline (embedded default): perceive each (its own task: a bad segment fails
    only its event), then embed the observations of all of them in one pass (``embed_many``), then link and
    store them together (``store_many``: one entity save per tenant, one upsert, each segment recorded in the
    ledger). A joint step that fails runs segment by segment, so failures stay with their own event, which the
    stage marks failed with its reason (``runtime.run_together``). Returns how many observations were stored."""
    batches: list[ObservationBatch] = []
    for job in jobs:
        result = signature(Task.perceive).apply(args=[job])
        if result.successful():
            value = result.result
            batches.append(value if isinstance(value, ObservationBatch) else ObservationBatch.model_validate(value))
    if not batches:
        return 0
    embedded = signature(Task.embed_many).apply(args=[ObservationBatches(batches=batches)])
    if not embedded.successful():
        return 0
    stored = signature(Task.store_many).apply(args=[embedded.result])
    return int(stored.result) if stored.successful() else 0
