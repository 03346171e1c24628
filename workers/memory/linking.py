"""Linking observations to persistent person entities (M3-Agent's entity-centric
memory, Long et al. 2025; the entity store is ``workers.memory.entities``).

- **Chat speakers** bind by name: each speaker is the entity holding that name (first: the one with id
  ``entity_id(tenant, name)``).
- **Voices.** Utterances of one speaker label in a chunk (speaker clustering within the recording, stage
  ``perceive``), or one speaker's voice in a clip segment (``speaker_voices``: every speaker of the segment), are
  linked together first: their duration-weighted mean voice joins the nearest entity whose voice centroid has cosine
  similarity ≥ ``entity_voice_similarity``, or founds a new one. A name said in a clip segment with several voices
  binds to none of them (who said it is not known).
- **Faces** of a segment are clustered (average linkage at ``entity_face_distance``, ``cluster_faces``); each
  cluster's mean joins the nearest entity whose face centroid is within ``entity_face_distance``, or founds one.
- **Speaker labels** are made recording-wide: speaker clustering labels each chunk of a long recording on its
  own (``spk0`` of chunk 3 need not be ``spk0`` of chunk 0); a voice entity keeps the label it has in a
  recording, so the same voice gets it in every chunk (``_recording_speakers``).
- **Names.** "my name is X", "I'm X", "this is X speaking" in an utterance name its voice's entity.
- **Face-voice equivalence.** A face entity and a voice entity seen in the same clip segments
  (``entity_cooccurrence_merge`` of them), each the other's most frequent partner, are merged: M3-Agent's
  equivalence edges, counted here instead of asked of a multimodal model.

Idempotent: an observation already stored with its entities takes them back unchanged, and entities keep the keys
of their recent contributions, so a redelivered batch adds no sample, link or count twice. A batch of chat text
costs one name look-up and no model but the (cached) text embedding of the names.
"""

from __future__ import annotations

import uuid
from collections import Counter

import numpy as np
import structlog

from engram.schemas.entities import Entity
from engram.schemas.jobs import EmbeddedBatch
from engram.schemas.observations import Observation
from engram.workers.memory.entities import (
    ROLE_RANK,
    EntityMemory,
    cannot_link,
    entity_id,
    founded_id,
    name_key,
    names_in_transcript,
    own_id,
    speaker_role,
    voice_chunks,
)
from engram.workers.models.faces import cluster_faces
from engram.workers.runtime import Runtime
from engram.workers.stores.vectors import OBSERVATIONS

log = structlog.get_logger(__name__)

__all__ = ["link_batches", "link_observations"]


def link_observations(memory: EntityMemory, observations: list[Observation]) -> None:
    """Link chat speakers, voices, faces and names of ``observations`` (one tenant's) to entities, merge faces and
    voices that co-occur often enough, and save. Changes the observations in place."""
    _speakers(memory, [o for o in observations if o.speaker])
    perceived = _not_yet_linked(memory, [o for o in observations if o.faces or o.voice_embedding is not None])
    voice_of = _voices(memory, perceived)
    face_entities = _faces(memory, perceived)
    for obs in perceived:  # a clip segment with several voices: who said the name is not known
        if obs.transcript and len(voice_of.get(str(obs.id), [])) == 1:
            voice = memory.entities.get(uuid.UUID(memory.resolve(str(voice_of[str(obs.id)][0]))))
            if voice is not None and (names := names_in_transcript(obs.transcript)):
                memory.add_names(voice, names)
                memory.join_by_name(voice)  # the person already known by that name
    _equivalences(memory, perceived, voice_of, face_entities)
    memory.save()
    memory.relabel(observations)


def _speakers(memory: EntityMemory, observations: list[Observation]) -> None:
    """Bind each chat speaker to an entity: the user (``user``, ``human``, the user id, a full name that starts
    with it: ``_users_full_name``) to the user's own entity, an assistant export's ``assistant``, ``system`` and
    ``tool`` to the tenant's assistant, any other name to the entity holding it (the user's own first: a display
    name given to it), or a new person of that name. The user's own entity is named by the user's full name
    when a chat gives it, else by the user id as their turns spell it (``Sam`` for user ``sam``)."""
    if not observations:
        return
    people = [o.speaker for o in observations if speaker_role(o.speaker, o.user_id) == "person"]
    holders = memory.by_names(people) if people else {}
    for obs in observations:
        role = speaker_role(obs.speaker, obs.user_id)
        if role == "person" and _users_full_name(memory, obs):
            entity = memory.own("self", obs.user_id)
            entity.names = [obs.speaker, *[n for n in entity.names if name_key(n) != name_key(obs.speaker)]]
            memory.dirty.add(entity.id)
            holders[name_key(obs.speaker)] = memory.join_by_name(entity)  # a person of that name known before
            role = "self"
        if role != "person":
            entity = memory.own(role, obs.user_id)
            if entity.names[:1] == [obs.user_id] != [obs.speaker] and name_key(obs.speaker) == name_key(obs.user_id):
                entity.names = [obs.speaker, *entity.names[1:]]  # the user id as the user's turns spell it: "Sam"
            memory.add_observation(entity, obs)
            continue
        entity = holders.get(name_key(obs.speaker))
        if entity is None:
            entity = holders[name_key(obs.speaker)] = memory.create(entity_id(memory.tenant_id, obs.speaker))
        memory.add_names(entity, [obs.speaker])
        memory.add_observation(entity, obs)


def _users_full_name(memory: EntityMemory, obs: Observation) -> bool:
    """True when chat speaker ``obs.speaker`` is the user's full name: two or more words, the first the user id
    ("Sam Carter" for user ``sam``), while the user's own entity has no other name of several words (once it is
    "Sam Carter", a "Sam Smith" is someone else)."""
    words = name_key(obs.speaker).split()
    if len(words) < 2 or words[0] != name_key(obs.user_id):
        return False
    me = memory.get(own_id(memory.tenant_id, "self", obs.user_id))
    full = {name_key(n) for n in (me.names if me else []) if len(n.split()) > 1}
    return not full or name_key(obs.speaker) in full


def _not_yet_linked(memory: EntityMemory, observations: list[Observation]) -> list[Observation]:
    """The observations to link; those already stored with their entities (a redelivered batch) take them back."""
    if not observations:
        return []
    found = memory.rt.vectors.retrieve(OBSERVATIONS, [o.id for o in observations])
    stored = {str(r.id): r.payload or {} for r in found}
    todo = []
    for obs in observations:
        p = stored.get(str(obs.id))
        faces = (p or {}).get("faces") or []
        done = (
            p is not None
            and len(faces) == len(obs.faces)
            and all(f.get("entity_id") for f in faces)
            and (obs.voice_embedding is None or p.get("entity_ids"))
        )
        if not done:
            todo.append(obs)
            continue
        obs.entity_ids = sorted({*obs.entity_ids, *p["entity_ids"]})
        obs.speaker_label = p.get("speaker_label", obs.speaker_label)  # its recording-wide label
        for voice, old in zip(obs.speaker_voices, p.get("speaker_voices") or [], strict=False):
            voice.speaker_label = old.get("speaker_label", voice.speaker_label)
        for face, old in zip(obs.faces, faces, strict=True):
            face.entity_id = old["entity_id"]
    return todo


def _voices(memory: EntityMemory, observations: list[Observation]) -> dict[str, list[uuid.UUID]]:
    """Link each speaker cluster's voice to an entity (``_link_chunk``, chunk by chunk) and give it its
    recording-wide speaker label (``_recording_speakers``); returns {observation id: its voices' entity ids, the
    main speaker's first}. An audio observation is one utterance of its cluster; a clip segment carries every
    speaker's voice (``speaker_voices``), each its own cluster."""
    clusters: dict[str, list[tuple[Observation, list[float], float]]] = {}
    label_of: dict[str, tuple[str, int, str]] = {}  # cluster key -> (event id, segment, chunk-local label)
    for obs in observations:
        voices = [(v.speaker_label, v.embedding, v.seconds) for v in obs.speaker_voices]
        if not voices and obs.voice_embedding is not None:
            voices = [(obs.speaker_label, obs.voice_embedding, (obs.end_s or 0.0) - (obs.start_s or 0.0))]
        for label, embedding, seconds in voices:
            key = f"{obs.event_id}:{obs.segment_index}:{label}" if label else str(obs.id)
            clusters.setdefault(key, []).append((obs, embedding, max(seconds, 1e-3)))
            if label:
                label_of[key] = (str(obs.event_id), obs.segment_index, label)
    chunks: dict[str, dict[str, np.ndarray]] = {}
    for key, members in clusters.items():
        mean = np.average([e for _, e, _ in members], axis=0, weights=[w for _, _, w in members])
        chunk = key.rpartition(":")[0] if key in label_of else key
        chunks.setdefault(chunk, {})[key] = mean / max(float(np.linalg.norm(mean)), 1e-12)
    out: dict[str, list[uuid.UUID]] = {}
    linked: dict[str, Entity] = {}
    for voices in chunks.values():
        for key, entity in _link_chunk(memory, voices).items():
            members = clusters[key]
            memory.add_sample(entity, "voice", key, voices[key], min(o.captured_at.timestamp() for o, _, _ in members))
            linked[key] = entity
            for obs, _, _ in members:
                memory.add_observation(entity, obs)
                if entity.id not in out.setdefault(str(obs.id), []):
                    out[str(obs.id)].append(entity.id)
    _recording_speakers(memory, {k: (label_of[k], linked[k], clusters[k]) for k in label_of})
    return out


def _link_chunk(memory: EntityMemory, voices: dict[str, np.ndarray]) -> dict[str, Entity]:
    """The entity of each speaker cluster of one recording chunk ({cluster key: its voice, L2-normalised}): the
    nearest voice entity with cosine similarity ≥ ``entity_voice_similarity``, unless

    - the chunk's clustering separated them: an entity holding another of this chunk's speakers is never a
      candidate, and two clusters of the chunk never take one entity (the more similar wins it): a cannot-link
      constraint (``entities.cannot_link``);
    - the match is not clear: a second entity within ``entity_voice_margin`` of the best.

    In a later chunk of a recording, a voice of an entity already heard in an earlier chunk of it is one speaker
    at the recording's own clustering similarity (1 - ``speaker_distance_threshold``): same room, same microphone.

    Such a voice founds its own entity (people merge later by name, ``engram entities --merge`` or the web app).
    A redelivered cluster takes back the entity it founded or joined before."""
    s = memory.rt.settings
    alike = 1.0 - s.speaker_distance_threshold  # what the recording's own clustering calls one speaker
    chosen: dict[str, Entity] = {}
    pairs: list[tuple[float, str, Entity]] = []
    for key, voice in voices.items():
        found = [
            (e, sim)
            for e, sim in memory.candidates("voice", voice, 5, min(alike, s.entity_voice_similarity))
            if not _separated(e, key) and (sim >= s.entity_voice_similarity or _same_recording(e, key))
        ]
        again = memory.get(founded_id(memory.tenant_id, "voice", key)) or next(
            (e for e, _ in found if f"voice:{key}" in e.recent_keys), None
        )
        if again is not None:
            chosen[key] = again
        elif found and (len(found) == 1 or found[0][1] - found[1][1] >= s.entity_voice_margin):
            pairs.append((found[0][1], key, found[0][0]))
    taken = {e.id for e in chosen.values()}
    for _, key, entity in sorted(pairs, key=lambda p: -p[0]):
        if entity.id not in taken:
            chosen[key] = entity
            taken.add(entity.id)
    for key in voices:
        if key not in chosen:
            chosen[key] = memory.create(founded_id(memory.tenant_id, "voice", key))
    return chosen


def _same_recording(entity: Entity, key: str) -> bool:
    """True when ``entity`` holds a voice of another chunk of cluster ``key``'s recording."""
    chunk = key.rpartition(":")[0]
    event = chunk.partition(":")[0]
    return bool(chunk) and any(c != chunk and c.partition(":")[0] == event for c in voice_chunks(entity))


def _separated(entity: Entity, key: str) -> bool:
    """True when ``entity`` holds a voice that the clustering of cluster ``key``'s chunk labelled otherwise."""
    chunk, _, label = key.rpartition(":")
    return bool(voice_chunks(entity).get(chunk, set()) - {label})


def _recording_speakers(memory: EntityMemory, clusters: dict) -> None:
    """Relabel chunk-local speaker clusters with labels that hold across the chunks of a recording: a cluster
    whose voice entity already has a label in this recording takes it; otherwise it keeps its local label in
    the first chunk (``spk1``) and is ``spk1@3`` in chunk 3 (first heard as ``spk1`` there), and its entity
    keeps that label for the recording's later chunks. Two clusters of one chunk that link to one entity stay
    apart (the first, who talks longest, takes the entity's label). ``clusters``: {cluster key: ((event id,
    segment index, local label), entity, [(observation, voice, seconds)])}. Changes ``speaker_label`` and
    ``speaker_voices`` labels in place. Chunks linked out of order (distributed workers) may number a speaker
    by a later chunk, but still consistently."""
    by_chunk: dict[tuple[str, int], list] = {}
    for (event, segment, local), entity, members in clusters.values():
        by_chunk.setdefault((event, segment), []).append((local, entity, members))
    relabel: dict[tuple[str, int, str], str] = {}
    for (event, segment), found in sorted(by_chunk.items(), key=lambda kv: kv[0][1]):
        taken: set[str] = set()
        for local, entity, _members in sorted(found, key=lambda c: -sum(w for _, _, w in c[2])):
            own = local if segment == 0 else f"{local}@{segment}"
            label = memory.recording_speaker(entity, event, own)
            if label in taken:
                label = own
            taken.add(label)
            relabel[(event, segment, local)] = label
    seen: set[str] = set()
    for _, _, members in clusters.values():
        for obs, _, _ in members:
            if str(obs.id) in seen:
                continue
            seen.add(str(obs.id))
            chunk = (str(obs.event_id), obs.segment_index)
            if obs.speaker_label:
                obs.speaker_label = relabel.get((*chunk, obs.speaker_label), obs.speaker_label)
            for v in obs.speaker_voices:
                v.speaker_label = relabel.get((*chunk, v.speaker_label), v.speaker_label)


def _faces(memory: EntityMemory, observations: list[Observation]) -> dict[str, set[uuid.UUID]]:
    """Cluster the faces of the batch, link each cluster to an entity; returns {observation id: face entity ids}."""
    faces = [(obs, i, face) for obs in observations for i, face in enumerate(obs.faces)]
    if not faces:
        return {}
    labels = cluster_faces([f.embedding for _, _, f in faces], memory.rt.settings.entity_face_distance)
    out: dict[str, set[uuid.UUID]] = {}
    for label in dict.fromkeys(labels.tolist()):
        members = [faces[k] for k in np.flatnonzero(labels == label)]
        keys = [f"{obs.id}#{i}" for obs, i, _ in members]
        mean = np.mean([f.embedding for _, _, f in members], axis=0)
        entity = (
            memory.nearest("face", mean)
            or memory.get(founded_id(memory.tenant_id, "face", keys[0]))
            or memory.create(founded_id(memory.tenant_id, "face", keys[0]))
        )
        for key, (obs, _, face) in zip(keys, members, strict=True):
            at = obs.captured_at.timestamp() + (face.frame_s or 0.0) - (obs.start_s or 0.0)
            memory.add_sample(entity, "face", key, np.asarray(face.embedding), at)
            memory.add_observation(entity, obs)
            face.entity_id = str(entity.id)
            out.setdefault(str(obs.id), set()).add(entity.id)
    return out


def _equivalences(
    memory: EntityMemory,
    observations: list[Observation],
    voice_of: dict[str, list[uuid.UUID]],
    face_entities: dict[str, set[uuid.UUID]],
) -> None:
    """Count face-voice co-occurrences per observation (every face with every voice of it), then merge the pairs
    that reach the setting and are each other's most frequent partner."""
    pairs: dict[tuple[uuid.UUID, uuid.UUID], int] = {}
    for obs in observations:
        for v in {uuid.UUID(memory.resolve(str(v))) for v in voice_of.get(str(obs.id), [])}:
            for f in {uuid.UUID(memory.resolve(str(f))) for f in face_entities.get(str(obs.id), set())}:
                if f != v:
                    pairs[(f, v)] = memory.cooccur(memory.entities[f], memory.entities[v], str(obs.id))
    for (f, v), count in pairs.items():
        face = memory.entities.get(uuid.UUID(memory.resolve(str(f))))
        voice = memory.entities.get(uuid.UUID(memory.resolve(str(v))))
        if face is None or voice is None or face.id == voice.id or count < memory.rt.settings.entity_cooccurrence_merge:
            continue
        if _mutual_best(face, voice) and _mutual_best(voice, face) and not cannot_link(face, voice):
            keep, drop = sorted((face, voice), key=lambda e: (ROLE_RANK[e.role], not e.names, e.first_seen_ts or 0.0))
            memory.merge(keep, drop, f"face-voice co-occurrence in {count} segments")


def _mutual_best(a: Entity, b: Entity) -> bool:
    """True when ``b`` is ``a``'s partner in strictly more observations than any other."""
    counts = Counter({other: len(seen) for other, seen in a.cooccurrence.items()})
    top = counts.most_common(2)
    return bool(top) and top[0][0] == str(b.id) and (len(top) == 1 or top[0][1] > top[1][1])


def link_batches(rt: Runtime, batches: list[EmbeddedBatch]) -> list[EmbeddedBatch]:
    """Link the observations of ``batches`` (segments of one or many events) together: one ``link_observations``
    per tenant (one name look-up, one entity save), instead of one per segment. Changes the observations in
    place and returns ``batches``."""
    by_tenant: dict[str, list[Observation]] = {}
    for batch in batches:
        by_tenant.setdefault(batch.job.event.tenant_id, []).extend(item.observation for item in batch.items)
    for tenant, observations in by_tenant.items():
        if observations:
            link_observations(EntityMemory(rt, tenant), observations)
    return batches
