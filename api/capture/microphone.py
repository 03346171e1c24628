"""Microphone capture for ``engram capture --microphone``: audio in chunks, silent chunks dropped at the edge,
each kept chunk written as a WAV file and published like a kept screenshot.

- Audio comes from PortAudio through ``sounddevice`` (``InputStream``: 16 kHz mono int16, 100 ms blocks; on
  Linux PortAudio's ALSA host API, which reaches PulseAudio/PipeWire through ALSA's ``pulse`` plugin). Its
  callback runs on PortAudio's thread and only queues each block with the wall-clock time it arrived; a
  recorder thread cuts the stream into chunks of ``chunk_seconds`` (30 s by default, the length Whisper decodes
  at once), so nothing slow ever runs on the audio thread.
- The silence gate (``SilenceGate``): WebRTC's voice activity detector (``webrtcvad``, Google's GMM VAD from
  WebRTC, as packaged by ``webrtcvad-wheels``) on 30 ms frames; a chunk where fewer than ``min_voiced`` of the
  frames hold speech is dropped before anything is written (a quiet room costs no upload, no ASR). ``vad_mode``
  is the detector's aggressiveness, 0 (keeps most) to 3 (drops most). A frame counts only above an energy floor
  (``min_dbfs``, -55 dBFS): the VAD alone calls a few frames of digital silence speech.
- A kept chunk is written to the spool as ``<UTC start>.wav`` and handed to ``publish`` as a one-item batch of
  ``api.capture.agent.Frame`` (kind ``audio``), the same publisher thread and sinks as the screenshots: the embedded
  store or an API, the spool keeping what failed.

Ownership: ``callback`` runs on PortAudio's thread and touches only the block queue and the overflow count; the
recorder thread owns the chunk buffer, the gate and the counts in ``MicrophoneStats``; ``start``/``stop`` are
called by the capture's thread (``stop`` joins the recorder, so the counts are final after it).
"""

from __future__ import annotations

import queue
import threading
import time
import wave
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram.schemas.errors import EngramError

SAMPLE_RATE = 16_000  # Hz: what the pipeline's ASR and the VAD read
FRAME_MS = 30  # webrtcvad takes 10, 20 or 30 ms frames
BLOCK_SECONDS = 0.1  # PortAudio block per callback


class MicrophoneUnavailable(EngramError):
    """The input stream cannot be opened (no such device, no PortAudio, the device busy): the message names
    the device asked for, the audio library's reason and the input devices there are."""


@dataclass
class MicrophoneConfig:
    """Options of microphone capture: ``chunk_seconds`` per published file; ``device``: a PortAudio device
    index or name substring (None: the default input); ``vad_mode`` 0-3; ``min_voiced``: the fraction of
    30 ms frames with speech a chunk needs to be kept; ``min_dbfs``: the energy floor of a voiced frame (dB
    relative to full scale); ``min_tail_seconds``: the shortest last chunk kept when
    the run stops mid-chunk."""

    spool: Path
    chunk_seconds: float = 30.0
    samplerate: int = SAMPLE_RATE
    device: int | str | None = None
    vad_mode: int = 2
    min_voiced: float = 0.1
    min_dbfs: float = -55.0
    min_tail_seconds: float = 1.0


@dataclass
class MicrophoneStats:
    """What microphone capture did: chunks cut, kept (written and handed to the publisher) and dropped as
    silent, seconds of audio read, PortAudio overflows (blocks lost because the recorder fell behind)."""

    chunks: int = 0
    kept: int = 0
    silent: int = 0
    seconds: float = 0.0
    overflows: int = 0


class SilenceGate:
    """Whether a chunk of 16-bit mono PCM holds speech: the fraction of its 30 ms frames that WebRTC's VAD
    calls voiced and whose RMS is above ``min_dbfs``, against ``min_voiced``. ``samplerate`` must be 8, 16, 32
    or 48 kHz (webrtcvad's). Raises ImportError naming the package when webrtcvad is not installed,
    ValueError for a bad mode or rate."""

    def __init__(
        self, samplerate: int = SAMPLE_RATE, vad_mode: int = 2, min_voiced: float = 0.1, min_dbfs: float = -55.0
    ) -> None:
        try:
            import webrtcvad
        except ImportError as exc:
            raise ImportError("microphone capture needs webrtcvad: pip install webrtcvad-wheels") from exc
        if samplerate not in (8000, 16000, 32000, 48000):
            raise ValueError(f"the silence gate reads 8, 16, 32 or 48 kHz audio, not {samplerate} Hz")
        self.vad = webrtcvad.Vad(vad_mode)
        self.samplerate = samplerate
        self.min_voiced = min_voiced
        self.frame_bytes = 2 * samplerate * FRAME_MS // 1000
        self.min_rms = 32768.0 * 10 ** (min_dbfs / 20)

    def voiced_fraction(self, pcm: bytes) -> float:
        """The fraction of whole 30 ms frames of ``pcm`` (int16 little-endian mono) that hold speech; 0 for
        less than one frame."""
        import numpy as np

        n = len(pcm) // self.frame_bytes
        if n == 0:
            return 0.0
        frames = np.frombuffer(pcm, dtype="<i2", count=n * self.frame_bytes // 2).reshape(n, -1).astype(np.float32)
        loud = np.sqrt((frames * frames).mean(axis=1)) >= self.min_rms
        voiced = sum(
            self.vad.is_speech(pcm[i * self.frame_bytes : (i + 1) * self.frame_bytes], self.samplerate)
            for i in np.flatnonzero(loud)
        )
        return voiced / n

    def keeps(self, pcm: bytes) -> bool:
        """True when ``pcm`` holds enough speech to be kept."""
        return self.voiced_fraction(pcm) >= self.min_voiced


def write_wav(path: Path, pcm: bytes, samplerate: int) -> None:
    """``pcm`` (int16 mono) as a WAV file at ``path`` (the standard library's ``wave``)."""
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(samplerate)
        out.writeframes(pcm)


class MicrophoneRecorder:
    """Records the microphone in chunks (module docstring). ``publish(batch)`` takes a list of
    ``api.capture.agent.Frame`` (one kept chunk each) from the recorder thread; ``frame`` builds one (path, start time);
    ``report`` gets one line per dropped or kept chunk's trouble. ``open_stream``: makes the started input
    stream from (samplerate, blocksize, device, callback); default sounddevice's ``InputStream``."""

    def __init__(
        self,
        config: MicrophoneConfig,
        frame: Callable[[Path, datetime], Any],
        report: Callable[[str], None] = lambda _: None,
        open_stream: Callable[..., Any] | None = None,
    ) -> None:
        self.config, self.frame, self.report = config, frame, report
        self.gate = SilenceGate(config.samplerate, config.vad_mode, config.min_voiced, config.min_dbfs)
        self.stats = MicrophoneStats()
        self._open_stream = open_stream or _sounddevice_stream
        self._blocks: queue.Queue[tuple[float, bytes] | None] = queue.Queue()
        self._stream: Any = None
        self._thread: threading.Thread | None = None
        self._publish: Callable[[list], None] = lambda _: None
        self._overflows = 0

    def callback(self, indata: Any, frames: int, time_info: Any, status: Any) -> None:
        """sounddevice's InputStream callback (PortAudio's thread): queue the block with its arrival time."""
        if status:
            self._overflows += 1
        self._blocks.put((time.time(), bytes(indata)))

    def start(self, publish: Callable[[list], None]) -> None:
        """Open the input stream and the recorder thread; kept chunks go to ``publish``. Raises
        MicrophoneUnavailable when the stream cannot be opened."""
        self._publish = publish
        self.config.spool.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._record, name="capture-microphone", daemon=True)
        self._thread.start()
        try:
            self._stream = self._open_stream(
                self.config.samplerate, int(self.config.samplerate * BLOCK_SECONDS), self.config.device, self.callback
            )
        except BaseException as exc:
            self._blocks.put(None)
            self._thread.join()
            if isinstance(exc, Exception):  # sounddevice.PortAudioError, ValueError (no such device), OSError
                raise MicrophoneUnavailable(
                    f"cannot record from input device {self.config.device or 'default'}: "
                    f"{exc}; inputs: {'; '.join(_inputs_or_why()) or 'none'}"
                ) from exc
            raise

    def stop(self) -> MicrophoneStats:
        """Close the stream, cut the last chunk (kept when at least ``min_tail_seconds`` long and voiced) and
        wait for the recorder; returns the counts."""
        if self._stream is not None:
            self._stream.stop()
            self._stream.close()
            self._stream = None
        self._blocks.put(None)
        if self._thread is not None:
            self._thread.join()
        self.stats.overflows = self._overflows
        return self.stats

    def feed(self, pcm: bytes, arrived: float | None = None) -> None:
        """Queue ``pcm`` (int16 mono at the configured rate) as if the stream had delivered it at ``arrived``
        (epoch seconds; default now): for audio from a file, or tests."""
        self._blocks.put((time.time() if arrived is None else arrived, pcm))

    def _record(self) -> None:
        """The recorder thread: blocks into chunks until the None that ends the run."""
        cfg = self.config
        chunk_bytes = 2 * int(cfg.samplerate * cfg.chunk_seconds)
        buf = bytearray()
        start: float | None = None
        while (item := self._blocks.get()) is not None:
            arrived, pcm = item
            if start is None:
                start = arrived - len(pcm) / (2 * cfg.samplerate)  # the block's first sample
            buf += pcm
            self.stats.seconds += len(pcm) / (2 * cfg.samplerate)
            while len(buf) >= chunk_bytes:
                self._chunk(bytes(buf[:chunk_bytes]), start)
                del buf[:chunk_bytes]
                start += cfg.chunk_seconds
        if start is not None and len(buf) >= 2 * cfg.samplerate * cfg.min_tail_seconds:
            self._chunk(bytes(buf), start)

    def _chunk(self, pcm: bytes, start: float) -> None:
        """Gate one chunk; write and publish it when it holds speech."""
        self.stats.chunks += 1
        if not self.gate.keeps(pcm):
            self.stats.silent += 1
            return
        when = datetime.fromtimestamp(start, UTC)
        path = self.config.spool / f"{when:%Y%m%dT%H%M%S.%fZ}.wav"
        try:
            write_wav(path, pcm, self.config.samplerate)
        except OSError as exc:
            self.report(f"cannot write {path}: {exc}")
            return
        self.stats.kept += 1
        self._publish([self.frame(path, when)])


def _sounddevice_stream(samplerate: int, blocksize: int, device: int | str | None, callback: Callable) -> Any:
    """A started sounddevice InputStream: mono int16 at ``samplerate``, ``blocksize`` frames per callback."""
    import sounddevice

    stream = sounddevice.RawInputStream(
        samplerate=samplerate, blocksize=blocksize, device=device, channels=1, dtype="int16", callback=callback
    )
    stream.start()
    return stream


def input_devices() -> list[str]:
    """The input devices PortAudio sees, as ``index: name (host API)`` lines (for error messages)."""
    import sounddevice

    apis = sounddevice.query_hostapis()
    return [
        f"{i}: {d['name']} ({apis[d['hostapi']]['name']})"
        for i, d in enumerate(sounddevice.query_devices())
        if d["max_input_channels"] > 0
    ]


def _inputs_or_why() -> list[str]:
    try:
        return input_devices()
    except Exception as exc:  # noqa: BLE001 (only for the error message)
        return [f"(cannot list: {exc})"]
