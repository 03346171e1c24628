"""One contract for every vector-store backend the tests can start: Qdrant Edge (the embedded default) and
qdrant-client's local mode (the stand-in for a Qdrant server). The same writes go to each; the answers must be
the same ids in the same order with the same scores (within 1e-4), and dense and MaxSim scores must equal a numpy
computation of cosine similarity."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from engram.workers.stores.vectors import (
    DENSE,
    ENTITIES,
    FACE,
    OBSERVATIONS,
    SENTENCES,
    SPARSE,
    ClientVectorStore,
    EdgeVectorStore,
    StoreBusy,
    StoreCorrupt,
    VectorStore,
    tenant_filter,
)

N = 120
RNG = np.random.default_rng(7)
DENSE_VECS = RNG.normal(size=(N, 384)).astype(np.float32)
SENT_VECS = [RNG.normal(size=(1 + i % 3, 384)).astype(np.float32) for i in range(N)]
IDS = [str(uuid.UUID(int=i + 1)) for i in range(N)]
WORDS = list(range(40))


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def _payload(i: int) -> dict:
    return {
        "tenant_id": "t1" if i % 4 else "t2",
        "user_id": f"u{i % 3}",
        "kind": ["text", "screenshot"][i % 2],
        "start_ts": float(1000 + i) if i % 10 else None,
        "text": f"point {i}",
        "entity_ids": [f"e{i % 5}"],
    }


def _points() -> list[qm.PointStruct]:
    out = []
    for i in range(N):
        words = sorted({WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(1 + i % 5)})
        vector = {
            DENSE: DENSE_VECS[i].tolist(),
            SENTENCES: [DENSE_VECS[i].tolist(), *SENT_VECS[i].tolist()],
            SPARSE: qm.SparseVector(indices=words, values=[1.0 + (w % 3) for w in words]),
        }
        payload = {k: v for k, v in _payload(i).items() if v is not None}
        out.append(qm.PointStruct(id=IDS[i], vector=vector, payload=payload))
    return out


def _open(kind: str, path) -> VectorStore:
    if kind == "edge":
        return EdgeVectorStore(path / "vectors")
    return ClientVectorStore(QdrantClient(path=str(path / "local")), local=True)


@pytest.fixture(params=["edge", "client-local"])
def store(request, tmp_path):
    s = _open(request.param, tmp_path)
    s.upsert(OBSERVATIONS, _points())
    s.kind, s.path = request.param, tmp_path
    yield s
    s.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The answers of qdrant-client's local mode, which each backend must give too."""
    s = _open("client-local", tmp_path_factory.mktemp("reference"))
    s.upsert(OBSERVATIONS, _points())
    yield s
    s.close()


def _same(a, b) -> None:
    """Same ids in the same order with scores within 1e-4; points of equal score may come in either order."""
    assert len(a) == len(b)
    assert all(abs(x.score - y.score) <= 1e-4 for x, y in zip(a, b, strict=True))

    def runs(points) -> list[set[str]]:
        out: list[set[str]] = []
        for i, p in enumerate(points):
            if i and abs(p.score - points[i - 1].score) <= 1e-4:
                out[-1].add(str(p.id))
            else:
                out.append({str(p.id)})
        return out

    assert runs(a) == runs(b)


def test_dense_and_maxsim_search_match_numpy_and_each_other(store, reference):
    q = _unit(RNG.normal(size=384).astype(np.float32))
    flt = tenant_filter("t1", "u1")
    members = [i for i in range(N) if _payload(i)["tenant_id"] == "t1" and _payload(i)["user_id"] == "u1"]
    # MaxSim over [own vector, sentences] (observations' dense search)
    dense, _ = store.search(OBSERVATIONS, q.tolist(), None, flt, 10)
    maxsim = {IDS[i]: float(np.max(_unit(np.vstack([DENSE_VECS[i], SENT_VECS[i]])) @ q)) for i in members}
    want = sorted(maxsim, key=lambda k: -maxsim[k])[:10]
    assert [str(p.id) for p in dense] == want
    assert all(abs(p.score - maxsim[str(p.id)]) < 1e-4 for p in dense)
    _same(dense, reference.search(OBSERVATIONS, q.tolist(), None, flt, 10)[0])
    # plain cosine on the single vector
    plain = store.nearest(OBSERVATIONS, DENSE, q.tolist(), flt, limit=5)
    cos = {IDS[i]: float(_unit(DENSE_VECS[i]) @ q) for i in members}
    assert [str(p.id) for p in plain] == sorted(cos, key=lambda k: -cos[k])[:5]
    _same(plain, reference.nearest(OBSERVATIONS, DENSE, q.tolist(), flt, limit=5))
    assert [len(r) for r in store.nearest_batch(OBSERVATIONS, DENSE, [q.tolist(), (-q).tolist()], flt, 3)] == [3, 3]


def test_sparse_search_counts_idf_over_the_given_corpus(store, reference):
    query = ([3, 10, 17], [1.0, 1.0, 1.0])
    flt = tenant_filter("t1", "u2")
    _, mine = store.search(OBSERVATIONS, None, query, flt, 20, idf_corpus=tenant_filter("t1", "u2"))
    _, ref = reference.search(OBSERVATIONS, None, query, flt, 20, idf_corpus=tenant_filter("t1", "u2"))
    assert mine and all(_payload(IDS.index(str(p.id)))["user_id"] == "u2" for p in mine)
    _same(mine, ref)
    # the IDF of the whole collection gives other scores: the corpus is what the scores depend on
    _, whole = store.search(OBSERVATIONS, None, query, flt, 20)
    assert [round(p.score, 4) for p in whole] != [round(p.score, 4) for p in mine]
    _same(whole, reference.search(OBSERVATIONS, None, query, flt, 20)[1])


def test_filters_scroll_count_and_newest(store, reference):
    flt = qm.Filter(
        must=[
            qm.FieldCondition(key="tenant_id", match=qm.MatchValue(value="t1")),
            qm.FieldCondition(key="kind", match=qm.MatchAny(any=["screenshot"])),
            qm.FieldCondition(key="start_ts", range=qm.Range(gte=1010, lt=1080)),
        ],
        must_not=[qm.FieldCondition(key="entity_ids", match=qm.MatchValue(value="e3"))],
    )
    want = [
        IDS[i]
        for i in range(N)
        if _payload(i)["tenant_id"] == "t1"
        and i % 2
        and _payload(i)["start_ts"]
        and 1010 <= _payload(i)["start_ts"] < 1080
        and i % 5 != 3
    ]
    got = store.scroll(OBSERVATIONS, flt)
    assert sorted(str(r.id) for r in got) == sorted(want)
    assert [str(r.id) for r in got] == [str(r.id) for r in reference.scroll(OBSERVATIONS, flt)]
    assert store.count(OBSERVATIONS, flt) == len(want) and store.count(OBSERVATIONS) == N
    by_id = qm.Filter(must=[qm.HasIdCondition(has_id=IDS[:5])])
    assert sorted(str(r.id) for r in store.scroll(OBSERVATIONS, by_id)) == sorted(IDS[:5])
    empty = qm.Filter(must=[qm.IsEmptyCondition(is_empty=qm.PayloadField(key="start_ts"))])
    assert store.count(OBSERVATIONS, empty) == N // 10
    slim = store.scroll(OBSERVATIONS, tenant_filter("t2"), with_payload=["user_id"])
    assert slim and all(set(r.payload) == {"user_id"} for r in slim)
    newest = store.newest(OBSERVATIONS, tenant_filter("t1"), 5)
    assert [str(r.id) for r in newest] == [str(r.id) for r in reference.newest(OBSERVATIONS, tenant_filter("t1"), 5)]
    assert [r.payload["start_ts"] for r in newest] == sorted([r.payload["start_ts"] for r in newest], reverse=True)
    paged = store.scroll(OBSERVATIONS, None, batch=7)
    assert [str(r.id) for r in paged] == [str(r.id) for r in store.scroll(OBSERVATIONS, None)]


def test_payload_updates_delete_by_filter_and_reopen(store):
    store.set_payload(OBSERVATIONS, IDS[:3], {"consolidated": True})
    store.set_payloads(OBSERVATIONS, {IDS[3]: {"n": 3}, IDS[4]: {"n": 4}})
    store.delete(OBSERVATIONS, tenant_filter("t2"))
    store.delete(OBSERVATIONS, [IDS[1]])
    store.close()
    again = _open(store.kind, store.path)
    try:
        left = N - sum(1 for i in range(N) if _payload(i)["tenant_id"] == "t2") - 1
        assert again.count(OBSERVATIONS) == left
        got = {str(r.id): r for r in again.retrieve(OBSERVATIONS, IDS[:6], with_vectors=[DENSE])}
        assert IDS[0] not in got and IDS[1] not in got  # 0 is tenant t2; 1 deleted by id
        assert got[IDS[2]].payload["consolidated"] is True and got[IDS[3]].payload["n"] == 3
        assert np.allclose(got[IDS[2]].vector[DENSE], _unit(DENSE_VECS[2]), atol=1e-5)
        assert again.count(OBSERVATIONS, tenant_filter("t1", consolidated=True)) == 1
    finally:
        again.close()
        store._ready.clear()


def test_reading_a_collection_never_written_finds_nothing_and_makes_nothing(store):
    """A search reads every memory type's collection: one never written answers empty and is not created (on
    the embedded store each empty shard would cost a cold search ~50 CPU ms to make and again to open)."""
    never = "procedural"
    flt = tenant_filter("t1")
    assert store.search(never, DENSE_VECS[0].tolist(), ([1, 2], [1.0, 1.0]), flt, 5) == ([], [])
    assert store.nearest(never, DENSE, DENSE_VECS[0].tolist(), flt) == []
    assert store.scroll(never, flt) == [] and store.retrieve(never, IDS[:2]) == []
    assert store.count(never, flt) == 0 and store.newest(never, flt, 3) == []
    store.delete(never, flt)
    store.delete(never, IDS[:2])
    assert not store.has_collection(never) and never not in store.collections()
    store.upsert(
        never, [qm.PointStruct(id=IDS[i], vector={DENSE: DENSE_VECS[i].tolist()}, payload=_payload(i)) for i in (1, 2)]
    )  # a write makes it
    assert store.has_collection(never) and store.count(never) == 2


def test_euclidean_vectors_and_a_threshold(store):
    face = RNG.normal(size=128).astype(np.float32) * 0.1
    pts = [
        qm.PointStruct(
            id=str(uuid.UUID(int=10_000 + i)), vector={FACE: (face + i * 0.05).tolist()}, payload={"tenant_id": "t1"}
        )
        for i in range(5)
    ]
    store.upsert(ENTITIES, pts)
    near = store.nearest(ENTITIES, FACE, face.tolist(), tenant_filter("t1"), limit=5, score_threshold=0.05 * 12)
    dist = [float(np.linalg.norm(np.full(128, i * 0.05))) for i in range(5)]
    assert [str(p.id) for p in near] == [str(pts[i].id) for i in range(5) if dist[i] <= 0.6]
    assert all(abs(p.score - dist[i]) < 1e-4 for i, p in enumerate(near))


def test_a_second_process_gets_store_busy_and_a_broken_shard_a_clear_error(tmp_path):
    import subprocess
    import sys

    store = EdgeVectorStore(tmp_path / "vectors")
    store.upsert(OBSERVATIONS, _points()[:3])
    code = (
        "import sys; from engram.workers.stores.vectors import EdgeVectorStore, StoreBusy\n"
        "try: EdgeVectorStore(sys.argv[1]).count('observations')\n"
        "except StoreBusy as e: print('busy:', e)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "vectors")], capture_output=True, text=True, timeout=120
    )
    assert "busy: the embedded store" in out.stdout, out.stderr[-2000:]
    store.close()
    shard = tmp_path / "vectors" / OBSERVATIONS
    for f in shard.rglob("*"):
        if f.is_file() and f.name.endswith(".json"):
            f.write_text("{ not json")
    with pytest.raises((StoreCorrupt, StoreBusy)) as err:
        EdgeVectorStore(tmp_path / "vectors").count(OBSERVATIONS)
    assert str(shard) in str(err.value)


def test_every_acknowledged_write_survives_a_sigkill(tmp_path):
    """A process killed with SIGKILL in the middle of upserts: on reopen every upsert that had returned is there
    (Qdrant Edge's write-ahead log), with its payload."""
    import signal
    import subprocess
    import sys

    code = (
        "import sys, uuid\n"
        "from qdrant_client import models as qm\n"
        "from engram.workers.stores.vectors import EdgeVectorStore, DENSE\n"
        "s = EdgeVectorStore(sys.argv[1])\n"
        "for b in range(10_000):\n"
        "    s.upsert('observations', [qm.PointStruct(id=str(uuid.UUID(int=b * 50 + i + 1)), payload={'b': b},\n"
        "             vector={DENSE: [1.0, float(i)] + [0.0] * 382}) for i in range(50)])\n"
        "    print(b, flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "vectors")], stdout=subprocess.PIPE, text=True)
    acked = -1
    for line in proc.stdout:
        acked = int(line)
        if acked >= 30:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert acked >= 30
    store = EdgeVectorStore(tmp_path / "vectors")
    try:
        n = store.count(OBSERVATIONS)
        assert n >= (acked + 1) * 50
        last = store.retrieve(OBSERVATIONS, [uuid.UUID(int=acked * 50 + 50)])
        assert last and last[0].payload == {"b": acked}
    finally:
        store.close()


@pytest.mark.slow
def test_the_cli_names_a_broken_shard_in_one_line(tmp_path):
    """``engram search`` on a store whose observations shard is damaged: exit 3 and one line naming the shard
    folder, no traceback, nothing made in its place."""
    import subprocess
    import sys

    from tests.conftest import REPO

    store = EdgeVectorStore(tmp_path / "data" / "vectors")
    store.upsert(OBSERVATIONS, _points()[:3])
    store.close()
    shard = tmp_path / "data" / "vectors" / OBSERVATIONS
    for f in shard.rglob("*.json"):
        f.write_text("{ not json")
    for p in [tmp_path / "data", *(tmp_path / "data").rglob("*")]:  # owner-only, as engram makes it: no warning
        p.chmod(0o700 if p.is_dir() else 0o600)
    before = sorted(p.name for p in shard.rglob("*"))
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
    }
    out = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", "search", "hello"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=REPO,
    )
    assert out.returncode == 3, out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(shard) in out.stderr.replace("\n", "")
    assert "Traceback" not in out.stderr
    assert sorted(p.name for p in shard.rglob("*")) == before


def test_optimize_keeps_every_answer(tmp_path):
    """Qdrant's optimizers move the points into immutable segments: counts, rankings and payloads are the same
    before and after, and after a reopen."""
    store = EdgeVectorStore(tmp_path / "vectors")
    store.upsert(OBSERVATIONS, _points())
    q = _unit(RNG.normal(size=384).astype(np.float32)).tolist()
    flt = tenant_filter("t1", "u1")
    before = store.search(OBSERVATIONS, q, ([3, 10, 17], [1.0, 1.0, 1.0]), flt, 10, idf_corpus=flt)
    assert set(store.optimize()) == {OBSERVATIONS}
    after = store.search(OBSERVATIONS, q, ([3, 10, 17], [1.0, 1.0, 1.0]), flt, 10, idf_corpus=flt)
    for a, b in zip(before, after, strict=True):
        _same(a, b)
    store.close()
    again = EdgeVectorStore(tmp_path / "vectors")
    try:
        assert again.count(OBSERVATIONS) == N
        _same(before[0], again.search(OBSERVATIONS, q, None, flt, 10)[0])
    finally:
        again.close()


@pytest.mark.parametrize("removed", ["payload_storage", "vector_storage-text", "vector_storage-bm25"])
def test_a_shard_missing_a_file_is_named_and_left_as_it_is(tmp_path, removed):
    """Qdrant's engine opens a shard whose segment lost its payload storage (or a vector's) and answers as if
    the points had none: the store refuses it instead, naming what is missing, and touches nothing."""
    import shutil

    store = EdgeVectorStore(tmp_path / "vectors")
    store.upsert(OBSERVATIONS, _points()[:3])
    store.close()
    shard = tmp_path / "vectors" / OBSERVATIONS
    gone = sorted(shard.glob(f"segments/*/{removed}"))[0]
    shutil.rmtree(gone)
    before = sorted(str(p) for p in shard.rglob("*"))
    with pytest.raises(StoreCorrupt) as err:
        EdgeVectorStore(tmp_path / "vectors").count(OBSERVATIONS)
    assert str(gone) in str(err.value) and "restore the folder" in str(err.value)
    assert sorted(str(p) for p in shard.rglob("*")) == before


@pytest.mark.parametrize("manifest", [True, False])
@pytest.mark.parametrize("removed", ["segment", "id tracker", "segments"])
def test_a_shard_that_lost_points_since_it_was_closed_is_refused(tmp_path, removed, manifest):
    """Qdrant's engine opens a shard that lost a segment folder (or a segment's id tracker) and answers with what
    its write-ahead log still holds: the store compares the files with the manifest of its last clean close and
    names what is missing; without a manifest (an older engram's store) it compares the points with the count of
    its last clean close instead, and refuses it naming the shard; a process that wrote and was killed leaves no
    count to compare with."""
    import shutil

    from engram.workers.stores.integrity import MANIFEST

    store = EdgeVectorStore(tmp_path / "vectors")
    store.upsert(OBSERVATIONS, _points())
    store.optimize([OBSERVATIONS])  # the points move into a segment of their own; the log is cut
    store.upsert(OBSERVATIONS, [_points()[0]])
    store.close()
    shard = tmp_path / "vectors" / OBSERVATIONS
    reopened = EdgeVectorStore(tmp_path / "vectors")  # a reader closes cleanly too
    total = reopened.count(OBSERVATIONS)
    reopened.close()
    assert (shard / MANIFEST).is_file()
    if not manifest:
        (shard / MANIFEST).unlink()
    biggest = max(
        (p for p in (shard / "segments").iterdir()),
        key=lambda p: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()),
    )
    gone = shard / "segments" if removed == "segments" else biggest
    if removed == "id tracker":
        for f in biggest.glob("*id_tracker*"):
            f.unlink()
    else:
        shutil.rmtree(gone)
    with pytest.raises(StoreCorrupt) as err:
        EdgeVectorStore(tmp_path / "vectors").count(OBSERVATIONS)
    assert str(shard) in str(err.value)
    if manifest or removed != "segment":  # named before the engine opens the shard
        assert f"is missing {gone}" in str(err.value)
    else:  # the vectors its segments still hold, or the points the engine finds, against the last count
        assert "a segment of it is missing" in str(err.value) or "fewer than when it" in str(err.value)
    assert total == len(_points())


def test_a_write_then_a_kill_leaves_no_count_to_compare_with(tmp_path):
    store = EdgeVectorStore(tmp_path / "vectors")
    store.upsert(OBSERVATIONS, _points())
    store.close()
    assert json.loads((tmp_path / "vectors" / "closed.json").read_text())[OBSERVATIONS] == len(_points())
    store = EdgeVectorStore(tmp_path / "vectors")
    store.delete(OBSERVATIONS, [str(_points()[0].id)])  # a write: the count of the last close no longer holds
    assert OBSERVATIONS not in json.loads((tmp_path / "vectors" / "closed.json").read_text())
    store.close()
    assert json.loads((tmp_path / "vectors" / "closed.json").read_text())[OBSERVATIONS] == len(_points()) - 1


def test_a_shard_without_a_manifest_is_read_back_and_closed_with_one(tmp_path):
    """A shard whose manifest is gone (an older engram's, or its process killed) opens after its points are read
    back (a memory collection too: no multivector), answers as before, and has a manifest again once closed; a
    manifest that does not match is refused naming the file, before the engine touches the shard."""
    from engram.workers.stores.integrity import MANIFEST

    store = EdgeVectorStore(tmp_path / "vectors")
    points = _points()[:20]
    episodic = [qm.PointStruct(id=p.id, vector={DENSE: p.vector[DENSE]}, payload=p.payload) for p in points]
    store.upsert(OBSERVATIONS, points)
    store.upsert("episodic", episodic)
    store.close()
    for collection in (OBSERVATIONS, "episodic"):
        (tmp_path / "vectors" / collection / MANIFEST).unlink()
    again = EdgeVectorStore(tmp_path / "vectors")
    assert again.count(OBSERVATIONS) == 20 and again.count("episodic") == 20
    again.close()
    shard = tmp_path / "vectors" / "episodic"
    assert (shard / MANIFEST).is_file() and (tmp_path / "vectors" / OBSERVATIONS / MANIFEST).is_file()
    config = shard / "edge_config.json"
    config.write_text(config.read_text().replace("384", "385"))
    with pytest.raises(StoreCorrupt) as err:
        EdgeVectorStore(tmp_path / "vectors").count("episodic")
    assert str(config) in str(err.value)
