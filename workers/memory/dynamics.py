"""Memory dynamics: what a new memory does to the ones already stored, and how memories fade.

- **Don't store what is known** (MetaGPT's ``find_news``; Mem0's ADD / UPDATE / DELETE / NOOP, Chhikara et
  al., 2025): a new memory whose id already exists (same key: a URL, a fact's subject and value) or whose
  dense vector is within ``memory_merge_similarity`` (cosine) of an active memory of the same user and
  type UPDATEs it (its sources join the old one's provenance and the repeat counts as a recall), or is a
  NOOP when it brings no new source (a consolidation run twice). A fact that gives a new value to the same
  subject and single-valued attribute ("lives in Paris", then "moved to Berlin") SUPERSEDES the old one:
  Mem0's DELETE, but the old memory stays, with ``superseded_by`` and ``valid_to``, as history.
- **Strength and decay** (MemoryBank, Zhong et al., 2024, after Ebbinghaus): retention = exp(-t / S), t the
  days since the memory was last recalled, S = ``memory_stability_days`` x (1 + recalls), so each recall
  makes it fade more slowly. ``reinforce`` records a recall; ``retention`` / ``decayed_score`` give ranking
  the current value; ``archive_decayed`` (beat) archives memories below ``memory_archive_retention``, never
  deleting them. Core memory and the knowledge vault do not decay.
- **Core memory** (DigitalLife's recursively rewritten user profile; MIRIX's core blocks): ``merge_block``
  folds new ``attribute: value`` facts into a block, newest last, and trims it to its size limit.

Searches should skip superseded and archived memories by default: ``active_filter`` gives the conditions
(the query worker adds them to its filters; ``history`` reads everything back).
"""

from __future__ import annotations

import math
import uuid
from collections import Counter
from datetime import UTC, datetime
from enum import StrEnum

import numpy as np
import structlog

from engram.schemas.memories import MEMORY_TYPES, MemoryBase, MemoryType, Provenance, ResourceMemory, SemanticMemory
from engram.workers.memory.points import memory_points
from engram.workers.metrics import MEMORIES_WRITTEN
from engram.workers.runtime import Runtime
from engram.workers.stores import models as qm
from engram.workers.stores.vectors import DENSE, tenant_filter
from engram.workers.text.values import said_in

log = structlog.get_logger(__name__)

#: Memory types that decay and get archived (core memory and the vault are kept as they are).
DECAYING = (MemoryType.episodic, MemoryType.semantic, MemoryType.procedural, MemoryType.resource)
_DECAYING_VALUES = frozenset(t.value for t in DECAYING)  # read per candidate memory by every search
SECONDS_PER_DAY = 86400.0


class Op(StrEnum):
    """What a new memory did (Mem0's operations; DELETE is SUPERSEDE here: the old one is kept)."""

    add = "ADD"
    update = "UPDATE"
    supersede = "SUPERSEDE"
    noop = "NOOP"


# decay -----------------------------------------------------------------------------------------------


def _ts(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value)).timestamp()


def retention(payload: dict, now: datetime, stability_days: float = 30.0) -> float:
    """MemoryBank's retention in (0, 1] of a memory payload at ``now``: exp(-t / S), t in days since
    ``last_recalled_at`` (else ``updated_at``, else ``created_at``), S = ``stability_days`` x (1 + recalls)."""
    since = _ts(payload.get("last_recalled_at")) or _ts(payload.get("updated_at")) or _ts(payload.get("created_at"))
    if since is None:
        return 1.0
    days = max(0.0, now.timestamp() - since) / SECONDS_PER_DAY
    return math.exp(-days / (stability_days * (1 + int(payload.get("recalls") or 0))))


def decayed_score(payload: dict, now: datetime, stability_days: float = 30.0, floor: float = 0.5) -> float:
    """The factor a ranking multiplies a memory's relevance by: ``floor + (1 - floor) * retention`` in
    [floor, 1], so a faded memory ranks lower but relevance still decides (a fresh one keeps its score).
    Observations and memories that never decay (core, vault) get 1."""
    if payload.get("memory_type") not in _DECAYING_VALUES:
        return 1.0
    return floor + (1.0 - floor) * retention(payload, now, stability_days)


def reinforce(rt: Runtime, tenant_id: str, memory_ids: list[uuid.UUID | str], now: datetime | None = None) -> int:
    """Record a recall of each memory (MemoryBank: its stability grows, its clock restarts; an archived one is
    active again). Only the tenant's memories are touched; unknown ids are ignored. Returns how many.

    The query worker calls this with the ids of the memories it returned (``workers.memory.search.search``)."""
    now = now or datetime.now(UTC)
    ids = [str(i) for i in memory_ids]
    done = 0
    for mtype in MEMORY_TYPES:
        found = {
            rec.id: rec.payload or {}
            for rec in rt.vectors.retrieve(mtype.value, ids)
            if (rec.payload or {}).get("tenant_id") == tenant_id
        }
        rt.vectors.set_payloads(
            mtype.value,
            {
                pid: {  # one batch request per type
                    "recalls": int(p.get("recalls") or 0) + 1,
                    "last_recalled_at": now.isoformat(),
                    "strength": 1.0,
                    "archived": False,
                }
                for pid, p in found.items()
            },
        )
        done += len(found)
    return done


def archive_decayed(rt: Runtime, now: datetime | None = None) -> dict[str, int]:
    """Archive (``archived=True``, ``strength`` = its retention) every active memory of a decaying type whose
    retention is below ``memory_archive_retention``; returns how many per type. Nothing is deleted."""
    now = now or datetime.now(UTC)
    s = rt.settings
    out: dict[str, int] = {}
    for mtype in DECAYING:
        flt = qm.Filter(must_not=[qm.FieldCondition(key="archived", match=qm.MatchValue(value=True))])
        faded = [
            (rec.id, r)
            for rec in rt.vectors.scroll(mtype.value, flt)
            if (r := retention(rec.payload or {}, now, s.memory_stability_days)) < s.memory_archive_retention
        ]
        rt.vectors.set_payloads(mtype.value, {pid: {"archived": True, "strength": round(r, 4)} for pid, r in faded})
        out[mtype.value] = len(faded)
    if any(out.values()):
        log.info("memories archived", **out)
    return out


def active_filter(flt: qm.Filter | None = None) -> qm.Filter:
    """``flt`` (default: everything) narrowed to active memories: not superseded, not archived."""
    flt = flt or qm.Filter()
    current = qm.IsEmptyCondition(is_empty=qm.PayloadField(key="superseded_by"))
    archived = qm.FieldCondition(key="archived", match=qm.MatchValue(value=True))
    return qm.Filter(must=[*(flt.must or []), current], must_not=[*(flt.must_not or []), archived], should=flt.should)


def history(
    rt: Runtime,
    tenant_id: str,
    user_id: str,
    memory_type: MemoryType,
    name: str | None = None,
    attribute: str | None = None,
) -> list[dict]:
    """Every memory of a type for one user, superseded and archived ones included, oldest first
    (optionally one subject's ``name`` and ``attribute``: how a fact changed)."""
    must = {k: v for k, v in (("name", name), ("attribute", attribute)) if v is not None}
    recs = rt.vectors.scroll(memory_type.value, tenant_filter(tenant_id, user_id, **must))
    return sorted((r.payload or {} for r in recs), key=lambda p: (p.get("start_ts") or 0, p.get("created_at") or ""))


# ADD / UPDATE / SUPERSEDE / NOOP ---------------------------------------------------------------------


def _merge_provenance(old: dict, new: MemoryBase) -> tuple[dict, bool]:
    """``old`` provenance (a payload dict) with ``new``'s sources added (JSON), and whether a source was new."""
    before = Provenance.model_validate(old or {})
    merged = before.union(new.provenance)
    return merged.model_dump(mode="json"), len(merged.observation_ids) > len(before.observation_ids)


def _update_fields(payload: dict, new: MemoryBase, now: datetime) -> dict | None:
    """The payload changes that fold ``new`` into an existing memory, or None when it adds no source (NOOP)."""
    prov, grew = _merge_provenance(payload.get("provenance") or {}, new)
    if not grew:
        return None
    fields = {
        "provenance": prov,
        "recalls": int(payload.get("recalls") or 0) + 1,
        "strength": 1.0,
        "last_recalled_at": now.isoformat(),
        "updated_at": now.isoformat(),
        "archived": False,
        "start_ts": _ts(prov["start"]),
        "end_ts": _ts(prov["end"]),
    }
    if isinstance(new, ResourceMemory):  # a page seen again: keep what it shows now
        fields.update(summary=new.summary, content=new.content)
    return fields


def apply(
    rt: Runtime, memories: list[MemoryBase], vectors: np.ndarray, fields: list[dict], now: datetime | None = None
) -> Counter:
    """Write new memories of one type and user (in time order) against what is stored, with Mem0's operations
    (see the module docstring). ``vectors`` (n, 384) are their dense vectors; ``fields`` their source fields
    (``workers.memory.points.source_fields``). Returns a Counter of ``Op``."""
    if not memories:
        return Counter()
    now = now or datetime.now(UTC)
    s = rt.settings
    mtype = memories[0].memory_type
    coll = mtype.value
    ops: Counter = Counter()
    pending = _Pending(vectors.shape[1])  # ADDs of this run, written at the end
    existing = {str(r.id): r.payload or {} for r in rt.vectors.retrieve(coll, [m.id for m in memories])}
    base = tenant_filter(memories[0].tenant_id, memories[0].user_id)
    neighbours = _nearest_stored(rt, coll, vectors, active_filter(base))
    for mem, vec, extra, hits in zip(memories, vectors, fields, neighbours, strict=True):
        # 1. the same key: an exact repeat
        same = pending.by_id.get(mem.id)
        if same is not None:
            ops[_fold(same, mem)] += 1
            continue
        if str(mem.id) in existing:
            upd = _update_fields(existing[str(mem.id)], mem, now)
            if upd:
                rt.vectors.set_payload(coll, [mem.id], upd)
                existing[str(mem.id)].update(upd)
            ops[Op.update if upd else Op.noop] += 1
            continue
        # 2. a fact on the same subject and single-valued attribute
        if isinstance(mem, SemanticMemory) and mem.attribute:
            if _supersede(rt, mem, pending, base, now, ops):
                pending.add(mem, vec, extra)
                ops[Op.add] += 1
                continue
        # 3. a near-duplicate by meaning
        near = pending.nearest(mem, vec, s.memory_merge_similarity)
        if near is not None:
            ops[_fold(near, mem)] += 1
            continue
        hit = next(
            (
                h
                for h in hits
                if h.score >= s.memory_merge_similarity
                and not _share_source((h.payload or {}).get("provenance", {}).get("observation_ids", []), mem)
            ),
            None,
        )
        if hit is not None:
            upd = _update_fields(hit.payload or {}, mem, now)
            if upd:
                rt.vectors.set_payload(coll, [hit.id], upd)
            ops[Op.update if upd else Op.noop] += 1
            continue
        pending.add(mem, vec, extra)
        ops[Op.add] += 1
    if pending.entries:
        mems = [p[0] for p in pending.entries]
        rt.vectors.upsert(coll, memory_points(rt, mems, [p[1] for p in pending.entries], pending.matrix()))
        MEMORIES_WRITTEN.labels(memory_type=coll).inc(len(mems))
    return ops


def _nearest_stored(
    rt: Runtime, collection: str, vectors: np.ndarray, flt: qm.Filter, limit: int = 3
) -> list[list[qm.ScoredPoint]]:
    """The ``limit`` stored points nearest each vector (dense cosine, under ``flt``), in one batch request."""
    return rt.vectors.nearest_batch(collection, DENSE, (v.tolist() for v in vectors), flt, limit)


def _fold(into: MemoryBase, new: MemoryBase) -> Op:
    """Fold ``new`` into a memory of this run not yet written: its sources join, the repeat is a recall."""
    merged = into.provenance.union(new.provenance)
    if len(merged.observation_ids) == len(into.provenance.observation_ids):
        return Op.noop
    into.provenance, into.recalls = merged, into.recalls + 1
    return Op.update


def _share_source(observation_ids: list, mem: MemoryBase) -> bool:
    """Two memories the extractor found in one observation are two things, however alike their texts."""
    return bool({str(o) for o in observation_ids} & {str(o) for o in mem.provenance.observation_ids})


class _Pending:
    """The memories one ``apply`` adds, in arrival order, not yet written: ``entries`` (memory, source fields),
    ``by_id`` and their vectors as the rows of one matrix (``matrix()``), so a new memory's cosine to all of them is one
    matrix-vector product instead of a Python loop (``dim``: the dense vectors' length, 384 for MiniLM)."""

    def __init__(self, dim: int) -> None:
        self.entries: list[tuple[MemoryBase, dict]] = []
        self.by_id: dict[uuid.UUID, MemoryBase] = {}
        self._rows = np.empty((16, dim), dtype=np.float32)

    def add(self, mem: MemoryBase, vec: np.ndarray, extra: dict) -> None:
        """Keep ``mem`` with its vector (dim,) and source fields; the matrix doubles when full."""
        n = len(self.entries)
        if n == len(self._rows):
            self._rows = np.concatenate([self._rows, np.empty_like(self._rows)])
        self._rows[n] = vec
        self.entries.append((mem, extra))
        self.by_id[mem.id] = mem

    def matrix(self) -> np.ndarray:
        """The kept vectors, (n, dim), in arrival order."""
        return self._rows[: len(self.entries)]

    def nearest(self, new: MemoryBase, vec: np.ndarray, threshold: float) -> MemoryBase | None:
        """The kept memory most similar to ``new`` (dense cosine of unit vectors ≥ ``threshold``; on a tie the
        later one) that is not superseded and shares no source observation with it, or None."""
        if not self.entries:
            return None
        sims = self.matrix() @ vec
        above = np.flatnonzero(sims >= threshold)
        for i in sorted(above.tolist(), key=lambda j: (-float(sims[j]), -j)):
            mem = self.entries[i][0]
            if mem.superseded_by is None and not _share_source(mem.provenance.observation_ids, new):
                return mem
        return None


def _supersede(
    rt: Runtime, mem: SemanticMemory, pending: _Pending, base: qm.Filter, now: datetime, ops: Counter
) -> bool:
    """Resolve ``mem`` against the active facts with its subject and attribute: True when it is to be added
    (alone, or superseding older values; or as history, already superseded by a newer value it arrived after)."""
    key = (mem.name.lower(), mem.attribute)
    start = mem.provenance.start or now
    stored = [
        r
        for r in rt.vectors.scroll(
            mem.memory_type.value,
            active_filter(
                qm.Filter(
                    must=[*base.must, qm.FieldCondition(key="attribute", match=qm.MatchValue(value=mem.attribute))]
                )
            ),
        )
        if str(r.payload.get("name", "")).lower() == key[0]
    ]
    olds = [
        (p[0].id, p[0].value, p[0].provenance.start, p[0])
        for p in pending.entries
        if isinstance(p[0], SemanticMemory)
        and (p[0].name.lower(), p[0].attribute) == key
        and p[0].superseded_by is None
    ]
    olds += [
        (uuid.UUID(str(r.id)), r.payload.get("value", ""), r.payload.get("provenance", {}).get("start"), None)
        for r in stored
    ]
    if not olds:
        return True
    for old_id, value, old_start, obj in olds:
        if str(value).lower() == mem.value.lower():
            continue  # the same value from another source: left to the similarity step
        old_start_ts = _ts(old_start) or 0.0
        if start.timestamp() >= old_start_ts:  # the new value is the later one: the old one ends now
            if obj is not None:
                obj.superseded_by, obj.valid_to = mem.id, start
            else:
                rt.vectors.set_payload(
                    mem.memory_type.value, [old_id], {"superseded_by": str(mem.id), "valid_to": start.isoformat()}
                )
            ops[Op.supersede] += 1
        else:  # an older value seen late: stored as history, already superseded
            mem.superseded_by = old_id
            mem.valid_to = datetime.fromtimestamp(old_start_ts, UTC)
    return not any(str(v).lower() == mem.value.lower() for _, v, _, _ in olds)


# core memory -----------------------------------------------------------------------------------------


#: Core-block labels that hold several values, comma separated: what the user likes or is into, their family, pets,
#: what they work on, study or are allergic to (``workers.extract.rules``: ``PROFILE_PATTERNS`` and the likes and
#: interest patterns)
MULTI_VALUED = {"likes", "pets", "interest", "family", "works on", "student", "allergic to"}


def merge_block(value: str, facts: list[str], limit: int) -> str:
    """DigitalLife's recursive profile rewrite, made deterministic: ``value`` is a block of lines, each
    ``label: value`` or free text; each new fact replaces the line with its label (or its identical text)
    and moves to the end (newest last); labels of ``MULTI_VALUED`` (likes, pets, family, ...) keep all their
    values, comma separated, a value said in full by another one kept once ("son" and "son Kyle": "son Kyle").
    Over ``limit`` characters, multi-valued lines keep their newest five values, then the oldest lines are
    dropped until the block fits."""
    lines: dict[str, str] = {}
    for line in [*value.splitlines(), *facts]:
        line = " ".join(line.split())
        if not line:
            continue
        label, sep, val = line.partition(": ")
        key = label.lower() if sep else line.lower()
        if sep and key in MULTI_VALUED and key in lines:
            vals = lines.pop(key).partition(": ")[2].split(", ")
            low = val.lower()
            if low in (v.lower() for v in vals) or not any(said_in(low, v.lower()) for v in vals):
                vals = [v for v in vals if not said_in(v.lower(), low)] + [val]  # newest last
            # else: a longer value says it already ("son Kyle" then "son"), and stays
            line = f"{label}: {', '.join(vals)}"
        lines.pop(key, None)
        lines[key] = line
    out = list(lines.values())
    if len("\n".join(out)) > limit:
        out = [
            f"{ln.partition(': ')[0]}: {', '.join(ln.partition(': ')[2].split(', ')[-5:])}" if ": " in ln else ln
            for ln in out
        ]
    while out and len("\n".join(out)) > limit:
        out.pop(0)
    return "\n".join(out)
