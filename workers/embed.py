"""Stage ``embed`` (queue ``perceive.gpu``; CPU workers can serve it): dense MiniLM embeddings, batched and
cached on disk by (model, sha256 of text), and sparse BM25 vectors of each observation.

Contextual indexing (Anthropic's "contextual retrieval", 2024, with the surrounding turns as the context
instead of an LLM-written one): an observation that carries context (the texts of its
neighbouring chat turns in the same session, ``context_before``/``context_after``) is BM25-indexed as its
date, its own text and that context (length-normalised as that many turns), and its dense vector is its own
embedding plus ``CONTEXT_WEIGHT`` times that of each adjacent turn (one either side), re-normalised. The
neighbours are embedded as the observations they are, so the context costs cache look-ups, not model time.
An observation without context is indexed as its text alone.
"""

from __future__ import annotations

import numpy as np

from schemas.jobs import EmbeddedBatch, ObservationBatch
from schemas.observations import EmbeddedObservation, Observation
from schemas.settings import Settings
from workers import sparse
from workers.app import app
from workers.metrics import model_timer
from workers.models import embed_cached, get_model
from workers.runtime import STAGE_TASK_OPTIONS, Runtime, runtime, stage

CONTEXT_WEIGHT = 0.5  # a neighbour's embedding counts half as much as the observation's own


def embed_texts(rt: Runtime, texts: list[str]) -> np.ndarray:
    """Dense embeddings (n, 384) float32, unit length, through the on-disk cache."""
    model = get_model("embedding", rt.settings)
    with model_timer("embedding", items=len(texts)):  # cache hits included: the time a text costs the stage
        return embed_cached(model, rt.embedding_cache, texts, rt.settings.models.embedding_batch_size)


def sparse_vectors(settings: Settings, texts: list[str | list[str]],
                   units: list[int] | None = None) -> list[tuple[list[int], list[float]]]:
    """BM25 document vectors with the configured k1 and b. A text made of ``units[i]`` observations' texts
    (a turn with its context, an episode) is length-normalised against ``units[i]`` times the configured
    average length (default: one unit each). A text may be given as its parts (``sparse.tokenize_parts``)."""
    avgdl = [settings.bm25_avgdl * max(1, u) for u in units] if units else settings.bm25_avgdl
    return sparse.document_vectors(texts, settings.bm25_k1, settings.bm25_b, avgdl)


def sparse_parts(obs: Observation) -> list[str]:
    """What BM25 indexes for an observation, as the parts ``sparse_text`` joins."""
    if not (obs.context_before or obs.context_after):
        return [obs.text]
    return [obs.captured_at.strftime("%-d %B %Y"), *obs.context_before, obs.text, *obs.context_after]


def sparse_text(obs: Observation) -> str:
    """What BM25 indexes for an observation: with context, ``<day month year> <context before> <text>
    <context after>``."""
    return " ".join(sparse_parts(obs))


def contextual_vectors(rt: Runtime, observations: list[Observation]) -> np.ndarray:
    """Dense vectors (n, 384), unit length: each observation's embedding plus ``CONTEXT_WEIGHT`` times the
    embedding of each adjacent turn, re-normalised (its own embedding when it has no context)."""
    adjacent = [[*o.context_before[-1:], *o.context_after[:1]] for o in observations]
    texts = list(dict.fromkeys([t for o, adj in zip(observations, adjacent, strict=True) for t in (o.text, *adj)]))
    where = {t: i for i, t in enumerate(texts)}
    vecs = embed_texts(rt, texts)
    out = np.empty((len(observations), vecs.shape[1]), dtype=np.float32)
    for n, (obs, adj) in enumerate(zip(observations, adjacent, strict=True)):
        v = vecs[where[obs.text]].copy()
        for t in adj:
            v += CONTEXT_WEIGHT * vecs[where[t]]
        out[n] = v / max(float(np.linalg.norm(v)), 1e-12)
    return out


@app.task(name="workers.embed.embed", **STAGE_TASK_OPTIONS)
def embed(batch: ObservationBatch) -> EmbeddedBatch:
    """Vectors for every observation of one segment."""
    rt = runtime()
    with stage(rt, batch.job.event.event_id, "embed"):
        dense = contextual_vectors(rt, batch.observations)
        obs = batch.observations
        sparse_vecs = sparse_vectors(rt.settings, [sparse_parts(o) for o in obs],
                                     [1 + len(o.context_before) + len(o.context_after) for o in obs])
        items = [EmbeddedObservation(observation=o, dense=d.tolist(), sparse_indices=si, sparse_values=sv)
                 for o, d, (si, sv) in zip(batch.observations, dense, sparse_vecs, strict=True)]
    return EmbeddedBatch(job=batch.job, items=items)
