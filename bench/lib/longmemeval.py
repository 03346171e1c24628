"""LongMemEval helpers for the retrieval benchmark: loading, session recall at a budget, session baselines.

Follows ``../shared/data/README.md`` ("How the retrieval figures are counted"): results are expanded into
their source sessions (in their own order), the first k distinct sessions are kept, and recall_any@k is 1
when any of the question's ``answer_session_ids`` is kept. Abstention questions (``_abs`` ids) are skipped:
98 of the 102 public LongMemEval-S files remain.

The two halves (issue 45): a question is in the *chosen on* half when
``int(hashlib.md5(question_id.encode()).hexdigest(), 16) % 2 == 0`` and *held out* otherwise
(``longmemeval_half``).

The baselines rank the question's haystack sessions as documents (each session's turns as engram indexes
them, ``ConversationMessage.display_text()``, joined): BM25 (``bm25s`` with engram's tokenizer), dense
MiniLM (the session text's embedding; MiniLM reads its first 256 word pieces) and their reciprocal rank
fusion (k=60).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.lib.locomo import HALVES, RRF_K, eval_data_dir, kept_turns, rrf_fuse

LONGMEMEVAL_DIR = Path("conversations") / "longmemeval_s"
EXPECTED_QUESTIONS = 98  # public LongMemEval-S files without abstention (data README)


@dataclass(frozen=True)
class LmeQuestion:
    """One LongMemEval question with its haystack (the raw item) and the sessions that hold its answer."""

    question_id: str
    question: str
    question_type: str
    question_date: str
    answer_sessions: tuple[str, ...]
    item: dict


def longmemeval_path(data_dir: Path | None = None) -> Path:
    """The folder of LongMemEval-S question files under ``data_dir`` (default: ``eval_data_dir()``)."""
    return Path(data_dir or eval_data_dir()) / LONGMEMEVAL_DIR


def load_longmemeval(data_dir: Path | None = None) -> list[LmeQuestion]:
    """The counted questions (no ``_abs`` ids), sorted by id. Raises FileNotFoundError when absent."""
    folder = longmemeval_path(data_dir)
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(f"LongMemEval-S not found at {folder} (set ENGRAM_EVAL_DATA)")
    out = []
    for path in files:
        item = json.loads(path.read_bytes())
        qid = str(item["question_id"])
        if qid.endswith("_abs"):
            continue
        out.append(
            LmeQuestion(
                qid,
                item["question"],
                item.get("question_type", ""),
                item.get("question_date", ""),
                tuple(str(s) for s in item["answer_session_ids"]),
                item,
            )
        )
    return sorted(out, key=lambda q: q.question_id)


def longmemeval_half(question_id: str) -> str:
    """``"chosen_on"`` when the md5 of ``question_id`` (UTF-8, as an integer) is even, else ``"held_out"``."""
    return HALVES[int(hashlib.md5(question_id.encode()).hexdigest(), 16) % 2]


def recall_any_at_budget(ranked_sessions: Sequence[Sequence[str]], answers: set[str], k: int) -> float:
    """1.0 when any answer session is among the first ``k`` distinct sessions of the expanded results."""
    if not answers:
        raise ValueError("a question with no answer session is not counted")
    return float(bool(answers & set(kept_turns(ranked_sessions, k))))


def session_texts(item: dict) -> tuple[list[str], list[str]]:
    """(session ids, session texts) of one question's haystack, each text its turns' display texts."""
    from engram.workers.media.conversations import longmemeval_messages

    ids: list[str] = []
    parts: dict[str, list[str]] = {}
    for msg in longmemeval_messages(item):
        if msg.session_id not in parts:
            ids.append(msg.session_id)
            parts[msg.session_id] = []
        parts[msg.session_id].append(msg.display_text())
    return ids, ["\n".join(parts[s]) for s in ids]


class SessionBaselines:
    """BM25, dense and RRF rankings of one question's haystack sessions as documents."""

    def __init__(self, item: dict, settings=None, cache=None) -> None:
        import bm25s

        from engram.schemas.settings import get_settings
        from engram.workers.models import embed_cached, get_model
        from engram.workers.text import sparse

        self.settings = settings or get_settings()
        self.ids, texts = session_texts(item)
        self._tokenize = sparse.tokenize
        self.bm25 = bm25s.BM25(k1=self.settings.bm25_k1, b=self.settings.bm25_b)
        self.bm25.index(self._tokenize(texts), show_progress=False)
        model = self._model = get_model("embedding", self.settings)
        self._embed = lambda xs: embed_cached(model, cache, xs, self.settings.models.embedding_batch_size)
        self.vectors = self._embed(texts)

    def rankings(self, query: str) -> dict[str, list[str]]:
        """``{"BM25": [...], "dense": [...], "RRF": [...]}`` session ids, best first."""
        tokens = [t for t in self._tokenize([query])[0] if t in self.bm25.vocab_dict]
        bm25: list[str] = []
        if tokens:
            scores = np.asarray(self.bm25.get_scores(tokens), dtype=np.float64)
            bm25 = [self.ids[i] for i in np.argsort(-scores, kind="stable") if scores[i] > 0]
        sims = self.vectors @ self._model.embed_queries([query])[0]  # as engram's search: e5 with its query prefix
        dense = [self.ids[i] for i in np.argsort(-sims, kind="stable")]
        return {"BM25": bm25, "dense": dense, "RRF": rrf_fuse([bm25, dense], RRF_K)}
