"""Episodic memories (MIRIX's episodic type), written by the stage ``consolidate``: a user's unconsolidated
observations, in time order, are grouped into episodes — a new episode starts after a gap of
``episode_gap_seconds``, when the conversation session changes, or after ``episode_max_observations`` —
and each gets an extractive summary (the observations closest to the episode's embedding centroid,
in time order; a centroid heuristic in the spirit of TextRank, Mihalcea & Tarau 2004) and its sources.
An episode is indexed for hierarchical retrieval (the query worker fuses an episode's score into its
turns' scores): its dense vector is the normalised centroid of its observations' vectors (every turn counts,
where one embedding of the text would see only its first 256 word pieces) and BM25 indexes the full text of
its observations.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import UTC, datetime

import numpy as np

from engram.schemas.events import MediaKind
from engram.schemas.ids import memory_id
from engram.schemas.memories import EpisodicMemory, MemoryType
from engram.workers.memory.points import provenance
from engram.workers.runtime import Runtime
from engram.workers.stores import models as qm
from engram.workers.stores.vectors import DENSE, OBSERVATIONS

_EVENT_TYPES = {
    MediaKind.text: "conversation",
    MediaKind.screenshot: "screen_activity",
    MediaKind.audio: "audio",
    MediaKind.clip: "video",
}


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
    payloads = [r.payload or {} for r in records]  # observation records always carry their payload
    first = payloads[0]
    kinds = {MediaKind(p["kind"]) for p in payloads}
    speakers = sorted({p["speaker"] for p in payloads if p.get("speaker")})
    details = "\n".join(p["text"] for p in payloads)[:4000]
    now = datetime.now(UTC)
    prov = provenance(records)
    return EpisodicMemory(
        id=memory_id(
            first["tenant_id"], first["user_id"], MemoryType.episodic, ",".join(sorted(str(r.id) for r in records))
        ),
        tenant_id=first["tenant_id"],
        user_id=first["user_id"],
        created_at=now,
        updated_at=now,
        provenance=prov,
        occurred_at=prov.start,
        ended_at=prov.end,
        actor=first["user_id"],
        event_type=_EVENT_TYPES[kinds.pop()] if len(kinds) == 1 else "activity",
        summary=extractive_summary(records, summary_sentences),
        details=details,
        entities=speakers,
    )


def episode_vector(records: list[qm.Record]) -> np.ndarray:
    """The dense vector of an episode (384,): the unit-length centroid of its observations' vectors."""
    centroid = np.array([r.vector[DENSE] for r in records], dtype=np.float32).mean(axis=0)
    return centroid / max(float(np.linalg.norm(centroid)), 1e-12)


def pending(rt: Runtime) -> dict[tuple[str, str], tuple[int, float]]:
    """Every (tenant, user) with unconsolidated observations: how many, and when the newest was stored (epoch s).
    One scan of the observations' ``consolidated`` flag, reading two payload fields."""
    flt = qm.Filter(must=[qm.FieldCondition(key="consolidated", match=qm.MatchValue(value=False))])
    found: dict[tuple[str, str], tuple[int, float]] = {}
    for rec in rt.vectors.scroll(OBSERVATIONS, flt, with_payload=["tenant_id", "user_id", "stored_at"]):
        pair = (rec.payload["tenant_id"], rec.payload["user_id"])
        count, newest = found.get(pair, (0, 0.0))
        found[pair] = (count + 1, max(newest, float(rec.payload.get("stored_at") or 0.0)))
    return found


def pending_users(rt: Runtime) -> list[tuple[str, str]]:
    """(tenant, user) pairs that have unconsolidated observations, sorted."""
    return sorted(pending(rt))


def due_users(rt: Runtime, now: float | None = None) -> tuple[list[tuple[str, str]], int]:
    """Which (tenant, user) pairs beat should consolidate now, and how many pairs have pending observations.

    MIRIX consolidates after a fixed number of new messages (20); a user is due when ``consolidate_min_
    observations`` observations are pending, or when the newest of them was stored ``consolidate_idle_seconds``
    ago (default: the beat interval), so a quiet user's last few observations are not left waiting."""
    s = rt.settings
    now = time.time() if now is None else now
    idle = s.consolidate_idle_seconds or s.consolidate_interval_seconds
    found = pending(rt)
    due = sorted(
        pair
        for pair, (count, newest) in found.items()
        if count >= s.consolidate_min_observations or now - newest >= idle
    )
    return due, len(found)
