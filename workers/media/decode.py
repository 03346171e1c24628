"""Sniffing, validation and decoding of media. Every problem with the input raises ``MediaError`` whose
message is one line naming the reason (the caller adds the file); nothing here touches the stores."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from engram.schemas.errors import MediaError
from engram.schemas.events import MediaKind
from engram.schemas.settings import get_settings
from engram.workers.codecs import SAMPLE_RATE as SAMPLE_RATE  # the helpers below media/, re-exported here
from engram.workers.codecs import jpeg_bytes as jpeg_bytes
from engram.workers.codecs import load_image as load_image
from engram.workers.codecs import read_wav as read_wav
from engram.workers.codecs import wav_bytes as wav_bytes

MEDIA_EXTENSIONS = {
    ".png": MediaKind.screenshot,
    ".jpg": MediaKind.screenshot,
    ".jpeg": MediaKind.screenshot,
    ".webp": MediaKind.screenshot,
    ".gif": MediaKind.screenshot,
    ".bmp": MediaKind.screenshot,
    ".tif": MediaKind.screenshot,
    ".tiff": MediaKind.screenshot,
    ".wav": MediaKind.audio,
    ".flac": MediaKind.audio,
    ".mp3": MediaKind.audio,
    ".ogg": MediaKind.audio,
    ".m4a": MediaKind.audio,
    ".opus": MediaKind.audio,
    ".weba": MediaKind.audio,
    ".mp4": MediaKind.clip,
    ".mov": MediaKind.clip,
    ".mkv": MediaKind.clip,
    ".webm": MediaKind.clip,
    ".avi": MediaKind.clip,
}
CONVERSATION_EXTENSIONS = {".json", ".jsonl", ".ndjson"}
TEXT_CONVERSATION_EXTENSIONS = {".txt", ".md", ".markdown"}  # WhatsApp exports and notes (workers.media.importers)
GUESS_MIME = {
    MediaKind.screenshot: "image/png",
    MediaKind.audio: "audio/wav",
    MediaKind.clip: "video/mp4",
    MediaKind.text: "application/x-ndjson",
}


def sniff(head: bytes) -> tuple[MediaKind, str] | None:
    """(kind, mime type) from the first bytes of a file (magic numbers, via ``filetype``), or None."""
    import filetype

    guess = filetype.guess(head)
    if guess is None:
        return None
    mime = guess.mime
    if mime.startswith("image/"):
        return MediaKind.screenshot, mime
    if mime.startswith("audio/"):
        return MediaKind.audio, mime
    if mime.startswith("video/"):
        return MediaKind.clip, mime
    return None


#: Capture times before this, or after now, are a device's unset clock (1970, QuickTime's 1904), not a time.
EARLIEST_CAPTURE = datetime(1990, 1, 1, tzinfo=UTC)
_EXIF_IFD, _DATETIME_ORIGINAL, _DATETIME_DIGITIZED, _OFFSET_ORIGINAL, _DATETIME = 0x8769, 0x9003, 0x9004, 0x9011, 0x132


def content_capture_time(path: Path, kind: MediaKind) -> tuple[datetime, str] | None:
    """When the content says it was captured, as (UTC time, where it was read), or None: an image's EXIF
    ``DateTimeOriginal`` (else ``DateTimeDigitized``, else ``DateTime``; with ``OffsetTimeOriginal`` when given,
    else read in ENGRAM_TIMEZONE's zone, as cameras write local time), a video's or audio file's container
    ``creation_time`` (QuickTime/MP4, Matroska) or its ``date`` tag (ID3, Vorbis comments) when it holds a day.
    Times before 1990 or in the future (an unset clock) are left out. Never raises on bad media."""
    try:
        if kind is MediaKind.screenshot:
            return _exif_time(path)
        if kind in (MediaKind.audio, MediaKind.clip):
            return _container_time(path)
    except Exception:  # noqa: BLE001 (a damaged header only means no content time; ingest judges the media)
        return None
    return None


def _plausible(when: datetime | None, source: str) -> tuple[datetime, str] | None:
    if when is None:
        return None
    when = when.astimezone(UTC)
    return (when, source) if EARLIEST_CAPTURE <= when <= datetime.now(UTC) + timedelta(days=1) else None


def _exif_time(path: Path) -> tuple[datetime, str] | None:
    from PIL import Image

    with Image.open(path) as img:
        exif = img.getexif()
        sub = exif.get_ifd(_EXIF_IFD)
    for tag, name in ((_DATETIME_ORIGINAL, "DateTimeOriginal"), (_DATETIME_DIGITIZED, "DateTimeDigitized")):
        if raw := sub.get(tag):
            offset = sub.get(_OFFSET_ORIGINAL) if tag == _DATETIME_ORIGINAL else None
            return _plausible(_exif_datetime(str(raw), offset), f"exif:{name}")
    raw = exif.get(_DATETIME)
    return _plausible(_exif_datetime(str(raw), None), "exif:DateTime") if raw else None


def _exif_datetime(raw: str, offset: str | None) -> datetime | None:
    try:
        naive = datetime.strptime(raw.strip().rstrip("\x00")[:19], "%Y:%m:%d %H:%M:%S")
    except ValueError:
        return None
    if offset:
        try:
            return datetime.strptime(f"{naive:%Y-%m-%d %H:%M:%S}{offset.strip()}", "%Y-%m-%d %H:%M:%S%z")
        except ValueError:
            pass
    return naive.replace(tzinfo=get_settings().tzinfo)  # a camera's clock: the zone of ENGRAM_TIMEZONE


def _container_time(path: Path) -> tuple[datetime, str] | None:
    import av

    with av.open(str(path)) as container:
        tags = {k.lower(): v for k, v in (container.metadata or {}).items()}
        for stream in container.streams:
            for k, v in (stream.metadata or {}).items():
                tags.setdefault(k.lower(), v)
    if raw := tags.get("creation_time"):
        try:
            when = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
            return _plausible(when if when.tzinfo else when.replace(tzinfo=UTC), "container:creation_time")
        except ValueError:
            pass
    for key in ("date", "date_recorded", "tdrc", "year"):
        raw = (tags.get(key) or "").strip()
        if len(raw) >= 10:  # a day at least: a bare year says too little
            try:
                when = datetime.fromisoformat(raw[:19] if "T" in raw or " " in raw[:19] else raw[:10])
            except ValueError:
                continue
            return _plausible(when if when.tzinfo else when.replace(tzinfo=UTC), f"tag:{key}")
    return None


# --- images -------------------------------------------------------------------------------------------


def perceptual_hash(img) -> str:
    """64-bit perceptual hash (DCT pHash, via ``imagehash``) as 16 hex digits."""
    import imagehash

    return str(imagehash.phash(img, hash_size=8))


def hash_similarity(a: str, b: str) -> float:
    """1 - Hamming distance / 64 between two 64-bit hex hashes: 1.0 = identical."""
    return 1.0 - bin(int(a, 16) ^ int(b, 16)).count("1") / 64.0


def frame_signature(img, thumb_side: int = 256) -> str:
    """What near-duplicate filtering keeps of a device's last frame: ``<pHash hex>:<base64 PNG>`` of a
    ``thumb_side`` x ``thumb_side`` greyscale thumbnail (area-averaged, so text strokes survive as shading)."""
    import cv2

    grey = np.asarray(img.convert("L"))
    thumb = cv2.resize(grey, (thumb_side, thumb_side), interpolation=cv2.INTER_AREA)
    ok, png = cv2.imencode(".png", thumb)
    if not ok:
        raise MediaError("cannot encode the frame thumbnail")
    return f"{perceptual_hash(img)}:{base64.b64encode(png.tobytes()).decode('ascii')}"


def frame_similarity(a: str, b: str) -> tuple[float, float | None]:
    """(pHash similarity, SSIM) of two ``frame_signature`` strings. SSIM (Wang et al., 2004, via
    scikit-image) of the greyscale thumbnails is in [-1, 1], 1 = identical; None when either signature is a
    bare pHash (written before thumbnails were kept) or the thumbnails differ in size."""
    ha, _, ta = a.partition(":")
    hb, _, tb = b.partition(":")
    return hash_similarity(ha, hb), _thumb_ssim(ta, tb)


def _thumb_ssim(ta: str, tb: str) -> float | None:
    import cv2
    from skimage.metrics import structural_similarity

    if not ta or not tb:
        return None
    ga, gb = (cv2.imdecode(np.frombuffer(base64.b64decode(t), np.uint8), cv2.IMREAD_GRAYSCALE) for t in (ta, tb))
    if ga is None or gb is None or ga.shape != gb.shape:
        return None
    return float(structural_similarity(ga, gb, data_range=255))


def is_near_duplicate(a: str, b: str, hash_min: float, ssim_min: float) -> bool:
    """Whether frame ``b`` repeats frame ``a`` (two ``frame_signature`` strings), as screenpipe and MIRIX
    skip unchanged screens: the cheap pHash similarity must reach ``hash_min``, then the thumbnails' SSIM
    must reach ``ssim_min`` (a moved cursor or a ticking clock stays above 0.997 on a 256 px thumbnail; a new
    line of text or a 20 px scroll falls below it). Without thumbnails, the pHash test alone decides."""
    ha, _, ta = a.partition(":")
    hb, _, tb = b.partition(":")
    if hash_similarity(ha, hb) < hash_min:
        return False
    ssim = _thumb_ssim(ta, tb)
    return ssim is None or ssim >= ssim_min


# --- audio and video ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AvInfo:
    """What a container holds: duration in seconds, and whether it has audio and video streams."""

    duration: float
    has_audio: bool
    has_video: bool


def probe(path: Path) -> AvInfo:
    """Open ``path`` with PyAV and describe it. Raises MediaError if it is not a readable container."""
    import av

    if path.stat().st_size == 0:
        raise MediaError("empty file (0 bytes)")
    try:
        with av.open(str(path)) as container:
            has_audio = bool(container.streams.audio)
            has_video = bool(container.streams.video)
            duration = float(container.duration / 1e6) if container.duration else 0.0
            if not duration:
                for stream in container.streams:
                    if stream.duration and stream.time_base:
                        duration = max(duration, float(stream.duration * stream.time_base))
    except (av.error.FFmpegError, UnicodeDecodeError, ValueError) as exc:
        raise MediaError(f"not a readable audio/video container: {_av_reason(exc)}") from exc
    if not has_audio and not has_video:
        raise MediaError("container has neither audio nor video streams (truncated or not media)")
    return AvInfo(duration, has_audio, has_video)


def _av_reason(exc: Exception) -> str:
    """FFmpeg's message without the (temporary) file name it quotes."""
    import av

    if isinstance(exc, av.error.FFmpegError) and exc.strerror:
        return exc.strerror
    return str(exc)


def decode_audio(path: Path) -> np.ndarray:
    """The audio track as float32 mono at 16 kHz (PyAV resampler). Raises MediaError if undecodable."""
    import av
    from faster_whisper.audio import decode_audio as fw_decode

    try:
        audio = fw_decode(str(path), sampling_rate=SAMPLE_RATE)
    except (av.error.FFmpegError, ValueError, IndexError) as exc:
        raise MediaError(f"audio track cannot be decoded: {_av_reason(exc)}") from exc
    return np.asarray(audio, dtype=np.float32)


def audio_blocks(path: Path, block_samples: int = 30 * SAMPLE_RATE) -> Iterator[np.ndarray]:
    """The audio track as consecutive float32 mono 16 kHz blocks of ``block_samples`` (the last one shorter),
    decoded and resampled as a stream (PyAV), so memory stays bounded whatever the recording's length.
    Raises MediaError if the track cannot be decoded."""
    import av

    resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
    pending: list[np.ndarray] = []
    have = 0
    try:
        with av.open(str(path), metadata_errors="ignore") as container:
            for frame in itertools.chain(container.decode(audio=0), [None]):
                for out in resampler.resample(frame):
                    pcm = out.to_ndarray().reshape(-1)
                    pending.append(pcm.astype(np.float32) / 32768.0)
                    have += len(pcm)
                while have >= block_samples:
                    joined = np.concatenate(pending)
                    yield joined[:block_samples]
                    pending, have = [joined[block_samples:]], len(joined) - block_samples
    except (av.error.FFmpegError, ValueError, IndexError) as exc:
        raise MediaError(f"audio track cannot be decoded: {_av_reason(exc)}") from exc
    if have:
        yield np.concatenate(pending)


def keyframes(
    path: Path,
    segment_seconds: float,
    per_segment: int,
    sample_fps: float = 2.0,
    scene_threshold: float = 12.0,
    on_frame: Callable[[float], None] | None = None,
) -> dict[int, list[tuple[float, object]]]:
    """Keyframes of a video by scene change, per segment index: {segment: [(t seconds, PIL RGB image)]}.

    Frames are sampled at ``sample_fps``; a frame is a keyframe when it is the segment's first or its mean
    absolute difference (32x32 grey, 0-255) from the last keyframe exceeds ``scene_threshold``. At most
    ``per_segment`` keyframes are kept per segment (the largest changes). ``on_frame`` is called with the time
    of every decoded frame (seconds), before it is kept: an exception it raises (``bounds.LimitExceeded``)
    stops decoding. Raises MediaError on decode errors.
    """
    import av

    out: dict[int, list[tuple[float, float, object]]] = {}
    last_thumb: np.ndarray | None = None
    next_t = 0.0
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            for frame in container.decode(stream):
                if frame.time is not None and on_frame is not None:
                    on_frame(float(frame.time))
                if frame.time is None or frame.time < next_t:
                    continue
                next_t = frame.time + 1.0 / sample_fps
                seg = int(frame.time // segment_seconds)
                img = frame.to_image()
                thumb = np.asarray(img.convert("L").resize((32, 32)), dtype=np.float32)
                first = seg not in out
                change = 255.0 if first or last_thumb is None else float(np.abs(thumb - last_thumb).mean())
                if first or change > scene_threshold:
                    out.setdefault(seg, []).append((change, float(frame.time), img))
                    last_thumb = thumb
    except MediaError:
        raise  # from on_frame: a limit, with its own reason
    except (av.error.FFmpegError, ValueError, IndexError) as exc:
        raise MediaError(f"video cannot be decoded: {_av_reason(exc)}") from exc
    result: dict[int, list[tuple[float, object]]] = {}
    for seg, frames in out.items():
        best = sorted(frames, key=lambda f: -f[0])[:per_segment]
        result[seg] = [(t, img) for _, t, img in sorted(best, key=lambda f: f[1])]
    return result


def json_or_none(data: bytes):
    """Parsed JSON, or None if ``data`` is not one JSON document."""
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deeply to be ours
        return None
