"""Stage ``query`` (queue ``query``): hybrid search over observations and memories.

Under the request's filters, one dense ranking across all collections searched (MiniLM cosine: one model,
comparable scores) and one sparse ranking per collection (BM25 through Qdrant's IDF modifier, IDF counted
over the searching tenant's and user's own points) are taken; all rankings are fused with reciprocal rank
fusion (Cormack, Clarke & Büttcher, 2009: score = Σ 1 / (k + rank)). A memory's sources are listed most
relevant first: in the order their observations ranked for this query, the others after.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

from qdrant_client import models as qm

from schemas.memories import MemoryType
from schemas.search import SearchHit, SearchRequest, SearchResponse
from workers import sparse
from workers.app import app
from workers.embed import embed_texts
from workers.runtime import Runtime, runtime
from workers.vectorstore import collection_for, tenant_filter


def rrf(rankings: list[list[str]], k: int) -> dict[str, float]:
    """Reciprocal rank fusion of ranked id lists (rank 1 first): {id: Σ 1/(k + rank)}."""
    scores: dict[str, float] = defaultdict(float)
    for ranking in rankings:
        for rank, pid in enumerate(ranking, start=1):
            scores[pid] += 1.0 / (k + rank)
    return scores


def build_filter(req: SearchRequest, memory_type: MemoryType) -> qm.Filter:
    """Tenant (always), user, time range and media kind conditions for one collection."""
    flt = tenant_filter(req.tenant_id, req.user_id)
    conds = list(flt.must)
    if req.time_from:
        conds.append(qm.FieldCondition(key="end_ts", range=qm.Range(gte=req.time_from.timestamp())))
    if req.time_to:
        conds.append(qm.FieldCondition(key="start_ts", range=qm.Range(lte=req.time_to.timestamp())))
    if req.kinds:
        key = "kind" if memory_type is MemoryType.observation else "kinds"
        conds.append(qm.FieldCondition(key=key, match=qm.MatchAny(any=[k.value for k in req.kinds])))
    return qm.Filter(must=conds)


def _hit(memory_type: MemoryType, point: qm.ScoredPoint, score: float) -> SearchHit:
    p = point.payload or {}
    if memory_type is MemoryType.observation:
        return SearchHit(
            id=uuid.UUID(str(point.id)), memory_type=memory_type, score=score, text=p.get("text", ""),
            time=p.get("captured_at"), kind=p.get("kind"), user_id=p.get("user_id"),
            source_name=p.get("source_name"), object_key=p.get("object_key"), start_s=p.get("start_s"),
            end_s=p.get("end_s"), event_ids=[p["event_id"]], observation_ids=[uuid.UUID(str(point.id))],
            message_ids=[p["message_id"]] if p.get("message_id") else [],
            session_ids=[p["session_id"]] if p.get("session_id") else [])
    prov = p.get("provenance") or {}
    names = prov.get("source_names") or []
    return SearchHit(
        id=uuid.UUID(str(point.id)), memory_type=memory_type, score=score,
        text=p.get("summary") or p.get("caption") or p.get("value") or p.get("title") or "",
        time=prov.get("start"), time_end=prov.get("end"), user_id=p.get("user_id"),
        source_name=", ".join(names[:3]) + (" …" if len(names) > 3 else "") or None,
        event_ids=prov.get("event_ids", []), observation_ids=prov.get("observation_ids", []),
        message_ids=prov.get("message_ids", []), session_ids=prov.get("session_ids", []))


def _order_sources(hit: SearchHit, obs_rank: dict[str, int], msg_of: dict[str, str | None]) -> None:
    order = sorted(range(len(hit.observation_ids)),
                   key=lambda i: (obs_rank.get(str(hit.observation_ids[i]), 1 << 30), i))
    hit.observation_ids = [hit.observation_ids[i] for i in order]
    ranked_msgs = [m for o in hit.observation_ids if (m := msg_of.get(str(o)))]
    hit.message_ids = list(dict.fromkeys([*ranked_msgs, *hit.message_ids]))


def search(rt: Runtime, req: SearchRequest) -> SearchResponse:
    """Fused hybrid search; hits in descending RRF score, at most ``req.limit``."""
    t0 = time.perf_counter()
    dense = embed_texts(rt, [req.query])[0].tolist()
    sparse_q = sparse.query_vector(req.query)
    depth = max(50, req.limit * 5)
    rankings: list[list[str]] = []
    points: dict[str, tuple[MemoryType, qm.ScoredPoint]] = {}
    obs_rank: dict[str, int] = {}
    dense_all: list[qm.ScoredPoint] = []
    for mtype in dict.fromkeys(req.memory_types):
        if mtype is MemoryType.knowledge_vault:
            continue  # never searched by default; captions only, through its own call (later issue)
        dense_pts, sparse_pts = rt.vectors.search(collection_for(mtype), dense, sparse_q,
                                                  build_filter(req, mtype), depth,
                                                  idf_corpus=tenant_filter(req.tenant_id, req.user_id))
        dense_all.extend(dense_pts)
        rankings.append([str(p.id) for p in sparse_pts])
        for p in (*dense_pts, *sparse_pts):
            points.setdefault(str(p.id), (mtype, p))
    # cosine scores of one model are comparable across collections: one dense ranking; BM25 scores depend
    # on each collection's IDF statistics: one sparse ranking per collection.
    rankings.append([str(p.id) for p in sorted(dense_all, key=lambda p: -p.score)[:depth]])
    fused = rrf(rankings, rt.settings.rrf_k)
    msg_of = {pid: (pt.payload or {}).get("message_id") for pid, (mt, pt) in points.items()
              if mt is MemoryType.observation}
    for rank, (pid, _) in enumerate(sorted(((p, s) for p, s in fused.items() if p in msg_of),
                                           key=lambda x: -x[1])):
        obs_rank[pid] = rank
    # ties go to observations, the more specific evidence
    order = sorted(fused.items(), key=lambda x: (-x[1], points[x[0]][0] is not MemoryType.observation))
    hits: list[SearchHit] = []
    shown: set[uuid.UUID] = set()
    for pid, score in order:
        if len(hits) >= req.limit:
            break
        mtype, point = points[pid]
        hit = _hit(mtype, point, score)
        if mtype is not MemoryType.observation:
            sources = set(hit.observation_ids)
            if sources and (sources <= shown or (len(sources) == 1 and str(next(iter(sources))) in fused)):
                continue  # a memory that only repeats observations shown (or about to be) adds nothing
            _order_sources(hit, obs_rank, msg_of)
        shown.update(hit.observation_ids)
        hits.append(hit)
    return SearchResponse(query=req.query, hits=hits, took_ms=(time.perf_counter() - t0) * 1000)


@app.task(name="workers.query.search", ignore_result=False, pydantic=True, acks_late=True)
def search_task(request: SearchRequest) -> SearchResponse:
    """The query worker's search."""
    return search(runtime(), request)
