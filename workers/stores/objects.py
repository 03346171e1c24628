"""Object store behind one small interface: a local folder (embedded default) or S3/MinIO (``minio`` SDK).

Keys are ``/``-separated, e.g. ``media/<tenant>/<sha256>.<ext>`` for published media and
``derived/<tenant>/<event_id>/...`` for what ingest cuts out of it (clip keyframes, audio chunks).
"""

from __future__ import annotations

import io
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from engram.schemas.errors import StoreError
from engram.schemas.settings import Settings

#: Seconds an S3 store trusts its last answer to whether the bucket keeps versions (``S3ObjectStore._versioned``).
VERSIONING_TTL_S = 60.0


class ObjectNotFound(StoreError, KeyError):
    """Raised when a key does not exist in the object store."""


class ObjectStore(Protocol):
    """What every object store offers. Implementations are safe to share between threads."""

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        """Store ``data`` under ``key`` (overwrites)."""

    def put_file(self, key: str, path: Path, content_type: str = "application/octet-stream") -> None:
        """Store the file at ``path`` under ``key`` without reading it all into memory."""

    def get_bytes(self, key: str) -> bytes:
        """The object's bytes. Raises ObjectNotFound."""

    def download(self, key: str, path: Path) -> None:
        """Write the object to ``path``. Raises ObjectNotFound."""

    def local_file(self, key: str) -> AbstractContextManager[Path]:
        """A file on this machine holding the object, to read while the context lasts: the local store's own
        file (no copy: an ingest of a chat file costs no temporary folder and no second write), else a download
        into a temporary folder removed on exit. Never write to it. Raises ObjectNotFound."""

    def exists(self, key: str) -> bool:
        """Whether ``key`` exists."""

    def size(self, key: str) -> int:
        """The object's size in bytes. Raises ObjectNotFound."""

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""

    def keys(self, prefix: str) -> list[str]:
        """Every key starting with ``prefix`` (e.g. ``derived/<tenant>/<event id>/``), sorted."""

    def ping(self) -> None:
        """Check the store is reachable and usable; raises OSError (or the SDK's error) if not."""


def _check_key(key: str) -> str:
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid object key {key!r}")
    return key


class LocalObjectStore:
    """Objects as files under ``root`` (the embedded default: ``$ENGRAM_DATA_DIR/objects``).

    Writes go to a temporary file and are renamed into place, so readers never see half an object.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / _check_key(key)

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        self._write(key, io.BytesIO(data))

    def put_file(self, key: str, path: Path, content_type: str = "application/octet-stream") -> None:
        with open(path, "rb") as fh:
            self._write(key, fh)

    def _write(self, key: str, src: io.BufferedIOBase | io.BytesIO) -> None:
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError as exc:
            raise ObjectNotFound(key) from exc

    def download(self, key: str, path: Path) -> None:
        try:
            with open(self._path(key), "rb") as src, open(path, "wb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
        except FileNotFoundError as exc:
            raise ObjectNotFound(key) from exc

    @contextmanager
    def local_file(self, key: str) -> Iterator[Path]:
        path = self._path(key)
        if not path.is_file():
            raise ObjectNotFound(key)
        yield path

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError as exc:
            raise ObjectNotFound(key) from exc

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def keys(self, prefix: str) -> list[str]:
        base = self.root / _check_key(prefix.rstrip("/"))
        start = base if base.is_dir() else base.parent
        if not start.is_dir():
            return []
        found = (
            p.relative_to(self.root).as_posix()
            for p in start.rglob("*")
            if p.is_file() and not p.name.startswith(".tmp-")
        )
        return sorted(k for k in found if k.startswith(prefix))

    def ping(self) -> None:
        if not self.root.is_dir():
            raise FileNotFoundError(f"object store folder {self.root} is missing")


class S3ObjectStore:
    """Objects in an S3 bucket (MinIO, SeaweedFS, AWS) through the ``minio`` SDK; the bucket is created
    on first use."""

    def __init__(
        self,
        endpoint: str,
        access_key: str | None,
        secret_key: str | None,
        bucket: str,
        secure: bool = False,
        region: str | None = None,
    ) -> None:
        from minio import Minio

        self.client = Minio(endpoint, access_key=access_key, secret_key=secret_key, secure=secure, region=region)
        self.bucket = bucket
        self._ready = False
        self._lock = threading.Lock()
        self._versioning = False
        self._versioning_at: float | None = None  # time.monotonic() of the last ask (``_versioned``)

    def _ensure_bucket(self) -> None:
        if self._ready:
            return
        with self._lock:
            if not self._ready:
                if not self.client.bucket_exists(self.bucket):
                    self.client.make_bucket(self.bucket)
                self._ready = True

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        self._ensure_bucket()
        self.client.put_object(self.bucket, _check_key(key), io.BytesIO(data), len(data), content_type=content_type)

    def put_file(self, key: str, path: Path, content_type: str = "application/octet-stream") -> None:
        self._ensure_bucket()
        self.client.fput_object(self.bucket, _check_key(key), str(path), content_type=content_type)

    def _not_found(self, exc: Exception) -> bool:
        from minio.error import S3Error

        return isinstance(exc, S3Error) and exc.code in ("NoSuchKey", "NoSuchBucket", "NoSuchObject")

    def get_bytes(self, key: str) -> bytes:
        self._ensure_bucket()
        try:
            resp = self.client.get_object(self.bucket, _check_key(key))
        except Exception as exc:
            if self._not_found(exc):
                raise ObjectNotFound(key) from exc
            raise
        try:
            return resp.read()
        finally:
            resp.close()
            resp.release_conn()

    def download(self, key: str, path: Path) -> None:
        self._ensure_bucket()
        try:
            self.client.fget_object(self.bucket, _check_key(key), str(path))
        except Exception as exc:
            if self._not_found(exc):
                raise ObjectNotFound(key) from exc
            raise

    @contextmanager
    def local_file(self, key: str) -> Iterator[Path]:
        with tempfile.TemporaryDirectory(prefix="engram-object-") as tmp:
            path = Path(tmp) / "object"
            self.download(key, path)
            yield path

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
            return True
        except ObjectNotFound:
            return False

    def size(self, key: str) -> int:
        self._ensure_bucket()
        try:
            return self.client.stat_object(self.bucket, _check_key(key)).size or 0
        except Exception as exc:
            if self._not_found(exc):
                raise ObjectNotFound(key) from exc
            raise

    def delete(self, key: str) -> None:
        """Remove ``key``; on a bucket whose versioning is or was on (``Enabled`` or ``Suspended``), every version of
        it and its delete markers too, so that nothing of a deleted object stays readable through S3 (a plain
        delete there only adds a delete marker above the kept versions). Whether the provider then erases the
        bytes from its disks is its own business (SeaweedFS: its vacuum; see docs/forget.md)."""
        from minio.deleteobjects import DeleteObject  # the SDK's, with the client already imported

        self._ensure_bucket()
        self.client.remove_object(self.bucket, _check_key(key))
        if not self._versioned():
            return
        versions = [
            DeleteObject(key, v.version_id)
            for v in self.client.list_objects(self.bucket, prefix=key, include_version=True)
            if v.object_name == key and v.version_id
        ]
        errors = list(self.client.remove_objects(self.bucket, versions)) if versions else []
        if errors:
            raise OSError(f"could not delete every version of {key!r}: {errors[0]}")

    def _versioned(self) -> bool:
        """Whether the bucket keeps versions (its versioning ``Enabled`` or ``Suspended``), asked at most once a
        minute; a server that does not answer the question (no permission, no versioning) counts as unversioned."""
        from minio.error import S3Error  # idem

        now = time.monotonic()
        if self._versioning_at is None or now - self._versioning_at > VERSIONING_TTL_S:
            try:
                status = self.client.get_bucket_versioning(self.bucket).status
            except S3Error:
                status = None
            self._versioning, self._versioning_at = status in ("Enabled", "Suspended"), now
        return self._versioning

    def keys(self, prefix: str) -> list[str]:
        self._ensure_bucket()
        return sorted(o.object_name for o in self.client.list_objects(self.bucket, prefix=prefix, recursive=True))

    def ping(self) -> None:
        self.client.bucket_exists(self.bucket)


def open_object_store(settings: Settings) -> ObjectStore:
    """The configured store: S3 when ``s3_endpoint`` is set, else a folder under ``data_dir``."""
    if settings.s3_endpoint:
        return S3ObjectStore(
            settings.s3_endpoint,
            settings.s3_access_key,
            settings.s3_secret_key,
            settings.s3_bucket,
            settings.s3_secure,
            settings.s3_region,
        )
    return LocalObjectStore(settings.data_dir / "objects")


# --- staged uploads (``api.uploads``): presigned PUTs land here before they are verified and published ---

#: where presigned uploads land before they are verified (``api.uploads``)
STAGING_PREFIX = "uploads/"
#: how long after its URL expired a staged upload is kept for its publish
STAGING_GRACE = timedelta(hours=1)


def expire_staged(store: ObjectStore, older_than: timedelta, now: datetime | None = None) -> int:
    """Delete the staged uploads of ``store`` last modified more than ``older_than`` before ``now`` (default:
    the current UTC time); returns how many. Only an S3 store (``minio`` client) stages uploads: any other
    store returns 0."""
    client = getattr(store, "client", None)
    if client is None:
        return 0
    cutoff = (now or datetime.now(UTC)) - older_than
    old = [
        o.object_name
        for o in client.list_objects(store.bucket, prefix=STAGING_PREFIX, recursive=True)
        if o.last_modified is not None and o.last_modified < cutoff
    ]
    for key in old:
        store.delete(key)
    return len(old)
