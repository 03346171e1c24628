"""The embedded default's runner: ``engram ingest`` (and ``add``, ``capture``, an event retried) runs the pipeline
in its own process by calling each stage's function over a batch, in rounds (issue 15, "batching across events").

``run_events``: each event is validated and cut into segments (``ingest_events``); then the segments of all of them
are perceived (``perceive_segments``, each segment alone, so a bad one fails only its event) until they hold
``ROUND_OBSERVATIONS`` observations (or the segments end), and that round is embedded in one pass
(``embed_batches``: each distinct text encoded once, in batches of up to ``models.embedding_batch_size`` of
similar token counts), linked (``link_batches``: an entity save per tenant) and stored (``store_batches``: one
upsert, the ledger updated per segment). A joint step that raises runs its segments one by one, so one bad item
fails only its own event, with its stage and reason (``runtime.run_together``). ``resume_interrupted`` runs
again, the same way, the events a killed run left unfinished.

The distributed mode's runner is Celery: each stage's task is a thin adapter over the same functions
(``workers.ingest.ingest`` publishes ``perceive`` → ``embed_batched`` → ``store_batched``, the last two batched
consumers: ``workers.batching``).

The rule (``docs/architecture.md``, checked by ``tests/test_layout.py``): this runner imports the stages; a stage
never imports another stage, nor the runner.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import TypeVar, cast

import structlog

from engram.schemas.events import LedgerRecord, MediaEvent
from engram.schemas.jobs import EmbeddedBatch, ObservationBatch, SegmentJob
from engram.workers.embed import embed_batches
from engram.workers.ingest import ingest_events
from engram.workers.link import link_batches
from engram.workers.metrics import TASK_CPU
from engram.workers.perceive import perceive_segments
from engram.workers.runtime import STAGE_TASK_OPTIONS, STORE_DOWN_ERRORS, TRANSIENT_ERRORS, Runtime, run_together
from engram.workers.store import store_batches
from engram.workers.tasks import Task

log = structlog.get_logger(__name__)

T = TypeVar("T")

#: Observations perceived before a round is embedded and stored (``run_segments``): enough for full model batches
#: (``models.embedding_batch_size``, 64) across many events, few enough that a long upload (up to
#: ``ENGRAM_MAX_UPLOAD_SEGMENTS`` segments) never holds all its observations and vectors in memory at once, and
#: that what is done is stored as it goes (an interrupted ingest resumes after the rounds stored).
ROUND_OBSERVATIONS = 512

#: The name each step's CPU seconds count under (``engram_task_cpu_seconds_total{task}``,
#: ``metrics.TaskCpuClock``): the names of the tasks these steps ran as before this runner called the stages
#: directly, which ``bench/ingest.py``'s figures keep (``cold_task_cpu_s``).
CPU_NAMES = {
    "ingest": Task.ingest.value,
    "perceive": Task.perceive.value,
    "embed": "workers.embed.embed_many",
    "store": "workers.store.store_many",
}

#: Tries of one step that meets a transient error (``runtime.TRANSIENT_ERRORS``), at once one after the other: the
#: stage tasks' first try and their ``max_retries``.
TRIES = cast(int, STAGE_TASK_OPTIONS["max_retries"]) + 1


def run_events(rt: Runtime, events: list[MediaEvent]) -> list[LedgerRecord]:
    """Run the pipeline for ``events`` together: each is validated and cut into segments by its own ingest, then
    the segments of all of them are perceived, embedded in rounds and stored (``run_segments``). A bad file fails
    alone, with its stage and reason in its record. Returns the events' ledger records, in order. A store that
    cannot be used (``runtime.STORE_DOWN_ERRORS``) is raised with the events not finished given back
    (``release_held``): a rerun on a store still damaged counts no death of theirs."""
    jobs: list[SegmentJob] = []
    try:
        for event in events:
            jobs.extend(_step("ingest", functools.partial(ingest_events, rt, [event])) or [])
        run_segments(rt, jobs)
    except STORE_DOWN_ERRORS:
        release_held(rt, [event.event_id for event in events])
        raise
    records = []
    for event in events:
        record = rt.ledger.get(event.event_id)
        assert record is not None  # each event was recorded before it ran
        records.append(record)
    return records


def run_segments(rt: Runtime, jobs: list[SegmentJob], round_observations: int = ROUND_OBSERVATIONS) -> int:
    """Run segment jobs in rounds: perceive segments (each alone: a bad segment fails only its event) until they
    hold ``round_observations`` observations (or the jobs end), then embed that round's observations in one pass
    and link and store them together (one entity save per tenant, one upsert, each segment recorded in the
    ledger). Returns how many observations were stored."""
    stored, batches, held = 0, [], 0
    for at, job in enumerate(jobs):
        for batch in _step("perceive", functools.partial(perceive_segments, rt, [job])) or []:
            batches.append(batch)
            held += len(batch.observations)
        if batches and (held >= round_observations or at == len(jobs) - 1):
            stored += _embed_and_store(rt, batches)
            batches, held = [], 0
    return stored


def _event(batch: ObservationBatch | EmbeddedBatch) -> MediaEvent:
    return batch.job.event


def _embed_and_store(rt: Runtime, batches: list[ObservationBatch]) -> int:
    """One round of ``run_segments``: embed, then link and store; returns the observations stored. Empties
    ``batches`` and the embedded batches after, stored or not, so a round's observations and vectors (~1,500 Python
    floats per chat turn) are freed by reference counting as it ends, not by the garbage collector's next pass,
    which would traverse them (788 LoCoMo turns: ~940,000 list items, ~0.02 s per collection)."""
    embedded: list[EmbeddedBatch] | None = None
    try:
        embedded = _step(
            "embed",
            lambda final: run_together(rt, "embed", batches, functools.partial(embed_batches, rt), _event, final),
        )
        if not embedded:
            return 0
        counts = _step("store", lambda final: link_and_store(rt, embedded or [], final))
        return sum(counts or [])
    finally:
        for done in embedded or []:
            done.items.clear()
        for batch in batches:
            batch.observations.clear()


def link_and_store(rt: Runtime, embedded: list[EmbeddedBatch], final: bool | None = None) -> list[int]:
    """Link, then store, the embedded segments of a round (segments of one or many events), each step joint (one
    entity save per tenant, one upsert) and, when it fails, segment by segment, so a bad one fails only its own event
    (``runtime.run_together``; ``final`` as there). Returns the observations each segment that succeeded stored."""
    linked = run_together(rt, "link", embedded, functools.partial(link_batches, rt), _event, final)
    return run_together(rt, "store", linked, functools.partial(store_batches, rt), _event, final)


def _step(name: str, run: Callable[[bool], T]) -> T | None:
    """``run(final)``, one step of the pipeline, its CPU seconds counted under ``CPU_NAMES[name]``. A transient
    error runs it again at once, up to ``TRIES`` times (``final`` True on the last: a per-event stage then marks
    its event failed, "retries exhausted"); any other error has marked its events failed inside the stage (or left
    them unfinished, for ``engram ingest`` to resume). Returns None when the step did not end: the run goes on with
    the other events, as each stage's task applied in process did. Raises a store that cannot be used
    (``runtime.STORE_DOWN_ERRORS``): every other event would meet it."""
    TASK_CPU.start()
    try:
        for attempt in range(TRIES):
            try:
                return run(attempt == TRIES - 1)
            except TRANSIENT_ERRORS as exc:
                reason = f"{type(exc).__name__}: {exc}"[:300]
                if attempt == TRIES - 1:
                    log.error("pipeline step failed, retries exhausted", step=name, error=reason)
                    return None
                log.warning("pipeline step retried after a transient error", step=name, error=reason)
            except STORE_DOWN_ERRORS:
                raise  # the store cannot be used: the run stops, its events left unfinished (runtime.stage)
            except Exception as exc:  # noqa: BLE001 (its events fail or stay unfinished; the others go on)
                log.error("pipeline step failed", step=name, error=f"{type(exc).__name__}: {exc}"[:300])
                return None
        return None
    finally:
        TASK_CPU.stop(CPU_NAMES[name])


def release_held(rt: Runtime, event_ids: list[uuid.UUID]) -> int:
    """Give back the events of ``event_ids`` this process holds unfinished (``Ledger.release``: queued again, held by
    none, no redelivery counted when taken up) as a run stops on a store that cannot be used; returns how many.
    The ledger itself damaged or unreachable releases none (logged at info: the run's own error is the one line the
    user sees), and the events are then taken up as a dead process's."""
    try:
        return rt.ledger.release(event_ids)
    except STORE_DOWN_ERRORS + TRANSIENT_ERRORS as exc:
        log.info("events not released", events=len(event_ids), error=f"{type(exc).__name__}: {exc}"[:300])
        return 0


def resume_interrupted(rt: Runtime) -> list[LedgerRecord]:
    """Embedded default: run again the events left queued or processing by a process that is gone (killed,
    crashed), and the ones this process left (a batch the store was busy for), and return their records. An event
    of another process that still lives (running it, or waiting for the store) is left to it: several engram
    processes share one data dir (``Ledger.claim_interrupted``). The pipeline is idempotent and ingest skips the
    segments already stored: what the killed run stored is kept and the rest is done. An event interrupted
    ``max_redeliveries`` times is marked failed instead. Call it with none of this process's events in flight."""
    if not rt.settings.embedded:
        return []
    events, given_up = rt.ledger.claim_interrupted(rt.settings.max_redeliveries, include_own=True)
    out = run_events(rt, events)  # together: their segments share model passes
    return out + [r for eid in given_up if (r := rt.ledger.get(eid)) is not None]
