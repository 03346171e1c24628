"""Speaker embeddings with Resemblyzer's voice encoder (GE2E d-vectors: Wan et al., "Generalized End-to-End
Loss for Speaker Verification", ICASSP 2018), from the weights shipped in the ``resemblyzer`` wheel.

A 3-layer LSTM over 40-band mel frames (10 ms hop) whose last hidden state, projected to 256-d, ReLU'd and
L2-normalised, is the embedding: voices of one speaker lie close in cosine distance (about < 0.3).

``resemblyzer`` is not among engram-multimodal's declared dependencies: its metadata asks for ``webrtcvad``, an
sdist that needs a C compiler and whose module imports ``pkg_resources`` (gone from recent setuptools, and
Python 3.12's venvs have no setuptools), and for the ``typing`` backport. It is installed without its dependencies
(``INSTALL_HINT``); ``webrtcvad-wheels``, ``librosa`` and torch, in the ``[worker]`` extra, provide what it imports.
``missing()`` tells a worker at start (``workers.app``) and the first voice use raises ModelUnavailable with the hint.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from engram.workers.codecs import SAMPLE_RATE
from engram.workers.models.base import Model, ModelTask, ModelType, ModelUnavailable

#: The pinned release engram is tested with, and how to install it (also in the README and scripts/setup.sh).
RESEMBLYZER = "resemblyzer==0.1.4"
INSTALL_HINT = (
    f"pip install --no-deps '{RESEMBLYZER}' (its declared webrtcvad needs a compiler and pkg_resources; "
    "webrtcvad-wheels, librosa and torch come with engram-multimodal[worker,cpu]), or turn speaker "
    "embeddings off with ENGRAM_MODELS__VOICE_MODEL=none"
)

DIM = 256
FRAME_SAMPLES = 160  # the encoder's mel hop: 10 ms at 16 kHz


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` for the duration (the setting is process-wide: restored after)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def missing() -> str | None:
    """None when Resemblyzer and what it imports are installed, else a one-line message saying what is missing
    and how to install it (``INSTALL_HINT``). Looks the modules up without importing them (no torch loaded)."""
    from importlib.util import find_spec

    absent = [name for name in ("resemblyzer", "webrtcvad", "librosa", "torch") if find_spec(name) is None]
    if not absent:
        return None
    return f"speaker embeddings need {', '.join(absent)} (not installed): {INSTALL_HINT}"


class ResemblyzerVoice(Model[np.ndarray]):
    """Embeds fixed-length windows of a recording in batches. Identity ``("voices", "embed")``;
    ``predict(audio, starts_s, window_s, batch_size)`` is ``embed_windows``. Options: ``device`` (torch device
    name), ``threads``: torch intra-op threads while embedding (0 or absent: 1; torch's default, one per core,
    cost 2.7x the CPU per window on 2 cores: its workers spin between the LSTM's small operators)."""

    model_type = ModelType.VOICES
    model_task = ModelTask.EMBED
    task = "voice"

    def _load(self):
        reason = missing()
        if reason:
            raise ModelUnavailable(reason)
        try:
            from resemblyzer import VoiceEncoder
        except ImportError as exc:  # e.g. the sdist webrtcvad, whose module imports pkg_resources
            raise ModelUnavailable(
                f"speaker embeddings: importing resemblyzer failed ({exc}); install "
                f"webrtcvad-wheels in place of webrtcvad, then {INSTALL_HINT}"
            ) from exc
        return VoiceEncoder(device=self.options.get("device", "cpu"), verbose=False)

    def embed_windows(
        self, audio: np.ndarray, starts_s: list[float], window_s: float, batch_size: int = 64
    ) -> np.ndarray:
        """d-vectors of the windows ``[start, start + window_s)`` of ``audio`` (float32, 16 kHz mono): float32
        array (len(starts_s), 256), each row L2-normalised. The recording's mel spectrogram is computed once
        (after Resemblyzer's volume normalisation to -30 dBFS) and sliced, so overlapping windows cost one
        STFT; windows reaching past the end are zero-padded (``predict``, timed per window; no window: an empty
        (0, 256) array, the model not loaded). Raises ValueError for ``window_s`` < 0.1 s, ModelUnavailable
        when Resemblyzer is not installed (the message says how to install it)."""
        if window_s < 0.1:
            raise ValueError(f"window_s must be at least 0.1 s, got {window_s}")
        if not starts_s:
            return np.zeros((0, DIM), dtype=np.float32)
        return self.predict(audio, starts_s, window_s, batch_size)

    def _items(self, audio: np.ndarray, starts_s: list[float], *_, **__) -> float:
        return float(len(starts_s))

    def _predict(self, audio: np.ndarray, starts_s: list[float], window_s: float, batch_size: int = 64) -> np.ndarray:
        import torch
        from resemblyzer import audio as ra
        from resemblyzer.hparams import audio_norm_target_dBFS

        encoder = self.session
        n_frames = max(1, round(window_s * SAMPLE_RATE / FRAME_SAMPLES))
        first = [max(0, round(s * SAMPLE_RATE / FRAME_SAMPLES)) for s in starts_s]
        wav = audio.astype(np.float32)
        if np.abs(wav).max(initial=0.0) > 0:
            wav = ra.normalize_volume(wav, audio_norm_target_dBFS, increase_only=True)
        mel = ra.wav_to_mel_spectrogram(wav)  # (frames, 40)
        need = max(first) + n_frames
        if need > len(mel):
            mel = np.pad(mel, ((0, need - len(mel)), (0, 0)))
        batch = np.stack([mel[f : f + n_frames] for f in first])
        out = []
        with self._predict_lock, torch.inference_mode(), _torch_threads(self.options.get("threads") or 1):
            for i in range(0, len(batch), batch_size):
                out.append(encoder(torch.from_numpy(batch[i : i + batch_size]).to(encoder.device)).cpu().numpy())
        vecs = np.nan_to_num(np.concatenate(out).astype(np.float32))  # an all-silent window has no direction
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        return vecs / np.where(norms > 0, norms, 1.0)
