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

from engram.schemas.memories import MemoryType
from engram.schemas.search import DEFAULT_SEARCH_TYPES, SearchHit

MAX_ROUNDS = 5  # M3-Agent's limit of search rounds per question


class AskRequest(BaseModel):
    """A question over one tenant's memories. ``limit``: hits per search round. The filters (user, memory
    types, time range) apply to every round's search; ``reference_time`` (the question's date, default now)
    is what time words in the question and in later queries ("last Tuesday") are resolved against."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=4000)
    tenant_id: str
    user_id: str | None = None
    memory_types: list[MemoryType] = Field(default_factory=lambda: list(DEFAULT_SEARCH_TYPES))
    time_from: AwareDatetime | None = None
    time_to: AwareDatetime | None = None
    reference_time: AwareDatetime | None = None
    limit: int = Field(10, ge=1, le=50)
    max_rounds: int = Field(MAX_ROUNDS, ge=1, le=MAX_ROUNDS)

    @field_validator("time_from", "time_to", "reference_time")
    @classmethod
    def _to_utc(cls, value: datetime | None) -> datetime | None:
        return value.astimezone(UTC) if value else None


class AskQuery(AskRequest):
    """An ``AskRequest`` whose tenant follows from the API key (``tenant_id`` may be left out)."""

    tenant_id: str | None = None


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

    query: str
    hit_ids: list[uuid.UUID]
    new_hits: int
    decision: Literal["answer", "search"] | None = None


class AskResponse(BaseModel):
    """The answer (``None`` without an LLM, or when the LLM still wanted to search after the last round)
    and ``memories``: with an LLM the evidence the answer cites; without one the ranked hits of the one
    search round. ``evidence``: every distinct hit retrieved over all rounds, in the order found."""

    question: str
    answer: str | None
    memories: list[SearchHit]
    evidence: list[SearchHit]
    rounds: list[AskRound]
    llm: str | None = Field(None, description="'<provider>:<model>' when an LLM answered, else None.")
    took_ms: float


class AskFailed(RuntimeError):
    """``ask`` could not get an answer from the configured LLM: the endpoint failed after its retries, or
    its reply broke the protocol twice. The message says which, with the reason."""
