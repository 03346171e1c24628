"""How long ``EdgeVectorStore.compact`` (the rewrite that leaves no byte of forgotten points in the embedded store,
``workers.memory.forget``) takes on an observations collection of N synthetic points shaped as engram writes them
(a 384-d text vector, a 3-row sentence multivector, a BM25 sparse vector, a ~1 kB payload), after deleting one
point; and that the deleted point's text is in no file afterwards.

    python bench/forget_compact.py --sizes 2000 10000 [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np


def run(n: int, root: Path) -> dict:
    """Build ``n`` points, delete one, compact; seconds and bytes."""
    from engram.workers.stores import models as qm
    from engram.workers.stores.vectors import OBSERVATIONS, EdgeVectorStore

    rng = np.random.default_rng(0)
    store = EdgeVectorStore(root / "vectors", optimize_after=None)
    ids = [str(uuid.uuid4()) for _ in range(n)]
    t0 = time.perf_counter()
    for at in range(0, n, 1000):
        batch = []
        for i in range(at, min(n, at + 1000)):
            v = rng.standard_normal((4, 384)).astype(np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            text = f"FORGETME-{i} " if i == n // 2 else f"turn {i} " + "lorem ipsum dolor sit amet " * 30
            batch.append(
                qm.PointStruct(
                    id=ids[i],
                    vector={
                        "text": v[0].tolist(),
                        "sentences": v[:3].tolist(),
                        "bm25": qm.SparseVector(
                            indices=sorted(rng.choice(50_000, 20, replace=False).tolist()), values=[1.0] * 20
                        ),
                    },
                    payload={"tenant_id": "t", "user_id": "u", "text": text, "start_ts": float(i), "kind": "text"},
                )
            )
        store.upsert(OBSERVATIONS, batch)
    store.optimize([OBSERVATIONS])
    built = time.perf_counter() - t0
    store.delete(OBSERVATIONS, [ids[n // 2]])
    t0 = time.perf_counter()
    store.compact([OBSERVATIONS])
    took = time.perf_counter() - t0
    left = [str(p) for p in (root / "vectors").rglob("*") if p.is_file() and b"FORGETME-" in p.read_bytes()]
    size = sum(p.stat().st_size for p in (root / "vectors").rglob("*") if p.is_file())
    store.close()
    return {
        "points": n,
        "build_s": round(built, 2),
        "compact_s": round(took, 2),
        "store_mb": round(size / 1e6, 1),
        "deleted_text_left_in": left,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2_000, 10_000])
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    out = []
    for n in args.sizes:
        root = Path(tempfile.mkdtemp(prefix="engram-forget-"))
        try:
            out.append(run(n, root))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(json.dumps(out[-1]))
    result = {"runs": out, "load": os.getloadavg()[0]}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"load": result["load"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
