"""Stage ``link`` (queue ``link``): link observations to persistent entities.

This first version links chat speakers by name: each distinct speaker of a tenant is one ``person``
entity (id: UUIDv5 of tenant and normalised name) in the ``entities`` collection, with first/last seen
times. Faces and voices (M3-Agent's entity-centric memory) join these entities in the perception issue.
"""

from __future__ import annotations

import uuid

from qdrant_client import models as qm

from schemas.jobs import EmbeddedBatch
from workers.app import app
from workers.embed import embed_texts
from workers.ids import ENGRAM_NAMESPACE
from workers.runtime import STAGE_TASK_OPTIONS, runtime, stage
from workers.vectorstore import DENSE, ENTITIES


def entity_id(tenant_id: str, name: str) -> uuid.UUID:
    """The id of the person entity called ``name`` in ``tenant_id`` (case and spacing ignored)."""
    return uuid.uuid5(ENGRAM_NAMESPACE, f"{tenant_id}\x1fperson\x1f{' '.join(name.lower().split())}")


@app.task(name="workers.link.link", **STAGE_TASK_OPTIONS)
def link(batch: EmbeddedBatch) -> EmbeddedBatch:
    """Attach entity ids to the batch's observations and upsert the entities they name."""
    rt = runtime()
    event = batch.job.event
    with stage(rt, event, "link"):
        seen: dict[uuid.UUID, dict] = {}
        for item in batch.items:
            obs = item.observation
            if not obs.speaker:
                continue
            eid = entity_id(obs.tenant_id, obs.speaker)
            obs.entity_ids = sorted({*obs.entity_ids, str(eid)})
            ts = obs.captured_at.timestamp()
            cur = seen.setdefault(eid, {"name": obs.speaker, "first": ts, "last": ts})
            cur["first"], cur["last"] = min(cur["first"], ts), max(cur["last"], ts)
        if seen:
            existing = {uuid.UUID(str(p.id)): p.payload for p in rt.vectors.retrieve(ENTITIES, list(seen))}
            names = [v["name"] for v in seen.values()]
            vecs = embed_texts(rt, names)
            points = []
            for (eid, cur), vec in zip(seen.items(), vecs, strict=True):
                old = existing.get(eid) or {}
                points.append(qm.PointStruct(id=str(eid), vector={DENSE: vec.tolist()}, payload={
                    "tenant_id": event.tenant_id, "entity_type": "person",
                    "names": sorted({*old.get("names", []), cur["name"]}),
                    "first_seen_ts": min(old.get("first_seen_ts", cur["first"]), cur["first"]),
                    "last_seen_ts": max(old.get("last_seen_ts", cur["last"]), cur["last"]),
                }))
            rt.vectors.upsert(ENTITIES, points)
    return batch
