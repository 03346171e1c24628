"""MiniLM on onnxruntime (the model exported at setup) gives sentence-transformers' vectors, and a search in a
new process embeds its query without importing torch; its int8 form gives vectors close to them, each text's its
own whatever it is batched with, cached apart."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from engram.workers.models import embeddings as emb
from engram.workers.models.embeddings import (
    CHECK_TEXTS,
    ONNX_FILE,
    ONNX_INT8_FILE,
    EmbeddingCache,
    MiniLMEmbedder,
    embed_cached,
    export_onnx,
    length_batches,
    quantize_onnx,
)
from tests.conftest import REPO, run_forked

TEXTS = [*CHECK_TEXTS, "Caroline went to the LGBTQ support group on 7 May 2023.", "", "[/code] [bold]x[/bold]"]


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    """A fresh export (what scripts/setup.sh writes into the models cache)."""
    out = tmp_path_factory.mktemp("onnx")
    assert export_onnx(out) == out / ONNX_FILE
    return out


def test_onnx_and_torch_give_the_same_vectors(onnx_dir):
    onnx = MiniLMEmbedder("all-MiniLM-L6-v2", runtime="onnx", onnx_dir=str(onnx_dir))
    torch = MiniLMEmbedder("all-MiniLM-L6-v2", runtime="torch")
    a, b = onnx.embed(TEXTS, batch_size=3), torch.embed(TEXTS, batch_size=3)
    assert a.shape == b.shape == (len(TEXTS), 384) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert (a * b).sum(axis=1).min() > 1 - 1e-3
    assert np.allclose(onnx.embed(TEXTS[::-1], batch_size=64)[::-1], a, atol=1e-5)  # order does not matter


def test_onnx_runtime_without_the_export_says_how_to_make_it(tmp_path):
    from engram.workers.models.base import ModelUnavailable

    with pytest.raises(ModelUnavailable, match="engram.workers.models.embeddings export"):
        MiniLMEmbedder("all-MiniLM-L6-v2", runtime="onnx", onnx_dir=str(tmp_path)).embed(["x"])
    auto = MiniLMEmbedder("all-MiniLM-L6-v2", runtime="auto", onnx_dir=str(tmp_path))
    assert auto.embed(["x"]).shape == (1, 384)  # no export: sentence-transformers


def test_a_search_in_a_new_process_does_not_import_torch(onnx_dir, tmp_path):
    code = (
        "import json, sys\n"
        "from engram.schemas.search import SearchRequest\n"
        "from engram.workers.query import search\n"
        "from engram.workers.runtime import runtime\n"
        "resp = search(runtime(), SearchRequest(query='where did she go camping last May?', tenant_id='t'))\n"
        "print(json.dumps({'hits': len(resp.hits), 'torch': 'torch' in sys.modules,\n"
        "                  'transformers': 'transformers' in sys.modules}))\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
        "ENGRAM_MODELS__CACHE_DIR": str(onnx_dir),
        "ENGRAM_MODELS__EMBEDDING_RUNTIME": "onnx",
    }
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"hits": 0, "torch": False, "transformers": False}


def test_onnx_and_torch_give_the_same_sentence_rows(onnx_dir):
    """Late chunking (``embed_spans``) pools the same token states on both runtimes; a span past the 256 word
    pieces the model reads has no row."""
    from engram.workers.memory.embedding import sentence_spans

    texts = [
        "Caroline: Hey Mel! Good to see you! How have you been?",
        "  Mel: Great.  Busy with the kids!",
        "Wow. " * 300 + "End here.",
    ]
    spans = [sentence_spans(texts[0]), sentence_spans(texts[1]), [(0, 4), (len(texts[2]) - 9, len(texts[2]))]]
    onnx = MiniLMEmbedder("all-MiniLM-L6-v2", runtime="onnx", onnx_dir=str(onnx_dir))
    torch = MiniLMEmbedder("all-MiniLM-L6-v2", runtime="torch")
    (a, ra), (b, rb) = onnx.embed_spans(texts, spans, batch_size=2), torch.embed_spans(texts, spans, batch_size=2)
    assert np.allclose(a, onnx.embed(texts), atol=1e-6) and (a * b).sum(axis=1).min() > 1 - 1e-3
    assert [r.shape for r in ra] == [r.shape for r in rb] == [(3, 384), (2, 384), (1, 384)]
    assert min(float((x * y).sum(axis=1).min()) for x, y in zip(ra, rb, strict=True)) > 1 - 1e-3


def test_batches_group_texts_of_similar_token_counts():
    """Longest first, at most ``batch_size`` a batch, split where the model's cost (a run's overhead plus its padded
    slots) is least: one long text among short ones runs alone instead of padding them all to its length, and
    texts of near lengths share a run instead of paying a run each."""
    lengths = np.array([12, 250, 10, 11, 12, 9, 10, 40])
    batches = length_batches(lengths, batch_size=64)
    assert [lengths[b].tolist() for b in batches] == [[250], [40], [12, 12, 11, 10, 10, 9]]
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))
    same = length_batches(np.full(10, 7), batch_size=4)
    assert len(same) == 3 and max(len(b) for b in same) == 4  # as few runs as batch_size allows
    assert length_batches(np.zeros(0, dtype=np.int64), batch_size=4) == []
    # twelve chat turns of 20-60 tokens: two runs, not one per 10 % of padding
    turns = np.array([60, 57, 55, 52, 48, 45, 41, 38, 33, 30, 26, 20])
    assert len(length_batches(turns, batch_size=64)) <= 3
    # the least cost among all ways to cut the sorted texts (brute force over the 2^(n-1) cuts of 9 texts)
    rng = np.random.default_rng(7)
    for _ in range(20):
        ls = rng.integers(3, 200, size=9)
        got = length_batches(ls, batch_size=4)

        def cost(runs, ls=ls):
            return sum(
                emb.RUN_OVERHEAD_SLOTS + len(r) * ls[r].max() * (1 + emb.ATTENTION_PER_TOKEN * ls[r].max())
                for r in runs
            )

        srt = np.argsort(-ls, kind="stable")
        cuts = [
            [srt[a:b] for a, b in zip((0, *c), (*c, 9), strict=True)]
            for m in range(1 << 8)
            for c in [tuple(i + 1 for i in range(8) if m >> i & 1)]
        ]
        least = min(cost(r) for r in cuts if max(len(x) for x in r) <= 4)
        assert all(len(b) <= 4 for b in got) and cost(got) <= least + 1e-9


def test_vectors_do_not_depend_on_the_batches_a_text_runs_in(onnx_dir):
    """A text's vector is the same alone and batched with texts of other lengths (padding is masked)."""
    model = MiniLMEmbedder("all-MiniLM-L6-v2", runtime="onnx", onnx_dir=str(onnx_dir))
    texts = ["short one", "budget " * 200, "a middling sentence about the budget review on Friday", "ok"]
    together = model.embed(texts, 64)
    alone = np.vstack([model.embed([t], 64) for t in texts])
    assert np.allclose(together, alone, atol=1e-5)


def test_the_embedder_takes_the_configured_threads_per_model(onnx_dir):
    """``models.cpu_threads`` is how many batches run at once (several worker processes on one machine each give
    theirs), 0 one per usable core; each run is single-threaded."""
    from engram.schemas.settings import Settings
    from engram.workers.models import get_model

    for threads in (1, 0):
        model = get_model(
            "embedding", Settings(models={"cpu_threads": threads, "cache_dir": onnx_dir, "embedding_runtime": "onnx"})
        )
        assert model.embed(["one thread"]).shape == (1, 384)
        assert model.session.runs == (threads or emb.usable_cores())
        assert model.session.session.get_session_options().intra_op_num_threads == 1


def test_batches_run_at_once_give_the_vectors_of_batches_run_one_by_one(onnx_dir):
    """Several run threads write each text's vector and sentence rows to its own place: the same as one thread,
    for a call of many batches of mixed lengths and for a small call split so each thread gets some."""
    one = MiniLMEmbedder("all-MiniLM-L6-v2", runtime="onnx", onnx_dir=str(onnx_dir), threads=1)
    three = MiniLMEmbedder("all-MiniLM-L6-v2", runtime="onnx", onnx_dir=str(onnx_dir), threads=3)
    texts = [f"turn {i}: " + "we talked about the budget. Then lunch. " * (i % 7) for i in range(150)]
    spans = [[(0, len(t) // 2), (len(t) // 2, len(t))] for t in texts]
    for batch in (8, 64):
        (a, ra), (b, rb) = one.embed_spans(texts, spans, batch), three.embed_spans(texts, spans, batch)
        assert np.allclose(a, b, atol=1e-5)
        assert all(x.shape == y.shape and np.allclose(x, y, atol=1e-5) for x, y in zip(ra, rb, strict=True))
    assert np.allclose(one.embed(texts[:5]), three.embed(texts[:5]), atol=1e-5)


def test_spans_given_as_a_function_are_found_on_the_run_threads_with_the_same_rows(onnx_dir):
    """A caller may give each text's spans as a function of the text: the ONNX runtime calls it on its run threads
    once the text's batch has run (the caller's sentence splitting beside the model's other runs), once per text,
    and the rows are those of the spans given as a list; the torch runtime calls it before its pass."""
    import threading

    texts = [f"turn {i}: we talked about the budget. Then lunch with Ana." + " And more." * (i % 5) for i in range(40)]
    spans = {t: [(0, len(t) // 3), (len(t) // 3, len(t))] for t in texts}
    called: list[tuple[str, str]] = []

    def spans_of(text: str) -> list[tuple[int, int]]:
        called.append((text, threading.current_thread().name))
        return spans[text]

    onnx = MiniLMEmbedder("all-MiniLM-L6-v2", runtime="onnx", onnx_dir=str(onnx_dir), threads=2)
    want, want_rows = onnx.embed_spans(texts, [spans[t] for t in texts], 8)
    got, got_rows = onnx.embed_spans(texts, spans_of, 8)
    assert np.allclose(got, want, atol=1e-5)
    assert all(
        x.shape == y.shape == (2, 384) and np.allclose(x, y, atol=1e-5)
        for x, y in zip(got_rows, want_rows, strict=True)
    )
    assert sorted(t for t, _ in called) == sorted(texts)
    assert {name.split("_")[0] for _, name in called} == {"engram-embed"}
    called.clear()
    torch = MiniLMEmbedder("all-MiniLM-L6-v2", runtime="torch")
    _, torch_rows = torch.embed_spans(texts[:4], spans_of, 2)
    assert [t for t, _ in called] == texts[:4]
    assert all(np.allclose(x, y, atol=1e-3) for x, y in zip(torch_rows, want_rows[:4], strict=True))


def test_a_forked_child_embeds_and_no_run_thread_outlives_its_call(onnx_dir):
    """A prefork worker's child embeds with the model its parent loaded and used; the parent's run threads ended
    with its call, so the fork copies no idle thread of ours."""
    import threading

    model = MiniLMEmbedder("all-MiniLM-L6-v2", runtime="onnx", onnx_dir=str(onnx_dir), threads=2)
    texts = [f"message {i} about the trip to Lisbon" * (1 + i % 4) for i in range(40)]
    want = model.embed(texts, 8)
    assert not [t for t in threading.enumerate() if t.name.startswith("engram-embed")]
    got = np.frombuffer(run_forked(lambda: model.embed(texts, 8).tobytes()), dtype=np.float32).reshape(-1, 384)
    assert np.allclose(got, want, atol=1e-5)


@pytest.fixture(scope="module")
def int8_dir(onnx_dir):
    """The export and its int8 form beside it (both written by scripts/setup.sh)."""
    assert quantize_onnx(onnx_dir) == onnx_dir / ONNX_INT8_FILE
    return onnx_dir


def test_int8_runtime_gives_close_vectors_of_each_text_alone_kept_apart_in_the_cache(int8_dir, tmp_path):
    """'onnx-int8' runs the int8 form ``quantize_onnx`` writes beside the export: unit vectors at cosine ~0.99 of
    the float model's; a text's vector does not depend on the texts it is embedded with (each runs alone: the
    activations' int8 scales are taken per run); kept in the embedding cache under their own name, so a cache the
    float runtime filled is never read as the int8 model's vectors, nor the other way round."""
    float_model = MiniLMEmbedder("all-MiniLM-L6-v2", runtime="onnx", onnx_dir=str(int8_dir))
    int8 = MiniLMEmbedder("all-MiniLM-L6-v2", runtime="onnx-int8", onnx_dir=str(int8_dir), threads=2)
    a, b = float_model.embed(TEXTS), int8.embed(TEXTS)
    assert b.shape == (len(TEXTS), 384) and b.dtype == np.float32
    assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    cosines = (a * b).sum(axis=1)
    assert cosines.min() > 0.95 and np.median(cosines) > 0.98 and not np.allclose(a, b, atol=1e-3)
    assert np.allclose(np.vstack([int8.embed([t]) for t in TEXTS]), b, atol=1e-6)  # alone = together
    assert np.allclose(int8.embed(TEXTS[::-1], batch_size=3)[::-1], b, atol=1e-6)
    assert (float_model.cache_id, int8.cache_id) == ("all-MiniLM-L6-v2", "all-MiniLM-L6-v2.int8")
    cache = EmbeddingCache(tmp_path / "embeddings.sqlite")
    assert np.allclose(embed_cached(float_model, cache, TEXTS[:4]), a[:4], atol=1e-6)
    assert np.allclose(embed_cached(int8, cache, TEXTS[:4]), b[:4], atol=1e-6)  # not the float rows cached first
    assert np.allclose(embed_cached(float_model, cache, TEXTS[:4]), a[:4], atol=1e-6)


def test_int8_runtime_says_how_to_make_its_model_and_where_it_runs(int8_dir, tmp_path):
    from engram.schemas.settings import Settings
    from engram.workers.models import get_model
    from engram.workers.models.base import ModelUnavailable

    with pytest.raises(ModelUnavailable, match="int8.onnx: run `python -m engram.workers.models.embeddings export`"):
        MiniLMEmbedder("all-MiniLM-L6-v2", runtime="onnx-int8", onnx_dir=str(tmp_path)).embed(["x"])
    with pytest.raises(ModelUnavailable, match="int8.onnx: run"):  # no folder given: never the float model instead
        MiniLMEmbedder("all-MiniLM-L6-v2", runtime="onnx-int8").embed(["x"])
    with pytest.raises(ModelUnavailable, match="CPU only"):
        MiniLMEmbedder("all-MiniLM-L6-v2", runtime="onnx-int8", onnx_dir=str(int8_dir), device="cuda").embed(["x"])
    with pytest.raises(FileNotFoundError):
        quantize_onnx(tmp_path)  # no float export to quantize
    model = get_model("embedding", Settings(models={"cache_dir": int8_dir, "embedding_runtime": "onnx-int8"}))
    assert model.cache_id.endswith(".int8") and model.embed(["configured"]).shape == (1, 384)
    assert model.session.per_text
