"""Publishing files on the embedded default: store the object, record the event, run the pipeline inline
(``run_events``, ``run_event``: the runner ``workers.pipeline``); and resuming the events a killed run left
unfinished (``resume_interrupted``, from the runner).

Used by ``engram ingest`` and ``watch`` (``api.embedded.ingest_paths``), ``engram capture`` and ``add`` on the
embedded default; the distributed producer (``engram publish``/``watch``/``capture --api``, presigned uploads
through the API) publishes the same ``MediaEvent``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from engram.schemas.events import LedgerRecord, MediaEvent, MediaKind
from engram.schemas.ids import object_key, sha256_file
from engram.workers.media import decode as media
from engram.workers.media.detect import detect
from engram.workers.memory.vault import redact_event
from engram.workers.pipeline import resume_interrupted, run_events
from engram.workers.runtime import Runtime

__all__ = [
    "RUN_BATCH_FILES",
    "Candidate",
    "classify",
    "iter_files",
    "publish_file",
    "resume_interrupted",
    "run_event",
    "run_events",
]


@dataclass(frozen=True)
class Candidate:
    """A file found for ingestion and what it was detected as (``kind`` None: not media, skipped)."""

    path: Path
    kind: MediaKind | None
    mime: str | None


def iter_files(paths: Iterable[Path]) -> Iterator[Path]:
    """Files under ``paths`` (folders recursively, sorted; hidden files and folders left out).
    Raises FileNotFoundError for a path that does not exist."""
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or folder")
        if p.is_dir():
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for f in sorted(files):
                    if not f.startswith("."):
                        yield Path(root) / f
        else:
            yield p


def classify(path: Path) -> Candidate:
    """Detect the kind of ``path`` by content (see ``workers.media.detect.detect``)."""
    found = detect(path)
    return Candidate(path, *(found or (None, None)))


def publish_file(
    rt: Runtime,
    cand: Candidate,
    tenant_id: str,
    user_id: str,
    device_id: str,
    captured_at: datetime | None = None,
    app_name: str | None = None,
    window: str | None = None,
    metadata: dict[str, str] | None = None,
    source_name: str | None = None,
) -> MediaEvent:
    """Store ``cand``'s bytes at their content-addressed key and record a queued event (not yet run), its
    app name, window title and ``metadata`` values with their secrets in the vault (``vault.redact_event``).
    ``source_name``: what the event is named (default the file's path; ``engram capture`` names a frame by its
    app and window title, as its spool file is deleted once published)."""
    assert cand.kind is not None and cand.mime is not None
    digest = sha256_file(cand.path)
    key = object_key(tenant_id, digest, cand.mime)
    if not rt.objects.exists(key):
        rt.objects.put_file(key, cand.path, cand.mime)
    if captured_at is not None:
        when, source = captured_at, "given"
    else:  # what the content says (EXIF, a container's creation time, an audio tag), else the file's time
        when, source = media.content_capture_time(cand.path, cand.kind) or (
            datetime.fromtimestamp(cand.path.stat().st_mtime, UTC),
            "file",
        )
    event = MediaEvent(
        event_id=uuid.uuid4(),
        tenant_id=tenant_id,
        user_id=user_id,
        device_id=device_id,
        kind=cand.kind,
        object_key=key,
        sha256=digest,
        size=cand.path.stat().st_size,
        mime_type=cand.mime,
        captured_at=when,
        captured_at_source=source,
        source_name=source_name or str(cand.path),
        app=app_name,
        window=window,
        metadata=metadata or {},
    )
    event = redact_event(rt, event)  # its window title and app name hold no secret from here on
    rt.ledger.record_queued(event)
    return event


#: Files ``engram ingest`` publishes and then runs together (``run_events``): their segments share model passes.
RUN_BATCH_FILES = 32


def run_event(rt: Runtime, event: MediaEvent) -> LedgerRecord:
    """Run the pipeline for ``event`` (inline on the embedded default: ``workers.pipeline.run_events``) and return its
    ledger record."""
    return run_events(rt, [event])[0]
