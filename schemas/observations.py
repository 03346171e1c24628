"""Observations: single units of perceived content, before consolidation into memories."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

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
        None, description="Speaker embedding of this speech segment (resemblyzer d-vector, 256-d, L2-normalised).")
    speaker_label: str | None = Field(
        None, description="Speaker cluster within one recording (spk0, spk1, ...), before entity linking.")
    speaker_voices: list[SpeakerVoice] = Field(
        default_factory=list, description="A clip segment's speakers, each with their voice (longest talker first; "
        "``voice_embedding``/``speaker_label`` are the first's), so entity linking links every voice of the clip.")
    faces: list[FaceDetection] = Field(default_factory=list)
    caption: str | None = Field(None, description="Caption by a vision-language model, when one is configured.")
    entity_ids: list[str] = Field(default_factory=list)
    context_before: list[str] = Field(
        default_factory=list, description="Texts of the chat turns just before this one in its session (nearest "
        "last), indexed with it (contextual retrieval); not part of its text.")
    context_after: list[str] = Field(
        default_factory=list, description="Texts of the chat turns just after this one in its session (nearest "
        "first), indexed with it.")

    @field_validator("captured_at")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        return value.astimezone(UTC)


class EmbeddedObservation(BaseModel):
    """An observation with its vectors: dense ``text`` (384 float32, L2-normalised), sparse ``bm25`` and
    ``sentences``, the multivector its dense search scores by MaxSim (``workers.memory.vectors.dense_vectors``):
    ``dense`` first, then one vector per sentence of a short turn of several sentences (None: ``dense`` alone)."""

    observation: Observation
    dense: list[float]
    sparse_indices: list[int]
    sparse_values: list[float]
    sentences: list[list[float]] | None = None
