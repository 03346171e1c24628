"""Stage ``archive`` (queue ``consolidate``: the store worker, the one process that opens the embedded store in the
distributed mode): ``engram import FILE`` and ``engram export --archive FILE`` of a cluster ask it to import an
archive the command staged in the object store, or to write one there for the command to fetch
(``workers.memory.archive``: the same code as the embedded default's, on the cluster's stores: the Redis ledger,
the S3 objects, the worker's vector store). A refusal (a bad archive, nothing to export) is answered as
``{"error": reason}`` for the command to print.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import structlog

from engram.workers.app import task
from engram.workers.memory.archive import (
    STAGING_PREFIX,
    ArchiveError,
    export_archive,
    import_archive,
    verify_archive,
)
from engram.workers.runtime import runtime
from engram.workers.tasks import Task

log = structlog.get_logger(__name__)


@task(Task.archive_import, "request", acks_late=False)
def archive_import_task(key: str, tenant_id: str | None = None) -> dict:
    """Import the archive staged at object ``key`` (under ``STAGING_PREFIX``) into the cluster's stores; with
    ``tenant_id`` (an import through the HTTP API: the API key's tenant), one of another tenant is refused.
    Returns ``ArchiveResult.to_json()`` or ``{"error": ...}``. The staged object is the caller's to delete."""
    rt = runtime()
    if not key.startswith(STAGING_PREFIX):
        return {"error": f"{key!r} is not a staged archive"}
    try:
        with rt.objects.local_file(key) as path:
            manifest = verify_archive(Path(path))
            if tenant_id is not None and manifest["tenant_id"] != tenant_id:
                return {
                    "error": f"the archive is of tenant {manifest['tenant_id']!r}, not of this API key's "
                    f"({tenant_id!r})"
                }
            result = import_archive(rt, Path(path), manifest)
    except ArchiveError as exc:
        log.warning("archive import refused", error=str(exc))
        return {"error": str(exc)}
    return result.to_json()


@task(Task.archive_export, "request", acks_late=False)
def archive_export_task(tenant_id: str, user_id: str | None, key: str) -> dict:
    """Write the archive of ``user_id`` of ``tenant_id`` (None: the whole tenant) to object ``key`` (under
    ``STAGING_PREFIX``); returns ``ArchiveResult.to_json()`` (its ``path``: the key) or ``{"error": ...}``. The
    object is the command's to fetch and delete."""
    rt = runtime()
    if not key.startswith(STAGING_PREFIX):
        return {"error": f"{key!r} is not an archive's staging key"}
    with tempfile.TemporaryDirectory(dir=rt.settings.data_dir, prefix=".engram-export-") as tmp:
        try:
            result = export_archive(rt, Path(tmp) / "archive.tar", tenant_id, user_id)
        except ArchiveError as exc:
            return {"error": str(exc)}
        rt.objects.put_file(key, Path(tmp) / "archive.tar", "application/x-tar")
    return {**result.to_json(), "path": key}
