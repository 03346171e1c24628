"""How the embedded store tells a damaged shard: the engine's storage failures told from bad requests, and a
shard read back point by point (``read_back``) when no manifest of its last clean close is there to check its
files by (``workers.stores.integrity``). Each failure is a ``StoreCorrupt`` naming the shard and the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from engram.schemas.errors import StoreCorrupt
from engram.workers.stores.integrity import damaged
from engram.workers.stores.vectors.edge_types import edge_engine
from engram.workers.stores.vectors.schema import DENSE


def corrupt(path: Path, what: str, after_restore: str = "") -> StoreCorrupt:
    """The error for a shard that cannot be used as it is: ``path`` and ``what`` is wrong, and what to do."""
    return damaged(path, what, after_restore)


def storage_failure(exc: BaseException) -> bool:
    """Whether the engine's error ``exc`` is a storage failure (its files), not a bad request."""
    text = str(exc)
    return type(exc) is Exception and (
        text.startswith(("Service runtime error", "Service internal error")) or "IO error" in text
    )


def one_line(exc: BaseException, limit: int = 200) -> str:
    """The engine's error ``exc`` on one line, at most ``limit`` characters (for an error message or a log)."""
    return " ".join(str(exc).split())[:limit]


#: A stored text vector (cosine: the engine keeps it normalized) shorter than this was damaged (zeros written over it).
_MIN_NORM = 0.5


def read_back(path: Path, shard: Any, page: int = 512) -> None:
    """Read every point of ``shard`` (at ``path``, opened without a manifest to check it by) back through the
    engine: its payload, and its ``DENSE`` vector, which must be of unit length (cosine: the engine stores it
    normalized). Raises StoreCorrupt naming the shard's payload or vector storage when a page cannot be read or
    decoded, or a vector was zeroed. About 2 s per 10 k observations on a busy machine (the multivectors are
    left out: 5 s more): only when the manifest is missing."""
    qe = edge_engine()
    offset = None
    while True:
        try:
            points, offset = shard.scroll(
                qe.ScrollRequest(offset=offset, limit=page, with_payload=True, with_vector=[DENSE])
            )
        except Exception as exc:
            if not storage_failure(exc):
                raise
            raise corrupt(
                path,
                f"cannot be read back: {_segment_files(path, 'payload_storage')} or its "
                f"vector storage is damaged ({one_line(exc)})",
            ) from exc
        dense = [(p.id, p.vector[DENSE]) for p in points if p.vector and p.vector.get(DENSE)]
        if dense:
            norms = np.linalg.norm(np.asarray([v for _, v in dense], dtype=np.float32), axis=1)
            if float(norms.min()) < _MIN_NORM:
                pid = dense[int(norms.argmin())][0]
                raise corrupt(
                    path,
                    f"has a damaged {_segment_files(path, f'vector_storage-{DENSE}')}: point "
                    f"{pid}'s vector was overwritten with zeros",
                )
        if offset is None:
            return


def _segment_files(path: Path, storage: str) -> str:
    """The ``storage`` folder of the shard's segments, as a path (the shard's one segment) or a pattern."""
    segments = sorted(p for p in (path / "segments").glob("*") if p.is_dir())
    return str(segments[0] / storage) if len(segments) == 1 else f"{path / 'segments'}/*/{storage}"
