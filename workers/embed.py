"""Stage ``embed`` (queue ``perceive.gpu``; CPU workers can serve it): each observation's dense vector (its own
embedding blended with its neighbouring turns'), sentence rows and fielded BM25 sparse vector
(``memory.embedding``: the methods and their sources).

``embed_batches`` embeds the segments of many events in one pass (each distinct text encoded once, in batches of
``models.embedding_batch_size``): the embedded default's runner calls it (``workers.pipeline``). In the distributed
mode ``embed_batched``, a batched consumer (celery-batches), runs it over the segments a worker accumulated from
many events and hands them to the store worker's ``store_batched``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from engram.schemas.jobs import EmbeddedBatch, ObservationBatch
from engram.schemas.observations import EmbeddedObservation
from engram.workers.app import signature, task
from engram.workers.batching import consume, priorities
from engram.workers.memory.embedding import dense_vectors, observation_sparse_vectors
from engram.workers.runtime import Runtime
from engram.workers.tasks import Task


def embed_batches(rt: Runtime, batches: list[ObservationBatch]) -> list[EmbeddedBatch]:
    """Vectors for every observation of ``batches`` from one dense pass (``dense_vectors``: one model call over
    the distinct texts of all of them) and one BM25F pass; one EmbeddedBatch per input, in order. Raises what the
    model or the cache raise (``ModelUnavailable``...)."""
    obs = [o for b in batches for o in b.observations]
    # BM25F is Python and the model's runs release the GIL: the sparse pass runs on a thread of its own beside the
    # dense pass, on the core a model run leaves between its batches, instead of after it
    with ThreadPoolExecutor(1, thread_name_prefix="engram-sparse") as pool:
        sparse_pass = pool.submit(observation_sparse_vectors, rt.settings, obs)
        dense, multi = dense_vectors(rt, obs)
        sparse_vecs = sparse_pass.result()
    # built without validation: the vectors are the model's float32 rows as Python floats and the sparse pairs
    # BM25F's (ints, floats), already of the model's types; validating ~1,000 floats per observation cost as much
    # as turning them into lists
    items = [
        EmbeddedObservation.model_construct(
            observation=o,
            dense=d.tolist(),
            sparse_indices=si,
            sparse_values=sv,
            sentences=m.tolist() if len(m) > 1 else None,
        )
        for o, d, m, (si, sv) in zip(obs, dense, multi, sparse_vecs, strict=True)
    ]
    out, at = [], 0
    for b in batches:
        out.append(EmbeddedBatch(job=b.job, items=items[at : at + len(b.observations)]))
        at += len(b.observations)
    return out


@task(Task.embed_batched, "batch")
def embed_batched(requests: list) -> int:
    """The distributed mode's embed: a batched consumer (celery-batches) of one ``ObservationBatch`` per message
    (perceive's output, down its chain), which embeds the segments it accumulated (up to
    ``workers.tasks.BATCH_FLUSH_EVERY``, or what came within its ``BATCH_FLUSH_SECONDS``) in one pass, then
    publishes the embedded segments to ``store_batched``: one message per priority they came with (a list of
    ``EmbeddedBatch``), so segments of one tenant's pace travel together and the store worker receives and
    acknowledges one message per pass instead of one per segment (300 chat events on 2 cores: ~40-60 messages
    instead of 300). A bad segment fails alone; transient errors publish the batch again
    (``workers.batching.consume``). Returns the segments embedded."""
    pairs, done = consume(embed_batched, requests, ObservationBatch, [("embed", embed_batches)])
    priority = priorities(pairs)
    by_priority: dict[int | None, list[dict]] = {}
    for batch in done:
        # a batched consumer's arguments are plain JSON (celery-batches: no pydantic dump on the way)
        by_priority.setdefault(priority[(str(batch.job.event.event_id), batch.job.segment_index)], []).append(
            batch.model_dump(mode="json")
        )
    for level, batches in by_priority.items():
        signature(Task.store_batched, batches, priority=level).apply_async()
    return len(done)
