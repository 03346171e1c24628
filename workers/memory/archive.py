"""Archives: one user's (or a tenant's) whole memory in one file, and that file imported into another data dir
(``engram export --archive FILE`` / ``engram import FILE``; the commands: ``api.cli.archive``).

An archive is a POSIX tar file (``tarfile``, written and read as a stream: nothing is held in memory but one
batch of points and the manifest), its members in this order:

- ``engram-archive.json``, the header: ``format`` (``FORMAT``), ``format_version``, the ``engram_version`` that
  wrote it, the tenant and the user (None: the tenant's whole memory), when. First, so a foreign file or one
  written by a newer engram is refused at once;
- ``objects/<key>``: each object as stored: the originals (``media/<tenant>/<sha256>.<ext>``), what ingest derived
  from them (``derived/<tenant>/<event>/``: keyframes, audio chunks, thumbnails, face crops and voice samples) and
  the vault's entries (``vault/<tenant>/<entry>.json``, still encrypted: the vault key is never in an archive);
- ``points/<collection>/<n>.jsonl.gz``: the points of every collection (observations, the six memory types with
  their superseded versions, the entities the user's points name and the user's own), ``POINTS_PER_MEMBER`` to a
  member: id, payload and every named vector as stored (dense, multivector and sparse, as float32 in base64:
  read back bit for bit);
- ``ledger/events.jsonl.gz``: the ledger's records of the events (status, stage, reason, segments);
- ``manifest.json``, LAST: the header's fields, counts, and the size and SHA-256 of every member before it. An
  export killed part way has no manifest, and is written under a temporary name renamed when complete.

``import_archive`` first reads the whole archive (``verify_archive``): the header's format and versions, every
member's size and SHA-256 against the manifest, no member missing, unknown or outside its folder. Anything wrong
is refused (``ArchiveError``, one line saying why) before a byte is written. It then writes in the archive's
order: objects (an object already there with the same bytes is not written again), points by their ids (a point
already there with the same payload is not written again; one that differs is replaced by the archive's), and
the ledger's records (an event already there as the archive has it is left alone). Every write is keyed by the
ids it carries, so importing twice stores nothing twice, and an import killed part way (``kill -9``) is completed
by the same command. The data dir stays owner-only: the runtime's umask (``workers.stores.private``).

Left as they are: caches (OCR text, embeddings: made again when needed), the ledger's near-duplicate frame state,
and an entity the target already knows under the same id is replaced by the archive's (an entity is tenant-wide:
the samples other users of the source gave it come with it). Nothing here is owned by a thread: each call owns
its tar stream.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import mimetypes
import os
import tarfile
import tempfile
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import IO, Any

import numpy as np
import structlog

from engram.schemas.errors import EngramError
from engram.schemas.events import EventStatus, LedgerRecord, MediaEvent
from engram.workers.memory import vault
from engram.workers.runtime import Runtime
from engram.workers.stores import models as qm
from engram.workers.stores.backup import engram_version
from engram.workers.stores.ledger import FINAL_STATUSES
from engram.workers.stores.objects import ObjectNotFound
from engram.workers.stores.vectors import COLLECTIONS, ENTITIES, tenant_filter

log = structlog.get_logger(__name__)

#: The header's ``format``: what tells an engram archive from any other tar file.
FORMAT = "engram-archive"
#: The archive's layout; a reader refuses an archive of a higher one (it would misread it).
FORMAT_VERSION = 1
HEADER = "engram-archive.json"
MANIFEST = "manifest.json"
EVENTS = "ledger/events.jsonl.gz"
#: Points per ``points/`` member: the batch held in memory while writing or reading (a few MB of observations).
POINTS_PER_MEMBER = 256
_FOLDERS = ("objects/", "points/")
#: Where ``engram import`` / ``export --archive`` of a cluster stage an archive in the object store for the store
#: worker (``workers.archive``): under the staging area of uploads, so one a killed command left behind is removed
#: by ``workers.stores.objects.expire_staged`` after its grace.
STAGING_PREFIX = "uploads/archives/"
_COPY_BYTES = 1 << 20


class ArchiveError(EngramError, ValueError):
    """An archive cannot be written or imported; the message says why in one line (not an engram archive, a
    truncated or damaged one, one written by a newer engram: both versions named)."""


@dataclass
class ArchiveResult:
    """What an export wrote or an import did: ``counts`` (objects, object bytes, points per collection, events,
    vault entries), ``written`` (for an import: what was new; the rest was already there), seconds."""

    path: str
    tenant_id: str
    user_id: str | None
    counts: dict[str, Any]
    written: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON-ready dict."""
        return {
            "path": self.path,
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "counts": self.counts,
            "written": self.written,
            "seconds": round(self.seconds, 3),
        }


# --- vectors as JSON ---------------------------------------------------------------------------------------------


def _pack_vector(vector: Any) -> dict[str, Any]:
    """One named vector as JSON: sparse (indices and float32 values) or dense / multivector (float32, shape)."""
    if hasattr(vector, "indices"):
        values = np.asarray(vector.values, dtype="<f4")
        return {"indices": [int(i) for i in vector.indices], "values": base64.b64encode(values.tobytes()).decode()}
    arr = np.asarray(vector, dtype="<f4")
    return {"shape": list(arr.shape), "f32": base64.b64encode(arr.tobytes()).decode()}


def _unpack_vector(packed: dict[str, Any]) -> Any:
    if "indices" in packed:
        values = np.frombuffer(base64.b64decode(packed["values"]), dtype="<f4")
        return qm.SparseVector(indices=list(packed["indices"]), values=values.tolist())
    return np.frombuffer(base64.b64decode(packed["f32"]), dtype="<f4").reshape(packed["shape"]).tolist()


def _point_json(p: qm.Record) -> bytes:
    vectors = p.vector if isinstance(p.vector, dict) else {}
    return json.dumps(
        {
            "id": str(p.id),
            "payload": p.payload or {},
            "vector": {name: _pack_vector(v) for name, v in vectors.items() if v is not None},
        },
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode()


def _point(line: bytes) -> qm.PointStruct:
    d = json.loads(line)
    return qm.PointStruct(
        id=d["id"], payload=d["payload"], vector={name: _unpack_vector(v) for name, v in d["vector"].items()}
    )


# --- writing -------------------------------------------------------------------------------------------------------


class _Hashing:
    """A file read through while its SHA-256 is computed (what ``tarfile.addfile`` copies from)."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh, self.sha = fh, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(n)
        self.sha.update(data)
        return data


class _Writer:
    """The tar stream of one export and the manifest's record of what went into it."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.members: dict[str, dict[str, Any]] = {}
        self.mtime = int(time.time())

    def _info(self, name: str, size: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = size, 0o600, self.mtime
        return info

    def add_bytes(self, name: str, data: bytes, listed: bool = True) -> None:
        self.tar.addfile(self._info(name, len(data)), io.BytesIO(data))
        if listed:
            self.members[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    def add_file(self, name: str, path: Path) -> int:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            src = _Hashing(fh)
            self.tar.addfile(self._info(name, size), src)  # type: ignore[arg-type]  # read() is all it calls
        self.members[name] = {"size": size, "sha256": src.sha.hexdigest()}
        return size


def _object_keys(
    rt: Runtime, tenant_id: str, user_id: str | None, events: list[LedgerRecord], observations: list[dict[str, Any]]
) -> list[str]:
    """The objects of the export: the tenant's media, derived and vault folders, or (one user) the media of the
    user's events and observations, what ingest derived from those events, and the user's vault entries."""
    if user_id is None:
        return [k for prefix in ("media", "derived", "vault") for k in rt.objects.keys(f"{prefix}/{tenant_id}/")]
    media = {r.object_key for r in events} | {p["object_key"] for p in observations if p.get("object_key")}
    event_ids = {str(r.event_id) for r in events} | {p["event_id"] for p in observations if p.get("event_id")}
    keys = sorted(k for k in media if k.startswith(f"media/{tenant_id}/") and rt.objects.exists(k))
    keys += [k for e in sorted(event_ids) for k in rt.objects.keys(f"derived/{tenant_id}/{e}/")]
    keys += [vault.object_key(tenant_id, e.id) for e in vault.list_entries(rt, tenant_id, user_id)]
    return keys


def _point_ids(rt: Runtime, tenant_id: str, user_id: str | None) -> dict[str, list[str]]:
    """{collection: point ids} of the export: every collection's points of the tenant (and user), and the
    entities those points name besides the user's own."""
    flt = tenant_filter(tenant_id, user_id)
    ids: dict[str, list[str]] = {}
    named: set[str] = set()
    for coll in (c for c in COLLECTIONS if c != ENTITIES):
        points = rt.vectors.scroll(coll, flt, with_payload=["entity_ids"])
        ids[coll] = [str(p.id) for p in points]
        named.update(e for p in points for e in (p.payload or {}).get("entity_ids") or [])
    own = [str(p.id) for p in rt.vectors.scroll(ENTITIES, flt, with_payload=False)]
    if user_id is not None and named:
        known = {
            str(p.id)
            for p in rt.vectors.retrieve(ENTITIES, sorted(named), with_payload=["tenant_id"])
            if (p.payload or {}).get("tenant_id") == tenant_id
        }
        own = sorted(set(own) | known)
    ids[ENTITIES] = own
    return ids


def _write_points(rt: Runtime, w: _Writer, ids: dict[str, list[str]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for coll, pids in ids.items():
        counts[coll] = 0
        for n, start in enumerate(range(0, len(pids), POINTS_PER_MEMBER)):
            points = rt.vectors.retrieve(coll, pids[start : start + POINTS_PER_MEMBER], with_vectors=True)
            w.add_bytes(
                f"points/{coll}/{n:06d}.jsonl.gz",
                gzip.compress(b"\n".join(_point_json(p) for p in points) + b"\n", compresslevel=3, mtime=0),
            )
            counts[coll] += len(points)
    return counts


def _event_json(rt: Runtime, rec: LedgerRecord) -> bytes:
    return json.dumps(
        {"record": rec.model_dump(mode="json"), "segments": sorted(rt.ledger.done_segments(rec.event_id))}
    ).encode()


def export_archive(rt: Runtime, dest: Path, tenant_id: str, user_id: str | None = None) -> ArchiveResult:
    """Write the memory of ``user_id`` of ``tenant_id`` (None: the tenant's whole memory) into the archive ``dest``
    (see the module docstring), first under a temporary name in its folder, renamed when the manifest is written.
    The caller holds the store (``workers.runtime.store_session``) so the points and the ledger are of one moment.
    Raises ArchiveError when the tenant (or user) holds nothing, OSError when ``dest`` cannot be written."""
    started = time.monotonic()
    events = (
        rt.ledger.user_events(tenant_id, user_id)
        if user_id is not None
        else rt.ledger.records(tenant_id, limit=1 << 62)
    )
    ids = _point_ids(rt, tenant_id, user_id)
    if not events and not any(ids.values()):
        who = f"user {user_id!r} of tenant {tenant_id!r}" if user_id else f"tenant {tenant_id!r}"
        raise ArchiveError(f"{who} holds nothing to export")
    observations = [
        p.payload or {}
        for p in rt.vectors.retrieve("observations", ids["observations"], with_payload=["object_key", "event_id"])
    ]
    keys = _object_keys(rt, tenant_id, user_id, events, observations)
    header = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "engram_version": engram_version(),
        "tenant_id": tenant_id,
        "user_id": user_id,
        "created_at": datetime.now(UTC).isoformat(),
    }
    dest = Path(dest)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            w = _Writer(tar)
            w.add_bytes(HEADER, json.dumps(header).encode(), listed=False)
            object_bytes = 0
            for key in keys:
                with rt.objects.local_file(key) as path:
                    object_bytes += w.add_file(f"objects/{key}", path)
            points = _write_points(rt, w, ids)
            w.add_bytes(EVENTS, gzip.compress(b"".join(_event_json(rt, r) + b"\n" for r in events), mtime=0))
            counts = {
                "objects": len(keys),
                "object_bytes": object_bytes,
                "points": points,
                "events": len(events),
                "vault_entries": sum(k.startswith("vault/") for k in keys),
            }
            w.add_bytes(MANIFEST, json.dumps({**header, "counts": counts, "members": w.members}).encode(), listed=False)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    log.info(
        "archive exported",
        tenant=tenant_id,
        user=user_id,
        path=str(dest),
        objects=len(keys),
        points=sum(points.values()),
        events=len(events),
    )
    return ArchiveResult(str(dest), tenant_id, user_id, counts, seconds=time.monotonic() - started)


# --- reading -------------------------------------------------------------------------------------------------------


def _open(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, mode="r|*")
    except FileNotFoundError as exc:
        raise ArchiveError(f"no archive at {path}") from exc
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"{path} is not an engram archive (not a tar file: {exc})") from exc


def _check_header(path: Path, header: dict[str, Any]) -> None:
    """Refuse a header that is not an engram archive's, or of a newer format or engram (both versions named)."""
    from packaging.version import InvalidVersion, Version

    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ArchiveError(f"{path} is not an engram archive (its first member is not an engram archive header)")
    theirs, fmt, ours = str(header.get("engram_version", "?")), header.get("format_version"), engram_version()
    try:
        newer_engram = Version(theirs) > Version(ours)
    except InvalidVersion:
        newer_engram = False
    if not isinstance(fmt, int) or fmt > FORMAT_VERSION or newer_engram:
        raise ArchiveError(
            f"{path} was written by engram {theirs} (archive format {fmt}); this is engram {ours} "
            f"(archive format {FORMAT_VERSION}): upgrade engram to import it"
        )


def _safe_name(path: Path, name: str) -> None:
    """Refuse a member outside the archive's folders (``objects/<key>``, ``points/<collection>/<n>``, the
    ledger's events), or one whose name climbs out of them."""
    parts = PurePosixPath(name).parts
    if name == EVENTS:
        return
    if (
        name.startswith("/")
        or ".." in parts
        or len(parts) < 3
        or parts[0] + "/" not in _FOLDERS
        or parts[0] == "points"
        and (parts[1] not in COLLECTIONS or len(parts) != 3)
    ):
        raise ArchiveError(f"{path} is not an engram archive (unexpected member {name!r})")


def _members(path: Path) -> Generator[tuple[tarfile.TarInfo, IO[bytes]], None, None]:
    """The archive's regular-file members with a reader each, in order; a damaged or truncated tar stream raises
    ArchiveError."""
    tar = _open(path)
    try:
        for info in tar:
            if not info.isfile():
                raise ArchiveError(f"{path} is not an engram archive (member {info.name!r} is not a file)")
            fh = tar.extractfile(info)
            assert fh is not None  # a regular file has a reader
            yield info, fh
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"{path} is damaged or truncated ({exc})") from exc
    finally:
        tar.close()


def _digest(fh: IO[bytes]) -> tuple[int, str]:
    sha, size = hashlib.sha256(), 0
    while chunk := fh.read(_COPY_BYTES):
        sha.update(chunk)
        size += len(chunk)
    return size, sha.hexdigest()


def _read_json(path: Path, fh: IO[bytes], what: str, limit: int = -1) -> dict[str, Any]:
    try:
        got = json.loads(fh.read(limit))
    except ValueError as exc:
        raise ArchiveError(f"{path} is not an engram archive (its {what} is not JSON)") from exc
    if not isinstance(got, dict):
        raise ArchiveError(f"{path} is not an engram archive (its {what} is not a JSON object)")
    return got


def verify_archive(path: Path) -> dict[str, Any]:
    """Read the whole archive at ``path`` and return its manifest once everything is as it says: the header first
    (format and versions: ``_check_header``), every member's size and SHA-256, none missing or unknown, the
    manifest last. Raises ArchiveError saying why (not an engram archive, truncated, damaged, newer); writes
    nothing."""
    path = Path(path)
    members = _members(path)
    try:
        header, manifest, seen = _read_all(path, members)
    except (tarfile.TarError, EOFError, OSError) as exc:  # a member's data cut short
        raise ArchiveError(f"{path} is damaged or truncated ({exc})") from exc
    finally:
        members.close()
    if manifest is None:
        raise ArchiveError(f"{path} is truncated: it ends before its manifest (an export that did not finish?)")
    return _check_manifest(path, header, manifest, seen)


def _read_all(
    path: Path, members: Iterator[tuple[tarfile.TarInfo, IO[bytes]]]
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """The header, the manifest (None: the archive ends before it) and {member: size and SHA-256} of the rest."""
    first = next(members, None)
    if first is None or first[0].name != HEADER:
        raise ArchiveError(f"{path} is not an engram archive (it does not begin with {HEADER})")
    header = _read_json(path, first[1], "header", 1 << 20)  # a few hundred bytes: a larger one is not ours
    _check_header(path, header)
    seen: dict[str, dict[str, Any]] = {}
    manifest = None
    for info, fh in members:
        if manifest is not None:
            raise ArchiveError(f"{path} is not an engram archive (member {info.name!r} after the manifest)")
        if info.name == MANIFEST:
            manifest = _read_json(path, fh, "manifest")
            continue
        _safe_name(path, info.name)
        if info.name.startswith("objects/") and PurePosixPath(info.name).parts[2] != header.get("tenant_id"):
            raise ArchiveError(
                f"{path} is damaged: {info.name} is not an object of its tenant {header.get('tenant_id')!r}"
            )
        size, sha = _digest(fh)
        seen[info.name] = {"size": size, "sha256": sha}
    return header, manifest, seen


def _check_manifest(
    path: Path, header: dict[str, Any], manifest: dict[str, Any], seen: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    listed = manifest.get("members")
    if not isinstance(listed, dict) or any(manifest.get(k) != v for k, v in header.items()):
        raise ArchiveError(f"{path} is damaged: its manifest does not match its header")
    if missing := sorted(set(listed) - set(seen)):
        raise ArchiveError(f"{path} is truncated or damaged: {len(missing)} members missing (first: {missing[0]})")
    if extra := sorted(set(seen) - set(listed)):
        raise ArchiveError(f"{path} is damaged: {len(extra)} members the manifest does not list (first: {extra[0]})")
    if bad := sorted(n for n, m in seen.items() if m != listed[n]):
        raise ArchiveError(f"{path} is damaged: {len(bad)} members do not match their checksum (first: {bad[0]})")
    return manifest


# --- importing -----------------------------------------------------------------------------------------------------

#: Prefix of an import's temporary files in the data dir (an object being checked before it is stored).
TMP_PREFIX = ".engram-import-"


def _checked(path: Path, fh: IO[bytes], expected: dict[str, Any], name: str) -> bytes:
    data = fh.read()
    if len(data) != expected["size"] or hashlib.sha256(data).hexdigest() != expected["sha256"]:
        raise ArchiveError(f"{path} changed while it was imported ({name} no longer matches its checksum)")
    return data


def _same_object(rt: Runtime, key: str, expected: dict[str, Any]) -> bool:
    """Whether the object store holds ``key`` with the bytes the archive has for it."""
    try:
        if rt.objects.size(key) != expected["size"]:
            return False
        with rt.objects.local_file(key) as stored, open(stored, "rb") as fh:
            return _digest(fh)[1] == expected["sha256"]
    except ObjectNotFound:
        return False


def _import_object(rt: Runtime, path: Path, key: str, fh: IO[bytes], expected: dict[str, Any]) -> bool:
    """Store one object of the archive unless it is there with the same bytes; whether it was written. The bytes go
    through an owner-only temporary file in the data dir, checked against the manifest before they are stored."""
    if _same_object(rt, key, expected):
        return False
    with tempfile.NamedTemporaryFile(dir=rt.settings.data_dir, prefix=TMP_PREFIX) as tmp:
        sha = hashlib.sha256()
        while chunk := fh.read(_COPY_BYTES):
            sha.update(chunk)
            tmp.write(chunk)
        tmp.flush()
        if sha.hexdigest() != expected["sha256"]:
            raise ArchiveError(f"{path} changed while it was imported (objects/{key} no longer matches its checksum)")
        rt.objects.put_file(key, Path(tmp.name), mimetypes.guess_type(key)[0] or "application/octet-stream")
    return True


def _import_points(rt: Runtime, collection: str, data: bytes, tenant_id: str) -> int:
    """Upsert one member's points, leaving out those already stored with the same payload; how many were written.
    Raises ArchiveError, before writing any of them, when one is not of ``tenant_id``."""
    points = [_point(line) for line in gzip.decompress(data).splitlines() if line]
    if any((p.payload or {}).get("tenant_id") != tenant_id for p in points):
        raise ArchiveError(f"the archive holds points of another tenant than its own ({tenant_id!r})")
    stored = {str(p.id): p.payload for p in rt.vectors.retrieve(collection, [p.id for p in points])}
    new = [p for p in points if stored.get(str(p.id)) != p.payload]
    rt.vectors.upsert(collection, new)
    return len(new)


def _media_event(rt: Runtime, rec: LedgerRecord) -> MediaEvent:
    """The event a ledger record was made from, as far as the record tells it (the ledger keeps the event itself,
    but offers no reader of it): its ids, object and hash, the object's size and type, the time it was recorded."""
    try:
        size = rt.objects.size(rec.object_key)
    except ObjectNotFound:
        size = 0
    return MediaEvent(
        event_id=rec.event_id,
        tenant_id=rec.tenant_id,
        user_id=rec.user_id,
        device_id=rec.device_id,
        kind=rec.kind,
        object_key=rec.object_key,
        sha256=rec.sha256,
        size=size,
        mime_type=mimetypes.guess_type(rec.object_key)[0] or "application/octet-stream",
        captured_at=rec.created_at or rec.updated_at,
        source_name=rec.source_name,
    )


def _import_event(rt: Runtime, rec: LedgerRecord, segments: list[int]) -> bool:
    """Record one event of the archive in the ledger with its status and segments, unless it is there as the
    archive has it; whether anything was written. An event that was not finished when exported is recorded
    failed (``engram retry`` processes it)."""
    have = rt.ledger.get(rec.event_id)
    if (
        have is not None
        and have.status == rec.status
        and have.segments_done == len(segments)
        and have.observations == rec.observations
    ):
        return False
    eid = rec.event_id
    rt.ledger.record_queued(_media_event(rt, rec), created_at=rec.created_at)  # its time, not the import's
    if rec.status not in FINAL_STATUSES:
        rt.ledger.mark(
            eid,
            EventStatus.failed,
            rec.stage,
            f"was {rec.status.value} when it was exported: `engram retry` processes it",
        )
        return True
    if rec.segments_total is not None:
        rt.ledger.expect_segments(eid, rec.segments_total)
    if segments:  # the record counts observations per event: the first segment carries them
        rt.ledger.segments_done([(eid, i, rec.observations if n == 0 else 0) for n, i in enumerate(segments)])
    rt.ledger.mark(eid, rec.status, rec.stage, rec.reason)
    if rec.status is EventStatus.done:
        rt.ledger.claim_content(rec.tenant_id, rec.user_id, rec.sha256, eid)
    return True


def _import_events(rt: Runtime, data: bytes, tenant_id: str) -> int:
    events = [json.loads(line) for line in gzip.decompress(data).splitlines() if line]
    records = [LedgerRecord.model_validate(d["record"]) for d in events]
    if any(r.tenant_id != tenant_id for r in records):
        raise ArchiveError(f"the archive holds events of another tenant than its own ({tenant_id!r})")
    return sum(_import_event(rt, r, list(d["segments"])) for r, d in zip(records, events, strict=True))


def _clean_temporary(data_dir: Path) -> None:
    """Remove what an import killed part way left in the data dir (imports are serialised by the store's hold)."""
    for stale in Path(data_dir).glob(f"{TMP_PREFIX}*"):
        stale.unlink(missing_ok=True)


def import_archive(rt: Runtime, path: Path, manifest: dict[str, Any] | None = None) -> ArchiveResult:
    """Import the archive at ``path`` into ``rt``'s stores, ids kept: verified whole first (``verify_archive``;
    ArchiveError and nothing written when it is not sound; ``manifest``: what the caller's own ``verify_archive``
    returned, so it is not read twice), then objects, points and ledger records written in that order, each
    skipped when already there as the archive has it (a member that no longer matches its checksum stops the
    import with ArchiveError). The caller holds the store (``workers.runtime.store_session``). Importing again, or
    after a kill, completes and doubles nothing."""
    started = time.monotonic()
    path = Path(path)
    manifest = manifest or verify_archive(path)
    listed = manifest["members"]
    _clean_temporary(rt.settings.data_dir)
    written: dict[str, Any] = {"objects": 0, "points": {}, "events": 0}
    members = _members(path)
    try:
        for info, fh in members:
            name = info.name
            if name in (HEADER, MANIFEST):
                continue
            if name.startswith("objects/"):
                written["objects"] += _import_object(rt, path, name.removeprefix("objects/"), fh, listed[name])
            elif name.startswith("points/"):
                coll = name.split("/")[1]
                n = _import_points(rt, coll, _checked(path, fh, listed[name], name), manifest["tenant_id"])
                written["points"][coll] = written["points"].get(coll, 0) + n
            else:
                written["events"] += _import_events(rt, _checked(path, fh, listed[name], name), manifest["tenant_id"])
    finally:
        members.close()
    log.info(
        "archive imported",
        path=str(path),
        tenant=manifest["tenant_id"],
        user=manifest["user_id"],
        objects=written["objects"],
        points=sum(written["points"].values()),
        events=written["events"],
    )
    return ArchiveResult(
        str(path), manifest["tenant_id"], manifest["user_id"], manifest["counts"], written, time.monotonic() - started
    )
