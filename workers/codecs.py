"""Decoded media to and from bytes: the small pure helpers the wings share below ``media/``, so that ``models/``
(a VLM's JPEG, the speech models' sample rate) and ``memory/`` (a sample's WAV, the OCR cache key of an image to
forget) need not import ``media/`` (``tests/test_layout.py``). ``workers.media.decode`` re-exports them.
Nothing here touches the stores; bad input raises ``MediaError`` with a one-line reason."""

from __future__ import annotations

import hashlib
import io
import wave

import numpy as np

from engram.schemas.errors import MediaError

#: Samples per second of the audio every speech model hears (16 kHz mono): Whisper's and the voice encoder's rate.
SAMPLE_RATE = 16_000


def load_image(data: bytes, max_pixels: int):
    """Decode an image fully into RGB. Raises MediaError for empty, truncated, non-image or too large
    (decompression bomb: declared width*height over ``max_pixels``) input. Returns a PIL RGB image."""
    from PIL import Image, ImageFile, UnidentifiedImageError  # Pillow: only when an image is decoded

    if not data:
        raise MediaError("empty file (0 bytes)")
    Image.MAX_IMAGE_PIXELS = None  # our own limit below, checked before decoding
    try:
        img = Image.open(io.BytesIO(data))
    except UnidentifiedImageError as exc:
        raise MediaError("not a decodable image") from exc
    w, h = img.size
    if w <= 0 or h <= 0:
        raise MediaError(f"image has no pixels ({w}x{h})")
    if w * h > max_pixels:
        raise MediaError(
            f"image too large: declared {w}x{h} = {w * h / 1e6:.0f} MP exceeds "
            f"the {max_pixels / 1e6:.0f} MP limit (possible decompression bomb)"
        )
    # strict: a truncated image is bad input (the flag is process-wide: any library may have turned it on)
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    try:
        img.load()
    except (OSError, SyntaxError, ValueError) as exc:
        raise MediaError(f"corrupt or truncated {img.format or 'image'}: {exc}") from exc
    return img.convert("RGB")


def pixels_sha256(pixels: np.ndarray) -> str:
    """Hex sha256 of an image's shape and pixel bytes: the same picture re-encoded (PNG, WebP) hashes alike.
    It keys the OCR cache (``workers.media.vision.ocr_cache_key``)."""
    arr = np.ascontiguousarray(pixels)
    h = hashlib.sha256(f"{arr.shape}|{arr.dtype}|".encode())
    h.update(arr.data)
    return h.hexdigest()


def jpeg_bytes(img, quality: int = 90) -> bytes:
    """JPEG encoding of a PIL image."""
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def wav_bytes(audio: np.ndarray) -> bytes:
    """16-bit PCM WAV (16 kHz mono) of float32 samples in [-1, 1]."""
    pcm = (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def read_wav(data: bytes) -> np.ndarray:
    """float32 samples of a 16-bit mono WAV written by ``wav_bytes``."""
    with wave.open(io.BytesIO(data), "rb") as w:
        frames = w.readframes(w.getnframes())
    return np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32767.0
