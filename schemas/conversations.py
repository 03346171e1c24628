"""The conversation import record (DESIGN.md "Contracts"): one JSON object per chat message.

A file is either a JSON array of records, a JSON object ``{"messages": [...]}`` or JSONL (one record per
line). Benchmark adapters (``workers.media.conversations``) map LoCoMo and LongMemEval into this record; they carry
dialog turns and image captions only, never a benchmark's annotations.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator


class Attachment(BaseModel):
    """Something shared with a message, known by its caption (e.g. an image's BLIP caption)."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field("image", max_length=32, description="What was shared, e.g. 'image'.")
    caption: str | None = Field(
        None,
        max_length=4000,
        description="What it shows, in words (e.g. an image's caption): this is what is stored and searched.",
    )
    url: str | None = Field(None, max_length=2048, description="Where it was, if known (not fetched).")


class ConversationMessage(BaseModel):
    """One chat message. ``timestamp`` is ISO 8601 with a zone (naive times are read as UTC)."""

    model_config = ConfigDict(extra="forbid")

    message_id: str = Field(min_length=1, max_length=256)
    session_id: str = Field(min_length=1, max_length=256)
    speaker: str = Field(min_length=1, max_length=256)
    text: str = Field(max_length=100_000)
    timestamp: AwareDatetime
    attachments: list[Attachment] = Field(default_factory=list)

    @field_validator("timestamp", mode="before")
    @classmethod
    def _naive_is_utc(cls, value: object) -> object:
        if isinstance(value, str):
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if isinstance(value, datetime) and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value

    def display_text(self) -> str:
        """The message as it is indexed: ``speaker: text`` plus ``[shared image: caption]`` per attachment."""
        parts = [f"{self.speaker}: {self.text}".strip()]
        for att in self.attachments:
            if att.caption:
                parts.append(f"[shared {att.kind}: {att.caption}]")
        return " ".join(parts)
