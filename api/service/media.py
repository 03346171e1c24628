"""Reading an observation's objects for the service layer: its original (``read_object``) and its thumbnail
(``thumbnail_object``: the one stored at ingest, ``workers.thumbs``, else made now from the original and
stored for the next time: items ingested before thumbnails were made at ingest). Shared by
``embedded.EmbeddedService`` (the local folder) and ``queue.QueueService`` (S3 beside the API).
"""

from __future__ import annotations

import mimetypes
from pathlib import PurePosixPath
from typing import Any

from engram.api.service.base import MediaMissing, MediaObject
from engram.schemas.memory_admin import MemoryRecord
from engram.workers.stores.objects import LocalObjectStore, ObjectNotFound
from engram.workers.thumbs import THUMB_MIME, ThumbnailError, thumb_key_of, webp_of_file

#: Suffixes of an original a thumbnail can be made from when none was stored (a clip's is made at ingest only).
PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff")
GONE = "the original is no longer stored (deleted, or removed by retention)"


def read_object(objects: Any, key: str, whole: bool = True, mime: str | None = None) -> MediaObject:
    """``key`` of the object store ``objects`` as a MediaObject: a local file's path (the embedded default's
    folder); else its bytes when ``whole``, or only its size (neither path nor data: the caller streams it from
    the store, with ranges). Raises MediaMissing when the object is gone."""
    mime = mime or mimetypes.guess_type(key)[0] or "application/octet-stream"
    try:
        if isinstance(objects, LocalObjectStore):
            with objects.local_file(key) as path:
                return MediaObject(key=key, mime_type=mime, size=path.stat().st_size, path=path)
        if not whole:
            return MediaObject(key=key, mime_type=mime, size=objects.size(key))
        data = objects.get_bytes(key)
    except (ObjectNotFound, FileNotFoundError) as exc:
        raise MediaMissing(GONE) from exc
    return MediaObject(key=key, mime_type=mime, size=len(data), data=data)


def removed_reason(payload: dict[str, Any]) -> str | None:
    """Why an observation's original is gone when retention removed it (``workers.stores.retention`` wrote
    ``original_removed_at`` and ``original_removed_by`` into its payload), in words; None when it did not."""
    removed = payload.get("original_removed_at")
    if not removed:
        return None
    why = "the storage cap" if payload.get("original_removed_by") == "cap" else "its kind's retention period"
    return (
        f"the original was removed by retention on {str(removed)[:10]} ({why}); its text, thumbnail and "
        "memories are kept"
    )


def original_object(objects: Any, rec: MemoryRecord, whole: bool = True) -> MediaObject:
    """The original the observation ``rec`` was read from (``read_object`` of its ``object_key``). Raises
    MediaMissing: no object named, or gone (saying so when retention removed it: ``removed_reason``)."""
    key = rec.payload.get("object_key")
    if not key:
        raise MediaMissing("this observation has no stored object")
    try:
        return read_object(objects, key, whole)
    except MediaMissing as exc:
        reason = removed_reason(rec.payload)
        if reason is None:
            raise
        raise MediaMissing(reason) from exc


def thumbnail_object(objects: Any, rec: MemoryRecord, max_pixels: int = 100_000_000) -> MediaObject:
    """The thumbnail of the observation ``rec`` (its whole payload, as ``get_memory`` reads it): the stored one,
    else one made from its picture and stored under the same key. Raises MediaMissing with the reason (no
    picture, the original gone, a picture that cannot be read)."""
    p = rec.payload
    key = thumb_key_of(p)
    if key is None:
        raise MediaMissing("this observation names no event")
    try:
        return read_object(objects, key, mime=THUMB_MIME)
    except MediaMissing:
        pass  # not made at ingest (an item stored before thumbnails were): make it now, once
    original = p.get("object_key")
    if not original or PurePosixPath(original).suffix.lower() not in PICTURE_SUFFIXES:
        raise MediaMissing(f"no picture: a {p.get('kind') or 'media'} observation")
    try:
        with objects.local_file(original) as path:
            data = webp_of_file(path, max_pixels)
    except (ObjectNotFound, FileNotFoundError) as exc:
        raise MediaMissing(GONE) from exc
    except ThumbnailError as exc:
        raise MediaMissing(str(exc)) from exc
    except ImportError as exc:  # the slim API image has no Pillow: new items' thumbnails come from ingest
        raise MediaMissing("no thumbnail was stored at ingest, and this server cannot make one (no Pillow)") from exc
    objects.put_bytes(key, data, THUMB_MIME)
    return (
        read_object(objects, key, mime=THUMB_MIME)
        if isinstance(objects, LocalObjectStore)
        else MediaObject(key=key, mime_type=THUMB_MIME, size=len(data), data=data)
    )
