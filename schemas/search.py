"""Search requests and responses (the query worker's contract)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from engram.schemas.events import MediaKind
from engram.schemas.memories import MemoryType
from engram.schemas.settings import TimeZoneName

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
    ``collapse`` keeps one hit per burst of near-duplicate screenshots (``workers.memory.bursts``).
    ``context_turns`` > 0 attaches to each observation hit its neighbouring turns of the same session (or
    segments of the same event), that many on each side. ``reinforce`` records a recall of the memories
    returned (MemoryBank's strengthening); benchmarks turn it off so that re-runs rank alike.
    """

    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        min_length=1,
        max_length=4000,
        description="What to look for, in words (1-4000 characters); time words in it "
        "('last Tuesday') are resolved into time_range.",
    )
    tenant_id: str = Field(description="The tenant searched.")
    user_id: str | None = Field(
        None, description="Only this user's observations and memories; null: every user of the tenant."
    )
    memory_types: list[MemoryType] = Field(
        default_factory=lambda: list(DEFAULT_SEARCH_TYPES),
        description="Collections searched (observation, episodic, "
        "semantic, procedural, resource, core, knowledge_vault); default all but the knowledge vault.",
    )
    kinds: list[MediaKind] | None = Field(
        None, description="Only content from these media kinds (screenshot, audio, clip, text); null: all."
    )
    devices: list[str] | None = Field(None, description="Only content from these device ids; null: all.")
    apps: list[str] | None = Field(
        None, description="Only content captured in these foreground applications; null: all."
    )
    entities: list[str] | None = Field(
        None, description="Only content linked to these entity ids (GET /v1/entities); null: all."
    )
    time_from: AwareDatetime | None = Field(
        None, description="Only content from this time on (ISO 8601 with a zone; a hard filter)."
    )
    time_to: AwareDatetime | None = Field(
        None, description="Only content up to this time (ISO 8601 with a zone; a hard filter)."
    )
    reference_time: AwareDatetime | None = Field(
        None, description="The time time words in the query are resolved against (the question's date); default now."
    )
    timezone: TimeZoneName | None = Field(
        None,
        description="IANA time zone the query's time words are read in (what 'yesterday' and 'this morning' "
        "count from), e.g. Europe/Berlin; default: the server's ENGRAM_TIMEZONE.",
    )
    resolve_time: bool = Field(
        True, description="Resolve time words in the query into time_range, which ranks content inside it higher."
    )
    include_history: bool = Field(False, description="Include superseded and archived memories.")
    context_turns: int = Field(
        0,
        ge=0,
        le=20,
        description="Neighbouring turns (same session or event) attached to each observation hit, on each side.",
    )
    reinforce: bool = Field(
        True, description="Record a recall of the memories returned (MemoryBank's strengthening); false for benchmarks."
    )
    limit: int = Field(
        10, ge=1, le=1000, description="Number of hits returned (1-1000), bursts collapsed counting one each."
    )
    collapse: bool = Field(
        True,
        description="Collapse a burst of near-duplicate screenshots (same device and window, close in time, "
        "near-identical text) into its best-ranked frame, which lists the others (burst_size, burst_ids).",
    )

    @field_validator("time_from", "time_to", "reference_time")
    @classmethod
    def _to_utc(cls, value: datetime | None) -> datetime | None:
        return value.astimezone(UTC) if value else None


class ContextTurn(BaseModel):
    """A neighbouring turn of a hit (same session, or same event for segments): ``offset`` turns before (< 0)
    or after (> 0) it."""

    id: uuid.UUID = Field(description="The neighbouring observation's id.")
    offset: int = Field(description="Its position relative to the hit: < 0 before, > 0 after.")
    text: str = Field(description="What it says.")
    time: AwareDatetime | None = Field(None, description="When it happened (UTC).")
    message_id: str | None = Field(None, description="Its chat message id, for conversation turns.")


class TimeRange(BaseModel):
    """A time expression of the query resolved against the reference time: ``[start, end)`` in UTC."""

    expression: str = Field(description="The time words found in the query, e.g. 'last Tuesday'.")
    start: AwareDatetime = Field(description="Start of the range, inclusive (UTC).")
    end: AwareDatetime = Field(description="End of the range, exclusive (UTC).")
    reference_time: AwareDatetime = Field(description="The time the expression was resolved against (UTC).")


class Matched(BaseModel):
    """Why a hit was found, in terms a reader can follow: which rankings reached it (``dense_rank``: by meaning,
    the MiniLM ranking; ``sparse_rank``: by words, BM25), which query words its text holds (stemmed as BM25
    stems them), and which boosts it got (time words, a named entity, a memory built from it)."""

    dense_rank: int | None = Field(
        None, description="Its rank (1 = first) in the dense ranking (meaning) of its collection; null: not reached."
    )
    sparse_rank: int | None = Field(
        None, description="Its rank (1 = first) in the BM25 ranking (words) of its collection; null: not reached."
    )
    words: list[str] = Field(
        default_factory=list,
        description="The query's words that occur in its text (compared as BM25 stems), in query order.",
    )
    time: bool = Field(False, description="Its time lies in the query's resolved time expression (time_range).")
    entity: bool = Field(False, description="It is linked to an entity the query names.")
    memory: bool = Field(
        False, description="An observation raised by a memory built from it (the memory's score, as a prior)."
    )


class SearchHit(BaseModel):
    """One result. ``score`` is the fused RRF score: higher is more relevant, comparable within a response.

    ``message_ids`` and ``observation_ids`` list the sources of the hit, most relevant to the query first.
    """

    id: uuid.UUID = Field(description="The observation's or memory's id (GET /v1/memories/{id}).")
    memory_type: MemoryType = Field(description="Which collection it comes from.")
    score: float = Field(
        description="Fused reciprocal-rank score: higher is more relevant, comparable within one response only."
    )
    text: str = Field(description="What it says: an observation's text, a memory's summary.")
    time: AwareDatetime | None = Field(
        None, description="When its content happened (UTC); a memory's first source time."
    )
    time_end: AwareDatetime | None = Field(
        None, description="When its content ended (UTC), for spans (audio, clips, episodes)."
    )
    kind: MediaKind | None = Field(None, description="Media kind of its source, for observations.")
    user_id: str | None = Field(None, description="Whose it is.")
    source_name: str | None = Field(None, description="The published file's name, or names of a memory's sources.")
    object_key: str | None = Field(None, description="Object-store key of the media or segment it was read from.")
    original_removed_at: AwareDatetime | None = Field(
        None,
        description="When retention removed the original at object_key (ENGRAM_RETENTION_<KIND>_DAYS or "
        "ENGRAM_STORAGE_CAP_BYTES; its text, vectors, thumbnail and memories stay); null while it is stored.",
    )
    start_s: float | None = Field(None, description="Offset of the observation in its recording, seconds.")
    end_s: float | None = Field(None, description="End offset of the observation in its recording, seconds.")
    event_ids: list[uuid.UUID] = Field(default_factory=list, description="The events its content came from.")
    observation_ids: list[uuid.UUID] = Field(
        default_factory=list, description="A memory's source observations, most relevant to the query first."
    )
    message_ids: list[str] = Field(
        default_factory=list, description="Chat message ids of its sources, most relevant first."
    )
    session_ids: list[str] = Field(default_factory=list, description="Chat session ids of its sources.")
    context: list[ContextTurn] = Field(
        default_factory=list, description="Neighbouring turns (context_turns > 0), in order."
    )
    matched: Matched | None = Field(None, description="Why it was found: rankings, query words, boosts.")
    burst_size: int = Field(
        1,
        ge=1,
        description="Frames this hit stands for: itself and the near-duplicate screenshots of its burst (collapse).",
    )
    burst_ids: list[uuid.UUID] = Field(
        default_factory=list, description="The other frames of its burst (observation ids), in time order."
    )


class EmptyReason(StrEnum):
    """Why a search found nothing: ``no_data`` (the tenant holds nothing), ``unknown_user`` (the user holds
    nothing in the tenant), ``no_match`` (there is data, and nothing matched the query and its filters)."""

    no_data = "no_data"
    unknown_user = "unknown_user"
    no_match = "no_match"


class SearchResponse(BaseModel):
    """Hits in descending score order; ``time_range`` is the query's resolved time expression, if any; ``empty``
    says why there are no hits (null when there are)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "query": "budget review last week",
                    "hits": [
                        {
                            "id": "8d1c4e7a-2b3f-4c5d-8e9f-0a1b2c3d4e5f",
                            "memory_type": "observation",
                            "score": 0.0325,
                            "text": "Q2 budget review moved to Friday 3 pm",
                            "time": "2024-05-02T09:30:00Z",
                            "kind": "screenshot",
                            "user_id": "alice",
                            "source_name": "Screenshot 2024-05-02 at 09.30.png",
                            "object_key": "media/acme/5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef.png",  # noqa: E501
                            "event_ids": ["3f2b8c1e-6f0a-4d9b-9a57-0c8e2d6b1a42"],
                        },
                    ],
                    "took_ms": 41.7,
                    "time_range": {
                        "expression": "last week",
                        "start": "2024-04-29T00:00:00Z",
                        "end": "2024-05-06T00:00:00Z",
                        "reference_time": "2024-05-08T12:00:00Z",
                    },
                },
            ]
        }
    )

    query: str = Field(description="The query as given.")
    hits: list[SearchHit] = Field(description="Results, highest score first.")
    took_ms: float = Field(description="Time the query worker spent, milliseconds.")
    time_range: TimeRange | None = Field(
        None, description="The query's time words resolved into a range (ranked first, not a filter); null when none."
    )
    empty: EmptyReason | None = Field(
        None,
        description="Why there are no hits: no_data (nothing stored for the tenant), unknown_user (nothing "
        "stored for the user), no_match (nothing matched); null when there are hits.",
    )
