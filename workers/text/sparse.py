"""Sparse BM25 vectors made without a model download (DESIGN.md "Contracts").

Tokens are bm25s's (``bm25s.tokenize(texts, stopwords="en", stemmer=<PyStemmer English>)``: lower-cased words of
two or more word characters, the 33 English stop words of Lucene / scikit-learn left out, then the Snowball English
stemmer), made here by the same three steps (``tokenize``) because importing bm25s imports numba and scipy.sparse,
about half a second of a cold ``engram search`` that needs neither; ``tests/workers/text/test_sparse.py`` holds
them equal to ``bm25s.tokenize`` over every LoCoMo turn, so stored vectors keep their meaning. Each
token's index is a stable 32-bit hash (blake2b), its value BM25's term-frequency weight
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))`` (Robertson & Zaragoza, 2009). The collection's
sparse vector uses Qdrant's IDF modifier, so the product of query and document vectors is BM25.

A document made of fields (a turn and the neighbouring turns it is indexed with) gets BM25F's weight
(Robertson, Zaragoza & Taylor, 2004, "Simple BM25 extension to multiple weighted fields"): each field's term
frequency is length-normalised against that field's own average length and weighted, the sum saturated once,
``tf~ = sum_f w_f * tf_f / (1 - b + b * dl_f / avgdl_f)``, weight ``tf~ * (k1 + 1) / (tf~ + k1)``. One field of
weight 1 gives plain BM25; a long field (a neighbour's 500-word answer) then dilutes only itself.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import Counter
from functools import lru_cache

from cachetools import LRUCache

_stemmer_lock = threading.Lock()
_stemmer = None


def _get_stemmer():
    global _stemmer
    with _stemmer_lock:
        if _stemmer is None:
            import Stemmer  # start-up time: only a process that tokenizes loads the stemmer

            _stemmer = Stemmer.Stemmer("english")
        return _stemmer


#: bm25s's token pattern (scikit-learn's ``CountVectorizer`` default): runs of two or more word characters.
TOKEN_PATTERN = re.compile(r"(?u)\b\w\w+\b")

#: bm25s's English stop words (``stopwords="en"``: ``bm25s.stopwords.STOPWORDS_EN``, Lucene's list), matched on
#: the lower-cased token before stemming.
STOPWORDS_EN = frozenset(
    (
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    )
)


def tokenize(texts: list[str]) -> list[list[str]]:
    """Lower-cased, stop-word-free, stemmed tokens of each text (list of n texts -> n token lists, in order): the
    tokens of ``bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), return_ids=False)``
    (``TOKEN_PATTERN`` on the lower-cased text, ``STOPWORDS_EN`` left out, PyStemmer's Snowball English stemmer),
    without importing bm25s (see the module docstring)."""
    if not texts:
        return []
    words = [[w for w in TOKEN_PATTERN.findall(text.lower()) if w not in STOPWORDS_EN] for text in texts]
    distinct = list(dict.fromkeys(w for ws in words for w in ws))
    stemmer = _get_stemmer()
    with _stemmer_lock:  # PyStemmer objects are not thread safe
        stem = dict(zip(distinct, stemmer.stemWords(distinct), strict=True))
    return [[stem[w] for w in ws] for ws in words]


@lru_cache(maxsize=200_000)
def token_index(token: str) -> int:
    """Stable index of a token: the first 4 bytes of its blake2b digest, as an unsigned 32-bit int."""
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=4).digest(), "little")


def _field_weights(fields: list[tuple[list[str], float, float]], k1: float, b: float) -> tuple[list[int], list[float]]:
    """BM25F weights of one document given as (tokens, weight, avgdl) per field."""
    pseudo: dict[str, float] = {}
    for tokens, weight, avgdl in fields:
        if not tokens or weight <= 0:
            continue
        scale = weight / (1 - b + b * len(tokens) / avgdl)
        for tok, tf in Counter(tokens).items():
            pseudo[tok] = pseudo.get(tok, 0.0) + tf * scale
    merged: dict[int, float] = {}
    for tok, tf in pseudo.items():
        idx = token_index(tok)
        merged[idx] = merged.get(idx, 0.0) + tf * (k1 + 1) / (tf + k1)
    indices = sorted(merged)
    return indices, [merged[i] for i in indices]


#: Tokens of the texts tokenized last (text -> tokens), so a text indexed again (a turn as its neighbours'
#: context in the next segment, the turns of an episode at consolidation) is not tokenized again. Sized for a
#: conversation of a few thousand turns between its embed stage and its consolidation (~3 MB per 1,000
#: turns of a few hundred tokens).
TOKEN_CACHE_SIZE = 4096
_tokens: LRUCache[str, list[str]] = LRUCache(maxsize=TOKEN_CACHE_SIZE)
_tokens_lock = threading.Lock()  # LRUCache is not thread safe


def clear_memo() -> None:
    """Forget the tokens and token indexes kept of the texts seen (a benchmark's cold run)."""
    with _tokens_lock:
        _tokens.clear()
    token_index.cache_clear()


def _cached_tokens(texts: list[str]) -> dict[str, list[str]]:
    """Tokens of each distinct text of ``texts`` (``tokenize``), through the process's token cache."""
    out: dict[str, list[str]] = {}
    with _tokens_lock:
        for t in texts:
            got = _tokens.get(t)  # a hit counts as a use
            if got is not None:
                out[t] = got
    missing = [t for t in dict.fromkeys(texts) if t not in out]
    if missing:
        fresh = dict(zip(missing, tokenize(missing), strict=True))
        out.update(fresh)
        with _tokens_lock:
            _tokens.update(fresh)
    return out


def tokenize_parts(docs: list[str | list[str]]) -> list[list[str]]:
    """Tokens of each document, given as one text or as its parts (the texts it joins with spaces or line
    breaks): the tokens of ``" ".join(parts)``, with each distinct part tokenized once. A token never spans
    the separator between two parts, so the result equals ``tokenize`` of the joined texts; a turn indexed
    with its neighbours as context is then tokenized once, not once per document it appears in (and a part
    seen lately, by an earlier call in this process, is not tokenized again: ``TOKEN_CACHE_SIZE``)."""
    parts = [[d] if isinstance(d, str) else list(d) for d in docs]
    toks = _cached_tokens([p for ps in parts for p in ps])
    return [[t for p in ps for t in toks[p]] for ps in parts]


def document_vectors(
    texts: list[str | list[str]], k1: float = 1.2, b: float = 0.75, avgdl: float | list[float] = 24.0
) -> list[tuple[list[int], list[float]]]:
    """BM25 document vectors (indices ascending, TF weights) for each text (a string, or its parts as
    ``tokenize_parts`` takes them).

    ``avgdl`` is the average document length in tokens that length normalisation compares each text with:
    one value for all, or one per text (e.g. a turn indexed with four neighbours is compared with five
    turns' worth of tokens, so context does not make it look long). Plain BM25 is BM25F with one field of
    weight 1 (``fielded_vectors``). Raises ValueError for a count of avgdl values other than one per text."""
    avgdls = avgdl if isinstance(avgdl, list) else [avgdl] * len(texts)
    if len(avgdls) != len(texts):
        raise ValueError("one avgdl per text")
    return fielded_vectors(
        [[([t] if isinstance(t, str) else t, 1.0, a)] for t, a in zip(texts, avgdls, strict=True)], k1, b
    )


def fielded_vectors(
    docs: list[list[tuple[list[str], float, float]]], k1: float = 1.2, b: float = 0.75
) -> list[tuple[list[int], list[float]]]:
    """BM25F document vectors (indices ascending, TF weights; see the module docstring) of documents given as
    fields, each field ``(parts, weight, avgdl)``: its texts (tokenized as ``tokenize_parts`` does), its weight
    and the average length in tokens its length is compared with. E.g. a chat turn as ``[([date, text], 1.0,
    24.0), (neighbours, 0.5, 4 * 24.0)]``. Raises ValueError for a non-positive avgdl."""
    flat = [(parts, weight, avgdl) for doc in docs for parts, weight, avgdl in doc]
    if any(avgdl <= 0 for _, _, avgdl in flat):
        raise ValueError("avgdl must be positive")
    tokens = iter(tokenize_parts([list(parts) for parts, _, _ in flat]))
    return [_field_weights([(next(tokens), weight, avgdl) for _, weight, avgdl in doc], k1, b) for doc in docs]


def query_vector(text: str) -> tuple[list[int], list[float]]:
    """The query's sparse vector: weight 1 per distinct token (Qdrant multiplies by IDF)."""
    toks = tokenize([text])[0]
    indices = sorted({token_index(t) for t in toks})
    return indices, [1.0] * len(indices)
