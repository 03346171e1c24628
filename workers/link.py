"""Stage ``link`` (queue ``link``): link the observations of one segment to persistent person entities (chat
speakers by name, voices, faces, names said, face-voice equivalence: ``workers.memory.linking`` has the methods
and their sources, M3-Agent's entity-centric memory, Long et al. 2025). The store worker's batched task
``workers.store.store_many`` links and stores the segments of many events together instead.
"""

from __future__ import annotations

from engram.schemas.jobs import EmbeddedBatch
from engram.workers.app import task
from engram.workers.memory.entities import entity_id
from engram.workers.memory.linking import link_batches, link_observations
from engram.workers.runtime import runtime, stage
from engram.workers.tasks import Task

__all__ = ["entity_id", "link", "link_observations"]


@task(Task.link)
def link(batch: EmbeddedBatch) -> EmbeddedBatch:
    """Fill the ``entity_ids`` of the batch's observations (and each face's ``entity_id``) and write the
    entities they link to."""
    rt = runtime()
    with stage(rt, batch.job.event, "link"):
        link_batches(rt, [batch])
    return batch
