"""Thumbnails (issue 42): a small WebP of each picture an event holds, made once at ingest and stored as a derived
object beside what ingest cuts from the event, so the web app's timeline never decodes an original.

Key: ``derived/<tenant>/<event id>/thumb-<segment:05d>.webp`` (``thumb_key``): a screenshot's is its one
segment's (0), a clip's one per segment, made from the segment's first keyframe. Being under the event's
``derived/`` prefix, it goes wherever the event's derived objects go (forgetting a user removes them all).
Deleting a single observation must delete ``thumb_key`` of its event and segment with it.

Size: at most ``THUMB_WIDTH`` px wide and ``THUMB_HEIGHT`` high (aspect kept, never enlarged), WebP at
``THUMB_QUALITY``; a picture whose thumbnail would pass ``MAX_THUMB_BYTES`` is encoded again at lower quality
(a 1920x1080 screenshot gives 3-10 kB). Pillow does the work (its WebP encoder is libwebp).

Pure helpers beside ``workers.codecs``, not under ``media/``: ingest makes a thumbnail, the web app's service one
missing, and retention one when it removes an original (``workers.stores.retention``), and ``stores/`` does not
import ``media/`` (``tests/test_layout.py``).
"""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any

import structlog

from engram.schemas.ids import derived_key

log = structlog.get_logger(__name__)

THUMB_WIDTH = 320
THUMB_HEIGHT = 320
THUMB_QUALITY = 60
#: The issue's bound on one thumbnail, bytes; lower qualities are tried in turn to stay under it.
MAX_THUMB_BYTES = 20_000
_FALLBACK_QUALITIES = (45, 30, 15)
THUMB_MIME = "image/webp"


class ThumbnailError(ValueError):
    """The picture cannot be read or made small (the message says why, in words)."""


def thumb_key(tenant_id: str, event_id: uuid.UUID | str, segment_index: int = 0) -> str:
    """The derived key of the thumbnail of ``event_id``'s segment ``segment_index`` (see the module docstring)."""
    return derived_key(tenant_id, event_id, f"thumb-{int(segment_index):05d}.webp")


def thumb_key_of(payload: dict[str, Any]) -> str | None:
    """``thumb_key`` of a stored observation's payload (its ``tenant_id``, ``event_id`` and ``segment_index``),
    or None when the payload lacks the tenant or the event."""
    tenant, event = payload.get("tenant_id"), payload.get("event_id")
    if not tenant or not event:
        return None
    return thumb_key(tenant, event, payload.get("segment_index") or 0)


def webp(img: Any, width: int = THUMB_WIDTH, height: int = THUMB_HEIGHT, quality: int = THUMB_QUALITY) -> bytes:
    """A WebP of the PIL image ``img`` at most ``width`` x ``height`` px (aspect kept, never enlarged) and at most
    ``MAX_THUMB_BYTES`` (lower qualities tried in turn). ``img`` is not changed. Raises ThumbnailError for a
    picture without pixels."""
    from PIL import Image

    if img.width <= 0 or img.height <= 0:
        raise ThumbnailError(f"the picture has no pixels ({img.width}x{img.height})")
    small = img.copy()
    small.thumbnail((width, height), Image.Resampling.LANCZOS)  # keeps the aspect, never enlarges
    if small.mode not in ("RGB", "RGBA"):
        small = small.convert("RGBA" if "A" in small.getbands() else "RGB")
    data = b""
    for q in (quality, *(f for f in _FALLBACK_QUALITIES if f < quality)):
        out = io.BytesIO()
        small.save(out, "WEBP", quality=q, method=4)
        data = out.getvalue()
        if len(data) <= MAX_THUMB_BYTES:
            break
    return data


def webp_of_file(source: Path | bytes, max_pixels: int = 100_000_000) -> bytes:
    """``webp`` of an encoded picture (a file's path or its bytes), decoded at a reduced scale where the format
    allows (JPEG), EXIF orientation applied. Raises ThumbnailError when it cannot be decoded, or declares more
    than ``max_pixels``."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with Image.open(source if isinstance(source, Path) else io.BytesIO(source)) as img:
            if img.width * img.height > max_pixels:
                raise ThumbnailError(f"the picture is too large to read ({img.width}x{img.height})")
            img.draft("RGB", (THUMB_WIDTH, THUMB_HEIGHT))  # JPEG: decode at a reduced scale
            return webp(ImageOps.exif_transpose(img) or img)
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError, SyntaxError) as exc:
        raise ThumbnailError(f"the picture cannot be read: {type(exc).__name__}") from exc


def store_thumbnail(
    objects: Any, tenant_id: str, event_id: uuid.UUID | str, segment_index: int, img: Any
) -> str | None:
    """Make ``img``'s thumbnail and store it under ``thumb_key`` in ``objects`` (an ``ObjectStore``); returns the
    key, or None when it could not be made or written (logged: a thumbnail never fails an ingest, the web app
    makes a missing one on first view)."""
    key = thumb_key(tenant_id, event_id, segment_index)
    try:
        objects.put_bytes(key, webp(img), THUMB_MIME)
    except Exception as exc:  # the event's own work goes on: the web app makes it when first shown
        log.warning("thumbnail not stored", key=key, error=f"{type(exc).__name__}: {exc}")
        return None
    return key
