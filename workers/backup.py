"""Stage ``backup`` (queue ``consolidate``: the store worker, the one process that opens the embedded store in the
distributed mode): ``engram backup`` and ``engram restore`` of a cluster ask it for the store's part
(``stores.cluster_backup``): a consistent copy of its closed Qdrant Edge shards and of the Redis ledger written
into the backup's repository, or a snapshot's shards written into its empty store. A refusal (the repository out
of reach, a non-empty store) is answered as ``{"error": reason}`` for the command to print.
"""

from __future__ import annotations

import structlog

from engram.workers.app import task
from engram.workers.runtime import runtime
from engram.workers.stores.backup import BackupError
from engram.workers.stores.cluster_backup import backup_store, restore_store
from engram.workers.stores.vectors import embedded_store_dir
from engram.workers.tasks import Task

log = structlog.get_logger(__name__)


@task(Task.store_backup, "request", acks_late=False)
def store_backup_task(target: dict) -> dict:
    """Write the store's closed shards and the Redis keys into the repository of ``target``
    (``cluster_backup.worker_target``); returns their manifest entries and tallies, or ``{"error": ...}``."""
    rt = runtime()
    try:
        got = backup_store(rt.vectors, embedded_store_dir(rt.settings), target, rt.settings)
    except BackupError as exc:
        log.warning("store backup refused", error=str(exc))
        return {"error": str(exc)}
    log.info(
        "store backed up",
        files=len(got["files"]),
        written_bytes=got["written_bytes"],
        held_seconds=round(got["held_seconds"], 2),
    )
    return got


@task(Task.store_restore, "request", acks_late=False)
def store_restore_task(target: dict, snapshot: str, resuming: bool = False) -> dict:
    """Write the store's files of ``snapshot`` from the repository of ``target`` into the empty store (``resuming``:
    the cluster's restore of it was begun before); returns ``{"files", "bytes", "resumed_files"}`` or
    ``{"error": ...}``."""
    rt = runtime()
    try:
        got = restore_store(rt.vectors, embedded_store_dir(rt.settings), target, snapshot, rt.settings, resuming)
    except BackupError as exc:
        log.warning("store restore refused", error=str(exc))
        return {"error": str(exc)}
    log.info("store restored", **got)
    return got
