"""Presigned uploads bound to the declared size and sha256, and content-addressed objects never overwritten.

A presigned PUT URL (S3 SigV4 query signing, ``minio``'s ``presigned_put_object``) binds only the bucket, the
key and the expiry: any body of any length is accepted, and the same URL may be used again with other bytes
(tried on SeaweedFS). So no URL ever points at a content-addressed key (``media/<tenant>/<sha256>.<ext>``):

1. ``POST /v1/uploads`` presigns a **staging key** of its own, ``uploads/<tenant>/<sha256>.<ext>/<nonce>``
   (``staging_key``), one per request;
2. ``POST /v1/events`` then ``promote``-s the staged upload: its size must be the declared size and the
   sha256 of its bytes (read back from the store) the declared sha256, else it is deleted and the publish is
   refused (409) with the reason; a verified upload is copied server-side to the content-addressed key and
   the staged copy deleted.

Only verified bytes ever reach a content-addressed key, and every writer of one writes the same bytes, so an
object there is never replaced by other bytes. Staged uploads never published are deleted by beat's hourly
sweep (``workers.admin.expire_staged_task``) an hour after their URL expired.
"""

from __future__ import annotations

import hashlib
import secrets

from minio.commonconfig import CopySource

from engram.schemas.errors import EngramError
from engram.workers.stores.objects import STAGING_PREFIX

MEDIA_PREFIX = "media/"


class UploadRejected(EngramError, ValueError):
    """The staged upload is not what the event declares; ``str()`` is the one-line reason."""


def _staging_folder(object_key: str) -> str:
    """``uploads/<tenant>/<sha256>.<ext>/`` for the content-addressed ``media/<tenant>/<sha256>.<ext>``."""
    if not object_key.startswith(MEDIA_PREFIX):
        raise ValueError(f"not a content-addressed key: {object_key}")
    return STAGING_PREFIX + object_key[len(MEDIA_PREFIX) :] + "/"


def staging_key(object_key: str) -> str:
    """A fresh staging key for an upload of ``object_key``'s content (128 random bits per request)."""
    return _staging_folder(object_key) + secrets.token_hex(16)


def _sha256_of(store, key: str) -> str:
    """Hex sha256 of an object of an ``S3ObjectStore``, streamed in 1 MiB reads (``minio``'s ``get_object``)."""
    h = hashlib.sha256()
    resp = store.client.get_object(store.bucket, key)
    try:
        for chunk in resp.stream(1 << 20):
            h.update(chunk)
    finally:
        resp.close()
        resp.release_conn()
    return h.hexdigest()


def promote(store, object_key: str, size: int, sha256: str) -> bool:
    """Move a staged upload of ``object_key`` to it once it is verified: the first staged object whose size is
    ``size`` and whose bytes hash to ``sha256`` is copied server-side to ``object_key`` (``store``: an
    ``S3ObjectStore``); every staged object of that key is deleted, verified or not. Returns False when nothing
    was staged. Raises UploadRejected naming what differs when something was staged but none matches."""
    staged = store.keys(_staging_folder(object_key))
    reasons: list[str] = []
    promoted = False
    for key in staged:
        if not promoted:
            found = store.size(key)
            if found != size:
                reasons.append(f"the upload has {found} bytes, the event says {size}")
            elif (digest := _sha256_of(store, key)) != sha256:
                reasons.append(f"the uploaded bytes hash to sha256 {digest[:12]}…, the event says {sha256[:12]}…")
            else:
                store.client.copy_object(store.bucket, object_key, CopySource(store.bucket, key))
                promoted = True
        store.delete(key)
    if staged and not promoted:
        raise UploadRejected(f"upload rejected: {reasons[-1]}; upload the declared bytes again")
    return promoted
