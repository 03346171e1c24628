"""Stage ``consolidate`` (beat → queue ``consolidate``): a user's unconsolidated observations into memories,
under a per-user lock: episodic memories (``memory.episodes``: grouping, extractive summaries, centroid vectors),
then the typed ones (``memory.typed``: semantic, procedural, resource, core, the vault index). Each observation's
``consolidated`` flag is set after its memories are written, so it is consolidated once and a late one is never
skipped. Beat's ``consolidate_due`` starts the users that are due (``memory.episodes.due_users``).
"""

from __future__ import annotations

import numpy as np
import structlog

from engram.schemas.memories import MemoryType
from engram.workers.app import task
from engram.workers.memory.episodes import build_episode, due_users, episode_vector, group_episodes
from engram.workers.memory.points import memory_points, source_fields
from engram.workers.memory.typed import consolidate_typed
from engram.workers.metrics import MEMORIES_WRITTEN
from engram.workers.runtime import runtime
from engram.workers.stores.retention import apply_if_due
from engram.workers.stores.vectors import DENSE, OBSERVATIONS, UNREAD_OBSERVATION_FIELDS, tenant_filter
from engram.workers.tasks import Task

log = structlog.get_logger(__name__)


CONSOLIDATE_LOCK_TTL_S = 600.0


@task(Task.consolidate_user, "stage", ignore_result=False)
def consolidate_user(tenant_id: str, user_id: str) -> int:
    """Write episodic memories from the user's unconsolidated observations; returns how many.

    Runs under a per-(tenant, user) lock shared by all processes: two beats or two workers never
    consolidate one user at once (the second returns 0 and beat comes back on its next tick). A holder that died
    (killed mid-way) blocks nobody on the embedded default: its lock names its process and is taken over at once
    (``Ledger.try_lock``); with Redis the lock is a lease renewed while this runs, so a dead holder's lapses within
    ``ledger.LOCK_LEASE_S`` (and a live one holds it ``CONSOLIDATE_LOCK_TTL_S`` at most). The
    ``consolidated`` flag of each observation is the watermark: set after its memory is written, so an
    observation is consolidated once, and one that arrives late (any capture time) is never skipped.
    """
    rt = runtime()
    s = rt.settings
    if s.embedded:  # after a batch of ingest, watch or capture: retention, at most every retention_interval_seconds
        apply_if_due(rt)
    with rt.ledger.try_lock(f"consolidate:{tenant_id}:{user_id}", CONSOLIDATE_LOCK_TTL_S) as got:
        if not got:
            log.info("consolidation already running", tenant=tenant_id, user=user_id)
            return 0
        records = rt.vectors.scroll(
            OBSERVATIONS,
            tenant_filter(tenant_id, user_id, consolidated=False),
            with_vectors=[DENSE],
            without=UNREAD_OBSERVATION_FIELDS,
        )
        if not records:
            return 0
        episodes = group_episodes(records, s.episode_gap_seconds, s.episode_max_observations)
        memories = [build_episode(ep, s.summary_sentences) for ep in episodes]
        vectors = np.stack([episode_vector(ep) for ep in episodes])
        # BM25 of each episode's joined texts, given as its turns (tokens never span the line breaks, and the
        # turns' tokens are still cached from the embed stage: sparse.tokenize_parts)
        texts = [[r.payload["text"] for r in ep] for ep in episodes]
        fields = [source_fields(ep) for ep in episodes]
        rt.vectors.upsert(
            MemoryType.episodic.value, memory_points(rt, memories, fields, vectors, texts, [len(ep) for ep in episodes])
        )
        MEMORIES_WRITTEN.labels(memory_type=MemoryType.episodic.value).inc(len(memories))
        consolidate_typed(rt, tenant_id, user_id, records)  # semantic, procedural, resource, core, vault index
        rt.vectors.set_payload(OBSERVATIONS, [r.id for r in records], {"consolidated": True})
    log.info("consolidated", tenant=tenant_id, user=user_id, observations=len(records), episodic=len(memories))
    return len(memories)


@task(Task.consolidate_due, "beat")
def consolidate_due() -> int:
    """Beat entry point: start one consolidation per (tenant, user) that is due (``workers.memory.typed.due_users``:
    enough pending observations, or idle long enough); returns how many users have pending observations
    (started now or still waiting), so a caller can loop until it is 0."""
    rt = runtime()
    due, pending = due_users(rt)
    for tenant_id, user_id in due:
        consolidate_user.delay(tenant_id, user_id)
    return pending
