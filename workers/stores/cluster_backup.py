"""Backup and restore of the distributed mode (``ENGRAM_BROKER_URL`` set): the store the store worker owns, the
objects (S3, or the shared data dir's ``objects/``) and the Redis ledger, into the same repositories, packs and
manifests as the embedded default's backup (``workers.stores.backup``: blocks of ``CHUNK_BYTES`` known by their
digest, ``chunk_digest``, so a second backup writes only new content; the manifest last).

A snapshot of the distributed mode holds, beside ``mode: "cluster"`` in its manifest:

- ``vectors/...``: the Qdrant Edge shards of the store worker (the one ``--pool solo`` process that opens the
  embedded store), written by that worker itself (task ``workers.backup.store_backup``, queue ``consolidate``,
  ``backup_store`` here): it closes its store (shards flushed, closed, their integrity manifests written), takes
  the store's file lock again so that nothing opens a shard, and cuts the closed shards' files into blocks
  stored straight into the repository, then lets go (the next task opens the store again). The repository must
  be one the worker can reach: ``s3://...`` (the worker uses its own ``ENGRAM_S3_*`` keys and the endpoint the
  command gives), or a folder the worker and the command share (checked with a probe file; refused otherwise);
- ``redis/engram.json``: every Redis key under ``engram:`` (the ledger, API keys, publish and resume claims),
  each as Redis's own ``DUMP`` with its time to live, read by the same task while the store is held, so ledger
  and store are of the same moment (no store write happens meanwhile); the broker's queues are not copied;
- ``objects/<key>``: the objects, listed and read by the command after the task returned (an object is
  published before the ledger and the store name it, so every object they name is there); an S3 object whose
  size and ETag are those of the repository's previous snapshot of the same cluster is not read again.

``restore_cluster`` writes such a snapshot into an empty cluster (no ``engram:`` key in Redis, no object, no
shard; a non-empty one is refused before anything is written): the store through the store worker (task
``workers.backup.store_restore``: ``backup.restore_files`` into its ``vectors/``, with the embedded restore's
marker and resume), then the objects, then the Redis keys (``RESTORE ... REPLACE``). A Redis key
``engram-restore`` (outside ``engram:``) names the snapshot while a restore is under way: a restore killed part
way is completed by the same command, and the key goes last.

A Qdrant server (``ENGRAM_QDRANT_URL``) is not covered: refused with the reason (use Qdrant's snapshot API).
Nothing here is owned by a thread; each call owns its repository and its thread pool.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from engram.schemas.settings import Settings
from engram.workers.stores.backup import (
    CLUSTER_MODE,
    RESTORE_MARKER,
    TMP_PREFIX,
    BackupError,
    BackupPass,
    BackupResult,
    FileEntry,
    FolderRepository,
    Progress,
    Repository,
    RestoreResult,
    Tally,
    check_restorable,
    chunk_hasher,
    chunk_stream,
    load_manifest,
    open_repository,
    previous_entries,
    restore_files,
    syncfs,
    thread_map,
    without_gc,
    write_manifest,
)
from engram.workers.stores.objects import open_object_store
from engram.workers.stores.private import PRIVATE_UMASK
from engram.workers.tasks import Task

#: The Redis keys a backup copies: every key of engram's (ledger, API keys, claims); not the broker's queues.
REDIS_PREFIX = "engram:"
#: The Redis key naming the snapshot a restore is writing (outside ``REDIS_PREFIX``: not copied, not counted).
RESTORE_KEY = "engram-restore"
#: Paths in a cluster snapshot: the Redis keys' dump, the store's folder, the objects' folder.
REDIS_FILE = "redis/engram.json"
STORE_DIR = "vectors"
OBJECTS_DIR = "objects"
#: Object key prefixes left out: presigned uploads not yet verified and published (``stores.objects``).
SKIPPED_OBJECTS = ("uploads/",)


def redis_url(settings: Settings) -> str | None:
    """The Redis the ledger lives in (``ENGRAM_REDIS_URL``, else the broker's), as ``open_ledger`` chooses it."""
    url = settings.redis_url or settings.broker_url
    return url if url and url.startswith(("redis://", "rediss://", "unix://")) else None


# --- Redis -------------------------------------------------------------------------------------------------


def dump_redis(url: str, batch: int = 500) -> bytes:
    """Every key under ``REDIS_PREFIX`` as JSON ``{"format": 1, "keys": [{"key", "pttl", "dump"}]}`` (``dump``:
    base64 of Redis's ``DUMP``; ``pttl`` ms, 0 for none), read in transactions of ``batch`` keys. A key deleted
    between the scan and its read is left out."""
    import redis  # the distributed mode's client: imported when a cluster is backed up

    r = redis.Redis.from_url(url)
    try:
        keys = sorted(set(r.scan_iter(match=f"{REDIS_PREFIX}*", count=1000)))
        out = []
        for i in range(0, len(keys), batch):
            pipe = r.pipeline(transaction=True)
            for key in keys[i : i + batch]:
                pipe.pttl(key)
                pipe.dump(key)
            got = pipe.execute()
            for key, ttl, payload in zip(keys[i : i + batch], got[0::2], got[1::2], strict=True):
                if payload is not None:
                    out.append(
                        {
                            "key": base64.b64encode(key).decode(),
                            "pttl": max(int(ttl), 0),
                            "dump": base64.b64encode(payload).decode(),
                        }
                    )
        return json.dumps({"format": 1, "prefix": REDIS_PREFIX, "keys": out}).encode()
    finally:
        r.close()


def load_redis(url: str, data: bytes, batch: int = 500) -> int:
    """Write the keys of a ``dump_redis`` back (``RESTORE ... REPLACE``: a second run rewrites them); returns how
    many. Raises BackupError when Redis refuses a payload (written by a newer Redis)."""
    import redis  # the distributed mode's client

    keys = json.loads(data)["keys"]
    r = redis.Redis.from_url(url)
    try:
        for i in range(0, len(keys), batch):
            pipe = r.pipeline(transaction=False)
            for k in keys[i : i + batch]:
                pipe.restore(base64.b64decode(k["key"]), int(k["pttl"]), base64.b64decode(k["dump"]), replace=True)
            try:
                pipe.execute()
            except redis.ResponseError as exc:
                raise BackupError(
                    f"Redis at {url} refused the backup's keys ({exc}): is it older than the Redis "
                    "the backup was taken from?"
                ) from exc
        return len(keys)
    finally:
        r.close()


def _redis_keys(url: str) -> int:
    """Whether Redis holds any key under ``REDIS_PREFIX`` (1) or not (0)."""
    import redis  # the distributed mode's client

    r = redis.Redis.from_url(url)
    try:
        return 1 if next(iter(r.scan_iter(match=f"{REDIS_PREFIX}*", count=1000)), None) is not None else 0
    finally:
        r.close()


# --- the store worker's part ---------------------------------------------------------------------------------


def worker_target(repo: Repository, s3: dict[str, Any] | None) -> dict[str, Any]:
    """What the store worker needs to open ``repo`` itself (task arguments: no keys, no bytes): its location,
    for S3 the endpoint options (the worker's own keys are used), for a folder a probe file made here that the
    worker must see (removed by ``drop_probe``)."""
    if isinstance(repo, FolderRepository):
        probe = f".probe-{uuid.uuid4().hex}"
        (repo.root / probe).touch(mode=0o600)
        return {"location": repo.location, "probe": probe}
    return {
        "location": repo.location,
        "s3": {k: v for k, v in (s3 or {}).items() if k in ("endpoint", "secure", "region")},
    }


def drop_probe(target: dict[str, Any]) -> None:
    """Remove the probe file ``worker_target`` made (nothing for S3)."""
    if target.get("probe"):
        (Path(target["location"]) / target["probe"]).unlink(missing_ok=True)


def _open_target(target: dict[str, Any], settings: Settings, create: bool) -> Repository:
    """The repository of ``target`` as the store worker opens it: shared (the command holds its lock)."""
    location = str(target["location"])
    if location.startswith("s3://"):
        s3 = {**target.get("s3", {}), "access_key": settings.s3_access_key, "secret_key": settings.s3_secret_key}
        return open_repository(location, create=create, s3=s3, shared=True)
    probe = target.get("probe")
    if not probe or not (Path(location) / probe).exists():
        raise BackupError(
            f"the store worker ({os.uname().nodename}) cannot see the backup folder {location}: give "
            "an s3:// destination, or a folder that the store worker and this command share"
        )
    return open_repository(location, create=create, shared=True)


def _store_files(root: Path) -> tuple[list[tuple[Path, str]], list[str]]:
    """The store's files as (path, path in the snapshot) and its folders (in the snapshot), temporary files of
    the engine's compaction left out as the embedded backup leaves them."""
    files, dirs = [], [STORE_DIR]
    for path in sorted(root.rglob("*")) if root.is_dir() else []:
        rel = f"{STORE_DIR}/{path.relative_to(root).as_posix()}"
        if path.is_dir():
            dirs.append(rel)
        elif path.is_file() and not path.is_symlink() and not path.name.startswith(".tmp-"):
            files.append((path, rel))
    return files, dirs


@without_gc
def backup_store(store: Any, root: Path, target: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Run by the store worker (``workers.backup.store_backup``): the closed shards of ``store`` (its folder
    ``root``) and the Redis keys, of one moment, into the repository of ``target`` (see the module's docstring).
    Returns ``{"files": [entries], "dirs": [...], "read_bytes", "written_bytes", "new_chunks", "reused_chunks",
    "held_seconds"}``. Raises BackupError (the repository unreachable from here)."""
    os.umask(PRIVATE_UMASK)
    repo = _open_target(target, settings, create=True)
    tally, entries, vanished = Tally(), [], []  # type: ignore[var-annotated]
    try:
        store.close()  # shards flushed and closed, their integrity manifests written; the lock let go
        store.hold()  # taken again: no shard is opened until the copy is made
        held = time.perf_counter()
        try:
            root.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=root.parent, prefix=f"{TMP_PREFIX}{os.getpid()}-") as tmp:
                files, dirs = _store_files(root)
                url = redis_url(settings)
                if url:
                    dump = Path(tmp) / "engram.json"
                    dump.write_bytes(dump_redis(url))
                    files.append((dump, REDIS_FILE))
                    dirs.append(REDIS_FILE.split("/")[0])
                BackupPass("store", repo, {}, tally, lambda *a: None, repo.threads).run(files, entries, vanished)
        finally:
            store.close()
            held_s = time.perf_counter() - held
        repo.flush()
        if isinstance(repo, FolderRepository):
            syncfs(repo.root)  # durable before the command writes the manifest that names these blocks
    finally:
        repo.close()
    return {
        "files": [e.to_json() for e in entries],
        "dirs": dirs,
        "read_bytes": tally.read_bytes,
        "written_bytes": tally.written_bytes,
        "new_chunks": tally.new_chunks,
        "reused_chunks": tally.reused_chunks,
        "held_seconds": held_s,
    }


def restore_store(
    store: Any, root: Path, target: dict[str, Any], snapshot: str, settings: Settings, resuming: bool = False
) -> dict[str, Any]:
    """Run by the store worker (``workers.backup.store_restore``): the ``vectors/`` files of ``snapshot`` into the
    store's folder ``root``, which must be empty or missing (or hold an unfinished restore of the same snapshot:
    completed), with the store's lock held. ``resuming``: the cluster's restore of this snapshot was begun
    before (``RESTORE_KEY``), so a store without the restore's marker holding files is this restore's,
    complete (the first run's check refused any other). Returns ``{"files", "bytes", "resumed_files"}``. Raises
    BackupError (a non-empty store, a damaged chunk)."""
    repo = _open_target(target, settings, create=False)
    try:
        name, manifest = load_manifest(repo, snapshot)
        prefix = f"{STORE_DIR}/"
        files = [{**f, "path": f["path"][len(prefix) :]} for f in manifest["files"] if f["path"].startswith(prefix)]
        dirs = [d[len(prefix) :] for d in manifest.get("dirs", []) if d.startswith(prefix)]
        store.close()
        store.hold()
        try:
            done = resuming and root.is_dir() and not (root / RESTORE_MARKER).exists() and any(root.iterdir())
            resumed = (
                len(files)
                if done
                else restore_files(
                    repo, name, files, dirs, root, check_restorable(root, name), hasher=chunk_hasher(manifest)
                ).resumed
            )
        finally:
            store.close()
    finally:
        repo.close()
    return {"files": len(files), "bytes": sum(int(f["size"]) for f in files), "resumed_files": resumed}


# --- the command's part: objects, and the whole ------------------------------------------------------------


def _object_listing(objects: Any) -> list[tuple[str, int, int, str]]:
    """(key, size, mtime ns, ETag) of every object of ``objects`` (S3, or a local folder's files), presigned
    uploads left out."""
    client = getattr(objects, "client", None)
    out = []
    if client is not None:
        if client.bucket_exists(objects.bucket):
            for o in client.list_objects(objects.bucket, recursive=True):
                mtime = int(o.last_modified.timestamp() * 1e9) if o.last_modified else 0
                out.append((o.object_name, int(o.size or 0), mtime, str(o.etag or "")))
    elif objects.root.is_dir():  # a folder (a cluster sharing its data dir): (inode, ctime) stand for an ETag
        for path in sorted(objects.root.rglob("*")):
            if path.is_file() and not path.is_symlink() and not path.name.startswith(".tmp-"):
                st = path.stat()
                out.append(
                    (
                        path.relative_to(objects.root).as_posix(),
                        st.st_size,
                        st.st_mtime_ns,
                        f"{st.st_ino}-{st.st_ctime_ns}",
                    )
                )
    return [row for row in out if not row[0].startswith(SKIPPED_OBJECTS)]


class _ObjectPass:
    """The objects of a cluster read into blocks (``chunk_stream``) by ``threads``: one unchanged since the
    previous snapshot (size and ETag) is taken from it without being read."""

    def __init__(
        self, objects: Any, repo: Repository, previous: dict[str, FileEntry], tally: Tally, report: Progress
    ) -> None:
        self.objects, self.repo, self.previous, self.tally, self.report = objects, repo, previous, tally, report
        self.done, self.total = 0, 0

    def advance(self, n: int) -> None:
        """Count ``n`` more bytes read and report them."""
        with self.tally.lock:
            self.done += n
            self.report("objects", self.done, max(self.total, self.done))

    def one(self, row: tuple[str, int, int, str]) -> FileEntry | None:
        """The entry of one object (None when it was deleted since it was listed)."""
        key, size, mtime, etag = row
        rel = f"{OBJECTS_DIR}/{key}"
        old = self.previous.get(rel)
        if (
            old is not None
            and (old.size, old.etag) == (size, etag)
            and etag
            and all(self.repo.has_chunk(d) for _, d in old.blocks)
        ):
            with self.tally.lock:
                self.tally.unchanged_files += 1
                self.tally.reused_chunks += len(old.blocks)
            self.advance(size)
            return old
        client = getattr(self.objects, "client", None)
        try:
            if client is not None:
                resp = client.get_object(self.objects.bucket, key)
                try:
                    return chunk_stream(resp.read, rel, size, mtime, self.repo, self.tally, self.advance, etag)
                finally:
                    resp.close()
                    resp.release_conn()
            with open(self.objects.root / key, "rb") as f:
                return chunk_stream(f.read, rel, size, mtime, self.repo, self.tally, self.advance, etag)
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 (minio's S3Error NoSuchKey: deleted since it was listed)
            if getattr(exc, "code", "") == "NoSuchKey":
                return None
            raise

    def run(self) -> tuple[list[FileEntry], list[str]]:
        """Every object's entry, and the keys deleted while the backup ran."""
        rows = _object_listing(self.objects)
        self.total = sum(r[1] for r in rows)
        got = thread_map(self.one, rows, self.repo.threads, "engram-backup-objects")
        return (
            [e for e in got if e is not None],
            [f"{OBJECTS_DIR}/{r[0]}" for r, e in zip(rows, got, strict=True) if e is None],
        )


def describe(settings: Settings) -> str:
    """The cluster's name in a manifest's ``source``: its Redis (without a password), its objects' place and its
    store."""
    url = urlsplit(redis_url(settings) or "")
    host = url.hostname or url.path
    redis_at = f"{url.scheme}://{host}{f':{url.port}' if url.port else ''}{url.path if url.hostname else ''}"
    objects = (
        f"s3://{settings.s3_bucket}@{settings.s3_endpoint}"
        if settings.s3_endpoint
        else str(settings.data_dir / "objects")
    )
    return f"cluster redis={redis_at} objects={objects} store=store-worker"


def _refuse_qdrant_server(settings: Settings, what: str) -> None:
    if settings.qdrant_url:
        raise BackupError(
            f"engram {what} of a cluster on a Qdrant server (ENGRAM_QDRANT_URL) is not built: take "
            "the collections' snapshots with Qdrant's snapshot API, and back up S3 and Redis with "
            "their own tools"
        )


#: How the command asks the store worker: ``ask(task name, args) -> dict`` (the task's answer; the caller sends it
#: through the cluster's broker and waits). An answer with ``error`` is the worker's refusal.
Ask = Callable[[str, list[Any]], dict[str, Any]]


def _answer(got: dict[str, Any]) -> dict[str, Any]:
    if got.get("error"):
        raise BackupError(str(got["error"]))
    return got


@without_gc
def backup_cluster(
    settings: Settings,
    repo: Repository,
    ask: Ask,
    s3: dict[str, Any] | None = None,
    *,
    progress: Progress | None = None,
) -> BackupResult:
    """Write a snapshot of the cluster of ``settings`` into ``repo`` (see the module's docstring). ``ask``: sends a
    task to the store worker (``Ask``); ``s3``: the endpoint options of an ``s3://`` repository (the store worker
    opens it too). Raises BackupError (a Qdrant server, the worker unable to reach ``repo``, what ``ask`` raises
    when no worker answers), OSError (a full disk: earlier snapshots untouched)."""
    _refuse_qdrant_server(settings, "backup")
    t0 = time.perf_counter()
    report = progress or (lambda phase, done, total: None)
    source = describe(settings)
    previous = previous_entries(repo, source)
    target = worker_target(repo, s3)
    try:
        report("store", 0, 1)
        got = _answer(ask(Task.store_backup.value, [target]))
        report("store", 1, 1)
    finally:
        drop_probe(target)
    tally = Tally(
        read_bytes=got["read_bytes"],
        written_bytes=got["written_bytes"],
        new_chunks=got["new_chunks"],
        reused_chunks=got["reused_chunks"],
    )
    entries = [FileEntry.from_json(d) for d in got["files"]]
    found, vanished = _ObjectPass(open_object_store(settings), repo, previous, tally, report).run()
    entries.extend(found)
    name = write_manifest(repo, source, entries, sorted(got["dirs"]), mode=CLUSTER_MODE)
    return BackupResult(
        repo.location,
        name,
        len(entries),
        sum(e.size for e in entries),
        tally.read_bytes,
        tally.written_bytes,
        tally.new_chunks,
        tally.reused_chunks,
        tally.unchanged_files,
        time.perf_counter() - t0,
        float(got["held_seconds"]),
        "excluded",
        sorted(vanished),
    )


def _check_empty(objects: Any, url: str | None, name: str) -> bool:
    """Whether a restore of snapshot ``name`` is resumed (``RESTORE_KEY`` names it); else the cluster must be
    empty: no Redis key under ``REDIS_PREFIX``, no object (the store is checked by the store worker). Raises
    BackupError naming what is not empty, or the other snapshot a restore under way writes."""
    import redis  # the distributed mode's client

    if url:
        r = redis.Redis.from_url(url, decode_responses=True)
        try:
            began = r.get(RESTORE_KEY)
        finally:
            r.close()
        if began == name:
            return True
        if began:
            raise BackupError(
                f"a restore of snapshot {began} into this cluster is not finished: run that restore "
                f"again (--snapshot {began})"
            )
        if _redis_keys(url):
            raise BackupError(
                f"the cluster's Redis ({url}) holds engram keys ({REDIS_PREFIX}*): restore into an "
                "empty cluster (a new Redis database, bucket and store); nothing was written"
            )
    rows = _object_listing(objects)
    if rows:
        raise BackupError(
            f"the cluster's object store holds {len(rows)} objects (e.g. {rows[0][0]}): restore into "
            "an empty cluster (a new bucket); nothing was written"
        )
    return False


def _marker(url: str, name: str | None) -> None:
    """Set ``RESTORE_KEY`` to the snapshot being restored, or remove it (None)."""
    import redis  # the distributed mode's client

    r = redis.Redis.from_url(url)
    try:
        if name is None:
            r.delete(RESTORE_KEY)
        else:
            r.set(RESTORE_KEY, name)
    finally:
        r.close()


def _put_object(
    objects: Any, repo: Repository, entry: FileEntry, key: str, hasher: Callable[[bytes | memoryview], str]
) -> None:
    """Write one object of the snapshot into ``objects``, every block checked against its digest (``hasher``: the
    manifest's), through a temporary file (an object may be larger than memory allows)."""
    with tempfile.TemporaryDirectory(prefix="engram-restore-") as tmp:
        path = Path(tmp) / "object"
        with open(path, "wb") as f:
            f.truncate(entry.size)
            for off, digest in entry.blocks:
                data = repo.get_chunk(digest)
                if hasher(data) != digest:
                    raise BackupError(f"chunk {digest} in {repo.location} is damaged; {key} cannot be restored")
                f.seek(off)
                f.write(data)
        objects.put_file(key, path)


def restore_cluster(
    settings: Settings,
    repo: Repository,
    ask: Ask,
    snapshot: str | None = None,
    s3: dict[str, Any] | None = None,
    *,
    progress: Progress | None = None,
) -> RestoreResult:
    """Write ``snapshot`` (default: the newest) of ``repo``, a backup of the distributed mode, into the empty
    cluster of ``settings`` (see the module's docstring): the store through the store worker (``ask``), then the
    objects, then the Redis keys. Raises BackupError (not a cluster backup, a non-empty cluster, a newer backup, a
    damaged chunk, the worker's refusal), OSError."""
    _refuse_qdrant_server(settings, "restore")
    t0 = time.perf_counter()
    report = progress or (lambda phase, done, total: None)
    name, manifest = load_manifest(repo, snapshot)
    if manifest.get("mode") != CLUSTER_MODE:
        raise BackupError(
            f"snapshot {name} is a backup of the embedded default's data dir: restore it without "
            "ENGRAM_BROKER_URL (into a data dir), or move it with `engram export --archive`"
        )
    hasher = chunk_hasher(manifest)
    objects, url = open_object_store(settings), redis_url(settings)
    resuming = _check_empty(objects, url, name)
    if url and not resuming:
        _marker(url, name)
    target = worker_target(repo, s3)
    try:
        got = _answer(ask(Task.store_restore.value, [target, name, resuming]))
    except BackupError:
        if url and not resuming:  # refused before writing (a non-empty store): no restore is under way
            _marker(url, None)
        raise
    finally:
        drop_probe(target)
    entries = [FileEntry.from_json(d) for d in manifest["files"]]
    wanted = [e for e in entries if e.path.startswith(f"{OBJECTS_DIR}/")]
    total, done, lock = sum(e.size for e in wanted), [0], threading.Lock()
    have = {row[0]: row[1] for row in _object_listing(objects)} if resuming else {}

    def put(entry: FileEntry) -> None:
        key = entry.path[len(OBJECTS_DIR) + 1 :]
        if have.get(key) != entry.size:  # written whole by an interrupted run otherwise (a PUT is atomic)
            _put_object(objects, repo, entry, key, hasher)
        with lock:
            done[0] += entry.size
            report("objects", done[0], total)

    thread_map(put, wanted, repo.threads, "engram-restore-objects")
    dump = next((e for e in entries if e.path == REDIS_FILE), None)
    if url and dump is not None:
        data = bytearray(dump.size)
        for off, digest in dump.blocks:
            chunk = repo.get_chunk(digest)
            if hasher(chunk) != digest:
                raise BackupError(f"chunk {digest} in {repo.location} is damaged; the Redis keys cannot be restored")
            data[off : off + len(chunk)] = chunk
        load_redis(url, bytes(data))
        _marker(url, None)
    return RestoreResult(
        repo.location,
        name,
        str(manifest.get("engram_version")),
        str(manifest.get("created")),
        describe(settings),
        len(entries),
        sum(e.size for e in entries),
        int(got.get("resumed_files", 0)),
        time.perf_counter() - t0,
        "excluded",
    )
