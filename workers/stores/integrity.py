"""File-level checks of an embedded store's shard (a Qdrant Edge shard folder), made before Qdrant's engine opens it.

Qdrant's engine (qdrant-edge-py 0.9) opens a shard whose files were damaged and answers from what is left: a dense
vector file deleted, cut or zeroed, a segment or its id tracker gone, all without a word; a truncated payload page
fails only when a point's payload is read. So the embedded store checks a shard's files itself, before the engine
opens it (the engine writes some of its files as it opens a shard, so a shard found damaged afterwards would
already have been written to):

- ``MANIFEST``, written into the shard folder when a process closes the shard cleanly (``write_manifest``):
  every file's size and a BLAKE2b digest of its content (RFC 7693, ``hashlib.blake2b``), and its stamp (size,
  inode, modification and change times) where that stamp is settled (``_settled``). ``verify_manifest``
  compares the files with it at the next open: a file missing, added, of another size or another content is
  named. A file whose settled stamp is unchanged was not written since (the change time is the kernel's) and is
  not read again: a store opened where it was closed costs a stat per file, plus a digest of the files written
  in the last seconds before the manifest was. The engine's files are sparse (32 MiB pages and chunks, mostly
  holes), so the digest reads only the file's data extents (``SEEK_DATA``/``SEEK_HOLE``) and skips blocks of
  zeros wherever they are: a hole and written zeros give the same digest (a copy that filled the holes still
  matches), zeros written over data do not. JSON files are digested as parsed, keys sorted: the engine rewrites
  its configuration files in another key order on every open.
- Why a manifest is the truth about the files: it is written only after the engine's handle on the shard is
  closed (the engine flushes as it closes and writes nothing after: no file of a closed shard changed in the
  seconds after, measured) and while the process still holds the store's lock (``vectors.lock``), under which
  alone a shard is opened; it is removed as the shard is next opened, before the engine writes anything. So
  no process can have the shard open, or write it, between the manifest and the next check.
- A shard without a manifest (an older engram's, or one whose process was killed while it had the shard open)
  is checked by ``check_structure``: what no flush leaves half-done (sizes, presence), and, when the store's
  last clean close counted the shard's points (``vectors.CLOSED_FILE``), the id tracker and the vectors held
  against that count. (The embedded store then opens a scratch copy of the shard, ``sparse_copy``, and reads every
  point of it back through the engine, ``workers.stores.vectors.EdgeVectorStore._trial_open``, before the engine
  opens the shard itself.)

Every refusal is a ``StoreCorrupt`` whose one-line message names the shard and the file. Reads only, but for
``write_manifest`` and ``drop_manifest``.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
from pathlib import Path

from engram.schemas.errors import StoreCorrupt, StoreError

#: The manifest's name, inside the shard folder (so a backup of the folder carries it).
MANIFEST = "engram-manifest.json"
MANIFEST_VERSION = 2
#: A file's stamp vouches for its digest only when its change time is this much older than the digest
#: (``_settled``): more than a coarse clock tick, and the 2 s of the coarsest file systems' times.
SETTLE_NS = 2_000_000_000
#: The digest's block: a block of only zeros is left out of the digest (a hole reads as one).
BLOCK = 1 << 16
_ZEROS = bytes(BLOCK)
_READ = 1 << 22  # bytes read at a time


def damaged(shard: Path, what: str, after_restore: str = "") -> StoreCorrupt:
    """The error for a shard that cannot be used as it is: the shard folder, ``what`` is wrong (naming the file),
    and what to do, in one line."""
    return StoreCorrupt(
        f"the embedded store's shard {shard} {what}; restore the folder from a backup{after_restore}, "
        "or move it away to start that collection empty"
    )


def _data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """The byte ranges of the file ``fd`` that hold data (``SEEK_DATA``/``SEEK_HOLE``); the whole file where the
    file system cannot tell."""
    out: list[tuple[int, int]] = []
    pos = 0
    try:
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == 6:  # ENXIO: no data past pos
                    break
                raise
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
            out.append((start, end))
            pos = end
    except (OSError, AttributeError):  # no SEEK_DATA here: read it all
        return [(0, size)] if size else []
    return out


def file_digest(path: Path) -> str:
    """A BLAKE2b-128 digest (hex) of the file at ``path``: of the index and bytes of each ``BLOCK`` that holds a
    byte other than zero, so that holes and written zeros read alike; a JSON file's digest is of its parsed
    content with sorted keys (raw bytes when it does not parse). Raises OSError when the file cannot be read."""
    h = hashlib.blake2b(digest_size=16)
    if path.suffix == ".json":
        raw = path.read_bytes()
        try:
            raw = json.dumps(json.loads(raw), sort_keys=True).encode()
        except ValueError:
            pass
        h.update(raw)
        return h.hexdigest()
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        done = 0  # blocks below this index are digested already
        for start, end in _data_extents(fd, size):
            pos = max(start - start % BLOCK, done * BLOCK)
            while pos < end:
                chunk = os.pread(fd, min(_READ, end - pos + (-(end - pos)) % BLOCK), pos)
                if not chunk:
                    break
                view = memoryview(chunk)
                for off in range(0, len(chunk), BLOCK):
                    block = view[off : off + BLOCK]
                    if block != _ZEROS[: len(block)]:
                        h.update(struct.pack("<Q", (pos + off) // BLOCK))
                        h.update(block)
                pos += len(chunk)
                done = -(-pos // BLOCK)
    return h.hexdigest()


def sparse_copy(src: Path, dst: Path) -> None:
    """Copy the folder ``src`` to ``dst`` (which must not exist) with only the data extents of each file
    (``_data_extents``): the engine's 32 MiB pages and chunks stay holes in the copy, so a shard copies in the time
    of its data, not of its nominal size. Folders are made owner-only (0700), files 0600; the manifest is not
    copied. Raises StoreError naming both folders when the copy cannot be made (e.g. ENOSPC: a store error told
    in one line like the others, not a traceback), leaving a partial ``dst`` for the caller to remove."""
    try:
        dst.mkdir(mode=0o700, parents=True)
        for folder, dirs, files in os.walk(src):
            rel = Path(folder).relative_to(src)
            for name in dirs:
                (dst / rel / name).mkdir(mode=0o700)
            for name in files:
                if rel == Path(".") and name == MANIFEST:
                    continue
                _sparse_copy_file(Path(folder) / name, dst / rel / name)
    except OSError as exc:
        raise StoreError(
            f"the embedded store's shard {src} cannot be checked: its scratch copy {dst} could not be made "
            f"({exc.strerror or exc}); it is left as it was: make room for the copy and run the command again"
        ) from exc


def _sparse_copy_file(src: Path, dst: Path) -> None:
    with open(src, "rb") as fin, open(os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as fout:
        size = os.fstat(fin.fileno()).st_size
        for start, end in _data_extents(fin.fileno(), size):
            pos = start
            while pos < end:
                chunk = os.pread(fin.fileno(), min(_READ, end - pos), pos)
                if not chunk:
                    break
                os.pwrite(fout.fileno(), chunk, pos)
                pos += len(chunk)
        fout.truncate(size)


def shard_files(shard: Path) -> dict[str, os.stat_result]:
    """Every file under ``shard`` but the manifest: {path relative to ``shard`` (``/``-separated): its stat}."""
    out: dict[str, os.stat_result] = {}
    for folder, _, files in os.walk(shard):
        for name in files:
            path = Path(folder) / name
            rel = path.relative_to(shard).as_posix()
            if rel != MANIFEST:
                out[rel] = path.stat()
    return out


def read_manifest(shard: Path) -> dict[str, list] | None:
    """The manifest's {relative path: [size, digest, stamp or None]}, or None when the shard has none (or one of
    a format this engram does not know: the shard is then checked as without one). A manifest that does not
    parse is damage (StoreCorrupt naming it)."""
    path = shard / MANIFEST
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("version") != MANIFEST_VERSION:
            return None
        files = data["files"]
        if not isinstance(files, dict) or not all(isinstance(v, list) and len(v) == 3 for v in files.values()):
            raise ValueError("no file list")
        return files
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise damaged(shard, f"has a damaged {path} ({str(exc)[:80]})") from exc


Stamp = tuple[int, int, int, int]
#: {relative path: (its stamp, its digest, whether the stamp alone may vouch for that digest later)}.
Known = dict[str, tuple[Stamp, str, bool]]


def _stamp(st: os.stat_result) -> Stamp:
    """What tells a file unchanged: size, inode, modification and change times (ns)."""
    return st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def _settled(st: os.stat_result, digested_at_ns: int) -> bool:
    """Whether a file whose stat is ``st``, digested at or after ``digested_at_ns`` (wall clock), can be vouched
    for by its stamp alone later: its change time is ``SETTLE_NS`` older than the digest, so any write after the
    digest moves the change time (the kernel sets it, from a coarse clock, on every write, truncation, rename or
    chmod; no call sets it back). A file changed just before it was digested is digested again next time (git's
    "racily clean" entries, alike)."""
    return st.st_ctime_ns < digested_at_ns - SETTLE_NS


def verify_manifest(shard: Path, recorded: dict[str, list], full: bool = False) -> Known:
    """Compare the shard's files with its manifest's ``recorded`` ones: the first file missing, added, of another
    size or of another content raises StoreCorrupt naming it (names and sizes first, then the digests). A file
    whose stamp is the one recorded (a settled stamp: ``_settled``) was not written since the manifest was and is
    not read again unless ``full``. Returns what it found (``Known``) for ``write_manifest`` to reuse at close.
    Reads only."""
    now = time.time_ns()
    files = shard_files(shard)
    for rel in sorted(recorded):
        if rel not in files:
            gone = shard / rel
            while not gone.parent.exists() and gone.parent != shard:  # name the folder that went, if one did
                gone = gone.parent
            raise damaged(shard, f"is missing {gone}, which it held when the store was last closed")
    for rel in sorted(files):
        if rel not in recorded:
            raise damaged(shard, f"holds {shard / rel}, which was not there when the store was last closed")
        if files[rel].st_size != recorded[rel][0] and not rel.endswith(".json"):  # JSON: by content (below)
            raise damaged(
                shard,
                f"has a damaged {shard / rel}: {files[rel].st_size} bytes, {recorded[rel][0]} "
                "when the store was last closed",
            )
    out: Known = {}
    for rel in sorted(files):
        st, (_, digest, stamp) = files[rel], recorded[rel]
        if not full and stamp is not None and tuple(stamp) == _stamp(st):
            out[rel] = (_stamp(st), digest, True)
            continue
        try:
            found = file_digest(shard / rel)
        except OSError as exc:
            raise damaged(shard, f"has an unreadable {shard / rel} ({exc.strerror or exc})") from exc
        if found != digest:
            raise damaged(
                shard, f"has a damaged {shard / rel}: its content differs from when the store was last closed"
            )
        out[rel] = (_stamp(st), found, _settled(st, now))
    return out


def write_manifest(shard: Path, known: Known | None = None) -> Known:
    """Write the shard's manifest: every file's size and digest, and its stamp where that is settled. Call it
    only with the engine's handle on the shard closed (it flushes as it closes and writes nothing after) and
    the store's lock still held (no other process can have the shard open): the manifest then describes files
    that no one writes until the next open, which drops it first (``drop_manifest``). A file whose stamp is the
    settled one in ``known`` (found by this process at open, untouched since) is not read again. Written beside
    the shard first, then moved into it (a crash leaves the old manifest or none, never a torn one). Returns
    what it recorded."""
    known = known or {}
    now = time.time_ns()
    out: Known = {}
    for rel, st in shard_files(shard).items():
        stamp = _stamp(st)
        seen = known.get(rel)
        if seen and seen[0] == stamp and seen[2]:
            out[rel] = seen
        else:
            out[rel] = (stamp, file_digest(shard / rel), _settled(st, now))
    tmp = shard.with_name(f".{shard.name}.{MANIFEST}.tmp")
    tmp.write_text(
        json.dumps(
            {
                "version": MANIFEST_VERSION,
                "files": {rel: [s[0], d, list(s) if settled else None] for rel, (s, d, settled) in sorted(out.items())},
            }
        )
    )
    tmp.replace(shard / MANIFEST)
    return out


def drop_manifest(shard: Path) -> None:
    """Remove the shard's manifest: done once the shard is found sound, just before the engine opens it (the
    engine writes some of its files as it opens a shard, and every write after). A process that dies before it
    closes the shard leaves none, so the next open checks the shard by ``check_structure`` instead of a stale
    manifest."""
    (shard / MANIFEST).unlink(missing_ok=True)


# --- without a manifest: what the files' own configuration says ------------------------------------------------


def _json(shard: Path, path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise damaged(shard, f"is missing {path}") from exc
    except (OSError, ValueError) as exc:
        raise damaged(shard, f"has a damaged {path} (not JSON: {str(exc)[:60]})") from exc
    if not isinstance(data, dict):
        raise damaged(shard, f"has a damaged {path} (not a JSON object)")
    return data


def _count(shard: Path, status: Path) -> int:
    """The number of vectors a chunked vector storage's ``status.dat`` says it holds (its first 8 bytes, LE)."""
    try:
        raw = status.read_bytes()
    except FileNotFoundError as exc:
        raise damaged(shard, f"is missing {status}") from exc
    if len(raw) < 8:
        raise damaged(shard, f"has a damaged {status} ({len(raw)} bytes)")
    return struct.unpack_from("<Q", raw)[0]


def _check_chunks(shard: Path, folder: Path) -> int:
    """A chunked memory-mapped vector storage (``config.json``, ``status.dat``, ``chunk_<n>.mmap``): each chunk of
    the configured size and enough of them for the vector count, which is returned."""
    config = _json(shard, folder / "config.json")
    size, per_chunk = config.get("chunk_size_bytes"), config.get("chunk_size_vectors")
    if not isinstance(size, int) or not isinstance(per_chunk, int) or per_chunk <= 0:
        raise damaged(shard, f"has a damaged {folder / 'config.json'} (no chunk size)")
    count = _count(shard, folder / "status.dat")
    for chunk in sorted(folder.glob("chunk_*.mmap")):
        if chunk.stat().st_size != size:
            raise damaged(shard, f"has a damaged {chunk}: {chunk.stat().st_size} bytes, not its {size}")
    for n in range(-(-count // per_chunk)):
        if not (folder / f"chunk_{n}.mmap").is_file():
            raise damaged(shard, f"is missing {folder / f'chunk_{n}.mmap'} (of its {count} vectors)")
    return count


def _check_pages(shard: Path, folder: Path) -> None:
    """A page store (``config.json``, ``page_<n>.dat``, ``tracker.dat``: payloads, sparse vectors): each page of the
    configured size, the tracker present."""
    config = _json(shard, folder / "config.json")
    size = config.get("page_size_bytes")
    if not isinstance(size, int):
        raise damaged(shard, f"has a damaged {folder / 'config.json'} (no page size)")
    pages = sorted(folder.glob("page_*.dat"))
    if not pages:
        raise damaged(shard, f"is missing {folder / 'page_0.dat'}")
    for page in pages:
        if page.stat().st_size != size:
            raise damaged(shard, f"has a damaged {page}: {page.stat().st_size} bytes, not its {size}")
    if not (folder / "tracker.dat").is_file():
        raise damaged(shard, f"is missing {folder / 'tracker.dat'}")


def _check_storage(shard: Path, folder: Path) -> int:
    """One storage folder of a segment (payload or a vector's), by the layout the engine gave it (a page store, or
    chunked vectors and offsets); returns the vectors its chunks hold (0 for a page store or a layout not known)."""
    if folder.name == "payload_storage" or (folder / "page_0.dat").exists():
        _check_pages(shard, folder)
        return 0
    if (folder / "store").is_dir():
        _check_pages(shard, folder / "store")
    return max(
        [
            _check_chunks(shard, folder / sub)
            for sub in ("vectors", "offsets")
            if (folder / sub / "status.dat").exists() or (folder / sub / "config.json").exists()
        ],
        default=0,
    )


def check_structure(shard: Path, points: int | None = None) -> None:
    """Check a shard without a manifest by what its files say of themselves, before the engine opens it. Such a
    shard is an older engram's, or one whose process was killed while it had the shard open, so its files may
    be caught mid-flush (the engine's write-ahead log holds what they lack, and it replays it at open): only what
    no flush leaves half-done is refused. Each segment the engine would load (a folder with its
    ``version.info``; one without is a segment the engine had not finished making, which it deletes itself) must
    have a readable ``segment.json``, the payload storage and the storage of every vector it declares, its
    vector chunks and payload pages of their configured sizes (the engine makes them whole), and the chunks
    that the vector count of its ``status.dat`` needs. Given ``points``, the count of the shard's last clean
    close (every file was then flushed), also: the id tracker's mappings present wherever the segment holds
    vectors, and vectors stored for at least that many points. Raises StoreCorrupt naming the first file found
    wrong. Reads only."""
    segments = shard / "segments"
    if not segments.is_dir():
        raise damaged(shard, f"is missing {segments}")
    _json(shard, shard / "edge_config.json")
    stored, known = 0, True
    for segment in sorted(p for p in segments.iterdir() if p.is_dir()):
        if segment.name.startswith(".") or segment.suffix == ".deleted" or not (segment / "version.info").exists():
            continue  # not loaded by the engine (a leftover it deletes)
        meta = _json(shard, segment / "segment.json")
        config = meta.get("config")
        if not isinstance(config, dict):
            raise damaged(shard, f"has a damaged {segment / 'segment.json'} (no config)")
        names = [*(config.get("vector_data") or {}), *(config.get("sparse_vector_data") or {})]
        vectors = 0
        for folder in (segment / "payload_storage", *(segment / f"vector_storage-{n}" for n in names)):
            if not folder.exists():
                raise damaged(shard, f"is missing {folder}")
            vectors = max(vectors, _check_storage(shard, folder))
        mappings = segment / "mutable_id_tracker.mappings"
        tracked = mappings.exists() or (
            not (segment / "mutable_id_tracker.versions").exists() and any(segment.glob("*id_tracker*"))
        )  # another kind of id tracker
        if points is not None and vectors and not tracked:
            raise damaged(shard, f"is missing {mappings} (its id tracker; the segment holds {vectors} vectors)")
        known = known and mappings.exists()
        stored += vectors
    if points is not None and known and stored < points:
        raise damaged(
            shard,
            f"holds vectors of at most {stored} points in {segments}, {points} when the store was "
            "last closed: a segment of it is missing or damaged",
        )
