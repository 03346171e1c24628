"""The vector store: one ``VectorStore`` interface over two Qdrant backends.

- ``EdgeVectorStore``, the embedded default: Qdrant's own engine in-process (Qdrant Edge, ``qdrant-edge-py``),
  one shard per collection under ``ENGRAM_DATA_DIR/vectors/<collection>``, with payload indexes (``tenant_id``
  as Qdrant's tenant index), a write-ahead log (a write acknowledged before a crash is there on reopen) and no
  server.
- ``ClientVectorStore``: qdrant-client against a Qdrant server (``ENGRAM_QDRANT_URL``; the distributed mode at
  scale). qdrant-client's local mode (``QdrantClient(path=...)``, a pure-Python stand-in for a server whose
  search time grows linearly with the points) is used only as the server's stand-in in tests and to read stores
  written by engram before Qdrant Edge (``migrate_local_store``).

Both take the store's own point and filter types (``workers.stores.models``, with qdrant-client's names and
fields, so that the embedded default never imports qdrant-client: a cold ``engram search`` saves about a second),
or qdrant-client's models themselves, and return points with ``id``, ``payload``, ``vector`` and ``score``
(``models.StoredPoint``, or qdrant-client's ``Record`` / ``ScoredPoint`` from a server), so callers do not know
which backend runs; ``tests/workers/stores/test_vectors_contract.py`` holds them to the same ids, order and
scores.

Collections (shared by all tenants; ``tenant_id`` is in every payload and every filter): ``observations``,
the six memory types, and ``entities``. Each has a named dense vector ``text`` (384-d, cosine) and a named
sparse vector ``bm25`` (IDF modifier); ``entities`` also has ``face`` (128-d dlib face descriptor, Euclidean) and
``voice`` (256-d Resemblyzer d-vector, cosine), the centroids nearest-entity search runs on, and the samples they
are the means of as multivectors ``face_samples``/``voice_samples`` (a point may lack any of its named vectors);
``observations`` has ``sentences``, the multivector its dense search scores by MaxSim.

An embedded store is opened by one process at a time (Qdrant Edge holds a lock on each shard's write-ahead log),
under a file lock ``data_dir/vectors.lock`` held from the first shard opened until ``close``: a second process
waits for it up to ``ENGRAM_STORE_WAIT_SECONDS``, then gets ``StoreBusy``; while it waits it keeps a request
beside the lock (``data_dir/vectors.wanted-<pid>``), which a long-running holder (``engram mcp``, ``capture``)
with nothing to do reads as "close the store now" (``EdgeVectorStore.wanted``, ``workers.runtime.StoreLease``).
A shard folder that exists but cannot be used raises ``StoreCorrupt`` in one line naming the shard and the damaged
file; nothing is silently made in its place, and nothing in the shard is written before it is found sound. Its
files are checked before the engine opens it (``workers.stores.integrity``): against the manifest (sizes and
BLAKE2b digests) its last clean close wrote into the folder, or, without one, by their own configured sizes, and
then every point is read back through the engine. An engine error reading a shard's files later is a
``StoreCorrupt`` too.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from engram.schemas.errors import StoreCorrupt, StoreError
from engram.schemas.memories import MemoryType
from engram.schemas.settings import Settings
from engram.workers.stores import models as qm
from engram.workers.stores.integrity import (
    Known,
    check_structure,
    damaged,
    drop_manifest,
    read_manifest,
    sparse_copy,
    verify_manifest,
    write_manifest,
)
from engram.workers.stores.models import StoredPoint

log = structlog.get_logger(__name__)

DENSE = "text"
SPARSE = "bm25"
DIM = 384
FACE = "face"
VOICE = "voice"
FACE_SAMPLES = "face_samples"
VOICE_SAMPLES = "voice_samples"
SENTENCES = "sentences"  # an observation's contextual vector and its sentences' (``workers.embed``), MaxSim
OBSERVATIONS = "observations"
ENTITIES = "entities"

COLLECTIONS = (OBSERVATIONS, *[t.value for t in MemoryType if t is not MemoryType.observation], ENTITIES)


@dataclass(frozen=True)
class VectorSpec:
    """One named dense vector of a collection: ``size`` dimensions, ``distance`` ('cosine' or 'euclid'),
    ``multi``: a multivector scored by MaxSim, ``searched``: False for vectors only read back (no HNSW graph)."""

    size: int
    distance: str = "cosine"
    multi: bool = False
    searched: bool = True


#: Every collection's named dense vectors (besides these, one sparse vector ``bm25`` with the IDF modifier).
VECTORS: dict[str, dict[str, VectorSpec]] = {
    name: {DENSE: VectorSpec(DIM)} for name in COLLECTIONS
}
VECTORS[OBSERVATIONS][SENTENCES] = VectorSpec(DIM, multi=True)
VECTORS[ENTITIES].update({FACE: VectorSpec(128, "euclid"), VOICE: VectorSpec(256),
                          FACE_SAMPLES: VectorSpec(128, "euclid", multi=True, searched=False),
                          VOICE_SAMPLES: VectorSpec(256, multi=True, searched=False)})

#: Collections whose dense search scores a multivector by MaxSim instead of the single ``text`` vector: the
#: multivector's first row is the point's own ``text`` vector (an observation: its contextual vector, then its
#: sentences'). A point written without it gets ``[text]`` as its one row (``_complete``).
DENSE_SEARCH_MULTIVECTOR: dict[str, str] = {OBSERVATIONS: SENTENCES}

#: Payload indexes of every collection: what filters, tenancy and ``order_by`` (``newest``) use. ``tenant_id`` is
#: Qdrant's tenant index (points of one tenant stored together). ``superseded_by`` and ``archived``: every memory
#: search filters on them (``workers.memory.dynamics.active_filter``); without an index the engine read each
#: candidate memory's payload to check them (~4 ms of a search). A store made before an index was added gets it
#: when it is opened. The indexes are memory-mapped (``Memory.Cold``), not read into memory when a shard opens:
#: opening the observations of a 100 k store took 0.41 CPU s with them in memory (most of it building the
#: keyword maps and the numeric trees), 0.10 s memory-mapped, the warm search the same (14-15 ms p50 both, load
#: 5). Indexes made in memory by an earlier engram are moved to disk by ``EdgeVectorStore.optimize``.
INDEXED_FIELDS = {
    "tenant_id": "keyword",
    "user_id": "keyword",
    "device_id": "keyword",
    "kind": "keyword",
    "event_id": "keyword",
    "start_ts": "float",
    "end_ts": "float",
    "consolidated": "bool",
    "entity_ids": "keyword",
    "name_keys": "keyword",
    "superseded_by": "keyword",
    "archived": "bool",
}

#: Observation payload fields that only the observation itself needs (the chat context indexed with a turn, OCR
#: lines, ASR words, faces, voices): consolidation never reads them and leaves them out of its scroll
#: (``without=``), so less is copied out of the engine.
UNREAD_OBSERVATION_FIELDS = ["context_before", "context_after", "ocr_lines", "words", "faces", "speaker_voices",
                             "voice_embedding"]

#: The embedded store optimizes a collection (``EdgeVectorStore.optimize``) once this many points were written to
#: it since its last optimization: a few seconds of blocking per ~20 k points (measured: ~26 s per 100 k
#: observations), so the appendable segment, whose indexes stay in memory, never grows past this.
OPTIMIZE_AFTER_POINTS = 20_000
OPTIMIZED_FILE = "optimized.json"  # {collection: points after its last optimization}, in the store's folder
#: {collection: its points when a process last closed it without writing after} (``EdgeVectorStore.close``): a shard
#: that opens with fewer lost files (``EdgeVectorStore._check_count``); a write drops its entry until the next close.
CLOSED_FILE = "closed.json"

#: Beside the embedded store's lock (``<root>.lock``), a process waiting for it keeps ``<root>.wanted-<pid>``
#: (``EdgeVectorStore.hold``), which a holder with nothing to do reads as "close the store now" (``wanted``).
WANTED_SUFFIX = ".wanted-"
#: ``EdgeVectorStore.compact``'s folders beside a collection's: the new shard being written, the old one being removed.
COMPACTING_SUFFIX = ".compacting"
FORGOTTEN_SUFFIX = ".forgotten"
#: ``EdgeVectorStore._trial_open``'s scratch copy of a shard without a manifest, beside it.
TRIAL_SUFFIX = ".trial"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0: nothing is sent; one owned by another user exists too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


PointId = uuid.UUID | str
Payload = bool | list[str]


class StoreBusy(StoreError, RuntimeError):
    """The embedded store is open in another process."""


def collection_for(memory_type: MemoryType) -> str:
    """Qdrant collection name of a memory type (``observation`` lives in ``observations``)."""
    return OBSERVATIONS if memory_type is MemoryType.observation else memory_type.value


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


def _complete(points: list[qm.PointStruct], collection: str) -> list[qm.PointStruct]:
    """``points`` with the collection's dense search multivector (``DENSE_SEARCH_MULTIVECTOR``) set to their own
    ``DENSE`` vector where they have none (written by an older engram or a caller that knows no sentences): a
    point lacking the vector its dense search uses would never be found by it."""
    multi = DENSE_SEARCH_MULTIVECTOR.get(collection)
    if multi is not None:
        for p in points:
            if isinstance(p.vector, dict) and DENSE in p.vector and multi not in p.vector:
                p.vector[multi] = [p.vector[DENSE]]
    return points


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
    def _scroll_page(self, collection: str, flt: qm.Filter | None, limit: int, offset: Any, with_payload: Any,
                     with_vectors: bool | list[str], order_by: str | None = None
                     ) -> tuple[list[qm.Record], Any]: ...

    @abstractmethod
    def _retrieve(self, collection: str, ids: list[str], with_payload: Payload,
                  with_vectors: bool | list[str]) -> list[qm.Record]: ...

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
            self._upsert(collection, _complete(points, collection))

    def query(self, collection: str, queries: list[VectorQuery]) -> list[list[qm.ScoredPoint]]:
        """Each query's ranking (best first, at most its ``limit``), in one request (empty rankings from a collection
        that does not exist)."""
        if not queries:
            return []
        if not self._readable(collection):
            return [[] for _ in queries]
        return self._query(collection, queries)

    def search(self, collection: str, dense: list[float] | None, sparse: tuple[list[int], list[float]] | None,
               flt: qm.Filter, limit: int, idf_corpus: qm.Filter | None = None, with_payload: Payload = True,
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
            queries.append(VectorQuery(SPARSE, qm.SparseVector(indices=list(sparse[0]), values=list(sparse[1])),
                                       flt, limit, with_payload, idf_corpus=idf_corpus))
            which.append("sparse")
        got = dict(zip(which, self.query(collection, queries), strict=True))
        return got.get("dense", []), got.get("sparse", [])

    def nearest(self, collection: str, using: str, vector: list[float], flt: qm.Filter, limit: int = 1,
                score_threshold: float | None = None) -> list[qm.ScoredPoint]:
        """The points whose named vector ``using`` is nearest ``vector`` under ``flt``, best first. ``score`` is
        Qdrant's: cosine similarity (higher is nearer) or Euclidean distance (lower is nearer); with
        ``score_threshold`` points beyond it (below a similarity, above a distance) are left out. Points
        without that vector are never returned."""
        return self.query(collection, [VectorQuery(using, vector, flt, limit, score_threshold=score_threshold)])[0]

    def nearest_batch(self, collection: str, using: str, vectors: Iterable[list[float]], flt: qm.Filter,
                      limit: int) -> list[list[qm.ScoredPoint]]:
        """``nearest`` for each of ``vectors``, in one request."""
        return self.query(collection, [VectorQuery(using, list(v), flt, limit) for v in vectors])

    def scroll(self, collection: str, flt: qm.Filter | None, with_vectors: bool | list[str] = False,
               batch: int = 1024, without: list[str] | None = None, with_payload: Payload = True
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

    def retrieve(self, collection: str, ids: Iterable[PointId], with_vectors: bool | list[str] = False,
                 with_payload: Payload = True) -> list[qm.Record]:
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
        points = selector if _is_filter(selector) else [str(i) for i in selector]
        if points:
            self._delete(collection, points)

    def newest(self, collection: str, flt: qm.Filter, limit: int, key: str = "start_ts",
               with_payload: Payload = True) -> list[qm.Record]:
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


# --- qdrant-client: a Qdrant server (or its local mode, the server's stand-in in tests) --------------------------

def _client_models() -> Any:
    from qdrant_client import models  # the server backend's client: ~1 s to import, so only when it is used

    return models


def _is_filter(obj: Any) -> bool:
    """Whether ``obj`` is a filter: the store's own (``models.Filter``) or qdrant-client's."""
    return type(obj).__name__ == "Filter"


def to_client(obj: Any) -> Any:
    """The store's own types (``workers.stores.models``) as qdrant-client's models of the same names, recursively
    through lists and dicts; anything else (numbers, strings, qdrant-client's models) as it is."""
    if is_dataclass(obj) and not isinstance(obj, type):
        cls = getattr(_client_models(), type(obj).__name__)
        # a trailing underscore stands for a Python keyword (``MatchExcept.except_`` is ``except`` in qdrant-client)
        return cls(**{f.name.rstrip("_"): to_client(v) for f in fields(obj) if (v := getattr(obj, f.name)) is not None})
    if isinstance(obj, list):
        return obj if obj and isinstance(obj[0], (float, int)) else [to_client(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_client(v) for k, v in obj.items()}
    return obj


class StoreUnavailable(StoreError, ConnectionError):
    """The Qdrant server did not answer (a connection refused, reset or timed out): worth retrying."""


def _answering(method: Callable) -> Callable:
    """``method`` of the server backend with qdrant-client's connection failure (``ResponseHandlingException``)
    raised as ``StoreUnavailable``, a ``ConnectionError`` the stage tasks retry."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        from qdrant_client.http.exceptions import ResponseHandlingException  # loaded with the client already

        try:
            return method(*args, **kwargs)
        except ResponseHandlingException as exc:
            raise StoreUnavailable(f"the Qdrant server did not answer: {exc}") from exc

    return call


def _qm_vector_params(spec: VectorSpec) -> Any:
    qm = _client_models()
    distance = {"cosine": qm.Distance.COSINE, "euclid": qm.Distance.EUCLID}
    return qm.VectorParams(
        size=spec.size, distance=distance[spec.distance],
        multivector_config=qm.MultiVectorConfig(comparator=qm.MultiVectorComparator.MAX_SIM) if spec.multi else None,
        hnsw_config=None if spec.searched else qm.HnswConfigDiff(m=0))


class ClientVectorStore(VectorStore):
    """``VectorStore`` through qdrant-client: a Qdrant server, or qdrant-client's local mode (``local=True``; no
    payload indexes, which it does not use). Uses only qdrant-client's public API. The store's own types are
    translated to qdrant-client's (``to_client``); a server that does not answer raises ``StoreUnavailable``."""

    def __init__(self, client: Any, local: bool = False) -> None:
        """``client``: a ``qdrant_client.QdrantClient``."""
        super().__init__()
        self.client = client
        self.local = local

    def has_collection(self, collection: str) -> bool:
        return self.client.collection_exists(collection)

    @_answering
    def _create(self, collection: str) -> None:
        qm = _client_models()
        extra = {n: s for n, s in VECTORS[collection].items() if n != DENSE}
        kept: list[Any] = []
        if extra and self.client.collection_exists(collection):
            have = self.client.get_collection(collection).config.params.vectors or {}
            if not set(extra) <= set(have):  # made by an older engram: rebuild it with the new vectors
                kept = self._scroll_all(collection)
                self.client.delete_collection(collection)
        if not self.client.collection_exists(collection):
            try:
                self.client.create_collection(
                    collection, vectors_config={n: _qm_vector_params(s) for n, s in VECTORS[collection].items()},
                    sparse_vectors_config={SPARSE: qm.SparseVectorParams(modifier=qm.Modifier.IDF)})
            except Exception:
                if not self.client.collection_exists(collection):  # lost a creation race: fine
                    raise
        if not self.local:  # local mode scans; indexes only matter on a server (made, or added when missing)
            have = self.client.get_collection(collection).payload_schema or {}
            for field, schema in INDEXED_FIELDS.items():
                if field not in have:
                    self.client.create_payload_index(
                        collection, field, field_schema=qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD,
                                                                              is_tenant=True)
                        if field == "tenant_id" else {"keyword": qm.PayloadSchemaType.KEYWORD,
                                                      "float": qm.PayloadSchemaType.FLOAT,
                                                      "bool": qm.PayloadSchemaType.BOOL}[schema])
        if kept:
            self._upsert(collection, _complete([qm.PointStruct(id=r.id, vector=r.vector or {}, payload=r.payload)
                                                for r in kept], collection))

    def _scroll_all(self, collection: str) -> list[Any]:
        out, offset = [], None
        while True:
            page, offset = self.client.scroll(collection, limit=1024, offset=offset, with_payload=True,
                                              with_vectors=True)
            out.extend(page)
            if offset is None:
                return out

    @_answering
    def _upsert(self, collection: str, points: list[qm.PointStruct]) -> None:
        self.client.upsert(collection, points=to_client(points), wait=True)

    @_answering
    def _query(self, collection: str, queries: list[VectorQuery]) -> list[list[qm.ScoredPoint]]:
        qm = _client_models()
        requests = [qm.QueryRequest(
            query=to_client(q.vector), using=q.using, filter=to_client(q.filter), limit=q.limit,
            with_payload=q.with_payload, score_threshold=q.score_threshold,
            params=qm.SearchParams(idf=qm.IdfCorpusParams(corpus=to_client(q.idf_corpus)))
            if q.idf_corpus is not None else None) for q in queries]
        return [r.points for r in self.client.query_batch_points(collection, requests=requests)]

    @_answering
    def _scroll_page(self, collection, flt, limit, offset, with_payload, with_vectors, order_by=None):
        qm = _client_models()
        flt = to_client(flt)
        if isinstance(with_payload, tuple):
            with_payload = qm.PayloadSelectorExclude(exclude=with_payload[1])
        order = qm.OrderBy(key=order_by, direction=qm.Direction.DESC) if order_by else None
        points, nxt = self.client.scroll(collection, scroll_filter=flt, limit=limit, offset=offset,
                                         order_by=order, with_payload=with_payload, with_vectors=with_vectors)
        return points, None if order else nxt

    @_answering
    def _retrieve(self, collection, ids, with_payload, with_vectors):
        return self.client.retrieve(collection, ids=ids, with_payload=with_payload, with_vectors=with_vectors)

    @_answering
    def _set_payloads(self, collection, groups):
        qm = _client_models()
        self.client.batch_update_points(collection, update_operations=[
            qm.SetPayloadOperation(set_payload=qm.SetPayload(payload=p, points=ids)) for p, ids in groups], wait=True)

    @_answering
    def _delete(self, collection, selector):
        self.client.delete(collection, points_selector=to_client(selector), wait=True)

    @_answering
    def _count(self, collection, flt):
        return self.client.count(collection, count_filter=to_client(flt), exact=True).count

    def close(self) -> None:
        self.client.close()


# --- Qdrant Edge: the embedded default ---------------------------------------------------------------------------

def _edge():
    import qdrant_edge  # the embedded default's engine; imported when an embedded store is opened

    return qdrant_edge


def _listify(conds: Any) -> list:
    if conds is None:
        return []
    return list(conds) if isinstance(conds, list) else [conds]


def edge_filter(flt: qm.Filter | None) -> Any:
    """A ``Filter`` (the store's own or qdrant-client's, read by field names) as Qdrant Edge's (same semantics).
    Raises ValueError for a condition engram does not use (geo conditions)."""
    if flt is None:
        return None
    qe = _edge()
    min_should = None
    if flt.min_should is not None:
        min_should = qe.MinShould([_edge_condition(c) for c in flt.min_should.conditions], flt.min_should.min_count)
    return qe.Filter(must=[_edge_condition(c) for c in _listify(flt.must)] or None,
                     should=[_edge_condition(c) for c in _listify(flt.should)] or None,
                     must_not=[_edge_condition(c) for c in _listify(flt.must_not)] or None,
                     min_should=min_should)


def _edge_match(m: Any) -> Any:
    qe = _edge()
    kind = type(m).__name__
    if kind == "MatchValue":
        # qdrant-edge-py 0.9 reads a Python bool as the integer 1 or 0 (bool is an int), which never matches a
        # stored bool; numpy's bool is read as a bool
        return qe.MatchValue(np.bool_(m.value) if isinstance(m.value, bool) else m.value)
    if kind == "MatchAny":
        return qe.MatchAny(list(m.any))
    if kind == "MatchExcept":
        return qe.MatchExcept(list(m.except_))
    if kind == "MatchText":
        return qe.MatchText(m.text)
    raise ValueError(f"unsupported match in a filter: {m!r}")


def _edge_field_condition(cond: Any) -> Any:
    qe = _edge()
    kw: dict[str, Any] = {}
    if cond.match is not None:
        kw["match"] = _edge_match(cond.match)
    r = cond.range
    if type(r).__name__ == "DatetimeRange":  # qdrant-client's only
        kw["range"] = qe.RangeDateTime(**{k: (v.isoformat() if hasattr(v, "isoformat") else v)
                                          for k, v in r.model_dump(exclude_none=True).items()})
    elif r is not None:
        kw["range"] = qe.RangeFloat(gte=r.gte, gt=r.gt, lte=r.lte, lt=r.lt)
    if (vc := cond.values_count) is not None:
        kw["values_count"] = qe.ValuesCount(lt=vc.lt, gt=vc.gt, lte=vc.lte, gte=vc.gte)
    for flag in ("is_empty", "is_null"):  # qdrant-client's FieldCondition has these too
        if getattr(cond, flag, None) is not None:
            kw[flag] = getattr(cond, flag)
    if any(getattr(cond, geo, None) for geo in ("geo_bounding_box", "geo_radius", "geo_polygon")):
        raise ValueError("geo conditions are not used by engram")
    return qe.FieldCondition(cond.key, **kw)


def _edge_condition(cond: Any) -> Any:
    """One condition (the store's own type or qdrant-client's, told apart by class name only) as Qdrant Edge's."""
    qe = _edge()
    kind = type(cond).__name__
    if kind == "Filter":
        return edge_filter(cond)
    if kind == "FieldCondition":
        return _edge_field_condition(cond)
    if kind == "IsEmptyCondition":
        return qe.IsEmptyCondition(cond.is_empty.key)
    if kind == "IsNullCondition":
        return qe.IsNullCondition(cond.is_null.key)
    if kind == "HasIdCondition":
        return qe.HasIdCondition({str(i) for i in cond.has_id})
    if kind == "HasVectorCondition":
        return qe.HasVectorCondition(cond.has_vector)
    if kind == "NestedCondition":
        return qe.NestedCondition(cond.nested.key, edge_filter(cond.nested.filter))
    raise ValueError(f"unsupported filter condition: {cond!r}")


def _edge_vector(vector: Any) -> Any:
    if isinstance(vector, dict):
        return {name: _edge_vector(v) for name, v in vector.items()}
    if hasattr(vector, "indices"):  # a sparse vector (the store's own or qdrant-client's)
        return _edge().SparseVector(list(vector.indices), [float(x) for x in vector.values])
    if hasattr(vector, "tolist"):
        return vector.tolist()
    return vector


def _qm_vector(vector: Any) -> Any:
    if isinstance(vector, dict):
        return {name: _qm_vector(v) for name, v in vector.items()}
    if vector is not None and hasattr(vector, "indices"):
        return qm.SparseVector(indices=list(vector.indices), values=list(vector.values))
    return vector


def _edge_payload(with_payload: Any) -> Any:
    if isinstance(with_payload, tuple):  # ("exclude", keys)
        return _edge().PayloadSelector.Exclude(list(with_payload[1]))
    if isinstance(with_payload, list):
        return _edge().PayloadSelector.Include(with_payload)
    return bool(with_payload)


def _record(p: Any) -> StoredPoint:
    return StoredPoint(str(p.id), p.payload, _qm_vector(p.vector) if p.vector is not None else None)


def _index_params(field: str, schema: str) -> Any:
    """The payload index of ``field`` (``INDEXED_FIELDS``' kind ``schema``), memory-mapped; ``tenant_id`` is the
    tenant index."""
    qe = _edge()
    if schema == "keyword":
        return qe.KeywordIndexParams(is_tenant=True if field == "tenant_id" else None, memory=qe.Memory.Cold)
    if schema == "float":
        return qe.FloatIndexParams(memory=qe.Memory.Cold)
    return qe.BoolIndexParams(memory=qe.Memory.Cold)


def _corrupt(path: Path, what: str, after_restore: str = "") -> StoreCorrupt:
    """The error for a shard that cannot be used as it is: ``path`` and ``what`` is wrong, and what to do."""
    return damaged(path, what, after_restore)


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
            if not _storage_failure(exc):
                raise
            raise _corrupt(self.root / collection, f"cannot be read ({_one_line(exc)})") from exc

    return call


def _storage_failure(exc: BaseException) -> bool:
    """Whether the engine's error ``exc`` is a storage failure (its files), not a bad request."""
    text = str(exc)
    return type(exc) is Exception and (text.startswith(("Service runtime error", "Service internal error"))
                                       or "IO error" in text)


def _one_line(exc: BaseException, limit: int = 200) -> str:
    return " ".join(str(exc).split())[:limit]


def _with_indexes(shard: Any, new: bool = False, move: bool = False) -> bool:
    """Give ``shard`` a payload index on each of ``INDEXED_FIELDS`` (those missing made now: a ``new`` shard, or
    one made before an index was added, which is logged); with ``move``, an index kept in memory (made by an
    earlier engram) is made again memory-mapped (seconds per 100 k points). True when an index was made."""
    qe = _edge()
    have = {} if new else shard.info().payload_schema
    made = False
    for field, schema in INDEXED_FIELDS.items():
        info = have.get(field)
        in_memory = info is not None and getattr(info.params, "memory", None) != qe.Memory.Cold
        if info is not None and not (move and in_memory):
            continue
        if info is not None:
            shard.update(qe.UpdateOperation.delete_field_index(field))
        shard.update(qe.UpdateOperation.create_field_index(field, _index_params(field, schema)))
        made = True
        if not new:
            log.info("payload index moved to disk" if info is not None else "payload index added to an existing shard",
                     field=field)
    return made


def _ranked(points: list[Any], with_payload: Any) -> list[StoredPoint]:
    """Qdrant Edge's scored points (asked without vectors) as ``StoredPoint``: their payload read only when it was
    asked for (each attribute read copies out of the engine: a search reads ~500 candidates)."""
    if with_payload is False:
        return [StoredPoint(str(p.id), None, None, p.score) for p in points]
    return [StoredPoint(str(p.id), p.payload, None, p.score) for p in points]


#: A stored text vector (cosine: the engine keeps it normalized) shorter than this was damaged (zeros written over it).
_MIN_NORM = 0.5


def read_back(path: Path, shard: Any, page: int = 512) -> None:
    """Read every point of ``shard`` (at ``path``, opened without a manifest to check it by) back through the
    engine: its payload, and its ``DENSE`` vector, which must be of unit length (cosine: the engine stores it
    normalized). Raises StoreCorrupt naming the shard's payload or vector storage when a page cannot be read or
    decoded, or a vector was zeroed. About 2 s per 10 k observations on a busy machine (the multivectors are
    left out: 5 s more): only when the manifest is missing."""
    qe = _edge()
    offset = None
    while True:
        try:
            points, offset = shard.scroll(qe.ScrollRequest(offset=offset, limit=page, with_payload=True,
                                                           with_vector=[DENSE]))
        except Exception as exc:
            if not _storage_failure(exc):
                raise
            raise _corrupt(path, f"cannot be read back: {_segment_files(path, 'payload_storage')} or its "
                           f"vector storage is damaged ({_one_line(exc)})") from exc
        dense = [(p.id, p.vector[DENSE]) for p in points if p.vector and p.vector.get(DENSE)]
        if dense:
            norms = np.linalg.norm(np.asarray([v for _, v in dense], dtype=np.float32), axis=1)
            if float(norms.min()) < _MIN_NORM:
                pid = dense[int(norms.argmin())][0]
                raise _corrupt(path, f"has a damaged {_segment_files(path, f'vector_storage-{DENSE}')}: point "
                               f"{pid}'s vector was overwritten with zeros")
        if offset is None:
            return


def _segment_files(path: Path, storage: str) -> str:
    """The ``storage`` folder of the shard's segments, as a path (the shard's one segment) or a pattern."""
    segments = sorted(p for p in (path / "segments").glob("*") if p.is_dir())
    return str(segments[0] / storage) if len(segments) == 1 else f"{path / 'segments'}/*/{storage}"


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
        from filelock import Timeout

        if self._file_lock.is_locked:
            return
        self.root.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._file_lock.acquire(timeout=0)
            _close_before_filelock_at_exit()
            return
        except Timeout as exc:
            if not wait:
                raise StoreBusy(f"the embedded store {self.root} is open in another engram process") from exc
        # held by another process: say so (``wanted``), so a holder that is only lingering lets it go now
        request: Path | None = self._request_file(os.getpid())
        try:
            request.touch()
        except OSError as exc:  # a folder this process may not write: it waits without asking
            log.info("cannot ask the store's holder to let it go", path=str(request), error=str(exc)[:200])
            request = None
        try:
            self._file_lock.acquire(timeout=self.wait)
            _close_before_filelock_at_exit()
        except Timeout as exc:
            raise StoreBusy(f"the embedded store {self.root} is open in another engram process (waited "
                            f"{self.wait:g} s); wait for it to finish, or run a Qdrant server and set "
                            "ENGRAM_QDRANT_URL") from exc
        finally:
            if request is not None:
                request.unlink(missing_ok=True)

    def _request_file(self, pid: int) -> Path:
        """The file a process waiting for the store's lock keeps beside it: ``<root>.wanted-<pid>``."""
        return self.root.with_name(f"{self.root.name}{WANTED_SUFFIX}{pid}")

    def wanted(self) -> bool:
        """Whether another live process waits for the store's lock (a ``<root>.wanted-<pid>`` file, written by its
        ``hold``). A request whose process is gone (killed while it waited) is removed and not counted."""
        for request in self.root.parent.glob(f"{self.root.name}{WANTED_SUFFIX}*"):
            pid = request.name[len(self.root.name) + len(WANTED_SUFFIX):]
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            if _alive(int(pid)):
                return True
            request.unlink(missing_ok=True)
        return False

    def has_collection(self, collection: str) -> bool:
        return collection in self._shards or (self.root / collection).is_dir()

    def _shard(self, collection: str) -> Any:
        shard = self._shards.get(collection)
        if shard is None:
            self.ensure(collection)
            shard = self._shards[collection]
        return shard

    def _create(self, collection: str) -> None:
        qe = _edge()
        self.hold()
        path = self.root / collection
        if path.is_dir() and any(path.iterdir()):
            shard = self._open_checked(collection, path)
            changed = _with_indexes(shard)
        else:
            path.mkdir(parents=True, exist_ok=True)
            drop_manifest(path)  # a new shard: nothing of an old one's record applies
            shard = qe.EdgeShard.create(str(path), self._config(collection))
            changed = _with_indexes(shard, new=True)
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
            return _edge().EdgeShard.load(str(path))
        except Exception as exc:
            if "WouldBlock" in str(exc):  # the write-ahead log's lock, held by another process
                raise StoreBusy(
                    f"the embedded store {self.root} is open in another engram process; wait for it to finish, "
                    "or run a Qdrant server and set ENGRAM_QDRANT_URL") from exc
            raise _corrupt(copy_of or path, f"cannot be opened ({_one_line(exc)})") from exc

    def _trial_open(self, collection: str, path: Path) -> None:
        """Check a shard without a manifest (an older engram's, or one whose process was killed while it had the
        shard open) on a scratch copy beside it (``<collection>.trial``, holes kept: ``integrity.sparse_copy``):
        the engine opens the copy (replaying its write-ahead log, rewriting some files as it does), the count of
        the last clean close is compared and every point is read back (``read_back``), and the copy is removed.
        So the shard itself is written to only once it was found sound, whatever command opens it. Costs a copy
        of the shard's data (once: the next clean close writes a manifest). Raises StoreCorrupt naming the shard's
        damaged storage; OSError when the copy cannot be made (e.g. a full disk)."""
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

    @staticmethod
    def _config(collection: str) -> Any:
        """A new shard's configuration. Every search is filtered by tenant (and mostly by user): the payload
        index narrows a search to those points and the engine scores them exactly, so no vector has an HNSW graph
        (``m=0``: nothing to build, nothing in memory). Vectors, sparse vectors, payloads and the id tracker stay
        on disk, memory-mapped (``Memory.Cold``): what stays in memory after open does not grow with the store."""
        qe = _edge()
        distance = {"cosine": qe.Distance.Cosine, "euclid": qe.Distance.Euclid}
        maxsim = qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim)
        no_graph = qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10_000)
        vectors = {name: qe.EdgeVectorParams(size=spec.size, distance=distance[spec.distance],
                                             memory=qe.Memory.Cold, hnsw_config=no_graph,
                                             multivector_config=maxsim if spec.multi else None)
                   for name, spec in VECTORS[collection].items()}
        return qe.EdgeConfig(vectors=vectors, sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(
            modifier=qe.Modifier.Idf, memory=qe.Memory.Cold)}, payload_memory=qe.Memory.Cold,
            id_tracker_memory=qe.Memory.Cold)

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
                _with_indexes(shard, move=True)
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
        qe = _edge()
        took: dict[str, float] = {}
        with self._lock:
            self.recover_compaction()
            for collection in dict.fromkeys(c for c in collections if self.has_collection(c)):
                t0 = time.perf_counter()
                old = self._shard(collection)
                path, fresh = self.root / collection, self.root / f"{collection}{COMPACTING_SUFFIX}"
                if fresh.exists():
                    shutil.rmtree(fresh)
                new = qe.EdgeShard.create(str(fresh), self._config(collection))
                _with_indexes(new, new=True)
                offset = None
                while True:
                    points, offset = old.scroll(qe.ScrollRequest(offset=offset, limit=256, with_payload=True,
                                                                 with_vector=True))
                    if points:
                        new.update(qe.UpdateOperation.upsert_points(
                            [qe.Point(p.id, p.vector, p.payload) for p in points]))
                    if offset is None:
                        break
                count = new.info().points_count
                optimized = count >= (self.optimize_after or OPTIMIZE_AFTER_POINTS)
                if optimized:  # else it stays one appendable segment, as the store keeps a collection that small
                    new.optimize()
                new.flush()
                new.close()
                old.close()
                del self._shards[collection]
                self._ready.discard(collection)
                trash = self.root / f"{collection}{FORGOTTEN_SUFFIX}"
                os.replace(path, trash)
                os.replace(fresh, path)
                shutil.rmtree(trash)
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
        ``.compacting`` one. Returns the collections touched."""
        touched = []
        for trash in self.root.glob(f"*{FORGOTTEN_SUFFIX}"):
            collection = trash.name[:-len(FORGOTTEN_SUFFIX)]
            path, fresh = self.root / collection, self.root / f"{collection}{COMPACTING_SUFFIX}"
            if not path.exists():
                os.replace(fresh if fresh.is_dir() else trash, path)
            if trash.exists():
                shutil.rmtree(trash)
            touched.append(collection)
        for fresh in self.root.glob(f"*{COMPACTING_SUFFIX}"):
            shutil.rmtree(fresh)
        return touched

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
            raise _corrupt(self.root / collection, f"holds {have} points, {recorded - have} fewer than when it was "
                           "last closed: a file of it is missing or damaged",
                           f" (then delete {self.root / CLOSED_FILE}, which holds that count)")

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
        qe = _edge()
        if self.optimize_after:
            self.pending_points(collection)  # counted from the engine before this write, on first use
        self._wrote(collection)
        self._shard(collection).update(qe.UpdateOperation.upsert_points(
            [qe.Point(str(p.id), _edge_vector(p.vector), p.payload) for p in points]))
        if self.optimize_after:
            with self._lock:
                pending = self._pending[collection] = self._pending.get(collection, 0) + len(points)
            if pending >= self.optimize_after:
                self.optimize([collection])

    @_engine_errors
    def _query(self, collection, queries):
        qe = _edge()
        converted: dict[int, Any] = {}  # a filter shared by the queries (dense and sparse) is translated once

        def translated(flt: Any) -> Any:
            if id(flt) not in converted:
                converted[id(flt)] = edge_filter(flt)
            return converted[id(flt)]

        requests = [qe.QueryRequest(
            limit=q.limit, query=qe.Query.Nearest(_edge_vector(q.vector), using=q.using),
            filter=translated(q.filter), with_payload=_edge_payload(q.with_payload), with_vector=False,
            score_threshold=q.score_threshold,
            params=qe.SearchParams(idf=qe.IdfParams(corpus=translated(q.idf_corpus)))
            if q.idf_corpus is not None else None) for q in queries]
        shard = self._shard(collection)
        if len(requests) == 1:
            return [_ranked(shard.query(requests[0]), queries[0].with_payload)]
        return [_ranked(ranked, q.with_payload)
                for ranked, q in zip(shard.query_batch(qe.QueryBatchRequest(requests)), queries, strict=True)]

    @_engine_errors
    def _scroll_page(self, collection, flt, limit, offset, with_payload, with_vectors, order_by=None):
        qe = _edge()
        order = qe.OrderBy(order_by, direction=qe.Direction.Desc) if order_by else None
        points, nxt = self._shard(collection).scroll(qe.ScrollRequest(
            offset=offset, limit=limit, filter=edge_filter(flt), with_payload=_edge_payload(with_payload),
            with_vector=with_vectors, order_by=order))
        return [_record(p) for p in points], None if order else nxt

    @_engine_errors
    def _retrieve(self, collection, ids, with_payload, with_vectors):
        found = {str(p.id): p for p in self._shard(collection).retrieve(ids, _edge_payload(with_payload),
                                                                         with_vectors)}
        return [_record(found[i]) for i in dict.fromkeys(ids) if i in found]

    @_engine_errors
    def _set_payloads(self, collection, groups):
        qe = _edge()
        shard = self._shard(collection)
        self._wrote(collection)
        for p, ids in groups:
            shard.update(qe.UpdateOperation.set_payload(ids, p))

    @_engine_errors
    def _delete(self, collection, selector):
        qe = _edge()
        op = (qe.UpdateOperation.delete_points_by_filter(edge_filter(selector)) if _is_filter(selector)
              else qe.UpdateOperation.delete_points(selector))
        self._wrote(collection)
        self._shard(collection).update(op)

    @_engine_errors
    def _count(self, collection, flt):
        return self._shard(collection).count(_edge().CountRequest(exact=True, filter=edge_filter(flt)))

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
                log.warning("the embedded store's lock was released before its shards were closed; no manifest "
                            "written", store=str(self.root))
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


# --- opening ---------------------------------------------------------------------------------------------------

_stores: dict[str, VectorStore] = {}
_stores_lock = threading.Lock()


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
    with _stores_lock:
        store = _stores.get(where)
        if store is None:
            if settings.qdrant_url:
                from qdrant_client import QdrantClient  # the server's client: ~1 s to import, only when used

                store = ClientVectorStore(QdrantClient(url=settings.qdrant_url, api_key=settings.qdrant_api_key,
                                                       timeout=60))
            else:
                if legacy_store_dir(settings).is_dir():
                    migrate_local_store(settings, progress)
                store = EdgeVectorStore(embedded_store_dir(settings), wait=settings.store_wait_seconds)
            _stores[where] = store
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
            done, offset, ids = 0, None, set()
            while True:
                page, offset = old.scroll(collection, limit=512, offset=offset, with_payload=True, with_vectors=True)
                points = [qm.PointStruct(id=str(r.id), vector=r.vector or {}, payload=r.payload) for r in page]
                new.upsert(collection, points)
                ids.update(str(r.id) for r in page)
                done += len(page)
                if progress:
                    progress(collection, done, total)
                if offset is None:
                    break
            stored = {str(r.id) for r in new.scroll(collection, None, with_payload=False)}
            if stored != ids:
                raise RuntimeError(f"migrating {collection}: {len(ids)} points read from {old_dir}, "
                                   f"{len(stored & ids)} found in {embedded_store_dir(settings)}; old store kept")
            copied[collection] = len(ids)
        new.optimize()  # an import: its points into immutable, memory-mapped segments
        new.close()
    finally:
        old.close()
    shutil.rmtree(old_dir)
    return copied


@atexit.register
def close_vector_stores() -> None:
    """Close every store this process opened (flushes the embedded store and releases its lock)."""
    with _stores_lock:
        for store in _stores.values():
            store.close()
        _stores.clear()


_exit_order_set = False


def _close_before_filelock_at_exit() -> None:
    """Make ``close_vector_stores`` run at exit before filelock's own exit handler, which releases the locks the
    process still holds (filelock 4, when only the main thread is left). Exit handlers run last registered
    first, and filelock registers its handler when it is first imported, after this module registered
    ``close_vector_stores``: a process ending with the store open released the store's lock first, and another
    process opened a shard while this one still flushed and closed it and wrote ``CLOSED_FILE`` (seen with two
    ``engram ingest`` sharing a data dir). Called once the lock is taken (filelock is imported by then)."""
    global _exit_order_set
    if not _exit_order_set:
        atexit.unregister(close_vector_stores)
        atexit.register(close_vector_stores)
        _exit_order_set = True


def tenant_filter(tenant_id: str, user_id: str | None = None, **must: Any) -> qm.Filter:
    """A filter on tenant (always), user (when given) and exact payload values."""
    conds: list[qm.Condition] = [qm.FieldCondition(key="tenant_id", match=qm.MatchValue(value=tenant_id))]
    if user_id is not None:
        conds.append(qm.FieldCondition(key="user_id", match=qm.MatchValue(value=user_id)))
    for key, value in must.items():
        conds.append(qm.FieldCondition(key=key, match=qm.MatchValue(value=value)))
    return qm.Filter(must=conds)
