"""Backup and restore of the embedded default's data dir: consistent, content-addressed, incremental.

A backup is a *repository* (a folder, or ``s3://bucket/prefix``) holding

- ``packs/<2 hex>/<id>.pack`` and ``.idx``: file contents cut into fixed blocks of ``CHUNK_BYTES`` at offsets
  that are multiples of it, each stored once, known by the BLAKE3 digest of its bytes (``CHUNK_HASH``: the
  ``blake3`` package, the reference Rust implementation with SIMD, hashed 64 KiB blocks at 2.1-5.4 GB/s on one
  core here against SHA-256's 0.8-1.5 GB/s with SHA-NI; manifests of format 1 named blocks by their SHA-256 and
  are still restored), gathered into packs of about ``PACK_BYTES`` whose index (written after the pack) says
  where each block is. Each thread of a backup appends to a pack of its own (no lock held while writing), in a
  folder with ``O_DIRECT`` (from the read buffer to the disk, no copy into the page cache; small blocks gathered
  and padded to a page: ``FolderRepository.put_chunks``) where the filesystem takes it.
  A block that is a hole of a sparse file (``os.SEEK_DATA``/``SEEK_HOLE``) or all zeros is not stored at all (the
  store's engine preallocates 32 MiB files mostly empty). Blocks at fixed offsets suit the store's files, which
  change in place (memory-mapped vectors, pages, bitmaps) or grow at their end: a block that did not change has
  the digest it had, so a second backup writes only the blocks that changed. Whole objects that did not change
  (same path, size, mtime, inode and ctime as in the repository's last snapshot of this data dir) are not even
  read again.
- ``snapshots/<UTC time>-<16 hex>.json.gz``: one manifest per complete backup (``FORMAT_VERSION``, the engram
  version that wrote it, and for every file its size, mtime, blocks and a digest over them), written LAST and
  atomically (a folder: a temporary file, fsync, rename; S3: one PUT), after every pack it needs is durable
  (``syncfs`` of the folder's filesystem). Its name carries the start of the SHA-256 of its own bytes. A backup
  interrupted (killed, the disk full) leaves no manifest, so it is never taken for a complete one; the packs it
  completed (with their index) are reused by the next run.

What is copied, and how each part is made consistent while ``engram capture``, ``mcp`` or ``ui`` keep running:

- the store (``vectors/``): under the store's own file lock (``_StoreHold``: the lock and hand-off of
  ``EdgeVectorStore.hold``, without importing the engine: a process only lingering with the store closes it at
  once, one in the middle of a unit of work finishes it first, and a process that wants the store meanwhile
  waits for the backup, up to ``ENGRAM_STORE_WAIT_SECONDS``). With the lock held no process has a shard open,
  so the shard files are those of a closed store (Qdrant Edge has no API to make a snapshot of a shard: only to
  apply one). The lock is held while the store's blocks are read, hashed and (when new) written, and let go
  before the objects are read;
- SQLite files (``ledger.sqlite``, ``cache/embeddings.sqlite``): SQLite's online backup API
  (``sqlite3.Connection.backup``) into a temporary copy, taken while the store's lock is held, so ledger and
  store are of the same moment; their ``-wal``/``-shm`` files are not copied (the copy holds their pages);
- objects (media, derived files, vault entries) and the other files, after: an object is written once under a
  temporary name and renamed, and it is published before the ledger and the store name it, so every object the
  copied ledger and store refer to is there;
- ``vault.key``: only with ``include_vault_key`` (the backup then opens the vault's entries to whoever reads
  it); without it the key must be kept elsewhere (or ``ENGRAM_VAULT_KEY`` set) to read them after a restore.

Left out: the store's lock and hand-off files, ``capture-spool/`` (frames not yet published), ``capture.pause``,
``beat/`` (the distributed mode's), temporary files of writers and of earlier backups or restores.

``restore`` writes a snapshot into a new or empty data dir, every file under a temporary name renamed when
complete, holes left as holes, folders 0700 and files 0600, each chunk verified against its digest as it is
read. A marker (``RESTORE_MARKER``) says a restore is under way; a restore killed part way is completed by the
same command (the files already complete are kept), and the marker goes last.

The backup's lock files (``lock`` in a folder repository) serialise backups into one repository; nothing here
is owned by a thread: each ``backup``/``restore`` call owns its repository object and its thread pool.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import functools
import gc
import gzip
import hashlib
import io
import itertools
import json
import mmap
import os
import shutil
import sqlite3
import stat
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

import blake3

from engram.schemas.errors import EngramError
from engram.workers.stores.owners import is_alive
from engram.workers.stores.private import PRIVATE_UMASK
from engram.workers.stores.sqlite import BUSY_TIMEOUT_S

#: The manifest's format; a reader refuses a manifest of a higher one (it would misread it). 2: blocks named by
#: BLAKE3 (the manifest's ``hash``); 1: by SHA-256 (still read).
FORMAT_VERSION = 2
#: The digest that names a block in the backups this engram writes (the manifest's ``hash``).
CHUNK_HASH = "blake3"
#: Bytes per block. Smaller blocks dedup finer: a store file changed in one place costs one block in the next
#: backup (after 1 % more points in a small store, 1 MiB blocks wrote 29 % of a full backup's bytes, 64 KiB 4 %).
CHUNK_BYTES = 1 << 16
#: Bytes per pack (``_Packed``): the blocks a backup writes are gathered into files or objects of about this size.
PACK_BYTES = 32 << 20
#: Beside a data dir being restored: the snapshot being written; removed when the restore is complete.
RESTORE_MARKER = ".engram-restore.json"
#: Suffix of a file being restored, renamed into place when complete.
PART_SUFFIX = ".engram-restore-part"
#: Prefix of this module's temporary folders inside the data dir (SQLite copies).
TMP_PREFIX = ".engram-backup-"

#: Paths (relative to the data dir, ``/``-separated) never copied: lock and hand-off files, the capture spool
#: (frames not yet published) and pause file, the distributed mode's beat schedule.
SKIPPED_TOP = {"vectors.lock", "capture-spool", "capture.pause", "beat", RESTORE_MARKER}
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
VAULT_KEY = "vault.key"

Progress = Callable[[str, int, int], None]  # (phase, bytes done, bytes in the phase)


class BackupError(EngramError, RuntimeError):
    """A backup or restore cannot be made; the message says why in one line (a bad destination, a newer format,
    a non-empty data dir, a damaged chunk)."""


def engram_version() -> str:
    """The installed engram's version (``0+unknown`` when run from a tree that is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("engram-multimodal")
    except PackageNotFoundError:
        return "0+unknown"


def chunk_digest(data: bytes | memoryview) -> str:
    """The name of a block in a repository: the ``CHUNK_HASH`` (BLAKE3) digest of its bytes, 64 hex."""
    return blake3.blake3(data).hexdigest()


def _sha256_hex(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


#: The block digests a manifest may name (its ``hash``; format 1 manifests, without one, used SHA-256).
CHUNK_HASHES: dict[str, Callable[[bytes | memoryview], str]] = {"blake3": chunk_digest, "sha256": _sha256_hex}


def chunk_hasher(manifest: dict[str, Any]) -> Callable[[bytes | memoryview], str]:
    """The function naming the blocks of ``manifest`` (bytes -> 64 hex): by its ``hash`` (SHA-256 for a
    manifest of format 1, which has none). Raises BackupError for a hash this engram does not know."""
    name = str(manifest.get("hash", "sha256"))
    if name not in CHUNK_HASHES:
        raise BackupError(
            f"this backup names its blocks by {name!r}, which this engram does not know "
            f"(it knows {', '.join(sorted(CHUNK_HASHES))}): upgrade engram to restore it"
        )
    return CHUNK_HASHES[name]


# --- repositories ------------------------------------------------------------------------------------------


class Repository(Protocol):
    """Where backups live. ``put_chunk`` is called from several threads at once."""

    location: str
    #: Threads that read, hash and write at once by default: 4 for a local folder (reads, hashing and writes let
    #: the GIL go; with files cut into segments, 4 threads backed up 100 k observations in 0.84-0.99 s against
    #: 2 threads' 1.41-1.62 s on a shared, loaded 2-core machine, where more threads get more of the CPU),
    #: 4 for S3 (a PUT waits for the network).
    threads: int

    def has_chunk(self, digest: str) -> bool:
        """Whether the chunk ``digest`` (64 hex) is stored (as listed when the repository was opened, plus the
        chunks put since)."""

    def put_chunk(self, digest: str, data: bytes | memoryview) -> None:
        """Store ``data`` under ``digest`` (atomically: a reader never sees part of it)."""

    def put_chunks(self, chunks: list[tuple[str, bytes | memoryview]]) -> None:
        """``put_chunk`` of each (digest, data) in turn (a folder writes them with one system call)."""

    def get_chunk(self, digest: str) -> bytes:
        """The chunk's bytes. Raises BackupError when it is missing."""

    def read_blocks(self, digests: list[str], buf: bytearray) -> list[bytes | memoryview]:
        """The chunks' bytes in order, read into ``buf`` (``RUN_BLOCKS * CHUNK_BYTES`` long) where the repository
        can (as views of it: valid until the next call with ``buf``). Raises BackupError when one is missing."""

    def snapshots(self) -> list[str]:
        """Names of the complete snapshots, oldest first."""

    def get_snapshot(self, name: str) -> bytes:
        """A manifest's bytes (gzip JSON). Raises BackupError when missing."""

    def put_snapshot(self, name: str, data: bytes) -> None:
        """Write a manifest atomically, after writing the open pack and making every chunk put so far durable."""

    def flush(self) -> None:
        """Write the chunks put so far that are still in memory (the open pack)."""

    def close(self) -> None:
        """Release what the repository holds (its lock)."""


@functools.cache
def _libc() -> Any:
    """The C library through ``ctypes`` (None where it cannot be loaded), by its Linux name first:
    ``ctypes.util.find_library`` runs ``ldconfig`` (a new process)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            return ctypes.CDLL("libc.so.6", use_errno=True)
    name = ctypes.util.find_library("c")
    if name:
        with contextlib.suppress(OSError):
            return ctypes.CDLL(name, use_errno=True)
    return None


def _start_writeback(fd: int, offset: int = 0, length: int = 0) -> None:
    """Start writing the open file's dirty pages to the disk now, without waiting for them
    (``sync_file_range(SYNC_FILE_RANGE_WRITE)``, Linux): the final ``syncfs`` then waits for less, as the disk
    writes while the next blocks are hashed (the kernel would start only at ``vm.dirty_background_ratio``, GBs
    on a machine with memory to spare). ``offset``, ``length``: the range (0, 0: the whole file). Durability
    still comes from ``syncfs`` alone; elsewhere a no-op."""
    libc = _libc()
    if libc is not None and hasattr(libc, "sync_file_range"):
        libc.sync_file_range(fd, ctypes.c_int64(offset), ctypes.c_int64(length), 2)


def syncfs(path: Path) -> None:
    """Make everything written to ``path``'s filesystem durable: ``syncfs(2)`` (Linux, through ``ctypes``), else
    ``sync``. ``path``: any file or folder on that filesystem. Raises OSError when it cannot be opened. A backup
    calls it before writing a manifest, so every block the manifest names is on disk first."""
    libc = _libc()
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc is None or not hasattr(libc, "syncfs") or libc.syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


class _Packed:
    """Chunks gathered into packs of about ``PACK_BYTES`` (restic's layout): a pack is written whole, then its
    index (``<digest> <offset> <length>`` lines); a pack without its index (a backup killed between them) is not
    counted and its chunks are written again. One file or object per pack instead of one per 64 KiB chunk: on a
    local disk the per-file cost (create, rename) was most of a backup's time, on S3 one PUT per chunk would be.

    Subclasses store packs and indexes (``_put``), read ranges (``_read``), list and read indexes. ``put_chunk``
    may be called from several threads (a lock guards the open pack; a full pack is written outside it)."""

    location: str
    threads: int

    def _init_packs(self) -> None:
        self._index: dict[str, tuple[str, int, int]] = {}
        self._open: list[bytes] = []  # the open pack's chunks, joined (or written with writev) when it is full
        self._open_bytes = 0
        self._open_entries: list[tuple[str, int, int]] = []
        self._pack_lock = threading.Lock()
        for pack_id, text in self._indexes():
            for line in text.splitlines():
                digest, off, length = line.split()
                self._index[digest] = (pack_id, int(off), int(length))

    def _indexes(self) -> Iterator[tuple[str, str]]:
        raise NotImplementedError

    def _put(self, key: str, data: list[bytes]) -> None:
        raise NotImplementedError

    def _read(self, pack_id: str, offset: int, length: int) -> bytes:
        raise NotImplementedError

    def has_chunk(self, digest: str) -> bool:
        return digest in self._index

    def put_chunk(self, digest: str, data: bytes | memoryview) -> None:
        with self._pack_lock:
            if digest in self._index:
                return
            self._index[digest] = ("", self._open_bytes, len(data))  # the open pack's id is given when it is written
            self._open_entries.append((digest, self._open_bytes, len(data)))
            self._open.append(bytes(data))  # ``data`` may be the caller's buffer, reused for its next block
            self._open_bytes += len(data)
            full = self._open_bytes >= PACK_BYTES
            if full:
                data_out, entries = self._take()
        if full:
            self._write_pack(data_out, entries)

    def put_chunks(self, chunks: list[tuple[str, bytes | memoryview]]) -> None:
        for digest, data in chunks:
            self.put_chunk(digest, data)

    def _take(self) -> tuple[list[bytes], list[tuple[str, int, int]]]:
        data, entries = self._open, self._open_entries
        self._open, self._open_entries, self._open_bytes = [], [], 0
        return data, entries

    def _write_pack(self, data: list[bytes], entries: list[tuple[str, int, int]]) -> None:
        pack_id = uuid.uuid4().hex
        try:
            self._put(f"packs/{pack_id[:2]}/{pack_id}.pack", data)
            self._put(f"packs/{pack_id[:2]}/{pack_id}.idx", ["".join(f"{d} {o} {n}\n" for d, o, n in entries).encode()])
        except BaseException:
            with self._pack_lock:
                for d, _, _ in entries:
                    self._index.pop(d, None)
            raise
        with self._pack_lock:
            for d, o, n in entries:
                self._index[d] = (pack_id, o, n)

    def flush(self) -> None:
        """Write the open pack (the chunks put since the last full one)."""
        with self._pack_lock:
            data, entries = self._take()
        if entries:
            self._write_pack(data, entries)

    def read_blocks(self, digests: list[str], buf: bytearray) -> list[bytes | memoryview]:
        """The chunks' bytes in order (new bytes here; a folder reads them into ``buf``). Raises BackupError when
        one is missing."""
        return [self.get_chunk(d) for d in digests]

    def get_chunk(self, digest: str) -> bytes:
        where = self._index.get(digest)
        if where is None or not where[0]:
            raise BackupError(f"chunk {digest} is missing from {self.location}: the backup is damaged")
        return self._read(*where)


#: Alignment (bytes) of the memory, file offsets and lengths of a pack's direct writes (``O_DIRECT``): a page,
#: which is also a multiple of every disk's logical block (512 or 4096).
DIRECT_ALIGN = mmap.PAGESIZE
#: Bytes of a pack's stage (``_OpenPack``): small files' blocks (vault entries, thumbnails) gathered back to back
#: before a direct write, so that each does not cost a padded page of its own in the pack.
STAGE_BYTES = 1 << 20


def aligned_buffer(n_bytes: int) -> mmap.mmap:
    """A zeroed, writable buffer of ``n_bytes`` whose start is page-aligned (an anonymous ``mmap``): its slices at
    multiples of ``DIRECT_ALIGN`` can be written to a file opened with ``O_DIRECT``."""
    return mmap.mmap(-1, max(n_bytes, 1))


def _direct_ready(view: memoryview) -> bool:
    """Whether ``view`` can go to an ``O_DIRECT`` write as it is: its address and length multiples of
    ``DIRECT_ALIGN`` (its address read through ``ctypes``; a read-only buffer, e.g. ``bytes``, is not)."""
    if len(view) % DIRECT_ALIGN or not len(view):
        return False
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(view)) % DIRECT_ALIGN == 0
    except TypeError:  # read-only: ctypes cannot take its address
        return False


@dataclass
class _OpenPack:
    """A pack a thread is appending to: its temporary file (descriptor, path), its blocks (digest, offset,
    length), bytes written so far (with the padding of direct writes), whether it is written with ``O_DIRECT``,
    and its stage: small or unaligned blocks gathered back to back in an aligned buffer (``staged`` bytes of
    it), written as one padded piece (``_take_stage``) before the next aligned block or when the pack ends."""

    fd: int
    tmp: str
    entries: list[tuple[str, int, int]] = field(default_factory=list)
    size: int = 0
    direct: bool = False
    stage: mmap.mmap | None = None
    staged: int = 0

    def take_stage(self) -> list[memoryview]:
        """The staged blocks as one piece to append (padded with zeros to ``DIRECT_ALIGN``; none when nothing is
        staged), counted in ``size``; the next blocks are staged in a new buffer (this one is still to write)."""
        if not self.staged or self.stage is None:
            return []
        n = -(-self.staged // DIRECT_ALIGN) * DIRECT_ALIGN
        view = memoryview(self.stage)[:n]  # the padding is zeros already: a new buffer is zeroed
        self.size += n
        self.stage, self.staged = None, 0
        return [view]

    def layout(self, fresh: list[tuple[str, bytes | memoryview]]) -> tuple[list[memoryview], list[int]]:
        """Where each of ``fresh`` blocks goes in the pack and what to append now: (buffers to write, in order;
        each block's offset). A direct pack takes a block aligned in memory and length as it is (no copy) and
        stages the others (``take_stage``); a buffered one takes every block as it is."""
        writes: list[memoryview] = []
        offsets: list[int] = []
        for _, data in fresh:
            view = memoryview(data).cast("B")
            if not self.direct or _direct_ready(view):
                writes += self.take_stage()
                offsets.append(self.size)
                writes.append(view)
                self.size += len(view)
                continue
            if self.stage is not None and self.staged + len(view) > len(self.stage):
                writes += self.take_stage()
            if self.stage is None:
                self.stage = aligned_buffer(max(STAGE_BYTES, len(view)))
            offsets.append(self.size + self.staged)
            self.stage[self.staged : self.staged + len(view)] = view
            self.staged += len(view)
        return writes, offsets


class FolderRepository(_Packed):
    """A repository in a local folder (made 0700). A file lock (``lock``) keeps a second backup into the same
    folder out until the first ends; temporary files and packs without an index that a killed backup left are
    removed when it is opened for a backup."""

    def __init__(self, root: Path, create: bool, shared: bool = False) -> None:
        """``create``: make the folder when missing (a backup); else it must hold a backup. ``shared``: write into
        a repository another process holds for the same backup (the store worker, for ``engram backup`` in the
        distributed mode): no lock taken and nothing cleaned (the holder's temporary pack is in progress)."""
        from filelock import FileLock, Timeout

        self.root = Path(root).expanduser().absolute()
        self.location = str(self.root)
        self.threads = 4
        if not create and not (self.root / "snapshots").is_dir():
            raise BackupError(f"{self.root} holds no engram backup (no snapshots/ folder)")
        try:
            for folder in (self.root, self.root / "packs", self.root / "snapshots"):
                folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise BackupError(f"cannot use {self.root} as a backup folder: {exc.strerror or exc}") from exc
        self._lock = (
            FileLock(str(self.root / "lock"), mode=0o600, thread_local=False) if create and not shared else None
        )
        if self._lock is not None:
            try:
                self._lock.acquire(timeout=0)
            except Timeout as exc:
                raise BackupError(f"another engram backup is writing to {self.root}; wait for it to end") from exc
            self._clean_temporary()
        self._fds: dict[str, int] = {}
        self._fds_lock = threading.Lock()
        self._open_packs: dict[int, _OpenPack] = {}  # each writing thread's pack (by thread id)
        # packs are written with O_DIRECT until the folder's filesystem refuses it (tmpfs, some FUSE): see put_chunks
        self._direct = hasattr(os, "O_DIRECT")
        self._init_packs()

    def _clean_temporary(self) -> None:
        for folder in [
            self.root / "snapshots",
            self.root / "packs",
            *(Path(d.path) for d in _scandir(self.root / "packs") if d.is_dir()),
        ]:
            names = {e.name for e in _scandir(folder)}
            for name in names:
                if name.startswith(".tmp-") or (name.endswith(".pack") and f"{name[:-5]}.idx" not in names):
                    (folder / name).unlink(missing_ok=True)

    def put_chunk(self, digest: str, data: bytes | memoryview) -> None:
        """Append the block to this thread's open pack at once (no copy kept in memory: the pages a buffered pack
        held were faulted in and zeroed again for every pack, most of a backup's system time)."""
        self.put_chunks([(digest, data)])

    def put_chunks(self, chunks: list[tuple[str, bytes | memoryview]]) -> None:
        """``put_chunk`` of each, the blocks not yet stored appended with one ``writev`` to the calling thread's
        own open pack (a run of a file's blocks stays together in the pack, so a restore reads it with one call).
        Only the index is shared, under ``_pack_lock`` for a moment: with one pack for all, the threads queued
        for its lock while one wrote (and waited for the GIL inside it) for half of a backup's wall time.

        Packs are written with ``O_DIRECT`` (``_open_pack``): straight from the caller's buffer to the disk, not
        copied into the page cache first. On ext4 the buffered write (the copy and the filesystem's per-page
        work) was a third of a backup's CPU, and the pages it dirtied were all written again at the ``syncfs``
        before the manifest: 1.4 GB written direct took 0.9-1.5 s and 0.2-0.6 CPU s here, buffered and synced
        2.8-2.9 s and 1.2-1.3 CPU s (``dd``). A block whose memory or length is not page-aligned (a file's last
        block, a small file, bytes from a caller) is copied into the pack's stage with the next such blocks and
        written padded with zeros to a page (``_OpenPack.layout``): the pack index gives each block's offset and
        true length, so a reader never sees the padding. Durability still comes from ``syncfs`` alone (a direct
        write may sit in the disk's cache until the flush)."""
        with self._pack_lock:
            fresh: list[tuple[str, bytes | memoryview]] = []
            for digest, data in chunks:
                if digest not in self._index:
                    self._index[digest] = ("", 0, len(data))  # being written: named when its pack is
                    fresh.append((digest, data))
            if not fresh:
                return
            pack = self._open_packs.get(threading.get_ident())
        if pack is None:
            pack = self._open_pack()
            with self._pack_lock:
                self._open_packs[threading.get_ident()] = pack
        try:
            writes, offsets = pack.layout(fresh)
            _write_all(pack.fd, writes, on_einval=lambda: self._go_buffered(pack))
        except BaseException:
            self._abandon_pack(pack, [d for d, _ in fresh])
            raise
        for (digest, data), offset in zip(fresh, offsets, strict=True):
            pack.entries.append((digest, offset, len(data)))
        if pack.size + pack.staged >= PACK_BYTES:
            self._finish_pack(pack)

    def _open_pack(self) -> _OpenPack:
        """A new temporary pack file, opened ``O_DIRECT`` while the folder's filesystem takes it (else buffered,
        for this and every later pack: tmpfs and some FUSE filesystems refuse the flag with EINVAL)."""
        tmp = str(self.root / "packs" / f".tmp-{uuid.uuid4().hex}.pack")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        if self._direct:
            try:
                return _OpenPack(os.open(tmp, flags | os.O_DIRECT, 0o600), tmp, direct=True)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._direct = False
                Path(tmp).unlink(missing_ok=True)
        return _OpenPack(os.open(tmp, flags, 0o600), tmp)

    def _go_buffered(self, pack: _OpenPack) -> bool:
        """After a write refused with EINVAL: clear ``O_DIRECT`` on ``pack`` (the write is tried again through the
        page cache, and so are the later ones) and open no more packs with it; True. False when ``pack`` was not
        direct (the error is the write's own). The pack's size so far stays a multiple of ``DIRECT_ALIGN``."""
        import fcntl  # here only: POSIX, and needed only when a filesystem refuses a direct write

        if not pack.direct:
            return False
        fcntl.fcntl(pack.fd, fcntl.F_SETFL, fcntl.fcntl(pack.fd, fcntl.F_GETFL) & ~os.O_DIRECT)
        pack.direct, self._direct = False, False
        return True

    def _abandon_pack(self, pack: _OpenPack, also: Iterable[str] = ()) -> None:
        """Drop an open pack (a write failed: a full disk): its file removed, its blocks (and ``also``, blocks
        being written to it) forgotten."""
        with contextlib.suppress(OSError):
            os.close(pack.fd)
        with contextlib.suppress(OSError):
            os.unlink(pack.tmp)
        with self._pack_lock:
            for d in [*(e[0] for e in pack.entries), *also]:
                self._index.pop(d, None)
            for ident, p in list(self._open_packs.items()):
                if p is pack:
                    del self._open_packs[ident]
        pack.entries, pack.size, pack.stage, pack.staged = [], 0, None, 0

    def _finish_pack(self, pack: _OpenPack) -> None:
        """Rename an open pack into place and write its index; its blocks are then readable (named by its id)."""
        with self._pack_lock:
            for ident, p in list(self._open_packs.items()):
                if p is pack:
                    del self._open_packs[ident]
        pack_id = uuid.uuid4().hex
        try:
            _write_all(pack.fd, pack.take_stage(), on_einval=lambda: self._go_buffered(pack))
            if not pack.direct:  # a direct pack's bytes are on their way to the disk already
                _start_writeback(pack.fd)
            os.close(pack.fd)
            folder = self.root / "packs" / pack_id[:2]
            folder.mkdir(mode=0o700, exist_ok=True)
            os.rename(pack.tmp, folder / f"{pack_id}.pack")
            _atomic_write(
                folder / f"{pack_id}.idx", "".join(f"{d} {o} {n}\n" for d, o, n in pack.entries).encode(), sync=False
            )
        except BaseException:
            self._abandon_pack(pack)
            with contextlib.suppress(OSError):
                os.unlink(self.root / "packs" / pack_id[:2] / f"{pack_id}.pack")
            raise
        with self._pack_lock:
            for d, o, n in pack.entries:
                self._index[d] = (pack_id, o, n)

    def flush(self) -> None:
        """Write every open pack (each thread's blocks put since its last full one)."""
        with self._pack_lock:
            packs = list(self._open_packs.values())
        for pack in packs:
            self._finish_pack(pack)

    def _indexes(self) -> Iterator[tuple[str, str]]:
        for d in _scandir(self.root / "packs"):
            for e in _scandir(Path(d.path)):
                if e.name.endswith(".idx") and not e.name.startswith("."):
                    yield e.name[:-4], Path(e.path).read_text()

    def _put(self, key: str, data: list[bytes]) -> None:
        dest = self.root / key
        dest.parent.mkdir(mode=0o700, exist_ok=True)
        _atomic_write(dest, data, sync=False)

    def read_blocks(self, digests: list[str], buf: bytearray) -> list[bytes | memoryview]:
        """The chunks' bytes in order, as views of ``buf``: chunks that follow each other in one pack are read
        with one ``preadv`` (a first backup writes a file's blocks in runs; reading into a reused buffer, not a
        memory map of the pack: the map's page faults cost more than the copy). Raises BackupError when one is
        missing or its pack is shorter than its index says."""
        whole = memoryview(buf)
        out: list[bytes | memoryview] = []
        places = []
        for d in digests:
            where = self._index.get(d)
            if where is None or not where[0]:
                raise BackupError(f"chunk {d} is missing from {self.location}: the backup is damaged")
            places.append(where)
        used, i = 0, 0
        while i < len(places):
            pack_id, offset, length = places[i]
            j, end = i + 1, offset + length
            while j < len(places) and places[j][0] == pack_id and places[j][1] == end:
                end += places[j][2]
                j += 1
            if used + end - offset > len(buf):  # not room for the run: new bytes
                out.extend(self._read(*places[k]) for k in range(i, j))
                i = j
                continue
            view, got = whole[used : used + end - offset], 0
            while got < len(view):
                n = os.preadv(self._pack(pack_id), [view[got:]], offset + got)
                if n == 0:
                    raise BackupError(
                        f"pack {pack_id} in {self.root} is shorter than its index says: the backup is damaged"
                    )
                got += n
            pos = 0
            for k in range(i, j):
                out.append(view[pos : pos + places[k][2]])
                pos += places[k][2]
            used += len(view)
            i = j
        return out

    def _read(self, pack_id: str, offset: int, length: int) -> bytes:
        return os.pread(self._pack(pack_id), length, offset)

    def _pack(self, pack_id: str) -> int:
        """An open file descriptor of the pack (opened once per repository object)."""
        fd = self._fds.get(pack_id)
        if fd is None:
            with self._fds_lock:
                fd = self._fds.get(pack_id)
                if fd is None:
                    try:
                        fd = os.open(self.root / "packs" / pack_id[:2] / f"{pack_id}.pack", os.O_RDONLY)
                    except FileNotFoundError as exc:
                        raise BackupError(f"pack {pack_id} is missing from {self.root}: the backup is damaged") from exc
                    self._fds[pack_id] = fd
        return fd

    def snapshots(self) -> list[str]:
        return sorted(e.name for e in _scandir(self.root / "snapshots") if e.name.endswith(".json.gz"))

    def get_snapshot(self, name: str) -> bytes:
        try:
            return (self.root / "snapshots" / name).read_bytes()
        except FileNotFoundError as exc:
            raise BackupError(f"no snapshot {name} in {self.root}") from exc

    def put_snapshot(self, name: str, data: bytes) -> None:
        self.flush()
        syncfs(self.root)  # every pack and index the manifest needs is on disk before the manifest is
        _atomic_write(self.root / "snapshots" / name, data, sync=True)

    def close(self) -> None:
        with self._pack_lock:
            packs = list(self._open_packs.values())
        for pack in packs:
            self._abandon_pack(pack)  # a pack not flushed belongs to no snapshot
        with self._fds_lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
        if self._lock is not None and self._lock.is_locked:
            self._lock.release(force=True)


def _scandir(path: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except FileNotFoundError:
        return []


def _atomic_write(dest: Path, data: bytes | list[bytes], sync: bool) -> None:
    """Write ``data`` (bytes, or a list of them written in turn with ``writev``) to ``dest`` through a temporary
    file in the same folder renamed into place (fsynced with the folder when ``sync``); the temporary file is
    removed when the write fails (a full disk)."""
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
    try:
        try:
            _write_all(fd, [data] if isinstance(data, bytes) else data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if sync:
        dfd = os.open(dest.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


class S3Repository(_Packed):
    """A repository under ``s3://bucket/prefix`` through the ``minio`` SDK. A PUT is atomic, so a pack, index or
    manifest is whole or absent. ``endpoint`` (``host:port``) and keys come from the caller."""

    def __init__(
        self,
        url: str,
        endpoint: str,
        access_key: str | None,
        secret_key: str | None,
        secure: bool = False,
        region: str | None = None,
        create: bool = True,
    ) -> None:
        from minio import Minio

        parsed = urlparse(url)
        self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
        if not self.bucket:
            raise BackupError(f"{url}: give s3://BUCKET/PREFIX")
        self.location = url
        self.threads = 4
        self.client = Minio(endpoint, access_key=access_key, secret_key=secret_key, secure=secure, region=region)
        try:
            if not self.client.bucket_exists(self.bucket):
                if not create:
                    raise BackupError(f"no bucket {self.bucket!r} at {endpoint}")
                self.client.make_bucket(self.bucket)
            self._init_packs()
        except BackupError:
            raise
        except Exception as exc:  # noqa: BLE001 (the SDK's errors: unreachable, refused credentials)
            raise BackupError(f"cannot use {url} at {endpoint}: {type(exc).__name__}: {exc}"[:400]) from exc
        if not create and not self.snapshots():
            raise BackupError(f"{url} holds no engram backup (no snapshots)")

    def _key(self, rest: str) -> str:
        return f"{self.prefix}/{rest}" if self.prefix else rest

    def _indexes(self) -> Iterator[tuple[str, str]]:
        for o in self.client.list_objects(self.bucket, prefix=self._key("packs/"), recursive=True):
            if o.object_name.endswith(".idx"):
                yield o.object_name.rsplit("/", 1)[-1][:-4], self._get(o.object_name, "an index").decode()

    def _put(self, key: str, data: list[bytes]) -> None:
        body = b"".join(data)
        self.client.put_object(self.bucket, self._key(key), io.BytesIO(body), len(body))

    def _get(self, full_key: str, what: str, offset: int = 0, length: int = 0) -> bytes:
        try:
            resp = self.client.get_object(self.bucket, full_key, offset=offset, length=length)
        except Exception as exc:  # noqa: BLE001 (minio's S3Error: NoSuchKey and the rest)
            raise BackupError(f"{what} cannot be read from {self.location}: {exc}"[:400]) from exc
        try:
            return resp.read()
        finally:
            resp.close()
            resp.release_conn()

    def _read(self, pack_id: str, offset: int, length: int) -> bytes:
        return self._get(self._key(f"packs/{pack_id[:2]}/{pack_id}.pack"), f"pack {pack_id}", offset, length)

    def snapshots(self) -> list[str]:
        return sorted(
            o.object_name.rsplit("/", 1)[-1]
            for o in self.client.list_objects(self.bucket, prefix=self._key("snapshots/"), recursive=True)
            if o.object_name.endswith(".json.gz")
        )

    def get_snapshot(self, name: str) -> bytes:
        return self._get(self._key(f"snapshots/{name}"), f"snapshot {name}")

    def put_snapshot(self, name: str, data: bytes) -> None:
        self.flush()
        self.client.put_object(
            self.bucket, self._key(f"snapshots/{name}"), io.BytesIO(data), len(data), content_type="application/gzip"
        )

    def close(self) -> None:
        pass


def open_repository(dest: str, create: bool, s3: dict[str, Any] | None = None, shared: bool = False) -> Repository:
    """The repository at ``dest``: ``s3://bucket/prefix`` (``s3``: the ``S3Repository`` keyword arguments
    ``endpoint``, ``access_key``, ``secret_key``, ``secure``, ``region``) or a folder. ``create``: made when
    missing (a backup); else it must hold a backup (a restore); ``shared``: see ``FolderRepository``. Raises
    BackupError."""
    if dest.startswith("s3://"):
        if not s3 or not s3.get("endpoint"):
            raise BackupError("an s3:// destination needs an endpoint: --s3-endpoint or AWS_ENDPOINT_URL")
        return S3Repository(dest, create=create, **s3)
    if "://" in dest:
        raise BackupError(f"{dest}: give a folder or s3://bucket/prefix")
    return FolderRepository(Path(dest), create=create, shared=shared)


# --- manifests ---------------------------------------------------------------------------------------------


@dataclass
class FileEntry:
    """One file of a snapshot: ``path`` relative to the data dir (``/``-separated), ``size`` bytes, ``mtime_ns``,
    ``blocks`` [(offset, block digest hex: the manifest's ``hash``)] (the rest is holes/zeros), ``digest``:
    SHA-256 over size and blocks;
    ``stat``: (inode, ctime_ns) of the original, to skip reading an unchanged object next time."""

    path: str
    size: int
    mtime_ns: int
    blocks: list[tuple[int, str]]
    digest: str = ""
    stat: tuple[int, int] = (0, 0)
    etag: str = ""  # an S3 object's ETag (the distributed mode's unchanged-object shortcut), else empty

    def tree_digest(self) -> str:
        """SHA-256 of the file's size and its blocks' offsets and digests (what the whole content is made of)."""
        h = hashlib.sha256(f"{self.size}\n".encode())
        for off, d in self.blocks:
            h.update(f"{off} {d}\n".encode())
        return h.hexdigest()

    def to_json(self) -> dict[str, Any]:
        out = {
            "path": self.path,
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "digest": self.digest,
            "blocks": self.blocks,
            "stat": list(self.stat),
        }
        if self.etag:
            out["etag"] = self.etag
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FileEntry:
        return cls(
            d["path"],
            int(d["size"]),
            int(d["mtime_ns"]),
            [(int(o), str(h)) for o, h in d["blocks"]],
            d["digest"],
            tuple(d.get("stat") or (0, 0)),
            str(d.get("etag", "")),
        )  # type: ignore[arg-type]


def load_manifest(repo: Repository, name: str | None = None) -> tuple[str, dict[str, Any]]:
    """The snapshot ``name`` (default: the newest) of ``repo`` as (name, manifest), its bytes checked against the
    digest in its name and its format and version against this engram's. Raises BackupError: no snapshot, a
    damaged one, or one written by a newer engram (both versions named)."""
    names = repo.snapshots()
    if not names:
        raise BackupError(f"{repo.location} holds no complete backup")
    if name is None:
        name = names[-1]
    elif name not in names:
        matches = [n for n in names if n.startswith(name)]
        if len(matches) != 1:
            raise BackupError(f"no snapshot {name!r} in {repo.location} (`engram restore {repo.location} --list`)")
        name = matches[0]
    raw = repo.get_snapshot(name)
    if hashlib.sha256(raw).hexdigest()[:16] != name.removesuffix(".json.gz").rsplit("-", 1)[-1]:
        raise BackupError(f"snapshot {name} in {repo.location} is damaged (its bytes do not match its name)")
    manifest = json.loads(gzip.decompress(raw))
    check_versions(manifest)
    return name, manifest


def check_versions(manifest: dict[str, Any]) -> None:
    """Refuse a manifest of a newer format, or written by a newer engram, naming both versions."""
    from packaging.version import InvalidVersion, Version

    theirs, fmt, ours = str(manifest.get("engram_version", "?")), int(manifest.get("format", 0)), engram_version()
    try:
        newer_engram = Version(theirs) > Version(ours)
    except InvalidVersion:
        newer_engram = False
    if fmt > FORMAT_VERSION or newer_engram:
        raise BackupError(
            f"this backup was written by engram {theirs} (backup format {fmt}); this is engram {ours} "
            f"(backup format {FORMAT_VERSION}): upgrade engram to restore it"
        )


# --- reading files into blocks -----------------------------------------------------------------------------


def _data_blocks(fd: int, size: int, start: int = 0, stop: int | None = None) -> list[int]:
    """Offsets of the ``CHUNK_BYTES`` blocks of the open file ``fd`` that hold data (not only holes), in order,
    from ``start`` up to ``stop`` (both multiples of ``CHUNK_BYTES``; None: the end); every block when the
    filesystem cannot say (no ``SEEK_DATA``)."""
    size = size if stop is None else min(size, stop)
    if size <= start:
        return []
    blocks: list[int] = []
    pos = start
    try:
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data after pos
                    break
                raise
            end = os.lseek(fd, start, os.SEEK_HOLE)
            first = start - start % CHUNK_BYTES
            for off in range(first, min(end, size), CHUNK_BYTES):
                if not blocks or blocks[-1] < off:
                    blocks.append(off)
            pos = end
    except (OSError, AttributeError):
        return list(range(start, size, CHUNK_BYTES))
    return blocks


_ZERO = bytes(CHUNK_BYTES)


@dataclass
class Tally:
    """What a backup wrote and read, shared by its threads (``lock`` guards it): bytes read and hashed, bytes of
    new blocks written, blocks written and reused, files found unchanged; ``claimed``: digests of blocks a thread
    is writing (so that no two threads write the same one). ``BackupPass`` and ``chunk_stream`` add to it;
    ``BackupResult`` reports it."""

    written_bytes: int = 0
    new_chunks: int = 0
    reused_chunks: int = 0
    read_bytes: int = 0
    unchanged_files: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    claimed: set[str] = field(default_factory=set)


#: Blocks read at once by a backup (one ``preadv`` into a buffer reused for the whole file) and written to a
#: restored file at once: fewer system calls and lock turns than one per block.
RUN_BLOCKS = 16
#: Blocks of one file a thread reads, hashes and writes as one piece of work (8 MiB): a store's largest file
#: (150 MB of vectors on 100 k observations) is shared by the threads instead of keeping one busy alone.
SEGMENT_BLOCKS = 128


def _runs(offsets: list[int]) -> Iterator[tuple[int, int]]:
    """(first offset, blocks) of consecutive ``CHUNK_BYTES`` blocks in ``offsets``, at most ``RUN_BLOCKS`` each."""
    i = 0
    while i < len(offsets):
        j = i + 1
        while j < len(offsets) and j - i < RUN_BLOCKS and offsets[j] == offsets[j - 1] + CHUNK_BYTES:
            j += 1
        yield offsets[i], j - i
        i = j


_BUFFERS = threading.local()


def _run_buffer() -> mmap.mmap:
    """The calling thread's buffer for a run of ``RUN_BLOCKS`` blocks read from a file (``aligned_buffer``: the
    blocks go from it to a pack's direct write as they are), made once per thread and reused: no allocation and
    no page faults per file or segment."""
    buf = getattr(_BUFFERS, "buf", None)
    if buf is None:
        buf = _BUFFERS.buf = aligned_buffer(CHUNK_BYTES * RUN_BLOCKS)
    return buf


def _store_blocks(
    buf: bytearray | mmap.mmap, got: int, first: int, blocks: list[tuple[int, str]], repo: Repository, tally: Tally
) -> None:
    """Hash the ``got`` bytes at the start of ``buf`` (the file's bytes from offset ``first``) block by block,
    append each block's (offset, digest) to ``blocks`` (all-zero blocks left out: holes on restore) and store the
    blocks ``repo`` lacks (claimed in ``tally`` so that two threads never write the same one)."""
    whole = memoryview(buf)
    new: list[tuple[str, bytes | memoryview]] = []
    for start in range(0, got, CHUNK_BYTES):
        data = whole[start : min(start + CHUNK_BYTES, got)]
        # all zeros: not stored (a bytearray against bytes is one memcmp; memoryviews compare per byte)
        if buf[start] == 0 and buf[start : start + len(data)] == (
            _ZERO if len(data) == CHUNK_BYTES else _ZERO[: len(data)]
        ):
            continue
        digest = chunk_digest(data)
        blocks.append((first + start, digest))
        with tally.lock:
            tally.read_bytes += len(data)
            if not repo.has_chunk(digest) and digest not in tally.claimed:
                tally.claimed.add(digest)
                tally.new_chunks += 1
                tally.written_bytes += len(data)
                new.append((digest, data))
            else:
                tally.reused_chunks += 1
    if new:
        repo.put_chunks(new)


def _chunk_file(
    path: Path,
    rel: str,
    repo: Repository,
    tally: Tally,
    progress: Callable[[int], None],
    start: int = 0,
    stop: int | None = None,
) -> FileEntry:
    """Read ``path`` block by block (those from ``start`` up to ``stop``: a segment, by default all), store the
    blocks ``repo`` lacks and return its entry (as ``rel``; a segment's holds its blocks only). Raises
    FileNotFoundError when it vanished before it was opened."""
    fd = os.open(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        size = st.st_size
        blocks: list[tuple[int, str]] = []
        buf = _run_buffer()
        whole = memoryview(buf)
        for first, count in _runs(_data_blocks(fd, size, start, stop)):
            want, got = min(CHUNK_BYTES * count, size - first), 0
            while got < want:
                n = os.preadv(fd, [whole[got:want]], first + got)
                if n == 0:  # the file is shorter than it was (a store file only changes under the lock)
                    break
                got += n
            progress(got)
            _store_blocks(buf, got, first, blocks, repo, tally)
        entry = FileEntry(rel, size, st.st_mtime_ns, blocks, stat=(st.st_ino, st.st_ctime_ns))
        entry.digest = entry.tree_digest()
        return entry
    finally:
        os.close(fd)


def chunk_stream(
    read: Callable[[int], bytes],
    rel: str,
    size: int,
    mtime_ns: int,
    repo: Repository,
    tally: Tally,
    progress: Callable[[int], None],
    etag: str = "",
) -> FileEntry:
    """The entry of a stream of ``size`` bytes (an S3 object: ``read(n)`` returns up to ``n`` bytes, b"" at its
    end), cut into blocks as ``_chunk_file`` cuts a file, the blocks ``repo`` lacks stored. Raises BackupError
    when the stream ends before ``size`` bytes (the object changed while it was read)."""
    blocks: list[tuple[int, str]] = []
    buf = _run_buffer()
    first = 0
    while first < size:
        want, got = min(len(buf), size - first), 0
        while got < want:
            part = read(want - got)
            if not part:
                raise BackupError(f"{rel} ended after {first + got} of its {size} bytes while it was read")
            buf[got : got + len(part)] = part
            got += len(part)
        progress(got)
        _store_blocks(buf, got, first, blocks, repo, tally)
        first += got
    entry = FileEntry(rel, size, mtime_ns, blocks, etag=etag)
    entry.digest = entry.tree_digest()
    return entry


#: Buffers per ``writev``/``pwritev`` call (``_write_all``): Linux refuses more than IOV_MAX (1024) with EINVAL.
IOV_BATCH = 512


def _write_all(
    fd: int,
    parts: Sequence[bytes | memoryview],
    offset: int | None = None,
    on_einval: Callable[[], bool] = lambda: False,
) -> None:
    """Write ``parts`` one after another to ``fd``: appended (``writev``) or at ``offset`` (``pwritev``), up to
    ``IOV_BATCH`` buffers a call, again after a short write. A write refused with EINVAL (a filesystem that takes
    ``O_DIRECT`` files but not this write) is tried again when ``on_einval()`` says it changed the file's mode
    (True), else raised; OSError(EIO) when a write writes nothing."""
    views = [v for v in (memoryview(b).cast("B") for b in parts) if len(v)]
    i = 0
    while i < len(views):
        batch = views[i : i + IOV_BATCH]
        try:
            n = os.writev(fd, batch) if offset is None else os.pwritev(fd, batch, offset)
        except OSError as exc:
            if exc.errno == errno.EINVAL and on_einval():
                continue
            raise
        if n <= 0:
            raise OSError(errno.EIO, "a write wrote nothing")
        if offset is not None:
            offset += n
        while i < len(views) and n >= len(views[i]):
            n -= len(views[i])
            i += 1
        if n:
            views[i] = views[i][n:]


def sqlite_copy(src: Path, dest: Path) -> None:
    """A consistent copy of the SQLite database ``src`` at ``dest`` (its folder made 0700 when missing) through
    SQLite's online backup API (``sqlite3.Connection.backup``: a read transaction, writers in WAL mode go on,
    waiting ``BUSY_TIMEOUT_S`` at most for a lock). Raises sqlite3.Error (not a database), OSError."""
    dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    source = sqlite3.connect(src, timeout=BUSY_TIMEOUT_S)
    try:
        target = sqlite3.connect(dest)
        try:
            source.backup(target)
        finally:
            target.close()
    finally:
        source.close()


def thread_map(fn: Callable[[Any], Any], items: list, threads: int, name: str) -> list:
    """The results of ``fn`` over ``items``, in their order: in this thread for ``threads`` <= 1, else in a
    pool of ``threads`` threads named ``name``-N (``concurrent.futures``). The first exception ``fn`` raises
    is raised here, after the pool has ended."""
    if threads <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(threads, thread_name_prefix=name) as pool:
        return list(pool.map(fn, items))


# --- backup ------------------------------------------------------------------------------------------------


def without_gc(fn: Callable) -> Callable:
    """``fn`` run with Python's cyclic collector paused (enabled again after, if it was): a backup or restore makes
    tens of thousands of small, acyclic objects (blocks, entries, the manifest), freed by reference counting, and
    the collections they set off took 3-4 % of a command's CPU (``perf`` on 100 k observations)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                gc.enable()

    return run


@dataclass
class BackupResult:
    """What ``backup`` did: the snapshot's name, files and bytes (``logical_bytes``: their sizes; ``read_bytes``:
    data read and hashed), the chunks written (``written_bytes``) and reused, the seconds in all and with the
    store held, files found unchanged by their stat, files that vanished while it ran."""

    location: str
    snapshot: str
    files: int
    logical_bytes: int
    read_bytes: int
    written_bytes: int
    new_chunks: int
    reused_chunks: int
    unchanged_files: int
    seconds: float
    store_held_seconds: float
    vault_key: str
    vanished: list[str]

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field."""
        return dict(self.__dict__)


def _classify(data_dir: Path, include_vault_key: bool) -> tuple[list[Path], list[Path], list[Path], list[str]]:
    """The data dir's files as (store files, SQLite databases, other files) and its folders (relative)."""
    store, dbs, others, dirs = [], [], [], []
    for root, dnames, fnames in os.walk(data_dir):
        rel_root = Path(root).relative_to(data_dir)
        top = rel_root.parts[0] if rel_root.parts else None
        if top is None:
            dnames[:] = [d for d in dnames if d not in SKIPPED_TOP and not d.startswith(TMP_PREFIX)]
        dnames[:] = [d for d in dnames if not d.startswith(".tmp-")]
        for d in dnames:
            dirs.append((rel_root / d).as_posix())
        for name in fnames:
            rel = rel_root / name
            if top is None and (
                name in SKIPPED_TOP
                or name.startswith("vectors.wanted-")
                or (name == VAULT_KEY and not include_vault_key)
            ):
                continue
            if name.startswith(".tmp-") or name.endswith(PART_SUFFIX) or name.endswith(SQLITE_SIDE_FILES):
                continue
            path = data_dir / rel
            if path.is_symlink():
                continue
            if top == "vectors":
                store.append(path)
            elif name.endswith(".sqlite"):
                dbs.append(path)
            else:
                others.append(path)
    return store, dbs, others, sorted(dirs)


def _allocated(paths: Iterable[Path]) -> int:
    total = 0
    for p in paths:
        with contextlib.suppress(OSError):
            st = p.stat()
            total += min(st.st_size, st.st_blocks * 512)
    return total


def previous_entries(repo: Repository, source: str) -> dict[str, FileEntry]:
    """The entries of the newest snapshot of ``source`` in ``repo``, by path: what a new backup of the same source
    need not read again when a file's size and stamp (an object's size and ETag) are unchanged. None when that
    snapshot named its blocks by another hash than ``CHUNK_HASH`` (an older engram's: they are read again)."""
    for name in reversed(repo.snapshots()):
        try:
            _, manifest = load_manifest(repo, name)
        except BackupError:
            continue
        if manifest.get("source") == source:
            if manifest.get("hash", "sha256") != CHUNK_HASH:
                return {}
            return {d["path"]: FileEntry.from_json(d) for d in manifest["files"]}
    return {}


def _remove_stale_copies(data_dir: Path) -> None:
    """Remove the temporary folders (SQLite copies) of backups killed earlier: ``<TMP_PREFIX><pid>-*`` whose
    process is gone. A copy of the ledger left behind would keep what a deletion removed since."""
    for entry in _scandir(data_dir):
        if entry.name.startswith(TMP_PREFIX) and entry.is_dir(follow_symlinks=False):
            pid = entry.name[len(TMP_PREFIX) :].split("-", 1)[0]
            if not pid.isdigit() or not is_alive(int(pid), None):
                shutil.rmtree(entry.path, ignore_errors=True)


#: Beside the store's lock, the file a process waiting for it keeps (``vectors.WANTED_SUFFIX``, repeated here so
#: that a backup does not import the vector engine: ~0.4 s of a command's start).
WANTED_SUFFIX = ".wanted-"


class _StoreHold:
    """The embedded store's file lock (``<root>.lock``) taken as ``EdgeVectorStore.hold`` takes it, without opening
    (or importing) the vector engine: at once when free, else after asking its holder to let go
    (``<root>.wanted-<pid>``, which a holder with nothing to do reads as "close the store now") and waiting up to
    ``wait`` seconds (``StoreBusy`` after). While it is held no process has a shard open or can open one, so the
    shard files are those of a closed store. ``close`` releases it."""

    def __init__(self, root: Path, wait: float) -> None:
        from filelock import FileLock

        self.root, self.wait = Path(root), wait
        self._lock = FileLock(str(self.root) + ".lock", mode=0o600, thread_local=False)

    def hold(self) -> None:
        """Take the lock (see the class). Raises StoreBusy after ``wait`` seconds."""
        from filelock import Timeout

        self.root.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(timeout=0)
            return
        except Timeout:
            pass
        request: Path | None = self.root.with_name(f"{self.root.name}{WANTED_SUFFIX}{os.getpid()}")
        try:
            request.touch()  # type: ignore[union-attr]
        except OSError:  # a folder this process may not write: it waits without asking
            request = None
        try:
            self._lock.acquire(timeout=self.wait)
        except Timeout as exc:
            from engram.workers.stores.vectors import StoreBusy  # imported only here: the engine's module is slow

            raise StoreBusy(
                f"the embedded store {self.root} is open in another engram process (waited "
                f"{self.wait:g} s); wait for it to finish, then run the backup again"
            ) from exc
        finally:
            if request is not None:
                request.unlink(missing_ok=True)

    def close(self) -> None:
        """Release the lock (when held)."""
        if self._lock.is_locked:
            self._lock.release(force=True)


class BackupPass:
    """One phase of a backup (``store`` or ``objects``): its files cut into segments of ``SEGMENT_BLOCKS`` that
    share ``threads`` threads, each read, hashed and packed into ``repo`` (``_chunk_file``), then joined back into
    one ``FileEntry`` per file (``run``). ``previous``: the last snapshot's entries (``previous_entries``), whose
    objects unchanged by their stat are not read again; ``tally``: what is read and written, added to;
    ``report(phase, done, total)``: progress in bytes. Used by ``backup`` and by the cluster's store worker
    (``workers.stores.cluster_backup``)."""

    def __init__(
        self, phase: str, repo: Repository, previous: dict[str, FileEntry], tally: Tally, report: Progress, threads: int
    ) -> None:
        self.phase, self.repo, self.previous, self.tally, self.report = phase, repo, previous, tally, report
        self.threads, self.done, self.total, self.lock = threads, 0, 0, threading.Lock()

    def advance(self, n: int) -> None:
        """Count ``n`` more bytes done and report them."""
        with self.lock:
            self.done += n
            self.report(self.phase, self.done, max(self.total, self.done))

    def unchanged(self, path: Path, rel: str) -> FileEntry | None:
        """The previous snapshot's entry of an object whose stat did not change (not read again)."""
        old = self.previous.get(rel)
        if old is None or self.phase != "objects":
            return None
        with contextlib.suppress(OSError):
            st = path.stat()
            if (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns) == (old.size, old.mtime_ns, *old.stat) and all(
                self.repo.has_chunk(d) for _, d in old.blocks
            ):
                with self.tally.lock:
                    self.tally.unchanged_files += 1
                    self.tally.reused_chunks += len(old.blocks)
                self.advance(min(st.st_size, st.st_blocks * 512))
                return old
        return None

    def parts(
        self, jobs: list[tuple[Path, str]], entries: list[FileEntry], vanished: list[str]
    ) -> list[tuple[Path, str, int, int | None]]:
        """Segments of SEGMENT_BLOCKS of the files to read (not whole files: one large file does not keep one
        thread busy alone); unchanged objects go straight to ``entries``, files gone to ``vanished``."""
        segment = CHUNK_BYTES * SEGMENT_BLOCKS
        out: list[tuple[Path, str, int, int | None]] = []
        for path, rel in jobs:
            old = self.unchanged(path, rel)
            if old is not None:
                entries.append(old)
                continue
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                vanished.append(rel)  # deleted while the backup ran (a forget, a retention sweep)
                continue
            n = max(1, -(-size // segment))
            out.extend((path, rel, k * segment, (k + 1) * segment if k < n - 1 else None) for k in range(n))
        return out

    def one(self, part: tuple[Path, str, int, int | None]) -> FileEntry | None:
        """One segment read, hashed and packed; None when its file is gone."""
        path, rel, start, stop = part
        try:
            return _chunk_file(path, rel, self.repo, self.tally, self.advance, start, stop)
        except FileNotFoundError:
            return None

    def run(self, jobs: list[tuple[Path, str]], entries: list[FileEntry], vanished: list[str]) -> None:
        """Back up ``jobs`` ((path, path in the snapshot)), adding a ``FileEntry`` per file to ``entries`` and the
        paths of files deleted meanwhile to ``vanished``."""
        self.total = _allocated(p for p, _ in jobs)
        parts = self.parts(jobs, entries, vanished)
        self.report(self.phase, 0, self.total)
        pieces: dict[str, list[FileEntry | None]] = {}
        for part, piece in zip(
            parts, thread_map(self.one, parts, self.threads, f"engram-backup-{self.phase}"), strict=True
        ):
            pieces.setdefault(part[1], []).append(piece)
        paths = {rel: path for path, rel, _, _ in parts}
        for rel, got in pieces.items():
            if any(e is None for e in got):
                vanished.append(rel)  # deleted while the backup ran (a forget, a retention sweep)
                continue
            first = got[0]
            assert first is not None
            if any((e.size, e.mtime_ns, e.stat) != (first.size, first.mtime_ns, first.stat) for e in got if e):
                try:  # changed between its segments: read once more, whole
                    first = _chunk_file(paths[rel], rel, self.repo, self.tally, self.advance)
                except FileNotFoundError:
                    vanished.append(rel)
                    continue
            else:
                first.blocks = [b for e in got if e for b in e.blocks]
                first.digest = first.tree_digest()
            entries.append(first)


def write_manifest(repo: Repository, source: str, entries: list[FileEntry], dirs: list[str], **extra: Any) -> str:
    """Write the snapshot of ``entries`` (sorted here by path) and ``dirs`` into ``repo``, last and atomically
    (``Repository.put_snapshot``: every pack made durable first); returns its name. ``source``: what was backed
    up (a data dir, or the distributed mode's description); ``extra``: more manifest keys (``vault_key``,
    ``mode``...)."""
    entries.sort(key=lambda e: e.path)
    created = datetime.now(UTC)
    manifest = {
        "format": FORMAT_VERSION,
        "engram_version": engram_version(),
        "created": created.isoformat(),
        "source": source,
        "host": os.uname().nodename,
        "chunk_bytes": CHUNK_BYTES,
        "hash": CHUNK_HASH,
        "vault_key": "excluded",
        **extra,
        "dirs": dirs,
        "files": [e.to_json() for e in entries],
    }
    # level 1: the manifest is mostly hex digests, which no level packs much below half; 6 cost ~1.5 % of a backup
    raw = gzip.compress(json.dumps(manifest, separators=(",", ":")).encode(), compresslevel=1, mtime=0)
    name = f"{created.strftime('%Y%m%dT%H%M%S%fZ')}-{hashlib.sha256(raw).hexdigest()[:16]}.json.gz"
    repo.put_snapshot(name, raw)
    return name


@without_gc
def backup(
    data_dir: Path,
    repo: Repository,
    *,
    wait: float = 300.0,
    include_vault_key: bool = False,
    workers: int | None = None,
    progress: Progress | None = None,
) -> BackupResult:
    """Write a snapshot of the embedded default's ``data_dir`` into ``repo`` (see the module docstring).

    ``wait``: seconds to wait for the store while another process works in it (``StoreBusy`` after);
    ``workers``: threads reading and hashing files (default: the repository's ``threads``);
    ``progress(phase, done, total)`` in bytes, phases ``store`` and ``objects``. Raises BackupError (no data
    dir), StoreBusy, OSError (a full disk: ENOSPC; the repository's earlier snapshots are untouched and still
    complete)."""
    data_dir = Path(data_dir).expanduser().absolute()
    if not data_dir.is_dir() or not any((data_dir / p).exists() for p in ("vectors", "ledger.sqlite", "objects")):
        raise BackupError(f"no engram data in {data_dir}: nothing to back up")
    if (data_dir / RESTORE_MARKER).exists():
        raise BackupError(
            f"a restore into {data_dir} is not finished: run `engram restore` again to complete it before backing it up"
        )
    t0 = time.perf_counter()
    os.umask(PRIVATE_UMASK)
    previous = previous_entries(repo, str(data_dir))
    tally = Tally()
    entries: list[FileEntry] = []
    vanished: list[str] = []
    report = progress or (lambda phase, done, total: None)

    def run(phase: str, jobs: list[tuple[Path, str]]) -> None:
        BackupPass(phase, repo, previous, tally, report, workers or repo.threads).run(jobs, entries, vanished)

    _remove_stale_copies(data_dir)
    with tempfile.TemporaryDirectory(dir=data_dir, prefix=f"{TMP_PREFIX}{os.getpid()}-") as tmp:
        store = _StoreHold(data_dir / "vectors", wait=wait)
        store.hold()  # writers pause here: a lingering holder lets go at once, a busy one after its unit of work
        held = time.perf_counter()
        try:
            files, dbs, _, _ = _classify(data_dir, include_vault_key)
            jobs = []
            for db in dbs:  # the ledger and caches, of the same moment as the store
                rel = db.relative_to(data_dir).as_posix()
                copy = Path(tmp) / rel
                sqlite_copy(db, copy)
                jobs.append((copy, rel))
            run("store", jobs + [(p, p.relative_to(data_dir).as_posix()) for p in files])
        finally:
            store.close()
            held_s = time.perf_counter() - held
    # listed after the ledger was copied: every object it (or the store) names was published before, so is here
    _, _, others, dirs = _classify(data_dir, include_vault_key)
    run("objects", [(p, p.relative_to(data_dir).as_posix()) for p in others])

    name = write_manifest(repo, str(data_dir), entries, dirs, vault_key="included" if include_vault_key else "excluded")
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
        held_s,
        "included" if include_vault_key else "excluded",
        sorted(vanished),
    )


# --- restore -----------------------------------------------------------------------------------------------


@dataclass
class RestoreResult:
    """What ``restore`` did: the snapshot, its engram version and time, files and bytes written, files found
    already restored by an earlier, interrupted run, seconds, and whether the vault key was in the backup."""

    location: str
    snapshot: str
    engram_version: str
    created: str
    data_dir: str
    files: int
    bytes: int
    resumed_files: int
    seconds: float
    vault_key: str

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field."""
        return dict(self.__dict__)


def _leftovers(data_dir: Path) -> Iterator[Path]:
    """What the data dir holds besides a restore's own marker and part files."""
    for p in data_dir.iterdir():
        if p.name != RESTORE_MARKER:
            yield p


def check_restorable(data_dir: Path, snapshot: str) -> bool:
    """Whether ``data_dir`` may receive ``snapshot``: missing, empty, or holding an unfinished restore of the same
    snapshot (returns True then: a resume). Raises BackupError naming the reason otherwise."""
    if not data_dir.exists():
        return False
    if not data_dir.is_dir():
        raise BackupError(f"{data_dir} is not a folder")
    marker = data_dir / RESTORE_MARKER
    if marker.is_file():
        try:
            began = json.loads(marker.read_text()).get("snapshot")
        except (OSError, ValueError):
            began = None
        if began == snapshot:
            return True
        raise BackupError(
            f"{data_dir} holds an unfinished restore of snapshot {began}: run that restore again "
            f"(--snapshot {began}) or restore into another, empty folder"
        )
    left = list(_leftovers(data_dir))
    if left:
        raise BackupError(
            f"{data_dir} is not empty ({len(left)} entries, e.g. {left[0].name}): restore into a new "
            "or empty folder (--data-dir DIR); nothing was written"
        )
    return False


class _Restorer:
    """The file-by-file work of one restore, shared by the threads: a file's entry checked (``check``), its part
    file made with its size (all holes) by the first of its segments taken up, segments of blocks written into it
    (``segment``), every block checked against its digest (``hasher``), and the part renamed into place by the
    thread that wrote its last segment (no pass over the files in one thread before or after)."""

    def __init__(
        self,
        name: str,
        repo: Repository,
        data_dir: Path,
        made: set[Path],
        total: int,
        report: Progress,
        hasher: Callable[[bytes | memoryview], str],
    ) -> None:
        self.name, self.repo, self.data_dir, self.made, self.total, self.report = (
            name,
            repo,
            data_dir,
            made,
            total,
            report,
        )
        self.hasher = hasher
        self.done, self.resumed, self.lock = 0, 0, threading.Lock()  # bytes, files an interrupted run completed
        self.left: dict[str, int] = {}  # segments of each file still to write
        self.file_locks: dict[str, threading.Lock] = {}
        self.made_parts: set[str] = set()
        self.buffers = threading.local()  # each thread's buffer for a run of blocks (a folder's reads fill it)

    def check(self, entry: FileEntry, segments: int) -> bool:
        """Check the entry (its tree digest, its path inside the data dir); False when an interrupted run
        completed the file already. ``segments``: how many of its segments will be written."""
        if entry.tree_digest() != entry.digest:
            raise BackupError(f"snapshot {self.name}: the entry of {entry.path} is damaged")
        if ".." in Path(entry.path).parts or Path(entry.path).is_absolute():
            raise BackupError(f"snapshot {self.name}: {entry.path} is outside the data dir")
        with contextlib.suppress(OSError):
            st = os.stat(self.data_dir / entry.path)
            # completed by an interrupted run (a file is renamed into place when whole)
            if stat.S_ISREG(st.st_mode) and st.st_size == entry.size:
                self.done += CHUNK_BYTES * len(entry.blocks)
                self.resumed += 1
                return False
        self.left[entry.path] = segments
        self.file_locks[entry.path] = threading.Lock()
        return True

    def _open_part(self, entry: FileEntry) -> int:
        """The part file of ``entry`` opened for writing: made by the first caller (its size, all holes: holes
        stay holes; a part an interrupted run left is emptied), opened by the others."""
        target = self.data_dir / entry.path
        part = target.with_name(target.name + PART_SUFFIX)
        with self.file_locks[entry.path]:
            if entry.path not in self.made_parts:
                if target.parent not in self.made:  # a folder the manifest did not list (an older manifest's)
                    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                    self.made.add(target.parent)
                fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    os.fchmod(fd, 0o600)
                    os.ftruncate(fd, entry.size)
                except BaseException:
                    os.close(fd)
                    raise
                self.made_parts.add(entry.path)
                return fd
        return os.open(part, os.O_WRONLY)

    def segment(self, job: tuple[FileEntry, list[tuple[int, str]]]) -> None:
        """Write one segment of a file's blocks into its part file, each checked against its digest; the file's
        last segment renames it into place with its mtime."""
        entry, blocks = job
        fd = self._open_part(entry)
        try:
            buf = getattr(self.buffers, "buf", None)
            if buf is None:
                buf = self.buffers.buf = bytearray(CHUNK_BYTES * RUN_BLOCKS)
            digests = dict(blocks)
            for first, count in _runs([off for off, _ in blocks]):
                wanted = [digests[first + k * CHUNK_BYTES] for k in range(count)]
                run = self.repo.read_blocks(wanted, buf)
                for digest, data in zip(wanted, run, strict=True):
                    if self.hasher(data) != digest:
                        raise BackupError(
                            f"chunk {digest} in {self.repo.location} is damaged (its bytes do not "
                            f"match its digest); {entry.path} cannot be restored"
                        )
                _write_all(fd, run, first)
                with self.lock:
                    self.done += CHUNK_BYTES * count
                    self.report("restore", self.done, self.total)
            if len(blocks) > RUN_BLOCKS:  # this segment's range only: other threads write the file's others
                _start_writeback(fd, blocks[0][0], blocks[-1][0] + CHUNK_BYTES - blocks[0][0])
        finally:
            os.close(fd)
        with self.lock:
            self.left[entry.path] -= 1
            last = not self.left[entry.path]
        if last:
            target = self.data_dir / entry.path
            part = target.with_name(target.name + PART_SUFFIX)
            os.utime(part, ns=(entry.mtime_ns, entry.mtime_ns))
            os.replace(part, target)


@without_gc
def restore_files(
    repo: Repository,
    name: str,
    files: list[dict[str, Any]],
    dirs: list[str],
    data_dir: Path,
    resuming: bool,
    *,
    hasher: Callable[[bytes | memoryview], str],
    workers: int | None = None,
    progress: Progress | None = None,
) -> _Restorer:
    """Write the manifest's ``files`` (entries as in the manifest) and ``dirs`` of snapshot ``name`` into
    ``data_dir`` (checked by ``check_restorable`` first: ``resuming`` is its answer), under ``RESTORE_MARKER``,
    as ``restore`` describes; ``hasher``: the manifest's block digest (``chunk_hasher``). Returns the writer
    (bytes done, files found restored already). Raises BackupError (a damaged or missing chunk), OSError (a full
    disk: the marker stays)."""
    os.umask(PRIVATE_UMASK)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    if not resuming:
        _atomic_write(
            data_dir / RESTORE_MARKER, json.dumps({"snapshot": name, "from": repo.location}).encode(), sync=True
        )
    made: set[Path] = {data_dir}
    for d in dirs:
        (data_dir / d).mkdir(mode=0o700, parents=True, exist_ok=True)
        made.add(data_dir / d)
    entries = [FileEntry.from_json(d) for d in files]
    total = sum(CHUNK_BYTES * len(e.blocks) for e in entries)
    writer = _Restorer(name, repo, data_dir, made, total, progress or (lambda phase, d, t: None), hasher)
    writer.report("restore", 0, total)
    # segments of SEGMENT_BLOCKS, not whole files, share the threads: one large file does not keep one busy alone;
    # a file without blocks (empty, or all holes) is one empty segment. Taken in turns from the files (largest
    # first), so the threads mostly write different files: writes into one file queue for its inode's lock, and
    # threads spinning on it cost the restore a third of its CPU (perf: rwsem_spin_on_owner)
    by_file: list[list[tuple[FileEntry, list[tuple[int, str]]]]] = []
    for e in entries:
        segments = [e.blocks[i : i + SEGMENT_BLOCKS] for i in range(0, len(e.blocks), SEGMENT_BLOCKS)] or [[]]
        if writer.check(e, len(segments)):
            by_file.append([(e, seg) for seg in segments])
    by_file.sort(key=len, reverse=True)
    jobs = [job for turn in itertools.zip_longest(*by_file) for job in turn if job is not None]
    writer.report("restore", writer.done, total)
    for _ in thread_map(writer.segment, jobs, workers or repo.threads, "engram-restore"):
        pass
    if resuming:  # a part left by an interrupted run is made again and renamed by now: none is expected here
        for part in data_dir.rglob(f"*{PART_SUFFIX}"):
            part.unlink(missing_ok=True)
    syncfs(data_dir)
    (data_dir / RESTORE_MARKER).unlink(missing_ok=True)
    dfd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return writer


#: The manifest's ``mode`` of a backup of the distributed mode (``workers.stores.cluster_backup``); a backup of
#: the embedded default has none.
CLUSTER_MODE = "cluster"


@without_gc
def restore(
    repo: Repository,
    data_dir: Path,
    *,
    snapshot: str | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> RestoreResult:
    """Write ``snapshot`` (default: the newest) of ``repo`` into ``data_dir`` (new or empty; or holding an
    unfinished restore of the same snapshot, which is completed). Folders are made 0700 and files 0600; every
    chunk is checked against its digest as it is read, every file against its tree digest.

    ``progress(phase, done, total)`` in bytes, phase ``restore``. Raises BackupError (a newer backup, a backup of
    the distributed mode, a non-empty data dir, a missing or damaged chunk), OSError (a full disk: the marker
    stays, run it again)."""
    t0 = time.perf_counter()
    name, manifest = load_manifest(repo, snapshot)
    if manifest.get("mode") == CLUSTER_MODE:
        raise BackupError(
            f"snapshot {name} is a backup of the distributed mode (S3, Redis and the store worker's "
            "store): restore it with ENGRAM_BROKER_URL set, into an empty cluster"
        )
    data_dir = Path(data_dir).expanduser().absolute()
    resuming = check_restorable(data_dir, name)
    writer = restore_files(
        repo,
        name,
        manifest["files"],
        manifest.get("dirs", []),
        data_dir,
        resuming,
        hasher=chunk_hasher(manifest),
        workers=workers,
        progress=progress,
    )
    return RestoreResult(
        repo.location,
        name,
        str(manifest.get("engram_version")),
        str(manifest.get("created")),
        str(data_dir),
        len(manifest["files"]),
        sum(int(f["size"]) for f in manifest["files"]),
        writer.resumed,
        time.perf_counter() - t0,
        str(manifest.get("vault_key", "excluded")),
    )


def snapshot_list(repo: Repository) -> list[dict[str, Any]]:
    """The repository's snapshots, oldest first: name, created, engram version, source, files and bytes."""
    out: list[dict[str, Any]] = []
    for name in repo.snapshots():
        try:
            _, m = load_manifest(repo, name)
        except BackupError as exc:
            out.append({"snapshot": name, "error": str(exc)})
            continue
        out.append(
            {
                "snapshot": name,
                "created": m.get("created"),
                "engram_version": m.get("engram_version"),
                "source": m.get("source"),
                "files": len(m["files"]),
                "bytes": sum(int(f["size"]) for f in m["files"]),
            }
        )
    return out


__all__ = [
    "BackupError",
    "BackupResult",
    "CHUNK_BYTES",
    "CLUSTER_MODE",
    "FORMAT_VERSION",
    "FolderRepository",
    "RestoreResult",
    "S3Repository",
    "backup",
    "check_restorable",
    "check_versions",
    "chunk_stream",
    "load_manifest",
    "open_repository",
    "restore",
    "restore_files",
    "snapshot_list",
    "write_manifest",
]
