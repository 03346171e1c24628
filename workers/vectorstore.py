"""The vector store: Qdrant through qdrant-client, local mode under ``ENGRAM_DATA_DIR/qdrant`` by default or a
server at ``ENGRAM_QDRANT_URL``.

Collections (shared by all tenants; ``tenant_id`` is in every payload and every filter): ``observations``,
the six memory types, and ``entities``. Each has a named dense vector ``text`` (384-d, cosine) and a named
sparse vector ``bm25`` (IDF modifier); ``entities`` also has ``face`` (128-d dlib face descriptor, Euclidean) and
``voice`` (256-d Resemblyzer d-vector, cosine), the centroids nearest-entity search runs on, and the samples they
are the means of as multivectors ``face_samples``/``voice_samples`` (a point may lack any of its named vectors).
Collections are created on first use; an ``entities`` collection made before it had these vectors is rebuilt
with them, its points copied (Qdrant cannot add a named vector in place).

Qdrant's local mode lets one process open a folder. This module keeps one client per process (locked);
a second process gets ``StoreBusy`` with a clear message.
"""

from __future__ import annotations

import atexit
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from schemas.memories import MemoryType
from schemas.settings import Settings

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

_MAX_SIM = qm.MultiVectorConfig(comparator=qm.MultiVectorComparator.MAX_SIM)
_SAMPLES = dict(multivector_config=_MAX_SIM,
                hnsw_config=qm.HnswConfigDiff(m=0))  # kept, not searched: no graph to build

#: Named dense vectors a collection has besides ``text``: an entity's face and voice centroids (searched) and
#: its samples (multivectors, read back to recompute the centroids); an observation's sentence multivector
#: (what its dense search scores, by MaxSim).
EXTRA_VECTORS: dict[str, dict[str, qm.VectorParams]] = {
    OBSERVATIONS: {SENTENCES: qm.VectorParams(size=DIM, distance=qm.Distance.COSINE, multivector_config=_MAX_SIM)},
    ENTITIES: {FACE: qm.VectorParams(size=128, distance=qm.Distance.EUCLID),
               VOICE: qm.VectorParams(size=256, distance=qm.Distance.COSINE),
               FACE_SAMPLES: qm.VectorParams(size=128, distance=qm.Distance.EUCLID, **_SAMPLES),
               VOICE_SAMPLES: qm.VectorParams(size=256, distance=qm.Distance.COSINE, **_SAMPLES)},
}

#: Collections whose dense search scores a multivector by MaxSim instead of the single ``text`` vector: the
#: multivector's first row is the point's own ``text`` vector (an observation: its contextual vector, then its
#: sentences'). A point written without it gets ``[text]`` as its one row (``_complete``).
DENSE_SEARCH_MULTIVECTOR: dict[str, str] = {OBSERVATIONS: SENTENCES}

_INDEXED_FIELDS = {
    "tenant_id": qm.PayloadSchemaType.KEYWORD,
    "user_id": qm.PayloadSchemaType.KEYWORD,
    "device_id": qm.PayloadSchemaType.KEYWORD,
    "kind": qm.PayloadSchemaType.KEYWORD,
    "event_id": qm.PayloadSchemaType.KEYWORD,
    "start_ts": qm.PayloadSchemaType.FLOAT,
    "end_ts": qm.PayloadSchemaType.FLOAT,
    "consolidated": qm.PayloadSchemaType.BOOL,
    "entity_ids": qm.PayloadSchemaType.KEYWORD,
    "name_keys": qm.PayloadSchemaType.KEYWORD,
}


class StoreBusy(RuntimeError):
    """The embedded (local-mode) store is open in another process."""


def collection_for(memory_type: MemoryType) -> str:
    """Qdrant collection name of a memory type (``observation`` lives in ``observations``)."""
    return OBSERVATIONS if memory_type is MemoryType.observation else memory_type.value


class _DeferredCommits:
    """Stands in for a local-mode collection's SQLite connection while one request writes many points: it runs
    every statement on the connection, but its ``with`` block does not commit (``VectorStore._one_commit``
    commits once at the end). Anything else is the connection's."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def __enter__(self) -> Any:
        return self._conn

    def __exit__(self, *exc: object) -> bool:
        return False  # a failed statement changed nothing (SQLite statements are atomic); the error propagates

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


#: Observation payload fields that only the observation itself needs (the chat context indexed with a turn, OCR
#: lines, ASR words, faces, voices): consolidation never reads them, and leaves them out of its scroll
#: (``without=``), so local mode, which copies every payload it returns, copies less.
UNREAD_OBSERVATION_FIELDS = ["context_before", "context_after", "ocr_lines", "words", "faces", "speaker_voices",
                             "voice_embedding"]

#: Local mode reads a scroll in pages this large: qdrant-client's local mode evaluates the filter over the whole
#: collection for every page, so one page instead of many is the same points in the same order, in less time.
LOCAL_SCROLL_PAGE = 1_000_000


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


class VectorStore:
    """Thin typed wrapper over one QdrantClient. Owned by one process; safe to share between its threads."""

    def __init__(self, client: QdrantClient, local: bool = False) -> None:
        self.client = client
        self.local = local
        self._ready: set[str] = set()
        self._lock = threading.Lock()

    def ensure(self, collection: str) -> None:
        """Create ``collection`` with the engram vectors and payload indexes if it does not exist."""
        if collection in self._ready:
            return
        with self._lock:
            if collection in self._ready:
                return
            extra = EXTRA_VECTORS.get(collection, {})
            kept: list[qm.Record] = []
            if extra and self.client.collection_exists(collection):
                have = self.client.get_collection(collection).config.params.vectors or {}
                if not set(extra) <= set(have):  # made by an older engram: rebuild it with the new vectors
                    kept = self._scroll(collection, None, with_vectors=True)
                    self.client.delete_collection(collection)
            if not self.client.collection_exists(collection):
                try:
                    self.client.create_collection(
                        collection,
                        vectors_config={DENSE: qm.VectorParams(size=DIM, distance=qm.Distance.COSINE), **extra},
                        sparse_vectors_config={SPARSE: qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
                    )
                except Exception:
                    if not self.client.collection_exists(collection):  # lost a creation race: fine
                        raise
                if not self.local:  # local mode scans; indexes only matter on a server
                    for field, schema in _INDEXED_FIELDS.items():
                        self.client.create_payload_index(collection, field, field_schema=schema)
            self._local_write_ahead_log(collection)
            if kept:
                self.client.upsert(collection, points=_complete([qm.PointStruct(id=r.id, vector=r.vector or {},
                                                                                payload=r.payload) for r in kept],
                                                                collection), wait=True)
            self._ready.add(collection)

    def _local_write_ahead_log(self, collection: str) -> None:
        """Local mode only: put the collection's SQLite file in write-ahead-log mode with ``synchronous=NORMAL``.

        qdrant-client's local mode commits every point it writes on its own (an upsert of n points, or a payload
        set on n points, is n commits); in SQLite's default rollback-journal mode each commit waits for fsync
        (~10-15 ms here), which made storing and consolidating a conversation spend most of its time waiting on
        the disk. In WAL mode with ``synchronous=NORMAL`` a commit is an append to the log, synced at checkpoints
        (SQLite's recommended setting for WAL, https://www.sqlite.org/pragma.html#pragma_synchronous): a crash of
        the process loses nothing committed and the file stays consistent; a power or OS failure may lose the
        last commits (never corrupt the file). Does nothing on a server or
        when the client's internals differ (then writes are just slower)."""
        conn = getattr(getattr(self._local_collection(collection), "storage", None), "storage", None)
        if conn is None:
            return
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")

    def _local_collection(self, collection: str) -> Any:
        """Local mode: qdrant-client's ``LocalCollection`` of ``collection`` (None on a server or when the
        client's internals differ)."""
        if not self.local:
            return None
        return getattr(getattr(self.client, "_client", None), "collections", {}).get(collection)

    def _persistence(self, collection: str) -> Any:
        """Local mode: qdrant-client's ``CollectionPersistence`` of ``collection`` (None on a server, for an
        in-memory collection, or when the client's internals differ)."""
        persistence = getattr(self._local_collection(collection), "storage", None)
        return persistence if hasattr(persistence, "storage") else None

    def _local_max_sim(self, collection: str, name: str, dense: list[float], flt: qm.Filter,
                       limit: int) -> list[qm.ScoredPoint] | None:
        """Local mode: the points of ``collection`` under ``flt`` ranked by MaxSim of the query ``dense`` (one
        384-d row) against their multivector ``name`` (the best cosine of its rows), best first, at most ``limit``,
        with payloads; what ``query_points(query=[dense], using=name)`` returns, in one matrix product over the
        filtered points' rows instead of qdrant-client's Python loop over every point of the collection (which
        cost a search over 6,000 chat turns ~0.2 s; this ~0.03 s). Ties may come in another order. None on a server
        or when the client's internals differ (the caller then asks the client)."""
        coll = self._local_collection(collection)
        try:
            mask = coll._payload_and_non_deleted_mask(flt, vector_name=name)
            ids_inv = coll.ids_inv
            idx = np.flatnonzero(mask[:len(ids_inv)])
            rows = [coll.multivectors[name][i] for i in idx]  # unit rows: the client normalises cosine on write
        except (AttributeError, KeyError, TypeError, IndexError):
            return None
        if not rows or limit <= 0:
            return []
        starts = np.cumsum([0] + [len(m) for m in rows[:-1]])
        query = np.asarray(dense, dtype=np.float32)
        query /= max(float(np.linalg.norm(query)), 1e-12)
        best = np.maximum.reduceat(np.concatenate(rows) @ query, starts)
        top = np.argsort(-best, kind="stable")[:limit]
        ids = [ids_inv[idx[t]] for t in top]
        payloads = {str(r.id): r.payload for r in self.client.retrieve(collection, ids, with_payload=True)}
        return [qm.ScoredPoint(id=pid, version=0, score=float(best[t]), payload=payloads.get(str(pid)))
                for pid, t in zip(ids, top, strict=True)]

    @contextmanager
    def _one_commit(self, collection: str) -> Iterator[None]:
        """Local mode: the writes of one request to ``collection`` are committed to its SQLite file together,
        once at the end, instead of once per point (qdrant-client's local mode commits each point it writes,
        and an upsert or a payload update of a conversation's ~500 points spent more time committing than
        writing). What is stored is the same; statements that ran before an error are committed too, as they
        were one by one. Elsewhere it does nothing."""
        persistence = self._persistence(collection)
        if persistence is None or isinstance(persistence.storage, _DeferredCommits):
            yield
            return
        conn = persistence.storage
        persistence.storage = _DeferredCommits(conn)
        try:
            yield
        finally:
            persistence.storage = conn
            conn.commit()

    def upsert(self, collection: str, points: list[qm.PointStruct]) -> None:
        """Insert or replace points (ids are deterministic, so repeats overwrite)."""
        if not points:
            return
        self.ensure(collection)
        with self._one_commit(collection):
            self.client.upsert(collection, points=_complete(points, collection), wait=True)

    def search(self, collection: str, dense: list[float] | None, sparse: tuple[list[int], list[float]] | None,
               flt: qm.Filter, limit: int, idf_corpus: qm.Filter | None = None
               ) -> tuple[list[qm.ScoredPoint], list[qm.ScoredPoint]]:
        """Dense and sparse rankings of ``collection`` under ``flt`` (either may be skipped with None). A
        collection in ``DENSE_SEARCH_MULTIVECTOR`` (observations) is ranked dense by that multivector (MaxSim:
        the best cosine of a point's own vector and its sentences'), the others by ``DENSE``.

        ``idf_corpus`` limits the points BM25's IDF is counted over (e.g. one tenant and user): without it
        Qdrant counts the whole collection, so one tenant's scores would depend on another's content.
        """
        self.ensure(collection)
        requests, which = [], []
        got: dict[str, list[qm.ScoredPoint]] = {}
        multi = DENSE_SEARCH_MULTIVECTOR.get(collection)
        if dense is not None and multi is not None and self.local:
            if (found := self._local_max_sim(collection, multi, dense, flt, limit)) is not None:
                got["dense"] = found
        if dense is not None and "dense" not in got:
            query, using = ([dense], multi) if multi is not None else (dense, DENSE)
            requests.append(qm.QueryRequest(query=query, using=using, filter=flt, limit=limit, with_payload=True))
            which.append("dense")
        if sparse is not None and sparse[0]:
            requests.append(qm.QueryRequest(query=qm.SparseVector(indices=sparse[0], values=sparse[1]),
                                            using=SPARSE, filter=flt, limit=limit, with_payload=True,
                                            params=qm.SearchParams(idf=qm.IdfCorpusParams(corpus=idf_corpus))
                                            if idf_corpus is not None else None))
            which.append("sparse")
        results = self.client.query_batch_points(collection, requests=requests) if requests else []
        got.update({w: r.points for w, r in zip(which, results, strict=True)})
        return got.get("dense", []), got.get("sparse", [])

    def scroll(self, collection: str, flt: qm.Filter, with_vectors: bool | list[str] = False,
               batch: int = 256, without: list[str] | None = None) -> list[qm.Record]:
        """Every point matching ``flt``; ``without``: payload keys left out of the records (less to copy
        and send when the caller does not read them)."""
        self.ensure(collection)
        return self._scroll(collection, flt, with_vectors, batch, without)

    def _scroll(self, collection: str, flt: qm.Filter | None, with_vectors: bool | list[str] = False,
                batch: int = 256, without: list[str] | None = None) -> list[qm.Record]:
        out: list[qm.Record] = []
        offset = None
        if self.local:
            batch = max(batch, LOCAL_SCROLL_PAGE)
        payload: bool | qm.PayloadSelectorExclude = qm.PayloadSelectorExclude(exclude=without) if without else True
        while True:
            points, offset = self.client.scroll(collection, scroll_filter=flt, limit=batch, offset=offset,
                                                with_payload=payload, with_vectors=with_vectors)
            out.extend(points)
            if offset is None:
                return out

    def nearest(self, collection: str, using: str, vector: list[float], flt: qm.Filter, limit: int = 1,
                score_threshold: float | None = None) -> list[qm.ScoredPoint]:
        """The points whose named vector ``using`` is nearest ``vector`` under ``flt``, best first. ``score`` is
        Qdrant's: cosine similarity (higher is nearer) or Euclidean distance (lower is nearer); with
        ``score_threshold`` points beyond it (below a similarity, above a distance) are left out. Points
        without that vector are never returned."""
        self.ensure(collection)
        return self.client.query_points(collection, query=vector, using=using, query_filter=flt, limit=limit,
                                        score_threshold=score_threshold, with_payload=True).points

    def retrieve(self, collection: str, ids: list[uuid.UUID | str], with_vectors: bool = False) -> list[qm.Record]:
        """Points by id (missing ids are left out)."""
        self.ensure(collection)
        return self.client.retrieve(collection, ids=[str(i) for i in ids], with_payload=True,
                                    with_vectors=with_vectors)

    def set_payloads(self, collection: str, payloads: dict[str, dict[str, Any]]) -> None:
        """Merge a different payload into each point ({point id: payload}) in one batch request."""
        if payloads:
            self.ensure(collection)
            with self._one_commit(collection):
                self.client.batch_update_points(collection, update_operations=[
                    qm.SetPayloadOperation(set_payload=qm.SetPayload(payload=p, points=[str(pid)]))
                    for pid, p in payloads.items()], wait=True)

    def set_payload(self, collection: str, ids: list[uuid.UUID | str], payload: dict[str, Any]) -> None:
        """Merge ``payload`` into the given points."""
        if ids:
            self.ensure(collection)
            with self._one_commit(collection):
                self.client.set_payload(collection, payload=payload, points=[str(i) for i in ids], wait=True)

    def delete(self, collection: str, selector: list[uuid.UUID | str] | qm.Filter) -> None:
        """Delete the points with these ids, or every point matching a filter."""
        self.ensure(collection)
        points = selector if isinstance(selector, qm.Filter) else [str(i) for i in selector]
        if points:
            with self._one_commit(collection):
                self.client.delete(collection, points_selector=points, wait=True)

    def newest(self, collection: str, flt: qm.Filter, limit: int, key: str = "start_ts") -> list[qm.Record]:
        """The first ``limit`` points matching ``flt`` by descending payload ``key`` (points without it come
        last, in storage order). Qdrant orders by an indexed payload field (``_INDEXED_FIELDS``)."""
        self.ensure(collection)
        order = qm.OrderBy(key=key, direction=qm.Direction.DESC)
        out, _ = self.client.scroll(collection, scroll_filter=flt, limit=limit, order_by=order, with_payload=True)
        if len(out) < limit:
            rest = qm.Filter(must=[*(flt.must or []), qm.IsEmptyCondition(is_empty=qm.PayloadField(key=key))])
            more, _ = self.client.scroll(collection, scroll_filter=rest, limit=limit - len(out), with_payload=True)
            out.extend(more)
        return out

    def count(self, collection: str, flt: qm.Filter | None = None) -> int:
        """Exact number of points matching ``flt``."""
        self.ensure(collection)
        return self.client.count(collection, count_filter=flt, exact=True).count


def tenant_filter(tenant_id: str, user_id: str | None = None, **must: Any) -> qm.Filter:
    """A filter on tenant (always), user (when given) and exact payload values."""
    conds: list[qm.Condition] = [qm.FieldCondition(key="tenant_id", match=qm.MatchValue(value=tenant_id))]
    if user_id is not None:
        conds.append(qm.FieldCondition(key="user_id", match=qm.MatchValue(value=user_id)))
    for key, value in must.items():
        conds.append(qm.FieldCondition(key=key, match=qm.MatchValue(value=value)))
    return qm.Filter(must=conds)


_stores: dict[str, VectorStore] = {}
_stores_lock = threading.Lock()


def open_vector_store(settings: Settings) -> VectorStore:
    """This process's VectorStore for the configured Qdrant (created once per process and location).

    Raises StoreBusy when the local-mode folder is held by another process.
    """
    where = settings.qdrant_url or str(settings.data_dir / "qdrant")
    with _stores_lock:
        store = _stores.get(where)
        if store is None:
            if settings.qdrant_url:
                client = QdrantClient(url=settings.qdrant_url, api_key=settings.qdrant_api_key, timeout=60)
            else:
                (settings.data_dir / "qdrant").mkdir(parents=True, exist_ok=True)
                try:
                    client = QdrantClient(path=where)
                except RuntimeError as exc:
                    if "already accessed" in str(exc):
                        raise StoreBusy(
                            f"the embedded store {where} is open in another engram process; wait for it to "
                            "finish, or run a Qdrant server and set ENGRAM_QDRANT_URL") from exc
                    raise
            store = _stores[where] = VectorStore(client, local=not settings.qdrant_url)
        return store


@atexit.register
def close_vector_stores() -> None:
    """Close every client this process opened (releases the local-mode lock)."""
    with _stores_lock:
        for store in _stores.values():
            store.client.close()
        _stores.clear()
