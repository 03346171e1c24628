"""Stage ``embed`` (queue ``perceive.gpu``; CPU workers can serve it): dense MiniLM embeddings, batched and
cached on disk by (model, sha256 of text), and sparse BM25 vectors of each observation.

Contextual indexing (Anthropic's "contextual retrieval", 2024, with the surrounding turns as the context
instead of an LLM-written one): an observation that carries context (the texts of its
neighbouring chat turns in the same session, ``context_before``/``context_after``) is BM25-indexed as two
fields (BM25F, ``workers.sparse.fielded_vectors``): its date and own text, and that context (normalised
against that many turns' worth of length, weighted ``CONTEXT_TF_WEIGHT``), so two long answers beside a
one-line turn do not drown its own words; its dense vector is its own
embedding plus ``CONTEXT_WEIGHT`` times that of each adjacent turn (one either side), re-normalised. The
neighbours are embedded as the observations they are, so the context costs cache look-ups, not model time.
An observation without context is indexed as its text alone.

Sentence vectors (Dense X Retrieval, Chen et al. 2023: smaller retrieval units; scored by MaxSim as in ColBERT,
Khattab & Zaharia 2020): a turn of ``SENTENCE_MAX_WORDS`` words or fewer that has several sentences also gets
one embedding per sentence, and its dense search scores it by the best of its contextual vector and those
(``dense_vectors``; Qdrant multivector, ``MAX_SIM``). A fact told in passing ("By the way, I got a 10%
discount on my first purchase") is then found on its own, not blurred into the rest of the turn. Long turns
(documents, an assistant's essay) are left whole: their sentences would multiply the embedding time.
"""

from __future__ import annotations

import threading

import numpy as np
from cachetools import LRUCache

from engram.schemas.jobs import EmbeddedBatch, ObservationBatch
from engram.schemas.observations import EmbeddedObservation, Observation
from engram.schemas.settings import Settings
from engram.workers import sparse
from engram.workers.app import app
from engram.workers.extract.rules import sentences
from engram.workers.metrics import model_timer
from engram.workers.models import embed_cached, get_model
from engram.workers.runtime import STAGE_TASK_OPTIONS, Runtime, runtime, stage

CONTEXT_WEIGHT = 0.5  # a neighbour's embedding counts half as much as the observation's own
CONTEXT_TF_WEIGHT = 0.5  # BM25F weight of the context field's term frequencies (the turn's own field: 1)
SENTENCE_MAX_WORDS = 120  # turns longer than this get no sentence vectors


def embed_texts(rt: Runtime, texts: list[str]) -> np.ndarray:
    """Dense embeddings (n, 384) float32, unit length, through the on-disk cache."""
    model = get_model("embedding", rt.settings)
    with model_timer("embedding", items=len(texts)):  # cache hits included: the time a text costs the stage
        return embed_cached(model, rt.embedding_cache, texts, rt.settings.models.embedding_batch_size)


#: Query embeddings of this process (a query text -> its unit vector), most recently used kept.
_QUERY_VECTORS: LRUCache = LRUCache(maxsize=4096)
_QUERY_LOCK = threading.Lock()


def embed_query(rt: Runtime, text: str) -> np.ndarray:
    """The dense embedding (384,) of a search query, kept in a per-process LRU instead of the on-disk cache: a
    query costs ~2 ms to embed (ONNX runtime), while writing it to the SQLite cache waits for a commit to the disk
    (tens of ms), on every new query."""
    key = (rt.settings.models.embedding_model, text)
    with _QUERY_LOCK:
        hit = _QUERY_VECTORS.get(key)
    if hit is not None:
        return hit
    model = get_model("embedding", rt.settings)
    with model_timer("embedding", items=1):
        vec = model.embed([text])[0]
    with _QUERY_LOCK:
        _QUERY_VECTORS[key] = vec
    return vec


def sparse_vectors(settings: Settings, texts: list[str | list[str]],
                   units: list[int] | None = None) -> list[tuple[list[int], list[float]]]:
    """BM25 document vectors with the configured k1 and b. A text made of ``units[i]`` observations' texts
    (a turn with its context, an episode) is length-normalised against ``units[i]`` times the configured
    average length (default: one unit each). A text may be given as its parts (``sparse.tokenize_parts``)."""
    avgdl = [settings.bm25_avgdl * max(1, u) for u in units] if units else settings.bm25_avgdl
    return sparse.document_vectors(texts, settings.bm25_k1, settings.bm25_b, avgdl)


def observation_sparse_vectors(settings: Settings, observations: list[Observation]
                               ) -> list[tuple[list[int], list[float]]]:
    """BM25 vectors of observations, one BM25F pass (``sparse.fielded_vectors``): an observation without context
    is one field, its text (weight 1, the configured average length: plain BM25); one with context is two,
    ``<day month year> <text>`` (weight 1, the configured average length) and its context turns (weight
    ``CONTEXT_TF_WEIGHT``, that many times the average length)."""
    avgdl = settings.bm25_avgdl
    docs = [[([o.captured_at.strftime("%-d %B %Y"), o.text], 1.0, avgdl),
             ([*o.context_before, *o.context_after], CONTEXT_TF_WEIGHT,
              avgdl * (len(o.context_before) + len(o.context_after)))]
            if o.context_before or o.context_after else [([o.text], 1.0, avgdl)]
            for o in observations]
    return sparse.fielded_vectors(docs, settings.bm25_k1, settings.bm25_b)


def dense_vectors(rt: Runtime, observations: list[Observation]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Each observation's contextual vector and its sentence multivector, from one pass through the
    embedding cache and model over every text they need (own texts, adjacent turns, sentences).

    Returns ``(dense, multi)``: ``dense`` (n, 384), unit rows, the observation's embedding plus
    ``CONTEXT_WEIGHT`` times the embedding of each adjacent turn (one either side), re-normalised (its own
    embedding when it has no context); ``multi[i]`` (k, 384), unit rows, ``dense[i]`` first and then, for a
    text of at most ``SENTENCE_MAX_WORDS`` words with two or more sentences
    (``workers.extract.rules.sentences``), one embedding per sentence (k = 1 otherwise)."""
    adjacent = [[*o.context_before[-1:], *o.context_after[:1]] for o in observations]
    split = [sentences(o.text) if len(o.text.split()) <= SENTENCE_MAX_WORDS else [] for o in observations]
    split = [ss if len(ss) > 1 else [] for ss in split]
    texts = list(dict.fromkeys([t for o, adj, ss in zip(observations, adjacent, split, strict=True)
                                for t in (o.text, *adj, *ss)]))
    where = {t: i for i, t in enumerate(texts)}
    vecs = embed_texts(rt, texts)
    dense = np.empty((len(observations), vecs.shape[1]), dtype=np.float32)
    for n, (obs, adj) in enumerate(zip(observations, adjacent, strict=True)):
        v = vecs[where[obs.text]].copy()
        for t in adj:
            v += CONTEXT_WEIGHT * vecs[where[t]]
        dense[n] = v / max(float(np.linalg.norm(v)), 1e-12)
    multi = [np.vstack([dense[n:n + 1], vecs[[where[t] for t in ss]]]) if ss else dense[n:n + 1]
             for n, ss in enumerate(split)]
    return dense, multi


@app.task(name="workers.embed.embed", **STAGE_TASK_OPTIONS)
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
