"""``EdgeVectorStore``, the embedded default: Qdrant's own engine in-process (Qdrant Edge, ``qdrant-edge-py``),
one shard per collection under ``ENGRAM_DATA_DIR/vectors/<collection>``, with payload indexes (``tenant_id``
as Qdrant's tenant index), a write-ahead log (a write acknowledged before a crash is there on reopen) and no
server.

An embedded store is opened by one process at a time (Qdrant Edge holds a lock on each shard's write-ahead log),
under a file lock ``data_dir/vectors.lock`` held from the first shard opened until ``close``: a second process
waits for it up to ``ENGRAM_STORE_WAIT_SECONDS``, then gets ``StoreBusy``; while it waits it keeps a request
beside the lock (``data_dir/vectors.wanted-<pid>``), which a long-running holder (``engram mcp``, ``capture``)
with nothing to do reads as "close the store now" (``EdgeVectorStore.wanted``, ``workers.runtime.StoreLease``).
A shard folder that exists but cannot be used raises ``StoreCorrupt`` in one line naming the shard and the damaged
file; nothing is silently made in its place, and nothing in the shard is written before it is found sound. Its
files are checked before the engine opens it (``workers.stores.integrity``): against the manifest (sizes and
BLAKE2b digests) its last clean close wrote into the folder, or, without one, by their own configured sizes, and
then every point is read back through the engine (``edge_checks.read_back``). An engine error reading a shard's
files later is a ``StoreCorrupt`` too.
"""

from __future__ import annotations

import functools
import json
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import structlog

from engram.schemas.errors import StoreCorrupt, StoreError
from engram.workers.stores.integrity import (
    Known,
    check_structure,
    drop_manifest,
    read_manifest,
    sparse_copy,
    verify_manifest,
    write_manifest,
)
from engram.workers.stores.vectors.base import StoreBusy, VectorStore, is_filter
from engram.workers.stores.vectors.edge_checks import corrupt, one_line, read_back, storage_failure
from engram.workers.stores.vectors.edge_shards import (
    COMPACTING_SUFFIX,
    copy_shard,
    recover_compaction,
    shard_config,
    swap_in,
    with_indexes,
)
from engram.workers.stores.vectors.edge_types import (
    edge_engine,
    edge_filter,
    edge_payload,
    edge_vector,
    ranked_points,
    stored_point,
)
from engram.workers.stores.vectors.locking import take_lock, waiting
from engram.workers.stores.vectors.schema import COLLECTIONS

log = structlog.get_logger(__name__)

#: The embedded store optimizes a collection (``EdgeVectorStore.optimize``) once this many points were written to
#: it since its last optimization: a few seconds of blocking per ~20 k points (measured: ~26 s per 100 k
#: observations), so the appendable segment, whose indexes stay in memory, never grows past this.
OPTIMIZE_AFTER_POINTS = 20_000
OPTIMIZED_FILE = "optimized.json"  # {collection: points after its last optimization}, in the store's folder
#: {collection: its points when a process last closed it without writing after} (``EdgeVectorStore.close``): a shard
#: that opens with fewer lost files (``EdgeVectorStore._check_count``); a write drops its entry until the next close.
CLOSED_FILE = "closed.json"

#: ``EdgeVectorStore._trial_open``'s scratch copy of a shard without a manifest, beside it.
TRIAL_SUFFIX = ".trial"


def _engine_errors(method: Callable) -> Callable:
    """``method(self, collection, ...)`` of the embedded store with the engine's storage failures (a file that
    cannot be read or decoded: Qdrant's "Service runtime error" / "Service internal error") raised as
    StoreCorrupt naming the shard, in one line; anything else (a bad request: a bug) as it was."""

    @functools.wraps(method)
    def call(self: EdgeVectorStore, collection: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, collection, *args, **kwargs)
        except StoreError:
            raise
        except Exception as exc:
            if not storage_failure(exc):
                raise
            raise corrupt(self.root / collection, f"cannot be read ({one_line(exc)})") from exc

    return call


class EdgeVectorStore(VectorStore):
    """``VectorStore`` on Qdrant Edge: one ``EdgeShard`` per collection under ``root/<collection>``, opened on
    first use once its files are found sound (``_open_checked``), created when its folder does not exist; at
    ``close`` each shard's manifest is written (``integrity.write_manifest``). Raises ``StoreBusy`` when another
    process holds a shard, ``StoreCorrupt`` (naming the shard and the file) when a shard's files are damaged."""

    def __init__(self, root: Path, wait: float = 0.0, optimize_after: int | None = OPTIMIZE_AFTER_POINTS) -> None:
        """``root``: the store's folder; ``wait``: seconds to wait for the store's file lock (``root`` + ``.lock``)
        while another process holds it, before ``StoreBusy``; ``optimize_after``: a collection is optimized
        (``optimize``) by the upsert that brings its points written since its last optimization to this many
        (None: only when ``optimize`` is called)."""
        from filelock import FileLock

        super().__init__()
        self.root = Path(root)
        self.wait = wait
        self.optimize_after = optimize_after
        self._shards: dict[str, Any] = {}
        self._pending: dict[str, int] = {}  # points written since the collection's last optimization
        self._written: set[str] = set()  # collections written by this process since their last flush
        self._changed: set[str] = set()  # collections written by this process since it opened them
        self._closed: dict[str, int] | None = None  # CLOSED_FILE as read under this process's lock
        self._known: dict[str, Known] = {}  # per collection: its files as found at open (integrity.verify_manifest)
        # one lock object for every thread of this process (released by close, from whichever thread)
        self._file_lock = FileLock(str(self.root) + ".lock", thread_local=False)

    def hold(self, wait: bool = True) -> None:
        """Take the store's file lock now (once; released by ``close``), e.g. before a unit of work that must not
        interleave with another process's. Raises StoreBusy after the store's ``wait`` seconds, or at once with
        ``wait=False``, which neither waits nor asks the holder to let go (a warm-up that may do without)."""
        take_lock(self._file_lock, self.root, self.wait if wait else None)

    def wanted(self) -> bool:
        """Whether another live process waits for the store's lock (``locking.waiting``: a ``<root>.wanted-<pid>``
        file, written by its ``hold``; one whose process is gone is removed and not counted)."""
        return waiting(self.root)

    def has_collection(self, collection: str) -> bool:
        return collection in self._shards or (self.root / collection).is_dir()

    def _shard(self, collection: str) -> Any:
        shard = self._shards.get(collection)
        if shard is None:
            self.ensure(collection)
            shard = self._shards[collection]
        return shard

    def _create(self, collection: str) -> None:
        qe = edge_engine()
        self.hold()
        path = self.root / collection
        if path.is_dir() and any(path.iterdir()):
            shard = self._open_checked(collection, path)
            changed = with_indexes(shard)
        else:
            path.mkdir(parents=True, exist_ok=True)
            drop_manifest(path)  # a new shard: nothing of an old one's record applies
            shard = qe.EdgeShard.create(str(path), shard_config(collection))
            changed = with_indexes(shard, new=True)
        self._shards[collection] = shard
        if changed:
            self._wrote(collection)

    def _open_checked(self, collection: str, path: Path) -> Any:
        """Open the existing shard of ``collection`` at ``path`` once its files are found sound, before the engine
        touches them (it rewrites some as it opens a shard): against the manifest of its last clean close
        (``integrity.verify_manifest``), or without one by what its files say of themselves
        (``integrity.check_structure``) and, once open, by the count of its last clean close and a read-back of
        every point. The manifest is dropped as the engine opens the shard (written again by ``close``).
        Raises StoreCorrupt naming the damaged file, StoreBusy when another process holds the shard."""
        recorded = read_manifest(path)
        self._known.pop(collection, None)
        if recorded is not None:
            self._known[collection] = verify_manifest(path, recorded)
        else:
            check_structure(path, self._closed_counts().get(collection))
            self._trial_open(collection, path)
        drop_manifest(path)
        shard = self._load(path)
        try:
            self._check_count(collection, shard)
        except StoreCorrupt:
            shard.close()
            raise
        return shard

    def _load(self, path: Path, copy_of: Path | None = None) -> Any:
        """The engine's handle on the shard at ``path`` (a scratch copy of ``copy_of``, named in errors instead).
        Raises StoreBusy when another process holds its write-ahead log, StoreCorrupt when the engine refuses it."""
        try:
            return edge_engine().EdgeShard.load(str(path))
        except Exception as exc:
            if "WouldBlock" in str(exc):  # the write-ahead log's lock, held by another process
                raise StoreBusy(
                    f"the embedded store {self.root} is open in another engram process; wait for it to finish, "
                    "or run a Qdrant server and set ENGRAM_QDRANT_URL"
                ) from exc
            raise corrupt(copy_of or path, f"cannot be opened ({one_line(exc)})") from exc

    def _trial_open(self, collection: str, path: Path) -> None:
        """Check a shard without a manifest (an older engram's, or one whose process was killed while it had the
        shard open) on a scratch copy beside it (``<collection>.trial``, holes kept: ``integrity.sparse_copy``):
        the engine opens the copy (replaying its write-ahead log, rewriting some files as it does), the count of
        the last clean close is compared and every point is read back (``read_back``), and the copy is removed.
        So the shard itself is written to only once it was found sound, whatever command opens it. Costs a copy
        of the shard's data (once: the next clean close writes a manifest). Raises StoreCorrupt naming the shard's
        damaged storage; StoreError when the copy cannot be made (e.g. a full disk)."""
        trial = self.root / f"{collection}{TRIAL_SUFFIX}"
        shutil.rmtree(trial, ignore_errors=True)  # a killed trial's
        try:
            sparse_copy(path, trial)
            shard = self._load(trial, copy_of=path)
            try:
                self._check_count(collection, shard)
                read_back(path, shard)
            finally:
                shard.close()
        finally:
            shutil.rmtree(trial, ignore_errors=True)

    def optimize(self, collections: Iterable[str] | None = None) -> dict[str, float]:
        """Run Qdrant's segment optimizers on ``collections`` (default: every one the store has), blocking
        (seconds per collection; returned per collection): the points written since the last run move from the
        appendable segment, whose indexes live in memory, into an immutable one whose files are memory-mapped;
        payload indexes an earlier engram kept in memory are made again memory-mapped (``INDEXED_FIELDS``).
        Run by the upsert that brings a collection's points written since its last optimization to
        ``optimize_after`` (``OPTIMIZE_AFTER_POINTS``; counted across processes in ``root/optimized.json``),
        and after an import (a migration); a search meanwhile waits. ~26 s for 100 k observations on 2 busy
        cores."""
        took: dict[str, float] = {}
        with self._lock:
            for collection in [c for c in (collections or COLLECTIONS) if self.has_collection(c)]:
                shard = self._shard(collection)
                t0 = time.perf_counter()
                with_indexes(shard, move=True)
                shard.optimize()
                shard.flush()
                took[collection] = time.perf_counter() - t0
                self._pending[collection] = 0
            if took:
                self._write_optimized({c: self._shards[c].info().points_count for c in took})
        log.info("store optimized", seconds={c: round(t, 2) for c, t in took.items()})
        return took

    def compact(self, collections: Iterable[str]) -> dict[str, float]:
        """Rewrite each of ``collections`` (those that exist) into a new shard through the engine's public API, so
        that no byte of a deleted or overwritten point is left in its files: Qdrant Edge keeps a deleted point's
        payload in its write-ahead log (``wal/open-*``) and, until a vacuum, in its segment's payload pages, and
        has no public call to truncate the log. The live points (payloads and every vector, ids kept) are copied
        in id order into ``root/<collection>.compacting``, made with the same configuration and payload indexes
        (optimized when it holds ``optimize_after`` points or more); then the old folder is renamed to
        ``<collection>.forgotten``, the new one into its place, and the old one removed (an interrupted swap: the
        next ``compact`` or ``recover_compaction`` finishes it).
        Blocking; seconds per collection returned (~1 s per few thousand points; a search meanwhile waits)."""
        took: dict[str, float] = {}
        with self._lock:
            self.recover_compaction()
            for collection in dict.fromkeys(c for c in collections if self.has_collection(c)):
                t0 = time.perf_counter()
                fresh = self.root / f"{collection}{COMPACTING_SUFFIX}"
                optimize_at = self.optimize_after or OPTIMIZE_AFTER_POINTS
                count, optimized = copy_shard(self._shard(collection), fresh, collection, optimize_at)
                self._shards.pop(collection).close()
                self._ready.discard(collection)
                swap_in(self.root, collection)
                self._pending[collection] = 0 if optimized else count
                self._write_optimized({collection: count if optimized else 0})
                self._wrote(collection)
                self.ensure(collection)
                took[collection] = time.perf_counter() - t0
        if took:
            log.info("store compacted", seconds={c: round(t, 2) for c, t in took.items()})
        return took

    def recover_compaction(self) -> list[str]:
        """Finish a ``compact`` that was interrupted: a ``<collection>.forgotten`` folder whose collection folder
        is missing was swapped out before the new shard was moved in (the complete new shard is moved in, or,
        when it is not there, the old one back); one beside its collection is removed, as is a leftover
        ``.compacting`` one. Returns the collections touched (``edge_shards.recover_compaction``)."""
        return recover_compaction(self.root)

    def indexed_fields(self, collection: str) -> set[str]:
        """The payload fields ``collection`` has an index on."""
        return set(self._shard(collection).info().payload_schema)

    def pending_points(self, collection: str) -> int:
        """Points written to ``collection`` since its last optimization (upserts of existing ids counted again;
        a store never optimized: all its points)."""
        with self._lock:
            if collection not in self._pending:
                optimized = self._read_optimized().get(collection, 0)
                self._pending[collection] = max(0, self._shard(collection).info().points_count - optimized)
            return self._pending[collection]

    def _wrote(self, collection: str) -> None:
        """Note a write to ``collection``: flushed at close, and its clean-close count dropped from ``CLOSED_FILE``
        now (a process killed after this write leaves no count to check against)."""
        self._written.add(collection)
        if collection not in self._changed:
            with self._lock:
                if collection not in self._changed:
                    self._changed.add(collection)
                    counts = self._closed_counts()
                    if counts.pop(collection, None) is not None:
                        self._write_json(CLOSED_FILE, counts)

    def _check_count(self, collection: str, shard: Any) -> None:
        """Raise StoreCorrupt when ``shard`` opens with fewer points than it had when a process last closed it
        without writing after (``CLOSED_FILE``): Qdrant's engine opens a shard that lost a segment folder or a
        segment's id tracker and answers with only what its write-ahead log still holds (12 of 7,157 points,
        seen), silently."""
        recorded = self._closed_counts().get(collection)
        if recorded is None:
            return
        have = shard.info().points_count
        if have < recorded:
            raise corrupt(
                self.root / collection,
                f"holds {have} points, {recorded - have} fewer than when it was "
                "last closed: a file of it is missing or damaged",
                f" (then delete {self.root / CLOSED_FILE}, which holds that count)",
            )

    def _closed_counts(self) -> dict[str, int]:
        """``CLOSED_FILE``'s counts, read once while this process holds the store (only it writes them)."""
        if self._closed is None:
            self._closed = self._read_json(CLOSED_FILE)
        return self._closed

    def _read_json(self, name: str) -> dict[str, int]:
        try:
            return json.loads((self.root / name).read_text())
        except (FileNotFoundError, ValueError):  # none yet, or a torn write: nothing to check against
            return {}

    def _write_json(self, name: str, counts: dict[str, int]) -> None:
        tmp = self.root / (name + ".tmp")
        tmp.write_text(json.dumps(counts))
        tmp.replace(self.root / name)

    def _read_optimized(self) -> dict[str, int]:
        """{collection: its points count after its last optimization}, from ``root/optimized.json`` (a torn write:
        every point counted as pending, one optimization too many at worst)."""
        return self._read_json(OPTIMIZED_FILE)

    def _write_optimized(self, counts: dict[str, int]) -> None:
        self._write_json(OPTIMIZED_FILE, {**self._read_optimized(), **counts})

    @_engine_errors
    def _upsert(self, collection, points):
        qe = edge_engine()
        if self.optimize_after:
            self.pending_points(collection)  # counted from the engine before this write, on first use
        self._wrote(collection)
        self._shard(collection).update(
            qe.UpdateOperation.upsert_points([qe.Point(str(p.id), edge_vector(p.vector), p.payload) for p in points])
        )
        if self.optimize_after:
            with self._lock:
                pending = self._pending[collection] = self._pending.get(collection, 0) + len(points)
            if pending >= self.optimize_after:
                self.optimize([collection])

    @_engine_errors
    def _query(self, collection, queries):
        qe = edge_engine()
        converted: dict[int, Any] = {}  # a filter shared by the queries (dense and sparse) is translated once

        def translated(flt: Any) -> Any:
            if id(flt) not in converted:
                converted[id(flt)] = edge_filter(flt)
            return converted[id(flt)]

        requests = [
            qe.QueryRequest(
                limit=q.limit,
                query=qe.Query.Nearest(edge_vector(q.vector), using=q.using),
                filter=translated(q.filter),
                with_payload=edge_payload(q.with_payload),
                with_vector=False,
                score_threshold=q.score_threshold,
                params=qe.SearchParams(idf=qe.IdfParams(corpus=translated(q.idf_corpus)))
                if q.idf_corpus is not None
                else None,
            )
            for q in queries
        ]
        shard = self._shard(collection)
        if len(requests) == 1:
            return [ranked_points(shard.query(requests[0]), queries[0].with_payload)]
        return [
            ranked_points(ranked, q.with_payload)
            for ranked, q in zip(shard.query_batch(qe.QueryBatchRequest(requests)), queries, strict=True)
        ]

    @_engine_errors
    def _scroll_page(self, collection, flt, limit, offset, with_payload, with_vectors, order_by=None):
        qe = edge_engine()
        order = qe.OrderBy(order_by, direction=qe.Direction.Desc) if order_by else None
        points, nxt = self._shard(collection).scroll(
            qe.ScrollRequest(
                offset=offset,
                limit=limit,
                filter=edge_filter(flt),
                with_payload=edge_payload(with_payload),
                with_vector=with_vectors,
                order_by=order,
            )
        )
        return [stored_point(p) for p in points], None if order else nxt

    @_engine_errors
    def _retrieve(self, collection, ids, with_payload, with_vectors):
        found = {str(p.id): p for p in self._shard(collection).retrieve(ids, edge_payload(with_payload), with_vectors)}
        return [stored_point(found[i]) for i in dict.fromkeys(ids) if i in found]

    @_engine_errors
    def _set_payloads(self, collection, groups):
        qe = edge_engine()
        shard = self._shard(collection)
        self._wrote(collection)
        for p, ids in groups:
            shard.update(qe.UpdateOperation.set_payload(ids, p))

    @_engine_errors
    def _delete(self, collection, selector):
        qe = edge_engine()
        op = (
            qe.UpdateOperation.delete_points_by_filter(edge_filter(selector))
            if is_filter(selector)
            else qe.UpdateOperation.delete_points(selector)
        )
        self._wrote(collection)
        self._shard(collection).update(op)

    @_engine_errors
    def _count(self, collection, flt):
        return self._shard(collection).count(edge_engine().CountRequest(exact=True, filter=edge_filter(flt)))

    def _write_manifest(self, collection: str) -> None:
        """Record the closed shard's files (``integrity.write_manifest``) for the next open to compare with; a
        failure to (a full disk) leaves none, and the next open checks the shard without one."""
        try:
            write_manifest(self.root / collection, self._known.get(collection))
        except OSError as exc:
            log.warning("shard manifest not written", shard=str(self.root / collection), error=str(exc)[:200])

    def flush(self) -> None:
        """Write the pending changes of the shards this process wrote to their segments (the write-ahead log
        already holds them). A shard only read is not flushed: a flush syncs every file of the shard to the disk
        (~1 s of a cold search's exit on a busy disk for shards it only read)."""
        with self._lock:
            dirty = self._written & set(self._shards)
            self._written -= dirty  # a write from another thread meanwhile stays to flush
            for collection in sorted(dirty):
                self._shards[collection].flush()

    def close(self) -> None:
        """Flush and close every shard this process opened, then release the store's lock. While the lock is
        still this process's (nobody else can have opened a shard meanwhile), the points of each shard go to
        ``CLOSED_FILE`` and, once the engine's handle on a shard is closed (it flushes as it closes and writes
        nothing after), the shard's manifest is written (``integrity.write_manifest``): both describe files no
        one writes until the next open. A lock lost before (released by another hand) writes neither: the next
        open checks the shards as after a crash."""
        with self._lock:
            held = self._file_lock.is_locked
            self.flush()
            if self._shards and held:
                counts = self._closed_counts()
                now = {c: shard.info().points_count for c, shard in self._shards.items()}
                if any(counts.get(c) != n for c, n in now.items()):  # a reader that changed nothing writes nothing
                    self._write_json(CLOSED_FILE, {**counts, **now})
            elif self._shards:
                log.warning(
                    "the embedded store's lock was released before its shards were closed; no manifest written",
                    store=str(self.root),
                )
            self._changed.clear()
            self._closed = None  # another process may write it once the lock is released
            for collection, shard in self._shards.items():
                shard.close()
                if held and self._file_lock.is_locked:
                    self._write_manifest(collection)
            self._shards.clear()
            self._known.clear()
            self._ready.clear()
            if self._file_lock.is_locked:
                self._file_lock.release(force=True)
