"""Beat's sweep of staged uploads (``api.uploads``): a presigned PUT writes ``uploads/<tenant>/<sha256>.<ext>/
<nonce>``, and publishing verifies and moves it; what is never published is deleted here once no URL can still
write it and its publisher had an hour to publish. Runs on the ``maintenance`` queue, hourly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engram.workers.app import app
from engram.workers.objectstore import ObjectStore

#: where presigned uploads land before they are verified (``api.uploads``)
STAGING_PREFIX = "uploads/"
#: how long after its URL expired a staged upload is kept for its publish
GRACE = timedelta(hours=1)


def expire_staged(store: ObjectStore, older_than: timedelta, now: datetime | None = None) -> int:
    """Delete the staged uploads of ``store`` last modified more than ``older_than`` before ``now`` (default:
    the current UTC time); returns how many. Only an S3 store (``minio`` client) stages uploads: any other
    store returns 0."""
    client = getattr(store, "client", None)
    if client is None:
        return 0
    cutoff = (now or datetime.now(UTC)) - older_than
    old = [o.object_name for o in client.list_objects(store.bucket, prefix=STAGING_PREFIX, recursive=True)
           if o.last_modified is not None and o.last_modified < cutoff]
    for key in old:
        store.delete(key)
    return len(old)


@app.task(name="workers.uploads.expire_staged")
def expire_staged_task() -> dict[str, int]:
    """Beat's hourly sweep: staged uploads older than the URL lifetime (``upload_url_expiry_seconds``) plus an
    hour are deleted. Returns {"deleted": n}."""
    from engram.workers.runtime import log, runtime  # the API imports this module for STAGING_PREFIX only

    rt = runtime()
    n = expire_staged(rt.objects, timedelta(seconds=rt.settings.upload_url_expiry_seconds) + GRACE)
    if n:
        log.info("staged uploads expired", deleted=n)
    return {"deleted": n}
