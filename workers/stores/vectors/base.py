"""``VectorStore``: the one interface over the two Qdrant backends (``edge.EdgeVectorStore``, the embedded default;
``client.ClientVectorStore``, a Qdrant server), with the request and error types they share. A backend
implements the ``_``-prefixed primitives; the public methods (batching, collections made on first use, the
dense search multivector completed) are written once here.
"""

from __future__ import annotations

import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

from engram.schemas.errors import StoreError
from engram.workers.stores import models as qm
from engram.workers.stores.vectors.schema import COLLECTIONS, DENSE, DENSE_SEARCH_MULTIVECTOR, SPARSE

PointId = uuid.UUID | str
Payload = bool | list[str]


class StoreBusy(StoreError, RuntimeError):
    """The embedded store is open in another process."""


@dataclass
class VectorQuery:
    """One ranking request: the points under ``filter`` nearest ``vector`` by the named vector ``using``.

    ``vector``: a dense query (list of floats), a multivector query (list of rows, for MaxSim) or a sparse one
    (``qm.SparseVector``). ``idf_corpus``: the points BM25's IDF is counted over (sparse only; None = the whole
    collection). ``with_payload``: True, False or the payload keys to return. ``score_threshold``: Qdrant's
    (below a similarity, above a Euclidean distance is left out)."""

    using: str
    vector: list[float] | list[list[float]] | qm.SparseVector
    filter: qm.Filter | None
    limit: int
    with_payload: Payload = True
    idf_corpus: qm.Filter | None = None
    score_threshold: float | None = None


def complete_points(points: list[qm.PointStruct], collection: str) -> list[qm.PointStruct]:
    """``points`` with the collection's dense search multivector (``DENSE_SEARCH_MULTIVECTOR``) set to their own
    ``DENSE`` vector where they have none (written by an older engram or a caller that knows no sentences): a
    point lacking the vector its dense search uses would never be found by it."""
    multi = DENSE_SEARCH_MULTIVECTOR.get(collection)
    if multi is not None:
        for p in points:
            if isinstance(p.vector, dict) and DENSE in p.vector and multi not in p.vector:
                p.vector[multi] = [p.vector[DENSE]]
    return points


def is_filter(obj: Any) -> bool:
    """Whether ``obj`` is a filter: the store's own (``models.Filter``) or qdrant-client's."""
    return type(obj).__name__ == "Filter"


class VectorStore(ABC):
    """The collections of one Qdrant (embedded or a server). Owned by one process; safe to share between its
    threads. Point ids are UUIDs (returned as strings); filters, points and results are qdrant-client models."""

    def __init__(self) -> None:
        self._ready: set[str] = set()
        self._lock = threading.RLock()

    def hold(self, wait: bool = True) -> None:  # noqa: B027 (a no-op unless the backend has a hold)
        """Take this process's exclusive hold on the store, where the backend has one (the embedded store's file
        lock; released by ``close``). A server backend has nothing to hold: no-op. Raises StoreBusy when another
        process keeps the hold past the backend's wait, or at once with ``wait=False`` (nothing asked of it)."""

    def wanted(self) -> bool:
        """Whether another process is waiting for this process's hold (``hold``), so a holder that is idle can
        close the store for it now (``workers.runtime.StoreLease``). A server backend: never."""
        return False

    # --- what a backend implements -------------------------------------------------------------------------
    @abstractmethod
    def _create(self, collection: str) -> None:
        """Make ``collection`` (its ``VECTORS``, sparse ``bm25`` and ``INDEXED_FIELDS``) when it does not exist."""

    @abstractmethod
    def _upsert(self, collection: str, points: list[qm.PointStruct]) -> None: ...

    @abstractmethod
    def _query(self, collection: str, queries: list[VectorQuery]) -> list[list[qm.ScoredPoint]]: ...

    @abstractmethod
    def _scroll_page(
        self,
        collection: str,
        flt: qm.Filter | None,
        limit: int,
        offset: Any,
        with_payload: Any,
        with_vectors: bool | list[str],
        order_by: str | None = None,
    ) -> tuple[list[qm.Record], Any]: ...

    @abstractmethod
    def _retrieve(
        self, collection: str, ids: list[str], with_payload: Payload, with_vectors: bool | list[str]
    ) -> list[qm.Record]: ...

    @abstractmethod
    def _set_payloads(self, collection: str, groups: list[tuple[dict[str, Any], list[str]]]) -> None:
        """Merge each group's payload into its point ids (one group per distinct payload)."""

    @abstractmethod
    def _delete(self, collection: str, selector: list[str] | qm.Filter) -> None: ...

    @abstractmethod
    def _count(self, collection: str, flt: qm.Filter | None) -> int: ...

    @abstractmethod
    def close(self) -> None:
        """Flush and release the store (the embedded store's lock)."""

    # --- the interface ---------------------------------------------------------------------------------------
    def ensure(self, collection: str) -> None:
        """Create ``collection`` with the engram vectors and payload indexes if it does not exist."""
        if collection in self._ready:
            return
        with self._lock:
            if collection not in self._ready:
                self._create(collection)
                self._ready.add(collection)

    def _readable(self, collection: str) -> bool:
        """Whether ``collection`` exists (opened now if it does). A read of a collection that does not exist finds
        nothing and makes nothing: a search does not create the shards of the memory types never written (each
        costs a cold search ~50 CPU ms to make and again to open)."""
        if collection in self._ready:
            return True
        if not self.has_collection(collection):
            return False
        self.ensure(collection)
        return True

    def upsert(self, collection: str, points: list[qm.PointStruct]) -> None:
        """Insert or replace points (ids are deterministic, so repeats overwrite)."""
        if points:
            self.ensure(collection)
            self._upsert(collection, complete_points(points, collection))

    def query(self, collection: str, queries: list[VectorQuery]) -> list[list[qm.ScoredPoint]]:
        """Each query's ranking (best first, at most its ``limit``), in one request (empty rankings from a collection
        that does not exist)."""
        if not queries:
            return []
        if not self._readable(collection):
            return [[] for _ in queries]
        return self._query(collection, queries)

    def search(
        self,
        collection: str,
        dense: list[float] | None,
        sparse: tuple[list[int], list[float]] | None,
        flt: qm.Filter,
        limit: int,
        idf_corpus: qm.Filter | None = None,
        with_payload: Payload = True,
    ) -> tuple[list[qm.ScoredPoint], list[qm.ScoredPoint]]:
        """Dense and sparse rankings of ``collection`` under ``flt`` (either may be skipped with None). A
        collection in ``DENSE_SEARCH_MULTIVECTOR`` (observations) is ranked dense by that multivector (MaxSim:
        the best cosine of a point's own vector and its sentences'), the others by ``DENSE``.

        ``idf_corpus`` limits the points BM25's IDF is counted over (e.g. one tenant and user): without it
        Qdrant counts the whole collection, so one tenant's scores would depend on another's content.
        ``with_payload``: the payload keys the caller ranks by (True: all of it).
        """
        queries, which = [], []
        if dense is not None:
            multi = DENSE_SEARCH_MULTIVECTOR.get(collection)
            queries.append(VectorQuery(multi or DENSE, [dense] if multi else dense, flt, limit, with_payload))
            which.append("dense")
        if sparse is not None and sparse[0]:
            queries.append(
                VectorQuery(
                    SPARSE,
                    qm.SparseVector(indices=list(sparse[0]), values=list(sparse[1])),
                    flt,
                    limit,
                    with_payload,
                    idf_corpus=idf_corpus,
                )
            )
            which.append("sparse")
        got = dict(zip(which, self.query(collection, queries), strict=True))
        return got.get("dense", []), got.get("sparse", [])

    def nearest(
        self,
        collection: str,
        using: str,
        vector: list[float],
        flt: qm.Filter,
        limit: int = 1,
        score_threshold: float | None = None,
    ) -> list[qm.ScoredPoint]:
        """The points whose named vector ``using`` is nearest ``vector`` under ``flt``, best first. ``score`` is
        Qdrant's: cosine similarity (higher is nearer) or Euclidean distance (lower is nearer); with
        ``score_threshold`` points beyond it (below a similarity, above a distance) are left out. Points
        without that vector are never returned."""
        return self.query(collection, [VectorQuery(using, vector, flt, limit, score_threshold=score_threshold)])[0]

    def nearest_batch(
        self, collection: str, using: str, vectors: Iterable[list[float]], flt: qm.Filter, limit: int
    ) -> list[list[qm.ScoredPoint]]:
        """``nearest`` for each of ``vectors``, in one request."""
        return self.query(collection, [VectorQuery(using, list(v), flt, limit) for v in vectors])

    def scroll(
        self,
        collection: str,
        flt: qm.Filter | None,
        with_vectors: bool | list[str] = False,
        batch: int = 1024,
        without: list[str] | None = None,
        with_payload: Payload = True,
    ) -> list[qm.Record]:
        """Every point matching ``flt``, in id order. ``with_payload``: True, False or the keys to return;
        ``without``: payload keys left out instead (less to copy when the caller does not read them)."""
        if not self._readable(collection):
            return []
        payload: Any = ("exclude", without) if without else with_payload
        out: list[qm.Record] = []
        offset = None
        while True:
            points, offset = self._scroll_page(collection, flt, batch, offset, payload, with_vectors)
            out.extend(points)
            if offset is None:
                return out

    def retrieve(
        self,
        collection: str,
        ids: Iterable[PointId],
        with_vectors: bool | list[str] = False,
        with_payload: Payload = True,
    ) -> list[qm.Record]:
        """Points by id (missing ids are left out)."""
        wanted = [str(i) for i in ids]
        if not wanted or not self._readable(collection):
            return []
        return self._retrieve(collection, wanted, with_payload, with_vectors)

    def set_payloads(self, collection: str, payloads: dict[str, dict[str, Any]]) -> None:
        """Merge a different payload into each point ({point id: payload}) in one batch request."""
        if payloads:
            self.ensure(collection)
            groups: dict[str, tuple[dict[str, Any], list[str]]] = {}
            for pid, p in payloads.items():  # one operation per distinct payload
                groups.setdefault(repr(sorted(p.items())), (p, []))[1].append(str(pid))
            self._set_payloads(collection, list(groups.values()))

    def set_payload(self, collection: str, ids: Iterable[PointId], payload: dict[str, Any]) -> None:
        """Merge ``payload`` into the given points."""
        self.set_payloads(collection, {str(i): payload for i in ids})

    def delete(self, collection: str, selector: list[PointId] | qm.Filter) -> None:
        """Delete the points with these ids, or every point matching a filter (nothing to do in a collection that
        does not exist)."""
        if not self._readable(collection):
            return
        points: list[str] | qm.Filter = (
            cast(qm.Filter, selector) if is_filter(selector) else [str(i) for i in cast("list[PointId]", selector)]
        )
        if points:
            self._delete(collection, points)

    def newest(
        self, collection: str, flt: qm.Filter, limit: int, key: str = "start_ts", with_payload: Payload = True
    ) -> list[qm.Record]:
        """The first ``limit`` points matching ``flt`` by descending payload ``key`` (points without it come
        last, in id order). Qdrant orders by an indexed payload field (``INDEXED_FIELDS``). ``with_payload``: True,
        or the payload keys to return (a day's timeline reads ~6x faster without the frames' OCR boxes)."""
        if not self._readable(collection):
            return []
        out, _ = self._scroll_page(collection, flt, limit, None, with_payload, False, order_by=key)
        if len(out) < limit:
            rest = qm.Filter(must=[*(flt.must or []), qm.IsEmptyCondition(is_empty=qm.PayloadField(key=key))])
            more, _ = self._scroll_page(collection, rest, limit - len(out), None, with_payload, False)
            out.extend(more)
        return out

    def count(self, collection: str, flt: qm.Filter | None = None) -> int:
        """Exact number of points matching ``flt`` (0 in a collection that does not exist)."""
        if not self._readable(collection):
            return 0
        return self._count(collection, flt)

    def compact(self, collections: Iterable[str]) -> dict[str, float]:  # noqa: B027 (a server compacts itself)
        """Leave no byte of a deleted or overwritten point in ``collections``' files (forgetting,
        ``workers.memory.forget``); seconds per collection rewritten. A server backend: nothing done here (the
        Qdrant server's own vacuum optimizer rewrites its segments; its write-ahead log is the server's)."""
        return {}

    def collections(self) -> list[str]:
        """The engram collections this store holds points in or has made."""
        return [c for c in COLLECTIONS if self.has_collection(c)]

    @abstractmethod
    def has_collection(self, collection: str) -> bool:
        """Whether ``collection`` exists (without making it)."""
