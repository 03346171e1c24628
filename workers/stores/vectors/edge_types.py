"""The store's own point and filter types (``workers.stores.models``, or qdrant-client's of the same names, told
apart by class name only) as Qdrant Edge's, and the engine's points back as ``StoredPoint``: what the embedded
store (``edge.EdgeVectorStore``) hands the engine and returns. Qdrant Edge is imported on first use.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engram.workers.stores import models as qm
from engram.workers.stores.models import StoredPoint


def edge_engine():
    """The ``qdrant_edge`` module (Qdrant Edge's Python binding), imported on first use."""
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
    qe = edge_engine()
    min_should = None
    if flt.min_should is not None:
        min_should = qe.MinShould([_edge_condition(c) for c in flt.min_should.conditions], flt.min_should.min_count)
    return qe.Filter(
        must=[_edge_condition(c) for c in _listify(flt.must)] or None,
        should=[_edge_condition(c) for c in _listify(flt.should)] or None,
        must_not=[_edge_condition(c) for c in _listify(flt.must_not)] or None,
        min_should=min_should,
    )


def _edge_match(m: Any) -> Any:
    qe = edge_engine()
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
    qe = edge_engine()
    kw: dict[str, Any] = {}
    if cond.match is not None:
        kw["match"] = _edge_match(cond.match)
    r = cond.range
    if type(r).__name__ == "DatetimeRange":  # qdrant-client's only
        kw["range"] = qe.RangeDateTime(
            **{k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in r.model_dump(exclude_none=True).items()}
        )
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
    qe = edge_engine()
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


def edge_vector(vector: Any) -> Any:
    """A point's vector or named vectors (dense lists or arrays, sparse vectors) as Qdrant Edge takes them."""
    if isinstance(vector, dict):
        return {name: edge_vector(v) for name, v in vector.items()}
    if hasattr(vector, "indices"):  # a sparse vector (the store's own or qdrant-client's)
        return edge_engine().SparseVector(list(vector.indices), [float(x) for x in vector.values])
    if hasattr(vector, "tolist"):
        return vector.tolist()
    return vector


def _qm_vector(vector: Any) -> Any:
    if isinstance(vector, dict):
        return {name: _qm_vector(v) for name, v in vector.items()}
    if vector is not None and hasattr(vector, "indices"):
        return qm.SparseVector(indices=list(vector.indices), values=list(vector.values))
    return vector


def edge_payload(with_payload: Any) -> Any:
    """``with_payload`` (True/False, a list of fields, or ``("exclude", fields)``) as Qdrant Edge's selector."""
    if isinstance(with_payload, tuple):  # ("exclude", keys)
        return edge_engine().PayloadSelector.Exclude(list(with_payload[1]))
    if isinstance(with_payload, list):
        return edge_engine().PayloadSelector.Include(with_payload)
    return bool(with_payload)


def stored_point(p: Any) -> StoredPoint:
    """A point of Qdrant Edge (a scroll's or a retrieve's) as ``StoredPoint``, sparse vectors as the store's own."""
    return StoredPoint(str(p.id), p.payload, _qm_vector(p.vector) if p.vector is not None else None)


def index_params(field: str, schema: str) -> Any:
    """The payload index of ``field`` (``INDEXED_FIELDS``' kind ``schema``), memory-mapped; ``tenant_id`` is the
    tenant index."""
    qe = edge_engine()
    if schema == "keyword":
        return qe.KeywordIndexParams(is_tenant=True if field == "tenant_id" else None, memory=qe.Memory.Cold)
    if schema == "float":
        return qe.FloatIndexParams(memory=qe.Memory.Cold)
    return qe.BoolIndexParams(memory=qe.Memory.Cold)


def ranked_points(points: list[Any], with_payload: Any) -> list[StoredPoint]:
    """Qdrant Edge's scored points (asked without vectors) as ``StoredPoint``: their payload read only when it was
    asked for (each attribute read copies out of the engine: a search reads ~500 candidates)."""
    if with_payload is False:
        return [StoredPoint(str(p.id), None, None, p.score) for p in points]
    return [StoredPoint(str(p.id), p.payload, None, p.score) for p in points]
