"""Per-upload bounds on the work ingest plans: what the bytes hold, never what a header claims.

A container's header (an MP4's sample tables, a WAV's data size, FLAC's STREAMINFO) may claim any duration.
Ingest therefore measures media by decoding it (``media.decode.audio_blocks``, ``media.decode.keyframes``), and
an ``UploadBudget`` stops the planning of one upload as soon as it passes a limit of the settings:

- ``max_upload_media_seconds``: the decoded timeline (the last video frame's time, or the audio samples
  decoded, in seconds);
- ``max_upload_segments``: segments (clip segments, audio chunks, chat batches) dispatched to perceive;
- ``max_upload_derived_bytes``: bytes of the objects ingest derives from it (audio chunks, keyframes).

Passing one raises ``LimitExceeded``, a ``MediaError``: ``workers.runtime.stage`` marks the event failed
with the stage and the one-line reason, without retrying (the input will not change). Silent or empty media
is no error: ``silent`` tells the planner that a block of samples holds no sound, and the planner skips the
event with its reason.
"""

from __future__ import annotations

import numpy as np

from engram.schemas.settings import Settings
from engram.workers.media.decode import SAMPLE_RATE, MediaError
from engram.workers.stores.objects import ObjectStore


class LimitExceeded(MediaError):
    """An upload needs more work than a per-upload limit allows; ``str()`` names the limit and its setting."""


def silent(samples: np.ndarray, threshold_dbfs: float) -> bool:
    """Whether float32 samples in [-1, 1] (any shape) hold no sound: their peak is below ``threshold_dbfs``
    (decibels relative to full scale; -60 dBFS is an amplitude of 0.001). An empty array is silent."""
    if samples.size == 0:
        return True
    return float(np.max(np.abs(samples))) < 10.0 ** (threshold_dbfs / 20.0)


class UploadBudget:
    """The work one upload may still cause, from ``settings``; ``objects`` is where derived objects go.

    Counters: ``segments`` planned, ``derived_bytes`` written. Raises ``LimitExceeded`` before a limit is
    passed, so nothing beyond it is written."""

    def __init__(self, settings: Settings, objects: ObjectStore, declared_seconds: float | None = None) -> None:
        self.settings = settings
        self.objects = objects
        self.declared_seconds = declared_seconds  # what the header claims, quoted in reasons only
        self.segments = 0
        self.derived_bytes = 0

    def _declared(self) -> str:
        return f"; the header declares {self.declared_seconds:,.0f} s" if self.declared_seconds else ""

    @property
    def max_samples(self) -> int:
        """Audio samples at 16 kHz that ``max_upload_media_seconds`` allows."""
        return int(self.settings.max_upload_media_seconds * SAMPLE_RATE)

    def check_seconds(self, seconds: float, what: str) -> None:
        """Raise LimitExceeded when ``seconds`` of decoded media (``what``: e.g. "audio decoded", "video
        timeline") pass ``max_upload_media_seconds``."""
        limit = self.settings.max_upload_media_seconds
        if seconds > limit:
            raise LimitExceeded(
                f"limit exceeded: {what} runs past {limit:,.0f} s (ENGRAM_MAX_UPLOAD_MEDIA_SECONDS){self._declared()}"
            )

    def add_segment(self) -> None:
        """Count one more planned segment; raise LimitExceeded past ``max_upload_segments``."""
        self.check_segments(self.segments + 1)
        self.segments += 1

    def check_segments(self, n: int) -> None:
        """Raise LimitExceeded when ``n`` segments pass ``max_upload_segments``."""
        limit = self.settings.max_upload_segments
        if n > limit:
            raise LimitExceeded(
                f"limit exceeded: more than {limit:,} segments (ENGRAM_MAX_UPLOAD_SEGMENTS){self._declared()}"
            )

    def put(self, key: str, data: bytes, content_type: str) -> None:
        """Write one derived object, counting its bytes; raise LimitExceeded (writing nothing) when it would
        pass ``max_upload_derived_bytes``."""
        limit = self.settings.max_upload_derived_bytes
        if self.derived_bytes + len(data) > limit:
            raise LimitExceeded(
                f"limit exceeded: derived objects pass {limit:,} bytes "
                f"(ENGRAM_MAX_UPLOAD_DERIVED_BYTES){self._declared()}"
            )
        self.objects.put_bytes(key, data, content_type)
        self.derived_bytes += len(data)
