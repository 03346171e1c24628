"""The vectors of observations, memories and queries: dense (MiniLM, batched and cached on disk by (model,
sha256 of text)), sparse (BM25F) and late-chunked sentence rows. Used by the embed stage, consolidation and the
query side.

Contextual indexing (Anthropic's "contextual retrieval", 2024, with the surrounding turns as the context
instead of an LLM-written one): an observation that carries context (the texts of its
neighbouring chat turns in the same session, ``context_before``/``context_after``) is BM25-indexed as two
fields (BM25F, ``workers.text.sparse.fielded_vectors``): its date and own text, and that context (normalised
against that many turns' worth of length, weighted ``CONTEXT_TF_WEIGHT``), so two long answers beside a
one-line turn do not drown its own words; its dense vector is its own
embedding plus ``CONTEXT_WEIGHT`` times that of each adjacent turn (one either side), re-normalised. The
neighbours are embedded as the observations they are, so the context costs cache look-ups, not model time.
An observation without context is indexed as its text alone.

Sentence vectors (Dense X Retrieval, Chen et al. 2023: smaller retrieval units; scored by MaxSim as in ColBERT,
Khattab & Zaharia 2020): a turn of ``SENTENCE_MAX_WORDS`` words or fewer that has several sentences also gets
one vector per sentence, and its dense search scores it by the best of its contextual vector and those
(``dense_vectors``; Qdrant multivector, ``MAX_SIM``). A fact told in passing ("By the way, I got a 10%
discount on my first purchase") is then found on its own, not blurred into the rest of the turn. The sentence
vectors come from the turn's own forward pass by late chunking (Günther et al. 2024: the mean of the token
states inside each sentence, ``MiniLMEmbedder.embed_spans``), so a turn costs one encode, not one per sentence
as well (which doubled the model time of a chat ingest). Long turns (documents, an assistant's essay) are left
whole.
A fact that consolidation reads from one sentence takes that sentence's vector too (``sentence_vectors``).

Each distinct text is encoded once per process and data dir: texts are de-duplicated within a call and looked
up in the on-disk cache first, so a turn embedded as itself is a cache hit as its neighbours' context; on the
embedded default the segments of many events are embedded in one pass (``workers.batching``).
"""

from __future__ import annotations

import functools
import threading

import numpy as np
from cachetools import LRUCache

from engram.schemas.observations import Observation
from engram.schemas.settings import Settings
from engram.workers.metrics import model_timer
from engram.workers.models import embed_cached, get_model
from engram.workers.models.embeddings import DIM
from engram.workers.runtime import Runtime
from engram.workers.text import secrets, sparse
from engram.workers.text import sentences as sentence_split
from engram.workers.text.sentences import sentences

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
        vec = model.embed_queries([text])[0]  # e5 embeds a query with its own prefix
    with _QUERY_LOCK:
        _QUERY_VECTORS[key] = vec
    return vec


def sparse_vectors(
    settings: Settings, texts: list[str | list[str]], units: list[int] | None = None
) -> list[tuple[list[int], list[float]]]:
    """BM25 document vectors with the configured k1 and b. A text made of ``units[i]`` observations' texts
    (a turn with its context, an episode) is length-normalised against ``units[i]`` times the configured
    average length (default: one unit each). A text may be given as its parts (``sparse.tokenize_parts``)."""
    avgdl = [settings.bm25_avgdl * max(1, u) for u in units] if units else settings.bm25_avgdl
    return sparse.document_vectors(texts, settings.bm25_k1, settings.bm25_b, avgdl)


def observation_sparse_vectors(
    settings: Settings, observations: list[Observation]
) -> list[tuple[list[int], list[float]]]:
    """BM25 vectors of observations, one BM25F pass (``sparse.fielded_vectors``): an observation without context
    is one field, its text (weight 1, the configured average length: plain BM25); one with context is two,
    ``<day month year> <text>`` (weight 1, the configured average length) and its context turns (weight
    ``CONTEXT_TF_WEIGHT``, that many times the average length)."""
    avgdl = settings.bm25_avgdl
    docs = [
        [
            ([o.captured_at.strftime("%-d %B %Y"), o.text], 1.0, avgdl),
            (
                [*o.context_before, *o.context_after],
                CONTEXT_TF_WEIGHT,
                avgdl * (len(o.context_before) + len(o.context_after)),
            ),
        ]
        if o.context_before or o.context_after
        else [([o.text], 1.0, avgdl)]
        for o in observations
    ]
    return sparse.fielded_vectors(docs, settings.bm25_k1, settings.bm25_b)


@functools.lru_cache(maxsize=4096)
def sentence_spans(text: str) -> tuple[tuple[int, int], ...]:
    """Character spans ((start, end), ...) of ``text``'s sentences (``text.sentences.sentences``) when it
    has at most ``SENTENCE_MAX_WORDS`` words and two or more sentences, else (). Kept for the texts used last
    (a segment asks for each turn twice)."""
    if len(text.split()) > SENTENCE_MAX_WORDS:
        return ()
    spans, pos = [], 0
    for sentence in sentences(text):
        start = text.find(sentence, pos)
        if start < 0:  # not an exact span (cannot happen: sentences are slices of the text)
            return ()
        spans.append((start, start + len(sentence)))
        pos = start + len(sentence)
    return tuple(spans) if len(spans) > 1 else ()


def clear_text_memos() -> None:
    """Forget what this process keeps of the texts it has seen: sentence splits and spans, secret findings, BM25
    tokens (a benchmark's cold run starts from none; the embedding cache on disk is not touched)."""
    sentence_spans.cache_clear()
    sentence_split.clear_memo()
    secrets.clear_memo()
    sparse.clear_memo()


#: The embedding cache's model name for a text's late-chunked sentence rows (``embed_with_rows``).
SENTENCE_ROWS_TAG = "#sentences-late-chunked"


def embed_with_rows(rt: Runtime, texts: list[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Embeddings of ``texts`` (len(texts), 384), unit rows, as ``embed_texts`` gives them, and the sentence rows
    of those with ``sentence_spans`` (text → (k, 384) unit rows, k ≥ 1), by late chunking
    (``MiniLMEmbedder.embed_spans``): what neither the embedding cache nor its sentence rows (model +
    ``SENTENCE_ROWS_TAG``, sha256 of the text) hold is encoded in one model call, batched by length, each distinct
    text once, and written to both. A turn's sentences come from its own forward pass, so they cost no model
    time; a segment's turns, their neighbours and texts without sentences share the call's batches (the model is
    most efficient on full batches: a call of 30 short texts costs ~1.5x per token what a full batch does). A
    neighbour gets its rows too, so the turn is not encoded again when a later segment or round holds it."""
    model = get_model("embedding", rt.settings)
    cache, tag = rt.embedding_cache, model.cache_id + SENTENCE_ROWS_TAG
    distinct = list(dict.fromkeys(texts))
    keys = {t: cache.key(t) for t in distinct}
    with model_timer("embedding", items=len(texts)):  # cache hits included, as embed_texts counts them
        have = cache.get_many(model.cache_id, list(keys.values()))
        vecs = {t: have[keys[t]] for t in distinct if keys[t] in have}
        split = [t for t in vecs if sentence_spans(t)]  # of the texts encoded before: their rows are cached too
        have = cache.get_many(tag, [keys[t] for t in split])
        rows = {t: have[keys[t]].reshape(-1, DIM) for t in split if keys[t] in have}
        missing = [t for t in distinct if t not in vecs or (t in split and t not in rows)]
        if missing:
            # the texts to encode are split into sentences on the model's run threads, beside its other runs
            got, got_rows = model.embed_spans(missing, sentence_spans, rt.settings.models.embedding_batch_size)
            cache.put_many(model.cache_id, {keys[t]: v for t, v in zip(missing, got, strict=True)})
            new_rows = {t: r for t, r in zip(missing, got_rows, strict=True) if sentence_spans(t)}  # memoized
            cache.put_many(tag, {keys[t]: r for t, r in new_rows.items()})
            vecs.update(zip(missing, got, strict=True))
            rows.update(new_rows)
    out = np.stack([vecs[t] for t in texts]) if texts else np.zeros((0, DIM), dtype=np.float32)
    return out, rows


def _whole_turn(text: str, said: str) -> bool:
    """Whether ``said`` is all of the turn ``text``: the text itself or what follows its ``speaker:`` prefix."""
    return text == said or text.endswith(said) and text[: -len(said)].rstrip().endswith(":")


def sentence_vectors(rt: Runtime, origins: list[tuple[str, str] | None]) -> list[np.ndarray | None]:
    """For each ``(turn text, sentence)`` (a sentence of that turn, as ``text.sentences.sentences`` splits it,
    possibly without the turn's ``speaker:`` prefix), the sentence's vector (384,) from the turn's own forward
    pass, read from the embedding cache: its late-chunked row when the turn has sentence rows
    (``sentence_spans``), the turn's own embedding when the turn is that one sentence. None where the cache holds
    neither (no cache, a turn too long for rows, a sentence past the model's ``MAX_WORD_PIECES``, a text never
    embedded) or for a None origin: the caller embeds those itself. No model call and no write.

    A ``sentence`` that is the whole turn (a fact read from all of it, ``extract.statements``: the text itself or
    what follows its ``speaker:`` prefix) takes the turn's own embedding when the turn holds at most
    ``SENTENCE_MAX_WORDS`` words (a longer one's embedding is cut by the model's length).

    Consolidation uses it for a fact read from one sentence or one turn (``memory.typed``): the turn's pass already
    holds a vector of that sentence in its context (late chunking, Günther et al. 2024), so the fact costs a cache
    look-up instead of an encode of its own text (~0.5 s of a 788-turn LoCoMo ingest, 6 % of it cold; ~3 s more
    for the statement facts, one per ~4 in 10 LoCoMo turns, docs/quality.md)."""
    out: list[np.ndarray | None] = [None] * len(origins)
    cache = rt.embedding_cache
    if cache is None or not any(origins):
        return out
    model = get_model("embedding", rt.settings)
    texts = list(dict.fromkeys(o[0] for o in origins if o))
    keys = {t: cache.key(t) for t in texts}
    split = [t for t in texts if sentence_spans(t)]
    turns = {o[0] for o in origins if o and o[1] and _whole_turn(*o) and len(o[0].split()) <= SENTENCE_MAX_WORDS}
    rows = cache.get_many(model.cache_id + SENTENCE_ROWS_TAG, [keys[t] for t in split])
    whole = cache.get_many(model.cache_id, [keys[t] for t in texts if t not in split or t in turns])
    for i, origin in enumerate(origins):
        if not origin or not origin[1]:
            continue
        text, sentence = origin
        if text in turns and _whole_turn(text, sentence):
            out[i] = whole.get(keys[text])
            continue
        spans = sentence_spans(text)
        if spans:
            found = rows.get(keys[text])
            # the sentence itself, or the first one without the turn's ``speaker:`` prefix
            at = next(
                (
                    j
                    for j, (a, b) in enumerate(spans)
                    if text[a:b] == sentence or j == 0 and text[a:b].endswith(sentence)
                ),
                None,
            )
            if found is not None and at is not None and at < len(found) // DIM:  # no row: cut by truncation
                out[i] = found.reshape(-1, DIM)[at]
        elif keys[text] in whole and len(text.split()) <= SENTENCE_MAX_WORDS:
            parts = sentences(text)
            if len(parts) == 1 and parts[0].endswith(sentence):
                out[i] = whole[keys[text]]
    return out


def dense_vectors(rt: Runtime, observations: list[Observation]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Each observation's contextual vector and its sentence multivector, from one pass through the
    embedding cache and model over every distinct text they need (own texts and adjacent turns, each encoded
    once; a turn's sentences come from its own pass: ``embed_with_rows``).

    Returns ``(dense, multi)``: ``dense`` (n, 384), unit rows, the observation's embedding plus
    ``CONTEXT_WEIGHT`` times the embedding of each adjacent turn (one either side), re-normalised (its own
    embedding when it has no context); ``multi[i]`` (k, 384), unit rows, ``dense[i]`` first and then, for a
    text of at most ``SENTENCE_MAX_WORDS`` words with two or more sentences (``sentence_spans``), one vector
    per sentence (k = 1 otherwise)."""
    adjacent = [[*o.context_before[-1:], *o.context_after[:1]] for o in observations]
    texts = list(dict.fromkeys([t for o, adj in zip(observations, adjacent, strict=True) for t in (o.text, *adj)]))
    where = {t: i for i, t in enumerate(texts)}
    vecs, rows = embed_with_rows(rt, texts)
    dense = np.empty((len(observations), vecs.shape[1]), dtype=np.float32)
    for n, (obs, adj) in enumerate(zip(observations, adjacent, strict=True)):
        v = vecs[where[obs.text]].copy()
        for t in adj:
            v += CONTEXT_WEIGHT * vecs[where[t]]
        dense[n] = v / max(float(np.linalg.norm(v)), 1e-12)
    multi = [
        np.vstack([dense[n : n + 1], rows[o.text]]) if o.text in rows else dense[n : n + 1]
        for n, o in enumerate(observations)
    ]
    return dense, multi
