"""Opening this process's vector store (``open_vector_store``: a Qdrant server at ``ENGRAM_QDRANT_URL``, else the
embedded store under ``data_dir/vectors``), where the embedded store lives, and the migration of a store an
older engram wrote with qdrant-client's local mode (``migrate_local_store``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from engram.schemas.settings import Settings
from engram.workers.stores import models as qm
from engram.workers.stores.vectors.base import StoreBusy, VectorStore
from engram.workers.stores.vectors.client import ClientVectorStore
from engram.workers.stores.vectors.edge import EdgeVectorStore
from engram.workers.stores.vectors.locking import open_stores, open_stores_lock
from engram.workers.stores.vectors.schema import COLLECTIONS


def embedded_store_dir(settings: Settings) -> Path:
    """Where the embedded store lives: ``data_dir/vectors`` (one Qdrant Edge shard per collection)."""
    return settings.data_dir / "vectors"


def legacy_store_dir(settings: Settings) -> Path:
    """Where engram before Qdrant Edge kept its embedded store (qdrant-client's local mode)."""
    return settings.data_dir / "qdrant"


def open_vector_store(settings: Settings, progress: Callable[[str, int, int], None] | None = None) -> VectorStore:
    """This process's VectorStore for the configured Qdrant (created once per process and location): a server at
    ``settings.qdrant_url``, else the embedded store under ``data_dir``. A store written by an older engram
    (qdrant-client's local mode under ``data_dir/qdrant``) is migrated first (``migrate_local_store``;
    ``progress(collection, done, total)`` is told as it goes).

    Raises StoreBusy when the embedded store is held by another process, StoreCorrupt when one of its shards
    does not open."""
    where = settings.qdrant_url or str(embedded_store_dir(settings))
    with open_stores_lock:
        store = open_stores.get(where)
        if store is None:
            if settings.qdrant_url:
                from qdrant_client import QdrantClient  # the server's client: ~1 s to import, only when used

                store = ClientVectorStore(
                    QdrantClient(url=settings.qdrant_url, api_key=settings.qdrant_api_key, timeout=60)
                )
            else:
                if legacy_store_dir(settings).is_dir():
                    migrate_local_store(settings, progress)
                store = EdgeVectorStore(embedded_store_dir(settings), wait=settings.store_wait_seconds)
            open_stores[where] = store
        return store


def migrate_local_store(settings: Settings, progress: Callable[[str, int, int], None] | None = None) -> dict[str, int]:
    """Copy the store an older engram wrote with qdrant-client's local mode (``data_dir/qdrant``) into the
    embedded Qdrant Edge store (``data_dir/vectors``), collection by collection, ids, vectors and payloads as
    they were; verify that every point arrived (the ids of each collection, compared), then remove the old
    folder. Returns the points copied per collection. Re-running after a crash starts the copy again (upserts
    overwrite). Raises StoreBusy when the old store is open in another process, RuntimeError (naming the
    collection) when the copy does not verify, the old folder then kept."""
    import shutil

    from qdrant_client import QdrantClient  # reads the old store (qdrant-client's local mode): only when one is there

    old_dir = legacy_store_dir(settings)
    try:
        old = QdrantClient(path=str(old_dir))
    except RuntimeError as exc:
        if "already accessed" in str(exc):
            raise StoreBusy(f"the old embedded store {old_dir} is open in another engram process") from exc
        raise
    copied: dict[str, int] = {}
    new = EdgeVectorStore(embedded_store_dir(settings), optimize_after=None)  # optimized once, at the end
    try:
        for collection in COLLECTIONS:
            if not old.collection_exists(collection):
                continue
            total = old.count(collection, exact=True).count
            done, offset = 0, None
            ids: set[str] = set()
            while True:
                page, offset = old.scroll(collection, limit=512, offset=offset, with_payload=True, with_vectors=True)
                # engram's collections have named vectors only: each point's vector is a dict of them
                points = [
                    qm.PointStruct(id=str(r.id), vector=cast(dict[str, Any], r.vector or {}), payload=r.payload)
                    for r in page
                ]
                new.upsert(collection, points)
                ids.update(str(r.id) for r in page)
                done += len(page)
                if progress:
                    progress(collection, done, total)
                if offset is None:
                    break
            stored = {str(r.id) for r in new.scroll(collection, None, with_payload=False)}
            if stored != ids:
                raise RuntimeError(
                    f"migrating {collection}: {len(ids)} points read from {old_dir}, "
                    f"{len(stored & ids)} found in {embedded_store_dir(settings)}; old store kept"
                )
            copied[collection] = len(ids)
        new.optimize()  # an import: its points into immutable, memory-mapped segments
        new.close()
    finally:
        old.close()
    shutil.rmtree(old_dir)
    return copied
