"""LoCoMo helpers for the retrieval benchmark: loading, evidence ids, recall at a turn budget, baselines.

Follows ``../shared/data/README.md`` ("How the retrieval figures are counted"):

- evidence entries are split on ``;``, ``,`` and white space; ``D<s>:<t>`` is accepted with an optional
  colon after ``D`` and leading zeros (``D:11:26`` → ``D11:26``, ``D30:05`` → ``D30:5``); malformed ids
  and ids absent from the conversation are dropped; a question left with no evidence is not counted
  (1,536 questions of categories 1-4 remain over the 10 conversations);
- recall at a budget of k turns: results in rank order, each expanded into its source turns (in its own
  order), the first k distinct turns kept; recall@k = |evidence ∩ kept| / |evidence|.

The two halves of the protocol that cannot overfit (issue 45): conversations 0-4 of ``locomo10.json`` (positions
in the file) are the half every weight, threshold and switch is *chosen on*; conversations 5 and up are *held out*,
the half a change is judged on (``locomo_half``). A file with five conversations or fewer has an empty held-out half.

The raw-turn baselines (BM25 with ``bm25s``, dense MiniLM, and their reciprocal rank fusion) index each
turn as exactly the text engram indexes: ``ConversationMessage.display_text()`` from the LoCoMo adapter.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
LOCOMO_FILE = Path("conversations") / "locomo10.json"
CATEGORIES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
EXPECTED_QUESTIONS = 1536  # categories 1-4 with evidence, all 10 conversations (data README)
RRF_K = 60
#: The two halves of every figure: tuned on, and judged on (see the module docstring).
HALVES: tuple[str, str] = ("chosen_on", "held_out")
#: Conversations at positions below this are the chosen-on half; the rest are held out.
CHOSEN_ON_CONVERSATIONS = 5

_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")
_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")


def eval_data_dir() -> Path:
    """``ENGRAM_EVAL_DATA`` or ``<repo>/../shared/data``."""
    return Path(os.environ.get("ENGRAM_EVAL_DATA") or REPO.parent / "shared" / "data")


def locomo_path(data_dir: Path | None = None) -> Path:
    """Path of ``conversations/locomo10.json`` under ``data_dir`` (default: ``eval_data_dir()``)."""
    return Path(data_dir or eval_data_dir()) / LOCOMO_FILE


def load_locomo(data_dir: Path | None = None) -> list[dict]:
    """The LoCoMo samples (a list of 10 dicts). Raises FileNotFoundError when the file is absent."""
    path = locomo_path(data_dir)
    if not path.exists():
        raise FileNotFoundError(f"LoCoMo not found at {path} (set ENGRAM_EVAL_DATA)")
    return json.loads(path.read_bytes())


def locomo_half(conversation: int) -> str:
    """``"chosen_on"`` for conversations 0-4 (positions in the LoCoMo file), ``"held_out"`` for 5 and up."""
    return HALVES[0] if conversation < CHOSEN_ON_CONVERSATIONS else HALVES[1]


def half_conversations(total: int, half: str | None, picked: Sequence[int] | None = None) -> list[int] | None:
    """The conversation positions to run: ``picked`` (default: all ``total``) limited to those of ``half``
    (``"chosen_on"`` or ``"held_out"``; None: no limit, and ``picked`` is returned as given). Raises ValueError
    for another half."""
    if half is None:
        return None if picked is None else list(picked)
    if half not in HALVES:
        raise ValueError(f"half must be one of {HALVES}, not {half!r}")
    return [i for i in (range(total) if picked is None else picked) if locomo_half(i) == half]


def row_key(row: dict) -> tuple:
    """What identifies a question's row across runs: ``(sample_id, question)`` (LoCoMo), ``(question_id,)``
    (LongMemEval)."""
    return (row["question_id"],) if "question_id" in row else (row["sample_id"], row["question"])


def _at(recall: dict, k: int) -> float:
    """A row's recall at ``k``, whether its keys are ints (in memory) or strings (read back from JSON)."""
    return recall[k] if k in recall else recall[str(k)]


def paired_comparison(
    before: Sequence[dict],
    after: Sequence[dict],
    system: str = "engram",
    k: int = 10,
    resamples: int = 2000,
    seed: int = 0,
) -> dict:
    """Whether a change moved ``system``'s recall@``k``, question by question (the per-question rows of two runs
    of ``bench/retrieval.py --rows``, matched by ``row_key``; rows in only one run are left out).

    Returns ``{half: {group: {"n", "before", "after", "diff", "ci95": [lo, hi], "better", "worse"}}}`` with
    ``half`` ``chosen_on`` / ``held_out`` and ``group`` ``"all"`` and each category (or LongMemEval type):
    the mean difference after − before, its 95 % interval by a paired bootstrap (``resamples`` draws of the
    questions with replacement, seeded), and how many questions rose or fell. A change whose held-out interval
    holds 0 is not shown to help."""
    rng = np.random.default_rng(seed)
    old = {row_key(r): r for r in before}
    pairs = [(old[row_key(r)], r) for r in after if row_key(r) in old]
    out: dict = {}
    for half in HALVES:
        sel = [(a, b) for a, b in pairs if b["half"] == half]
        group_of = "category" if any("category" in b for _, b in sel) else "type"
        groups = {
            "all": sel,
            **{
                str(g): [(a, b) for a, b in sel if b[group_of] == g]
                for g in sorted({b[group_of] for _, b in sel}, key=str)
            },
        }
        out[half] = {}
        for g, ps in groups.items():
            if not ps:
                continue
            x = np.array([_at(a["recall"][system], k) for a, _ in ps], dtype=float)
            y = np.array([_at(b["recall"][system], k) for _, b in ps], dtype=float)
            d = y - x
            means = d[rng.integers(0, len(d), size=(resamples, len(d)))].mean(axis=1)
            out[half][g] = {
                "n": len(d),
                "before": float(x.mean()),
                "after": float(y.mean()),
                "diff": float(d.mean()),
                "ci95": [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))],
                "better": int((d > 0).sum()),
                "worse": int((d < 0).sum()),
            }
    return out


def normalize_evidence_id(token: str) -> str | None:
    """``D<s>:<t>`` in canonical form (``D:11:26`` → ``D11:26``, ``D30:05`` → ``D30:5``); None if
    malformed."""
    m = _EVIDENCE_ID.fullmatch(token.strip())
    if m is None:
        return None
    return f"D{int(m.group(1))}:{int(m.group(2))}"


def parse_evidence(entries: Iterable[str], turn_ids: set[str] | None = None) -> list[str]:
    """Canonical evidence ids of one question, in order and without repeats.

    Each entry is split on ``;``, ``,`` and white space; malformed ids are dropped, and so are ids not in
    ``turn_ids`` (the conversation's ``dia_id``s) when it is given.
    """
    out: dict[str, None] = {}
    for entry in entries:
        for token in _EVIDENCE_SPLIT.split(str(entry)):
            if not token:
                continue
            eid = normalize_evidence_id(token)
            if eid is not None and (turn_ids is None or eid in turn_ids):
                out[eid] = None
    return list(out)


def sample_turns(sample: dict) -> list:
    """The dialog turns of one sample as engram's conversation record (``ConversationMessage``), in order."""
    from engram.workers.media.conversations import locomo_sample_messages

    return locomo_sample_messages(sample)


def turn_ids(sample: dict) -> set[str]:
    """All ``dia_id``s of one sample's dialog turns."""
    return {
        turn["dia_id"]
        for key, turns in sample["conversation"].items()
        if re.fullmatch(r"session_\d+", key)
        for turn in turns
    }


@dataclass(frozen=True)
class Question:
    """One counted LoCoMo question: category 1-4 with at least one valid evidence turn."""

    sample_id: str
    conversation: int
    index: int
    question: str
    category: int
    evidence: tuple[str, ...]


def sample_questions(sample: dict, conversation: int = 0) -> list[Question]:
    """The counted questions of one sample (categories 1-4, evidence parsed and non-empty)."""
    from engram.workers.media.conversations import locomo_sample_id

    ids = turn_ids(sample)
    out = []
    for i, qa in enumerate(sample.get("qa", [])):
        if qa.get("category") not in CATEGORIES:
            continue
        evidence = parse_evidence(qa.get("evidence") or [], ids)
        if evidence:
            out.append(
                Question(
                    locomo_sample_id(sample, conversation),
                    conversation,
                    i,
                    qa["question"],
                    int(qa["category"]),
                    tuple(evidence),
                )
            )
    return out


def all_questions(samples: Sequence[dict]) -> list[Question]:
    """Counted questions of every sample, in order (1,536 for the full LoCoMo-10)."""
    return [q for i, s in enumerate(samples) for q in sample_questions(s, i)]


def recall_at_budget(ranked_sources: Sequence[Sequence[str]], evidence: set[str], k: int) -> float:
    """Evidence recall at a budget of ``k`` turns.

    ``ranked_sources`` holds the results in rank order, each as its source turn ids in its own order. The
    results are expanded in order and the first ``k`` distinct turns are kept; returns
    ``|evidence ∩ kept| / |evidence|``. Raises ValueError for empty evidence (such questions are not counted).
    """
    if not evidence:
        raise ValueError("a question with no evidence is not counted")
    kept = kept_turns(ranked_sources, k)
    return len(set(evidence) & set(kept)) / len(evidence)


def kept_turns(ranked_sources: Sequence[Sequence[str]], k: int) -> list[str]:
    """The first ``k`` distinct turns of the expanded results, in order."""
    kept: dict[str, None] = {}
    for sources in ranked_sources:
        for turn in sources:
            if len(kept) >= k:
                return list(kept)
            kept.setdefault(turn, None)
    return list(kept)


def rrf_fuse(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> list[str]:
    """Ids fused by reciprocal rank fusion (score Σ 1/(k + rank), rank 1 first), best first; ties keep
    first-seen order."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda x: -scores[x])


class TurnBaselines:
    """Raw-turn retrieval over one conversation: BM25 (``bm25s``), dense MiniLM cosine, and their RRF.

    ``texts`` are the turns as engram indexes them (``display_text()``). BM25 uses engram's tokenizer
    (``workers.text.sparse.tokenize``: bm25s tokenizer, English stop words, PyStemmer English stemmer) and
    engram's k1/b; only turns sharing a term with the query are retrieved. Dense embeddings go through
    ``workers.models.embed_cached`` with the given cache (the runtime's), so they cost no model time after
    an ingest of the same turns.
    """

    def __init__(self, ids: Sequence[str], texts: Sequence[str], settings=None, cache=None) -> None:
        import bm25s

        from engram.schemas.settings import get_settings
        from engram.workers.text import sparse

        if len(ids) != len(texts):
            raise ValueError("ids and texts differ in length")
        self.ids = list(ids)
        self.texts = list(texts)
        self.settings = settings or get_settings()
        self.cache = cache
        self._tokenize = sparse.tokenize
        self.bm25 = bm25s.BM25(k1=self.settings.bm25_k1, b=self.settings.bm25_b)
        self.bm25.index(self._tokenize(self.texts), show_progress=False)
        self.vectors = self._embed(self.texts)

    def _embed(self, texts: list[str]) -> np.ndarray:
        from engram.workers.models import embed_cached, get_model

        model = get_model("embedding", self.settings)
        return embed_cached(model, self.cache, texts, self.settings.models.embedding_batch_size)

    def _embed_query(self, query: str) -> np.ndarray:
        """The query's vector as engram's search makes it (``embed_queries``: e5's ``query:`` prefix; MiniLM's is
        ``embed``), so a dense baseline never scores a question as a passage."""
        from engram.workers.models import get_model

        return get_model("embedding", self.settings).embed_queries([query])[0]

    def bm25_ranking(self, query: str) -> list[str]:
        """Turn ids with a BM25 score above zero, best first (ties in conversation order)."""
        tokens = [t for t in self._tokenize([query])[0] if t in self.bm25.vocab_dict]
        if not tokens:
            return []
        scores = np.asarray(self.bm25.get_scores(tokens), dtype=np.float64)
        order = np.argsort(-scores, kind="stable")
        return [self.ids[i] for i in order if scores[i] > 0]

    def dense_ranking(self, query: str, query_vector: np.ndarray | None = None) -> list[str]:
        """All turn ids by cosine similarity to the query (unit vectors), best first."""
        qv = self._embed_query(query) if query_vector is None else query_vector
        scores = self.vectors @ qv.astype(np.float32)
        return [self.ids[i] for i in np.argsort(-scores, kind="stable")]

    def rrf_ranking(self, query: str) -> list[str]:
        """BM25 and dense rankings fused by reciprocal rank fusion (k=60)."""
        return rrf_fuse([self.bm25_ranking(query), self.dense_ranking(query)], RRF_K)

    def rankings(self, query: str) -> dict[str, list[str]]:
        """``{"BM25": [...], "dense": [...], "RRF": [...]}`` for one query."""
        bm25 = self.bm25_ranking(query)
        dense = self.dense_ranking(query)
        return {"BM25": bm25, "dense": dense, "RRF": rrf_fuse([bm25, dense], RRF_K)}


def turn_baselines(sample: dict, settings=None, cache=None) -> TurnBaselines:
    """``TurnBaselines`` over one sample's turns, with the text engram indexes for each."""
    msgs = sample_turns(sample)
    return TurnBaselines([m.message_id for m in msgs], [m.display_text() for m in msgs], settings, cache)


if __name__ == "__main__":
    qs = all_questions(load_locomo())
    print(f"{len(qs)} counted questions (categories 1-4 with evidence)")
    assert len(qs) == EXPECTED_QUESTIONS, len(qs)
