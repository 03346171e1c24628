"""The vector store's own point and filter types: plain dataclasses with the names and fields of qdrant-client's
models (``qdrant_client.models``), so code written against those reads the same (``from
engram.workers.stores import models as qm``).

Why not qdrant-client's: importing anything of ``qdrant_client`` runs its package ``__init__``, which loads its
HTTP and gRPC clients and builds ~600 pydantic models (about 1 s of a 1.5 s budget for a cold ``engram
search``), while the embedded default never talks to a server. The embedded backend translates these types to
Qdrant Edge's, the server backend to qdrant-client's (``workers.stores.vectors``); both backends also take
qdrant-client's own models, read by the same field names. Only what engram uses is here (no geo conditions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class SparseVector:
    """A sparse vector: ``indices`` (unsigned 32-bit ints) and their ``values``, same length."""

    indices: list[int]
    values: list[float]


@dataclass(slots=True)
class PointStruct:
    """A point to write: ``id`` (a UUID or its string), ``vector`` ({name: dense list, multivector rows or
    SparseVector}) and ``payload`` (JSON-like dict)."""

    id: Any
    vector: dict[str, Any] = field(default_factory=dict)
    payload: dict[str, Any] | None = None


@dataclass(slots=True)
class StoredPoint:
    """A point as a store returns it, from a search (``score`` set) or a scroll/retrieve (``score`` 0): ``id`` as
    a string, ``payload`` (the keys asked for), ``vector`` (the names asked for, else None). A plain class: a
    search turns hundreds of candidates into Python objects, and building pydantic models cost more than the
    engine's search."""

    id: str
    payload: dict | None = None
    vector: Any = None
    score: float = 0.0
    version: int = 0


#: What a scroll or a retrieve returns (qdrant-client's name).
Record = StoredPoint
#: What a search returns (qdrant-client's name).
ScoredPoint = StoredPoint


@dataclass(slots=True)
class MatchValue:
    """The payload value equals ``value`` (a keyword, int or bool; for a list, one of its items does)."""

    value: Any


@dataclass(slots=True)
class MatchAny:
    """The payload value (or one of its items) is one of ``any``."""

    any: list[Any]


@dataclass(slots=True)
class MatchExcept:
    """The payload value is none of ``except_``."""

    except_: list[Any]


@dataclass(slots=True)
class MatchText:
    """The payload text contains ``text`` (a full-text match)."""

    text: str


@dataclass(slots=True)
class Range:
    """A numeric range on a payload field; None bounds are open."""

    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None


@dataclass(slots=True)
class ValuesCount:
    """A range on the number of values of a payload field."""

    lt: int | None = None
    gt: int | None = None
    gte: int | None = None
    lte: int | None = None


@dataclass(slots=True)
class FieldCondition:
    """A condition on the payload field ``key`` (dotted for nested keys): a ``match``, a ``range`` or a
    ``values_count``."""

    key: str
    match: MatchValue | MatchAny | MatchExcept | MatchText | None = None
    range: Range | None = None
    values_count: ValuesCount | None = None


@dataclass(slots=True)
class PayloadField:
    """A payload field by its key."""

    key: str


@dataclass(slots=True)
class IsEmptyCondition:
    """The field is missing, null or an empty list."""

    is_empty: PayloadField


@dataclass(slots=True)
class IsNullCondition:
    """The field is null."""

    is_null: PayloadField


@dataclass(slots=True)
class HasIdCondition:
    """The point's id is one of ``has_id``."""

    has_id: list[Any]


@dataclass(slots=True)
class HasVectorCondition:
    """The point has the named vector ``has_vector``."""

    has_vector: str


@dataclass(slots=True)
class Nested:
    """``filter`` holds for one item of the array of objects at ``key``."""

    key: str
    filter: Filter


@dataclass(slots=True)
class NestedCondition:
    """A ``Nested`` condition."""

    nested: Nested


@dataclass(slots=True)
class MinShould:
    """At least ``min_count`` of ``conditions`` hold."""

    conditions: list[Any]
    min_count: int


@dataclass(slots=True)
class Filter:
    """Every ``must`` condition holds, at least one ``should`` (when any), no ``must_not``; conditions may be
    filters themselves."""

    must: list[Any] | None = None
    should: list[Any] | None = None
    must_not: list[Any] | None = None
    min_should: MinShould | None = None


Condition = (
    FieldCondition | IsEmptyCondition | IsNullCondition | HasIdCondition | HasVectorCondition | NestedCondition | Filter
)
