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

    event_id: uuid.UUID = Field(
        default_factory=uuid.uuid4,
        description="Idempotency key chosen by the device (UUID); publishing it again "
        "changes nothing. Default: a new one.",
    )
    tenant_id: str = Field(
        pattern=_ID_PATTERN, description="The tenant (letters, digits and ._@:+-, at most 128 characters)."
    )
    user_id: str = Field(
        pattern=_ID_PATTERN, description="Whose media it is (letters, digits and ._@:+-, at most 128 characters)."
    )
    device_id: str = Field(
        pattern=_ID_PATTERN,
        description="The device that captured it (letters, digits and ._@:+-, at most 128 characters).",
    )
    kind: MediaKind = Field(description="What it carries: screenshot, audio, clip or text (a conversation file).")
    object_key: str = Field(
        min_length=1, max_length=512, description="Where the object is stored: media/<tenant>/<sha256>.<ext>."
    )
    sha256: str = Field(pattern=SHA256_PATTERN, description="Lowercase hex SHA-256 of the object's bytes.")
    size: int = Field(ge=0, description="Object size in bytes.")
    mime_type: str = Field(max_length=128, description="Media type of the object, e.g. image/png.")
    captured_at: AwareDatetime = Field(description="When the media was captured, ISO 8601 with a zone (stored as UTC).")
    captured_at_source: str | None = Field(
        None,
        max_length=64,
        description="Where captured_at was read: 'given' (by the caller), the content "
        "('exif:DateTimeOriginal', 'container:creation_time', 'tag:date'), or 'file' (its modification time).",
    )
    source_name: str | None = Field(None, max_length=1024, description="Original file name or path.")
    app: str | None = Field(None, max_length=256, description="Foreground application, if known.")
    window: str | None = Field(None, max_length=1024, description="Window title, if known.")
    metadata: dict[MetadataKey, MetadataValue] = Field(
        default_factory=dict,
        max_length=MAX_METADATA_ITEMS,
        description="Free-form device metadata: at most 64 items, keys ≤ 128 and values ≤ 2048 characters.",
    )

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

    event_id: uuid.UUID = Field(description="The event's id.")
    tenant_id: str = Field(description="Its tenant.")
    user_id: str = Field(description="Whose media it is.")
    device_id: str = Field(description="The device that published it.")
    kind: MediaKind = Field(description="What it carries: screenshot, audio, clip or text.")
    object_key: str = Field(description="Where its object is stored.")
    sha256: str = Field(description="SHA-256 of its object.")
    source_name: str | None = Field(None, description="Original file name or path.")
    status: EventStatus = Field(description="queued, processing, done, skipped or failed.")
    stage: str | None = Field(None, description="The stage it is in, or where it was skipped or failed.")
    reason: str | None = Field(None, description="Why it was skipped or failed.")
    segments_total: int | None = Field(None, description="Segments ingest cut it into; null before ingest ran.")
    segments_done: int = Field(0, description="Segments stored so far.")
    observations: int = Field(0, description="Observations stored so far.")
    created_at: AwareDatetime | None = Field(None, description="When the event was published (recorded).")
    updated_at: AwareDatetime = Field(description="When its status last changed (UTC).")
