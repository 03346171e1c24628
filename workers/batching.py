"""Segments of many events run together on the embedded default, so the embedding model sees them in one
pass and the store one request, instead of one call and one upsert per segment (issue 15, "batching across
events").

Inside ``deferred_segments()`` the ``ingest`` stage plans each event as usual (validation, duplicates, the
segments) but its ``dispatch`` hands the segments' jobs to the context instead of starting one perceive → embed
→ link → store chain each; ``run_segments`` then runs them: perceive for each segment (its own task, so a bad
segment fails only its event, with its stage and reason, through ``workers.runtime.stage``), then, for every
``ROUND_OBSERVATIONS`` observations perceived, one embedding pass over them (``embed_many``: each distinct text
encoded once, in batches of up to ``models.embedding_batch_size`` of similar token counts), then one link and
one store over them (``store_many``: an entity save per tenant, one upsert, the ledger updated per segment).
When a joint step raises, its segments run one by one, so one bad item fails only its own event
(``runtime.run_together``).

Used by ``api.local.run_events`` (``engram ingest`` of many files). The distributed mode batches on its workers
instead (``workers.ingest.dispatch``): ``embed_batched`` and ``store_batched``, celery-batches consumers that
run the segments a worker accumulated through the same steps (``consume``: each joint, then each alone on
failure; transient errors published again with backoff, as the batch is acknowledged whatever it raises).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import structlog
from celery.utils.time import get_exponential_backoff_interval
from pydantic import BaseModel, ValidationError

from engram.schemas.events import EventStatus
from engram.schemas.jobs import ObservationBatch, ObservationBatches, SegmentJob
from engram.workers.app import signature
from engram.workers.runtime import STAGE_TASK_OPTIONS, TRANSIENT_ERRORS, Runtime, run_together, runtime
from engram.workers.tasks import Task

log = structlog.get_logger(__name__)

M = TypeVar("M", bound=BaseModel)

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


#: Observations perceived before a round is embedded and stored (``run_segments``): enough for full model batches
#: (``models.embedding_batch_size``, 64) across many events, few enough that a long upload (up to
#: ``ENGRAM_MAX_UPLOAD_SEGMENTS`` segments) never holds all its observations and vectors in memory at once, and
#: that what is done is stored as it goes (an interrupted ingest resumes after the rounds stored).
ROUND_OBSERVATIONS = 512


def run_segments(rt: Runtime, jobs: list[SegmentJob], round_observations: int = ROUND_OBSERVATIONS) -> int:
    """Run collected segment jobs inline (embedded default), in rounds: perceive segments (each its own task: a
    bad segment fails only its event) until they hold ``round_observations`` observations (or the jobs end), then
    embed that round's observations in one pass (``embed_many``) and link and store them together
    (``store_many``: one entity save per tenant, one upsert, each segment recorded in the ledger). A joint step
    that fails runs segment by segment, so failures stay with their own event, which the stage marks failed with
    its reason (``runtime.run_together``). Returns how many observations were stored."""
    stored, batches, held = 0, [], 0
    for at, job in enumerate(jobs):
        result = signature(Task.perceive).apply(args=[job])
        if result.successful():
            value = result.result
            batch = value if isinstance(value, ObservationBatch) else ObservationBatch.model_validate(value)
            batches.append(batch)
            held += len(batch.observations)
        if batches and (held >= round_observations or at == len(jobs) - 1):
            stored += _embed_and_store(batches)
            batches, held = [], 0
    return stored


def _embed_and_store(batches: list[ObservationBatch]) -> int:
    """One round of ``run_segments``: embed, then link and store; returns the observations stored. Empties
    ``batches`` and the embedded batches after, stored or not.

    A task applied in process returns a Celery ``EagerResult``, which holds its return value in a reference cycle
    (its ``on_ready`` promise is fulfilled with the result itself), so perceive's observations and embed's vectors
    (~1,500 Python floats per chat turn) would outlive the round until the garbage collector's next pass, which
    would traverse them (788 LoCoMo turns: ~940,000 list items, ~0.02 s per collection). Emptied here, they are
    freed as the round ends."""
    embedded = None
    try:
        embedded = signature(Task.embed_many).apply(args=[ObservationBatches(batches=batches)])
        if not embedded.successful():
            return 0
        stored = signature(Task.store_many).apply(args=[embedded.result])
        return int(stored.result) if stored.successful() else 0
    finally:
        if embedded is not None and embedded.successful():
            embedded.result.batches.clear()
        for batch in batches:
            batch.observations.clear()


def batch_items(requests: list, model: type[M]) -> list[tuple[Any, M]]:
    """The items of a batched consumer's buffered requests (celery-batches' ``SimpleRequest``s), each paired with
    its request: a request's first argument is one ``model`` (a pydantic model with a ``job``) or a list of them
    (``embed_batched`` sends the segments of one pass at one priority as one message). An item that does not
    validate is logged and left out, alone: its message is acknowledged with the batch, as it would fail the
    same way again."""
    out = []
    for request in requests:
        try:
            given = request.args[0]
        except (IndexError, TypeError):
            given = None
        for value in given if isinstance(given, list) else [given]:
            try:
                out.append((request, model.model_validate(value)))
            except ValidationError as exc:
                log.error("batched message dropped: not a valid job", task=request.name, task_id=request.id,
                          error=str(exc).splitlines()[0][:300])
    return out


def consume(task: Any, requests: list, model: type[M], steps: list[tuple[str, Callable[[Runtime, list], list]]]
            ) -> tuple[list[tuple[Any, M]], list]:
    """Run a batched consumer's buffered ``requests`` through ``steps`` ((stage name, function of the runtime
    and a list of items → one output per item)), each over all items at once and, when that fails, item by
    item, so a bad item fails only its own event (``runtime.run_together``). Returns ``(pairs, outputs)``: the
    (request, item) pairs read and the last step's outputs for the items that succeeded.

    A transient error (``runtime.TRANSIENT_ERRORS``) publishes every request of the batch again to ``task``
    after an exponential backoff with full jitter (the stage options' ``retry_backoff`` and
    ``retry_backoff_max``; each stage is idempotent), up to ``max_retries`` times, then marks the events failed
    with the reason: the batch itself is acknowledged whatever it raises (celery-batches), so the retry is ours.
    A worker killed mid-batch leaves the messages unacknowledged: the broker redelivers them."""
    rt = runtime()
    pairs = batch_items(requests, model)
    values: list = [item for _, item in pairs]
    name = steps[0][0]
    try:
        for name, step in steps:
            values = run_together(rt, name, values, functools.partial(step, rt), lambda v: v.job.event)
    except TRANSIENT_ERRORS as exc:
        _retry_later(task, rt, name, pairs, exc)
        return pairs, []
    return pairs, values


def _retry_later(task: Any, rt: Runtime, name: str, pairs: list[tuple[Any, Any]], exc: BaseException) -> None:
    options = STAGE_TASK_OPTIONS
    reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
    published: set[int] = set()  # a message of several segments is published again once
    for request, item in pairs:
        retries = int((request.kwargs or {}).get("retries", 0))
        if retries >= options["max_retries"]:
            rt.ledger.mark(item.job.event.event_id, EventStatus.failed, stage=name,
                           reason=f"{reason} (retries exhausted)")
            log.error("event failed", event_id=str(item.job.event.event_id), stage=name, reason=reason)
            continue
        if id(request) in published:
            continue
        published.add(id(request))
        countdown = get_exponential_backoff_interval(options["retry_backoff"], retries,
                                                     options["retry_backoff_max"], options["retry_jitter"])
        task.apply_async(args=list(request.args), kwargs={"retries": retries + 1}, countdown=countdown,
                         priority=(request.delivery_info or {}).get("priority"))
    log.warning("batch published again after a transient error", stage=name, segments=len(pairs), reason=reason)


def priorities(pairs: list[tuple[Any, Any]]) -> dict[tuple[str, int], int | None]:
    """{(event id, segment index): the message priority its request came with} (``workers.fairness``), so the
    next step of a segment goes on at the priority its chain had."""
    return {(str(item.job.event.event_id), item.job.segment_index): (request.delivery_info or {}).get("priority")
            for request, item in pairs}
