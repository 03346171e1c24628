"""The embedded store's writes and settings reuse: points, payload changes and deletions survive a reopen, and
settings follow the environment while being built once per distinct environment."""

from __future__ import annotations

import uuid

from qdrant_client import models as qm

from engram.schemas.settings import get_settings
from engram.workers.runtime import reset_runtimes, runtime
from engram.workers.stores.vectors import DENSE, DIM, OBSERVATIONS, tenant_filter

IDS = [str(uuid.UUID(int=i + 1)) for i in range(300)]


def _points(n: int) -> list[qm.PointStruct]:
    return [
        qm.PointStruct(id=IDS[i], vector={DENSE: [1.0] + [0.0] * (DIM - 1)}, payload={"tenant_id": "t", "i": i})
        for i in range(n)
    ]


def test_the_embedded_store_keeps_points_across_a_reopen(engram_env):
    rt = engram_env
    rt.vectors.upsert(OBSERVATIONS, _points(300))
    rt.vectors.set_payload(OBSERVATIONS, IDS, {"consolidated": True})
    assert (rt.settings.data_dir / "vectors" / OBSERVATIONS).is_dir()  # one Qdrant Edge shard per collection
    reset_runtimes()  # close and reopen the folder: everything written is there
    again = runtime().vectors
    assert again.count(OBSERVATIONS) == 300
    assert all(r.payload["consolidated"] for r in again.retrieve(OBSERVATIONS, IDS[::100]))


def test_settings_follow_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(tmp_path / "a"))
    first = get_settings()
    assert first.data_dir == tmp_path / "a"
    assert get_settings() is not first and get_settings() == first  # a private copy of the same values
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(tmp_path / "b"))
    monkeypatch.setenv("ENGRAM_EPISODE_MAX_OBSERVATIONS", "7")
    assert get_settings().data_dir == tmp_path / "b"
    assert get_settings().episode_max_observations == 7
    monkeypatch.delenv("ENGRAM_EPISODE_MAX_OBSERVATIONS")
    assert get_settings().episode_max_observations == first.episode_max_observations


def test_writes_keep_every_point_and_scroll_pages_alike(engram_env):
    """A request's points, payload changes and deletions are all there after a reopen; a failed request (a wrong
    vector size) keeps nothing of it. A scroll in small pages gives the points of one big page, in the same
    order; ``without`` leaves payload keys out."""
    rt = engram_env
    pts = _points(300)
    for p in pts:
        p.payload["context_before"] = ["a neighbour's text"]
    rt.vectors.upsert(OBSERVATIONS, pts)
    rt.vectors.set_payloads(OBSERVATIONS, {IDS[i]: {"n": i} for i in range(0, 300, 3)})
    rt.vectors.delete(OBSERVATIONS, IDS[:10])
    bad = qm.PointStruct(id=str(uuid.UUID(int=10_000)), vector={DENSE: [1.0] * 3}, payload={"tenant_id": "t"})
    try:  # a wrong vector size fails the request; no point of it is kept
        rt.vectors.upsert(OBSERVATIONS, [bad])
    except Exception:  # noqa: BLE001 (the engine's error type differs between backends)
        pass
    whole = rt.vectors.scroll(OBSERVATIONS, None)
    paged = rt.vectors.scroll(OBSERVATIONS, None, batch=64)
    assert len(whole) == 290
    assert [r.id for r in whole] == [r.id for r in paged] and [r.payload for r in whole] == [r.payload for r in paged]
    slim = rt.vectors.scroll(OBSERVATIONS, None, without=["context_before"])
    assert [r.id for r in slim] == [r.id for r in whole]
    assert all("context_before" not in r.payload and r.payload["tenant_id"] == "t" for r in slim)
    reset_runtimes()  # close and reopen: what each request wrote is there
    again = runtime().vectors
    assert again.count(OBSERVATIONS) == 290
    kept = {str(r.id): r.payload for r in again.scroll(OBSERVATIONS, None)}
    assert IDS[0] not in kept and kept[IDS[12]]["n"] == 12 and "n" not in kept[IDS[13]]


def test_the_embedded_store_optimizes_after_enough_writes(tmp_path):
    """The upsert that brings a collection's points written since its last optimization to ``optimize_after``
    optimizes it; the count carries across a reopen (another process's writes count too)."""
    import json

    from engram.workers.stores.vectors import OPTIMIZED_FILE, EdgeVectorStore

    store = EdgeVectorStore(tmp_path / "vectors", optimize_after=250)
    store.upsert(OBSERVATIONS, _points(200))
    assert store.pending_points(OBSERVATIONS) == 200
    assert not (tmp_path / "vectors" / OPTIMIZED_FILE).exists()
    store.close()
    again = EdgeVectorStore(tmp_path / "vectors", optimize_after=250)
    assert again.pending_points(OBSERVATIONS) == 200  # the points a closed store wrote are still to optimize
    again.upsert(OBSERVATIONS, _points(300)[200:])  # 300 >= 250: this upsert optimizes
    assert again.pending_points(OBSERVATIONS) == 0
    assert json.loads((tmp_path / "vectors" / OPTIMIZED_FILE).read_text()) == {OBSERVATIONS: 300}
    again.close()
    third = EdgeVectorStore(tmp_path / "vectors", optimize_after=250)
    assert third.pending_points(OBSERVATIONS) == 0 and third.count(OBSERVATIONS) == 300
    third.upsert(OBSERVATIONS, _points(10))  # rewriting points counts as writing them
    assert third.pending_points(OBSERVATIONS) == 10
    third.close()


def test_a_shard_made_before_an_index_was_added_gets_it_on_open(tmp_path):
    """Every payload field filters use is indexed, also in a shard an older engram made without the newer
    indexes (``superseded_by``, ``archived``: every memory search filters on them)."""
    import qdrant_edge

    from engram.workers.stores.vectors import INDEXED_FIELDS, EdgeVectorStore, shard_config

    old = tmp_path / "vectors" / OBSERVATIONS
    old.mkdir(parents=True)
    shard = qdrant_edge.EdgeShard.create(str(old), shard_config(OBSERVATIONS))  # no payload index
    shard.close()
    store = EdgeVectorStore(tmp_path / "vectors")
    assert store.indexed_fields(OBSERVATIONS) == set(INDEXED_FIELDS)
    store.upsert(OBSERVATIONS, _points(3))
    store.close()
    again = EdgeVectorStore(tmp_path / "vectors")
    assert again.indexed_fields(OBSERVATIONS) == set(INDEXED_FIELDS) and again.count(OBSERVATIONS) == 3
    again.close()


def _index_memory(path) -> dict:
    """{field: its payload index's memory placement, by name} of the closed shard at ``path`` ('None': in
    memory). Opened by the engine alone, as the store opens it: its manifest dropped first (the engine rewrites
    files as it opens a shard)."""
    import qdrant_edge

    from engram.workers.stores.integrity import drop_manifest

    drop_manifest(path)
    shard = qdrant_edge.EdgeShard.load(str(path))
    try:
        return {f: str(getattr(i.params, "memory", None)) for f, i in shard.info().payload_schema.items()}
    finally:
        shard.close()


def test_payload_indexes_are_memory_mapped_and_optimize_moves_old_ones_to_disk(tmp_path):
    """Opening a shard reads no payload index into memory (most of a cold search's open at 100 k): a new shard's
    indexes are memory-mapped, and those an earlier engram made in memory are made again on disk by ``optimize``,
    with the same answers."""
    import qdrant_edge

    from engram.workers.stores.vectors import INDEXED_FIELDS, EdgeVectorStore, shard_config

    store = EdgeVectorStore(tmp_path / "new")
    store.upsert(OBSERVATIONS, _points(3))
    store.close()
    assert set(_index_memory(tmp_path / "new" / OBSERVATIONS).values()) == {"Memory.Cold"}

    old = tmp_path / "vectors" / OBSERVATIONS  # as engram made it before: every index in memory
    old.mkdir(parents=True)
    shard = qdrant_edge.EdgeShard.create(str(old), shard_config(OBSERVATIONS))
    for field, kind in INDEXED_FIELDS.items():
        shard.update(
            qdrant_edge.UpdateOperation.create_field_index(
                field,
                qdrant_edge.KeywordIndexParams(is_tenant=True)
                if field == "tenant_id"
                else {
                    "keyword": qdrant_edge.PayloadSchemaType.Keyword,
                    "float": qdrant_edge.PayloadSchemaType.Float,
                    "bool": qdrant_edge.PayloadSchemaType.Bool,
                }[kind],
            )
        )
    shard.close()
    store = EdgeVectorStore(tmp_path / "vectors")
    store.upsert(OBSERVATIONS, _points(300))
    flt = tenant_filter("t")
    before = store.count(OBSERVATIONS, flt), [str(p.id) for p in store.scroll(OBSERVATIONS, flt, with_payload=False)]
    store.close()
    assert set(_index_memory(old).values()) == {"None"}  # opened, written: still in memory until optimized
    store = EdgeVectorStore(tmp_path / "vectors")
    store.optimize()
    assert (
        store.count(OBSERVATIONS, flt),
        [str(p.id) for p in store.scroll(OBSERVATIONS, flt, with_payload=False)],
    ) == before and store.indexed_fields(OBSERVATIONS) == set(INDEXED_FIELDS)
    store.close()
    assert set(_index_memory(old).values()) == {"Memory.Cold"}
