"""Adding memories directly (``engram add``, ``POST /v1/memories``, the SDK's ``add``, the MCP tool
``add_memory``): one text or chat messages, written as a conversation record (``schemas.conversations``) and
published like a file, so they go through the same pipeline (ingest → perceive → embed → link → store, then
consolidation).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from engram.schemas.conversations import Attachment
from engram.schemas.events import _ID_PATTERN, EventStatus


def _utc(value: object) -> object:
    """An ISO 8601 string or a datetime without a zone read as UTC; anything else unchanged (for pydantic)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value  # pydantic names the field
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


class AddMessage(BaseModel):
    """One chat message to remember: the conversation record's fields (``ConversationMessage``), of which only
    ``text`` is required; ``speaker`` defaults to the user, ``timestamp`` to the request's ``time``,
    ``message_id`` and ``session_id`` are made from the request's id."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=100_000, description="What was said or written.")
    speaker: str | None = Field(None, min_length=1, max_length=256, description="Who said it (default: the user).")
    timestamp: AwareDatetime | None = Field(None, description="When it was said, ISO 8601 with a zone.")
    message_id: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="The message's id in its chat (default: made from the request's id).",
    )
    session_id: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="The chat session it belongs to (default: made from the request's id).",
    )
    attachments: list[Attachment] = Field(
        default_factory=list, max_length=32, description="What was shared with it, known by captions."
    )

    @field_validator("timestamp", mode="before")
    @classmethod
    def _naive_is_utc(cls, value: object) -> object:
        return _utc(value)


class AddMemoryRequest(BaseModel):
    """What to remember for ``user_id``: exactly one of ``text`` (one note) or ``messages`` (a conversation).

    ``id``: the client's id for this addition; adding again with the same id (same tenant and user) stores
    nothing and answers the first addition's event (``duplicate``). Without it, the same messages at the same
    times are still stored once per user (the content's hash)."""

    model_config = ConfigDict(extra="forbid")

    text: str | None = Field(None, min_length=1, max_length=100_000, description="One text to remember.")
    messages: list[AddMessage] | None = Field(
        None, min_length=1, max_length=1000, description="Chat messages to remember, in order."
    )
    user_id: str = Field(pattern=_ID_PATTERN, description="Whose memory it is.")
    id: str | None = Field(
        None, min_length=1, max_length=256, description="The client's id for this addition (idempotency key)."
    )
    time: AwareDatetime | None = Field(None, description="When it happened (default: now), ISO 8601 with a zone.")
    source: str | None = Field(
        None, min_length=1, max_length=256, description="Where it comes from, e.g. the agent's name ('claude-desktop')."
    )
    session_id: str | None = Field(
        None, min_length=1, max_length=256, description="The conversation it belongs to (default: from the id or time)."
    )

    @model_validator(mode="after")
    def _one_of(self) -> AddMemoryRequest:
        if (self.text is None) == (self.messages is None):
            raise ValueError("give exactly one of 'text' or 'messages'")
        return self

    @field_validator("time", mode="before")
    @classmethod
    def _naive_time_is_utc(cls, value: object) -> object:
        return _utc(value)


class AddMemoryQuery(AddMemoryRequest):
    """``POST /v1/memories``'s body: an ``AddMemoryRequest`` (the tenant follows from the API key)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"user_id": "alice", "text": "I moved the Q2 budget review to Friday 3 pm.", "id": "note-2024-05-02-1"},
            ]
        }
    )


class AddMemoryResponse(BaseModel):
    """The event an addition was published as: poll ``GET /v1/events/{event_id}`` until ``status`` is done,
    skipped or failed (on the embedded default it is final when returned). ``duplicate``: the same client id
    was added before and nothing new was stored. ``observations``: stored so far."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "event_id": "3f2b8c1e-6f0a-4d9b-9a57-0c8e2d6b1a42",
                    "status": "queued",
                    "duplicate": False,
                    "observations": 0,
                    "captured_at": "2024-05-02T09:30:00Z",
                },
            ]
        }
    )

    event_id: uuid.UUID = Field(description="The event the memory was published as: poll GET /v1/events/{event_id}.")
    status: EventStatus = Field(
        description="The event's status: queued after a first addition, its current status for a duplicate."
    )
    duplicate: bool = Field(False, description="True when this id was added before: nothing was stored again.")
    resumed: bool = Field(
        False,
        description="True when this id's earlier addition was interrupted (its process "
        "gone before it was stored) and this call finished it.",
    )
    observations: int = Field(0, description="Observations stored so far (final on the embedded default).")
    reason: str | None = Field(None, description="Why it was skipped or failed, if it was.")
    captured_at: datetime | None = Field(None, description="When it happened: the request's time (default: now), UTC.")
