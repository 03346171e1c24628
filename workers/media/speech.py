"""The audio half of perceive: speech-to-text of one chunk, stitching at chunk seams, and speakers.

Called by the ``perceive`` task in the worker process; models come from the per-process registry
(``workers.models.get_model``: loaded lazily, once).

- **Seams.** Ingest cuts long audio into chunks that overlap their neighbours (``audio_chunk_overlap_seconds``
  on each side of the chunk's *core* ``job.start_s``..``job.end_s``). A word belongs to the chunk whose core
  holds its midpoint, so a word near a seam is heard whole by both chunks and kept by exactly one.
- **Speakers** (diarization by clustering, as in Wang et al., "Speaker Diarization with LSTM", ICASSP 2018):
  Resemblyzer d-vectors of sliding windows (``speaker_window_seconds``, hop ``speaker_hop_seconds``) over the
  speech, smoothed over their neighbours (``speaker_smoothing_seconds``), agglomerative clustering (average
  linkage, cosine distance, a threshold instead of a speaker count: ``speaker_distance_threshold``; clusters
  of fewer than ``speaker_min_windows`` windows join the nearest). Voices closer than the threshold (two similar
  speakers) are one cluster there, so, opt-in (``speaker_spectral``; see ``speaker_labels``), when it finds one
  speaker a single-vs-multi test (a 1- vs 2-component GMM on the windows' affinities, compared by BIC) decides
  whether the recording has more, and if so spectral clustering (refined affinity, number of speakers by the
  normalised maximum eigengap) splits them: the multi-stage scheme of Wang et al., "Highly Efficient Real-Time
  Streaming and Fully On-Device Speaker Diarization with Multi-Stage Clustering", 2022, with Park et al.'s NME
  auto-tuning (IEEE SPL 2019), through Google's ``spectralcluster`` library. Each word takes the speaker of the
  window centred nearest its midpoint, and segments are split where the speaker changes, so every utterance has
  one speaker. Labels (``spk0``, ``spk1``, ... in order of first appearance) are local to the chunk; the voice
  embedding of each utterance is what links voices across chunks and recordings, and stage ``link`` makes the
  labels recording-wide.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engram.schemas.jobs import SegmentJob
from engram.workers.media import decode as media
from engram.workers.metrics import model_timer
from engram.workers.models import get_model
from engram.workers.models.asr import Segment, Word
from engram.workers.runtime import Runtime


@dataclass(frozen=True)
class Utterance:
    """Consecutive words of one ASR segment spoken by one speaker; times in seconds from the start of the
    recording. ``voice`` is the mean of its windows' d-vectors, L2-normalised (256-d), or None when
    speaker embedding is off."""

    start: float
    end: float
    text: str
    words: tuple[Word, ...]
    speaker: str | None = None
    voice: np.ndarray | None = None


@dataclass(frozen=True)
class ChunkTranscript:
    """What perceive makes of one chunk: its utterances in time order and the language."""

    utterances: list[Utterance]
    language: str


def words_text(words: tuple[Word, ...] | list[Word]) -> str:
    """The text of consecutive words (Whisper's words carry their leading space)."""
    return "".join(w.word for w in words).strip()


def keep_core(segments: list[Segment], offset: float, core_start: float, core_end: float | None) -> list[Segment]:
    """Segments of a chunk that starts ``offset`` seconds into the recording, moved to recording time and cut
    to the words whose midpoint lies in ``[core_start, core_end)`` (``core_end`` None: no upper bound)."""
    out = []
    for seg in segments:
        words = tuple(Word(w.start + offset, w.end + offset, w.word, w.probability) for w in seg.words)
        kept = tuple(w for w in words if w.mid >= core_start and (core_end is None or w.mid < core_end))
        if kept:
            out.append(Segment(kept[0].start, kept[-1].end, words_text(kept), kept))
    return out


def window_starts(spans: list[tuple[float, float]], window_s: float, hop_s: float, duration: float) -> list[float]:
    """Start times of the speaker windows over speech ``spans`` (seconds): every ``hop_s`` within each span; a
    span shorter than a window gets one window centred on it. Windows stay within ``[0, duration]`` where the
    audio is long enough."""
    starts: list[float] = []
    latest = max(0.0, duration - window_s)
    for lo, hi in spans:
        if hi - lo <= window_s:
            starts.append(min(max(0.0, (lo + hi - window_s) / 2), latest))
            continue
        n = int(np.ceil((hi - lo - window_s) / hop_s)) + 1
        starts.extend(min(lo + i * hop_s, hi - window_s) for i in range(n))
    return sorted(set(round(s, 3) for s in starts))


def smooth_windows(vectors: np.ndarray, starts: list[float], radius_s: float) -> np.ndarray:
    """Each window's d-vector averaged with those of the windows starting within ``radius_s`` seconds of it,
    L2-normalised again: (n, d) -> (n, d). Damps the noise of short windows before clustering."""
    if radius_s <= 0 or len(vectors) < 2:
        return vectors
    at = np.asarray(starts)
    near = np.abs(at[:, None] - at[None, :]) <= radius_s + 1e-6  # (n, n) neighbourhoods
    mean = near.astype(np.float32) @ vectors
    return mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)


def cluster_speakers(vectors: np.ndarray, threshold: float, min_windows: int = 1) -> np.ndarray:
    """Speaker index per row of ``vectors`` (n, d), unit-length d-vectors: agglomerative clustering with
    average linkage on cosine distance, merging while clusters are closer than ``threshold`` (the number of
    speakers is not known); then clusters of fewer than ``min_windows`` rows join the cluster whose centroid
    is nearest (a handful of noisy windows is no new speaker). Indices are renumbered by first appearance."""
    if len(vectors) < 2:
        return np.zeros(len(vectors), dtype=int)
    from sklearn.cluster import AgglomerativeClustering

    labels = AgglomerativeClustering(
        n_clusters=None, distance_threshold=threshold, metric="cosine", linkage="average"
    ).fit_predict(vectors)
    return absorb_small_clusters(vectors, labels, min_windows)


def absorb_small_clusters(vectors: np.ndarray, labels: np.ndarray, min_windows: int) -> np.ndarray:
    """``labels`` (n,) of unit-length ``vectors`` (n, d) after each cluster of fewer than ``min_windows`` rows,
    smallest first, joined the cluster whose centroid is nearest in cosine similarity; renumbered by first
    appearance (0, 1, ...)."""
    labels = np.asarray(labels).copy()
    while True:
        ids, counts = np.unique(labels, return_counts=True)
        if len(ids) < 2 or counts.min() >= min_windows:
            break
        small = ids[np.argmin(counts)]
        others = [c for c in ids if c != small]
        centroids = np.stack([vectors[labels == c].mean(axis=0) for c in others])
        centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
        labels[labels == small] = others[int(np.argmax(centroids @ vectors[labels == small].mean(axis=0)))]
    order = {c: i for i, c in enumerate(dict.fromkeys(labels.tolist()))}
    return np.array([order[c] for c in labels.tolist()], dtype=int)


MAX_SPEAKERS = 8  # the most speakers spectral clustering looks for in one chunk
#: Fewer speaker windows than this (10 s of speech at the default hop) stay with agglomerative clustering: the
#: affinity statistics of a few windows are too noisy for the single-vs-multi test and the eigengap (the fallback
#: clusterer of short inputs in Wang et al. 2022's multi-stage clustering). Measured: a 10 s rap over a piano
#: (the Hamilton clip, 16 windows) passes the test and spectral clustering cuts it into 4 speakers.
SPECTRAL_MIN_WINDOWS = 20
#: Measured mean turns of spectral splits (hop 0.5 s): pyannote_sample's two speakers 3.4 s; one voice repeated
#: (jfk x3, leopard_test x4, the Hamilton rap x2) 1.1-1.5 s, cut by position in the sentence into 4-6 "speakers"
#: (scikit-learn 1.9's k-means cuts jfk x3 into 4 at 2.25 s: hence ``speaker_min_turn_seconds`` 3.0, was 2.0);
#: jfk looped for 5 min still splits (4 speakers, ~10 CPU s): hence ``speaker_spectral`` is off by default.


def single_speaker(vectors: np.ndarray) -> bool:
    """Whether unit-length d-vectors (n, d) are one speaker's: their affinities ``(cos + 1) / 2`` (the pairs
    above the diagonal) are fitted with a 1- and a 2-component Gaussian mixture and the one with the lower BIC
    wins, as in ``spectralcluster``'s ``AffinityGmmBic`` single-cluster condition (Wang et al. 2022), seeded
    here so the decision is reproducible. True for fewer than 3 rows."""
    if len(vectors) < 3:
        return True
    from sklearn.mixture import GaussianMixture

    affinity = (vectors @ vectors.T + 1) / 2
    values = affinity[np.triu_indices(len(vectors), 1)][:, None].astype(np.float64)
    bic = [GaussianMixture(k, random_state=0).fit(values).bic(values) for k in (1, 2)]
    return bool(bic[0] <= bic[1])


def spectral_speakers(vectors: np.ndarray, max_speakers: int = MAX_SPEAKERS) -> np.ndarray:
    """Speaker index per row of unit-length d-vectors (n, d), at least 2 speakers: spectral clustering of
    Google's ``spectralcluster`` with the Turn-to-Diarize configuration (Xia et al., ICASSP 2022): row-wise
    percentile thresholding of the cosine affinity, binarised and symmetrised, graph-cut Laplacian, the number of
    speakers by the largest eigengap with the pruning percentile auto-tuned by the normalised maximum eigengap
    (Park et al., IEEE SPL 2019), k-means on row-normalised spectral embeddings. Needs ``n`` > ``max_speakers``."""
    from spectralcluster import AutoTune, LaplacianType, RefinementOptions, SpectralClusterer
    from spectralcluster.refinement import RefinementName, SymmetrizeType, ThresholdType

    refinement = RefinementOptions(  # fresh objects per call: the library updates them while it tunes
        thresholding_soft_multiplier=0.01,
        thresholding_type=ThresholdType.Percentile,
        thresholding_with_binarization=True,
        thresholding_preserve_diagonal=True,
        symmetrize_type=SymmetrizeType.Average,
        refinement_sequence=[RefinementName.RowWiseThreshold, RefinementName.Symmetrize],
    )
    clusterer = SpectralClusterer(
        min_clusters=2,
        max_clusters=max_speakers,
        refinement_options=refinement,
        autotune=AutoTune(p_percentile_min=0.40, p_percentile_max=0.95, init_search_step=0.05, search_level=1),
        laplacian_type=LaplacianType.GraphCut,
        row_wise_renorm=True,
        custom_dist="cosine",
    )
    return np.asarray(clusterer.predict(vectors.astype(np.float64)), dtype=int)


def speaker_labels(vectors: np.ndarray, starts: list[float], settings) -> np.ndarray:
    """Speaker index per speaker window (n,) from the windows' d-vectors (n, 256) and start times: agglomerative
    clustering of the smoothed d-vectors (``cluster_speakers``); when that finds one speaker in at least
    ``SPECTRAL_MIN_WINDOWS`` windows and ``settings.speaker_spectral`` is on, the raw d-vectors are tested for
    one speaker (``single_speaker``) and, if there are more, split by ``spectral_speakers``; the split is kept
    only when its speaker turns last ``speaker_min_turn_seconds`` on average (a minimum-duration prior, as in
    diarization's resegmentation): one voice cut by what is said flips label every second or so. Small clusters
    join their nearest (``speaker_min_windows``)."""
    smoothed = smooth_windows(vectors, starts, settings.speaker_smoothing_seconds)
    labels = cluster_speakers(smoothed, settings.speaker_distance_threshold, settings.speaker_min_windows)
    if (
        settings.speaker_spectral
        and labels.max(initial=0) == 0
        and len(vectors) >= SPECTRAL_MIN_WINDOWS
        and not single_speaker(vectors)
    ):
        split = absorb_small_clusters(vectors, spectral_speakers(vectors), settings.speaker_min_windows)
        turns = 1 + int(np.count_nonzero(np.diff(split)))  # runs of one label over the windows in time order
        if len(split) / turns * settings.speaker_hop_seconds >= settings.speaker_min_turn_seconds:
            labels = split
    return labels


def diarize(audio: np.ndarray, segments: list[Segment], offset: float, rt: Runtime) -> list[Utterance]:
    """Split ``segments`` (recording time; ``audio`` starts at ``offset`` s) into single-speaker utterances with
    speaker labels and voice embeddings. Without a voice model (``models.voice_model`` = 'none') each segment
    is one utterance with no speaker."""
    s = rt.settings
    if not segments or s.models.voice_model == "none":
        return [Utterance(g.start, g.end, g.text, g.words) for g in segments]
    duration = len(audio) / media.SAMPLE_RATE
    spans = [(g.start - offset, g.end - offset) for g in segments]
    starts = window_starts(spans, s.speaker_window_seconds, s.speaker_hop_seconds, duration)
    with model_timer("voice", items=len(starts)):
        vectors = get_model("voice", s).embed_windows(audio, starts, s.speaker_window_seconds)
    labels = speaker_labels(vectors, starts, s)
    centres = np.array(starts) + s.speaker_window_seconds / 2 + offset
    out = []
    for seg in segments:
        nearest = [int(np.argmin(np.abs(centres - w.mid))) for w in seg.words]
        run: list[int] = []
        for i, win in enumerate(nearest):
            if run and labels[win] != labels[nearest[run[0]]]:
                out.append(_utterance(seg, run, nearest, labels, vectors))
                run = []
            run.append(i)
        out.append(_utterance(seg, run, nearest, labels, vectors))
    return out


def _utterance(seg: Segment, run: list[int], nearest: list[int], labels: np.ndarray, vectors: np.ndarray) -> Utterance:
    words = tuple(seg.words[i] for i in run)
    wins = sorted({nearest[i] for i in run})
    voice = vectors[wins].mean(axis=0)
    voice /= np.linalg.norm(voice) or 1.0
    return Utterance(
        words[0].start,
        words[-1].end,
        words_text(words),
        words,
        speaker=f"spk{labels[wins[0]]}",
        voice=voice.astype(np.float32),
    )


def speaker_voices(utterances: list[Utterance]) -> list[tuple[str, np.ndarray, float]]:
    """Each speaker of ``utterances`` with a voice: (speaker label, the duration-weighted mean of their utterances'
    voice embeddings L2-normalised (256,), seconds of talk), longest talker first; empty when no utterance has a
    voice. A clip segment's observation carries them all for entity linking (``workers.link``)."""
    talk: dict[str, float] = {}
    sums: dict[str, np.ndarray] = {}
    for u in utterances:
        if u.voice is not None and u.speaker is not None:
            seconds = max(u.end - u.start, 1e-3)
            talk[u.speaker] = talk.get(u.speaker, 0.0) + seconds
            sums[u.speaker] = sums.get(u.speaker, 0.0) + u.voice * seconds
    out = [
        (speaker, (sums[speaker] / (np.linalg.norm(sums[speaker]) or 1.0)).astype(np.float32), talk[speaker])
        for speaker in talk
    ]
    return sorted(out, key=lambda x: -x[2])


def transcribe_chunk(
    rt: Runtime, audio: np.ndarray, offset: float, core_start: float | None = None, core_end: float | None = None
) -> ChunkTranscript:
    """Utterances of ``audio`` (float32 16 kHz mono starting ``offset`` s into the recording) whose words'
    midpoints lie in the core ``[core_start, core_end)`` (default: all of it), with speakers."""
    m = rt.settings.models
    with model_timer("asr", items=len(audio) / media.SAMPLE_RATE):  # per audio second
        transcript = get_model("asr", rt.settings).transcribe(audio, beam_size=m.asr_beam_size, language=m.asr_language)
    segments = keep_core(transcript.segments, offset, offset if core_start is None else core_start, core_end)
    return ChunkTranscript(diarize(audio, segments, offset, rt), transcript.language)


def transcribe_job(rt: Runtime, job: SegmentJob) -> ChunkTranscript:
    """The chunk transcript of an audio chunk or clip segment job: its ``audio_key`` WAV starts at
    ``job.audio_start_s`` (default ``job.start_s``) and its core is ``job.start_s``..``job.end_s``; a chunk
    whose audio ends within its core (the last one, a clip segment) keeps everything after its start."""
    audio = media.read_wav(rt.objects.get_bytes(job.audio_key))
    start = job.start_s or 0.0
    offset = job.audio_start_s if job.audio_start_s is not None else start
    audio_end = offset + len(audio) / media.SAMPLE_RATE
    core_end = job.end_s if job.end_s is not None and audio_end > job.end_s + 1e-3 else None
    return transcribe_chunk(rt, audio, offset, start, core_end)
