"""Consolidation's typed memories: semantic, procedural, resource, core and the knowledge vault's index
(MIRIX's types beside the episodic memories of ``workers.consolidate``).

Called by ``consolidate_user`` under its per-user lock with the user's pending observation records, before
their ``consolidated`` watermark is set (so a failure leaves them pending and the next run redoes them; ids
and Mem0's NOOP make the repeat harmless). Steps: the configured extractor reads the observations
(``workers.extract``; the LLM one falls back to the rules one unless ``llm_extract_required``), each draft
becomes a memory with the provenance of the observations it cites (observation, event, message ids such
as LoCoMo's ``dia_id``, sessions, time span) and a dense vector (a fact read from one sentence takes that
sentence's vector from its turn's own pass, ``embedding.sentence_vectors``; the others are embedded),
``workers.memory.dynamics.apply`` writes it (ADD / UPDATE / SUPERSEDE / NOOP), the ``human`` core block is
rewritten with the new facts (DigitalLife), and the vault entries the observations' placeholders point to are
indexed.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import numpy as np
import structlog

from engram.schemas.extraction import Draft, Extraction
from engram.schemas.ids import memory_id
from engram.schemas.memories import (
    CoreMemory,
    MemoryBase,
    MemoryType,
    ProceduralMemory,
    Provenance,
    ResourceMemory,
    SemanticMemory,
)
from engram.workers.extract import ExtractionFailed, Seen, extractor_for
from engram.workers.extract.rules import RulesExtractor
from engram.workers.memory import dynamics, vault
from engram.workers.memory.embedding import embed_texts, sentence_vectors
from engram.workers.memory.points import memory_points, provenance, source_fields
from engram.workers.metrics import MEMORIES_WRITTEN
from engram.workers.runtime import Runtime
from engram.workers.stores import models as qm

log = structlog.get_logger(__name__)


def extract(rt: Runtime, seen: list[Seen], user_id: str) -> Extraction:
    """Drafts from the configured extractor. An LLM failure falls back to the rules extractor (logged with
    the reason) or, with ``llm_extract_required``, raises ExtractionFailed."""
    try:
        return extractor_for(rt.settings).extract(seen, user_id)
    except ExtractionFailed as exc:
        if rt.settings.llm_extract_required:
            raise
        log.warning("LLM extraction failed; using the rules extractor", reason=str(exc))
        return RulesExtractor().extract(seen, user_id)


def _key(memory_type: MemoryType, draft: Draft) -> str:
    """What makes two drafts the same memory: a fact's subject, attribute and value (or its text), a
    procedure's steps, a resource's title."""
    match memory_type:
        case MemoryType.semantic:
            tail = f"{draft.attribute}={draft.value}" if draft.attribute else draft.summary
            return f"{draft.name}\x1f{tail}".lower()
        case MemoryType.procedural:
            return "\x1f".join(draft.steps).lower()
        case _:
            return draft.title.lower()


def build(
    memory_type: MemoryType, draft: Draft, records: list[qm.Record], tenant_id: str, user_id: str, now: datetime
) -> MemoryBase:
    """The memory of one draft, from the records its ``sources`` index."""
    prov = provenance(records)
    common = dict(
        id=memory_id(tenant_id, user_id, memory_type.value, _key(memory_type, draft)),
        tenant_id=tenant_id,
        user_id=user_id,
        created_at=now,
        updated_at=now,
        provenance=prov,
    )
    content = draft.model_dump(exclude={"sources"})
    match memory_type:
        case MemoryType.semantic:
            source = ", ".join(prov.message_ids[:3]) or ", ".join(prov.source_names[:3])
            return SemanticMemory(**common, **content, source=source)
        case MemoryType.procedural:
            return ProceduralMemory(**common, **content)
        case _:
            return ResourceMemory(**common, **content)


def consolidate_typed(
    rt: Runtime, tenant_id: str, user_id: str, records: list[qm.Record], now: datetime | None = None
) -> dict[str, int]:
    """Write the typed memories of a user's pending observation ``records``; returns counts per type and
    operation (e.g. ``{"semantic.ADD": 3, "core": 1, "knowledge_vault": 2}``). Raises ExtractionFailed
    (only with ``llm_extract_required``)."""
    now = now or datetime.now(UTC)
    records = sorted(records, key=lambda r: (r.payload["start_ts"], r.payload.get("segment_index", 0)))
    seen = [Seen.from_payload(r.payload, user_id) for r in records]
    found = extract(rt, seen, user_id)
    counts: Counter = Counter()
    typed: list[tuple[MemoryType, list[MemoryBase], list[dict]]] = []
    origins: list[tuple[str, str] | None] = []  # per memory, in ``typed``'s order
    for mtype in (MemoryType.semantic, MemoryType.procedural, MemoryType.resource):
        drafts = [d for d in getattr(found, mtype.value) if all(0 <= i < len(records) for i in d.sources)]
        drafts.sort(key=lambda d: records[min(d.sources)].payload["start_ts"])
        mems, fields = [], []
        for d in drafts:
            src = [records[i] for i in dict.fromkeys(d.sources)]
            mems.append(build(mtype, d, src, tenant_id, user_id, now))
            fields.append(source_fields(src))
            # a fact read from one sentence of one observation: that sentence's vector from the turn's own pass
            origins.append(
                (src[0].payload.get("text") or "", d.details)
                if mtype is MemoryType.semantic and len(src) == 1 and d.details
                else None
            )
        if mems:
            typed.append((mtype, mems, fields))
    vectors = _memory_vectors(rt, [m for _, mems, _ in typed for m in mems], origins) if typed else None
    at = 0
    for mtype, mems, fields in typed:
        for op, n in dynamics.apply(rt, mems, vectors[at : at + len(mems)], fields, now).items():
            counts[f"{mtype.value}.{op.value}"] += n
        at += len(mems)
    core = [d for d in found.core if all(0 <= i < len(records) for i in d.sources)]
    for label in dict.fromkeys(d.label for d in core):
        mine = [d for d in core if d.label == label]
        write_core(
            rt,
            tenant_id,
            user_id,
            label,
            [f for d in mine for f in d.facts],
            [records[i] for d in mine for i in d.sources],
            now,
        )
        counts["core"] += 1
    counts["knowledge_vault"] = index_vault_entries(rt, tenant_id, [r.payload.get("text", "") for r in records])
    log.info(
        "typed memories",
        tenant=tenant_id,
        user=user_id,
        extractor=rt.settings.extractor,
        **{k.replace(".", "_"): v for k, v in counts.items()},
    )
    return dict(counts)


def _memory_vectors(rt: Runtime, memories: list[MemoryBase], origins: list[tuple[str, str] | None]) -> np.ndarray:
    """Dense vectors (n, 384) of new typed memories: a fact read from one sentence of one observation takes that
    sentence's vector from the observation's own forward pass (``embedding.sentence_vectors``: a cache look-up;
    two facts of one sentence then share a vector, and ``dynamics`` never merges memories of one observation);
    a fact read from a whole turn (``extract.statements``: what its speaker says about themselves, rewritten)
    takes the turn's own embedding the same way; the rest (procedures, resources, facts whose turn has no cached
    vector) are embedded in one model call (full batches)."""
    vectors = sentence_vectors(rt, origins)
    todo = [i for i, v in enumerate(vectors) if v is None]
    if todo:
        for i, v in zip(todo, embed_texts(rt, [memories[i].index_text() for i in todo]), strict=True):
            vectors[i] = v
    return np.stack(vectors)


def write_core(
    rt: Runtime, tenant_id: str, user_id: str, label: str, facts: list[str], records: list[qm.Record], now: datetime
) -> CoreMemory:
    """Rewrite the user's core block ``label`` with ``facts`` (``dynamics.merge_block``) and upsert it; its
    provenance gains ``records``."""
    mid = memory_id(tenant_id, user_id, MemoryType.core.value, label)
    old = rt.vectors.retrieve(MemoryType.core.value, [mid])
    limit = rt.settings.core_memory_limit
    prov = provenance(list({str(r.id): r for r in records}.values()))
    created = now
    value = ""
    if old:
        payload = old[0].payload or {}
        value, created = payload.get("value", ""), datetime.fromisoformat(payload["created_at"])
        prov = Provenance.model_validate(payload.get("provenance") or {}).union(prov)
    block = CoreMemory(
        id=mid,
        tenant_id=tenant_id,
        user_id=user_id,
        created_at=created,
        updated_at=now,
        provenance=prov,
        label=label,
        value=dynamics.merge_block(value, facts, limit),
        limit=limit,
    )
    fields = {"kinds": [], "device_ids": [], "apps": [], "entity_ids": []}
    fields.update(source_fields(records))
    rt.vectors.upsert(
        MemoryType.core.value, memory_points(rt, [block], [fields], np.asarray(embed_texts(rt, [block.index_text()])))
    )
    return block


def index_vault_entries(rt: Runtime, tenant_id: str, texts: list[str]) -> int:
    """Upsert the vault entries that ``texts`` point to into the ``knowledge_vault`` collection
    (embedding and BM25 of the caption; the payload holds the caption and the ciphertext, never the secret).
    Entries missing from the object store are logged and skipped. Returns how many were indexed."""
    entries = []
    for eid in vault.referenced_entries(texts):
        try:
            entries.append(vault.get_entry(rt, tenant_id, eid))
        except vault.VaultError as exc:
            log.warning("vault entry missing", tenant=tenant_id, entry_id=str(eid), reason=str(exc))
    for e in entries:  # a memory point needs a time span
        e.provenance.start = e.provenance.start or e.created_at
        e.provenance.end = e.provenance.end or e.provenance.start
    fields = [{"kinds": [], "device_ids": [], "apps": [], "entity_ids": []} for _ in entries]
    rt.vectors.upsert(MemoryType.knowledge_vault.value, memory_points(rt, entries, fields))
    MEMORIES_WRITTEN.labels(memory_type=MemoryType.knowledge_vault.value).inc(len(entries))
    return len(entries)
