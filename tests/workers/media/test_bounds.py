"""Work bounded by what the bytes hold, not what headers claim (workers.media.bounds): a lying MP4 or WAV header, a long
silent FLAC, and each per-upload limit. Each case ends ``failed`` (a limit, with its stage and setting) or
``skipped`` (silent or empty, with the reason), and writes few derived objects."""

from __future__ import annotations

import io
import json
import shutil
import struct
import subprocess

import numpy as np
import pytest

from engram.api.cli.main import ingest_paths
from engram.schemas.events import EventStatus

WHO = {"tenant": "acme", "user": "alice", "device": "laptop"}


def tone_mp4(seconds: int = 2, fps: int = 10) -> bytes:
    """A real ``seconds`` long 64x64 MPEG-4 video with a 440 Hz AAC track (16 kHz mono), made with PyAV."""
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as container:
        video = container.add_stream("mpeg4", rate=fps)
        video.width, video.height, video.pix_fmt = 64, 64, "yuv420p"
        audio = container.add_stream("aac", rate=16000)
        audio.layout = "mono"
        for i in range(seconds * fps):
            frame = av.VideoFrame.from_ndarray(np.full((64, 64, 3), (i * 37) % 255, np.uint8), format="rgb24")
            for packet in video.encode(frame):
                container.mux(packet)
        t = np.arange(seconds * 16000) / 16000
        pcm = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None, :]
        for k in range(0, pcm.shape[1], 1024):
            frame = av.AudioFrame.from_ndarray(pcm[:, k : k + 1024].copy(), format="fltp", layout="mono")
            frame.sample_rate = 16000
            for packet in audio.encode(frame):
                container.mux(packet)
        for stream in (audio, video):
            for packet in stream.encode():
                container.mux(packet)
    return buf.getvalue()


def lying_mp4(data: bytes, seconds: int = 2_000_000, timescale: int = 1000) -> bytes:
    """``data`` (an MP4 of version-0 boxes) patched so that its headers and sample tables declare ``seconds``:
    ``mvhd``, every ``tkhd``, ``mdhd`` (timescale set to ``timescale``), ``elst`` and every ``stts`` sample delta
    (the track's duration spread over its samples). Decoders then place the few real frames ``seconds`` apart."""
    out = bytearray(data)

    def u32(at: int, value: int) -> None:
        struct.pack_into(">I", out, at, value)

    def each(box: bytes):
        at = out.find(box)
        while at >= 0:
            assert out[at + 4] == 0, f"{box!r} is not version 0"
            yield at
            at = out.find(box, at + 4)

    total = seconds * timescale
    for at in each(b"mvhd"):  # type, version/flags, creation, modification, timescale, duration
        u32(at + 16, timescale)
        u32(at + 20, total)
    for at in each(b"tkhd"):  # ..., track id, reserved, duration
        u32(at + 24, total)
    for at in each(b"elst"):  # type, version/flags, entry count, segment duration
        u32(at + 12, total)
    for at in each(b"mdhd"):
        u32(at + 16, timescale)
        u32(at + 20, total)
        stts = out.find(b"stts", at)
        entries = struct.unpack(">I", out[stts + 8 : stts + 12])[0]
        samples = sum(struct.unpack(">I", out[stts + 12 + 8 * e : stts + 16 + 8 * e])[0] for e in range(entries))
        for e in range(entries):
            u32(stts + 16 + 8 * e, total // samples)
    return bytes(out)


def lying_wav(seconds: int = 36_000, rate: int = 16_000) -> bytes:
    """A 44-byte WAV header declaring ``seconds`` of 16-bit mono PCM, and no samples at all."""
    size = seconds * rate * 2
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)  # PCM, mono, rate, bytes/s, align, bits
    return b"RIFF" + struct.pack("<I", 36 + size) + b"WAVEfmt " + fmt + b"data" + struct.pack("<I", size)


def silent_flac(path, seconds: int) -> None:
    """``seconds`` of digital silence as FLAC (8 kHz mono, ffmpeg's anullsrc): about 190 bytes a second."""
    subprocess.run(
        [
            "ffmpeg",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "anullsrc=r=8000:cl=mono",
            "-t",
            str(seconds),
            "-c:a",
            "flac",
            "-sample_fmt",
            "s16",
            str(path),
        ],
        check=True,
        timeout=120,
    )


def only(out: dict, status: str):
    """The one record of ``out[status]`` (asserting the others are empty)."""
    others = {k: v for k, v in out.items() if k != status and k != "resumed" and v}
    assert not others, others
    [(_, rec)] = out[status]
    return rec


def test_mp4_whose_sample_tables_claim_2_000_000_s_fails_at_ingest(engram_env, tmp_path):
    path = tmp_path / "liar.mp4"
    path.write_bytes(lying_mp4(tone_mp4()))
    assert path.stat().st_size < 25_000
    rec = only(ingest_paths([path], **WHO, quiet=True, consolidate=False), "failed")
    assert (rec.status, rec.stage) == (EventStatus.failed, "ingest")
    assert "limit exceeded" in rec.reason and "ENGRAM_MAX_UPLOAD_MEDIA_SECONDS" in rec.reason
    assert "2,000,000 s" in rec.reason  # what the header declared, quoted
    assert engram_env.objects.keys("derived/") == []  # failed at the first frame past the limit: nothing cut


def test_honest_clip_keeps_its_segments(engram_env, tmp_path, monkeypatch):
    from engram.schemas.events import MediaEvent, MediaKind
    from engram.schemas.ids import sha256_file
    from engram.workers.ingest import plan
    from engram.workers.runtime import runtime

    path = tmp_path / "tone.mp4"
    path.write_bytes(tone_mp4(seconds=3))
    event = MediaEvent(
        tenant_id="acme",
        user_id="alice",
        device_id="laptop",
        kind=MediaKind.clip,
        object_key="media/acme/tone",
        sha256=sha256_file(path),
        size=path.stat().st_size,
        mime_type="video/mp4",
        captured_at="2024-05-02T18:03:00Z",
    )
    engram_env.objects.put_file(event.object_key, path)
    engram_env.ledger.record_queued(event)
    monkeypatch.setenv("ENGRAM_CLIP_SEGMENT_SECONDS", "2")
    [first, second] = plan(runtime(), event)  # the runtime re-reads the settings
    assert (first.start_s, first.end_s, second.start_s) == (0.0, 2.0, 2.0)
    assert 3.0 <= second.end_s <= 3.2  # the header's duration, borne out by what was decoded
    assert first.audio_key and second.audio_key and first.keyframes and second.keyframes


def test_wav_header_claiming_10_hours_with_no_data_is_skipped(engram_env, tmp_path):
    path = tmp_path / "ten-hours.wav"
    path.write_bytes(lying_wav())
    rec = only(ingest_paths([path], **WHO, quiet=True, consolidate=False), "skipped")
    assert (rec.status, rec.stage) == (EventStatus.skipped, "ingest")
    assert rec.reason.startswith("empty: no audio samples decoded")  # was: done, 0 observations, no reason
    assert engram_env.objects.keys("derived/") == []


needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg not installed (scripts/setup.sh)")


@needs_ffmpeg
def test_long_silent_flac_is_skipped_without_writing_chunks(engram_env, tmp_path):
    path = tmp_path / "silence.flac"
    silent_flac(path, 20 * 60)
    assert path.stat().st_size < 400_000  # FLAC compresses silence
    rec = only(ingest_paths([path], **WHO, quiet=True, consolidate=False), "skipped")
    assert rec.stage == "ingest" and rec.reason == "silent: no sound above -60 dBFS in 1,200.0 s of audio"
    assert engram_env.objects.keys("derived/") == []  # was 4 chunks of 9.6 MB each


@needs_ffmpeg
def test_audio_past_the_media_seconds_limit_fails(engram_env, tmp_path, monkeypatch):
    monkeypatch.setenv("ENGRAM_MAX_UPLOAD_MEDIA_SECONDS", "120")
    path = tmp_path / "silence.flac"
    silent_flac(path, 600)
    rec = only(ingest_paths([path], **WHO, quiet=True, consolidate=False), "failed")
    assert rec.stage == "ingest"
    assert rec.reason.startswith(
        "limit exceeded: the audio decoded runs past 120 s (ENGRAM_MAX_UPLOAD_MEDIA_SECONDS); the header declares 600 s"
    )


def test_derived_bytes_limit_fails_before_writing_past_it(engram_env, tmp_path, monkeypatch):
    from engram.workers.media.decode import SAMPLE_RATE, wav_bytes

    monkeypatch.setenv("ENGRAM_MAX_UPLOAD_DERIVED_BYTES", "400000")  # one 10 s chunk is 320 kB
    monkeypatch.setenv("ENGRAM_AUDIO_CHUNK_SECONDS", "10")
    monkeypatch.setenv("ENGRAM_AUDIO_CHUNK_OVERLAP_SECONDS", "0")
    t = np.arange(35 * SAMPLE_RATE) / SAMPLE_RATE
    path = tmp_path / "tone.wav"
    path.write_bytes(wav_bytes((0.2 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)))
    rec = only(ingest_paths([path], **WHO, quiet=True, consolidate=False), "failed")
    assert rec.stage == "ingest" and "ENGRAM_MAX_UPLOAD_DERIVED_BYTES" in rec.reason
    assert len(engram_env.objects.keys("derived/")) == 1


def test_segments_limit_fails_a_long_conversation(engram_env, tmp_path, monkeypatch):
    monkeypatch.setenv("ENGRAM_CHAT_BATCH_SIZE", "2")
    monkeypatch.setenv("ENGRAM_MAX_UPLOAD_SEGMENTS", "3")
    path = tmp_path / "chat.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(
                {
                    "message_id": f"m{i}",
                    "session_id": "s1",
                    "speaker": "Ann",
                    "text": f"message number {i}",
                    "timestamp": "2024-05-02T18:03:00Z",
                }
            )
            for i in range(7)
        )
    )
    rec = only(ingest_paths([path], **WHO, quiet=True, consolidate=False), "failed")
    assert rec.stage == "ingest"
    assert rec.reason == "limit exceeded: more than 3 segments (ENGRAM_MAX_UPLOAD_SEGMENTS)"
