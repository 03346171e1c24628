"""``ask``: a question answered from memory by multi-round retrieval (the query worker's second contract).

With an LLM configured, ``ask`` runs M3-Agent's control loop (Long et al., 2025, "Seeing, Listening,
Remembering, and Reasoning: A Multimodal Agent with Long-Term Memory", arXiv:2508.09736): up to
``max_rounds`` rounds of search-then-decide, where the LLM reads the question and the evidence so far and
replies with an ``LlmDecision``. Without an LLM it is one search round returning the ranked evidence.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from engram.schemas.errors import ModelError
from engram.schemas.memories import MemoryType
from engram.schemas.search import DEFAULT_SEARCH_TYPES, EmptyReason, SearchHit
from engram.schemas.settings import TimeZoneName

MAX_ROUNDS = 5  # M3-Agent's limit of search rounds per question


class AskRequest(BaseModel):
    """A question over one tenant's memories. ``limit``: hits per search round. The filters (user, memory
    types, time range) apply to every round's search; ``reference_time`` (the question's date, default now)
    is what time words in the question and in later queries ("last Tuesday") are resolved against."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=4000, description="The question, in words (1-4000 characters).")
    tenant_id: str = Field(description="The tenant asked about.")
    user_id: str | None = Field(None, description="Only this user's memories; null: every user of the tenant.")
    memory_types: list[MemoryType] = Field(
        default_factory=lambda: list(DEFAULT_SEARCH_TYPES),
        description="Collections searched each round; default all but the knowledge vault.",
    )
    time_from: AwareDatetime | None = Field(None, description="Only content from this time on (ISO 8601 with a zone).")
    time_to: AwareDatetime | None = Field(None, description="Only content up to this time (ISO 8601 with a zone).")
    reference_time: AwareDatetime | None = Field(
        None, description="The question's date: time words are resolved against it; default now."
    )
    timezone: TimeZoneName | None = Field(
        None,
        description="IANA time zone the query's time words are read in (what 'yesterday' and 'this morning' "
        "count from), e.g. Europe/Berlin; default: the server's ENGRAM_TIMEZONE.",
    )
    limit: int = Field(10, ge=1, le=50, description="Hits per search round (1-50).")
    max_rounds: int = Field(
        MAX_ROUNDS, ge=1, le=MAX_ROUNDS, description="Search rounds at most (1-5, M3-Agent's limit)."
    )

    @field_validator("time_from", "time_to", "reference_time")
    @classmethod
    def _to_utc(cls, value: datetime | None) -> datetime | None:
        return value.astimezone(UTC) if value else None


class AskQuery(AskRequest):
    """An ``AskRequest`` whose tenant follows from the API key (``tenant_id`` may be left out)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"question": "When is the Q2 budget review?", "user_id": "alice"},
            ]
        }
    )

    # optional here though the base requires it: the API fills it in from the key before the base is built
    tenant_id: str | None = Field(  # type: ignore[assignment]
        None, description="Left out: the API key's tenant. Another tenant than the key's: 403."
    )


class AnswerDecision(BaseModel):
    """The LLM answers: ``memory_ids`` are the ids of the evidence items the answer rests on."""

    model_config = ConfigDict(extra="ignore")

    action: Literal["answer"]
    answer: str = Field(min_length=1)
    memory_ids: list[uuid.UUID] = Field(default_factory=list)


class SearchDecision(BaseModel):
    """The LLM asks for another search round with a new query."""

    model_config = ConfigDict(extra="ignore")

    action: Literal["search"]
    query: str = Field(min_length=1, max_length=4000)


LlmDecision = Annotated[AnswerDecision | SearchDecision, Field(discriminator="action")]


class AskRound(BaseModel):
    """One search round: its query, the ids it retrieved (best first), how many were new, and what the LLM
    decided after reading them (``None`` without an LLM)."""

    query: str = Field(description="The round's search query (the question first, then the LLM's).")
    hit_ids: list[uuid.UUID] = Field(description="Ids of the hits it retrieved, best first.")
    new_hits: int = Field(description="How many of them were not retrieved by an earlier round.")
    decision: Literal["answer", "search"] | None = Field(
        None, description="What the LLM decided after reading them ('answer' or 'search'); null without an LLM."
    )


class AskResponse(BaseModel):
    """The answer (``None`` without an LLM, or when the LLM still wanted to search after the last round)
    and ``memories``: with an LLM the evidence the answer cites; without one the ranked hits of the one
    search round. ``evidence``: every distinct hit retrieved over all rounds, in the order found."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "question": "When is the Q2 budget review?",
                    "answer": "Friday at 3 pm (moved on May 2).",
                    "memories": [
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
                    "evidence": [
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
                    "rounds": [
                        {
                            "query": "When is the Q2 budget review?",
                            "hit_ids": ["8d1c4e7a-2b3f-4c5d-8e9f-0a1b2c3d4e5f"],
                            "new_hits": 1,
                            "decision": "answer",
                        },
                    ],
                    "llm": "openai:gpt-4o-mini",
                    "took_ms": 1840.2,
                },
            ]
        }
    )

    question: str = Field(description="The question as given.")
    answer: str | None = Field(
        description="The LLM's answer; null without an LLM or when it still wanted to search after the last round."
    )
    memories: list[SearchHit] = Field(
        description="With an LLM: the evidence the answer cites; without one: the ranked hits of the one round."
    )
    evidence: list[SearchHit] = Field(description="Every distinct hit retrieved over all rounds, in the order found.")
    rounds: list[AskRound] = Field(description="The search rounds, in order.")
    llm: str | None = Field(None, description="'<provider>:<model>' when an LLM answered, else None.")
    took_ms: float = Field(description="Time the query worker spent, milliseconds.")
    empty: EmptyReason | None = Field(
        None,
        description="Why no evidence was found: no_data (nothing stored for the tenant), unknown_user "
        "(nothing stored for the user), no_match; null when there is evidence.",
    )


class AskFailed(ModelError, RuntimeError):
    """``ask`` could not get an answer from the configured LLM: the endpoint failed after its retries, or
    its reply broke the protocol twice. The message says which, with the reason."""
