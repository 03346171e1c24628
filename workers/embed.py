"""Stage ``embed`` (queue ``perceive.gpu``; CPU workers can serve it): each observation's dense vector (its own
embedding blended with its neighbouring turns'), sentence rows and fielded BM25 sparse vector
(``memory.vectors``: the methods and their sources).
"""

from __future__ import annotations

from engram.schemas.jobs import EmbeddedBatch, ObservationBatch
from engram.schemas.observations import EmbeddedObservation
from engram.workers.app import task
from engram.workers.memory.vectors import dense_vectors, observation_sparse_vectors
from engram.workers.runtime import runtime, stage
from engram.workers.tasks import Task


@task(Task.embed)
def embed(batch: ObservationBatch) -> EmbeddedBatch:
    """Vectors for every observation of one segment."""
    rt = runtime()
    with stage(rt, batch.job.event.event_id, "embed"):
        obs = batch.observations
        dense, multi = dense_vectors(rt, obs)
        sparse_vecs = observation_sparse_vectors(rt.settings, obs)
        items = [EmbeddedObservation(observation=o, dense=d.tolist(), sparse_indices=si, sparse_values=sv,
                                     sentences=m.tolist() if len(m) > 1 else None)
                 for o, d, m, (si, sv) in zip(obs, dense, multi, sparse_vecs, strict=True)]
    return EmbeddedBatch(job=batch.job, items=items)
