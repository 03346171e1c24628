"""A learned reranker of candidate turns for questions that ask for several instances or for a guess (issue 45).

LoCoMo's multi-hop questions name a general word ("What activities has Melanie done with her family?") where the
evidence names instances ("camping", "the museum"), and its open-domain questions ask for a guess ("Would Caroline
likely ..."); the fused ranking of ``workers.memory.search`` misses much of their evidence. For a query with a cue
(``applies``: "would", "likely", "might", "could", "probably", or what/which with a word ending in s as the next
word or the one after: a plural, but also "is", "was", "does", as fitted) the
candidate turns are re-sorted by a logistic regression over per-turn features (``FEATURES``): the turn's rank in
the fused ranking, its BM25 and dense scores and ranks, whether its speaker is the one person the query names,
its length and first person, its session's best rank, and word-level query expansion from the user's own
vocabulary (Kuzi, Shtok & Kurland 2016: the user's words, each embedded alone, pulled by the query's general words
at a cosine threshold; ``word_expansion``).

The coefficients were fitted on LoCoMo's chosen-on half only (conversations 0-4, the 254 cue questions: 31,703
candidate turns, 399 of them evidence; scikit-learn ``StandardScaler`` + ``LogisticRegression(C=0.1)``), picked
by leave-one-conversation-out cross-validation, and judged once on the held-out half: R@10 0.784 -> 0.795 (+0.012,
95 % interval +0.003 to +0.021), multi-hop 0.513 -> 0.535, open-domain 0.508 -> 0.549 (``docs/quality.md``,
"Tried and not landed"). Those figures used bm25s and MiniLM over the raw turns for the BM25 and dense features;
fitted again on the engine's own ranks and scores (Qdrant's, contextual BM25 and best-sentence cosine) the
same model shows no held-out gain (R@10 +0.004, −0.004 to +0.012), so switching it on needs the raw-turn evidence
(BM25 over a turn's own text, its whole-text cosine) in ``search`` first.

Pure functions over arrays (one entry per candidate turn); no store or model is read here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

PLURAL_CUE = re.compile(r"\b(what|which)\s+(\w+\s+)?\w+s\b", re.IGNORECASE)
GUESS_CUE = re.compile(r"\b(would|likely|might|could|probably)\b", re.IGNORECASE)

RRF_K = 60.0
CANDIDATES = 50  # a turn is a candidate when one of its rankings (fused, BM25, dense, expansion) has it this high
NOT_RANKED = 1000.0  # the rank of a turn a ranking did not reach

#: (feature, mean, scale, coefficient) of the fitted model, in the order ``feature_matrix`` builds the columns.
MODEL: tuple[tuple[str, float, float, float], ...] = (
    ("main_rr", 0.323969, 0.336061, -0.0353456),
    ("main_log", 5.32709, 2.00831, -0.563944),
    ("main_top10", 0.0801186, 0.271477, 0.118223),
    ("main_mem", 0.00318582, 0.0563531, -0.111518),
    ("bm_rr", 0.415432, 0.283343, -0.629468),
    ("bm_norm", 0.220119, 0.21806, 0.31281),
    ("dense_rr", 0.452751, 0.255638, 0.185057),
    ("cos", 0.19922, 0.131573, -0.112673),
    ("cos_gap", -0.313632, 0.146139, 0.186213),
    ("cos_i", 0.224673, 0.142248, 0.191075),
    ("spk_named", 0.522821, 0.499479, 0.0387366),
    ("spk_other", 0.375453, 0.48424, -0.775276),
    ("length", 3.17376, 0.513102, 0.29681),
    ("first", 0.697631, 0.459284, 0.33214),
    ("s_best_rr", 0.631264, 0.338568, -0.00852561),
    ("s_cnt", 0.750105, 0.782528, 0.414994),
    ("maxsim", 0.48554, 0.112291, 0.223231),
    ("exp4", 0.63343, 0.465095, -0.0983148),
    ("exp5", 0.242555, 0.318319, 0.134552),
    ("exp6", 0.072217, 0.193247, -0.0254089),
    ("maxsim_n", 0.437873, 0.153292, -0.0426319),
    ("expn35", 0.582537, 0.442086, -0.112768),
    ("expn45", 0.302348, 0.343232, 0.07284),
    ("expn55", 0.107932, 0.226203, 0.0890337),
    ("plural*maxsim", 0.443013, 0.174635, -0.100749),
    ("plural*exp5", 0.221704, 0.31226, -0.00852218),
    ("plural*maxsim_n", 0.400414, 0.191929, -0.175172),
    ("plural*expn45", 0.276466, 0.338073, -0.129475),
    ("plural*main_rr", 0.295847, 0.333935, 0.12407),
    ("plural*spk_named", 0.474939, 0.499372, 0.0150536),
    ("plural*cos", 0.186555, 0.138097, 0.0141463),
    ("plural*bm_norm", 0.203408, 0.217516, 0.557887),
    ("plural*s_best_rr", 0.573944, 0.370119, 0.0137806),
    ("spec*maxsim", 0.0588771, 0.163689, 0.0421197),
    ("spec*exp5", 0.0303334, 0.139178, -0.00103549),
    ("spec*maxsim_n", 0.0516207, 0.149392, -0.0790065),
    ("spec*expn45", 0.0347543, 0.151538, -0.0242905),
    ("spec*main_rr", 0.03839, 0.155721, -0.0473832),
    ("spec*spk_named", 0.0644734, 0.245594, 0.13661),
    ("spec*cos", 0.0186103, 0.0648631, -0.00546605),
    ("spec*bm_norm", 0.0231, 0.0959329, 0.118717),
    ("spec*s_best_rr", 0.0785759, 0.240371, -0.0493223),
    ("main_rr*maxsim", 0.157998, 0.173955, -0.0220636),
    ("spk_named*maxsim", 0.253286, 0.255699, 0.174159),
)
INTERCEPT = -6.294597
FEATURES: tuple[str, ...] = tuple(name for name, *_ in MODEL)


def applies(query: str) -> bool:
    """Whether ``query`` has a cue the reranker was trained for (a guess, or what/which + a plural word)."""
    return bool(GUESS_CUE.search(query) or PLURAL_CUE.search(query))


@dataclass
class TurnFeatures:
    """The evidence about each candidate turn (arrays of one length, one entry per turn).

    Ranks start at 1; a ranking that did not reach a turn gives it ``NOT_RANKED``. ``bm25_score`` is the turn's
    BM25 score (0 where no query word occurs); ``cosine`` its dense cosine with the query without the names it
    gives, ``cosine_as_i`` with the query in which the one person named is "I" (their "'s" "my").
    ``speaker_named`` / ``speaker_other``: the turn's speaker is the one person the query names / the other one
    (both 0 when the query names no one or two people). ``words``: log(1 + the turn's word count);
    ``first_person``: it says I, me, my, we or our. ``session_best``: the best fused rank of a turn of its session;
    ``session_top25``: how many of its session's turns the fused ranking has in its first 25. The expansion
    columns come from ``word_expansion``: over all the user's content words (``best_word``, ``expansion_40``,
    ``_50``, ``_60`` at thresholds 0.4, 0.5, 0.6) and over nouns and -ing verbs only (``best_noun``,
    ``nouns_35``, ``_45``, ``_55``)."""

    fused_rank: np.ndarray
    from_memory: np.ndarray
    bm25_rank: np.ndarray
    bm25_score: np.ndarray
    dense_rank: np.ndarray
    cosine: np.ndarray
    cosine_as_i: np.ndarray
    speaker_named: np.ndarray
    speaker_other: np.ndarray
    words: np.ndarray
    first_person: np.ndarray
    session_best: np.ndarray
    session_top25: np.ndarray
    best_word: np.ndarray
    expansion_40: np.ndarray
    expansion_50: np.ndarray
    expansion_60: np.ndarray
    best_noun: np.ndarray
    nouns_35: np.ndarray
    nouns_45: np.ndarray
    nouns_55: np.ndarray


def word_expansion(
    query_vectors: np.ndarray,
    vocab_vectors: np.ndarray,
    turn_words: np.ndarray,
    literal: np.ndarray,
    thresholds: tuple[float, ...],
) -> tuple[np.ndarray, list[np.ndarray]]:
    """(each turn's best word cosine, each turn's expansion score per threshold) for one query.

    ``query_vectors``: the query's general words (stop words, question words and names left out), each embedded
    alone, unit rows; ``vocab_vectors``: the user's words, likewise; ``turn_words``: a turns × vocabulary 0/1
    matrix (dense or scipy sparse); ``literal``: the vocabulary words that share a stem with a query word (left
    out: BM25 already has them). A vocabulary word is pulled with its best cosine to a query word; a turn's
    expansion score at threshold t is the sum of the cosines >= t of its words, its best word cosine the max."""
    if len(query_vectors) == 0 or len(vocab_vectors) == 0:
        zero = np.zeros(turn_words.shape[0])
        return zero, [zero.copy() for _ in thresholds]
    pull = (vocab_vectors @ query_vectors.T).max(axis=1)
    pull = np.where(literal, 0.0, pull)
    best = np.zeros(turn_words.shape[0])
    rows, cols = turn_words.nonzero()
    np.maximum.at(best, rows, pull[cols])
    sums = [np.asarray(turn_words @ np.where(pull >= t, pull, 0.0)).ravel() for t in thresholds]
    return best, sums


def _rr(rank: np.ndarray) -> np.ndarray:
    return RRF_K / (RRF_K + rank)


def feature_matrix(query: str, f: TurnFeatures) -> np.ndarray:
    """The model's input for the candidate turns of ``query``: one row per turn, the columns of ``FEATURES``."""
    plural = 1.0 if PLURAL_CUE.search(query) else 0.0
    guess = 1.0 if GUESS_CUE.search(query) else 0.0
    one_named = 1.0 if (f.speaker_named.any() and f.speaker_other.any()) else 0.0
    bm25_max = float(f.bm25_score.max(initial=0.0)) or 1.0
    cols = {
        "main_rr": _rr(f.fused_rank),
        "main_log": np.log(f.fused_rank),
        "main_top10": (f.fused_rank <= 10).astype(float),
        "main_mem": f.from_memory,
        "bm_rr": _rr(f.bm25_rank),
        "bm_norm": f.bm25_score / bm25_max,
        "dense_rr": _rr(f.dense_rank),
        "cos": f.cosine,
        "cos_gap": f.cosine - f.cosine.max(initial=0.0),
        "cos_i": f.cosine_as_i,
        "spk_named": f.speaker_named * one_named,
        "spk_other": f.speaker_other * one_named,
        "length": f.words,
        "first": f.first_person,
        "s_best_rr": _rr(f.session_best),
        "s_cnt": np.log1p(f.session_top25),
        "maxsim": f.best_word,
        "exp4": np.log1p(f.expansion_40),
        "exp5": np.log1p(f.expansion_50),
        "exp6": np.log1p(f.expansion_60),
        "maxsim_n": f.best_noun,
        "expn35": np.log1p(f.nouns_35),
        "expn45": np.log1p(f.nouns_45),
        "expn55": np.log1p(f.nouns_55),
    }
    for cue, on in (("plural", plural), ("spec", guess)):
        for name in ("maxsim", "exp5", "maxsim_n", "expn45", "main_rr", "spk_named", "cos", "bm_norm", "s_best_rr"):
            cols[f"{cue}*{name}"] = on * cols[name]
    cols["main_rr*maxsim"] = cols["main_rr"] * cols["maxsim"]
    cols["spk_named*maxsim"] = cols["spk_named"] * cols["maxsim"]
    n = len(f.fused_rank)
    return np.column_stack([np.broadcast_to(np.asarray(cols[name], dtype=float), (n,)) for name in FEATURES])


def scores(query: str, f: TurnFeatures) -> np.ndarray:
    """The model's log-odds that each turn is evidence for ``query`` (higher first)."""
    _, mean, scale, coef = (np.array(c) for c in zip(*MODEL, strict=True))
    return ((feature_matrix(query, f) - mean) / scale) @ coef + INTERCEPT


def candidates(f: TurnFeatures, depth: int = CANDIDATES) -> np.ndarray:
    """The turns the model re-sorts: in the first ``depth`` of the fused, BM25 or dense ranking, or of the turns
    with a noun expansion score (at 0.45) above zero, by that score."""
    order = np.argsort(-f.nouns_45, kind="stable")
    expansion_rank = np.empty(len(order))
    expansion_rank[order] = np.arange(1, len(order) + 1)
    by_expansion = (expansion_rank <= depth) & (f.nouns_45 > 0)
    return (f.fused_rank <= depth) | (f.bm25_rank <= depth) | (f.dense_rank <= depth) | by_expansion


def rerank(query: str, f: TurnFeatures, depth: int = CANDIDATES) -> np.ndarray:
    """The turns' indices in their new order: without a cue (``applies``) the fused ranking's; with one, the
    candidates (``candidates``) by the model's score, then the other turns in the fused ranking's order (ties too
    keep it)."""
    fused = np.argsort(f.fused_rank, kind="stable")
    if not applies(query):
        return fused
    keep = candidates(f, depth)
    s = np.where(keep, scores(query, f), -np.inf)
    return np.lexsort((f.fused_rank, -s))
