"""Sentence vectors: a short turn of several sentences is searched by the best of its own vector and its
sentences' (MaxSim over a Qdrant multivector), so a fact told in passing is found."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import numpy as np
import pytest
from qdrant_client import models as qm

from engram.schemas.events import MediaKind
from engram.schemas.observations import Observation
from engram.workers.memory.embedding import (
    CONTEXT_WEIGHT,
    SENTENCE_MAX_WORDS,
    dense_vectors,
    embed_texts,
    sentence_spans,
)
from engram.workers.models import get_model
from engram.workers.stores.vectors import DENSE, DIM, OBSERVATIONS, SENTENCES, SPARSE, tenant_filter
from engram.workers.text.sentences import sentences

ASIDE = (
    "user: I'm thinking of exploring Instagram and Twitter to promote my writing services. Do you have tips "
    "for getting started? By the way, I got a 10% discount on my first purchase from that new clothing brand."
)
OTHERS = [
    "user: Can you recommend a content calendar template for my blog?",
    "assistant: Post consistently, reply to comments and track engagement metrics every week.",
    "user: What are the best hours to post on Instagram for engagement?",
]
QUERY = "What was the discount I got on my first purchase from the new clothing brand?"


def _obs(text: str, i: int = 0) -> Observation:
    return Observation(
        id=uuid.uuid4(),
        tenant_id="t",
        user_id="u",
        device_id="d",
        event_id=uuid.uuid4(),
        kind=MediaKind.text,
        segment_index=i,
        text=text,
        object_key="k",
        captured_at=datetime(2023, 5, 23, 5, 40, tzinfo=UTC),
    )


def test_short_turns_of_several_sentences_get_one_row_per_sentence(engram_env):
    rt = engram_env
    long_turn = " ".join(["This sentence is part of a long answer."] * (SENTENCE_MAX_WORDS // 8 + 1))
    obs = [_obs(ASIDE), _obs(OTHERS[0]), _obs(long_turn)]
    dense, multi = dense_vectors(rt, obs)
    assert [m.shape for m in multi] == [(4, DIM), (1, DIM), (1, DIM)]  # three sentences; one; too long to split
    assert all(np.array_equal(m[0], d) for m, d in zip(multi, dense, strict=True))  # own vector first
    assert np.allclose(np.linalg.norm(multi[0], axis=1), 1.0, atol=1e-5)
    # late chunking: each row pooled from the turn's own pass, nearest to its sentence embedded alone
    alone = embed_texts(rt, sentences(ASIDE))
    assert len(alone) == 3 and ((multi[0][1:] @ alone.T).argmax(axis=1) == [0, 1, 2]).all()
    model = get_model("embedding", rt.settings)
    _, rows = model.embed_spans([ASIDE], [sentence_spans(ASIDE)])
    assert np.allclose(multi[0][1:], rows[0], atol=1e-6)


def test_each_distinct_text_is_encoded_once(engram_env, monkeypatch):
    """A turn embedded as itself is not encoded again as its neighbours' context, nor for its sentences (late
    chunking: one pass), nor by a later segment whose turns have it as context (the embedding cache); a segment's
    new texts, with sentences or without, neighbours included, go to the model in one call."""
    rt = engram_env
    model = get_model("embedding", rt.settings)
    encoded: list[str] = []
    calls: list[int] = []
    embed, embed_spans = model.embed, model.embed_spans

    def counting_embed(texts, *a, **k):
        encoded.extend(texts)
        calls.append(len(texts))
        return embed(texts, *a, **k)

    def counting_embed_spans(texts, *a, **k):
        encoded.extend(texts)
        calls.append(len(texts))
        return embed_spans(texts, *a, **k)

    monkeypatch.setattr(model, "embed", counting_embed)  # a spy: the real model runs
    monkeypatch.setattr(model, "embed_spans", counting_embed_spans)
    turns = [ASIDE, *OTHERS]
    obs = [
        _obs(t, i).model_copy(
            update={"context_before": turns[max(0, i - 2) : i], "context_after": turns[i + 1 : i + 3]}
        )
        for i, t in enumerate(turns)
    ]
    dense_vectors(rt, obs[:2])  # segment 1: its last turn's neighbour is in segment 2
    dense_vectors(rt, obs[2:])
    assert sorted(encoded) == sorted(turns)
    assert calls == [3, 1]  # ASIDE (sentences), OTHERS[0] (none) and its neighbour OTHERS[1]; then OTHERS[2]
    dense, multi = dense_vectors(rt, obs)  # all cached now
    assert sorted(encoded) == sorted(turns) and multi[0].shape == (4, DIM)


def test_contextual_vector_adds_the_adjacent_turns_at_half_weight(engram_env):
    """A turn with context: its own embedding plus ``CONTEXT_WEIGHT`` times each adjacent turn's (only the
    nearest either side), re-normalised; its sentence rows stay its own sentences'."""
    rt = engram_env
    turn = _obs(ASIDE).model_copy(update={"context_before": [OTHERS[0], OTHERS[1]], "context_after": [OTHERS[2]]})
    dense, multi = dense_vectors(rt, [turn])
    own, before, after = embed_texts(rt, [ASIDE, OTHERS[1], OTHERS[2]])
    expected = own + CONTEXT_WEIGHT * (before + after)
    assert np.allclose(dense[0], expected / np.linalg.norm(expected), atol=1e-5)
    assert multi[0].shape == (4, DIM) and np.array_equal(multi[0][0], dense[0])


def test_dense_search_scores_an_observation_by_its_best_sentence(engram_env):
    rt = engram_env
    obs = [_obs(t, i) for i, t in enumerate([ASIDE, *OTHERS])]
    dense, multi = dense_vectors(rt, obs)
    rt.vectors.upsert(
        OBSERVATIONS,
        [
            qm.PointStruct(
                id=str(o.id),
                vector={DENSE: d.tolist(), SENTENCES: m.tolist()},
                payload={"tenant_id": "t", "user_id": "u", "text": o.text},
            )
            for o, d, m in zip(obs, dense, multi, strict=True)
        ],
    )
    q = embed_texts(rt, [QUERY])[0]
    found, _ = rt.vectors.search(OBSERVATIONS, q.tolist(), None, tenant_filter("t", "u"), 10)
    assert found[0].payload["text"] == ASIDE
    assert found[0].score == pytest.approx(float((multi[0] @ q).max()), abs=1e-5)
    assert found[0].score > float(dense[0] @ q) + 0.05  # the sentence, not the whole turn, matched


def test_observations_without_sentences_stay_searchable(engram_env, tmp_path):
    """A point written without the multivector (an older engram, another writer) gets its own vector as its
    only row, and a server's collection made before sentence vectors is rebuilt with them, keeping its points
    (qdrant-client's local mode stands in for the server)."""
    from qdrant_client import QdrantClient

    from engram.workers.stores.vectors import ClientVectorStore

    rt = engram_env
    unit = [1.0] + [0.0] * (DIM - 1)
    rt.vectors.upsert(
        OBSERVATIONS,
        [qm.PointStruct(id=str(uuid.UUID(int=1)), vector={DENSE: unit}, payload={"tenant_id": "t", "user_id": "u"})],
    )
    found, _ = rt.vectors.search(OBSERVATIONS, unit, None, tenant_filter("t", "u"), 5)
    assert [str(p.id) for p in found] == [str(uuid.UUID(int=1))]

    client = QdrantClient(path=str(tmp_path / "server"))
    client.create_collection(
        OBSERVATIONS,
        vectors_config={DENSE: qm.VectorParams(size=DIM, distance=qm.Distance.COSINE)},
        sparse_vectors_config={SPARSE: qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
    )
    client.upsert(
        OBSERVATIONS,
        points=[
            qm.PointStruct(id=str(uuid.UUID(int=2)), vector={DENSE: unit}, payload={"tenant_id": "t", "user_id": "u"})
        ],
    )
    server = ClientVectorStore(client, local=True)
    found, _ = server.search(OBSERVATIONS, unit, None, tenant_filter("t", "u"), 5)
    assert [str(p.id) for p in found] == [str(uuid.UUID(int=2))]
    assert SENTENCES in client.get_collection(OBSERVATIONS).config.params.vectors
    server.close()


ANSWER = " ".join(f"Tip {i}: post at peak engagement hours and reply to comments." for i in range(60))
TURN = "By the way, I got a 10% discount on my first purchase from that new clothing brand last month."


def _weights(vec: tuple[list[int], list[float]]) -> dict[int, float]:
    return dict(zip(*vec, strict=True))


def test_a_turn_keeps_its_own_words_weight_beside_long_neighbours():
    """BM25F: a turn and its neighbours are two fields, each normalised by its own length, so two 600-word
    answers beside a one-line turn do not drown its words (joined into one text they would)."""
    from engram.schemas.settings import Settings
    from engram.workers.memory.embedding import CONTEXT_TF_WEIGHT, observation_sparse_vectors
    from engram.workers.text import sparse

    settings = Settings()
    with_ctx = [
        _obs(TURN).model_copy(update={"context_before": b, "context_after": a})
        for b, a in ((["Any tips for Instagram?"], ["Sure, post often."]), ([ANSWER + " Instagram"], [ANSWER]))
    ]
    alone, short_ctx, long_ctx = observation_sparse_vectors(settings, [_obs(TURN), *with_ctx])
    assert alone == sparse.document_vectors([TURN], settings.bm25_k1, settings.bm25_b, settings.bm25_avgdl)[0]
    discount = sparse.token_index("discount")
    assert _weights(long_ctx)[discount] > 0.9 * _weights(alone)[discount]
    joined = sparse.document_vectors(
        [["23 May 2023", ANSWER, TURN, ANSWER]], settings.bm25_k1, settings.bm25_b, 3 * settings.bm25_avgdl
    )[0]
    assert _weights(joined)[discount] < 0.5 * _weights(alone)[discount]
    # the context and the date still index the turn; a long context's words weigh less than the turn's own
    assert {sparse.token_index("instagram"), sparse.token_index("may"), sparse.token_index("2023")} <= set(short_ctx[0])
    assert 0 < CONTEXT_TF_WEIGHT < 1
    assert _weights(long_ctx)[sparse.token_index("instagram")] < 0.5 * _weights(long_ctx)[discount]


def test_embedded_vectors_travel_packed_and_come_back_exact(engram_env):
    """A segment's message to the store (``embed_batched``'s JSON) holds each dense and sentence vector as base64
    float32 text, not JSON numbers: under a third of the bytes, and the same float32 values come back. A message
    with lists of numbers (earlier releases) is read too; text that is not a packed vector is refused."""
    import json

    from pydantic import ValidationError

    from engram.schemas.jobs import EmbeddedBatch, ObservationBatch, SegmentJob
    from engram.workers.embed import embed_batches

    rt = engram_env
    obs = [_obs(ASIDE), _obs(OTHERS[0], 1)]
    job = SegmentJob(
        event={
            "event_id": obs[0].event_id,
            "tenant_id": "t",
            "user_id": "u",
            "device_id": "d",
            "kind": "text",
            "object_key": "k",
            "sha256": "0" * 64,
            "size": 1,
            "mime_type": "application/jsonl",
            "captured_at": obs[0].captured_at,
        },
        segment_index=0,
    )
    [batch] = embed_batches(rt, [ObservationBatch(job=job, observations=obs)])
    message = batch.model_dump(mode="json")
    item = message["items"][0]
    assert isinstance(item["dense"], str) and all(isinstance(row, str) for row in item["sentences"])
    assert len(item["sentences"]) == 4  # the aside's own vector and its three sentences
    as_lists = batch.model_dump()  # Python's form: lists of floats, as earlier releases sent them
    packed, plain = json.dumps(message), json.dumps(as_lists, default=str)
    assert len(packed) * 3 < len(plain)

    back = EmbeddedBatch.model_validate(json.loads(packed))
    assert back.items[0].dense == batch.items[0].dense  # float32 values, exactly
    assert back.items[0].sentences == batch.items[0].sentences
    assert back.items[1].sentences is None and back.items[1].dense == batch.items[1].dense
    assert EmbeddedBatch.model_validate(json.loads(plain)).items[0].dense == batch.items[0].dense

    for bad in ("not base64!", "AAA=", ["x"]):
        with pytest.raises(ValidationError):
            EmbeddedBatch.model_validate({**message, "items": [{**item, "dense": bad}]})


def test_a_span_vector_is_the_normalised_mean_of_the_tokens_inside_it():
    from engram.workers.models.embeddings import span_vectors

    rng = np.random.default_rng(7)
    hidden = rng.standard_normal((8, DIM)).astype(np.float32)  # 6 tokens of the text, then 2 rows of padding
    offsets = [(0, 0), (0, 5), (6, 11), (11, 12), (13, 18), (0, 0)]  # [CLS] Hello world . Again [SEP]
    spans = [(0, 12), (13, 18), (40, 50)]  # two sentences; a third cut off by truncation (no token)
    rows = span_vectors(hidden, offsets, spans)

    def mean(idx: list[int]) -> np.ndarray:
        v = hidden[idx].mean(axis=0)
        return v / np.linalg.norm(v)

    assert rows.shape == (2, DIM) and rows.dtype == np.float32
    assert np.allclose(rows, [mean([1, 2, 3]), mean([4])], atol=1e-6)  # special tokens and padding left out
    assert span_vectors(hidden, offsets, []).shape == (0, DIM)
    assert span_vectors(hidden, [], spans).shape == (0, DIM)
