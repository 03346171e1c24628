"""Publishing files on the embedded default: store the object, record the event, run the pipeline inline;
and resuming the events a killed run left unfinished (``resume_interrupted``).

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
from engram.workers.batching import deferred_segments, run_segments
from engram.workers.ingest import ingest
from engram.workers.media import decode as media
from engram.workers.media.detect import detect
from engram.workers.memory.vault import redact_event
from engram.workers.runtime import Runtime


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


def publish_file(rt: Runtime, cand: Candidate, tenant_id: str, user_id: str, device_id: str,
                 captured_at: datetime | None = None, app_name: str | None = None,
                 window: str | None = None, metadata: dict[str, str] | None = None,
                 source_name: str | None = None) -> MediaEvent:
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
        when, source = (media.content_capture_time(cand.path, cand.kind)
                        or (datetime.fromtimestamp(cand.path.stat().st_mtime, UTC), "file"))
    event = MediaEvent(event_id=uuid.uuid4(), tenant_id=tenant_id, user_id=user_id, device_id=device_id,
                       kind=cand.kind, object_key=key, sha256=digest, size=cand.path.stat().st_size,
                       mime_type=cand.mime, captured_at=when, captured_at_source=source,
                       source_name=source_name or str(cand.path), app=app_name,
                       window=window, metadata=metadata or {})
    event = redact_event(rt, event)  # its window title and app name hold no secret from here on
    rt.ledger.record_queued(event)
    return event


def resume_interrupted(rt: Runtime) -> list[LedgerRecord]:
    """Embedded default: run again the events left queued or processing by a process that is gone (killed,
    crashed), and the ones this process left (a batch the store was busy for), and return their records. An event
    of another process that still lives (running it, or waiting for the store) is left to it: several engram
    processes share one data dir (``Ledger.claim_interrupted``). The pipeline is idempotent and ingest skips the
    segments already stored: what the killed run stored is kept and the rest is done. An event interrupted
    ``max_redeliveries`` times is marked failed instead. Call it with none of this process's events in flight."""
    if not rt.settings.embedded:
        return []
    events, given_up = rt.ledger.claim_interrupted(rt.settings.max_redeliveries, include_own=True)
    out = run_events(rt, events)  # together: their segments share model passes (workers.batching)
    return out + [r for eid in given_up if (r := rt.ledger.get(eid)) is not None]


#: Files ``engram ingest`` publishes and then runs together (``run_events``): their segments share model passes.
RUN_BATCH_FILES = 32


def run_event(rt: Runtime, event: MediaEvent) -> LedgerRecord:
    """Run the pipeline for ``event`` (inline on the embedded default) and return its ledger record."""
    return run_events(rt, [event])[0]


def run_events(rt: Runtime, events: list[MediaEvent]) -> list[LedgerRecord]:
    """Run the pipeline for ``events`` together (inline on the embedded default): each is validated and cut
    into segments by its own ``ingest``, then the segments of all of them are perceived, embedded in one pass
    and stored (``workers.batching``). A bad file fails alone, with its stage and reason in its record.
    Returns the events' ledger records, in order."""
    with deferred_segments() as jobs:
        for event in events:
            ingest.delay(event)
    run_segments(rt, jobs)
    records = [rt.ledger.get(event.event_id) for event in events]
    assert all(r is not None for r in records)
    return records
