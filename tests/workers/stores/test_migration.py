"""A store written by engram before Qdrant Edge (qdrant-client's local mode under ``data_dir/qdrant``, the
layout ``ClientVectorStore`` writes) is copied into the embedded Qdrant Edge store on first open: every point
with its vectors and payload, verified, then the old folder removed."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from engram.schemas.settings import Settings
from engram.workers.stores.vectors import (
    DENSE,
    ENTITIES,
    FACE,
    OBSERVATIONS,
    SENTENCES,
    SPARSE,
    ClientVectorStore,
    close_vector_stores,
    open_vector_store,
    tenant_filter,
)


def _old_store(data_dir) -> dict[str, list[qm.PointStruct]]:
    rng = np.random.default_rng(3)
    obs = [
        qm.PointStruct(
            id=str(uuid.UUID(int=i + 1)),
            payload={
                "tenant_id": "t",
                "user_id": "u",
                "text": f"turn {i}",
                "start_ts": 1000.0 + i,
                "consolidated": i % 2 == 0,
            },
            vector={
                DENSE: rng.normal(size=384).tolist(),
                SENTENCES: rng.normal(size=(2, 384)).tolist(),
                SPARSE: qm.SparseVector(indices=[i, i + 1], values=[1.0, 2.0]),
            },
        )
        for i in range(1200)
    ]  # more than one page of the copy
    ents = [
        qm.PointStruct(
            id=str(uuid.UUID(int=9000)),
            payload={"tenant_id": "t", "names": ["Alice"]},
            vector={DENSE: rng.normal(size=384).tolist(), FACE: rng.normal(size=128).tolist()},
        )
    ]
    old = ClientVectorStore(QdrantClient(path=str(data_dir / "qdrant")), local=True)
    old.upsert(OBSERVATIONS, obs)
    old.upsert(ENTITIES, ents)
    old.close()
    return {OBSERVATIONS: obs, ENTITIES: ents}


def test_an_old_local_mode_store_is_migrated_on_first_open(tmp_path):
    data_dir = tmp_path / "data"
    written = _old_store(data_dir)
    seen: list[tuple[str, int, int]] = []
    store = open_vector_store(Settings(data_dir=data_dir), progress=lambda *told: seen.append(told))
    try:
        assert not (data_dir / "qdrant").exists() and (data_dir / "vectors" / OBSERVATIONS).is_dir()
        assert seen[-1] == (ENTITIES, 1, 1) and (OBSERVATIONS, 1200, 1200) in seen
        assert store.count(OBSERVATIONS) == 1200 and store.count(ENTITIES) == 1
        got = {str(r.id): r for r in store.scroll(OBSERVATIONS, None, with_vectors=True)}
        for p in written[OBSERVATIONS][::97]:
            r = got[str(p.id)]
            assert r.payload == p.payload
            unit = np.asarray(p.vector[DENSE]) / np.linalg.norm(p.vector[DENSE])
            assert np.allclose(r.vector[DENSE], unit, atol=1e-5)
            assert len(r.vector[SENTENCES]) == 2 and r.vector[SPARSE].indices == p.vector[SPARSE].indices
        assert store.count(OBSERVATIONS, tenant_filter("t", "u", consolidated=True)) == 600
        (alice,) = store.retrieve(ENTITIES, [uuid.UUID(int=9000)], with_vectors=[FACE])
        assert alice.payload["names"] == ["Alice"] and len(alice.vector[FACE]) == 128
    finally:
        close_vector_stores()


@pytest.mark.slow
def test_engram_migrate_moves_the_old_store_and_says_so(tmp_path):
    import subprocess
    import sys

    from tests.conftest import REPO

    data_dir = tmp_path / "data"
    _old_store(data_dir)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "ENGRAM_DATA_DIR": str(data_dir),
        "COLUMNS": "200",
    }
    run = lambda: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "engram.api.cli", "migrate"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=REPO,
    )
    out = run()
    assert out.returncode == 0, out.stderr[-2000:]
    assert "migrated 1201 points in 2 collections" in " ".join(out.stdout.split())
    assert not (data_dir / "qdrant").exists()
    again = run()
    assert again.returncode == 0 and "nothing to migrate" in again.stdout
    store = open_vector_store(Settings(data_dir=data_dir))
    try:
        assert store.count(OBSERVATIONS) == 1200 and store.count(ENTITIES) == 1
    finally:
        close_vector_stores()
