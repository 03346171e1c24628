"""Corrections and derived media of what the store holds, for the service layer (issue 42): a user's correction of a
memory (a new version that supersedes the old one, kept as history), "not this person" (one face or voice sample of
an entity moved into an entity of its own), an entity's samples, and a sample's media (a face cropped from its frame,
a few seconds of a voice from its recording).

Each function takes the workers' ``Runtime`` of the process that owns the store: the embedded service's call that
holds it (``api.service.edits``), or the query worker's request tasks in the distributed mode (``workers.admin``).
Derived media are made once and kept beside the event's other derived objects
(``derived/<tenant>/<event id>/face-…`` and ``voice-…``), so forgetting the user removes them.
"""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np

from engram.schemas.memories import MEMORY_MODELS, MemoryType
from engram.schemas.memory_admin import MemoryRecord
from engram.workers.codecs import SAMPLE_RATE, wav_bytes
from engram.workers.memory.entities import EntityMemory, Modality, founded_id
from engram.workers.memory.points import memory_points
from engram.workers.memory.records import get_memory, to_record
from engram.workers.stores import models as qm
from engram.workers.stores.objects import ObjectNotFound
from engram.workers.stores.vectors import ENTITIES, OBSERVATIONS, collection_for, tenant_filter

#: Longest voice clip, seconds; pixels of context around a face box (a fraction of its size); a crop's longer side.
VOICE_CLIP_S = 6.0
FACE_MARGIN = 0.25
FACE_SIDE = 160
#: The payload fields of an observation a sample's links need (whose, which recording chunk, when, which people).
LINK_FIELDS = (
    "tenant_id",
    "event_id",
    "segment_index",
    "start_s",
    "end_s",
    "start_ts",
    "end_ts",
    "entity_ids",
    "faces",
)
#: The field a correction replaces, per memory type (what the memory's text is).
TEXT_FIELD = {
    MemoryType.episodic: "summary",
    MemoryType.semantic: "summary",
    MemoryType.procedural: "summary",
    MemoryType.resource: "summary",
    MemoryType.core: "value",
    MemoryType.knowledge_vault: "caption",
}


# --- corrections ------------------------------------------------------------------------------------------------


def update_memory(rt: Any, tenant_id: str, memory_id: uuid.UUID, text: str) -> MemoryRecord | None:
    """Store ``text`` as a new version of memory ``memory_id`` (same type, user, evidence and sources; fresh
    strength) and mark the old one ``superseded_by`` the new one with ``valid_to`` now: never overwritten.
    None when the id is no memory of the tenant's. Raises ValueError for an empty text, an observation (what
    was captured is not corrected) or a memory already superseded."""

    text = text.strip()
    if not text:
        raise ValueError("a correction cannot be empty")
    old = get_memory(rt, tenant_id, memory_id)
    if old is None:
        return None
    if old.memory_type is MemoryType.observation:
        raise ValueError("an observation is what was captured: it cannot be edited (delete it instead)")
    stored = rt.vectors.retrieve(collection_for(old.memory_type), [memory_id])[0].payload or {}
    if stored.get("superseded_by"):
        raise ValueError("this version was already superseded: edit the newest one")
    model = MEMORY_MODELS[old.memory_type]
    now = datetime.now(UTC)
    fields = {k: v for k, v in stored.items() if k in model.model_fields}
    fields.update(
        {
            TEXT_FIELD[old.memory_type]: text,
            "id": uuid.uuid4(),
            "created_at": now,
            "updated_at": now,
            "strength": 1.0,
            "recalls": 0,
            "last_recalled_at": None,
            "archived": False,
            "superseded_by": None,
            "valid_to": None,
        }
    )
    if "details" in model.model_fields:
        fields["details"] = ""
    new = model.model_validate(fields)
    extra = {k: stored[k] for k in ("kinds", "device_ids", "apps", "entity_ids") if k in stored}
    extra["corrected_from"] = str(memory_id)
    collection = collection_for(old.memory_type)
    batch: list[Any] = [new]  # memory_points takes any type's memory (its index text and provenance)
    rt.vectors.upsert(collection, memory_points(rt, batch, [extra]))
    rt.vectors.set_payload(collection, [memory_id], {"superseded_by": str(new.id), "valid_to": now.isoformat()})
    point = rt.vectors.retrieve(collection, [new.id])[0]
    return to_record(old.memory_type, point)


# --- entities ---------------------------------------------------------------------------------------------------


def _entity_payload(rt: Any, tenant_id: str, entity_id: uuid.UUID) -> dict | None:

    got = rt.vectors.retrieve(ENTITIES, [entity_id])
    payload = (got[0].payload or {}) if got else {}
    return payload if payload.get("tenant_id") == tenant_id else None


def _voice_observations(rt: Any, tenant_id: str, key: str, linked: list[str]) -> list[dict]:
    """The stored observations (payloads with ``id``) of voice sample ``key`` (``<event>:<segment>:<label>``, or
    an observation id) among ``linked`` ids, longest first."""

    event, _, rest = key.partition(":")
    segment = rest.partition(":")[0]
    ids = [key] if not rest else linked
    out = []
    for rec in rt.vectors.retrieve(OBSERVATIONS, ids, with_payload=list(LINK_FIELDS)):
        p = dict(rec.payload or {})
        if p.get("tenant_id") != tenant_id:
            continue
        if rest and (p.get("event_id") != event or str(p.get("segment_index")) != segment):
            continue
        out.append({**p, "id": str(rec.id)})
    return sorted(out, key=lambda p: -((p.get("end_s") or 0.0) - (p.get("start_s") or 0.0)))


def entity_samples(rt: Any, tenant_id: str, entity_id: uuid.UUID) -> list[dict[str, Any]] | None:
    """The entity's face and voice samples (at most ``entity_samples`` each, newest first), or None when it is
    no entity of the tenant's. Each is ``{"key", "modality" ("face" | "voice"), "at_ts" (epoch seconds),
    "observation_id" (None when none is linked any more)}``: JSON, as a request task answers it, and the fields of
    ``api.service.base.SampleRef``."""
    payload = _entity_payload(rt, tenant_id, entity_id)
    if payload is None:
        return None
    linked = list(payload.get("observation_ids") or [])
    out = []
    for modality in ("face", "voice"):
        for s in sorted(payload.get(f"{modality}_samples") or [], key=lambda s: -float(s.get("at_ts") or 0)):
            key = str(s.get("key"))
            if modality == "face":
                oid: str | None = key.partition("#")[0]
            else:
                found = _voice_observations(rt, tenant_id, key, linked)
                oid = found[0]["id"] if found else None
            out.append({"key": key, "modality": modality, "at_ts": float(s.get("at_ts") or 0.0), "observation_id": oid})
    return out


def split_entity(rt: Any, tenant_id: str, entity_id: uuid.UUID, sample_key: str) -> Any:
    """ "Not this person": move the face or voice sample ``sample_key`` of entity ``entity_id`` into a new
    entity (unnamed), with the observations it came from relinked (their ``entity_ids``, the face's
    ``entity_id``); counts move with it. Returns the new ``Entity``. Raises KeyError when the entity or the
    sample is unknown."""

    memory = EntityMemory(rt, tenant_id)
    entity = memory.get(entity_id)
    if entity is None:
        raise KeyError(f"no entity {entity_id}")
    kinds: tuple[tuple[Modality, list], ...] = (("face", entity.face_samples), ("voice", entity.voice_samples))
    modality, sample = next(((m, s) for m, samples in kinds for s in samples if s.key == sample_key), (None, None))
    if sample is None or modality is None:
        raise KeyError(f"no sample {sample_key[:80]} of this entity")
    if modality == "face":
        entity.face_samples.remove(sample)
        entity.face_count = max(0, entity.face_count - 1)
        got = rt.vectors.retrieve(OBSERVATIONS, [sample_key.partition("#")[0]], with_payload=list(LINK_FIELDS))
        obs = [{**(r.payload or {}), "id": str(r.id)} for r in got]
    else:
        entity.voice_samples.remove(sample)
        entity.voice_count = max(0, entity.voice_count - 1)
        obs = _voice_observations(rt, tenant_id, sample_key, entity.observation_ids)
    new_id = founded_id(tenant_id, modality, sample_key)
    if new_id == entity.id or memory.get(new_id) is not None:
        new_id = uuid.uuid5(new_id, f"split\x1f{entity.id}")
    new = memory.create(new_id)
    memory.add_sample(new, modality, sample_key, np.asarray(sample.vector), sample.at_ts)
    memory.dirty.add(entity.id)
    changes = {}
    face_index = int(sample_key.partition("#")[2] or -1) if modality == "face" else -1
    for p in obs:
        if p.get("tenant_id") != tenant_id:
            continue
        faces = [dict(f) for f in p.get("faces") or []]
        if 0 <= face_index < len(faces):
            faces[face_index]["entity_id"] = str(new.id)
        still = any(f.get("entity_id") == str(entity.id) for f in faces)
        ids = {*(p.get("entity_ids") or []), str(new.id)}
        if not still:
            ids.discard(str(entity.id))
            if p["id"] in entity.observation_ids:
                entity.observation_ids.remove(p["id"])
                entity.observation_count = max(0, entity.observation_count - 1)
        start = float(p.get("start_ts") or sample.at_ts)
        new.first_seen_ts = min(new.first_seen_ts or start, start)
        new.last_seen_ts = max(new.last_seen_ts or start, float(p.get("end_ts") or start))
        new.observation_ids.append(p["id"])
        new.observation_count += 1
        changes[p["id"]] = {"entity_ids": sorted(ids), **({"faces": faces} if faces else {})}
    memory.save()
    rt.vectors.set_payloads(OBSERVATIONS, changes)
    return new


# --- a sample's media -------------------------------------------------------------------------------------------


def face_crop(picture: Any, box: tuple[float, float, float, float], side: int = FACE_SIDE) -> bytes:
    """A WebP of ``box`` (x0, y0, x1, y1 in the picture's pixels) cut from a PIL image with ``FACE_MARGIN`` of
    context on each side, at most ``side`` px on its longer side. Raises ValueError for an empty box."""
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    if w <= 0 or h <= 0:
        raise ValueError("an empty face box")
    m = FACE_MARGIN
    area = (
        max(0, int(x0 - m * w)),
        max(0, int(y0 - m * h)),
        min(picture.width, int(x1 + m * w) + 1),
        min(picture.height, int(y1 + m * h) + 1),
    )
    crop = picture.crop(area).convert("RGB")
    crop.thumbnail((side, side))
    out = io.BytesIO()
    crop.save(out, "WEBP", quality=75)
    return out.getvalue()


def _frame_at(path: Any, at_s: float) -> Any:
    """The video frame of ``path`` nearest after ``at_s`` seconds, as a PIL image (PyAV)."""
    import av  # PyAV: only when a clip's face is cropped

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        if stream.time_base:
            container.seek(int(at_s / stream.time_base), stream=stream, backward=True)
        last = None
        for frame in container.decode(stream):
            last = frame
            if frame.time is not None and frame.time >= at_s - 1e-3:
                break
        if last is None:
            raise ValueError("the video has no frame there")
        return last.to_image()


def audio_span(path: Any, start: float, end: float) -> np.ndarray:
    """``[start, end)`` seconds of a recording's audio as float32 mono at 16 kHz: PyAV seeks near ``start`` and
    decodes only up to ``end``, so a clip late in a long recording costs about what an early one does. Raises
    av's errors for a file it cannot read."""
    import av  # PyAV: only when a voice clip is made

    resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
    parts: list[np.ndarray] = []
    first: float | None = None
    with av.open(str(path), metadata_errors="ignore") as container:
        container.seek(int(start * av.time_base))  # lands on a frame at or before start
        for frame in container.decode(audio=0):
            if frame.time is not None and frame.time >= end:
                break
            for out in resampler.resample(frame):
                first = frame.time if first is None and frame.time is not None else first
                parts.append(out.to_ndarray().reshape(-1).astype(np.float32) / 32768.0)
    audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    skip = int(max(0.0, start - (first if first is not None else start)) * SAMPLE_RATE)
    return audio[skip : skip + int(max(0.0, end - start) * SAMPLE_RATE)]


def sample_media(rt: Any, tenant_id: str, entity_id: uuid.UUID, sample_key: str) -> tuple[str, str]:
    """The object key and media type of a sample's media, made on first request: a face crop (WebP) from its
    observation's picture or video frame, or a WAV of up to ``VOICE_CLIP_S`` seconds of the voice's longest
    utterance. Raises KeyError for an unknown entity or sample, LookupError (with the reason) when the media
    cannot be made (the original is gone, the face has no box, the recording cannot be decoded)."""
    import av  # PyAV and Pillow: only when a sample's media is made
    from PIL import Image

    samples = entity_samples(rt, tenant_id, entity_id)
    ref = next((s for s in samples or [] if s["key"] == sample_key), None)
    if ref is None:
        raise KeyError(f"no sample {sample_key[:80]} of entity {entity_id}")
    if ref["observation_id"] is None:
        raise LookupError("the observation this sample came from is no longer stored")
    got = rt.vectors.retrieve(OBSERVATIONS, [ref["observation_id"]])
    p = (got[0].payload or {}) if got else {}
    if p.get("tenant_id") != tenant_id or not p.get("object_key"):
        raise LookupError("the observation this sample came from is no longer stored")
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in sample_key)[:160]
    if ref["modality"] == "face":
        key, mime = f"derived/{tenant_id}/{p.get('event_id')}/face-{safe}.webp", "image/webp"
    else:
        key, mime = f"derived/{tenant_id}/{p.get('event_id')}/voice-{safe}.wav", "audio/wav"
    if rt.objects.exists(key):
        return key, mime
    try:
        with rt.objects.local_file(p["object_key"]) as path:
            if ref["modality"] == "face":
                faces = p.get("faces") or []
                index = int(sample_key.partition("#")[2] or 0)
                if index >= len(faces):
                    raise LookupError("the face's box is not stored with its observation")
                face = faces[index]
                if face.get("frame_s") is not None:
                    picture = _frame_at(path, float(face["frame_s"]))
                else:
                    picture = Image.open(path)
                data = face_crop(picture, tuple(face["box"]))
            else:
                start = float(p.get("start_s") or 0.0)
                end = min(float(p.get("end_s") or start + VOICE_CLIP_S), start + VOICE_CLIP_S)
                data = wav_bytes(audio_span(path, start, end))
    except (ObjectNotFound, FileNotFoundError) as exc:
        raise LookupError("the original is no longer stored (deleted, or removed by retention)") from exc
    except (OSError, ValueError, av.error.FFmpegError) as exc:
        raise LookupError(f"the original cannot be read: {type(exc).__name__}") from exc
    rt.objects.put_bytes(key, data, mime)
    return key, mime


#: The most memories an item's page lists as fed by an observation, and the types drawn from observations.
MEMORIES_FED = 50
FED = (MemoryType.episodic, MemoryType.semantic, MemoryType.procedural, MemoryType.resource, MemoryType.core)


def memories_from(rt: Any, tenant_id: str, observation_id: uuid.UUID, limit: int = MEMORIES_FED) -> list[MemoryRecord]:
    """The tenant's memories drawn from the observation ``observation_id`` (its id in their
    ``provenance.observation_ids``), current versions only (none superseded), newest content first, at most
    ``limit``: the "memories it fed" of an item's page. One filtered scroll per memory type."""
    fed = qm.FieldCondition(key="provenance.observation_ids", match=qm.MatchAny(any=[str(observation_id)]))
    out = []
    for mtype in FED:
        flt = tenant_filter(tenant_id)
        flt.must = [*(flt.must or []), fed]  # type: ignore[misc]  # a list, as tenant_filter makes it
        for point in rt.vectors.scroll(collection_for(mtype), flt):
            if not (point.payload or {}).get("superseded_by"):
                out.append(to_record(mtype, point))
    out.sort(key=lambda r: r.time.timestamp() if r.time else 0.0, reverse=True)
    return out[:limit]
