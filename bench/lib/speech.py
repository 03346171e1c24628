"""Speech evaluation helpers: WER as the data README defines it, pairwise F1 of speaker labels, and the
references of the real audio files (leopard json, pyannote RTTM) aligned to ASR words.

Used by ``bench/perception.py`` (quality), ``bench/perception_speed.py`` (speed) and the tests (the floors).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import resource
import tempfile
import time
from collections import Counter
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

JFK_REFERENCE = (
    "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
)


def normalize(text: str) -> str:
    """Whisper's English text normaliser (``whisper-normalizer``): case, punctuation, spelling, numbers."""
    from whisper_normalizer.english import EnglishTextNormalizer

    return EnglishTextNormalizer()(text)


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate (``jiwer``) of ``hypothesis`` against ``reference``, both normalised first."""
    import jiwer

    return float(jiwer.wer(normalize(reference), normalize(hypothesis)))


def wer_basic(reference: str, hypothesis: str) -> float:
    """WER after Whisper's language-independent basic normaliser (case, punctuation): for non-English text."""
    import jiwer
    from whisper_normalizer.basic import BasicTextNormalizer

    norm = BasicTextNormalizer()
    return float(jiwer.wer(norm(reference), norm(hypothesis)))


def cosine_distance(a, b) -> float:
    """1 - cosine similarity of two vectors (0: same direction)."""
    import numpy as np

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(1.0 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def pairwise_f1(reference: Sequence[Hashable], predicted: Sequence[Hashable]) -> tuple[float, float, float]:
    """(precision, recall, F1) over all pairs of items: a pair is positive when both items share a label;
    predicted-positive pairs are checked against reference-positive ones. Items with a None label on either
    side are left out. Returns (1, 1, 1) when there are no reference pairs and none predicted."""
    items = [(r, p) for r, p in zip(reference, predicted, strict=True) if r is not None and p is not None]
    pairs = lambda counts: sum(n * (n - 1) // 2 for n in counts.values())  # noqa: E731
    both = pairs(Counter(items))
    ref, pred = pairs(Counter(r for r, _ in items)), pairs(Counter(p for _, p in items))
    precision = both / pred if pred else 1.0
    recall = both / ref if ref else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def _token(word: str) -> str:
    return re.sub(r"[^\w']", "", word.lower())


def align_labels(reference: Sequence[tuple[str, Hashable]], words: Sequence[str]) -> list[Hashable | None]:
    """The reference label of each of ``words`` (ASR output, in order) through a word alignment with the
    reference ``(word, label)`` sequence (difflib's longest matching blocks on lower-cased words without
    punctuation); None for ASR words that match no reference word."""
    ref_tokens = [_token(w) for w, _ in reference]
    hyp_tokens = [_token(w) for w in words]
    out: list[Hashable | None] = [None] * len(words)
    matcher = difflib.SequenceMatcher(a=ref_tokens, b=hyp_tokens, autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            out[block.b + k] = reference[block.a + k][1]
    return out


@dataclass(frozen=True)
class Turn:
    """One reference speaker turn (RTTM): start and end in seconds and the speaker."""

    start: float
    end: float
    speaker: str


def read_rttm(path: Path) -> list[Turn]:
    """The SPEAKER lines of an RTTM file (NIST): onset in field 4, duration in field 5, speaker in field 8."""
    turns = []
    for line in path.read_text().splitlines():
        f = line.split()
        if f and f[0] == "SPEAKER":
            start, dur = float(f[3]), float(f[4])
            turns.append(Turn(start, start + dur, f[7]))
    return turns


def speaker_at(turns: Sequence[Turn], t: float) -> str | None:
    """The one reference speaker talking at ``t`` seconds, or None (silence or overlapping speakers)."""
    active = {x.speaker for x in turns if x.start <= t < x.end}
    return active.pop() if len(active) == 1 else None


def leopard_tests(audio_dir: Path) -> dict:
    """``leopard_test_data.json``'s ``tests`` object (language_tests and diarization_tests)."""
    return json.loads((audio_dir / "leopard_test_data.json").read_text())["tests"]


def leopard_reference(audio_dir: Path, audio_file: str) -> str:
    """The reference transcript of a leopard language test file (``test.wav``, ``test_es.wav``, ...)."""
    return next(t["transcript"] for t in leopard_tests(audio_dir)["language_tests"] if t["audio_file"] == audio_file)


def leopard_speaker_words(audio_dir: Path) -> list[tuple[str, int]]:
    """(word, speaker_tag) of ``leopard_diarization_test.wav``'s reference, in order."""
    words = leopard_tests(audio_dir)["diarization_tests"][0]["words"]
    return [(w["word"], w["speaker_tag"]) for w in words]


def perceive_file(path: Path, tenant: str = "bench", user: str = "bench", device: str = "bench") -> list:
    """The observations of a media file through engram's real ingest plan and perceive task (no embedding,
    no store), on the runtime of the current settings. Raises MediaError for bad media."""
    from engram.api.local import classify, publish_file
    from engram.schemas.jobs import ObservationBatch
    from engram.workers.ingest import plan
    from engram.workers.perceive import perceive
    from engram.workers.runtime import runtime

    rt = runtime()
    event = publish_file(rt, classify(path), tenant, user, device)
    jobs = plan(rt, event) or []
    batches = [ObservationBatch.model_validate(perceive(job)) for job in jobs]  # the task returns its JSON form
    return [obs for batch in batches for obs in batch.observations]


@contextmanager
def settings_env(**variables: str) -> Iterator[None]:
    """Set ``ENGRAM_*`` environment variables for the duration (the runtime re-reads settings per task)."""
    old = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main_voice(observations: list):
    """The voice of the speaker who talks longest in ``observations``: the duration-weighted mean of their
    utterances' voice embeddings, L2-normalised (256,). Raises ValueError when no observation has a voice."""
    import numpy as np

    talk: Counter = Counter()
    for o in observations:
        if o.voice_embedding is not None:
            talk[o.speaker_label] += o.end_s - o.start_s
    if not talk:
        raise ValueError("no observation carries a voice embedding")
    speaker = talk.most_common(1)[0][0]
    vec = sum(
        np.asarray(o.voice_embedding) * (o.end_s - o.start_s)
        for o in observations
        if o.speaker_label == speaker and o.voice_embedding is not None
    )
    return vec / np.linalg.norm(vec)


def half_voices(path: Path) -> tuple:
    """The main voices of the two halves of a recording, each perceived as a recording of its own."""
    from engram.workers.media import decode as media

    audio = media.decode_audio(path)
    mid = len(audio) // 2
    with tempfile.TemporaryDirectory(prefix="engram-halves-") as tmp:
        voices = []
        for i, part in enumerate((audio[:mid], audio[mid:])):
            half = Path(tmp) / f"{path.stem}-half{i}.wav"
            half.write_bytes(media.wav_bytes(part))
            voices.append(main_voice(perceive_file(half)))
    return tuple(voices)


def looped_recording(audio_dir: Path, out: Path, seconds: float) -> Path:
    """A FLAC of ``seconds`` made by looping the real English recordings (jfk, leopard, pyannote) with 1 s of
    silence between them, written as a stream with PyAV (never held whole in memory)."""
    import av
    import numpy as np

    from engram.workers.media import decode as media

    parts = [
        media.decode_audio(audio_dir / n)
        for n in ("jfk.flac", "leopard_test.wav", "leopard_diarization_test.wav", "pyannote_sample.wav")
    ]
    gap = np.zeros(media.SAMPLE_RATE, dtype=np.float32)
    with av.open(str(out), "w") as container:
        stream = container.add_stream("flac", rate=media.SAMPLE_RATE, layout="mono")
        written, i = 0, 0
        while written < seconds * media.SAMPLE_RATE:
            block = np.concatenate([parts[i % len(parts)], gap])
            block = block[: int(seconds * media.SAMPLE_RATE) - written]
            pcm = (np.clip(block, -1, 1) * 32767).astype(np.int16).reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
            frame.sample_rate = media.SAMPLE_RATE
            for packet in stream.encode(frame):
                container.mux(packet)
            written += len(block)
            i += 1
        for packet in stream.encode(None):
            container.mux(packet)
    return out


def transcribe_in_child(path: str, data_dir: str, queue) -> None:
    """Child-process body of the long-recording bench: ingest + perceive ``path`` on a fresh embedded data
    dir and put {peak_rss_mb, seconds, chunks, observations, words} (or {error}) on ``queue``."""
    os.environ["ENGRAM_DATA_DIR"] = str(Path(data_dir) / "data")
    try:
        started = time.perf_counter()
        observations = perceive_file(Path(path), tenant="bench-long")
        queue.put(
            {
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "seconds": time.perf_counter() - started,
                "chunks": len({o.segment_index for o in observations}),
                "observations": len(observations),
                "words": sum(len(o.words) for o in observations),
            }
        )
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        queue.put({"error": f"{type(exc).__name__}: {exc}"})
