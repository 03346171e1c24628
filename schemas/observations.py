"""Observations: single units of perceived content, before consolidation into memories."""

from __future__ import annotations

import array
import base64
import binascii
import sys
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, field_validator

from engram.schemas.events import MediaKind


class OcrLine(BaseModel):
    """One OCR'd text line: its text, recognition confidence in [0, 1] and box (x0, y0, x1, y1) in pixels."""

    text: str
    confidence: float
    box: tuple[float, float, float, float]


class WordTiming(BaseModel):
    """One recognised word: its text, start/end in seconds from the start of the recording, and the ASR's
    probability in [0, 1]."""

    word: str
    start_s: float = Field(ge=0)
    end_s: float = Field(ge=0)
    probability: float | None = None


class FaceDetection(BaseModel):
    """One detected face: box (x0, y0, x1, y1) in pixels of the full-size frame, its 128-d embedding (dlib's
    ResNet face descriptor, ``workers.models.faces``; faces of one person lie within about 0.6 Euclidean
    distance), the frame's offset into the recording in seconds (clips) and, after linking, its entity."""

    box: tuple[float, float, float, float]
    embedding: list[float] = Field(min_length=128, max_length=128)
    frame_s: float | None = Field(None, ge=0)
    entity_id: str | None = None


class SpeakerVoice(BaseModel):
    """One speaker's voice in a clip segment: the speaker cluster (``spk0``, ...), the duration-weighted mean of
    their utterances' voice embeddings (Resemblyzer d-vector, 256-d, L2-normalised) and how long they talk, in
    seconds."""

    speaker_label: str
    embedding: list[float] = Field(min_length=256, max_length=256)
    seconds: float = Field(ge=0)


class Observation(BaseModel):
    """One unit of perceived content.

    An OCR'd screenshot, a transcribed audio segment (``start_s``/``end_s`` in seconds from the start of
    the recording), a clip segment's keyframe text plus transcript, or one chat message. ``id`` is a
    UUIDv5 of (tenant, event id, segment index, point kind), so perceiving twice writes the same point.
    """

    model_config = ConfigDict(extra="forbid")

    id: uuid.UUID
    tenant_id: str
    user_id: str
    device_id: str
    event_id: uuid.UUID
    kind: MediaKind
    segment_index: int = Field(ge=0)
    text: str
    captured_at: AwareDatetime = Field(description="When the observed content happened (UTC).")
    start_s: float | None = Field(None, ge=0, description="Offset into the recording, seconds.")
    end_s: float | None = Field(None, ge=0)
    object_key: str
    source_name: str | None = None
    app: str | None = None
    window: str | None = None
    # conversation provenance
    message_id: str | None = None
    session_id: str | None = None
    speaker: str | None = None
    # perception details
    ocr_lines: list[OcrLine] = Field(default_factory=list)
    transcript: str | None = None
    language: str | None = None
    words: list[WordTiming] = Field(default_factory=list)
    voice_embedding: list[float] | None = Field(
        None, description="Speaker embedding of this speech segment (resemblyzer d-vector, 256-d, L2-normalised)."
    )
    speaker_label: str | None = Field(
        None, description="Speaker cluster within one recording (spk0, spk1, ...), before entity linking."
    )
    speaker_voices: list[SpeakerVoice] = Field(
        default_factory=list,
        description="A clip segment's speakers, each with their voice (longest talker first; "
        "``voice_embedding``/``speaker_label`` are the first's), so entity linking links every voice of the clip.",
    )
    faces: list[FaceDetection] = Field(default_factory=list)
    caption: str | None = Field(None, description="Caption by a vision-language model, when one is configured.")
    pixel_digests: dict[str, str] = Field(
        default_factory=dict,
        description="The sha256 of the pixels of each image read with OCR for this observation (a screenshot's "
        "original, a clip segment's keyframes), by the image's object key: the OCR cache's keys, so a forget deletes "
        "the cached text without decoding the image.",
    )
    entity_ids: list[str] = Field(default_factory=list)
    context_before: list[str] = Field(
        default_factory=list,
        description="Texts of the chat turns just before this one in its session (nearest "
        "last), indexed with it (contextual retrieval); not part of its text.",
    )
    context_after: list[str] = Field(
        default_factory=list,
        description="Texts of the chat turns just after this one in its session (nearest first), indexed with it.",
    )

    @field_validator("captured_at")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        return value.astimezone(UTC)


def pack_float32(vector: list[float]) -> str:
    """``vector`` as the base64 text of its values as float32, little-endian (4 bytes each): a 384-d embedding in
    2,048 characters instead of ~8,000 of JSON numbers, and ~10x less CPU to write and read than JSON's float
    text. Exact for the model's float32 vectors; a float64 is rounded to float32, as the vector store keeps it.
    Raises TypeError for an item that is not a number."""
    values = array.array("f", vector)
    if sys.byteorder == "big":
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def unpack_float32(value: Any) -> Any:
    """The list of floats ``pack_float32`` wrote into ``value``; anything but a string is returned as it is (a list
    of numbers, validated as one). Raises ValueError for text that is not base64 of whole float32 values."""
    if not isinstance(value, str):
        return value
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("a packed vector must be base64 text of float32 values") from exc
    if len(raw) % 4:
        raise ValueError(f"a packed vector holds whole float32 values (4 bytes each), not {len(raw)} bytes")
    values = array.array("f")
    values.frombytes(raw)
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


#: A vector that is a list of floats in Python and, in JSON (a broker message), ``pack_float32``'s base64 text;
#: read from either form. JSON's float text made an embedded chat segment's message (4 observations, ~2,000
#: floats each) 162 kB and cost ~8 ms of CPU to dump, write and read; packed: ~47 kB and ~1 ms (issue 15).
Float32Vector = Annotated[
    list[float], BeforeValidator(unpack_float32), PlainSerializer(pack_float32, return_type=str, when_used="json")
]


class EmbeddedObservation(BaseModel):
    """An observation with its vectors: dense ``text`` (384 float32, L2-normalised), sparse ``bm25`` and
    ``sentences``, the multivector its dense search scores by MaxSim (``workers.memory.embedding.dense_vectors``):
    ``dense`` first, then one vector per sentence of a short turn of several sentences (None: ``dense`` alone).
    The dense vectors travel between workers packed (``Float32Vector``); a message with lists of numbers, as
    earlier releases wrote, is read too."""

    observation: Observation
    dense: Float32Vector
    sparse_indices: list[int]
    sparse_values: list[float]
    sentences: list[Float32Vector] | None = None
