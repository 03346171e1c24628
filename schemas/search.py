"""Search requests and responses (the query worker's contract)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from schemas.events import MediaKind
from schemas.memories import MemoryType

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

    ``time_from``/``time_to`` bound when the content happened (UTC). ``kinds``, ``devices``, ``apps`` and
    ``entities`` (entity ids) filter observations by their own fields; memories are kept when any of their
    sources matches.
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
    limit: int = Field(10, ge=1, le=1000)

    @field_validator("time_from", "time_to")
    @classmethod
    def _to_utc(cls, value: datetime | None) -> datetime | None:
        return value.astimezone(UTC) if value else None


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


class SearchResponse(BaseModel):
    """Hits in descending score order."""

    query: str
    hits: list[SearchHit]
    took_ms: float
