"""What the pipeline stages pass to one another through the broker (ids and object keys, never bytes)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from engram.schemas.events import MediaEvent
from engram.schemas.observations import EmbeddedObservation, Observation


class Keyframe(BaseModel):
    """A keyframe cut out of a clip by ingest: its time (s from the clip start) and object key (JPEG)."""

    t: float
    object_key: str


class SegmentJob(BaseModel):
    """One bounded unit of perception work made by ingest.

    - screenshot: ``segment_index`` 0, the event's object is the image;
    - audio: one chunk whose core is ``start_s``..``end_s`` of the recording; ``audio_key`` is a 16 kHz mono
      WAV starting at ``audio_start_s`` that also covers the overlap with the neighbouring chunks (words
      there are kept by the chunk whose core holds their midpoint);
    - clip: one 30 s segment, its ``keyframes`` and the ``audio_key`` of its audio track;
    - text: conversation messages ``first_message``..``last_message`` (exclusive) of the event's object.
    """

    event: MediaEvent
    segment_index: int = Field(ge=0)
    start_s: float | None = None
    end_s: float | None = None
    audio_key: str | None = None
    audio_start_s: float | None = Field(
        None, ge=0, description="Where the audio_key WAV starts in the recording, seconds (None: at start_s)."
    )
    keyframes: list[Keyframe] = Field(default_factory=list)
    first_message: int | None = None
    last_message: int | None = None


class ObservationBatch(BaseModel):
    """perceive's output: the observations of one segment."""

    job: SegmentJob
    observations: list[Observation]


class EmbeddedBatch(BaseModel):
    """embed's and link's output: the observations of one segment with their vectors."""

    job: SegmentJob
    items: list[EmbeddedObservation]
