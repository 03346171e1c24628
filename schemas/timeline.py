"""What a timeline shows: one tenant's observations in a time span, newest first (the web app's Timeline screen,
``api.service.MemoryService.timeline``). The answer is a ``schemas.memory_admin.MemoryPage`` of observations."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from engram.schemas.events import _ID_PATTERN, MediaKind


class TimelineRequest(BaseModel):
    """Observations of ``tenant_id`` (and ``user_id``, when given) whose content started in
    ``[time_from, time_to)`` (UTC; an open end when null), newest first, filtered by media kind, foreground
    application and device. ``limit``/``offset`` page through them (cost grows with ``offset + limit``)."""

    model_config = ConfigDict(extra="forbid")

    tenant_id: str = Field(pattern=_ID_PATTERN, description="The tenant.")
    user_id: str | None = Field(None, pattern=_ID_PATTERN, description="Only this user's; null: every user.")
    time_from: AwareDatetime | None = Field(None, description="Content from this time on (inclusive).")
    time_to: AwareDatetime | None = Field(None, description="Content before this time (exclusive).")
    kinds: list[MediaKind] | None = Field(None, description="Only these media kinds; null: every kind.")
    apps: list[str] | None = Field(None, description="Only content captured in these applications; null: all.")
    devices: list[str] | None = Field(None, description="Only content from these device ids; null: all.")
    limit: int = Field(2000, ge=1, le=10_000, description="Observations returned at most.")
    offset: int = Field(0, ge=0, le=100_000, description="Observations skipped (newest first).")

    @field_validator("time_from", "time_to")
    @classmethod
    def _to_utc(cls, value: datetime | None) -> datetime | None:
        return value.astimezone(UTC) if value else None

    @model_validator(mode="after")
    def _ordered(self) -> TimelineRequest:
        if self.time_from and self.time_to and self.time_to <= self.time_from:
            raise ValueError("time_to must be after time_from")
        return self
