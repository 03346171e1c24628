"""Memory management on the embedded default: get, list newest first, delete, export (vault entries without
secrets), and forgetting a user (every collection, the ledger, the vault, objects no one else references)."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from qdrant_client import models as qm

from engram.schemas.events import EventStatus
from engram.schemas.memories import KnowledgeVaultEntry, MemoryType, Provenance
from engram.schemas.search import SearchRequest
from engram.workers.stores.vectors import COLLECTIONS, DENSE, ENTITIES, OBSERVATIONS, collection_for, tenant_filter
from tests.files import copy_tree
from tests.workers.media.test_bad_input import render_png
from tests.workers.test_ask import write_chat

T = "default"
CIPHERTEXT = "gAAAAABn-not-a-real-fernet-token-but-must-never-leave-the-store"


def add_vault_entry(rt, user: str, what: str = "wifi", index: bool = True) -> KnowledgeVaultEntry:
    """Keep a vault entry for ``user`` at rest and (``index``) index it as consolidation does (caption and
    ciphertext); without ``index`` it is as perceive left it before any consolidation."""
    from engram.schemas.ids import memory_id
    from engram.workers.memory.embedding import embed_texts
    from engram.workers.memory.vault import object_key

    now = datetime(2024, 5, 3, 12, tzinfo=UTC)
    entry = KnowledgeVaultEntry(
        id=memory_id(T, user, "knowledge_vault", what),
        tenant_id=T,
        user_id=user,
        created_at=now,
        updated_at=now,
        entry_type="password",
        caption=f"home {what} password",
        secret_ciphertext=CIPHERTEXT,
        provenance=Provenance(start=now, end=now),
    )
    if index:
        payload = entry.model_dump(mode="json") | {"start_ts": now.timestamp(), "end_ts": now.timestamp()}
        vec = embed_texts(rt, [entry.index_text()])[0].tolist()
        rt.vectors.upsert(
            collection_for(MemoryType.knowledge_vault),
            [qm.PointStruct(id=str(entry.id), vector={DENSE: vec}, payload=payload)],
        )
    rt.objects.put_bytes(object_key(T, entry.id), entry.model_dump_json().encode())
    return entry


FILES = {
    "shared.jsonl": [
        ("Alice", "Flights to Lisbon are booked for the budget review."),
        ("Dan", "Great, the review is on Thursday at 10."),
    ],
    "alice.jsonl": [
        ("Alice", "My tomatoes finally turned red in the garden."),
        ("Erin", "Pick them before the birds do!"),
    ],
    "bob.jsonl": [
        ("Bob", "I started learning the cello last month."),
        ("Frank", "Wonderful, the cello is a lovely instrument."),
    ],
}


def use_data_dir(mp: pytest.MonkeyPatch, data: Path):
    """Point the embedded default at ``data`` (fresh Runtimes); returns the Runtime."""
    from engram.workers.runtime import reset_runtimes, runtime

    mp.setenv("ENGRAM_DATA_DIR", str(data))
    for var in ("ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT", "ENGRAM_BROKER_URL"):
        mp.delenv(var, raising=False)
    reset_runtimes()
    return runtime()


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A data dir where alice published a chat shared with bob (same bytes), a chat of her own, a screenshot
    and has a vault entry; bob published the shared chat (same bytes: the same object, his own observations) and
    a chat of his own. Built once; each test works on a copy. Returns the folder of the inputs and ``data/``."""
    from engram.api.cli.main import ingest_paths
    from engram.workers.runtime import reset_runtimes

    tmp = tmp_path_factory.mktemp("people")
    files = {name: write_chat(tmp / name, lines, day) for day, (name, lines) in enumerate(FILES.items(), start=1)}
    shot = render_png(tmp / "alice.png", ["Quarterly budget review", "Lisbon office, Thursday 10:00"])
    with pytest.MonkeyPatch.context() as mp:
        rt = use_data_dir(mp, tmp / "data")
        out = ingest_paths([files["shared.jsonl"], files["alice.jsonl"], shot], T, "alice", "laptop", quiet=True)
        assert len(out["done"]) == 3, out
        out = ingest_paths([files["shared.jsonl"], files["bob.jsonl"]], T, "bob", "phone", quiet=True)
        assert len(out["done"]) == 2 and not out["skipped"], out
        add_vault_entry(rt, "alice")
        reset_runtimes()  # closes the local-mode store, so the folder can be copied
    return tmp


@pytest.fixture
def people(template, tmp_path, monkeypatch):
    """A copy of ``template``'s data as the embedded default; yields its Runtime."""
    from engram.workers.runtime import reset_runtimes

    copy_tree(template / "data", tmp_path / "data")
    shutil.copy(template / "alice.jsonl", tmp_path / "alice.jsonl")
    yield use_data_dir(monkeypatch, tmp_path / "data")
    reset_runtimes()


def keys_of(rt, user: str) -> dict[str, str]:
    """{file name: object key} of the user's events."""
    return {Path(r.source_name).name: r.object_key for r in rt.ledger.user_events(T, user)}


@pytest.mark.slow
def test_get_list_and_delete(people):
    from engram.workers.memory.records import delete_memory, get_memory, list_memories

    rt = people
    page = list_memories(rt, T, MemoryType.observation, "alice", limit=50)
    assert page.total == len(page.items) == 5  # 4 chat turns and the screenshot
    times = [m.time for m in page.items]
    assert times == sorted(times, reverse=True) and all(m.user_id == "alice" for m in page.items)
    second = list_memories(rt, T, MemoryType.observation, "alice", limit=2, offset=1)
    assert [m.id for m in second.items] == [m.id for m in page.items[1:3]] and second.total == 5
    assert list_memories(rt, T, MemoryType.observation, None, limit=50).total == 9  # bob's four turns too

    [vault] = list_memories(rt, T, MemoryType.knowledge_vault, "alice").items
    assert vault.text == "home wifi password" and "secret_ciphertext" not in vault.payload
    episodes = list_memories(rt, T, MemoryType.episodic, "alice").items
    assert len(episodes) == 3 and episodes[0].payload["kinds"] == ["screenshot"]  # captured now: newest
    got = get_memory(rt, T, episodes[-1].id)
    assert got.memory_type is MemoryType.episodic and got.payload["provenance"]["message_ids"] == [
        "shared-0",
        "shared-1",
    ]
    assert get_memory(rt, "another-tenant", got.id) is None  # another tenant's id is unknown

    turn = page.items[0]
    assert delete_memory(rt, "another-tenant", turn.id) is None and get_memory(rt, T, turn.id) is not None
    assert delete_memory(rt, T, turn.id) is MemoryType.observation
    assert get_memory(rt, T, turn.id) is None and delete_memory(rt, T, turn.id) is None
    assert list_memories(rt, T, MemoryType.observation, "alice").total == 4


def test_export_has_every_type_with_provenance_and_no_secret(people):
    from engram.workers.memory.records import export_user

    export = export_user(people, T, "alice")
    text = export.model_dump_json()
    assert CIPHERTEXT not in text and "secret_ciphertext" not in text
    assert {r.status for r in export.events} == {EventStatus.done} and len(export.events) == 3
    assert set(export.memories) == set(MemoryType)
    obs = export.memories[MemoryType.observation]
    assert len(obs) == 5 and all(m.payload["event_id"] and m.user_id == "alice" for m in obs)
    assert {m.payload.get("message_id") for m in obs} >= {"shared-0", "alice-1"}
    assert export.memories[MemoryType.episodic] and all(
        m.payload["provenance"]["observation_ids"] for m in export.memories[MemoryType.episodic]
    )
    [vault] = export.memories[MemoryType.knowledge_vault]
    assert vault.payload["caption"] == "home wifi password"
    bob = export_user(people, T, "bob")
    assert {r.status for r in bob.events} == {EventStatus.done}  # his copy of the shared chat is his own
    assert len(bob.memories[MemoryType.observation]) == 4  # his own chat and his copy of the shared one


def test_forget_deletes_the_user_everywhere_and_keeps_shared_objects(people, tmp_path):
    from engram.api.cli.main import ingest_paths
    from engram.workers.memory.records import forget_user
    from engram.workers.memory.search import search
    from engram.workers.memory.vault import list_entries, object_key

    rt = people
    alice, bob = keys_of(rt, "alice"), keys_of(rt, "bob")
    shared, own, shot = alice["shared.jsonl"], alice["alice.jsonl"], alice["alice.png"]
    assert bob["shared.jsonl"] == shared
    [ocr] = rt.objects.keys(f"cache/{T}/ocr/")  # the screenshot's OCR text, cached by its pixels
    [vault_obj] = [object_key(T, e.id) for e in list_entries(rt, T, "alice")]
    # an entry of alice's not indexed yet (no consolidation since perceive kept it), and one of bob's
    unindexed = object_key(T, add_vault_entry(rt, "alice", "garage", index=False).id)
    bobs = object_key(T, add_vault_entry(rt, "bob", "garage").id)

    report = forget_user(rt, T, "alice")

    for coll in COLLECTIONS:
        assert rt.vectors.count(coll, tenant_filter(T, "alice")) == 0, coll
    assert report.points_deleted[OBSERVATIONS] == 5 and report.points_deleted["knowledge_vault"] == 1
    assert rt.ledger.user_events(T, "alice") == [] and len(report.event_ids) == 3
    assert not rt.objects.exists(own) and not rt.objects.exists(shot) and not rt.objects.exists(ocr)
    assert not rt.objects.exists(vault_obj) and {own, shot, ocr, vault_obj} <= set(report.objects_deleted)
    assert not rt.objects.exists(unindexed) and unindexed in report.objects_deleted
    assert rt.objects.exists(bobs) and [e.user_id for e in list_entries(rt, T)] == ["bob"]
    assert rt.objects.exists(shared) and report.objects_kept == [shared]  # bob's event still references it
    names = {n for p in rt.vectors.scroll(ENTITIES, tenant_filter(T)) for n in (p.payload or {}).get("names", [])}
    assert names == {"Alice", "Dan", "Bob", "Frank"}  # Erin only in alice's own chat; bob's copy names Alice, Dan
    [known] = [p for p in rt.vectors.scroll(ENTITIES, tenant_filter(T)) if "Alice" in p.payload["names"]]
    assert known.payload["role"] == "person" and known.payload["user_id"] is None  # alice's own, as bob knows her
    [turn] = rt.vectors.scroll(OBSERVATIONS, tenant_filter(T, entity_ids=str(known.id)))  # his one turn of Alice's
    assert turn.payload["user_id"] == "bob" and known.payload["observation_ids"] == [str(turn.id)]
    assert known.payload["observation_count"] == 1 and known.payload["names"] == ["Alice"]

    for query in ("Lisbon budget review", "tomatoes garden", "home wifi password"):
        assert search(rt, SearchRequest(query=query, tenant_id=T, user_id="alice")).hits == []
        assert all(h.user_id == "bob" for h in search(rt, SearchRequest(query=query, tenant_id=T)).hits)
    assert len(rt.ledger.user_events(T, "bob")) == 2 and rt.vectors.count(OBSERVATIONS, tenant_filter(T, "bob")) == 4
    assert rt.vectors.count(collection_for(MemoryType.knowledge_vault), tenant_filter(T, "bob")) == 1

    # nothing of alice's is a duplicate any more: the same file is ingested anew
    again = ingest_paths([tmp_path / "alice.jsonl"], T, "alice", "laptop", quiet=True)
    assert len(again["done"]) == 1 and rt.objects.exists(own), again
    [me] = [p.payload for p in rt.vectors.scroll(ENTITIES, tenant_filter(T)) if "Alice" in p.payload["names"]]
    assert me["role"] == "self" and me["user_id"] == "alice"  # she is back: her own entity again, one of her


@pytest.mark.slow
def test_forget_the_last_user_of_a_shared_object_deletes_it(people):
    from engram.workers.memory.records import forget_user

    shared = keys_of(people, "bob")["shared.jsonl"]
    assert forget_user(people, T, "alice").objects_kept == [shared]
    report = forget_user(people, T, "bob")
    assert shared in report.objects_deleted and not people.objects.exists(shared)
    assert sum(people.vectors.count(c, tenant_filter(T)) for c in COLLECTIONS) == 0
    assert forget_user(people, T, "nobody").event_ids == []


@pytest.mark.slow
def test_cli(people):
    from typer.testing import CliRunner

    from engram.api.cli.main import app

    runner = CliRunner()
    listed = runner.invoke(app, ["memories", "list", "--type", "observation", "--user", "alice", "--json"])
    assert listed.exit_code == 0, listed.output
    page = json.loads(listed.stdout)
    assert page["total"] == 5
    first = page["items"][0]["id"]
    shown = runner.invoke(app, ["memories", "list", "--type", "observation", "-k", "2"])
    assert shown.exit_code == 0 and "1-2 of 9" in shown.stdout
    got = runner.invoke(app, ["memories", "get", first])
    assert got.exit_code == 0 and json.loads(got.stdout)["id"] == first
    assert runner.invoke(app, ["memories", "get", "not-an-id"]).exit_code == 2
    assert runner.invoke(app, ["memories", "delete", first]).exit_code == 0
    missing = runner.invoke(app, ["memories", "get", first])
    assert missing.exit_code == 1 and "no memory" in missing.stderr

    exported = runner.invoke(app, ["export", "--user", "alice"])
    assert exported.exit_code == 0 and CIPHERTEXT not in exported.stdout
    assert len(json.loads(exported.stdout)["memories"]["observation"]) == 4

    refused = runner.invoke(app, ["forget", "--user", "alice"], input="n\n")
    assert refused.exit_code == 1 and people.vectors.count(OBSERVATIONS, tenant_filter(T, "alice")) == 4
    forgot = runner.invoke(app, ["forget", "--user", "alice", "--yes"])
    assert forgot.exit_code == 0 and "forgot 'alice'" in forgot.stdout and "1 shared object kept" in forgot.stdout
    assert people.vectors.count(OBSERVATIONS, tenant_filter(T, "alice")) == 0
