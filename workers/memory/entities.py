"""The entity memory of M3-Agent (Long et al., "Seeing, Listening, Remembering, and Reasoning: A Multimodal Agent
with Long-Term Memory", 2025): persistent person entities that faces, voices and names are linked to.

M3-Agent's memory graph keeps face and voice nodes: a new face or voice is compared with those in memory and either
joins the identity it matches or founds a new one, and a face and a voice found to be the same person are joined
by an equivalence whose weight grows with each clip. engram keeps one Qdrant point per person in ``entities``
(``schemas.entities.Entity``): a bounded sample of face and voice embeddings with their centroids as named vectors
(``face``: dlib descriptors, Euclidean; ``voice``: Resemblyzer d-vectors, cosine), so nearest-entity search runs in
Qdrant; names; first/last seen; links to observations; and merges, recorded in the kept entity's ``merged_from``.

``EntityMemory`` is the working set of one ``link`` task (one batch of one tenant): entities are read once, changed
in memory and written back by ``save``, which also deletes merged-away entities and rewrites the ``entity_ids`` of
stored observations and memories that named them. Ownership: the link worker process. With a Qdrant server two
link workers may race and found two entities for one new person; ``merge_entities`` (``engram entities --merge``)
joins them.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Literal

import numpy as np

from engram.schemas.entities import Entity, EntityRole, EntitySample, EntitySummary, MergeRecord
from engram.schemas.ids import ENGRAM_NAMESPACE
from engram.schemas.observations import Observation
from engram.workers.memory.embedding import embed_texts
from engram.workers.runtime import Runtime
from engram.workers.stores import models as qm
from engram.workers.stores.vectors import (
    COLLECTIONS,
    DENSE,
    ENTITIES,
    FACE,
    FACE_SAMPLES,
    OBSERVATIONS,
    VOICE,
    VOICE_SAMPLES,
    tenant_filter,
)

Modality = Literal["face", "voice"]
RECENT_OBSERVATIONS = 64  # links kept per entity (the counts go on)
RECENT_KEYS = 128  # contribution keys kept per entity to recognise a redelivered batch
COOCCURRENCE_KEPT = 32  # observation ids kept per co-occurring partner
RECENT_RECORDINGS = 64  # recordings whose speaker label an entity keeps

# --- names ---------------------------------------------------------------------------------------------------

_UPPER, _LOWER = "A-ZÀ-ÖØ-Þ", "a-zß-öø-ÿ"  # Latin letters with their accented forms
_WORD = rf"[{_UPPER}][{_LOWER}]+(?:[-'][{_UPPER}][{_LOWER}]+)?(?!\w)"
_NAME = rf"(?P<name>{_WORD}(?:[ \t]+{_WORD})?)"
_INTRODUCTIONS = [
    re.compile(p)
    for p in (
        rf"\b(?i:my\s+name\s+is|my\s+name['’]s|call\s+me)\s+{_NAME}",
        rf"\b(?i:I['’]m|I\s+am)\s+{_NAME}",
        rf"\b(?i:this\s+is)\s+{_NAME}\s+(?i:speaking)\b",
    )
]
#: Capitalised words that follow "I'm"/"I am" or "call me" without being names.
NOT_NAMES = frozenset(
    """
I A An The Not So Just Sorry Here There Fine Good Okay Ok OK Back Home Done Ready Sure Still Also Very Really
Going Gonna Trying Talking Calling Speaking Glad Happy Afraid Alone Late Tired Hungry Yes No Oh Well Now Mr Mrs Ms
Dr Doctor Sir Madam Mom Mum Dad American English British Canadian French German Spanish Italian Chinese Japanese
Indian Mexican Irish Scottish Russian Christian Catholic Jewish Muslim Monday Tuesday Wednesday Thursday Friday
Saturday Sunday January February March April May June July August September October November December
""".split()
)


def names_in_transcript(text: str) -> list[str]:
    """Names a speaker gives themselves in ``text``: "my name is X", "my name's X", "call me X", "I'm X", "I am
    X", "this is X speaking", where X is one or two capitalised words (so "I'm going" binds nothing) and not a
    common capitalised non-name ("I'm Sorry", "I am American"). Returns the names in order, without repeats."""
    found: list[str] = []
    for pattern in _INTRODUCTIONS:
        for m in pattern.finditer(text):
            words = m.group("name").split()
            if words[0] in NOT_NAMES:
                continue
            name = " ".join(w for w in words if w not in NOT_NAMES)
            if name and name not in found:
                found.append(name)
    return found


def name_key(name: str) -> str:
    """A name as filters match it: lower case, single spaces."""
    return " ".join(name.lower().split())


def entity_id(tenant_id: str, name: str) -> uuid.UUID:
    """The id of the person entity first known by ``name`` in ``tenant_id`` (a chat speaker; case and spacing
    ignored): UUIDv5, so linking twice finds the same entity."""
    return uuid.uuid5(ENGRAM_NAMESPACE, f"{tenant_id}\x1fperson\x1f{name_key(name)}")


#: Chat speakers that are the user: an assistant export's ``user`` (ChatGPT, LongMemEval), Claude's ``human``.
USER_SPEAKERS = frozenset({"user", "human"})
#: Chat speakers that are the assistant of an assistant export (one entity per tenant).
ASSISTANT_SPEAKERS = frozenset({"assistant", "system", "tool"})
ROLE_RANK = {"self": 0, "assistant": 1, "person": 2}  # which role a merge of two keeps


def speaker_role(speaker: str, user_id: str) -> EntityRole:
    """``self`` for a chat speaker that is the user (``USER_SPEAKERS`` or the user id itself, case and spacing
    ignored), ``assistant`` for ``ASSISTANT_SPEAKERS``, else ``person``."""
    key = name_key(speaker)
    if key in USER_SPEAKERS or key == name_key(user_id):
        return "self"
    return "assistant" if key in ASSISTANT_SPEAKERS else "person"


def own_id(tenant_id: str, role: EntityRole, user_id: str = "") -> uuid.UUID:
    """The id of the user's own entity (``role`` ``self``: one per user) or of the tenant's assistant (UUIDv5)."""
    if role == "self":
        return uuid.uuid5(ENGRAM_NAMESPACE, f"{tenant_id}\x1fself\x1f{user_id}")
    if role == "assistant":
        return uuid.uuid5(ENGRAM_NAMESPACE, f"{tenant_id}\x1fassistant")
    raise ValueError(f"a {role!r} entity has no fixed id")


def founded_id(tenant_id: str, modality: Modality, key: str) -> uuid.UUID:
    """The id of an entity founded by the face or voice with sample ``key`` (UUIDv5: a redelivered batch founds
    the same one)."""
    return uuid.uuid5(ENGRAM_NAMESPACE, f"{tenant_id}\x1fperson-{modality}\x1f{key}")


# --- centroids -------------------------------------------------------------------------------------------------


def centroid(entity: Entity, modality: Modality) -> np.ndarray | None:
    """The mean of an entity's face samples (128,), or of its voice samples L2-normalised (256,); None without
    samples of that modality."""
    samples = entity.face_samples if modality == "face" else entity.voice_samples
    if not samples:
        return None
    mean = np.mean([s.vector for s in samples], axis=0)
    return mean if modality == "face" else mean / max(float(np.linalg.norm(mean)), 1e-12)


def closeness(modality: Modality, a: np.ndarray, b: np.ndarray) -> float:
    """Euclidean distance of two faces (lower is nearer) or cosine similarity of two voices (higher is nearer)."""
    if modality == "face":
        return float(np.linalg.norm(np.asarray(a, float) - np.asarray(b, float)))
    return float(np.dot(a, b) / max(float(np.linalg.norm(a) * np.linalg.norm(b)), 1e-12))


# --- the working set -----------------------------------------------------------------------------------------


class EntityMemory:
    """The entities one ``link`` task reads and changes, for one tenant (see the module docstring)."""

    def __init__(self, rt: Runtime, tenant_id: str) -> None:
        self.rt = rt
        self.tenant_id = tenant_id
        self.entities: dict[uuid.UUID, Entity] = {}
        self.dirty: set[uuid.UUID] = set()
        self.redirects: dict[str, str] = {}  # merged-away id -> kept id

    def _threshold(self, modality: Modality) -> float:
        s = self.rt.settings
        return s.entity_face_distance if modality == "face" else s.entity_voice_similarity

    def load(self, ids: list[uuid.UUID]) -> None:
        """Read the given entities (with their samples) into the working set; unknown ids are skipped."""
        missing = [i for i in dict.fromkeys(ids) if i not in self.entities]
        if missing:
            for rec in self.rt.vectors.retrieve(ENTITIES, missing, with_vectors=True):
                if (rec.payload or {}).get("tenant_id") == self.tenant_id:
                    entity = entity_from_record(rec)
                    self.entities[entity.id] = entity

    def get(self, eid: uuid.UUID) -> Entity | None:
        """An entity of the tenant by id (read on first use), None when there is none."""
        self.load([eid])
        return self.entities.get(eid)

    def create(self, eid: uuid.UUID) -> Entity:
        """A new entity with this id in the working set."""
        entity = self.entities[eid] = Entity(id=eid, tenant_id=self.tenant_id)
        self.dirty.add(eid)
        return entity

    def own(self, role: EntityRole, user_id: str) -> Entity:
        """The user's own entity (``role`` ``self``, named by the user id until given a display name) or the
        tenant's assistant (named ``assistant``), read or created. An entity kept at that id as a person when the
        user was forgotten (``forget_user_entities``) is the user's own again."""
        eid = own_id(self.tenant_id, role, user_id)
        entity = self.get(eid)
        if entity is None:
            entity = self.create(eid)
        if entity.role != role:  # new, or a forgotten user's own entity others still knew (as a person)
            entity.role, entity.user_id = role, (user_id if role == "self" else None)
            self.add_names(entity, [user_id if role == "self" else "assistant"])
            self.dirty.add(eid)
        return entity

    def by_names(self, names: list[str]) -> dict[str, Entity]:
        """{name key: entity} for names some entity holds: the entity whose id is ``entity_id(name)`` when it
        holds the name, else the one first seen (an entity merged away leaves its names to the kept one)."""
        keys = list(dict.fromkeys(name_key(n) for n in names))
        flt = tenant_filter(self.tenant_id)
        flt.must.append(qm.FieldCondition(key="name_keys", match=qm.MatchAny(any=keys)))
        found = [uuid.UUID(str(r.id)) for r in self.rt.vectors.scroll(ENTITIES, flt)]
        self.load([*found, *(entity_id(self.tenant_id, k) for k in keys)])  # also points written before name_keys
        out: dict[str, Entity] = {}
        for key in keys:
            holders = [
                e
                for e in self.entities.values()
                if key in {name_key(n) for n in e.names} and str(e.id) not in self.redirects
            ]
            holders.sort(
                key=lambda e: (ROLE_RANK[e.role], e.id != entity_id(self.tenant_id, key), e.first_seen_ts or 0.0)
            )
            if holders:
                out[key] = holders[0]
        return out

    def nearest(self, modality: Modality, vector: np.ndarray) -> Entity | None:
        """The entity whose face (Euclidean distance ≤ ``entity_face_distance``) or voice (cosine similarity ≥
        ``entity_voice_similarity``) centroid is nearest ``vector``, or None (``candidates``' first)."""
        found = self.candidates(modality, vector)
        return found[0][0] if found else None

    def candidates(
        self, modality: Modality, vector: np.ndarray, limit: int = 3, threshold: float | None = None
    ) -> list[tuple[Entity, float]]:
        """The entities whose face centroid is within ``entity_face_distance`` of ``vector`` (Euclidean) or whose
        voice centroid has cosine similarity ≥ ``entity_voice_similarity`` with it (or ``threshold``), nearest
        first, with that distance or similarity. Qdrant finds the candidates among stored entities (``limit`` of
        them); entities changed in this task are compared as they are now."""
        threshold = self._threshold(modality) if threshold is None else threshold
        hits = self.rt.vectors.nearest(
            ENTITIES,
            FACE if modality == "face" else VOICE,
            vector.tolist(),
            tenant_filter(self.tenant_id),
            limit=limit,
            score_threshold=threshold,
        )
        self.load([uuid.UUID(str(h.id)) for h in hits])
        found = []
        for eid in {uuid.UUID(str(h.id)) for h in hits} | self.dirty:
            entity = self.entities.get(eid)
            c = centroid(entity, modality) if entity and str(eid) not in self.redirects else None
            if c is None:
                continue
            score = closeness(modality, c, vector)
            if score <= threshold if modality == "face" else score >= threshold:
                found.append((entity, score))
        found.sort(key=lambda es: (es[1] if modality == "face" else -es[1], str(es[0].id)))
        return found

    def add_sample(self, entity: Entity, modality: Modality, key: str, vector: np.ndarray, at_ts: float) -> bool:
        """Add one embedding to the entity (its oldest sample goes beyond ``entity_samples``) and count it.
        Returns False, changing nothing, when ``key`` was already added (a redelivered batch)."""
        if _seen(entity, f"{modality}:{key}"):
            return False
        samples = entity.face_samples if modality == "face" else entity.voice_samples
        samples.append(EntitySample(key=key, vector=[float(x) for x in vector], at_ts=at_ts))
        del samples[: -self.rt.settings.entity_samples]
        if modality == "face":
            entity.face_count += 1
        else:
            entity.voice_count += 1
        self.dirty.add(entity.id)
        return True

    def add_observation(self, entity: Entity, obs: Observation) -> None:
        """Link ``obs`` to the entity: recent links, count, first/last seen (a link already made is kept once)."""
        oid = str(obs.id)
        start = obs.captured_at.timestamp()
        end = start + (obs.end_s - obs.start_s if obs.start_s is not None and obs.end_s is not None else 0.0)
        entity.first_seen_ts = min(entity.first_seen_ts if entity.first_seen_ts is not None else start, start)
        entity.last_seen_ts = max(entity.last_seen_ts if entity.last_seen_ts is not None else end, end)
        if not _seen(entity, f"obs:{oid}"):
            entity.observation_count += 1
        entity.observation_ids = [*[o for o in entity.observation_ids if o != oid], oid][-RECENT_OBSERVATIONS:]
        if str(entity.id) not in obs.entity_ids:
            obs.entity_ids = sorted({*obs.entity_ids, str(entity.id)})
        self.dirty.add(entity.id)

    def recording_speaker(self, entity: Entity, event_id: str, label: str) -> str:
        """The speaker label of the entity's voice in recording ``event_id``: the one it was given first, else
        ``label``, which it keeps from now on (the most recent ``RECENT_RECORDINGS`` recordings are kept)."""
        known = entity.recording_speakers.get(event_id)
        if known is not None:
            return known
        entity.recording_speakers[event_id] = label
        for old in list(entity.recording_speakers)[:-RECENT_RECORDINGS]:
            del entity.recording_speakers[old]
        self.dirty.add(entity.id)
        return label

    def add_names(self, entity: Entity, names: list[str]) -> None:
        """Give the entity these names (kept once each, case and spacing ignored)."""
        have = {name_key(n) for n in entity.names}
        new = [n for n in names if name_key(n) not in have]
        if new:
            entity.names = [*entity.names, *new]
            self.dirty.add(entity.id)

    def join_by_name(self, entity: Entity) -> Entity:
        """Merge every other entity holding one of ``entity``'s names (case and spacing ignored) with it: one name,
        one person. The kept one is the user's own entity, else the assistant, else the first seen. Two entities
        whose voices one recording's speaker clustering told apart (``cannot_link``) stay apart, and so do two
        users' own entities (one per user). Returns the kept
        entity (``entity`` or the one it joined)."""
        if not entity.names:
            return entity
        keys = {name_key(n) for n in entity.names}
        flt = tenant_filter(self.tenant_id)
        flt.must.append(qm.FieldCondition(key="name_keys", match=qm.MatchAny(any=sorted(keys))))
        self.load([uuid.UUID(str(r.id)) for r in self.rt.vectors.scroll(ENTITIES, flt, with_payload=False)])
        others = [
            e
            for e in list(self.entities.values())
            if e.id != entity.id and str(e.id) not in self.redirects and keys & {name_key(n) for n in e.names}
        ]
        for other in sorted(others, key=_keep_order):
            if cannot_link(entity, other) or entity.role == other.role == "self":  # two users: one entity each
                continue
            keep, drop = sorted((entity, other), key=_keep_order)
            entity = self.merge(keep, drop, f"same name ({drop.label})")
        return entity

    def cooccur(self, a: Entity, b: Entity, observation_id: str) -> int:
        """Record that ``a`` and ``b`` were seen together (one's face, the other's voice) in an observation;
        returns how many observations they now share (each counted once)."""
        for x, y in ((a, b), (b, a)):
            seen = x.cooccurrence.setdefault(str(y.id), [])
            if observation_id not in seen:
                seen.append(observation_id)
                del seen[:-COOCCURRENCE_KEPT]
                self.dirty.add(x.id)
        return len(a.cooccurrence[str(b.id)])

    def merge(self, keep: Entity, drop: Entity, reason: str) -> Entity:
        """Merge ``drop`` into ``keep``: samples (the newest ``entity_samples`` of both), names, counts, links,
        first/last seen and co-occurrences move to ``keep``, which records the merge in ``merged_from``; ``drop``
        is deleted and every stored observation or memory naming it names ``keep`` instead (on ``save``)."""
        if keep.id == drop.id:
            raise ValueError("an entity cannot be merged with itself")
        n = self.rt.settings.entity_samples
        keep.face_samples = sorted([*keep.face_samples, *drop.face_samples], key=lambda s: s.at_ts)[-n:]
        keep.voice_samples = sorted([*keep.voice_samples, *drop.voice_samples], key=lambda s: s.at_ts)[-n:]
        keep.names = [*keep.names, *[x for x in drop.names if name_key(x) not in {name_key(k) for k in keep.names}]]
        keep.face_count += drop.face_count
        keep.voice_count += drop.voice_count
        keep.observation_count += drop.observation_count - len(set(drop.observation_ids) & set(keep.observation_ids))
        links = list(dict.fromkeys([*keep.observation_ids, *drop.observation_ids]))
        keep.observation_ids = links[-RECENT_OBSERVATIONS:]
        keep.recent_keys = list(dict.fromkeys([*keep.recent_keys, *drop.recent_keys]))[-RECENT_KEYS:]
        times = [t for t in (keep.first_seen_ts, drop.first_seen_ts) if t is not None]
        keep.first_seen_ts = min(times) if times else None
        times = [t for t in (keep.last_seen_ts, drop.last_seen_ts) if t is not None]
        keep.last_seen_ts = max(times) if times else None
        for other, seen in drop.cooccurrence.items():
            merged = keep.cooccurrence.setdefault(other, [])
            merged.extend(o for o in seen if o not in merged)
        for own in (str(keep.id), str(drop.id)):
            keep.cooccurrence.pop(own, None)
        keep.recording_speakers = {**drop.recording_speakers, **keep.recording_speakers}
        if ROLE_RANK[drop.role] < ROLE_RANK[keep.role]:
            keep.role = drop.role
        keep.user_id = keep.user_id or drop.user_id
        keep.merged_from.append(
            MergeRecord(entity_id=str(drop.id), names=drop.names, at=datetime.now(UTC), reason=reason)
        )
        self.redirects[str(drop.id)] = str(keep.id)
        for old, new in list(self.redirects.items()):
            if new == str(drop.id):
                self.redirects[old] = str(keep.id)
        self.entities.pop(drop.id, None)
        self.dirty.discard(drop.id)
        self.dirty.add(keep.id)
        return keep

    def resolve(self, eid: str) -> str:
        """The id an entity id stands for now (the kept entity of a merge)."""
        return self.redirects.get(eid, eid)

    def relabel(self, observations: list[Observation]) -> None:
        """Point the ``entity_ids`` (and faces' ``entity_id``) of ``observations`` at kept entities."""
        if not self.redirects:
            return
        for obs in observations:
            obs.entity_ids = sorted({self.resolve(e) for e in obs.entity_ids})
            for face in obs.faces:
                if face.entity_id:
                    face.entity_id = self.resolve(face.entity_id)

    def save(self) -> None:
        """Write the changed entities (their names' text embedding, centroids and samples as vectors), delete the
        merged-away ones and rewrite the stored observations and memories that named them."""
        changed = [self.entities[i] for i in self.dirty if i in self.entities]
        labels = [", ".join(e.names) for e in changed if e.names]
        text = dict(zip(labels, embed_texts(self.rt, labels), strict=True)) if labels else {}
        points = []
        for e in changed:
            vectors: dict = {DENSE: text[", ".join(e.names)].tolist()} if e.names else {}
            for modality, one, many in (("face", FACE, FACE_SAMPLES), ("voice", VOICE, VOICE_SAMPLES)):
                c = centroid(e, modality)
                if c is not None:
                    vectors[one] = c.tolist()
                    vectors[many] = [s.vector for s in (e.face_samples if modality == "face" else e.voice_samples)]
            points.append(qm.PointStruct(id=str(e.id), vector=vectors, payload=entity_payload(e)))
        self.rt.vectors.upsert(ENTITIES, points)
        if self.redirects:
            self.rt.vectors.delete(ENTITIES, list(self.redirects))
            rewrite_references(self.rt, self.tenant_id, self.redirects)
        self.dirty.clear()


def _keep_order(e: Entity) -> tuple:
    """Which of two entities a merge keeps: the user's own, then the assistant, then the first seen."""
    return ROLE_RANK[e.role], e.first_seen_ts if e.first_seen_ts is not None else float("inf"), str(e.id)


def voice_chunks(entity: Entity) -> dict[str, set[str]]:
    """{recording chunk (``<event id>:<segment>``): the speaker labels its clustering gave the voices linked to
    ``entity``}, from its voice sample keys and recent contribution keys (``<event id>:<segment>:<label>``)."""
    out: dict[str, set[str]] = {}
    keys = [s.key for s in entity.voice_samples] + [
        k[len("voice:") :] for k in entity.recent_keys if k.startswith("voice:")
    ]
    for key in keys:
        chunk, _, label = key.rpartition(":")
        if chunk and label:
            out.setdefault(chunk, set()).add(label)
    return out


def cannot_link(a: Entity, b: Entity) -> bool:
    """True when one recording chunk's speaker clustering gave a voice of ``a`` and a voice of ``b`` different
    labels: the clustering separated them, so they are two people (a cannot-link constraint, as in constrained
    clustering: Wagstaff et al., "Constrained K-means Clustering with Background Knowledge", ICML 2001)."""
    mine, theirs = voice_chunks(a), voice_chunks(b)
    return any(len(mine[c] | theirs[c]) > 1 for c in mine.keys() & theirs.keys())


def _seen(entity: Entity, key: str) -> bool:
    """True when ``key`` is among the entity's recent contribution keys; else it is added (bounded)."""
    if key in entity.recent_keys:
        return True
    entity.recent_keys = [*entity.recent_keys, key][-RECENT_KEYS:]
    return False


def entity_payload(entity: Entity) -> dict:
    """The Qdrant payload of an entity: the model without sample vectors, plus ``name_keys``."""
    payload = entity.model_dump(mode="json", exclude={"id", "face_samples", "voice_samples"})
    payload["face_samples"] = [{"key": s.key, "at_ts": s.at_ts} for s in entity.face_samples]
    payload["voice_samples"] = [{"key": s.key, "at_ts": s.at_ts} for s in entity.voice_samples]
    payload["name_keys"] = sorted({name_key(n) for n in entity.names})
    return payload


def entity_from_record(rec: qm.Record) -> Entity:
    """An ``Entity`` from its Qdrant point (payload, and sample multivectors when read with vectors)."""
    payload = dict(rec.payload or {})
    vectors = rec.vector if isinstance(rec.vector, dict) else {}
    for field, name in (("face_samples", FACE_SAMPLES), ("voice_samples", VOICE_SAMPLES)):
        meta, vecs = payload.get(field) or [], vectors.get(name) or []
        payload[field] = [{**m, "vector": v} for m, v in zip(meta, vecs, strict=False)]
    return Entity.model_validate({**payload, "id": str(rec.id)})


def rewrite_references(rt: Runtime, tenant_id: str, redirects: dict[str, str]) -> int:
    """Make every stored observation and memory of the tenant that names a merged-away entity (``redirects``:
    old id -> kept id) name the kept one instead, faces' ``entity_id`` included. Returns the points changed."""
    changed = 0
    for collection in (c for c in COLLECTIONS if c != ENTITIES):
        flt = tenant_filter(tenant_id)
        flt.must.append(qm.FieldCondition(key="entity_ids", match=qm.MatchAny(any=list(redirects))))
        payloads = {}
        for rec in rt.vectors.scroll(collection, flt):
            p = rec.payload or {}
            new: dict = {"entity_ids": sorted({redirects.get(e, e) for e in p.get("entity_ids") or []})}
            if p.get("faces"):
                new["faces"] = [
                    {**f, "entity_id": redirects.get(f.get("entity_id"), f.get("entity_id"))} for f in p["faces"]
                ]
            payloads[str(rec.id)] = new
        rt.vectors.set_payloads(collection, payloads)
        changed += len(payloads)
    return changed


def merge_entities(
    rt: Runtime, tenant_id: str, keep_id: uuid.UUID | str, drop_id: uuid.UUID | str, reason: str = "manual"
) -> Entity:
    """Merge entity ``drop_id`` into ``keep_id`` (see ``EntityMemory.merge``) and write the result. Raises
    KeyError when either is not an entity of the tenant, ValueError when they are the same."""
    memory = EntityMemory(rt, tenant_id)
    keep, drop = memory.get(uuid.UUID(str(keep_id))), memory.get(uuid.UUID(str(drop_id)))
    for eid, entity in ((keep_id, keep), (drop_id, drop)):
        if entity is None:
            raise KeyError(f"no entity {eid} in tenant {tenant_id!r}")
    kept = memory.merge(keep, drop, reason)
    memory.save()
    return kept


def name_entity(rt: Runtime, tenant_id: str, entity_id: uuid.UUID | str, name: str) -> Entity:
    """Give entity ``entity_id`` the name ``name`` (a face or voice entity found without one, another name for
    a person, the user's display name for their own entity), first among its names, and write it: a query naming
    it then filters to it (``workers.query.named_entities``) and ``ask`` shows the name in its evidence. An entity
    already holding the name joins it (``EntityMemory.join_by_name``): the kept one is returned. Raises KeyError
    when it is not an entity of the tenant, ValueError for an empty name."""
    name = " ".join(name.split())
    if not name:
        raise ValueError("an entity's name cannot be empty")
    memory = EntityMemory(rt, tenant_id)
    entity = memory.get(uuid.UUID(str(entity_id)))
    if entity is None:
        raise KeyError(f"no entity {entity_id} in tenant {tenant_id!r}")
    others = [n for n in entity.names if name_key(n) != name_key(name)]
    if [name, *others] != entity.names:
        entity.names = [name, *others]
        memory.dirty.add(entity.id)
        kept = memory.join_by_name(entity)
        if kept.names[0] != name:  # the name given is the one shown
            kept.names = [name, *[n for n in kept.names if name_key(n) != name_key(name)]]
        memory.save()
        return kept
    return entity


# --- forgetting a user ----------------------------------------------------------------------------------------


def given_names(payload: dict) -> set[str]:
    """The name keys an observation (its stored payload) gives the entities it names: its chat speaker unless an
    assistant's (for the user's own turns also the user id, which names the user's own entity), and the names said
    in its transcript (``names_in_transcript``)."""
    keys = {name_key(n) for n in names_in_transcript(payload.get("transcript") or "")}
    speaker, user = payload.get("speaker"), payload.get("user_id") or ""
    role = speaker_role(speaker, user) if speaker else None
    if speaker and role != "assistant":
        keys.add(name_key(speaker))
    if role == "self":
        keys.add(name_key(user))
    return keys


def forget_user_entities(rt: Runtime, tenant_id: str, user_id: str, observations: list[qm.Record]) -> int:
    """Take what one user gave the tenant's entities out of them, once the user's observations and memories are
    deleted (``workers.memory.records.forget_user``; ``observations``: the user's observation points as they
    were). Concerned: the entities those observations named and the user's own entity (``role`` ``self``).

    An entity no remaining observation or memory names is deleted. One that other users' observations still name
    stays, as they know it: a ``person`` without ``user_id`` when it was the forgotten user's own entity; without
    the face and voice samples, links, recent keys, co-occurrences and recording labels of the user's observations
    and events; with the observation count less the user's observations and first/last seen from the remaining
    ones; and without the names only the user gave it (speakers and introductions in the user's observations, the
    user id; the user's own entity keeps only the names the remaining observations give it). Returns how many
    entities were deleted."""
    named = {e for o in observations for e in (o.payload or {}).get("entity_ids") or []}
    own = {str(r.id) for r in rt.vectors.scroll(ENTITIES, tenant_filter(tenant_id, user_id), with_payload=False)}
    memory = EntityMemory(rt, tenant_id)
    memory.load([uuid.UUID(e) for e in sorted(named | own)])
    return _take_out_all(rt, tenant_id, memory, observations, user_id)


def forget_observations(rt: Runtime, tenant_id: str, observations: list[qm.Record]) -> int:
    """Take what ``observations`` (deleted points, as they were) gave the tenant's entities out of them, as
    ``forget_user_entities`` does for a user's (``workers.memory.forget``): their samples, links, recent keys and
    the names only they gave; an entity no remaining observation or memory names is deleted, as is a user's own
    entity nothing names any more (it is made again by the user's next observation). Returns how many were
    deleted."""
    named = {e for o in observations for e in (o.payload or {}).get("entity_ids") or []}
    memory = EntityMemory(rt, tenant_id)
    memory.load([uuid.UUID(e) for e in sorted(named)])
    return _take_out_all(rt, tenant_id, memory, observations, "\x00")  # a user id no entity has: nobody's own
    # entity changes role


def _take_out_all(
    rt: Runtime, tenant_id: str, memory: EntityMemory, observations: list[qm.Record], user_id: str
) -> int:
    """Take what ``observations`` gave each entity loaded in ``memory`` out of it (``_take_out``, ``user_id`` the
    forgotten user's), delete the entities no remaining observation or memory names, save; returns how many
    were deleted."""
    doomed = []
    for entity in list(memory.entities.values()):
        eid = str(entity.id)
        fields = ["speaker", "transcript", "user_id", "start_ts", "end_ts"]
        remaining = [
            r.payload or {}
            for r in rt.vectors.scroll(OBSERVATIONS, tenant_filter(tenant_id, entity_ids=eid), with_payload=fields)
        ]
        if not remaining and not any(
            rt.vectors.count(c, tenant_filter(tenant_id, entity_ids=eid))
            for c in COLLECTIONS
            if c not in (ENTITIES, OBSERVATIONS)
        ):
            doomed.append(eid)
            continue
        mine = [o for o in observations if eid in ((o.payload or {}).get("entity_ids") or [])]
        _take_out(entity, user_id, mine, remaining)
        memory.dirty.add(entity.id)
    if doomed:
        rt.vectors.delete(
            ENTITIES, qm.Filter(must=[*(tenant_filter(tenant_id).must or []), qm.HasIdCondition(has_id=doomed)])
        )
    for eid in doomed:
        memory.entities.pop(uuid.UUID(eid), None)
        memory.dirty.discard(uuid.UUID(eid))
    memory.save()
    return len(doomed)


def _take_out(entity: Entity, user_id: str, mine: list[qm.Record], remaining: list[dict]) -> None:
    """Remove from ``entity`` what the forgotten user's observations ``mine`` (those naming it) gave it, given the
    payloads of the observations that still name it (``forget_user_entities``)."""
    obs_ids = {str(o.id) for o in mine}
    events = {str(p["event_id"]) for o in mine if (p := o.payload or {}).get("event_id")}

    def theirs(key: str) -> bool:  # a sample key: '<observation>#<face>', '<event>:<segment>:<label>' or '<obs>'
        return key in obs_ids or key.partition("#")[0] in obs_ids or key.partition(":")[0] in events

    for modality in ("face", "voice"):
        samples = [s for s in getattr(entity, f"{modality}_samples") if not theirs(s.key)]
        keys = [s.key for s in getattr(entity, f"{modality}_samples")]
        keys += [k.partition(":")[2] for k in entity.recent_keys if k.startswith(f"{modality}:")]
        gone = {k for k in keys if theirs(k)}
        setattr(entity, f"{modality}_samples", samples)
        setattr(entity, f"{modality}_count", max(len(samples), getattr(entity, f"{modality}_count") - len(gone)))
    entity.observation_ids = [o for o in entity.observation_ids if o not in obs_ids]
    entity.observation_count = max(len(entity.observation_ids), entity.observation_count - len(mine))
    entity.recent_keys = [k for k in entity.recent_keys if not theirs(k.partition(":")[2])]
    entity.cooccurrence = {
        k: left for k, seen in entity.cooccurrence.items() if (left := [o for o in seen if o not in obs_ids])
    }
    entity.recording_speakers = {e: label for e, label in entity.recording_speakers.items() if e not in events}
    spans = [
        (float(p["start_ts"]), float(p.get("end_ts") or p["start_ts"]))
        for p in remaining
        if p.get("start_ts") is not None
    ]
    entity.first_seen_ts = min(s for s, _ in spans) if spans else None
    entity.last_seen_ts = max(e for _, e in spans) if spans else None

    kept = set().union(*(given_names(p) for p in remaining))
    was_theirs = entity.role == "self" and entity.user_id == user_id
    given = set().union(*(given_names(o.payload or {}) for o in mine))

    def keep(name: str) -> bool:
        return name_key(name) in kept or (not was_theirs and name_key(name) not in given)

    entity.names = [n for n in entity.names if keep(n)]
    for record in entity.merged_from:
        record.names = [n for n in record.names if keep(n)]
    if was_theirs:
        entity.role, entity.user_id = "person", None


def summary(e: Entity) -> EntitySummary:
    """What lists show of an entity: id, names, counts, first/last seen (UTC) and the ids merged into it."""
    when = [None if t is None else datetime.fromtimestamp(t, UTC) for t in (e.first_seen_ts, e.last_seen_ts)]
    return EntitySummary(
        id=e.id,
        role=e.role,
        names=e.names,
        faces=e.face_count,
        voices=e.voice_count,
        observations=e.observation_count,
        first_seen=when[0],
        last_seen=when[1],
        merged_from=[m.entity_id for m in e.merged_from],
    )


def list_entities(rt: Runtime, tenant_id: str) -> list[EntitySummary]:
    """The tenant's entities with their names and counts, most observations first."""
    out = [summary(entity_from_record(rec)) for rec in rt.vectors.scroll(ENTITIES, tenant_filter(tenant_id))]
    return sorted(out, key=lambda s: (-s.observations, -s.faces - s.voices, str(s.id)))


def entity_names(rt: Runtime, tenant_id: str) -> list[tuple[str, list[str]]]:
    """(entity id, names) of each of the tenant's entities that has a name, reading only the ``names`` payload
    field (no samples, links or vectors): what name matching in a query needs, e.g. ``workers.query``."""
    points = rt.vectors.scroll(ENTITIES, tenant_filter(tenant_id), with_payload=["names"])
    return [(str(p.id), names) for p in points if (names := list((p.payload or {}).get("names") or []))]
