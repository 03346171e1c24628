"""Stage ``consolidate`` (beat → queue ``consolidate``): observations into typed memories.

This first version writes episodic memories (MIRIX's episodic type): a user's unconsolidated
observations, in time order, are grouped into episodes — a new episode starts after a gap of
``episode_gap_seconds``, when the conversation session changes, or after ``episode_max_observations`` —
and each gets an extractive summary (the observations closest to the episode's embedding centroid,
in time order; a centroid heuristic in the spirit of TextRank, Mihalcea & Tarau 2004) and its sources.
Consolidated observations are marked, so each is consolidated once.

An episode is indexed for hierarchical retrieval (the query worker fuses an episode's score into its
turns' scores): its dense vector is the normalised centroid of its observations' vectors (every turn counts,
where one embedding of the text would see only its first 256 word pieces) and BM25 indexes the full text of
its observations.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

import numpy as np
from qdrant_client import models as qm

from engram.schemas.events import MediaKind
from engram.schemas.memories import EpisodicMemory, MemoryType, Provenance
from engram.workers.app import app
from engram.workers.embed import embed_texts, sparse_vectors
from engram.workers.ids import memory_id
from engram.workers.metrics import MEMORIES_WRITTEN
from engram.workers.runtime import TRANSIENT_ERRORS, Runtime, log, runtime
from engram.workers.vectorstore import DENSE, OBSERVATIONS, SPARSE, UNREAD_OBSERVATION_FIELDS, tenant_filter

_EVENT_TYPES = {MediaKind.text: "conversation", MediaKind.screenshot: "screen_activity",
                MediaKind.audio: "audio", MediaKind.clip: "video"}
SUMMARY_CHARS = 240


def _time_order(rec: qm.Record) -> tuple:
    p = rec.payload
    return p["start_ts"], p.get("segment_index", 0), p.get("message_id") or "", str(rec.id)


def group_episodes(records: list[qm.Record], gap_s: float, max_obs: int) -> list[list[qm.Record]]:
    """Split observation records into episodes, each in time order, the episodes ordered by their start.

    Observations of one conversation session (``session_id``; all observations without one form one
    stream) are split by a gap over ``gap_s`` seconds and after ``max_obs`` observations; different
    sessions never share an episode, also when their times interleave (two sessions on the same date).
    Ties in time go by segment index, message id, then point id, so the same records give the same
    episodes on every run."""
    streams: dict[str | None, list[qm.Record]] = defaultdict(list)
    for rec in records:
        streams[rec.payload.get("session_id")].append(rec)
    episodes: list[list[qm.Record]] = []
    for stream in streams.values():
        cur: list[qm.Record] | None = None
        for rec in sorted(stream, key=_time_order):
            if cur is not None and rec.payload["start_ts"] - cur[-1].payload["end_ts"] <= gap_s and len(cur) < max_obs:
                cur.append(rec)
                continue
            cur = [rec]
            episodes.append(cur)
    episodes.sort(key=lambda ep: _time_order(ep[0]))
    return episodes


def extractive_summary(records: list[qm.Record], n: int) -> str:
    """The ``n`` observations nearest the episode's mean embedding, in time order, each cut to a length."""
    vecs = np.array([r.vector[DENSE] for r in records], dtype=np.float32)
    centroid = vecs.mean(axis=0)
    picked = sorted(np.argsort(-(vecs @ centroid))[:n])
    parts = []
    for i in picked:
        text = " ".join(records[i].payload["text"].split())
        parts.append(text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS].rsplit(" ", 1)[0] + "…")
    return " / ".join(parts)


def build_episode(records: list[qm.Record], summary_sentences: int) -> EpisodicMemory:
    """The episodic memory of one group of observation records (same tenant and user)."""
    first = records[0].payload
    payloads = [r.payload for r in records]
    kinds = {MediaKind(p["kind"]) for p in payloads}
    speakers = sorted({p["speaker"] for p in payloads if p.get("speaker")})
    start = datetime.fromtimestamp(min(p["start_ts"] for p in payloads), UTC)
    end = datetime.fromtimestamp(max(p["end_ts"] for p in payloads), UTC)
    details = "\n".join(p["text"] for p in payloads)[:4000]
    now = datetime.now(UTC)
    uniq = lambda xs: list(dict.fromkeys(x for x in xs if x))  # noqa: E731
    prov = Provenance(
        observation_ids=[r.id for r in records], event_ids=uniq(p["event_id"] for p in payloads),
        message_ids=uniq(p.get("message_id") for p in payloads),
        session_ids=uniq(p.get("session_id") for p in payloads),
        object_keys=uniq(p.get("object_key") for p in payloads),
        source_names=uniq(p.get("source_name") for p in payloads), start=start, end=end)
    return EpisodicMemory(
        id=memory_id(first["tenant_id"], first["user_id"], MemoryType.episodic,
                     ",".join(sorted(str(r.id) for r in records))),
        tenant_id=first["tenant_id"], user_id=first["user_id"], created_at=now, updated_at=now,
        provenance=prov, occurred_at=start, ended_at=end, actor=first["user_id"],
        event_type=_EVENT_TYPES[kinds.pop()] if len(kinds) == 1 else "activity",
        summary=extractive_summary(records, summary_sentences), details=details, entities=speakers)


def episode_vector(records: list[qm.Record]) -> np.ndarray:
    """The dense vector of an episode (384,): the unit-length centroid of its observations' vectors."""
    centroid = np.array([r.vector[DENSE] for r in records], dtype=np.float32).mean(axis=0)
    return centroid / max(float(np.linalg.norm(centroid)), 1e-12)


def source_fields(records: list[qm.Record]) -> dict[str, list[str]]:
    """What a memory's filters match on, from its source observations: ``kinds``, ``device_ids``, ``apps``
    and ``entity_ids`` (each sorted, without repeats)."""
    def values(key: str) -> list[str]:
        got = (r.payload.get(key) for r in records)
        return sorted({str(x) for v in got if v for x in (v if isinstance(v, list) else [v])})
    return {"kinds": values("kind"), "device_ids": values("device_id"), "apps": values("app"),
            "entity_ids": values("entity_ids")}


def memory_points(rt: Runtime, memories: list[EpisodicMemory], fields: list[dict[str, list[str]]],
                  dense: np.ndarray | None = None, sparse_texts: list[str | list[str]] | None = None,
                  sparse_units: list[int] | None = None) -> list[qm.PointStruct]:
    """Qdrant points of memories: payload is the memory plus ``start_ts``/``end_ts`` and ``fields`` (what its
    sources are, ``source_fields``).

    ``dense`` (n, 384) and ``sparse_texts`` default to the embedding and the BM25 vector of each memory's
    ``index_text()`` (a sparse text may be given as its parts, ``sparse.tokenize_parts``); ``sparse_units`` says
    how many observations' texts each sparse text joins."""
    texts = [m.index_text() for m in memories]
    dense = embed_texts(rt, texts) if dense is None else dense
    sparse_vecs = sparse_vectors(rt.settings, sparse_texts or texts, sparse_units)
    points = []
    for mem, vec, (si, sv), extra in zip(memories, dense, sparse_vecs, fields, strict=True):
        payload = mem.model_dump(mode="json")
        payload.update(start_ts=mem.provenance.start.timestamp(), end_ts=mem.provenance.end.timestamp(),
                       **extra)
        points.append(qm.PointStruct(id=str(mem.id), payload=payload, vector={
            DENSE: vec.tolist(), SPARSE: qm.SparseVector(indices=si, values=sv)}))
    return points


CONSOLIDATE_LOCK_TTL_S = 600.0


@app.task(name="workers.consolidate.consolidate_user", ignore_result=False, acks_late=True,
          reject_on_worker_lost=True, autoretry_for=TRANSIENT_ERRORS, retry_backoff=2, max_retries=5)
def consolidate_user(tenant_id: str, user_id: str) -> int:
    """Write episodic memories from the user's unconsolidated observations; returns how many.

    Runs under a per-(tenant, user) lock shared by all processes: two beats or two workers never
    consolidate one user at once (the second returns 0 and beat comes back on its next tick). The
    ``consolidated`` flag of each observation is the watermark: set after its memory is written, so an
    observation is consolidated once, and one that arrives late (any capture time) is never skipped.
    """
    rt = runtime()
    s = rt.settings
    with rt.ledger.try_lock(f"consolidate:{tenant_id}:{user_id}", CONSOLIDATE_LOCK_TTL_S) as got:
        if not got:
            log.info("consolidation already running", tenant=tenant_id, user=user_id)
            return 0
        records = rt.vectors.scroll(OBSERVATIONS, tenant_filter(tenant_id, user_id, consolidated=False),
                                    with_vectors=[DENSE], without=UNREAD_OBSERVATION_FIELDS)
        if not records:
            return 0
        episodes = group_episodes(records, s.episode_gap_seconds, s.episode_max_observations)
        memories = [build_episode(ep, s.summary_sentences) for ep in episodes]
        vectors = np.stack([episode_vector(ep) for ep in episodes])
        # BM25 of each episode's joined texts, given as its turns (tokens never span the line breaks, and the
        # turns' tokens are still cached from the embed stage: sparse.tokenize_parts)
        texts = [[r.payload["text"] for r in ep] for ep in episodes]
        fields = [source_fields(ep) for ep in episodes]
        rt.vectors.upsert(MemoryType.episodic.value,
                          memory_points(rt, memories, fields, vectors, texts, [len(ep) for ep in episodes]))
        MEMORIES_WRITTEN.labels(memory_type=MemoryType.episodic.value).inc(len(memories))
        from engram.workers.typed import consolidate_typed  # semantic, procedural, resource, core, vault index

        consolidate_typed(rt, tenant_id, user_id, records)
        rt.vectors.set_payload(OBSERVATIONS, [r.id for r in records], {"consolidated": True})
    log.info("consolidated", tenant=tenant_id, user=user_id, observations=len(records), episodic=len(memories))
    return len(memories)


def pending_users(rt: Runtime) -> list[tuple[str, str]]:
    """(tenant, user) pairs that have unconsolidated observations."""
    flt = qm.Filter(must=[qm.FieldCondition(key="consolidated", match=qm.MatchValue(value=False))])
    pairs: dict[tuple[str, str], int] = defaultdict(int)
    for rec in rt.vectors.scroll(OBSERVATIONS, flt):
        pairs[(rec.payload["tenant_id"], rec.payload["user_id"])] += 1
    return sorted(pairs)


@app.task(name="workers.consolidate.consolidate_due", ignore_result=False, acks_late=True)
def consolidate_due() -> int:
    """Beat entry point: start one consolidation per (tenant, user) that is due (``workers.typed.due_users``:
    enough pending observations, or idle long enough); returns how many users have pending observations
    (started now or still waiting), so a caller can loop until it is 0."""
    from engram.workers.typed import due_users

    rt = runtime()
    due, pending = due_users(rt)
    for tenant_id, user_id in due:
        consolidate_user.delay(tenant_id, user_id)
    return pending
