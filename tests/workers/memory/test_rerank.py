"""The learned reranker of cue questions (``workers.memory.rerank``): cues, features, expansion, order."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from engram.workers.memory import rerank as R


def _turns(n: int = 120) -> R.TurnFeatures:
    """``n`` turns whose every ranking and score follows the fused ranking (turn i at rank i + 1); the named
    person speaks the even turns."""
    rank = np.arange(1, n + 1, dtype=float)
    falling = 1.0 / rank
    even = (np.arange(n) % 2 == 0).astype(float)
    return R.TurnFeatures(
        fused_rank=rank.copy(),
        from_memory=np.zeros(n),
        bm25_rank=rank.copy(),
        bm25_score=10 * falling,
        dense_rank=rank.copy(),
        cosine=0.2 + 0.5 * falling,
        cosine_as_i=0.2 + 0.5 * falling,
        speaker_named=even,
        speaker_other=1 - even,
        words=np.full(n, 2.5),
        first_person=np.ones(n),
        session_best=np.ones(n),
        session_top25=np.full(n, 3.0),
        best_word=np.full(n, 0.3),
        expansion_40=np.zeros(n),
        expansion_50=np.zeros(n),
        expansion_60=np.zeros(n),
        best_noun=np.full(n, 0.3),
        nouns_35=np.zeros(n),
        nouns_45=np.zeros(n),
        nouns_55=np.zeros(n),
    )


def test_cues() -> None:
    assert R.applies("What activities has Melanie done with her family?")
    assert R.applies("Would Caroline likely pursue writing as a career?")
    assert not R.applies("When did Caroline go to the LGBTQ support group?")
    assert not R.applies("Where did Caroline move from 4 years ago?")
    assert R.applies("What is Caroline's identity?")  # "is" ends in s: the cue as it was fitted


def test_feature_matrix_has_the_model_columns() -> None:
    f = _turns()
    x = R.feature_matrix("What books has Melanie read?", f)
    assert x.shape == (120, len(R.FEATURES))
    assert len(set(R.FEATURES)) == len(R.FEATURES) == len(R.MODEL)
    col = R.FEATURES.index
    assert x[0, col("main_top10")] == 1 and x[10, col("main_top10")] == 0
    assert x[0, col("spk_named")] == 1 and x[1, col("spk_other")] == 1  # one person named
    assert (x[:, col("spec*cos")] == 0).all() and (x[:, col("plural*cos")] == x[:, col("cos")]).all()


def test_no_cue_keeps_the_fused_order() -> None:
    f = _turns()
    f.fused_rank = f.fused_rank[::-1].copy()
    assert list(R.rerank("When did Melanie paint a sunrise?", f)) == list(range(119, -1, -1))


def test_cue_question_resorts_the_candidates_only() -> None:
    f = _turns()
    order = R.rerank("What activities does Melanie do?", f)
    assert sorted(order) == list(range(120))
    assert list(order[50:]) == list(range(50, 120))  # beyond every ranking's first 50: the fused order
    assert set(order[:50]) == set(range(50))
    assert order[0] in range(10)  # the best turn of every ranking stays near the top


def test_expansion_reaches_an_instance_the_rankings_missed() -> None:
    """A turn far down every ranking that holds the user's words for instances of the question's general word
    becomes a candidate through its expansion score and rises."""
    f = _turns()
    f.nouns_45[100] = f.nouns_35[100] = f.nouns_55[100] = f.expansion_50[100] = f.expansion_40[100] = 2.5
    f.best_noun[100] = f.best_word[100] = 0.75
    assert R.candidates(f)[100]
    before = list(np.argsort(f.fused_rank)).index(100)
    after = list(R.rerank("What activities has Melanie done with her family?", f)).index(100)
    assert after < before


def test_word_expansion() -> None:
    vocab = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])  # the query word itself, a near word, a far one
    query = np.array([[1.0, 0.0]])
    turns = sp.csr_matrix(np.array([[1, 0, 0], [0, 1, 1], [0, 0, 1]], dtype=float))
    literal = np.array([True, False, False])
    best, (at5, at9) = R.word_expansion(query, vocab, turns, literal, (0.5, 0.9))
    assert np.allclose(best, [0.0, 0.8, 0.0])  # the literal word is left to BM25
    assert np.allclose(at5, [0.0, 0.8, 0.0]) and np.allclose(at9, 0.0)
    best, sums = R.word_expansion(np.zeros((0, 2)), vocab, turns, literal, (0.5,))
    assert not best.any() and not sums[0].any()
