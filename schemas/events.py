"""Media events published by edge devices, and their ledger records."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints, field_validator

SHA256_PATTERN = r"^[0-9a-f]{64}$"
_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@:+-]{0,127}$"
MAX_METADATA_ITEMS = 64

MetadataKey = Annotated[str, StringConstraints(min_length=1, max_length=128)]
MetadataValue = Annotated[str, StringConstraints(max_length=2048)]


class MediaKind(StrEnum):
    """What an event carries: a screenshot image, an audio recording, a video clip or chat text."""

    screenshot = "screenshot"
    audio = "audio"
    clip = "clip"
    text = "text"


class MediaEvent(BaseModel):
    """One piece of media published by a device, stored at ``object_key`` in the object store.

    ``object_key`` is content addressed: ``media/<tenant>/<sha256>.<ext>``. ``captured_at`` is UTC.
    """

    model_config = ConfigDict(extra="forbid")

    event_id: uuid.UUID = Field(default_factory=uuid.uuid4)
    tenant_id: str = Field(pattern=_ID_PATTERN)
    user_id: str = Field(pattern=_ID_PATTERN)
    device_id: str = Field(pattern=_ID_PATTERN)
    kind: MediaKind
    object_key: str = Field(min_length=1, max_length=512)
    sha256: str = Field(pattern=SHA256_PATTERN)
    size: int = Field(ge=0, description="Object size in bytes.")
    mime_type: str = Field(max_length=128)
    captured_at: AwareDatetime
    captured_at_source: str | None = Field(
        None, max_length=64, description="Where captured_at was read: 'given' (by the caller), the content "
        "('exif:DateTimeOriginal', 'container:creation_time', 'tag:date'), or 'file' (its modification time).")
    source_name: str | None = Field(None, max_length=1024, description="Original file name or path.")
    app: str | None = Field(None, max_length=256, description="Foreground application, if known.")
    window: str | None = Field(None, max_length=1024, description="Window title, if known.")
    metadata: dict[MetadataKey, MetadataValue] = Field(
        default_factory=dict, max_length=MAX_METADATA_ITEMS,
        description="Free-form device metadata: at most 64 items, keys ≤ 128 and values ≤ 2048 characters.")

    @field_validator("captured_at")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        return value.astimezone(UTC)


class EventStatus(StrEnum):
    """Ledger states. ``done``, ``skipped`` and ``failed`` are final."""

    queued = "queued"
    processing = "processing"
    done = "done"
    skipped = "skipped"
    failed = "failed"


class LedgerRecord(BaseModel):
    """The ledger's view of one event: its status and, when skipped or failed, the stage and reason."""

    event_id: uuid.UUID
    tenant_id: str
    user_id: str
    device_id: str
    kind: MediaKind
    object_key: str
    sha256: str
    source_name: str | None = None
    status: EventStatus
    stage: str | None = None
    reason: str | None = None
    segments_total: int | None = None
    segments_done: int = 0
    observations: int = 0
    created_at: AwareDatetime | None = Field(None, description="When the event was published (recorded).")
    updated_at: AwareDatetime
