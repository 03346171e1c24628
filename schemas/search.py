"""Search requests and responses (the query worker's contract)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from engram.schemas.events import MediaKind
from engram.schemas.memories import MemoryType

DEFAULT_SEARCH_TYPES: tuple[MemoryType, ...] = (
    MemoryType.observation,
    MemoryType.episodic,
    MemoryType.semantic,
    MemoryType.procedural,
    MemoryType.resource,
    MemoryType.core,
)


class SearchRequest(BaseModel):
    """A hybrid search: dense + BM25 over the chosen collections, fused by reciprocal rank fusion.

    ``time_from``/``time_to`` bound when the content happened (UTC): hard filters. Time expressions in the
    query ("last Tuesday", "in May 2023", "two weeks ago") are resolved against ``reference_time`` (the
    question's date; default: now) into ``SearchResponse.time_range``, which ranks content inside it higher
    without excluding the rest (``resolve_time=False`` turns that off). ``kinds``, ``devices``, ``apps``
    and ``entities`` (entity ids) filter observations by their own fields; memories are kept when any of
    their sources matches. Superseded and archived memories are left out unless ``include_history``.
    ``context_turns`` > 0 attaches to each observation hit its neighbouring turns of the same session (or
    segments of the same event), that many on each side. ``reinforce`` records a recall of the memories
    returned (MemoryBank's strengthening); benchmarks turn it off so that re-runs rank alike.
    """

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=4000)
    tenant_id: str
    user_id: str | None = None
    memory_types: list[MemoryType] = Field(default_factory=lambda: list(DEFAULT_SEARCH_TYPES))
    kinds: list[MediaKind] | None = None
    devices: list[str] | None = None
    apps: list[str] | None = None
    entities: list[str] | None = None
    time_from: AwareDatetime | None = None
    time_to: AwareDatetime | None = None
    reference_time: AwareDatetime | None = None
    resolve_time: bool = True
    include_history: bool = False
    context_turns: int = Field(0, ge=0, le=20)
    reinforce: bool = True
    limit: int = Field(10, ge=1, le=1000)

    @field_validator("time_from", "time_to", "reference_time")
    @classmethod
    def _to_utc(cls, value: datetime | None) -> datetime | None:
        return value.astimezone(UTC) if value else None


class ContextTurn(BaseModel):
    """A neighbouring turn of a hit (same session, or same event for segments): ``offset`` turns before (< 0)
    or after (> 0) it."""

    id: uuid.UUID
    offset: int
    text: str
    time: AwareDatetime | None = None
    message_id: str | None = None


class TimeRange(BaseModel):
    """A time expression of the query resolved against the reference time: ``[start, end)`` in UTC."""

    expression: str
    start: AwareDatetime
    end: AwareDatetime
    reference_time: AwareDatetime


class SearchHit(BaseModel):
    """One result. ``score`` is the fused RRF score: higher is more relevant, comparable within a response.

    ``message_ids`` and ``observation_ids`` list the sources of the hit, most relevant to the query first.
    """

    id: uuid.UUID
    memory_type: MemoryType
    score: float
    text: str
    time: AwareDatetime | None = None
    time_end: AwareDatetime | None = None
    kind: MediaKind | None = None
    user_id: str | None = None
    source_name: str | None = None
    object_key: str | None = None
    start_s: float | None = None
    end_s: float | None = None
    event_ids: list[uuid.UUID] = Field(default_factory=list)
    observation_ids: list[uuid.UUID] = Field(default_factory=list)
    message_ids: list[str] = Field(default_factory=list)
    session_ids: list[str] = Field(default_factory=list)
    context: list[ContextTurn] = Field(default_factory=list)


class SearchResponse(BaseModel):
    """Hits in descending score order; ``time_range`` is the query's resolved time expression, if any."""

    query: str
    hits: list[SearchHit]
    took_ms: float
    time_range: TimeRange | None = None
