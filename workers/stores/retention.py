"""Retention and the storage cap (issue 44): originals go, what was read from them stays.

An *original* is a published object (``media/<tenant>/<sha256>.<ext>``: a screenshot or photo, a recording, a
video, a conversation file or added note) and what ingest cut from it (``derived/<tenant>/<event>/``: audio
chunks, a clip's keyframes and audio tracks). Thumbnails (``thumb-*``) and the web app's face crops and voice
clips (``face-*``, ``voice-*``) are kept, as are the OCR cache, the vault and everything in the vector store: the
observations' text and vectors, memories and entities are never touched, only marked.

Two rules, applied by ``apply_retention``:

- **age**: an original of kind K stored more than ``ENGRAM_RETENTION_<K>_DAYS`` days before now is removed. The
  age is counted from when engram stored the object (its modification time in the folder, ``LastModified`` in
  S3), not from when it was captured: importing an old photo library never removes it at once.
- **cap**: while what the cap is held against (the whole data dir on the embedded default, the whole object
  store in the distributed mode) exceeds ``ENGRAM_STORAGE_CAP_BYTES``, originals are removed oldest first.

Before a picture's original goes, its thumbnail is made if ingest did not make one (items stored before
thumbnails were). The observations read from a removed original get ``original_removed_at`` (ISO time) and
``original_removed_by`` (``age`` or ``cap``) in their payload, written before the object is deleted, so the web
app and ``engram search --json`` say "removed by retention" instead of failing to read it. Originals of events
still queued or processing, and any stored less than ``MIN_AGE_S`` ago, are never removed (ingest still reads
them). A dry run plans the same and changes nothing.

Who runs it: ``engram retention`` (``api.cli.retention``); the embedded default after a batch of ``engram
ingest``, ``watch`` or ``capture`` at most every ``ENGRAM_RETENTION_INTERVAL_SECONDS`` (``apply_if_due``, from
consolidation, in the process that holds the store); beat's ``retention`` entry in the distributed mode
(``workers.retention``, on the ``consolidate`` queue: a process that may open the vector store). Files it
writes (thumbnails, its stamp) are created under the process's owner-only umask (``stores.private``).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import structlog

from engram.schemas.events import EventStatus, MediaKind
from engram.schemas.ids import EXTENSIONS
from engram.schemas.settings import Settings
from engram.schemas.storage import (
    ITEMS_SHOWN,
    KindBytes,
    RemovalReason,
    RemovedOriginal,
    RetentionReport,
    StorageUse,
)
from engram.workers.stores import models as qm
from engram.workers.stores.objects import LocalObjectStore, ObjectNotFound, S3ObjectStore
from engram.workers.stores.vectors import OBSERVATIONS
from engram.workers.thumbs import THUMB_MIME, ThumbnailError, thumb_key_of, webp_of_file

log = structlog.get_logger(__name__)

#: An original younger than this is never removed, whatever the settings (its event may still be read by ingest).
MIN_AGE_S = 600.0
#: Object keys per store request when marking observations.
MARK_BATCH = 256
#: Where the embedded default keeps the time of its last run (``apply_if_due``), in the data dir.
STAMP_FILE = "retention.json"
#: Names of derived objects that are previews, never originals (kept: thumbnails, face crops, voice clips).
PREVIEW_PREFIXES = ("thumb-", "face-", "voice-")
#: Picture suffixes whose original gets a thumbnail made before it goes (when ingest made none).
PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff")

_KIND_OF_MIME = {"image": MediaKind.screenshot, "audio": MediaKind.audio, "video": MediaKind.clip}
_TEXT_MIMES = {"application/json", "application/x-ndjson", "text/plain", "application/zip"}


@dataclass(frozen=True)
class StoredObject:
    """One object as listed: key, size in bytes, modification time (epoch seconds; None when the store cannot say:
    never removed by age)."""

    key: str
    size: int
    modified: float | None


def _kind_of_mime(mime: str) -> MediaKind | None:
    if mime in _TEXT_MIMES:
        return MediaKind.text
    return _KIND_OF_MIME.get(mime.split("/", 1)[0])


#: Extension (``schemas.ids.EXTENSIONS``) -> the kind of media it names.
_KIND_OF_EXTENSION = {ext: kind for mime, ext in reversed(list(EXTENSIONS.items())) if (kind := _kind_of_mime(mime))}


def classify(key: str) -> tuple[str, MediaKind | None]:
    """What an object key is: (``"original"``, its kind or None when its name does not say), ``("thumbnail",
    None)``, ``("ocr_cache", None)``, ``("vault", None)`` or ``("other", None)``. A derived object named neither a
    preview nor a clip segment's (``seg-``) nor an audio chunk (``chunk-``) is an original of unknown kind."""
    parts = key.split("/")
    top = parts[0]
    if top == "media" and len(parts) == 3:
        return "original", _KIND_OF_EXTENSION.get(parts[2].rpartition(".")[2].lower())
    if top == "derived" and len(parts) >= 4:
        name = parts[-1]
        if name.startswith(PREVIEW_PREFIXES):
            return "thumbnail", None
        if name.startswith("seg-"):
            return "original", MediaKind.clip
        if name.startswith("chunk-"):
            return "original", MediaKind.audio
        return "original", None
    if top == "cache":
        return "ocr_cache", None
    if top == "vault":
        return "vault", None
    return "other", None


def tenant_of(key: str) -> str | None:
    """The tenant an object key belongs to (its second part), or None for a key of no tenant."""
    parts = key.split("/")
    return parts[1] if len(parts) >= 3 else None


def list_objects(objects: Any, prefix: str = "") -> Iterator[StoredObject]:
    """Every object under ``prefix`` with its size and modification time: a folder walk (``LocalObjectStore``: a
    stat per file, no read), the bucket's listing (``S3ObjectStore``: size and LastModified come with it), else
    ``keys`` and ``size`` (time unknown). Objects being written (``.tmp-*``) are left out."""
    if isinstance(objects, LocalObjectStore):
        yield from _walk(str(objects.root / prefix) if prefix else str(objects.root), len(str(objects.root)) + 1)
        return
    if isinstance(objects, S3ObjectStore):
        if not objects.client.bucket_exists(objects.bucket):
            return
        for o in objects.client.list_objects(objects.bucket, prefix=prefix or None, recursive=True):
            modified = o.last_modified.timestamp() if o.last_modified is not None else None
            yield StoredObject(o.object_name, o.size or 0, modified)
        return
    for key in objects.keys(prefix):
        try:
            yield StoredObject(key, objects.size(key), None)
        except ObjectNotFound:
            continue


def _walk(folder: str, cut: int) -> Iterator[StoredObject]:
    """The files under ``folder`` (``os.scandir``: one stat per file), keys relative to the store's root (the
    first ``cut`` characters of a path)."""
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(entry.path, cut)
        elif not entry.name.startswith(".tmp-"):
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            yield StoredObject(entry.path[cut:].replace(os.sep, "/"), st.st_size, st.st_mtime)


def _disk_bytes(path: Path) -> int:
    """Bytes ``path`` takes on disk (allocated blocks, as ``du`` counts: the store's write-ahead logs are sparse
    files whose apparent size is hundreds of MB), at most its apparent size; 0 when missing."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return 0
    return min(st.st_size, st.st_blocks * 512)


def _tree_bytes(path: Path) -> int:
    """Bytes on disk of the files under ``path`` (``_disk_bytes``). Symlinks are not followed."""
    if path.is_symlink() or not path.is_dir():
        return _disk_bytes(path) if not path.is_symlink() else 0
    total = 0
    for folder, _, files in os.walk(path):
        total += sum(_disk_bytes(Path(folder) / name) for name in files)
    return total


def _local_files(settings: Settings, objects: Any) -> dict[str, int | None]:
    """Bytes of the data dir's files outside the object store, by what they are (store, ledger, embedding cache,
    other); store and ledger None where they are not kept there (a Qdrant server, Redis)."""
    root = settings.data_dir
    objects_root = objects.root.resolve() if isinstance(objects, LocalObjectStore) else None
    out: dict[str, int | None] = {
        "store": None if settings.qdrant_url else 0,
        "ledger": None if settings.broker_url or settings.redis_url else 0,
        "embedding_cache": 0,
        "other_files": 0,
    }
    if not root.is_dir():
        return out
    for entry in root.iterdir():
        if objects_root is not None and entry.resolve() == objects_root:
            continue
        name = entry.name
        what = (
            "store"
            if name.startswith("vectors")
            else "ledger"
            if name.startswith("ledger.sqlite")
            else "embedding_cache"
            if name == "cache"
            else "other_files"
        )
        out[what] = (out[what] or 0) + _tree_bytes(entry)
    return out


def _add(totals: dict, key: Any, size: int) -> None:
    kb = totals.setdefault(key, KindBytes())
    kb.count += 1
    kb.bytes += size


def retention_days(settings: Settings) -> dict[MediaKind, float]:
    """``ENGRAM_RETENTION_<KIND>_DAYS`` of the kinds that have one."""
    found = {k: getattr(settings, f"retention_{k.value}_days", None) for k in MediaKind}
    return {k: float(v) for k, v in found.items() if v is not None}


def configured(settings: Settings) -> bool:
    """Whether any retention rule is set (an age for some kind, or a cap): without one, retention has nothing to do."""
    return bool(retention_days(settings)) or settings.storage_cap_bytes is not None


def _capped(settings: Settings, listing: list[StoredObject], files: dict[str, int | None]) -> int:
    """What the cap is held against: the data dir (embedded object folder) or the object store."""
    objects_total = sum(o.size for o in listing)
    if settings.s3_endpoint:
        return objects_total
    return objects_total + sum(v or 0 for v in files.values())


def storage_use(rt: Any, tenant_id: str | None = None) -> StorageUse:
    """Bytes kept by ``rt`` (a ``workers.runtime.Runtime``: its settings, objects and ledger), by kind: the
    objects of ``tenant_id`` (every tenant's when None), and the data dir's shared files (store, ledger,
    embedding cache). Reads file sizes and the bucket's listing only: never the vector store."""
    listing = list(list_objects(rt.objects))
    files = _local_files(rt.settings, rt.objects)
    use = StorageUse(
        tenant_id=tenant_id,
        measured_at=datetime.now(UTC),
        cap_bytes=rt.settings.storage_cap_bytes,
        retention_days=retention_days(rt.settings),
        store=files["store"],
        ledger=files["ledger"],
        embedding_cache=files["embedding_cache"],
        other_files=files["other_files"] or 0,
    )
    use.capped_total = _capped(rt.settings, listing, files)
    kinds: dict[str, MediaKind | None] = {}
    for o in listing:
        if tenant_id is not None and tenant_of(o.key) != tenant_id:
            continue
        what, kind = classify(o.key)
        if what == "original" and (kind or o.key.startswith("derived/")):
            _add(use.originals, kind or _derived_kind(rt, o.key, kinds), o.size)
        else:
            target = {"thumbnail": use.thumbnails, "ocr_cache": use.ocr_cache, "vault": use.vault}.get(
                what, use.other_objects
            )
            target.count += 1
            target.bytes += o.size
    use.total = (
        sum(k.bytes for k in use.originals.values())
        + use.thumbnails.bytes
        + use.ocr_cache.bytes
        + use.vault.bytes
        + use.other_objects.bytes
        + sum(v or 0 for v in files.values())
    )
    return use


def _derived_kind(rt: Any, key: str, cache: dict[str, MediaKind | None] | None = None) -> MediaKind:
    """The kind of a derived object whose name does not say it: its event's, from the ledger (audio when the
    event is gone)."""
    parts = key.split("/")
    event = parts[2] if len(parts) >= 4 else ""
    if cache is not None and event in cache:
        return cache[event] or MediaKind.audio
    kind: MediaKind | None = None
    try:
        rec = rt.ledger.get(uuid.UUID(event))
        kind = rec.kind if rec is not None else None
    except ValueError:
        kind = None
    if cache is not None:
        cache[event] = kind
    return kind or MediaKind.audio


@dataclass
class _Candidate:
    obj: StoredObject
    kind: MediaKind
    reason: RemovalReason | None = None


def _protected(rt: Any) -> tuple[set[str], set[str]]:
    """Object keys and event ids of events still queued or processing (ingest may read them yet)."""
    keys, events = set(), set()
    for status in (EventStatus.queued, EventStatus.processing):
        for rec in rt.ledger.records(None, status, limit=100_000):
            keys.add(rec.object_key)
            events.add(str(rec.event_id))
    return keys, events


def plan(rt: Any, now: datetime | None = None) -> tuple[list[_Candidate], int, int, int]:
    """The originals to remove at ``now`` (default: the current UTC time), oldest first, each with its reason;
    with what the cap is held against before and after, and how many originals were kept because their event is
    unfinished. Reads the object listing and the ledger only."""
    s = rt.settings
    at = (now or datetime.now(UTC)).timestamp()
    days = retention_days(s)
    listing = list(list_objects(rt.objects))
    before = _capped(s, listing, _local_files(s, rt.objects))
    keys, events = _protected(rt)
    kinds: dict[str, MediaKind | None] = {}
    candidates: list[_Candidate] = []
    kept = 0
    for o in listing:
        what, kind = classify(o.key)
        if what != "original" or o.modified is None or at - o.modified < MIN_AGE_S:
            continue
        if kind is None and not o.key.startswith("derived/"):
            continue  # a published object of no known media type: not retention's to judge
        parts = o.key.split("/")
        if o.key in keys or (parts[0] == "derived" and parts[2] in events):
            kept += 1
            continue
        kind = kind or _derived_kind(rt, o.key, kinds)
        cand = _Candidate(o, kind)
        if kind in days and at - o.modified > days[kind] * 86400:
            cand.reason = RemovalReason.age
        candidates.append(cand)
    candidates.sort(key=lambda c: (c.obj.modified or 0.0, c.obj.key))
    after = before - sum(c.obj.size for c in candidates if c.reason)
    if s.storage_cap_bytes is not None and after > s.storage_cap_bytes:
        for c in candidates:
            if after <= s.storage_cap_bytes:
                break
            if c.reason is None:
                c.reason = RemovalReason.cap
                after -= c.obj.size
    return [c for c in candidates if c.reason], before, after, kept


def _observations_of(rt: Any, tenant: str, keys: list[str]) -> list[Any]:
    """Observations of ``tenant`` read from any of ``keys`` (payload: what marking and thumbnails need)."""
    fields = ["tenant_id", "event_id", "segment_index", "object_key", "kind", "original_removed_at"]
    found = []
    for i in range(0, len(keys), MARK_BATCH):
        flt = qm.Filter(
            must=[
                qm.FieldCondition(key="tenant_id", match=qm.MatchValue(value=tenant)),
                qm.FieldCondition(key="object_key", match=qm.MatchAny(any=keys[i : i + MARK_BATCH])),
            ]
        )
        found += rt.vectors.scroll(OBSERVATIONS, flt, with_payload=fields)
    return found


def _picture_of(payload: dict[str, Any]) -> str | None:
    """The object a thumbnail of the observation ``payload`` is made from: its original when a picture, a clip
    segment's first keyframe (``derived/<tenant>/<event>/seg-<i>-key-00.jpg``, as ingest makes it), else None."""
    original = payload.get("object_key") or ""
    if PurePosixPath(original).suffix.lower() in PICTURE_SUFFIXES:
        return original
    if payload.get("kind") == MediaKind.clip.value and payload.get("tenant_id") and payload.get("event_id"):
        segment = int(payload.get("segment_index") or 0)
        return f"derived/{payload['tenant_id']}/{payload['event_id']}/seg-{segment:05d}-key-00.jpg"
    return None


def _keep_thumbnail(rt: Any, payload: dict[str, Any]) -> bool:
    """Make the thumbnail of an observation whose picture (or clip keyframe) is about to go, when ingest made
    none; True if made."""
    key, picture = thumb_key_of(payload), _picture_of(payload)
    if key is None or picture is None or rt.objects.exists(key) or not rt.objects.exists(picture):
        return False
    try:
        with rt.objects.local_file(picture) as path:
            data = webp_of_file(path, rt.settings.max_image_pixels)
    except (ObjectNotFound, FileNotFoundError, ThumbnailError) as exc:
        log.warning("thumbnail not made before retention", key=key, error=f"{type(exc).__name__}: {exc}")
        return False
    rt.objects.put_bytes(key, data, THUMB_MIME)
    return True


def _mark(rt: Any, removed: list[_Candidate], at: datetime, report: RetentionReport) -> None:
    """Thumbnails first, then ``original_removed_at``/``_by`` on every observation read from the published
    originals in ``removed`` (tenant by tenant), before any object is deleted."""
    by_tenant: dict[str, dict[str, RemovalReason]] = {}
    for c in removed:
        if c.obj.key.startswith("media/") and (tenant := tenant_of(c.obj.key)) and c.reason:
            by_tenant.setdefault(tenant, {})[c.obj.key] = c.reason
    stamp = at.isoformat()
    for tenant, reasons in by_tenant.items():
        points = _observations_of(rt, tenant, sorted(reasons))
        payloads = {}
        for p in points:
            payload = p.payload or {}
            report.thumbnails_made += _keep_thumbnail(rt, payload)
            if not payload.get("original_removed_at"):
                payloads[str(p.id)] = {
                    "original_removed_at": stamp,
                    "original_removed_by": reasons[payload["object_key"]].value,
                }
        rt.vectors.set_payloads(OBSERVATIONS, payloads)
        report.observations_marked += len(payloads)


def apply_retention(
    rt: Any, dry_run: bool = False, now: datetime | None = None, progress: Callable[[int, int], None] | None = None
) -> RetentionReport:
    """Remove the originals ``plan`` names (see the module's docstring) and report what went; with ``dry_run``
    only report. ``progress(done, total)`` is called as objects are deleted. Opens the vector store (marking the
    observations) only when something is removed. Raises the stores' errors (StoreBusy, S3Error, OSError)."""
    t0 = time.monotonic()
    at = now or datetime.now(UTC)
    removed, before, after, kept = plan(rt, at)
    s = rt.settings
    report = RetentionReport(
        dry_run=dry_run,
        at=at,
        items_total=len(removed),
        kept_unfinished=kept,
        capped_total_before=before,
        capped_total_after=after,
        cap_bytes=s.storage_cap_bytes,
        over_cap=s.storage_cap_bytes is not None and after > s.storage_cap_bytes,
    )
    for c in removed:
        _add(report.removed, c.kind, c.obj.size)
        _add(report.by_reason, c.reason, c.obj.size)
    report.items = [
        RemovedOriginal(
            key=c.obj.key,
            kind=c.kind,
            bytes=c.obj.size,
            reason=c.reason or RemovalReason.age,
            stored_at=datetime.fromtimestamp(c.obj.modified or 0.0, UTC),
        )
        for c in removed[:ITEMS_SHOWN]
    ]
    if not dry_run and removed:
        _mark(rt, removed, at, report)
        for i, c in enumerate(removed, 1):
            rt.objects.delete(c.obj.key)
            if progress is not None:
                progress(i, len(removed))
    report.seconds = round(time.monotonic() - t0, 3)
    if removed and not dry_run:
        log.info(
            "retention removed originals",
            originals=len(removed),
            bytes=before - after,
            observations=report.observations_marked,
            thumbnails=report.thumbnails_made,
        )
    return report


def _stamp_path(settings: Settings) -> Path:
    return settings.data_dir / STAMP_FILE


def apply_if_due(rt: Any, now: datetime | None = None) -> RetentionReport | None:
    """On the embedded default: ``apply_retention`` when a rule is set and the last run (the data dir's
    ``STAMP_FILE``) is at least ``ENGRAM_RETENTION_INTERVAL_SECONDS`` old; None when not due (a stat and a
    small read). The stamp is written before the run, so processes that finish batches together run it once.
    Never raises: an error is logged and the next interval tries again."""
    s = rt.settings
    if not configured(s):
        return None
    path = _stamp_path(s)
    at = now or datetime.now(UTC)
    try:
        last = json.loads(path.read_text()).get("last_run", 0.0)
    except (OSError, ValueError, AttributeError):
        last = 0.0
    if at.timestamp() - float(last) < s.retention_interval_seconds:
        return None
    try:
        path.write_text(json.dumps({"last_run": at.timestamp()}))
        return apply_retention(rt, now=at)
    except Exception as exc:  # noqa: BLE001 (retention must never fail the batch that ran it)
        log.warning("retention failed", error=f"{type(exc).__name__}: {exc}")
        return None


def describe(report: RetentionReport) -> Iterable[str]:
    """Lines saying what a run removed (or would), per kind and reason, and where the cap stands."""
    verb = "would remove" if report.dry_run else "removed"
    if not report.items_total:
        yield "nothing to remove"
    for kind, kb in sorted(report.removed.items()):
        yield f"{verb} {kb.count} {kind.value} original{'' if kb.count == 1 else 's'}, {human_bytes(kb.bytes)}"
    for reason, kb in sorted(report.by_reason.items()):
        yield f"  by {'age' if reason is RemovalReason.age else 'the storage cap'}: {kb.count}, {human_bytes(kb.bytes)}"
    if report.cap_bytes is not None:
        yield (
            f"storage: {human_bytes(report.capped_total_after)} of a {human_bytes(report.cap_bytes)} cap"
            + (
                " (still over: the rest is text, vectors, memories and thumbnails, never removed)"
                if report.over_cap
                else ""
            )
        )


def human_bytes(n: int | float) -> str:
    """``n`` bytes in words: 0 B, 812 B, 14.2 kB, 3.1 MB, 1.20 GB (powers of 1000, as ``ByteSize`` reads 50GB)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.{2 if unit == 'GB' else 1}f} {unit}"
    return f"{int(n)} B"
