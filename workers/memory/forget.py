"""Forgetting by scope, leaving nothing behind: a time range, an application, a device, some events or some
observations and memories by id (``schemas.memory_admin.ForgetScope``); and the clean-up every forget ends with
(``leave_nothing``), a whole user's too (``workers.memory.records.forget_user``).

What goes, for the observations a scope selects (tenant-scoped; all of the criteria given must match):

1. the observations' points (their text, sentence vectors, OCR lines, words, faces, voices);
2. every memory drawn from them (``provenance.observation_ids``): one drawn only from them is deleted (its history,
   superseded versions, has the same sources and goes too); one drawn also from observations that stay is
   rewritten without the deleted ones' content and embedded again: an episodic memory is built again from the
   observations that stay (``memory.episodes.build_episode``: its id, strength and recalls kept), a typed one
   (semantic, procedural, resource, core) has the deleted observations' text, each of their lines and sentences,
   cut out of every text field and its provenance made from the sources that stay (a memory left with no text is
   deleted);
3. the vault entries only deleted observations pointed to (``[vault:<id> ...]``) and their ``knowledge_vault``
   points;
4. what the deleted observations gave the entities (samples, links, names only they gave;
   ``memory.entities.forget_observations``); an entity nothing names any more is deleted;
5. the ledger records of the events whose every observation went (their segments, content hashes and last kept
   frames); a failed or skipped event of the scope with no observation goes too;
6. objects: each touched event's published original (a chat file, a recording: it holds the deleted content even
   when other parts of it stay) unless an event or observation that stays references the same bytes; what ingest
   cut from a deleted event, or from a deleted observation's segment (keyframes, audio chunks, thumbnails); the OCR
   text cached for a deleted image, found by the digest of its pixels the observation keeps (``pixel_digests``), so
   also when the image is gone already, and by decoding the image for an observation stored without it;
7. then ``leave_nothing``: the embedding cache emptied (it is keyed by the text's hash and holds each text's
   vector), SQLite's freed pages overwritten and the files rewritten (``secure_delete``, ``VACUUM``, the
   write-ahead log truncated) for the ledger and the cache, and the embedded store's touched collections rewritten
   (``EdgeVectorStore.compact``: Qdrant Edge keeps a deleted point's bytes in its write-ahead log and pages); in
   the distributed mode each Redis server's append-only file and snapshot rewritten from its live keys
   (``rewrite_redis``: the AOF keeps every task message that carried an observation's text).

A dry run (``dry_run=True``) counts what would go and changes nothing. Events still being ingested may write
points after a forget: forget once ingestion has settled (``engram status``).
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
import uuid
from collections import defaultdict
from collections.abc import Collection, Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import structlog

from engram.schemas.errors import MediaError
from engram.schemas.events import EventStatus
from engram.schemas.memories import MEMORY_MODELS, MemoryType
from engram.schemas.memory_admin import ForgetScope, ForgetScopeReport
from engram.schemas.observations import Observation
from engram.workers.codecs import load_image, pixels_sha256
from engram.workers.memory import vault
from engram.workers.memory.embedding import (
    clear_text_memos,
    dense_vectors,
    observation_sparse_vectors,
    sentence_spans,
)
from engram.workers.memory.entities import forget_observations
from engram.workers.memory.episodes import _time_order, build_episode, episode_vector
from engram.workers.memory.points import memory_points, provenance, source_fields
from engram.workers.runtime import Runtime
from engram.workers.stores import models as qm
from engram.workers.stores.objects import ObjectNotFound
from engram.workers.stores.vectors import (
    COLLECTIONS,
    DENSE,
    ENTITIES,
    OBSERVATIONS,
    SENTENCES,
    SPARSE,
    collection_for,
    tenant_filter,
)

log = structlog.get_logger(__name__)

#: The memory collections whose memories are drawn from observations (the vault's index is handled with its entries).
DRAWN = (MemoryType.episodic, MemoryType.semantic, MemoryType.procedural, MemoryType.resource, MemoryType.core)
#: Payload fields a memory point carries beside its model's (``memory.points.memory_points``).
POINT_FIELDS = ("start_ts", "end_ts", "kinds", "device_ids", "apps", "entity_ids")
#: Lines and sentences shorter than this are not cut out of a rewritten memory on their own (a "Hi" of the deleted
#: message may be a word of a message that stays); the whole text always is.
MIN_CUT = 12
#: Kinds whose derived objects are per segment (``seg-<n>-...``, ``thumb-<n>.webp``): a chat file's are not.
_SEGMENTED = ("screenshot", "audio", "clip")
#: How long a forget waits for each Redis server to rewrite its append-only file and snapshot, seconds.
REDIS_REWRITE_TIMEOUT_S = 120.0
_IMAGE_SUFFIXES = (".png", ".jpg", ".webp", ".gif", ".bmp", ".tif")
#: A clip keyframe's object name (``workers.ingest``: ``seg-<segment>-key-<k>.jpg``).
_KEYFRAME = re.compile(r"seg-\d+-key-\d+\.")


def scope_filter(tenant_id: str, scope: ForgetScope) -> qm.Filter:
    """The observations a scope selects: tenant (and user), ``start_ts`` in ``[since, until)``, the app, the
    device, the events and the ids, every criterion given."""
    conds = list(tenant_filter(tenant_id, scope.user_id).must or [])
    if scope.since or scope.until:
        conds.append(
            qm.FieldCondition(
                key="start_ts",
                range=qm.Range(
                    gte=scope.since.timestamp() if scope.since else None,
                    lt=scope.until.timestamp() if scope.until else None,
                ),
            )
        )
    if scope.app:
        conds.append(qm.FieldCondition(key="app", match=qm.MatchValue(value=scope.app)))
    if scope.device_id:
        conds.append(qm.FieldCondition(key="device_id", match=qm.MatchValue(value=scope.device_id)))
    if scope.event_ids:
        conds.append(qm.FieldCondition(key="event_id", match=qm.MatchAny(any=[str(e) for e in scope.event_ids])))
    if scope.memory_ids:
        conds.append(qm.HasIdCondition(has_id=[str(i) for i in scope.memory_ids]))
    return qm.Filter(must=conds)


def forget(rt: Runtime, tenant_id: str, scope: ForgetScope, dry_run: bool = False) -> ForgetScopeReport:
    """Forget what ``scope`` selects of the tenant (see the module docstring); with ``dry_run`` only count it.
    Returns what was (would be) deleted and rewritten."""
    report = ForgetScopeReport(tenant_id=tenant_id, scope=scope, dry_run=dry_run)
    doomed = rt.vectors.scroll(OBSERVATIONS, scope_filter(tenant_id, scope))
    gone = {str(o.id) for o in doomed}
    # memories named by id (not observations): deleted with their history, never rewritten
    direct: dict[str, list[str]] = defaultdict(list)
    for mid in {str(i) for i in scope.memory_ids} - gone:
        for mtype in MemoryType:
            coll = collection_for(mtype)
            if mtype is not MemoryType.observation and any(
                (p.payload or {}).get("tenant_id") == tenant_id and _user_ok(p, scope)
                for p in rt.vectors.retrieve(coll, [mid])
            ):
                direct[coll] += [mid, *_history(rt, tenant_id, coll, mid)]
    report.observations = len(doomed)
    deleted: dict[str, list[str]] = defaultdict(list, {c: list(dict.fromkeys(ids)) for c, ids in direct.items()})
    if doomed:
        deleted[OBSERVATIONS] = sorted(gone)
    rewrites = _memories_of(rt, tenant_id, doomed, gone, deleted)
    if neighbours := _neighbours(rt, tenant_id, doomed, gone):
        rewrites[OBSERVATIONS] = neighbours
    events = _events_of(rt, tenant_id, scope, doomed)
    report.points_deleted = {c: len(ids) for c, ids in deleted.items() if ids}
    report.memories_rewritten = {c: len(r) for c, r in rewrites.items() if r}
    report.event_ids = sorted(uuid.UUID(e) for e in events["whole"])
    if dry_run:
        report.objects_deleted, report.objects_kept = _objects(rt, tenant_id, doomed, events, dry_run=True)
        return report

    for coll, points in rewrites.items():
        if points:
            rt.vectors.upsert(coll, points)
    for coll, ids in deleted.items():
        if ids:
            rt.vectors.delete(coll, list[uuid.UUID | str](ids))
    vault_keys = _forget_vault(rt, tenant_id, doomed, report)
    if doomed:
        report.entities_deleted = forget_observations(rt, tenant_id, doomed)
    # objects before the ledger rows that name them: a forget interrupted in between, run again, finds them
    objects_deleted, report.objects_kept = _objects(rt, tenant_id, doomed, events)
    rt.ledger.forget_events(tenant_id, [uuid.UUID(e) for e in events["whole"]])
    report.objects_deleted = [*vault_keys, *objects_deleted]
    touched = [
        c
        for c in COLLECTIONS
        if deleted.get(c)
        or rewrites.get(c)
        or (c == ENTITIES and doomed)
        or (c == MemoryType.knowledge_vault.value and vault_keys)
    ]
    report.compacted = leave_nothing(rt, touched)
    log.info(
        "forgotten",
        tenant=tenant_id,
        observations=report.observations,
        points=sum(report.points_deleted.values()),
        rewritten=sum(report.memories_rewritten.values()),
        events=len(report.event_ids),
        objects=len(report.objects_deleted),
        entities=report.entities_deleted,
    )
    return report


def _user_ok(point: qm.Record, scope: ForgetScope) -> bool:
    return scope.user_id is None or (point.payload or {}).get("user_id") == scope.user_id


def _history(rt: Runtime, tenant_id: str, coll: str, memory_id: str) -> list[str]:
    """The ids of the versions ``memory_id`` superseded, and theirs (``superseded_by`` chains)."""
    out: list[str] = []
    todo = [memory_id]
    while todo:
        older = rt.vectors.scroll(coll, tenant_filter(tenant_id, superseded_by=todo.pop()), with_payload=False)
        for p in older:
            if str(p.id) not in out and str(p.id) != memory_id:
                out.append(str(p.id))
                todo.append(str(p.id))
    return out


def _sources(payload: dict) -> list[str]:
    return [str(i) for i in ((payload.get("provenance") or {}).get("observation_ids") or [])]


def _memories_of(
    rt: Runtime, tenant_id: str, doomed: list[qm.Record], gone: set[str], deleted: dict[str, list[str]]
) -> dict[str, list[qm.PointStruct]]:
    """Sort the memories drawn from the ``doomed`` observations: those with every source gone are added to
    ``deleted``; the others come back as the points that rewrite them (per collection)."""
    rewrites: dict[str, list[qm.PointStruct]] = defaultdict(list)
    if not doomed:
        return rewrites
    users = sorted({(o.payload or {}).get("user_id") or "" for o in doomed})
    cuts = _cuts(doomed)
    for mtype in DRAWN:
        coll = mtype.value
        for user in users:
            for mem in rt.vectors.scroll(coll, tenant_filter(tenant_id, user or None)):
                sources = _sources(mem.payload or {})
                if not gone.intersection(sources):
                    continue
                staying = [s for s in sources if s not in gone]
                point = _rewrite(rt, mtype, mem, staying, cuts) if staying else None
                if point is None:
                    deleted[coll].append(str(mem.id))
                else:
                    rewrites[coll].append(point)
    return rewrites


def _neighbours(rt: Runtime, tenant_id: str, doomed: list[qm.Record], gone: set[str]) -> list[qm.PointStruct]:
    """The observations that stay in the deleted chat turns' sessions and quote one of them as context
    (``context_before``/``context_after``: contextual indexing, ``memory.embedding``), as points that rewrite them:
    the deleted turns taken out of their context, their contextual vector, sentence rows and BM25F vector
    computed again from what stays."""
    texts = {str((o.payload or {}).get("text") or "") for o in doomed} - {""}
    sessions = {((o.payload or {}).get("user_id"), sid) for o in doomed if (sid := (o.payload or {}).get("session_id"))}
    payloads = []
    for user, sid in sorted(sessions, key=str):
        for o in rt.vectors.scroll(OBSERVATIONS, tenant_filter(tenant_id, user, session_id=sid)):
            p = dict(o.payload or {})
            if str(o.id) in gone or not texts.intersection([*p.get("context_before", []), *p.get("context_after", [])]):
                continue
            p["context_before"] = [t for t in p.get("context_before", []) if t not in texts]
            p["context_after"] = [t for t in p.get("context_after", []) if t not in texts]
            payloads.append(p)
    if not payloads:
        return []
    observations = [
        Observation.model_validate({k: v for k, v in p.items() if k in Observation.model_fields}) for p in payloads
    ]
    dense, multi = dense_vectors(rt, observations)
    sparse = observation_sparse_vectors(rt.settings, observations)
    return [
        qm.PointStruct(
            id=str(o.id),
            payload=p,
            vector={
                DENSE: d.tolist(),
                SENTENCES: m.tolist(),
                SPARSE: qm.SparseVector(indices=list(si), values=list(sv)),
            },
        )
        for o, p, d, m, (si, sv) in zip(observations, payloads, dense, multi, sparse, strict=True)
    ]


def _cuts(doomed: list[qm.Record]) -> list[str]:
    """What is cut out of a rewritten typed memory: each deleted observation's text (whitespace folded too), and
    its lines and sentences of ``MIN_CUT`` characters or more, longest first."""
    out: set[str] = set()
    for o in doomed:
        text = str((o.payload or {}).get("text") or "")
        if not text.strip():
            continue
        out.add(text)
        out.add(" ".join(text.split()))
        out.update(ln.strip() for ln in text.splitlines() if len(ln.strip()) >= MIN_CUT)
        out.update(text[a:b].strip() for a, b in sentence_spans(text) if len(text[a:b].strip()) >= MIN_CUT)
    return sorted((c for c in out if c), key=len, reverse=True)


def _scrub(value: Any, cuts: list[str]) -> Any:
    """``value`` (a payload's field: text, list or dict) with every ``cuts`` string taken out of its texts."""
    if isinstance(value, str):
        for cut in cuts:
            if cut in value:
                value = value.replace(cut, "")
        if value != value.strip() or "\n\n" in value or " / / " in value:
            value = re.sub(r"\n{2,}", "\n", value).replace(" / / ", " / ").strip(" /\n")
        return value
    if isinstance(value, list):
        return [s for v in value if (s := _scrub(v, cuts)) != ""]
    if isinstance(value, dict):
        return {k: _scrub(v, cuts) for k, v in value.items()}
    return value


def _rewrite(
    rt: Runtime, mtype: MemoryType, mem: qm.Record, staying: list[str], cuts: list[str]
) -> qm.PointStruct | None:
    """The point that rewrites memory ``mem`` from its ``staying`` sources, embedded again; None when nothing of
    it is left (deleted instead)."""
    payload = dict(mem.payload or {})
    records = rt.vectors.retrieve(OBSERVATIONS, staying, with_vectors=[DENSE])
    if not records:
        return None
    model = MEMORY_MODELS[mtype]
    fields = {k: v for k, v in payload.items() if k in model.model_fields}
    keep = {
        k: fields[k]
        for k in (
            "id",
            "created_at",
            "strength",
            "recalls",
            "last_recalled_at",
            "archived",
            "superseded_by",
            "valid_to",
        )
        if k in fields
    }
    if mtype is MemoryType.episodic:
        records.sort(key=_time_order)
        old = model.model_validate(fields)
        episode = build_episode(records, rt.settings.summary_sentences).model_copy(
            update={**{k: getattr(old, k) for k in keep}, "updated_at": _now()}
        )
        return memory_points(
            rt,
            [episode],
            [source_fields(records)],
            episode_vector(records)[None, :],
            [[(r.payload or {})["text"] for r in records]],
            [len(records)],
        )[0]
    scrubbed = {
        k: (v if k in ("id", "tenant_id", "user_id", "provenance") or k in keep else _scrub(v, cuts))
        for k, v in fields.items()
    }
    scrubbed["provenance"] = provenance(records).model_dump(mode="json")
    scrubbed["updated_at"] = _now().isoformat()
    try:
        new: Any = model.model_validate(scrubbed)  # memory_points takes any memory type (typed.write_core too)
    except ValueError:  # a required text left empty
        return None
    if not new.index_text().strip():
        return None
    extra = {"kinds": [], "device_ids": [], "apps": [], "entity_ids": [], **source_fields(records)}
    return memory_points(rt, [new], [extra])[0]


def _now() -> datetime:
    return datetime.now(UTC)


def _events_of(rt: Runtime, tenant_id: str, scope: ForgetScope, doomed: list[qm.Record]) -> dict[str, set[str]]:
    """The events the deleted observations came from, as ``whole`` (none of their observations stays; with the
    scope's failed or skipped events, which have none) and ``partial`` (some stay), and the object keys of the
    whole ones as the ledger has them (``originals``, read before their records go)."""
    by_event: dict[str, int] = defaultdict(int)
    for o in doomed:
        if eid := (o.payload or {}).get("event_id"):
            by_event[str(eid)] += 1
    whole: set[str] = set()
    partial: set[str] = set()
    for eid, n in by_event.items():
        (whole if rt.vectors.count(OBSERVATIONS, tenant_filter(tenant_id, event_id=eid)) <= n else partial).add(eid)
    whole |= _empty_events(rt, tenant_id, scope)
    originals = {r.object_key for e in whole if (r := rt.ledger.get(uuid.UUID(e))) is not None}
    return {"whole": whole, "partial": partial, "originals": originals}


def _empty_events(rt: Runtime, tenant_id: str, scope: ForgetScope) -> set[str]:
    """The scope's events that hold no observation (failed, skipped), by the ledger: named by id, or of the
    scope's device (and user) published in its time range. An app scope cannot tell them (the ledger has no app)."""
    if scope.app or scope.memory_ids:
        return set()
    records = (
        rt.ledger.user_events(tenant_id, scope.user_id)
        if scope.user_id
        else rt.ledger.records(tenant_id, None, 1_000_000)
    )
    named = {str(e) for e in scope.event_ids}
    out = set()
    for r in records:
        if r.status not in (EventStatus.failed, EventStatus.skipped) or r.observations:
            continue
        if named and str(r.event_id) not in named:
            continue
        if scope.device_id and r.device_id != scope.device_id:
            continue
        at = r.created_at.timestamp() if r.created_at else None
        if (scope.since or scope.until) and (
            at is None
            or (scope.since and at < scope.since.timestamp())
            or (scope.until and at >= scope.until.timestamp())
        ):
            continue
        out.add(str(r.event_id))
    return out


def _objects(
    rt: Runtime, tenant_id: str, doomed: list[qm.Record], events: dict[str, set[str]], dry_run: bool = False
) -> tuple[list[str], list[str]]:
    """Delete (or with ``dry_run`` list) the objects of the deleted observations and events (see the module
    docstring, 6); returns (deleted, kept)."""
    keys: list[str] = []
    for eid in sorted(events["whole"]):
        keys += rt.objects.keys(f"derived/{tenant_id}/{eid}/")
    for o in doomed:
        p = o.payload or {}
        eid = str(p.get("event_id") or "")
        if eid not in events["partial"]:
            continue
        names = {f"thumb-{o.id}.webp"}
        if p.get("kind") in _SEGMENTED:
            seg = f"{int(p.get('segment_index') or 0):05d}"
            names |= {
                k.rsplit("/", 1)[-1]
                for k in rt.objects.keys(f"derived/{tenant_id}/{eid}/")
                if f"-{seg}-" in k.rsplit("/", 1)[-1] or k.endswith(f"-{seg}.webp") or k.endswith(f"-{seg}.wav")
            }
        keys += [k for n in sorted(names) if rt.objects.exists(k := f"derived/{tenant_id}/{eid}/{n}")]
    touched = events["whole"] | events["partial"]
    originals = sorted(
        {str(p["object_key"]) for o in doomed if (p := o.payload or {}).get("object_key")} | events["originals"]
    )
    kept = []
    for key in originals:
        if not key.startswith(f"media/{tenant_id}/"):
            continue  # not this tenant's content-addressed media: never ours to delete
        others = rt.vectors.count(
            OBSERVATIONS,
            qm.Filter(
                must=list(tenant_filter(tenant_id, object_key=key).must or []),
                must_not=[qm.FieldCondition(key="event_id", match=qm.MatchAny(any=sorted(touched)))] if touched else [],
            ),
        )
        refs = rt.ledger.object_references(tenant_id, key)  # the touched events' own records not counted
        refs -= sum(1 for e in touched if (r := rt.ledger.get(uuid.UUID(e))) and r.object_key == key)
        if others or refs > 0:
            kept.append(key)
        elif rt.objects.exists(key):
            keys.append(key)
    keys = list(dict.fromkeys(keys))
    if dry_run:
        return keys, kept
    return delete_objects(rt, tenant_id, keys, pixel_digests(tenant_id, (o.payload or {} for o in doomed), kept)), kept


def _forget_vault(rt: Runtime, tenant_id: str, doomed: list[qm.Record], report: ForgetScopeReport) -> list[str]:
    """Delete the vault entries only the deleted observations pointed to, and their ``knowledge_vault`` points;
    returns the entries' object keys."""
    named = {str(v) for v in vault.referenced_entries([json.dumps(o.payload or {}) for o in doomed])}
    if not named:
        return []
    users = sorted({(o.payload or {}).get("user_id") or "" for o in doomed})
    for user in users:
        for o in rt.vectors.scroll(OBSERVATIONS, tenant_filter(tenant_id, user or None)):
            named -= {str(v) for v in vault.referenced_entries([json.dumps(o.payload or {})])}
            if not named:
                return []
    coll = MemoryType.knowledge_vault.value
    here = [str(p.id) for p in rt.vectors.retrieve(coll, sorted(named), with_payload=False)]
    if here:
        rt.vectors.delete(coll, list[uuid.UUID | str](here))
        report.points_deleted[coll] = report.points_deleted.get(coll, 0) + len(here)
    return vault.delete_entries(rt, tenant_id, sorted(named))


def pixel_digests(tenant_id: str, payloads: Iterable[dict[str, Any]], kept: Collection[str] = ()) -> dict[str, str]:
    """The pixel digests (``Observation.pixel_digests``: the OCR cache's keys) the deleted observations'
    ``payloads`` name, by object key: the tenant's images (``media/``, ``derived/``) but the ``kept`` objects,
    whether the image is still stored or not (retention may have removed an original)."""
    mine = (f"media/{tenant_id}/", f"derived/{tenant_id}/")
    return {
        key: str(digest)
        for p in payloads
        for key, digest in (p.get("pixel_digests") or {}).items()
        if key.startswith(mine) and key not in kept
    }


def _read_by_ocr(key: str) -> bool:
    """Whether perceive may have read the object ``key`` with OCR: an image published as such (``media/``) or a
    clip's keyframe (``derived/.../seg-<n>-key-<k>.jpg``); not a thumbnail or a face crop."""
    name = key.rsplit("/", 1)[-1]
    return key.lower().endswith(_IMAGE_SUFFIXES) and (key.startswith("media/") or _KEYFRAME.match(name) is not None)


def delete_objects(rt: Runtime, tenant_id: str, keys: list[str], digests: dict[str, str] | None = None) -> list[str]:
    """Delete ``keys`` and the OCR text cached (by any OCR model) for the images among them and for the images of
    ``digests`` (``pixel_digests``: pixel sha256 by object key, read from the deleted observations); returns every
    key deleted. An image among ``keys`` whose digest is not given (its observation was stored before observations
    kept their digests, or no observation was kept of it: a blank frame) is decoded to find it."""
    known = digests or {}
    found = set(known.values())
    for key in keys:
        if key in known or not _read_by_ocr(key):
            continue
        try:
            found.add(pixels_sha256(np.asarray(load_image(rt.objects.get_bytes(key), rt.settings.max_image_pixels))))
        except (ObjectNotFound, MediaError, OSError, ValueError, MemoryError):
            pass  # not decodable (a broken or bomb file), so nothing was cached for it
    cached = (
        [k for k in rt.objects.keys(f"cache/{tenant_id}/ocr/") if k.rsplit("/", 1)[-1][:-5] in found] if found else []
    )
    for key in [*keys, *cached]:
        rt.objects.delete(key)
    return [*keys, *cached]


# --- leaving nothing behind ---------------------------------------------------------------------------------------


def leave_nothing(rt: Runtime, collections: list[str]) -> list[str]:
    """After a deletion: empty the embedding cache, overwrite and drop SQLite's freed pages in the ledger and the
    cache, rewrite the embedded store's ``collections`` so none of their files holds a deleted point's bytes
    (``VectorStore.compact``; a Qdrant server compacts itself), and in the distributed mode have each Redis server
    rewrite its append-only file and snapshot from its live keys (``rewrite_redis``). Returns the collections
    compacted."""
    clear_text_memos()
    cache = getattr(rt, "embedding_cache", None)
    if cache is not None and getattr(cache, "path", None) is not None and cache.path.exists():
        vacuum_sqlite(cache.path, "DELETE FROM emb")
    ledger_path = getattr(rt.ledger, "path", None)
    if ledger_path is not None and ledger_path.exists():
        vacuum_sqlite(ledger_path)
    compacted = []
    if collections:
        if hasattr(rt.vectors, "flush"):
            rt.vectors.flush()
        compacted = sorted(rt.vectors.compact(collections))
    for url in redis_servers(rt):
        rewrite_redis(url)
    return compacted


def redis_servers(rt: Runtime) -> list[str]:
    """One URL per Redis server the distributed mode writes to (the ledger's, the broker's, the result backend's;
    several databases of one server counted once); none on the embedded default."""
    servers: dict[tuple, str] = {}
    for url in (getattr(rt.ledger, "url", None), rt.settings.broker_url, rt.settings.result_backend):
        if url and url.startswith(("redis://", "rediss://", "unix://")):
            parts = urlsplit(url)
            servers.setdefault(
                (parts.scheme, parts.hostname, parts.port, parts.path if parts.scheme == "unix" else ""), url
            )
    return list(servers.values())


def rewrite_redis(url: str, timeout: float = REDIS_REWRITE_TIMEOUT_S) -> list[str]:
    """Leave no deleted value in the files of the Redis server at ``url``: its append-only file keeps every write
    (a task message carrying an observation's text, a ledger row, a result), deleted keys included, until it is
    rewritten from the live keys (``BGREWRITEAOF``), and an RDB snapshot keeps the keys of its time until the next
    one (``BGSAVE``). Each is started when the server persists that way and waited for (``timeout`` seconds).
    Returns what was rewritten (``"aof"``, ``"rdb"``). A server that refuses the commands (a managed Redis may) is
    logged and left as it is: its provider's persistence then holds the history (docs/forget.md)."""
    import redis  # the distributed mode's client: the embedded default has no Redis

    r: Any = redis.Redis.from_url(url, decode_responses=True, socket_timeout=timeout)  # sync client: not awaited
    done = []
    try:
        info = r.info("persistence")
        try:
            saves = bool((r.config_get("save") or {}).get("save"))
        except redis.ResponseError:  # CONFIG renamed away: a snapshot may exist, so take a new one
            saves = True
        for kind, on, start in (("aof", bool(info.get("aof_enabled")), r.bgrewriteaof), ("rdb", saves, r.bgsave)):
            if on:
                _rewrite_once(r, kind, start, time.monotonic() + timeout)
                done.append(kind)
    except (redis.RedisError, TimeoutError, RuntimeError) as exc:  # the deletion is done: said, not raised
        log.warning("redis files not rewritten after a forget", error=f"{type(exc).__name__}: {exc}")
    finally:
        r.close()
    return done


def _rewrite_once(r: Any, kind: str, start: Any, deadline: float) -> None:
    """Start a background rewrite of ``kind`` (``aof``: ``aof_rewrites``/``aof_rewrite_in_progress``; ``rdb``:
    ``rdb_saves``/``rdb_bgsave_in_progress``) once none is running (one that runs began before the deletion) and
    wait until it has finished; raises TimeoutError past ``deadline`` (monotonic seconds), RuntimeError when Redis
    reports it failed."""
    count, busy = (
        ("aof_rewrites", ("aof_rewrite_in_progress", "aof_rewrite_scheduled"))
        if kind == "aof"
        else ("rdb_saves", ("rdb_bgsave_in_progress",))
    )
    import redis  # the distributed mode's client: the embedded default has no Redis

    status = "aof_last_bgrewrite_status" if kind == "aof" else "rdb_last_bgsave_status"
    info = _settled(r, busy, deadline)
    before = int(info.get(count, 0))
    try:
        start()
    except redis.ResponseError as exc:  # "already in progress": another client started one meanwhile
        if "progress" not in str(exc):
            raise
        _settled(r, busy, deadline)
        start()
    while True:
        info = _settled(r, busy, deadline)
        if int(info.get(count, 0)) > before:
            break
        time.sleep(0.05)
    if info.get(status) != "ok":
        raise RuntimeError(f"redis {kind} rewrite failed: {info.get(status)}")


def _settled(r: Any, busy: tuple[str, ...], deadline: float) -> dict:
    """Redis's INFO persistence once none of ``busy`` is set; TimeoutError past ``deadline``."""
    while True:
        info = r.info("persistence")
        if not any(int(info.get(b, 0)) for b in busy):
            return info
        if time.monotonic() > deadline:
            raise TimeoutError(f"redis still busy ({', '.join(busy)})")
        time.sleep(0.05)


def vacuum_sqlite(path: Any, statement: str | None = None) -> None:
    """Run ``statement`` (if any) on the SQLite file ``path``, then leave no freed page holding old bytes:
    ``secure_delete`` (freed content overwritten with zeros), ``VACUUM`` (the file rebuilt from its live rows)
    and the write-ahead log checkpointed and truncated to zero bytes."""
    db = sqlite3.connect(str(path), timeout=60, isolation_level=None)
    try:
        db.execute("PRAGMA busy_timeout=60000")
        db.execute("PRAGMA secure_delete=ON")
        if statement:
            db.execute(statement)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
