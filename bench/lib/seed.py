"""Stores grown from a seed: the points of a seed data dir holding LoCoMo conversations ingested through the real
path, copied under new ids (provenance remapped) for 99 more users in 10 tenants until a store holds N observations.

Used by ``bench/scale.py`` (search as the store grows), ``bench/keep.py`` (backup and restore) and ``bench/ui.py``
(the web UI on a grown store).
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from pathlib import Path

USERS = 100
TENANTS = 10
NS = uuid.UUID("5b3c2a4e-5f0c-4d55-9d0b-2f1c0e7a9b11")


def disk_bytes(path: Path) -> int:
    """Bytes on disk under ``path`` (allocated blocks: the engine's files are sparse)."""
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


def seed_points(seed_dir: Path) -> dict[str, dict[str, list]]:
    """The seed store's points: {user_id: {collection: [Record with vectors]}} (entities left out)."""
    from engram.workers.stores.vectors import COLLECTIONS, ENTITIES, EdgeVectorStore

    store = EdgeVectorStore(seed_dir / "vectors")
    out: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    try:
        for coll in COLLECTIONS:
            if coll == ENTITIES or not store.has_collection(coll):
                continue
            for rec in store.scroll(coll, None, with_vectors=True):
                out[(rec.payload or {}).get("user_id")][coll].append(rec)
    finally:
        store.close()
    return out


def copy_point(rec, collection: str, new_id: dict[str, str], tenant: str, user: str, key: str):
    """A copy of the seed point ``rec`` (of ``collection``) for ``tenant``/``user``: a new id derived from ``key``
    and the old id, the provenance's observation ids mapped through ``new_id`` (old → new; ids not in it dropped).
    Returns a ``PointStruct`` to upsert."""
    from engram.workers.stores import models as qm

    payload = dict(rec.payload or {})
    payload.update(tenant_id=tenant, user_id=user)
    prov = payload.get("provenance")
    if isinstance(prov, dict) and prov.get("observation_ids"):
        payload["provenance"] = {
            **prov,
            "observation_ids": [new_id[str(o)] for o in prov["observation_ids"] if str(o) in new_id],
        }
    return qm.PointStruct(id=str(uuid.uuid5(NS, f"{key}:{rec.id}")), vector=rec.vector or {}, payload=payload)


def build(seed: dict[str, dict[str, list]], real_user: str, n_obs: int, data_dir: Path) -> dict:
    """Write a store of ``n_obs`` observations under ``data_dir`` (see the module docstring); returns its
    build seconds, points per collection and bytes on disk."""
    from engram.workers.stores import models as qm
    from engram.workers.stores.vectors import OBSERVATIONS, EdgeVectorStore

    t0 = time.perf_counter()
    store = EdgeVectorStore(data_dir / "vectors", optimize_after=None)  # optimized once, after the build
    counts: dict[str, int] = defaultdict(int)

    def put(collection: str, points: list) -> None:
        for i in range(0, len(points), 512):
            store.upsert(collection, points[i : i + 512])
        counts[collection] += len(points)

    for coll, recs in seed[real_user].items():  # the queried user's own rows, as ingested
        put(coll, [qm.PointStruct(id=str(r.id), vector=r.vector or {}, payload=r.payload) for r in recs])
    conversations = [u for u in sorted(seed) if u and seed[u].get(OBSERVATIONS)]
    quota = max(0, (n_obs - len(seed[real_user].get(OBSERVATIONS, []))) // (USERS - 1))
    c = 0
    for j in range(1, USERS):
        tenant, user = f"tenant-{j % TENANTS}", f"user-{j}"
        left, copy = quota, 0
        while left > 0:
            conv = seed[conversations[c % len(conversations)]]
            c += 1
            obs = conv[OBSERVATIONS][:left]
            key = f"{n_obs}:{j}:{copy}"
            new_id = {str(r.id): str(uuid.uuid5(NS, f"{key}:{r.id}")) for r in obs}
            put(OBSERVATIONS, [copy_point(r, OBSERVATIONS, new_id, tenant, user, key) for r in obs])
            for coll, recs in conv.items():
                if coll != OBSERVATIONS:
                    mems = [
                        m
                        for m in recs
                        if any(
                            str(o) in new_id
                            for o in ((m.payload or {}).get("provenance") or {}).get("observation_ids", [])
                        )
                    ]
                    put(coll, [copy_point(m, coll, new_id, tenant, user, key) for m in mems])
            left -= len(obs)
            copy += 1
    build_s = time.perf_counter() - t0
    optimize_s = sum(store.optimize().values())  # as after an import: the appendable segments made immutable
    store.close()
    return {
        "build_s": build_s,
        "optimize_s": optimize_s,
        "points": dict(counts),
        "disk_bytes": disk_bytes(data_dir / "vectors"),
    }
