"""Typed memories through the real pipeline on the embedded default: semantic, procedural, resource and core
memories with provenance (message ids survive), Mem0's UPDATE/SUPERSEDE/NOOP, MemoryBank's decay and
archive, and beat's count/idle trigger."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from engram.api.cli.main import ingest_paths
from engram.schemas.memories import MemoryType
from engram.workers.consolidate import consolidate_user
from engram.workers.memory import dynamics
from engram.workers.memory.embedding import embed_texts, sentence_spans
from engram.workers.memory.episodes import due_users
from engram.workers.models import get_model
from engram.workers.models.embeddings import DIM
from engram.workers.stores.vectors import DENSE, OBSERVATIONS, tenant_filter

TENANT, USER = "acme", "alice"
T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


def chat(
    path: Path, turns: list[tuple[str, str]], start: datetime = T0, session: str = "s1", prefix: str = "m"
) -> Path:
    """A JSONL conversation of (speaker, text) turns a minute apart, message ids ``<prefix><n>``."""
    lines = [
        json.dumps(
            {
                "message_id": f"{prefix}{i}",
                "session_id": session,
                "speaker": who,
                "text": text,
                "timestamp": (start + timedelta(minutes=i)).isoformat(),
            }
        )
        for i, (who, text) in enumerate(turns, start=1)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def ingest(path: Path, consolidate: bool = True) -> None:
    out = ingest_paths([path], tenant=TENANT, user=USER, device="laptop", consolidate=consolidate, quiet=True)
    assert not out["failed"], out["failed"]


def memories(rt, mtype: MemoryType) -> list[dict]:
    return [r.payload for r in rt.vectors.scroll(mtype.value, tenant_filter(TENANT, USER))]


def test_typed_memories_with_provenance(engram_env, tmp_path):
    rt = engram_env
    ingest(
        chat(
            tmp_path / "c.jsonl",
            [
                ("alice", "I live in Paris and I love painting."),
                ("Bob", "Nice! My favourite band is Muse."),
                ("alice", "To publish the blog, first write the draft, then add the photos, finally press publish."),
                ("Bob", "Here is the guide: https://example.com/blog-guide and the budget.xlsx file."),
                ("alice", "I'm 34 years old."),
            ],
        )
    )
    sem = {m["summary"]: m for m in memories(rt, MemoryType.semantic)}
    assert {
        "alice lives in Paris",
        "alice likes painting",
        "Bob's favourite band is Muse",
        "alice is 34 years old",
    } <= set(sem)
    paris = sem["alice lives in Paris"]
    assert (paris["name"], paris["attribute"], paris["value"]) == ("alice", "lives_in", "Paris")
    assert paris["provenance"]["message_ids"] == ["m1"]  # the turn's id survives into the memory
    assert len(paris["provenance"]["observation_ids"]) == 1 and paris["provenance"]["event_ids"]
    assert paris["provenance"]["start"].startswith("2024-05-01T09:01")

    [proc] = memories(rt, MemoryType.procedural)
    assert proc["steps"] == ["write the draft", "add the photos", "press publish"]
    assert proc["summary"] == "To publish the blog" and proc["provenance"]["message_ids"] == ["m3"]

    res = {m["title"]: m for m in memories(rt, MemoryType.resource)}
    assert res["https://example.com/blog-guide"]["resource_type"] == "url"
    assert res["budget.xlsx"]["resource_type"] == "spreadsheet"
    assert res["budget.xlsx"]["provenance"]["message_ids"] == ["m4"]

    [core] = memories(rt, MemoryType.core)
    assert core["label"] == "human"
    assert core["value"].splitlines() == ["lives in: Paris", "likes: painting", "age: 34"]
    assert set(core["provenance"]["message_ids"]) == {"m1", "m5"}
    assert memories(rt, MemoryType.episodic)  # episodic memories are still written


def test_a_fact_takes_its_sentence_vector_from_its_turns_own_pass(engram_env, tmp_path, monkeypatch):
    """A fact read from one sentence costs no encode: its vector is that sentence's late-chunked row from the
    turn's own pass (a turn of several sentences) or the turn's own embedding (a turn of one sentence); two facts
    of one sentence share it and stay two memories; a procedure is still embedded as its own text."""
    rt = engram_env
    model = get_model("embedding", rt.settings)
    encoded: list[str] = []
    embed = model.embed

    def counting_embed(texts, *a, **k):
        encoded.extend(texts)
        return embed(texts, *a, **k)

    monkeypatch.setattr(model, "embed", counting_embed)  # a spy: the real model runs
    ingest(
        chat(
            tmp_path / "c.jsonl",
            [
                ("alice", "Good morning! I live in Paris and I love painting."),
                ("Bob", "My favourite band is Muse."),
                ("alice", "To publish the blog, first write the draft, then add the photos, finally press publish."),
            ],
        )
    )
    texts = {r.payload["message_id"]: r.payload["text"] for r in rt.vectors.scroll(OBSERVATIONS, tenant_filter(TENANT))}
    sem = {
        r.payload["summary"]: (r.payload, np.asarray(r.vector[DENSE]))
        for r in rt.vectors.scroll(MemoryType.semantic.value, tenant_filter(TENANT, USER), with_vectors=[DENSE])
    }
    assert set(sem) == {"alice lives in Paris", "alice likes painting", "Bob's favourite band is Muse"}
    _, rows = model.embed_spans([texts["m1"]], [sentence_spans(texts["m1"])])
    assert rows[0].shape == (2, DIM)  # "alice: Good morning!" and the sentence both facts were read from
    for fact in ("alice lives in Paris", "alice likes painting"):
        assert np.allclose(sem[fact][1], rows[0][1], atol=1e-5)
    assert np.allclose(sem["Bob's favourite band is Muse"][1], embed_texts(rt, [texts["m2"]])[0], atol=1e-5)
    fact_texts = {f"{p['name']}: {p['summary']}\n{p['details']}" for p, _ in sem.values()}
    assert not fact_texts & set(encoded)  # no fact went to the model
    [proc] = memories(rt, MemoryType.procedural)
    assert "\n".join([proc["summary"], *proc["steps"]]) in encoded


def test_a_statement_fact_takes_its_turns_own_embedding(engram_env, tmp_path, monkeypatch):
    """A fact read from a whole turn (what its speaker says about themselves, ``extract.statements``) costs no
    encode either: its vector is the turn's own embedding, cached by the ingest."""
    rt = engram_env
    model = get_model("embedding", rt.settings)
    encoded: list[str] = []
    embed = model.embed

    def counting_embed(texts, *a, **k):
        encoded.extend(texts)
        return embed(texts, *a, **k)

    monkeypatch.setattr(model, "embed", counting_embed)  # a spy: the real model runs
    turn = (
        "I went to a LGBTQ support group yesterday and it was so powerful. The support group has made me "
        "feel accepted and given me the courage to embrace myself."
    )
    ingest(chat(tmp_path / "c.jsonl", [("Caroline", turn)]))
    [text] = [r.payload["text"] for r in rt.vectors.scroll(OBSERVATIONS, tenant_filter(TENANT))]
    sem = [
        (r.payload, np.asarray(r.vector[DENSE]))
        for r in rt.vectors.scroll(MemoryType.semantic.value, tenant_filter(TENANT, USER), with_vectors=[DENSE])
    ]
    [(payload, vector)] = [(p, v) for p, v in sem if p["details"] == turn]
    assert payload["summary"].startswith("Caroline went to a LGBTQ support group yesterday")
    assert np.allclose(vector, embed_texts(rt, [text])[0], atol=1e-5)
    assert f"{payload['name']}: {payload['summary']}\n{payload['details']}" not in encoded


def test_a_fact_past_the_models_word_pieces_is_encoded_as_its_own_text(engram_env, tmp_path):
    """A turn short enough in words for sentence rows whose last sentence lies past the model's 256 word pieces has no
    row for it: the fact read there is encoded as its own text, and consolidation does not fail."""
    rt = engram_env
    turn = "Xyzzyqwv plorkbat " * 50 + "zorp. My favourite food is ramen."
    ingest(chat(tmp_path / "c.jsonl", [("alice", turn)]))
    [(payload, vector)] = [
        (r.payload, np.asarray(r.vector[DENSE]))
        for r in rt.vectors.scroll(MemoryType.semantic.value, tenant_filter(TENANT, USER), with_vectors=[DENSE])
    ]
    assert payload["details"] == "My favourite food is ramen."
    index_text = f"{payload['name']}: {payload['summary']}\n{payload['details']}"
    assert np.allclose(vector, embed_texts(rt, [index_text])[0], atol=1e-5)


def test_repeat_reinforces_contradiction_supersedes(engram_env, tmp_path):
    rt = engram_env
    ingest(chat(tmp_path / "a.jsonl", [("alice", "I live in Paris."), ("alice", "My favourite food is ramen.")]))
    ingest(
        chat(
            tmp_path / "b.jsonl",
            [("Bob", "Alice lives in Paris, right?"), ("alice", "Not any more: I moved to Berlin last month.")],
            start=T0 + timedelta(days=30),
            session="s2",
            prefix="n",
        )
    )
    facts = {(m["attribute"], m["value"]): m for m in memories(rt, MemoryType.semantic)}
    paris, berlin = facts[("lives_in", "Paris")], facts[("lives_in", "Berlin")]
    # "Alice lives in Paris" again: the same fact, reinforced, not a second memory
    assert sum(1 for k in facts if k == ("lives_in", "Paris")) == 1
    assert paris["recalls"] == 1 and paris["provenance"]["message_ids"] == ["m1", "n1"]
    # "moved to Berlin" supersedes it; Paris stays as history
    assert paris["superseded_by"] == berlin["id"] and paris["valid_to"].startswith("2024-05-31")
    assert berlin["superseded_by"] is None
    hist = dynamics.history(rt, TENANT, USER, MemoryType.semantic, name="alice", attribute="lives_in")
    assert [h["value"] for h in hist] == ["Paris", "Berlin"]
    active = rt.vectors.scroll(MemoryType.semantic.value, dynamics.active_filter(tenant_filter(TENANT, USER)))
    assert "Paris" not in {r.payload["value"] for r in active} and "Berlin" in {r.payload["value"] for r in active}
    [core] = memories(rt, MemoryType.core)  # the profile holds the latest value only
    assert "lives in: Berlin" in core["value"] and "Paris" not in core["value"]

    # a consolidation that runs again over the same observations changes nothing (NOOP)
    before = {m["id"]: (m["recalls"], m["provenance"]) for m in memories(rt, MemoryType.semantic)}
    rt.vectors.set_payload(
        OBSERVATIONS, [r.id for r in rt.vectors.scroll(OBSERVATIONS, tenant_filter(TENANT))], {"consolidated": False}
    )
    consolidate_user.delay(TENANT, USER).get()
    after = {m["id"]: (m["recalls"], m["provenance"]) for m in memories(rt, MemoryType.semantic)}
    assert after == before


def test_near_duplicate_by_meaning_updates(engram_env, tmp_path):
    rt = engram_env
    ingest(chat(tmp_path / "a.jsonl", [("Bob", "See https://example.com/report for the numbers.")]))
    ingest(
        chat(
            tmp_path / "b.jsonl",
            [("Bob", "See https://example.com/report for the numbers.")],
            start=T0 + timedelta(days=1),
            session="s2",
            prefix="n",
        )
    )
    [res] = memories(rt, MemoryType.resource)
    assert res["provenance"]["message_ids"] == ["m1", "n1"] and res["recalls"] == 1


def test_decay_reinforce_and_archive(engram_env, tmp_path):
    rt = engram_env
    ingest(chat(tmp_path / "a.jsonl", [("alice", "I live in Paris."), ("alice", "I work at Acme Corp.")]))
    sem = memories(rt, MemoryType.semantic)
    now = datetime.now(UTC)
    s = rt.settings.memory_stability_days
    assert dynamics.retention(sem[0], now, s) == pytest.approx(1.0, abs=1e-3)
    later = now + timedelta(days=s)
    assert dynamics.retention(sem[0], later, s) == pytest.approx(0.3679, abs=1e-3)  # e^-1 after S days
    assert 0.5 < dynamics.decayed_score(sem[0], later, s) < 1.0
    paris = next(m for m in sem if m["value"] == "Paris")
    assert dynamics.reinforce(rt, TENANT, [paris["id"]], now=now) == 1
    assert dynamics.reinforce(rt, "other-tenant", [paris["id"]], now=now) == 0  # tenancy
    # four stability periods on: the recalled fact (S doubled) is kept, the other one archived, none deleted
    counts = dynamics.archive_decayed(rt, now=now + timedelta(days=4 * s))
    assert counts["semantic"] == 1
    by_value = {m["value"]: m for m in memories(rt, MemoryType.semantic)}
    assert by_value["Paris"]["archived"] is False and by_value["Acme Corp"]["archived"] is True
    assert by_value["Acme Corp"]["strength"] < rt.settings.memory_archive_retention
    dynamics.reinforce(rt, TENANT, [by_value["Acme Corp"]["id"]])  # recalled: active again
    assert {m["value"]: m["archived"] for m in memories(rt, MemoryType.semantic)}["Acme Corp"] is False


def test_merge_block_replaces_merges_and_trims():
    block = dynamics.merge_block("lives in: Paris\nlikes: painting", ["likes: hiking", "lives in: Berlin"], 200)
    assert block.splitlines() == ["likes: painting, hiking", "lives in: Berlin"]
    long = dynamics.merge_block("", [f"fact {i}: {'x' * 20}" for i in range(20)], 120)
    assert len(long) <= 120 and long.splitlines()[-1].startswith("fact 19")  # the oldest lines go first


def test_beat_waits_for_count_or_idle(engram_env, tmp_path, monkeypatch):
    monkeypatch.setenv("ENGRAM_CONSOLIDATE_MIN_OBSERVATIONS", "3")
    monkeypatch.setenv("ENGRAM_CONSOLIDATE_IDLE_SECONDS", "600")
    from engram.workers.runtime import runtime

    ingest(chat(tmp_path / "a.jsonl", [("alice", "one"), ("alice", "two")]), consolidate=False)
    rt = runtime()
    assert due_users(rt) == ([], 1)  # 2 < 3 pending, stored just now
    assert due_users(rt, now=datetime.now(UTC).timestamp() + 601) == ([(TENANT, USER)], 1)  # idle
    ingest(chat(tmp_path / "b.jsonl", [("alice", "three")], session="s2", prefix="n"), consolidate=False)
    assert due_users(rt) == ([(TENANT, USER)], 1)  # count reached


def test_bad_conversations_in_one_batch(engram_env, tmp_path):
    """Bad conversation files fail with their reason; the good ones of the batch (a 100,000-character
    message, an id used twice) go all the way to memories."""
    rt = engram_env
    good = chat(tmp_path / "good.jsonl", [("alice", "I live in Lisbon."), ("Bob", "")])
    long = chat(
        tmp_path / "long.jsonl",
        [("alice", "word " * 20_000), ("alice", "I work at Acme Corp.")],
        session="s2",
        prefix="n",
    )
    dup = chat(tmp_path / "dup.jsonl", [("alice", "one"), ("alice", "two")], session="s3", prefix="d")
    dup.write_text(dup.read_text().replace('"d2"', '"d1"'))
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(
        json.dumps(
            {"message_id": "l1", "session_id": "s", "speaker": "a", "text": "café", "timestamp": T0.isoformat()},
            ensure_ascii=False,
        ).encode("latin-1")
    )
    no_ts = tmp_path / "nots.jsonl"
    no_ts.write_text(json.dumps({"message_id": "t1", "session_id": "s", "speaker": "a", "text": "hi"}) + "\n")
    out = ingest_paths([good, long, dup, latin, no_ts], tenant=TENANT, user=USER, device="d", quiet=True)
    reasons = {Path(p).name: r.reason for p, r in out["failed"]}
    assert set(reasons) == {"latin.jsonl", "nots.jsonl"}
    assert "not UTF-8: 'utf-8' codec can't decode byte 0xe9" in reasons["latin.jsonl"]
    assert "record at 0.timestamp: Field required" in reasons["nots.jsonl"]
    msgs = {r.payload["message_id"]: r.payload for r in rt.vectors.scroll(OBSERVATIONS, tenant_filter(TENANT))}
    assert set(msgs) == {"m1", "n1", "n2", "d1", "d1#2"}  # Bob's empty message is left out; a reused id renamed
    assert len(msgs["n1"]["text"]) == len("alice: ") + 100_000 - 1
    assert {m["value"] for m in memories(rt, MemoryType.semantic)} == {"Lisbon", "Acme Corp"}


def test_near_duplicates_of_one_run_fold_into_the_nearest_other_source(engram_env):
    """Within one ``apply``: a new memory folds into the most similar one added before it (cosine ≥
    ``memory_merge_similarity``), never into one it shares a source observation with, and a dissimilar one is
    added on its own."""
    import uuid

    from engram.schemas.memories import Provenance, SemanticMemory

    rt = engram_env
    rng = np.random.default_rng(7)

    def unit(v: np.ndarray) -> np.ndarray:
        return (v / np.linalg.norm(v)).astype(np.float32)

    v0, noise, other = (rng.standard_normal(DIM) for _ in range(3))
    obs = [uuid.uuid4() for _ in range(4)]

    def fact(text: str, source: uuid.UUID) -> SemanticMemory:
        return SemanticMemory(
            id=uuid.uuid4(),
            tenant_id=TENANT,
            user_id=USER,
            created_at=T0,
            updated_at=T0,
            name="alice",
            summary=text,
            provenance=Provenance(observation_ids=[source], message_ids=[str(source)], start=T0, end=T0),
        )

    a, b, c, d = (
        fact("Alice plays the guitar most evenings.", obs[0]),
        fact("Alice plays guitar in the evenings.", obs[1]),
        fact("Alice keeps two cats.", obs[2]),
        fact("Alice plays the guitar at night.", obs[0]),
    )
    vectors = np.stack([unit(v0), unit(v0 + 0.05 * noise), unit(other), unit(v0 + 0.02 * noise)])
    ops = dynamics.apply(rt, [a, b, c, d], vectors, [{}, {}, {}, {}], now=T0)
    # b folds into a; d is nearest a but shares a's observation, so it is a memory of its own
    assert ops[dynamics.Op.add] == 3 and sum(ops.values()) == 4
    stored = {m["summary"]: m for m in memories(rt, MemoryType.semantic)}
    assert set(stored) == {a.summary, c.summary, d.summary}
    assert stored[a.summary]["provenance"]["message_ids"] == [str(obs[0]), str(obs[1])]
