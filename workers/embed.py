"""Stage ``embed`` (queue ``perceive.gpu``; CPU workers can serve it): dense MiniLM embeddings, batched and
cached on disk by (model, sha256 of text), and sparse BM25 vectors of each observation."""

from __future__ import annotations

import numpy as np

from schemas.jobs import EmbeddedBatch, ObservationBatch
from schemas.observations import EmbeddedObservation
from schemas.settings import Settings
from workers import sparse
from workers.app import app
from workers.models import embed_cached, get_model
from workers.runtime import STAGE_TASK_OPTIONS, Runtime, runtime, stage


def embed_texts(rt: Runtime, texts: list[str]) -> np.ndarray:
    """Dense embeddings (n, 384) float32, unit length, through the on-disk cache."""
    model = get_model("embedding", rt.settings)
    return embed_cached(model, rt.embedding_cache, texts, rt.settings.models.embedding_batch_size)


def sparse_vectors(settings: Settings, texts: list[str]) -> list[tuple[list[int], list[float]]]:
    """BM25 document vectors with the configured k1, b and average length."""
    return sparse.document_vectors(texts, settings.bm25_k1, settings.bm25_b, settings.bm25_avgdl)


@app.task(name="workers.embed.embed", **STAGE_TASK_OPTIONS)
def embed(batch: ObservationBatch) -> EmbeddedBatch:
    """Vectors for every observation of one segment."""
    rt = runtime()
    with stage(rt, batch.job.event.event_id, "embed"):
        texts = [o.text for o in batch.observations]
        dense = embed_texts(rt, texts)
        sparse_vecs = sparse_vectors(rt.settings, texts)
        items = [EmbeddedObservation(observation=o, dense=d.tolist(), sparse_indices=si, sparse_values=sv)
                 for o, d, (si, sv) in zip(batch.observations, dense, sparse_vecs, strict=True)]
    return EmbeddedBatch(job=batch.job, items=items)
