"""Deterministic ids (DESIGN.md "Contracts"): a task that runs twice writes the same points."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

ENGRAM_NAMESPACE = uuid.UUID("6f1c9b52-3d0e-5a8e-9c47-2b1e0d6a7f10")

EXTENSIONS = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/webp": "webp",
    "image/gif": "gif",
    "image/bmp": "bmp",
    "image/tiff": "tif",
    "audio/flac": "flac",
    "audio/x-flac": "flac",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/mpeg": "mp3",
    "audio/ogg": "ogg",
    "audio/mp4": "m4a",
    "audio/x-m4a": "m4a",
    "audio/webm": "weba",
    "video/mp4": "mp4",
    "video/quicktime": "mov",
    "video/webm": "webm",
    "video/x-matroska": "mkv",
    "video/x-msvideo": "avi",
    "application/json": "json",
    "application/x-ndjson": "jsonl",
    "text/plain": "txt",
    "application/zip": "zip",
}


def point_id(tenant_id: str, event_id: uuid.UUID | str, segment_index: int, point_kind: str) -> uuid.UUID:
    """UUIDv5 of (tenant, event id, segment index, point kind): the id of one point in Qdrant."""
    return uuid.uuid5(ENGRAM_NAMESPACE, f"{tenant_id}\x1f{event_id}\x1f{segment_index}\x1f{point_kind}")


def memory_id(tenant_id: str, user_id: str, memory_type: str, key: str) -> uuid.UUID:
    """UUIDv5 of a memory, from its type and a key derived from its sources (same sources, same id)."""
    return uuid.uuid5(ENGRAM_NAMESPACE, f"{tenant_id}\x1f{user_id}\x1f{memory_type}\x1f{key}")


def object_key(tenant_id: str, sha256: str, mime_type: str) -> str:
    """``media/<tenant>/<sha256>.<ext>``, the content-addressed key of published media."""
    ext = EXTENSIONS.get(mime_type, "bin")
    return f"media/{tenant_id}/{sha256}.{ext}"


def derived_key(tenant_id: str, event_id: uuid.UUID | str, name: str) -> str:
    """``derived/<tenant>/<event id>/<name>``: objects cut out of an event by ingest."""
    return f"derived/{tenant_id}/{event_id}/{name}"


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's content (the content address of media), read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
