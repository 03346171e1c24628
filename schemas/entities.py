"""Entities: the persistent people of M3-Agent's entity-centric memory (Long et al., "Seeing, Listening,
Remembering, and Reasoning: A Multimodal Agent with Long-Term Memory", 2025), one Qdrant point each in the
``entities`` collection.

An entity gathers what identifies one person across recordings: a bounded sample of face embeddings (dlib,
128-d, Euclidean) and of voice embeddings (Resemblyzer, 256-d, cosine), the names it was called by, when it was
first and last seen, and links to the observations it appears in. Nothing here does I/O (``workers.memory.entities``
reads and writes them).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

#: Who an entity is to the user: the user themself (``self``: one per user, the chat speakers ``user``/``human`` and
#: the user id), the assistant of an assistant export (``assistant``: one per tenant, the speakers ``assistant``,
#: ``system``, ``tool``), or anyone else (``person``).
EntityRole = Literal["self", "assistant", "person"]


class EntitySample(BaseModel):
    """One embedding an entity was linked with: ``key`` names its source (``<observation id>#<face index>`` for a
    face, ``<event id>:<segment>:<speaker label>`` for a voice cluster), ``vector`` the embedding (128 floats for
    a face, 256 L2-normalised floats for a voice), ``at_ts`` when it was seen (epoch seconds)."""

    key: str
    vector: list[float]
    at_ts: float


class MergeRecord(BaseModel):
    """An entity merged into this one: its id and names, when (UTC) and why (``manual``, ``face-voice
    co-occurrence in N segments``, ...)."""

    entity_id: str
    names: list[str] = Field(default_factory=list)
    at: AwareDatetime
    reason: str

    @field_validator("at")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        return value.astimezone(UTC)


class Entity(BaseModel):
    """One person: one ``entities`` point. Its payload is this model without the sample vectors (plus
    ``name_keys``, the normalised names filters match); the sample vectors are the point's multivectors.

    ``face_samples``/``voice_samples`` are the most recent embeddings linked (at most ``entity_samples`` each,
    oldest dropped first); their means are the entity's named vectors ``face`` and ``voice`` that nearest-entity
    search runs on. ``face_count``/``voice_count``/``observation_count`` count every face, voice cluster and
    observation ever linked; ``observation_ids`` keeps the most recent links and ``recent_keys`` the most recent
    contribution keys (observation ids, face and voice sample keys), so a redelivered batch adds nothing twice.
    ``cooccurrence`` maps another entity's id to the observations (clip segments) where this entity's face and
    that one's voice, or the other way round, were seen together (M3-Agent's face-voice equivalence evidence).
    """

    model_config = ConfigDict(extra="ignore")

    id: uuid.UUID
    tenant_id: str
    entity_type: Literal["person"] = "person"
    role: EntityRole = Field("person", description="``self`` (the user: ``user_id``), ``assistant`` or ``person``.")
    user_id: str | None = Field(None, description="The user this entity is, for the ``self`` role.")
    names: list[str] = Field(default_factory=list)
    face_samples: list[EntitySample] = Field(default_factory=list)
    voice_samples: list[EntitySample] = Field(default_factory=list)
    face_count: int = Field(0, ge=0)
    voice_count: int = Field(0, ge=0)
    observation_count: int = Field(0, ge=0)
    observation_ids: list[str] = Field(default_factory=list)
    recent_keys: list[str] = Field(default_factory=list)
    cooccurrence: dict[str, list[str]] = Field(default_factory=dict)
    first_seen_ts: float | None = None
    last_seen_ts: float | None = None
    merged_from: list[MergeRecord] = Field(default_factory=list)
    recording_speakers: dict[str, str] = Field(
        default_factory=dict,
        description="The speaker label this entity's voice has in each recent recording "
        "(event id -> label), so every chunk of a long recording gives one voice one label (``workers.link``).",
    )

    @property
    def label(self) -> str:
        """The entity's names joined, or its short id when it has none."""
        return ", ".join(self.names) or f"person {str(self.id)[:8]}"


class EntitySummary(BaseModel):
    """What ``engram entities`` lists: an entity's id, names, counts and first/last seen (UTC)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "c0ffee00-1234-4abc-8def-0123456789ab",
                    "role": "person",
                    "names": ["Maria"],
                    "faces": 12,
                    "voices": 3,
                    "observations": 41,
                    "first_seen": "2024-04-11T08:02:00Z",
                    "last_seen": "2024-05-02T16:45:00Z",
                    "merged_from": [],
                },
            ]
        }
    )

    id: uuid.UUID = Field(description="The entity's id.")
    role: EntityRole = Field(
        "person", description="'self' (the user), 'assistant' (of an assistant export) or 'person'."
    )
    names: list[str] = Field(
        description="Names it was called by, the chosen one first; empty for a face or voice never named."
    )
    faces: int = Field(description="Faces ever linked to it.")
    voices: int = Field(description="Voice clusters ever linked to it.")
    observations: int = Field(description="Observations ever linked to it.")
    first_seen: AwareDatetime | None = Field(None, description="When it was first seen (UTC).")
    last_seen: AwareDatetime | None = Field(None, description="When it was last seen (UTC).")
    merged_from: list[str] = Field(default_factory=list, description="Ids of the entities merged into it.")


class EntityList(BaseModel):
    """A tenant's entities (``GET /v1/entities``), most observations first."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "items": [
                        {
                            "id": "c0ffee00-1234-4abc-8def-0123456789ab",
                            "role": "person",
                            "names": ["Maria"],
                            "faces": 12,
                            "voices": 3,
                            "observations": 41,
                            "first_seen": "2024-04-11T08:02:00Z",
                            "last_seen": "2024-05-02T16:45:00Z",
                            "merged_from": [],
                        },
                    ],
                    "total": 1,
                },
            ]
        }
    )

    items: list[EntitySummary] = Field(description="The tenant's entities, most observations first.")
    total: int = Field(ge=0, description="How many there are.")


class EntityMergeRequest(BaseModel):
    """``POST /v1/entities/{id}/merge``: the entity to merge into the one in the path (it is deleted, its
    samples, names, links and counts kept by the other, and every stored reference to it rewritten)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"entity_id": "d00dfeed-5678-4bcd-9ef0-123456789abc", "reason": "same person, seen by the camera"},
            ]
        },
    )

    entity_id: uuid.UUID = Field(description="The entity merged away.")
    reason: str = Field(
        "manual", min_length=1, max_length=200, description="Recorded in the kept entity's ``merged_from``."
    )


class EntitySplitRequest(BaseModel):
    """``POST /v1/entities/{id}/split``: "not this person": the face or voice sample (an ``EntitySample.key``, as
    ``GET /v1/entities/{id}/samples`` lists them) moved off the entity in the path into an entity of its own."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"sample_key": "0b1c2d3e-4f50-5a6b-8c7d-9e0f1a2b3c4d#1"},
            ]
        },
    )

    sample_key: str = Field(min_length=1, max_length=300, description="The sample's key.")


class SampleInfo(BaseModel):
    """One face or voice sample of an entity, with the observation it came from."""

    key: str = Field(description="The sample's key (``<observation id>#<face index>`` for a face).")
    modality: str = Field(description="``face`` or ``voice``.")
    at_ts: float = Field(description="When it was seen or heard, epoch seconds.")
    observation_id: str | None = Field(
        None, description="The observation it came from; null when none is linked any more."
    )


class EntitySampleList(BaseModel):
    """``GET /v1/entities/{id}/samples``: the entity's face and voice samples, newest first per modality."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "items": [
                        {
                            "key": "0b1c2d3e-4f50-5a6b-8c7d-9e0f1a2b3c4d#1",
                            "modality": "face",
                            "at_ts": 1714641000.0,
                            "observation_id": "0b1c2d3e-4f50-5a6b-8c7d-9e0f1a2b3c4d",
                        }
                    ]
                },
            ]
        }
    )

    items: list[SampleInfo] = Field(description="The samples, faces first, newest first.")
