"""Sparse BM25 vectors: tokens, stable indices, term-frequency weights and the query vector."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engram.workers.text import sparse

REPO = Path(__file__).resolve().parents[3]


def bm25_tf(tf: int, dl: int, k1: float = 1.2, b: float = 0.75, avgdl: float = 24.0) -> float:
    """BM25's term-frequency weight, written out independently of the code under test."""
    return tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))


def test_tokens_are_lower_cased_stemmed_and_stop_word_free():
    [tokens] = sparse.tokenize(["The Runners were RUNNING quickly to the meetings"])
    assert "run" in tokens and "runner" in tokens and "meet" in tokens and "quick" in tokens
    for stop in ("the", "to", "The"):
        assert stop not in tokens
    assert all(t == t.lower() for t in tokens)


def _real_texts(data: Path) -> list[str]:
    """Every LoCoMo turn (its text and its image caption, with the speaker's name as ingest indexes it), and the
    turns of the first five LongMemEval haystacks (long assistant answers: lists, code, accents, emoji)."""
    texts = []
    for sample in json.loads((data / "conversations" / "locomo10.json").read_text()):
        conv = sample["conversation"]
        for key, turns in conv.items():
            if key.startswith("session_") and isinstance(turns, list):
                for turn in turns:
                    texts += [f"{turn['speaker']}: {turn['text']}", turn.get("blip_caption") or ""]
    for path in sorted((data / "conversations" / "longmemeval_s").glob("*.json"))[:5]:
        for session in json.loads(path.read_text())["haystack_sessions"]:
            texts += [turn["content"] for turn in session]
    return texts


def test_tokens_are_those_of_bm25s_over_real_text(eval_data):
    """Stored sparse vectors were made with ``bm25s.tokenize``: the tokenizer that replaced it (no numba, no scipy
    on the query path) gives the same tokens, text by text and in one batch, so a stored index keeps its token."""
    import bm25s  # the reference implementation (numba and scipy: only for this test)
    import Stemmer
    from bm25s.stopwords import STOPWORDS_EN

    assert sparse.STOPWORDS_EN == frozenset(STOPWORDS_EN)
    texts = _real_texts(eval_data)
    assert len(texts) > 10_000
    want = bm25s.tokenize(
        texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), return_ids=False, show_progress=False
    )
    assert sparse.tokenize(texts) == [list(t) for t in want]
    for text in texts[:500]:  # one at a time, as a query is
        assert sparse.tokenize([text]) == [
            list(t)
            for t in bm25s.tokenize(
                [text], stopwords="en", stemmer=Stemmer.Stemmer("english"), return_ids=False, show_progress=False
            )
        ]


def test_tokenizing_imports_neither_bm25s_nor_numba():
    code = (
        "import sys; from engram.workers.text import sparse; sparse.query_vector('Where did Caroline move from?'); "
        "sparse.document_vectors(['a turn', ['parts', 'of one']]); "
        "print(sorted(m for m in ('bm25s', 'numba', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO, timeout=120
    )
    assert out.stdout.split() == ["[]"]


def test_only_stop_words_and_empty_texts_give_no_tokens():
    assert sparse.tokenize(["the and of to a", ""]) == [[], []]
    assert sparse.tokenize([]) == []
    assert sparse.document_vectors(["the of and"]) == [([], [])]
    assert sparse.query_vector("the of") == ([], [])


def test_token_index_is_a_stable_unsigned_32_bit_hash():
    idx = sparse.token_index("invoic")
    assert 0 <= idx < 2**32
    assert sparse.token_index("invoic") == idx
    assert sparse.token_index("invoice") != idx
    # pinned value: blake2b(digest_size=4), little endian; changing it would orphan every stored vector
    assert sparse.token_index("run") == 1518968264


def test_indices_are_stable_across_calls_and_batches():
    alone = sparse.document_vectors(["quarterly invoice total"])[0]
    batched = sparse.document_vectors(["something else entirely", "quarterly invoice total"])[1]
    assert alone == batched
    assert sparse.document_vectors(["quarterly invoice total"])[0] == alone


def test_indices_are_stable_across_processes():
    texts = ["Quarterly invoice total 4812 dollars", "Melanie painted a sunrise by the lake"]
    code = (
        "import json, sys; from engram.workers.text import sparse; "
        "print(json.dumps([sparse.document_vectors(json.loads(sys.argv[1])), "
        "sparse.query_vector('invoice sunrise')]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # a different str hash seed must not matter
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(texts)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    docs, query = json.loads(out.stdout)
    assert [tuple(d) for d in docs] == [(list(i), list(v)) for i, v in sparse.document_vectors(texts)]
    assert tuple(query) == tuple(list(x) for x in sparse.query_vector("invoice sunrise"))


def test_document_vector_values_are_bm25_tf_weights():
    # tokens: run, run, runner (3 tokens; "running" and "runs" both stem to "run")
    [(indices, values)] = sparse.document_vectors(["running runs runner"])
    weights = dict(zip(indices, values, strict=True))
    assert indices == sorted(indices)
    assert weights == {
        sparse.token_index("run"): pytest.approx(bm25_tf(2, 3)),
        sparse.token_index("runner"): pytest.approx(bm25_tf(1, 3)),
    }
    assert weights[sparse.token_index("run")] == pytest.approx(4.4 / 2.4125)


def test_weights_follow_k1_b_and_document_length():
    short, long = sparse.document_vectors(["invoice", "invoice " + " ".join(f"word{i}" for i in range(47))])
    idx = sparse.token_index("invoic")
    w_short = dict(zip(*short, strict=True))[idx]
    w_long = dict(zip(*long, strict=True))[idx]
    assert w_short == pytest.approx(bm25_tf(1, 1))
    assert w_long == pytest.approx(bm25_tf(1, 48))
    assert w_long < w_short  # longer documents weigh each occurrence less

    # b = 0: no length normalisation; the weight is tf (k1 + 1) / (tf + k1)
    [(i0, v0), (i1, v1)] = sparse.document_vectors(["invoice invoice", "invoice invoice x y z w v u"], k1=2.0, b=0.0)
    assert dict(zip(i0, v0, strict=True))[idx] == pytest.approx(2 * 3 / (2 + 2))
    assert dict(zip(i1, v1, strict=True))[idx] == pytest.approx(2 * 3 / (2 + 2))

    # saturation: more occurrences weigh more, but never more than k1 + 1
    many = sparse.document_vectors(["invoice " * 200], k1=1.2, b=0.75, avgdl=200.0)[0]
    assert dict(zip(*many, strict=True))[idx] == pytest.approx(bm25_tf(200, 200, avgdl=200.0))
    assert bm25_tf(1, 200, avgdl=200.0) < dict(zip(*many, strict=True))[idx] < 2.2


def test_query_vector_has_one_unit_weight_per_distinct_token():
    indices, values = sparse.query_vector("The invoices? Invoice totals, invoicing!")
    assert indices == sorted({sparse.token_index("invoic"), sparse.token_index("total")})
    assert values == [1.0] * len(indices)
    assert len(indices) == len(set(indices))


def test_query_and_document_share_indices():
    doc_idx, _ = sparse.document_vectors(["Melanie painted a sunrise at the lake"])[0]
    q_idx, _ = sparse.query_vector("painting sunrises")
    assert set(q_idx) <= set(doc_idx)  # stemming maps both forms to the same index


def test_avgdl_per_text_normalises_joined_texts_as_that_many_units():
    from engram.workers.text.sparse import document_vectors

    turn = "the blue bicycle is parked by the library"
    joined = " ".join([turn] * 5)  # a turn with four neighbours of the same length
    (_, alone), (_, ctx) = document_vectors([turn, joined], avgdl=[8.0, 40.0])
    ((_, ctx_fixed),) = document_vectors([joined], avgdl=8.0)
    assert max(ctx) > max(alone)  # five occurrences still weigh more than one
    assert max(ctx_fixed) < max(ctx)  # but a fixed avgdl would call the joined text long and shrink it
    with pytest.raises(ValueError):
        document_vectors([turn, joined], avgdl=[8.0])


def test_a_document_given_as_parts_gets_the_vector_of_the_joined_text():
    turns = [
        "Caroline went to the LGBTQ support group yesterday.",
        "That's great! How did it go?",
        "It was really empowering; ΟΔΟΣ naïve café—résumé.",
        "",
        "I'm painting a lake sunrise.\nIt's calm.",
    ]
    docs = [["8 May 2023", *turns[max(0, i - 2) : i], turns[i], *turns[i + 1 : i + 3]] for i in range(len(turns))]
    avgdl = [24.0 * len(d) for d in docs]
    assert sparse.document_vectors(docs, avgdl=avgdl) == sparse.document_vectors(
        [" ".join(d) for d in docs], avgdl=avgdl
    )
    assert sparse.tokenize_parts([["Painting", "lakes"], "painted lake"]) == [["paint", "lake"], ["paint", "lake"]]


def test_one_field_of_weight_one_is_plain_bm25():
    docs = ["the quarterly invoice total invoice", "Melanie painted a sunrise at the lake today"]
    plain = sparse.document_vectors(docs, avgdl=[24.0, 30.0])
    fielded = sparse.fielded_vectors([[([docs[0]], 1.0, 24.0)], [([docs[1]], 1.0, 30.0)]])
    for (i0, v0), (i1, v1) in zip(plain, fielded, strict=True):
        assert i0 == i1 and v0 == pytest.approx(v1, rel=1e-12)


def test_a_long_context_field_dilutes_only_itself():
    """BM25F: a turn's own words keep their weight however long its neighbours are (a 500-word answer beside a
    one-line turn); joined into one text they would be normalised away with the answer's length."""
    turn = "I got a 10% discount on my first purchase from that new clothing brand"
    answer = " ".join(f"tip{i} engagement" for i in range(250))
    alone = dict(zip(*sparse.document_vectors([turn])[0], strict=True))
    ((idx, vals),) = sparse.fielded_vectors([[([turn], 1.0, 24.0), ([answer], 1.0, 24.0)]])
    fielded = dict(zip(idx, vals, strict=True))
    ((jidx, jvals),) = sparse.document_vectors([[turn, answer]], avgdl=48.0)
    joined = dict(zip(jidx, jvals, strict=True))
    discount = sparse.token_index("discount")
    assert fielded[discount] > 0.9 * alone[discount]
    assert joined[discount] < 0.5 * alone[discount]
    # a term in both fields counts more than in one; a weight of 0 drops the context field
    both = sparse.fielded_vectors([[([turn], 1.0, 24.0), (["discount codes"], 1.0, 24.0)]])[0]
    assert dict(zip(*both, strict=True))[discount] > fielded[discount]
    ((zidx, _),) = sparse.fielded_vectors([[([turn], 1.0, 24.0), ([answer], 0.0, 24.0)]])
    assert zidx == sparse.document_vectors([turn])[0][0]
    with pytest.raises(ValueError):
        sparse.fielded_vectors([[([turn], 1.0, 0.0)]])
