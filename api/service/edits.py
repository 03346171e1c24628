"""The embedded service's changes and derived media for the web app (issue 42): a user's correction of a memory,
"not this person", an entity's samples and a sample's media are ``workers.memory.corrections``' (the query
worker's request tasks run the same functions in the distributed mode); here are a failed event run again and
the samples as the service layer's ``SampleRef``.

Each function takes the workers' ``Runtime`` of a call that holds the store (``EmbeddedService._session``).
"""

from __future__ import annotations

import uuid
from typing import Any

from engram.api.service.base import SampleRef
from engram.schemas.events import MediaEvent
from engram.workers.ingest import ingest
from engram.workers.memory import corrections
from engram.workers.memory.corrections import (
    FACE_MARGIN,
    FACE_SIDE,
    VOICE_CLIP_S,
    audio_span,
    face_crop,
    memories_from,
    sample_media,
    split_entity,
    update_memory,
)

__all__ = [
    "FACE_MARGIN",
    "FACE_SIDE",
    "VOICE_CLIP_S",
    "audio_span",
    "entity_samples",
    "face_crop",
    "memories_from",
    "retry_event",
    "sample_media",
    "split_entity",
    "update_memory",
]


def entity_samples(rt: Any, tenant_id: str, entity_id: uuid.UUID) -> list[SampleRef] | None:
    """The entity's face and voice samples, newest first (``workers.memory.corrections.entity_samples``), or None
    when it is no entity of the tenant's."""
    found = corrections.entity_samples(rt, tenant_id, entity_id)
    return None if found is None else [SampleRef(**s) for s in found]


# --- the ledger -------------------------------------------------------------------------------------------------


def retry_event(rt: Any, tenant_id: str, event_id: uuid.UUID) -> Any:
    """Run a failed event of the tenant again (``Ledger.retry``: queued again, the segments already stored kept):
    inline on the embedded default, published to the workers otherwise. Returns its ledger record after (on the
    embedded default: done, skipped or failed again), or None when it is unknown, another tenant's or not
    failed."""

    rec = rt.ledger.get(event_id)
    if rec is None or rec.tenant_id != tenant_id:
        return None
    event: MediaEvent | None = rt.ledger.retry(event_id)
    if event is None:
        return None
    if rt.settings.embedded:
        from engram.api.local import run_event  # the pipeline (perceive's models, scipy, OpenCV): a retry only

        return run_event(rt, event)
    ingest.apply_async(args=[event.model_dump(mode="json")])
    return rt.ledger.get(event_id)
