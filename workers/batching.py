"""The distributed mode's batched consumers (celery-batches), shared by ``workers.embed.embed_batched`` and
``workers.store.store_batched``: a worker accumulates the segments of many events and runs them through the stage
functions together (issue 15, "batching across events"): ``consume``, each step joint and, when it fails, item by
item (``runtime.run_together``), so one bad item fails only its own event; transient errors published again with
backoff, as celery-batches acknowledges a batch whatever it raises.

The embedded default batches in its runner instead (``workers.pipeline``), which calls the same stage functions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import structlog
from celery.utils.time import get_exponential_backoff_interval
from pydantic import BaseModel, ValidationError

from engram.schemas.events import EventStatus
from engram.workers.runtime import STAGE_TASK_OPTIONS, TRANSIENT_ERRORS, Runtime, run_together, runtime

log = structlog.get_logger(__name__)

M = TypeVar("M", bound=BaseModel)


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
                log.error(
                    "batched message dropped: not a valid job",
                    task=request.name,
                    task_id=request.id,
                    error=str(exc).splitlines()[0][:300],
                )
    return out


def consume(
    task: Any, requests: list, model: type[M], steps: list[tuple[str, Callable[[Runtime, list], list]]]
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
            rt.ledger.mark(
                item.job.event.event_id, EventStatus.failed, stage=name, reason=f"{reason} (retries exhausted)"
            )
            log.error("event failed", event_id=str(item.job.event.event_id), stage=name, reason=reason)
            continue
        if id(request) in published:
            continue
        published.add(id(request))
        countdown = get_exponential_backoff_interval(
            options["retry_backoff"], retries, options["retry_backoff_max"], options["retry_jitter"]
        )
        task.apply_async(
            args=list(request.args),
            kwargs={"retries": retries + 1},
            countdown=countdown,
            priority=(request.delivery_info or {}).get("priority"),
        )
    log.warning("batch published again after a transient error", stage=name, segments=len(pairs), reason=reason)


def priorities(pairs: list[tuple[Any, Any]]) -> dict[tuple[str, int], int | None]:
    """{(event id, segment index): the message priority its request came with} (``workers.fairness``), so the
    next step of a segment goes on at the priority its chain had."""
    return {
        (str(item.job.event.event_id), item.job.segment_index): (request.delivery_info or {}).get("priority")
        for request, item in pairs
    }
