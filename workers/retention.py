"""Stage ``retention`` (queue ``consolidate``: a process that may open the vector store): beat's periodic run of
retention and the storage cap in the distributed mode (``stores.retention.apply_retention``: originals older than
their kind's ``ENGRAM_RETENTION_<KIND>_DAYS``, then the oldest while over ``ENGRAM_STORAGE_CAP_BYTES``; their
text, vectors, thumbnails and memories stay), and ``engram retention`` through the workers. The embedded default
runs it after consolidation instead (``stores.retention.apply_if_due``).
"""

from __future__ import annotations

from datetime import datetime

import structlog

from engram.workers.app import task
from engram.workers.runtime import runtime
from engram.workers.stores.retention import apply_retention, configured
from engram.workers.tasks import Task

log = structlog.get_logger(__name__)


@task(Task.retention, "beat")
def retention_task(dry_run: bool = False, now: str | None = None) -> dict:
    """Apply retention once (``dry_run``: only report); ``now``: the reference time (ISO 8601, default the current
    time). Returns the ``RetentionReport`` as JSON; without any rule set, an empty report at once."""
    rt = runtime()
    at = datetime.fromisoformat(now) if now else None
    if not configured(rt.settings):
        log.debug("retention: no rule set")
    return apply_retention(rt, dry_run=dry_run, now=at).model_dump(mode="json")
