"""Bodies of the HTTP API (``api/app.py``) and its producer SDK (``api/client.py``).

The tenant of every request comes from its API key: bodies may leave ``tenant_id`` out; one that names
another tenant is refused (403).
"""

from __future__ import annotations

import re
import unicodedata
import uuid

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from engram.schemas.events import _ID_PATTERN, SHA256_PATTERN, EventStatus, MediaEvent, MediaKind
from engram.schemas.search import SearchRequest

_SEGMENTS = re.compile(r"[/\\]")


def check_no_control_chars(value: str) -> str:
    """``value`` unchanged; raises ValueError if it holds a control character (Unicode category Cc:
    NUL, newline, tab, escape, DEL, C1 codes). Names and titles are one line of printable text."""
    for ch in value:
        if unicodedata.category(ch) == "Cc":
            raise ValueError(f"control character U+{ord(ch):04X} not allowed")
    return value


def check_no_traversal(value: str) -> str:
    """``value`` unchanged; raises ValueError if one of its ``/`` or ``\\`` separated parts is ``..``."""
    if any(part == ".." for part in _SEGMENTS.split(value)):
        raise ValueError("path traversal ('..') not allowed")
    return value


class UploadRequest(BaseModel):
    """Ask for a presigned PUT URL for content the client hashed: lowercase hex sha256, size in bytes."""

    model_config = ConfigDict(extra="forbid")

    sha256: str = Field(pattern=SHA256_PATTERN)
    size: int = Field(ge=0, description="Object size in bytes.")
    mime_type: str = Field(max_length=128)


class UploadResponse(BaseModel):
    """Where to PUT the bytes. ``exists``: the object is already stored with this size, skip the PUT.
    ``url`` expires after ``expires_in`` seconds; it is empty when ``exists``."""

    object_key: str
    url: str
    exists: bool
    expires_in: int


class PublishRequest(MediaEvent):
    """A ``MediaEvent`` as a device publishes it: ``tenant_id`` and ``object_key`` may be left out (they
    follow from the API key and from sha256 + mime type). What a device sends is checked harder than
    what the embedded CLI records from local files: names, titles and metadata hold no control
    characters, and names (source_name, app, metadata keys) do not climb paths (``..``)."""

    tenant_id: str | None = Field(None, pattern=_ID_PATTERN)
    object_key: str | None = Field(None, min_length=1, max_length=512)

    @field_validator("source_name", "app", "window")
    @classmethod
    def _printable(cls, value: str | None, info) -> str | None:
        if value is None:
            return None
        check_no_control_chars(value)
        return value if info.field_name == "window" else check_no_traversal(value)

    @field_validator("metadata")
    @classmethod
    def _printable_metadata(cls, value: dict[str, str]) -> dict[str, str]:
        for k, v in value.items():
            check_no_traversal(check_no_control_chars(k))
            check_no_control_chars(v)
        return value


class PublishResponse(BaseModel):
    """The event's status after publishing. ``duplicate``: this event id was published before and was
    not enqueued again (``status`` is then its current status)."""

    event_id: uuid.UUID
    status: EventStatus
    duplicate: bool = False


class EventStatusResponse(BaseModel):
    """An event's ledger status: ``stage`` and ``reason`` say where and why it was skipped or failed."""

    event_id: uuid.UUID
    kind: MediaKind
    status: EventStatus
    stage: str | None = None
    reason: str | None = None
    segments_total: int | None = None
    segments_done: int = 0
    observations: int = 0
    updated_at: AwareDatetime


class SearchQuery(SearchRequest):
    """A ``SearchRequest`` whose tenant follows from the API key (``tenant_id`` may be left out)."""

    tenant_id: str | None = None


class ApiError(BaseModel):
    """Every 4xx/5xx body: ``detail`` is a one-line message, or for invalid bodies a list of
    ``{loc, msg, type}`` items naming each invalid field."""

    detail: str | list[dict]
