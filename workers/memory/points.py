"""Memory points: a memory as the point written to its collection (dense and sparse vectors, payload), and the
provenance fields it keeps of the observations it was built from."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from engram.schemas.memories import (
    EpisodicMemory,
    Provenance,
)
from engram.workers.memory.embedding import embed_texts, sparse_vectors
from engram.workers.runtime import Runtime
from engram.workers.stores import models as qm
from engram.workers.stores.vectors import DENSE, SPARSE


def source_fields(records: list[qm.Record]) -> dict[str, list[str]]:
    """What a memory's filters match on, from its source observations: ``kinds``, ``device_ids``, ``apps``
    and ``entity_ids`` (each sorted, without repeats)."""

    def values(key: str) -> list[str]:
        got = (r.payload.get(key) for r in records)
        return sorted({str(x) for v in got if v for x in (v if isinstance(v, list) else [v])})

    return {
        "kinds": values("kind"),
        "device_ids": values("device_id"),
        "apps": values("app"),
        "entity_ids": values("entity_ids"),
    }


def memory_points(
    rt: Runtime,
    memories: list[EpisodicMemory],
    fields: list[dict[str, list[str]]],
    dense: np.ndarray | None = None,
    sparse_texts: list[str | list[str]] | None = None,
    sparse_units: list[int] | None = None,
) -> list[qm.PointStruct]:
    """Qdrant points of memories: payload is the memory plus ``start_ts``/``end_ts`` and ``fields`` (what its
    sources are, ``source_fields``).

    ``dense`` (n, 384) and ``sparse_texts`` default to the embedding and the BM25 vector of each memory's
    ``index_text()`` (a sparse text may be given as its parts, ``sparse.tokenize_parts``); ``sparse_units`` says
    how many observations' texts each sparse text joins."""
    texts = [m.index_text() for m in memories]
    dense = embed_texts(rt, texts) if dense is None else dense
    sparse_vecs = sparse_vectors(rt.settings, sparse_texts or texts, sparse_units)
    points = []
    for mem, vec, (si, sv), extra in zip(memories, dense, sparse_vecs, fields, strict=True):
        payload = mem.model_dump(mode="json")
        payload.update(start_ts=mem.provenance.start.timestamp(), end_ts=mem.provenance.end.timestamp(), **extra)
        points.append(
            qm.PointStruct(
                id=str(mem.id),
                payload=payload,
                vector={DENSE: vec.tolist(), SPARSE: qm.SparseVector(indices=si, values=sv)},
            )
        )
    return points


def provenance(records: list[qm.Record]) -> Provenance:
    """The provenance of a memory built from ``records`` (observation points)."""
    payloads = [r.payload or {} for r in records]

    def uniq(key: str) -> list:
        return list(dict.fromkeys(p[key] for p in payloads if p.get(key)))

    return Provenance(
        observation_ids=[r.id for r in records],
        event_ids=uniq("event_id"),
        message_ids=uniq("message_id"),
        session_ids=uniq("session_id"),
        object_keys=uniq("object_key"),
        source_names=uniq("source_name"),
        start=datetime.fromtimestamp(min(p["start_ts"] for p in payloads), UTC),
        end=datetime.fromtimestamp(max(p["end_ts"] for p in payloads), UTC),
    )
