"""The vector store: one ``VectorStore`` interface over two Qdrant backends, a module per role.

- ``schema``: the collections (shared by all tenants; ``tenant_id`` is in every payload and every filter), their
  named vectors and payload indexes, and ``tenant_filter``.
- ``base``: the abstract ``VectorStore``, ``VectorQuery`` and ``StoreBusy``.
- ``edge``: ``EdgeVectorStore``, the embedded default: Qdrant's own engine in-process (Qdrant Edge,
  ``qdrant-edge-py``), one shard per collection under ``ENGRAM_DATA_DIR/vectors/<collection>``, with payload
  indexes, a write-ahead log and no server; ``edge_types`` translates the store's types to the engine's,
  ``edge_checks`` tells a damaged shard (``StoreCorrupt``), and ``edge_shards`` makes a shard (its configuration
  and payload indexes) and rewrites one into a new folder (``compact``).
- ``client``: ``ClientVectorStore``, qdrant-client against a Qdrant server (``ENGRAM_QDRANT_URL``; the distributed
  mode at scale), or qdrant-client's local mode as the server's stand-in in tests.
- ``opening``: ``open_vector_store`` (this process's store, once per location) and ``migrate_local_store``;
  ``locking``: the embedded store's file lock taken, the request a process waiting for it leaves beside it, and the
  stores closed at this process's exit (``close_vector_stores``).

Both backends take the store's own point and filter types (``workers.stores.models``, with qdrant-client's names
and fields, so that the embedded default never imports qdrant-client: a cold ``engram search`` saves about a
second), or qdrant-client's models themselves, and return points with ``id``, ``payload``, ``vector`` and ``score``
(``models.StoredPoint``, or qdrant-client's ``Record`` / ``ScoredPoint`` from a server), so callers do not know
which backend runs; ``tests/workers/stores/test_vectors_contract.py`` holds them to the same ids, order and
scores. Every name is imported from this package (``from engram.workers.stores.vectors import ...``).
"""

from __future__ import annotations

from engram.schemas.errors import StoreCorrupt
from engram.workers.stores.vectors.base import Payload, PointId, StoreBusy, VectorQuery, VectorStore
from engram.workers.stores.vectors.client import ClientVectorStore, StoreUnavailable, to_client
from engram.workers.stores.vectors.edge import (
    CLOSED_FILE,
    OPTIMIZE_AFTER_POINTS,
    OPTIMIZED_FILE,
    TRIAL_SUFFIX,
    EdgeVectorStore,
)
from engram.workers.stores.vectors.edge_checks import read_back
from engram.workers.stores.vectors.edge_shards import COMPACTING_SUFFIX, FORGOTTEN_SUFFIX, shard_config
from engram.workers.stores.vectors.edge_types import edge_filter
from engram.workers.stores.vectors.locking import WANTED_SUFFIX, close_vector_store, close_vector_stores
from engram.workers.stores.vectors.opening import (
    embedded_store_dir,
    legacy_store_dir,
    migrate_local_store,
    open_vector_store,
)
from engram.workers.stores.vectors.schema import (
    COLLECTIONS,
    DENSE,
    DENSE_SEARCH_MULTIVECTOR,
    DIM,
    ENTITIES,
    FACE,
    FACE_SAMPLES,
    INDEXED_FIELDS,
    OBSERVATIONS,
    SENTENCES,
    SPARSE,
    UNREAD_OBSERVATION_FIELDS,
    VECTORS,
    VOICE,
    VOICE_SAMPLES,
    VectorSpec,
    collection_for,
    tenant_filter,
)

__all__ = [
    "CLOSED_FILE",
    "COLLECTIONS",
    "COMPACTING_SUFFIX",
    "DENSE",
    "DENSE_SEARCH_MULTIVECTOR",
    "DIM",
    "ENTITIES",
    "FACE",
    "FACE_SAMPLES",
    "FORGOTTEN_SUFFIX",
    "INDEXED_FIELDS",
    "OBSERVATIONS",
    "OPTIMIZED_FILE",
    "OPTIMIZE_AFTER_POINTS",
    "SENTENCES",
    "SPARSE",
    "TRIAL_SUFFIX",
    "UNREAD_OBSERVATION_FIELDS",
    "VECTORS",
    "VOICE",
    "VOICE_SAMPLES",
    "WANTED_SUFFIX",
    "ClientVectorStore",
    "EdgeVectorStore",
    "Payload",
    "PointId",
    "StoreBusy",
    "StoreCorrupt",
    "StoreUnavailable",
    "VectorQuery",
    "VectorSpec",
    "VectorStore",
    "close_vector_store",
    "close_vector_stores",
    "collection_for",
    "edge_filter",
    "embedded_store_dir",
    "legacy_store_dir",
    "migrate_local_store",
    "open_vector_store",
    "read_back",
    "shard_config",
    "tenant_filter",
    "to_client",
]
