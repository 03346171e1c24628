"""Archive routes: an archive of ``engram export --archive`` moved into a cluster through the HTTP API, or out of it
(``engram import FILE --api URL``, ``engram export --archive FILE --api URL``).

``POST /v1/archives/uploads`` gives a presigned PUT URL of a staging key of the key's tenant
(``uploads/archives/<tenant>/<uuid>.tar``: expired with the other stale uploads, ``workers.stores.objects.
expire_staged``); the client PUTs the archive there, then ``POST /v1/archives/imports`` asks the store worker
(``workers.archive``, queue ``consolidate``) to import it: an archive of another tenant, a bad or truncated one
is refused (422) with the reason before anything is written. ``POST /v1/archives/exports`` asks the store worker to
write one there and answers a presigned GET URL. Both wait for the worker's answer (up to
``ARCHIVE_TIMEOUT_S``): the request stays open while a large archive is imported.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import structlog
from fastapi import APIRouter, HTTPException

from engram.api.http.routes.deps import Services, Svc, Tenant
from engram.api.http.routes.errors import AUTH_ERRORS, responses, unavailable
from engram.schemas.archive import ArchiveAnswer, ArchiveExportRequest, ArchiveImportRequest, ArchiveUpload
from engram.workers.tasks import Task

log = structlog.get_logger(__name__)

router = APIRouter(tags=["archives"])

#: The staging folder of archives (``workers.memory.archive.STAGING_PREFIX``, not imported: the API loads no
#: engine); one folder per tenant.
STAGING_PREFIX = "uploads/archives/"
#: Seconds a request waits for the store worker's import or export.
ARCHIVE_TIMEOUT_S = 3600.0


def _staging(tenant: str) -> str:
    return f"{STAGING_PREFIX}{tenant}/"


def _presigner(svc: Services) -> Any:
    if svc.presigner is None:
        raise HTTPException(501, "this server has no S3 object store for archives (set ENGRAM_S3_ENDPOINT)")
    return svc.presigner


def _ask(svc: Services, task: Task, args: list[Any]) -> dict[str, Any]:
    """The store worker's answer to ``task``: 503 when the broker refuses it, 504 without an answer in time, 422
    with the worker's reason when it refuses."""
    from celery.exceptions import TimeoutError as CeleryTimeout  # with the producer, at the first archive

    try:
        result = svc.celery.send_task(task.value, args=args)
    except Exception as exc:
        raise unavailable("queue", exc) from exc
    try:
        got = result.get(timeout=ARCHIVE_TIMEOUT_S)
    except CeleryTimeout as exc:
        raise HTTPException(504, f"the store worker did not answer within {ARCHIVE_TIMEOUT_S:g} s") from exc
    finally:
        result.forget()
    if got.get("error"):
        raise HTTPException(422, str(got["error"]))
    return got


@router.post("/v1/archives/uploads", response_model=ArchiveUpload, responses=responses(*AUTH_ERRORS, 501))
def archive_upload(tenant: Tenant, svc: Svc) -> ArchiveUpload:
    """A presigned PUT URL for an archive to import (then POST /v1/archives/imports with its ``key``). 501 without
    an S3 object store."""
    presigner = _presigner(svc)
    key = f"{_staging(tenant)}{uuid.uuid4()}.tar"
    expiry = svc.settings.upload_url_expiry_seconds
    url = presigner.presigned_put_object(svc.objects.bucket, key, expires=timedelta(seconds=expiry))
    return ArchiveUpload(key=key, url=url, expires_in=expiry)


@router.post(
    "/v1/archives/imports",
    response_model=ArchiveAnswer,
    responses=responses(
        *AUTH_ERRORS,
        403,
        404,
        422,
        504,
        e404="Nothing was uploaded to the key.",
        e422="The archive is refused (bad, truncated, newer, another tenant's): the reason.",
    ),
)
def archive_import(body: ArchiveImportRequest, tenant: Tenant, svc: Svc) -> ArchiveAnswer:
    """Import the archive uploaded to ``key`` into the key's tenant, ids kept; what is already stored as the
    archive has it is not written again. The staged archive is deleted after. 403 for a key of another tenant's
    staging folder, 404 when nothing was uploaded there, 422 when the archive is refused (with the reason)."""
    if not body.key.startswith(_staging(tenant)) or "/" in body.key.removeprefix(_staging(tenant)):
        raise HTTPException(403, "not an archive key of this API key's tenant (POST /v1/archives/uploads gives one)")
    if not svc.objects.exists(body.key):
        raise HTTPException(
            404, "nothing uploaded to this key: PUT the archive to the URL of POST /v1/archives/uploads"
        )
    try:
        got = _ask(svc, Task.archive_import, [body.key, tenant])
    finally:
        svc.objects.delete(body.key)
    log.info("archive imported", tenant=tenant, user=got.get("user_id"))
    return ArchiveAnswer.model_validate(got)


@router.post(
    "/v1/archives/exports",
    response_model=ArchiveAnswer,
    responses=responses(*AUTH_ERRORS, 422, 501, 504, e422="Nothing to export: the reason."),
)
def archive_export(body: ArchiveExportRequest, tenant: Tenant, svc: Svc) -> ArchiveAnswer:
    """Write the archive of a user of the key's tenant (or of the whole tenant) and answer a presigned GET URL of
    it (the archive is removed with the stale uploads after its grace). 422 when there is nothing to export."""
    presigner = _presigner(svc)
    key = f"{_staging(tenant)}{uuid.uuid4()}-export.tar"
    got = _ask(svc, Task.archive_export, [tenant, body.user_id, key])
    expiry = svc.settings.upload_url_expiry_seconds
    url = presigner.presigned_get_object(svc.objects.bucket, key, expires=timedelta(seconds=expiry))
    return ArchiveAnswer.model_validate({**got, "url": url, "expires_in": expiry})
