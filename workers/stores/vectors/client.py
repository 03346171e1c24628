"""``ClientVectorStore``: the vector store through qdrant-client, against a Qdrant server (``ENGRAM_QDRANT_URL``;
the distributed mode at scale). qdrant-client's local mode (``QdrantClient(path=...)``, a pure-Python stand-in
for a server whose search time grows linearly with the points) is used only as the server's stand-in in tests
and to read stores written by engram before Qdrant Edge (``opening.migrate_local_store``). qdrant-client is
imported only when this backend is used (~1 s).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Any

from engram.schemas.errors import StoreError
from engram.workers.stores import models as qm
from engram.workers.stores.vectors.base import VectorQuery, VectorStore, complete_points
from engram.workers.stores.vectors.schema import DENSE, INDEXED_FIELDS, SPARSE, VECTORS, VectorSpec


def _client_models() -> Any:
    from qdrant_client import models  # the server backend's client: ~1 s to import, so only when it is used

    return models


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
        size=spec.size,
        distance=distance[spec.distance],
        multivector_config=qm.MultiVectorConfig(comparator=qm.MultiVectorComparator.MAX_SIM) if spec.multi else None,
        hnsw_config=None if spec.searched else qm.HnswConfigDiff(m=0),
    )


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
                    collection,
                    vectors_config={n: _qm_vector_params(s) for n, s in VECTORS[collection].items()},
                    sparse_vectors_config={SPARSE: qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
                )
            except Exception:
                if not self.client.collection_exists(collection):  # lost a creation race: fine
                    raise
        if not self.local:  # local mode scans; indexes only matter on a server (made, or added when missing)
            have = self.client.get_collection(collection).payload_schema or {}
            for field, schema in INDEXED_FIELDS.items():
                if field not in have:
                    self.client.create_payload_index(
                        collection,
                        field,
                        field_schema=qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=True)
                        if field == "tenant_id"
                        else {
                            "keyword": qm.PayloadSchemaType.KEYWORD,
                            "float": qm.PayloadSchemaType.FLOAT,
                            "bool": qm.PayloadSchemaType.BOOL,
                        }[schema],
                    )
        if kept:
            self._upsert(
                collection,
                complete_points(
                    [qm.PointStruct(id=r.id, vector=r.vector or {}, payload=r.payload) for r in kept], collection
                ),
            )

    def _scroll_all(self, collection: str) -> list[Any]:
        out, offset = [], None
        while True:
            page, offset = self.client.scroll(
                collection, limit=1024, offset=offset, with_payload=True, with_vectors=True
            )
            out.extend(page)
            if offset is None:
                return out

    @_answering
    def _upsert(self, collection: str, points: list[qm.PointStruct]) -> None:
        self.client.upsert(collection, points=to_client(points), wait=True)

    @_answering
    def _query(self, collection: str, queries: list[VectorQuery]) -> list[list[qm.ScoredPoint]]:
        qm = _client_models()
        requests = [
            qm.QueryRequest(
                query=to_client(q.vector),
                using=q.using,
                filter=to_client(q.filter),
                limit=q.limit,
                with_payload=q.with_payload,
                score_threshold=q.score_threshold,
                params=qm.SearchParams(idf=qm.IdfCorpusParams(corpus=to_client(q.idf_corpus)))
                if q.idf_corpus is not None
                else None,
            )
            for q in queries
        ]
        return [r.points for r in self.client.query_batch_points(collection, requests=requests)]

    @_answering
    def _scroll_page(self, collection, flt, limit, offset, with_payload, with_vectors, order_by=None):
        qm = _client_models()
        flt = to_client(flt)
        if isinstance(with_payload, tuple):
            with_payload = qm.PayloadSelectorExclude(exclude=with_payload[1])
        order = qm.OrderBy(key=order_by, direction=qm.Direction.DESC) if order_by else None
        points, nxt = self.client.scroll(
            collection,
            scroll_filter=flt,
            limit=limit,
            offset=offset,
            order_by=order,
            with_payload=with_payload,
            with_vectors=with_vectors,
        )
        return points, None if order else nxt

    @_answering
    def _retrieve(self, collection, ids, with_payload, with_vectors):
        return self.client.retrieve(collection, ids=ids, with_payload=with_payload, with_vectors=with_vectors)

    @_answering
    def _set_payloads(self, collection, groups):
        qm = _client_models()
        self.client.batch_update_points(
            collection,
            update_operations=[
                qm.SetPayloadOperation(set_payload=qm.SetPayload(payload=p, points=ids)) for p, ids in groups
            ],
            wait=True,
        )

    @_answering
    def _delete(self, collection, selector):
        self.client.delete(collection, points_selector=to_client(selector), wait=True)

    @_answering
    def _count(self, collection, flt):
        return self.client.count(collection, count_filter=to_client(flt), exact=True).count

    def close(self) -> None:
        self.client.close()
