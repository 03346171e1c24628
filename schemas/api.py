"""Bodies of the HTTP API (``api/http/app.py``) and its producer SDK (``api/client.py``).

The tenant of every request comes from its API key: bodies may leave ``tenant_id`` out; one that names
another tenant is refused (403).
"""

from __future__ import annotations

import re
import unicodedata
import uuid

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from engram.schemas.events import _ID_PATTERN, SHA256_PATTERN, EventStatus, LedgerRecord, MediaEvent, MediaKind
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

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "sha256": "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef",
                    "size": 48213,
                    "mime_type": "image/png",
                },
            ]
        },
    )

    sha256: str = Field(
        pattern=SHA256_PATTERN,
        description="Lowercase hex SHA-256 of the bytes to upload (64 characters): the object's content address.",
    )
    size: int = Field(ge=0, description="Object size in bytes.")
    mime_type: str = Field(
        max_length=128,
        description="Media type of the bytes, e.g. image/png, audio/wav, video/mp4, "
        "application/x-ndjson; it decides the object key's extension and which event kinds may publish it (422 when "
        "unsupported).",
    )


class UploadResponse(BaseModel):
    """Where to PUT the bytes. ``exists``: the object is already stored with this size, skip the PUT.
    ``url`` expires after ``expires_in`` seconds; it is empty when ``exists``."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "object_key": "media/acme/5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef.png",
                    "url": "https://s3.example.com/engram/staging/acme/5f70bf18.png?X-Amz-Signature=9c1e07",
                    "exists": False,
                    "expires_in": 900,
                },
            ]
        }
    )

    object_key: str = Field(
        description="The content-addressed key the object is stored at, media/<tenant>/<sha256>.<ext>; publish the "
        "event with it (or leave object_key out)."
    )
    url: str = Field(description="Presigned URL to PUT the bytes to (a staging key of its own); empty when exists.")
    exists: bool = Field(description="True when the object is already stored with this size: skip the PUT and publish.")
    expires_in: int = Field(description="Seconds until url expires (ENGRAM_UPLOAD_URL_EXPIRY_SECONDS); 0 when exists.")


class PublishRequest(MediaEvent):
    """A ``MediaEvent`` as a device publishes it: ``tenant_id`` and ``object_key`` may be left out (they
    follow from the API key and from sha256 + mime type). What a device sends is checked harder than
    what the embedded CLI records from local files: names, titles and metadata hold no control
    characters, and names (source_name, app, metadata keys) do not climb paths (``..``)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "event_id": "3f2b8c1e-6f0a-4d9b-9a57-0c8e2d6b1a42",
                    "user_id": "alice",
                    "device_id": "laptop-1",
                    "kind": "screenshot",
                    "sha256": "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef",
                    "size": 48213,
                    "mime_type": "image/png",
                    "captured_at": "2024-05-02T09:30:00Z",
                    "source_name": "Screenshot 2024-05-02 at 09.30.png",
                    "app": "Firefox",
                    "window": "Q2 budget review - Sheets",
                },
            ]
        }
    )

    # optional here though the base requires it: the API fills it in from the key before the base is built
    tenant_id: str | None = Field(  # type: ignore[assignment]
        None, pattern=_ID_PATTERN, description="Left out: the API key's tenant. Another tenant than the key's: 403."
    )
    object_key: str | None = Field(  # type: ignore[assignment]  # filled in by the API from the upload
        None,
        min_length=1,
        max_length=512,
        description="Left out: the key POST /v1/uploads returned for (sha256, mime_type); given, it must be that key.",
    )

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

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"event_id": "3f2b8c1e-6f0a-4d9b-9a57-0c8e2d6b1a42", "status": "queued", "duplicate": False},
            ]
        }
    )

    event_id: uuid.UUID = Field(description="The event's id (idempotency key).")
    status: EventStatus = Field(
        description="The event's ledger status: queued after a first publish, its current status for a duplicate."
    )
    duplicate: bool = Field(
        False, description="True when this event id was published before: nothing was enqueued again."
    )


class EventStatusResponse(BaseModel):
    """An event's ledger status: ``stage`` and ``reason`` say where and why it was skipped or failed."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "event_id": "3f2b8c1e-6f0a-4d9b-9a57-0c8e2d6b1a42",
                    "kind": "screenshot",
                    "status": "done",
                    "stage": "store",
                    "segments_total": 1,
                    "segments_done": 1,
                    "observations": 1,
                    "updated_at": "2024-05-02T09:30:07Z",
                },
            ]
        }
    )

    event_id: uuid.UUID = Field(description="The event's id.")
    kind: MediaKind = Field(description="What the event carries: screenshot, audio, clip or text.")
    status: EventStatus = Field(description="queued, processing, done, skipped or failed (the last three are final).")
    stage: str | None = Field(
        None,
        description="The pipeline stage it is in, or where it was skipped or failed (ingest, perceive, embed, "
        "link, store).",
    )
    reason: str | None = Field(None, description="Why it was skipped or failed, one line; null otherwise.")
    segments_total: int | None = Field(
        None,
        description="Segments ingest cut the event into (clip segments, audio chunks, chat batches); null "
        "before ingest ran.",
    )
    segments_done: int = Field(0, description="Segments stored so far.")
    observations: int = Field(0, description="Observations stored for the event so far.")
    updated_at: AwareDatetime = Field(description="When the status last changed (UTC).")


class EventList(BaseModel):
    """``GET /v1/events``: the tenant's events (one user's when asked), most recently changed first, optionally of
    one status, and how many of all the tenant's events are in each status (the web app's Activity screen)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "items": [
                        {
                            "event_id": "3f2b8c1e-6f0a-4d9b-9a57-0c8e2d6b1a42",
                            "tenant_id": "acme",
                            "user_id": "alice",
                            "device_id": "laptop",
                            "kind": "screenshot",
                            "object_key": "media/acme/" + "ab" * 32 + ".png",
                            "sha256": "ab" * 32,
                            "status": "failed",
                            "stage": "ingest",
                            "reason": "the object is gone",
                            "segments_done": 0,
                            "observations": 0,
                            "updated_at": "2024-05-02T09:30:07Z",
                        }
                    ],
                    "counts": {"queued": 0, "processing": 0, "done": 41, "skipped": 2, "failed": 1},
                },
            ]
        }
    )

    items: list[LedgerRecord] = Field(description="The events' ledger records, most recently changed first.")
    counts: dict[EventStatus, int] = Field(description="The tenant's events per status (all users).")


class SearchQuery(SearchRequest):
    """A ``SearchRequest`` whose tenant follows from the API key (``tenant_id`` may be left out)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "query": "when is the budget review",
                    "user_id": "alice",
                    "kinds": ["screenshot", "text"],
                    "time_from": "2024-05-01T00:00:00Z",
                    "limit": 5,
                },
            ]
        }
    )

    # optional here though the base requires it: the API fills it in from the key before the base is built
    tenant_id: str | None = Field(  # type: ignore[assignment]
        None, description="Left out: the API key's tenant. Another tenant than the key's: 403."
    )


class ApiError(BaseModel):
    """Every 4xx/5xx body: ``detail`` is a one-line message, or for invalid bodies a list of
    ``{loc, msg, type}`` items naming each invalid field."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"detail": "invalid API key"},
            ]
        }
    )

    detail: str | list[dict] = Field(
        description="A one-line message, or for an invalid request a list of {loc, msg, type} items naming each "
        "invalid field (the input is not echoed back)."
    )
