"""Hybrid, hierarchical search over observations and memories (served by the stage ``query``, queue ``query``).

1. Under the request's filters, each collection is ranked twice — dense (MiniLM cosine) and sparse (BM25
   through Qdrant's IDF modifier, IDF counted over the searching tenant's and user's own points) — and the
   two rankings are fused by weighted reciprocal rank fusion (Cormack, Clarke & Büttcher, 2009: Σ w / (k +
   rank)), the dense ranking weighing ``DENSE_WEIGHT``: with sentence vectors (an observation's dense score is
   its best sentence's, ``workers.embed``) a lone strong dense match — a fact told in passing, a preference
   never named in the question's words — is worth more than an average rank in both lists. Observations are
   indexed with their neighbouring turns (contextual indexing, BM25F, ``workers.embed``).
2. Hierarchical retrieval: a memory scores as a whole (an episode is the centroid and full text of its
   turns), and each observation adds ``MEMORY_PRIOR`` times the best score of the memories built from it,
   as a session/document prior fused into passage scores (Callan 1994's passage + document evidence; the
   session-then-turn retrieval of LoCoMo and LongMemEval systems). The turns of the best memories join the
   candidates even when neither ranking reached them.
3. Entities named in the query (a person entity's name, e.g. a chat speaker) boost the observations linked
   to them by ``ENTITY_BOOST``: a soft entity filter. As in self-querying retrieval (the query split into a
   structured filter and the content to match), those names are left out of the dense query
   (``DENSE_WITHOUT_NAMES``): "What digestive issue did Sam have?" embeds as its content, not as a question
   about Sam, which would draw every turn of Sam's; BM25 keeps the whole query.
4. Time expressions in the query ("last Tuesday", "in May 2023"; ``workers.text.timeexpr``) are resolved against
   the request's ``reference_time`` (default now) into a range; points whose time span overlaps it gain
   ``TIME_BOOST``: a soft time filter, because the time a message was written is often not the time of the
   event it tells (measured on LoCoMo with bench/retrieval.py). ``time_from``/``time_to`` stay hard filters.
5. Memory dynamics (MemoryBank; ``workers.memory.dynamics``): superseded and archived memories are left out
   (``active_filter``) unless ``include_history``; a memory's fused score is multiplied by its
   ``decayed_score`` (retention since its last recall) before it enters the prior; the memories returned
   are reinforced (one recall each) unless ``reinforce`` is off.
6. Neighbouring context: with ``context_turns`` = n, each observation hit carries the n turns before and
   after it in its session (or the segments of its event) as ``SearchHit.context``, for ``ask``'s LLM.
   Neighbours do not change the ranking: adding 0.1 or 0.3 of the best adjacent turn's score to a turn
   lowered LoCoMo R@10 (0.772 → 0.769 / 0.767, conversations 0-3), since turns are already indexed with
   their neighbours' text (contextual indexing).
7. Bursts (``workers.memory.bursts``): with ``collapse`` (default), the near-duplicate screenshots of one window
   close in time are one hit, its best-ranked frame, carrying the others' ids (``burst_ids``, ``burst_size``);
   ``limit`` counts collapsed hits, filled up after collapsing.
8. Each hit says why it was found (``SearchHit.matched``: its dense and BM25 ranks, the query words its text
   holds, the boosts it got), so a front door can show "words: budget, review" instead of a fused score; an
   empty response says why (``SearchResponse.empty``: no data for the tenant, an unknown user, no match).

Hits come back in descending score: turns first where their own evidence and their memory agree, memories
as evidence pointers whose sources are listed most relevant first (the order their observations ranked
for this query, the others after). A memory that only repeats observations already shown is left out.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from engram.schemas.memories import MemoryType
from engram.schemas.search import ContextTurn, Matched, SearchHit, SearchRequest, SearchResponse, TimeRange
from engram.workers.memory.bursts import collapse
from engram.workers.memory.dynamics import active_filter, decayed_score, reinforce
from engram.workers.memory.embedding import embed_query
from engram.workers.memory.entities import entity_names
from engram.workers.memory.holdings import why_empty
from engram.workers.runtime import Runtime
from engram.workers.stores import models as qm
from engram.workers.stores.vectors import OBSERVATIONS, collection_for, tenant_filter
from engram.workers.text import sparse
from engram.workers.text.timeexpr import resolve

#: The payload fields ranking reads of a memory (decay, time boost, memory prior, its sources): read for the memory
#: candidates of both rankings at once (they are ranked without payload), the hits returned read whole.
#: Observation candidates are ranked with no payload at all: the engine tells which of them a boost applies to
#: by filter (``_boosted``), and the message ids of a returned memory's sources are read for those only
#: (reading the payloads of ~400 candidate turns was most of a search's time in the engine).
RANKING_FIELDS = [
    "memory_type",
    "last_recalled_at",
    "updated_at",
    "created_at",
    "recalls",
    "start_ts",
    "end_ts",
    "provenance.observation_ids",
    "entity_ids",
    "message_id",
    "session_id",
    "event_id",
    "corrected_from",  # a user's correction is never left out as a repeat of its sources (``_pick``)
]


DENSE_WEIGHT = 1.5  # weight of the dense ranking in the fusion (BM25's: 1)


MEMORY_PRIOR = 0.5  # weight of a memory's fused score in the scores of the observations it was built from


MEMORY_EXPAND = 5  # the sources of this many best memories join the candidate observations


ENTITY_BOOST = 0.01  # added to an observation linked to an entity the query names (≈ 0.6 / k at k = 60)


MIN_DEPTH = 200  # candidates per ranking, at least


TIME_BOOST = 0.01  # added to a point whose time span overlaps the query's resolved time expression


DENSE_WITHOUT_NAMES = True


TIME_AS_FILTER = False  # True: the resolved range is a hard filter instead (loses LoCoMo evidence: bench/retrieval.py)


def rrf(rankings: list[list[str]], k: int, weights: list[float] | None = None) -> dict[str, float]:
    """Weighted reciprocal rank fusion of ranked id lists (rank 1 first): {id: Σ w / (k + rank)}, each
    ranking's weight ``w`` from ``weights`` (default 1 each). Raises ValueError when the counts differ."""
    weights = [1.0] * len(rankings) if weights is None else weights
    if len(weights) != len(rankings):
        raise ValueError("one weight per ranking")
    scores: dict[str, float] = defaultdict(float)
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, pid in enumerate(ranking, start=1):
            scores[pid] += weight / (k + rank)
    return scores


def build_filter(req: SearchRequest, memory_type: MemoryType) -> qm.Filter:
    """Tenant (always), user, time range, media kind, device, app and entity conditions for one collection,
    and for memories (unless ``req.include_history``) only active ones (``workers.memory.dynamics.active_filter``).

    Memories match a device, app or entity through their sources' fields copied at consolidation
    (``device_ids``, ``apps``, ``entities``); observations through their own (``device_id``, ``app``,
    ``entity_ids``)."""
    flt = tenant_filter(req.tenant_id, req.user_id)
    conds = list(flt.must)
    obs = memory_type is MemoryType.observation
    if req.time_from:
        conds.append(qm.FieldCondition(key="end_ts", range=qm.Range(gte=req.time_from.timestamp())))
    if req.time_to:
        conds.append(qm.FieldCondition(key="start_ts", range=qm.Range(lte=req.time_to.timestamp())))
    for values, obs_key, mem_key in (
        (req.kinds and [k.value for k in req.kinds], "kind", "kinds"),
        (req.devices, "device_id", "device_ids"),
        (req.apps, "app", "apps"),
        (req.entities, "entity_ids", "entity_ids"),
    ):
        if values:
            conds.append(qm.FieldCondition(key=obs_key if obs else mem_key, match=qm.MatchAny(any=list(values))))
    flt = qm.Filter(must=conds)
    return flt if obs or req.include_history else active_filter(flt)


def _in_range(payload: dict, span: TimeRange) -> bool:
    start, end = payload.get("start_ts"), payload.get("end_ts")
    if start is None:
        return False
    return start < span.end.timestamp() and (end if end is not None else start) >= span.start.timestamp()


def _in_range_filter(span: TimeRange) -> qm.Filter:
    """``_in_range`` as a filter: starts before the span ends, and ends (or, without an end, starts) in or after
    its start."""
    start, end = span.start.timestamp(), span.end.timestamp()
    return qm.Filter(
        must=[qm.FieldCondition(key="start_ts", range=qm.Range(lt=end))],
        should=[
            qm.FieldCondition(key="end_ts", range=qm.Range(gte=start)),
            qm.Filter(
                must=[
                    qm.IsEmptyCondition(is_empty=qm.PayloadField(key="end_ts")),
                    qm.FieldCondition(key="start_ts", range=qm.Range(gte=start)),
                ]
            ),
        ],
    )


def _boosted(
    rt: Runtime, req: SearchRequest, ids: set[str], named: set[str], span: TimeRange | None
) -> tuple[set[str], set[str]]:
    """(the observations of ``ids`` linked to an entity of ``named``, those in ``span``), asked of the engine by
    filter: no payload is read."""
    out: list[set[str]] = []
    for wanted, cond in (
        (named, lambda: qm.FieldCondition(key="entity_ids", match=qm.MatchAny(any=sorted(named)))),
        (span, lambda: _in_range_filter(span)),
    ):
        if not wanted or not ids:
            out.append(set())
            continue
        flt = tenant_filter(req.tenant_id, req.user_id)
        flt.must += [qm.HasIdCondition(has_id=sorted(ids)), cond()]
        out.append({str(r.id) for r in rt.vectors.scroll(OBSERVATIONS, flt, with_payload=False)})
    return out[0], out[1]


def _name_pattern(name: str) -> re.Pattern:
    return re.compile(rf"(?<!\w){re.escape(name)}(?:'s)?(?!\w)", re.IGNORECASE)


def named_entities(rt: Runtime, tenant_id: str, query: str) -> tuple[set[str], str]:
    """(ids of the tenant's entities whose name appears in ``query`` as whole words, case ignored; the query
    with those names taken out). Reads only the entities' names (``workers.memory.entities.entity_names``)."""
    ids, rest = set(), query
    for eid, names in entity_names(rt, tenant_id):
        for name in names:
            if name and (pat := _name_pattern(name)).search(query):
                ids.add(eid)
                rest = pat.sub(" ", rest)
    return ids, " ".join(rest.split())


def _hit(memory_type: MemoryType, point: qm.ScoredPoint | qm.Record, score: float) -> SearchHit:
    p = point.payload or {}
    if memory_type is MemoryType.observation:
        return SearchHit(
            id=uuid.UUID(str(point.id)),
            memory_type=memory_type,
            score=score,
            text=p.get("text", ""),
            time=p.get("captured_at"),
            kind=p.get("kind"),
            user_id=p.get("user_id"),
            source_name=p.get("source_name"),
            object_key=p.get("object_key"),
            original_removed_at=p.get("original_removed_at"),
            start_s=p.get("start_s"),
            end_s=p.get("end_s"),
            event_ids=[p["event_id"]],
            observation_ids=[uuid.UUID(str(point.id))],
            message_ids=[p["message_id"]] if p.get("message_id") else [],
            session_ids=[p["session_id"]] if p.get("session_id") else [],
        )
    prov = p.get("provenance") or {}
    names = prov.get("source_names") or []
    return SearchHit(
        id=uuid.UUID(str(point.id)),
        memory_type=memory_type,
        score=score,
        text=p.get("summary") or p.get("caption") or p.get("value") or p.get("title") or "",
        time=prov.get("start"),
        time_end=prov.get("end"),
        user_id=p.get("user_id"),
        source_name=", ".join(names[:3]) + (" …" if len(names) > 3 else "") or None,
        event_ids=prov.get("event_ids", []),
        observation_ids=prov.get("observation_ids", []),
        message_ids=prov.get("message_ids", []),
        session_ids=prov.get("session_ids", []),
    )


def _order_sources(hit: SearchHit, obs_rank: dict[str, int], msg_of: dict[str, str | None]) -> None:
    order = sorted(
        range(len(hit.observation_ids)), key=lambda i: (obs_rank.get(str(hit.observation_ids[i]), 1 << 30), i)
    )
    hit.observation_ids = [hit.observation_ids[i] for i in order]
    ranked_msgs = [m for o in hit.observation_ids if (m := msg_of.get(str(o)))]
    hit.message_ids = list(dict.fromkeys([*ranked_msgs, *hit.message_ids]))


def search(rt: Runtime, req: SearchRequest) -> SearchResponse:
    """Fused hierarchical hybrid search; hits in descending score, at most ``req.limit`` (see the module
    docstring for the steps), each with why it was found (``SearchHit.matched``) and, with ``req.collapse``, the
    burst of near-duplicate screenshots it stands for (``workers.memory.bursts``); ``SearchResponse.empty`` says
    why there are none (``workers.memory.holdings.why_empty``)."""
    t0 = time.perf_counter()
    now = datetime.now(UTC)
    zone = ZoneInfo(req.timezone) if req.timezone else None  # None: the server's ENGRAM_TIMEZONE
    span = resolve(req.query, req.reference_time, zone) if req.resolve_time else None
    if span is not None and TIME_AS_FILTER:  # the alternative measured against the boost (bench/retrieval.py)
        req = req.model_copy(
            update={
                "time_from": max(filter(None, [req.time_from, span.start])),
                "time_to": min(filter(None, [req.time_to, span.end])),
            }
        )
    named, content = named_entities(rt, req.tenant_id, req.query)
    # self-query: the names the query gives act through the entity boost; the dense query keeps its content
    dense = embed_query(rt, content if DENSE_WITHOUT_NAMES and content else req.query).tolist()
    sparse_q = sparse.query_vector(req.query)
    depth = max(MIN_DEPTH, req.limit * 5)
    points: dict[str, tuple[MemoryType, qm.ScoredPoint | qm.Record]] = {}
    scores: dict[str, float] = {}
    ev = Evidence(req.query)
    for mtype in dict.fromkeys(req.memory_types):
        if mtype is MemoryType.knowledge_vault:
            continue  # never searched by default; captions only, through its own call (later issue)
        dense_pts, sparse_pts = rt.vectors.search(
            collection_for(mtype),
            dense,
            sparse_q,
            build_filter(req, mtype),
            depth,
            idf_corpus=tenant_filter(req.tenant_id, req.user_id),
            with_payload=False,
        )
        ev.ranked(dense_pts, sparse_pts)
        for p in (*dense_pts, *sparse_pts):
            points.setdefault(str(p.id), (mtype, p))
        if mtype is not MemoryType.observation:  # a memory's ranking fields, read once for both rankings
            ids = list(dict.fromkeys(str(p.id) for p in (*dense_pts, *sparse_pts)))
            for rec in rt.vectors.retrieve(collection_for(mtype), ids, with_payload=RANKING_FIELDS):
                points[str(rec.id)] = (mtype, rec)
        scores.update(
            rrf(
                [[str(p.id) for p in dense_pts], [str(p.id) for p in sparse_pts]],
                rt.settings.rrf_k,
                [DENSE_WEIGHT, 1.0],
            )
        )
    is_obs = {pid for pid, (mt, _) in points.items() if mt is MemoryType.observation}
    _, ev.timed = _boosted(rt, req, is_obs, set(), span)
    stability = rt.settings.memory_stability_days
    for pid in scores:
        if pid in is_obs:
            if pid in ev.timed:
                scores[pid] += TIME_BOOST
            continue
        payload = points[pid][1].payload or {}
        scores[pid] *= decayed_score(payload, now, stability)
        if span is not None and _in_range(payload, span):
            scores[pid] += TIME_BOOST
            ev.timed.add(pid)
    memories = sorted((pid for pid in scores if pid not in is_obs), key=lambda pid: -scores[pid])
    if MemoryType.observation in req.memory_types:
        _add_memory_sources(rt, req, memories[:MEMORY_EXPAND], points, is_obs)
        prior: dict[str, float] = defaultdict(float)
        for mid in memories:
            for oid in (points[mid][1].payload or {}).get("provenance", {}).get("observation_ids", []):
                prior[str(oid)] = max(prior[str(oid)], scores[mid])
        ev.linked, _ = _boosted(rt, req, is_obs, named, None)
        ev.prior = {pid for pid in is_obs if prior[pid] > 0}
        for pid in is_obs:
            scores[pid] = scores.get(pid, 0.0) + MEMORY_PRIOR * prior[pid] + (ENTITY_BOOST if pid in ev.linked else 0.0)
    hits = _hits(rt, req, points, scores, is_obs, ev)
    recalled = [h.id for h in hits if h.memory_type is not MemoryType.observation]
    if req.reinforce and recalled:
        reinforce(rt, req.tenant_id, recalled, now)
    return SearchResponse(
        query=req.query,
        hits=hits,
        took_ms=(time.perf_counter() - t0) * 1000,
        time_range=span,
        empty=None if hits else why_empty(rt, req.tenant_id, req.user_id),
    )


class Evidence:
    """What each candidate was found by, for ``SearchHit.matched``: its rank in the dense and the BM25 ranking of
    its collection, whether a time, entity or memory boost applied, and the query's words with their BM25 stems."""

    def __init__(self, query: str) -> None:
        self.dense: dict[str, int] = {}
        self.sparse: dict[str, int] = {}
        self.timed: set[str] = set()
        self.linked: set[str] = set()
        self.prior: set[str] = set()
        words = [w for w in sparse.TOKEN_PATTERN.findall(query) if w.lower() not in sparse.STOPWORDS_EN]
        self.words: list[tuple[str, str]] = []  # (stem, the query's first word with it), in query order
        for word, stems in zip(words, sparse.tokenize(words), strict=True):
            if stems and stems[0] not in {st for st, _ in self.words}:
                self.words.append((stems[0], word))

    def ranked(self, dense_pts: list, sparse_pts: list) -> None:
        """Record one collection's two rankings (best first)."""
        for ranks, pts in ((self.dense, dense_pts), (self.sparse, sparse_pts)):
            for rank, p in enumerate(pts, start=1):
                ranks.setdefault(str(p.id), rank)

    def matched(self, pid: str, text: str) -> Matched:
        """Why ``pid`` (whose text is ``text``) was found."""
        stems = set(sparse.tokenize([text])[0]) if text else set()
        return Matched(
            dense_rank=self.dense.get(pid),
            sparse_rank=self.sparse.get(pid),
            words=[w for st, w in self.words if st in stems],
            time=pid in self.timed,
            entity=pid in self.linked,
            memory=pid in self.prior,
        )


def _hits(
    rt: Runtime,
    req: SearchRequest,
    points: dict[str, tuple[MemoryType, qm.ScoredPoint | qm.Record]],
    scores: dict[str, float],
    is_obs: set[str],
    ev: Evidence,
) -> list[SearchHit]:
    """The hits returned, best first: picked (bursts collapsed), read whole, with sources ordered, why they were
    found, and their context turns."""
    picked, burst = _pick_collapsed(rt, req, points, scores, is_obs)
    msg_of = _message_ids(rt, points, picked, is_obs)
    obs_rank = {pid: rank for rank, pid in enumerate(sorted(is_obs, key=lambda p: -scores[p]))}
    _whole_payloads(rt, points, picked)
    hits: list[SearchHit] = []
    for pid in picked:
        mtype, point = points[pid]
        hit = _hit(mtype, point, scores[pid])
        if mtype is not MemoryType.observation:
            _order_sources(hit, obs_rank, msg_of)
        hit.matched = ev.matched(pid, hit.text)
        hit.burst_ids = [uuid.UUID(m) for m in burst.get(pid, [])]
        hit.burst_size = 1 + len(hit.burst_ids)
        hits.append(hit)
    if req.context_turns:
        attach_context(rt, req, hits, [points[str(h.id)][1] for h in hits])
    return hits


def _pick_collapsed(
    rt: Runtime,
    req: SearchRequest,
    points: dict[str, tuple[MemoryType, qm.ScoredPoint | qm.Record]],
    scores: dict[str, float],
    is_obs: set[str],
) -> tuple[list[str], dict[str, list[str]]]:
    """(``_pick``'s ids with each burst of near-duplicate screenshots collapsed into its best-ranked frame and the
    list filled up to ``req.limit`` again, {kept id: the other frames of its burst}). Without ``req.collapse``: plain
    ``_pick``. Each round collapses the observations newly picked (``workers.memory.bursts.collapse``) and picks
    again without the frames absorbed, until a pick absorbs nothing more."""
    bursts: dict[str, list[str]] = {}
    absorbed: set[str] = set()
    while True:
        picked = _pick(req, points, scores, is_obs, absorbed)
        if not req.collapse:
            return picked, bursts
        new = [pid for pid in picked if pid in is_obs and pid not in bursts]
        if not new:
            return picked, bursts
        collapse(rt, req.tenant_id, new, bursts, absorbed)
        if not absorbed & set(picked):
            return picked, bursts


def _pick(
    req: SearchRequest,
    points: dict[str, tuple[MemoryType, qm.ScoredPoint | qm.Record]],
    scores: dict[str, float],
    is_obs: set[str],
    absorbed: set[str] | None = None,
) -> list[str]:
    """The ids of the hits to return, best first, at most ``req.limit``: a memory that only repeats observations
    shown (or about to be) is left out, unless it is a user's correction (``corrected_from``: its text says what
    its sources do not), and so are the observations ``absorbed`` into a kept hit's burst (which count as shown)."""
    # ties go to observations, the more specific evidence
    order = sorted(scores, key=lambda pid: (-scores[pid], pid not in is_obs))
    picked: list[str] = []
    absorbed = absorbed or set()
    shown: set[str] = set(absorbed)
    for pid in order:
        if len(picked) >= req.limit:
            break
        if pid in absorbed:
            continue
        mtype, point = points[pid]
        payload = point.payload or {}
        sources = (
            {pid}
            if mtype is MemoryType.observation
            else {str(o) for o in payload.get("provenance", {}).get("observation_ids", [])}
        )
        if (
            mtype is not MemoryType.observation
            and not payload.get("corrected_from")  # a user's correction says what its sources do not
            and sources
            and (sources <= shown or (len(sources) == 1 and next(iter(sources)) in scores))
        ):
            continue  # a memory that only repeats observations shown (or about to be) adds nothing
        shown.update(sources)
        picked.append(pid)
    return picked


def _message_ids(
    rt: Runtime, points: dict[str, tuple[MemoryType, qm.ScoredPoint | qm.Record]], picked: list[str], is_obs: set[str]
) -> dict[str, str | None]:
    """{observation id: its message id} for the candidate observations among the sources of the picked
    memories (what ``_order_sources`` reads), in one request."""
    wanted = sorted(
        {
            str(o)
            for pid in picked
            if pid not in is_obs
            for o in (points[pid][1].payload or {}).get("provenance", {}).get("observation_ids", [])
            if str(o) in is_obs
        }
    )
    if not wanted:
        return {}
    return {
        str(r.id): (r.payload or {}).get("message_id")
        for r in rt.vectors.retrieve(OBSERVATIONS, wanted, with_payload=["message_id"])
    }


def _whole_payloads(
    rt: Runtime, points: dict[str, tuple[MemoryType, qm.ScoredPoint | qm.Record]], pids: list[str]
) -> None:
    """Replace the ranking payloads (``RANKING_FIELDS``) of the points ``pids`` by their whole payloads, one
    request per collection: only the hits returned are read whole."""
    by_type: dict[MemoryType, list[str]] = defaultdict(list)
    for pid in pids:
        by_type[points[pid][0]].append(pid)
    for mtype, ids in by_type.items():
        for rec in rt.vectors.retrieve(collection_for(mtype), ids):
            points[str(rec.id)] = (mtype, rec)


def _sequence_key(payload: dict) -> tuple[str, str] | None:
    """What a point's neighbours share: its session (chat turns), else its event (segments of one media)."""
    if payload.get("session_id"):
        return "session_id", payload["session_id"]
    if payload.get("event_id"):
        return "event_id", payload["event_id"]
    return None


def _sequences(rt: Runtime, req: SearchRequest, payloads: list[dict]) -> dict[tuple[str, str], list[qm.Record]]:
    """The observations of the sessions (or events) of ``payloads``, each sequence ordered by time then segment
    index: one scroll per kind of key, under the tenant and the request's user."""
    keys: dict[str, set[str]] = defaultdict(set)
    for payload in payloads:
        if key := _sequence_key(payload):
            keys[key[0]].add(key[1])
    sequences: dict[tuple[str, str], list[qm.Record]] = defaultdict(list)
    for field, values in keys.items():
        flt = tenant_filter(req.tenant_id, req.user_id)
        flt.must.append(qm.FieldCondition(key=field, match=qm.MatchAny(any=sorted(values))))
        for rec in rt.vectors.scroll(OBSERVATIONS, flt):
            if (key := _sequence_key(rec.payload or {})) and key[0] == field:
                sequences[key].append(rec)
    for seq in sequences.values():
        seq.sort(
            key=lambda r: (
                (r.payload or {}).get("start_ts") or 0.0,
                (r.payload or {}).get("segment_index", 0),
                str(r.id),
            )
        )
    return sequences


def attach_context(
    rt: Runtime, req: SearchRequest, hits: list[SearchHit], points: list[qm.ScoredPoint | qm.Record]
) -> None:
    """Set ``hit.context`` of each observation hit to the ``req.context_turns`` observations before and after
    it in its session (or event), the hit itself left out; memories get no context."""
    obs = [(h, p.payload or {}) for h, p in zip(hits, points, strict=True) if h.memory_type is MemoryType.observation]
    sequences = _sequences(rt, req, [p for _, p in obs])
    n = req.context_turns
    for hit, payload in obs:
        seq = sequences.get(_sequence_key(payload), [])
        pos = next((i for i, r in enumerate(seq) if str(r.id) == str(hit.id)), None)
        if pos is None:
            continue
        hit.context = [
            ContextTurn(
                id=uuid.UUID(str(r.id)),
                offset=i - pos,
                text=(r.payload or {}).get("text", ""),
                time=(r.payload or {}).get("captured_at"),
                message_id=(r.payload or {}).get("message_id"),
            )
            for i, r in enumerate(seq[max(0, pos - n) : pos + n + 1], start=max(0, pos - n))
            if i != pos
        ]


def _add_memory_sources(
    rt: Runtime,
    req: SearchRequest,
    memory_ids: list[str],
    points: dict[str, tuple[MemoryType, qm.ScoredPoint | qm.Record]],
    is_obs: set[str],
) -> None:
    """Fetch the source observations of the given memories that no ranking reached (same filters)."""
    missing = list(
        dict.fromkeys(
            str(oid)
            for mid in memory_ids
            for oid in (points[mid][1].payload or {}).get("provenance", {}).get("observation_ids", [])
            if str(oid) not in points
        )
    )
    if not missing:
        return
    flt = build_filter(req, MemoryType.observation)
    flt.must.append(qm.HasIdCondition(has_id=missing))
    for rec in rt.vectors.scroll(OBSERVATIONS, flt, with_payload=False):
        points[str(rec.id)] = (MemoryType.observation, rec)
        is_obs.add(str(rec.id))
