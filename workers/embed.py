"""Stage ``embed`` (queue ``perceive.gpu``; CPU workers can serve it): each observation's dense vector (its own
embedding blended with its neighbouring turns'), sentence rows and fielded BM25 sparse vector
(``memory.vectors``: the methods and their sources).

``embed`` embeds one segment; ``embed_many`` the segments of many events in one pass (each distinct text encoded
once, in batches of ``models.embedding_batch_size``): ``workers.batching`` calls it inline on the embedded
default, and a worker's batched consumer (``embed_batched``, celery-batches) with the segments it accumulated.
"""

from __future__ import annotations

from engram.schemas.jobs import EmbeddedBatch, EmbeddedBatches, ObservationBatch, ObservationBatches
from engram.schemas.observations import EmbeddedObservation
from engram.workers.app import task
from engram.workers.memory.vectors import dense_vectors, observation_sparse_vectors
from engram.workers.runtime import Runtime, run_together, runtime, stage
from engram.workers.tasks import Task


def embed_batches(rt: Runtime, batches: list[ObservationBatch]) -> list[EmbeddedBatch]:
    """Vectors for every observation of ``batches`` from one dense pass (``dense_vectors``: one model call over
    the distinct texts of all of them) and one BM25F pass; one EmbeddedBatch per input, in order. Raises what the
    model or the cache raise (``ModelUnavailable``...)."""
    obs = [o for b in batches for o in b.observations]
    dense, multi = dense_vectors(rt, obs)
    sparse_vecs = observation_sparse_vectors(rt.settings, obs)
    items = [EmbeddedObservation(observation=o, dense=d.tolist(), sparse_indices=si, sparse_values=sv,
                                 sentences=m.tolist() if len(m) > 1 else None)
             for o, d, m, (si, sv) in zip(obs, dense, multi, sparse_vecs, strict=True)]
    out, at = [], 0
    for b in batches:
        out.append(EmbeddedBatch(job=b.job, items=items[at:at + len(b.observations)]))
        at += len(b.observations)
    return out


@task(Task.embed)
def embed(batch: ObservationBatch) -> EmbeddedBatch:
    """Vectors for every observation of one segment."""
    rt = runtime()
    with stage(rt, batch.job.event.event_id, "embed"):
        return embed_batches(rt, [batch])[0]


@task(Task.embed_many)
def embed_many(batches: ObservationBatches) -> EmbeddedBatches:
    """Vectors for the segments of many events in one pass; when that fails each segment embeds alone, so a bad
    one fails only its own event (``runtime.run_together``). Returns the segments embedded, in order."""
    rt = runtime()
    done = run_together(rt, "embed", batches.batches, lambda bs: embed_batches(rt, bs), lambda b: b.job.event)
    return EmbeddedBatches(batches=done)
