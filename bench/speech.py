"""Speech evaluation helpers: WER as the data README defines it, pairwise F1 of speaker labels, and the
references of the real audio files (leopard json, pyannote RTTM) aligned to ASR words.

Used by ``bench/perception.py`` (the figures) and the tests (the floors).
"""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

JFK_REFERENCE = ("And so my fellow Americans, ask not what your country can do for you, ask what you can do for "
                 "your country.")


def normalize(text: str) -> str:
    """Whisper's English text normaliser (``whisper-normalizer``): case, punctuation, spelling, numbers."""
    from whisper_normalizer.english import EnglishTextNormalizer

    return EnglishTextNormalizer()(text)


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate (``jiwer``) of ``hypothesis`` against ``reference``, both normalised first."""
    import jiwer

    return float(jiwer.wer(normalize(reference), normalize(hypothesis)))


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
    from api.local import classify, publish_file
    from schemas.jobs import ObservationBatch
    from workers.ingest import plan
    from workers.perceive import perceive
    from workers.runtime import runtime

    rt = runtime()
    event = publish_file(rt, classify(path), tenant, user, device)
    jobs = plan(rt, event) or []
    batches = [ObservationBatch.model_validate(perceive(job)) for job in jobs]  # the task returns its JSON form
    return [obs for batch in batches for obs in batch.observations]
