"""One shard of the embedded store as a whole (``edge.EdgeVectorStore``'s): the configuration a new shard is made
with, its payload indexes, and its rewrite into a new folder beside it (``EdgeVectorStore.compact``), with the
recovery of a swap that was interrupted. Functions of a shard handle and of paths only: which shards a process has
open and what it wrote since are the store's (``edge``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import structlog

from engram.workers.stores.vectors.edge_types import edge_engine, index_params
from engram.workers.stores.vectors.schema import INDEXED_FIELDS, SPARSE, VECTORS

log = structlog.get_logger(__name__)

#: ``EdgeVectorStore.compact``'s folders beside a collection's: the new shard being written, the old one being removed.
COMPACTING_SUFFIX = ".compacting"
FORGOTTEN_SUFFIX = ".forgotten"


def shard_config(collection: str) -> Any:
    """A new shard's configuration (Qdrant Edge's ``EdgeConfig``). Every search is filtered by tenant (and mostly by
    user): the payload index narrows a search to those points and the engine scores them exactly, so no vector has
    an HNSW graph (``m=0``: nothing to build, nothing in memory). Vectors, sparse vectors, payloads and the id
    tracker stay on disk, memory-mapped (``Memory.Cold``): what stays in memory after open does not grow with the
    store."""
    qe = edge_engine()
    distance = {"cosine": qe.Distance.Cosine, "euclid": qe.Distance.Euclid}
    maxsim = qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim)
    no_graph = qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10_000)
    vectors = {
        name: qe.EdgeVectorParams(
            size=spec.size,
            distance=distance[spec.distance],
            memory=qe.Memory.Cold,
            hnsw_config=no_graph,
            multivector_config=maxsim if spec.multi else None,
        )
        for name, spec in VECTORS[collection].items()
    }
    return qe.EdgeConfig(
        vectors=vectors,
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf, memory=qe.Memory.Cold)},
        payload_memory=qe.Memory.Cold,
        id_tracker_memory=qe.Memory.Cold,
    )


def with_indexes(shard: Any, new: bool = False, move: bool = False) -> bool:
    """Give ``shard`` a payload index on each of ``INDEXED_FIELDS`` (those missing made now: a ``new`` shard, or
    one made before an index was added, which is logged); with ``move``, an index kept in memory (made by an
    earlier engram) is made again memory-mapped (seconds per 100 k points). True when an index was made."""
    qe = edge_engine()
    have = {} if new else shard.info().payload_schema
    made = False
    for field, schema in INDEXED_FIELDS.items():
        info = have.get(field)
        in_memory = info is not None and getattr(info.params, "memory", None) != qe.Memory.Cold
        if info is not None and not (move and in_memory):
            continue
        if info is not None:
            shard.update(qe.UpdateOperation.delete_field_index(field))
        shard.update(qe.UpdateOperation.create_field_index(field, index_params(field, schema)))
        made = True
        if not new:
            log.info(
                "payload index moved to disk" if info is not None else "payload index added to an existing shard",
                field=field,
            )
    return made


def copy_shard(old: Any, fresh: Path, collection: str, optimize_at: int) -> tuple[int, bool]:
    """Write the live points of the open shard ``old`` of ``collection`` (payloads and every vector, ids kept, in
    id order, 256 a page) into a new shard at ``fresh`` (one left there is replaced), made with the same
    configuration and payload indexes and optimized when it holds ``optimize_at`` points or more; the new shard is
    flushed and closed, ``old`` left open. Returns (points copied, whether it was optimized)."""
    qe = edge_engine()
    if fresh.exists():
        shutil.rmtree(fresh)
    new = qe.EdgeShard.create(str(fresh), shard_config(collection))
    with_indexes(new, new=True)
    offset = None
    while True:
        points, offset = old.scroll(qe.ScrollRequest(offset=offset, limit=256, with_payload=True, with_vector=True))
        if points:
            new.update(qe.UpdateOperation.upsert_points([qe.Point(p.id, p.vector, p.payload) for p in points]))
        if offset is None:
            break
    count = new.info().points_count
    optimized = count >= optimize_at
    if optimized:  # else it stays one appendable segment, as the store keeps a collection that small
        new.optimize()
    new.flush()
    new.close()
    return count, optimized


def swap_in(root: Path, collection: str) -> None:
    """Put the shard ``copy_shard`` wrote (``root/<collection>.compacting``, closed, as the old one) in the place of
    ``root/<collection>``: the old folder is renamed ``<collection>.forgotten``, the new one moved in, the old one
    removed. Interrupted, ``recover_compaction`` finishes it."""
    path, fresh = root / collection, root / f"{collection}{COMPACTING_SUFFIX}"
    trash = root / f"{collection}{FORGOTTEN_SUFFIX}"
    os.replace(path, trash)
    os.replace(fresh, path)
    shutil.rmtree(trash)


def recover_compaction(root: Path) -> list[str]:
    """Finish a compaction under ``root`` that was interrupted: a ``<collection>.forgotten`` folder whose collection
    folder is missing was swapped out before the new shard was moved in (the complete new shard is moved in, or,
    when it is not there, the old one back); one beside its collection is removed, as is a leftover
    ``.compacting`` one. Returns the collections touched."""
    touched = []
    for trash in root.glob(f"*{FORGOTTEN_SUFFIX}"):
        collection = trash.name[: -len(FORGOTTEN_SUFFIX)]
        path, fresh = root / collection, root / f"{collection}{COMPACTING_SUFFIX}"
        if not path.exists():
            os.replace(fresh if fresh.is_dir() else trash, path)
        if trash.exists():
            shutil.rmtree(trash)
        touched.append(collection)
    for fresh in root.glob(f"*{COMPACTING_SUFFIX}"):
        shutil.rmtree(fresh)
    return touched
