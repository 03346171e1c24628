"""Memory management: one stored item by id, pages of a type, a user's export, and what forgetting did.

Every item is read from the vector store as stored (its payload), tenant-scoped, with secrets removed:
a knowledge-vault entry comes without its ``secret_ciphertext`` (revealing a secret is its own call).
"""

from __future__ import annotations

import uuid

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from engram.schemas.events import LedgerRecord
from engram.schemas.memories import MemoryType
from engram.schemas.search import EmptyReason

#: Payload fields never returned by get, list or export (the vault's encrypted secret, vectors' bookkeeping).
HIDDEN_FIELDS = frozenset({"secret_ciphertext", "secret", "consolidated"})


class MemoryRecord(BaseModel):
    """One stored observation or memory. ``text``: what it says (an observation's text, a memory's summary,
    a vault entry's caption, a core block's value). ``time``/``time_end``: the span its content covers (UTC).
    ``payload``: every stored field (provenance included) but ``HIDDEN_FIELDS``."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {
            "id": "8d1c4e7a-2b3f-4c5d-8e9f-0a1b2c3d4e5f",
            "memory_type": "observation",
            "tenant_id": "acme",
            "user_id": "alice",
            "time": "2024-05-02T09:30:00Z",
            "text": "Q2 budget review moved to Friday 3 pm",
            "payload": {"kind": "screenshot", "app": "Firefox", "event_id": "3f2b8c1e-6f0a-4d9b-9a57-0c8e2d6b1a42"},
        },
    ]})

    id: uuid.UUID = Field(description="The observation's or memory's id.")
    memory_type: MemoryType = Field(description="Its collection.")
    tenant_id: str = Field(description="Its tenant.")
    user_id: str | None = Field(None, description="Whose it is.")
    time: AwareDatetime | None = Field(None, description="When its content starts (UTC).")
    time_end: AwareDatetime | None = Field(None, description="When its content ends (UTC).")
    text: str = Field(
        "", description="What it says (an observation's text, a memory's summary, a vault entry's caption, a core "
        "block's value).")
    payload: dict = Field(
        default_factory=dict, description="Every stored field, provenance included, but the vault's encrypted secret "
        "and bookkeeping fields.")


class MemoryPage(BaseModel):
    """A page of one memory type, newest content first: ``total`` items match, ``offset`` were skipped."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {
            "memory_type": "observation",
            "user_id": "alice",
            "total": 1,
            "limit": 50,
            "offset": 0,
            "items": [
                {
                    "id": "8d1c4e7a-2b3f-4c5d-8e9f-0a1b2c3d4e5f",
                    "memory_type": "observation",
                    "tenant_id": "acme",
                    "user_id": "alice",
                    "time": "2024-05-02T09:30:00Z",
                    "text": "Q2 budget review moved to Friday 3 pm",
                    "payload": {
                        "kind": "screenshot",
                        "app": "Firefox",
                        "event_id": "3f2b8c1e-6f0a-4d9b-9a57-0c8e2d6b1a42",
                    },
                },
            ],
        },
    ]})

    memory_type: MemoryType = Field(description="The collection listed.")
    user_id: str | None = Field(None, description="The user the page is limited to; null: every user.")
    total: int = Field(description="Items matching, over all pages.")
    limit: int = Field(description="Items per page asked for.")
    offset: int = Field(description="Items skipped (newest first).")
    items: list[MemoryRecord] = Field(description="This page's items, newest content first.")
    empty: EmptyReason | None = Field(
        None, description="Why nothing matches (total 0): no_data (nothing stored for the tenant), unknown_user "
        "(nothing stored for the user), no_match (there is data, none of this type); null otherwise.")


class UserExport(BaseModel):
    """Everything stored about one user of a tenant: the ledger's events (what was published, its status
    and quarantine reasons) and every observation and memory of every type, each type newest first."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {
            "tenant_id": "acme",
            "user_id": "alice",
            "exported_at": "2024-05-08T12:00:00Z",
            "events": [
                {
                    "event_id": "3f2b8c1e-6f0a-4d9b-9a57-0c8e2d6b1a42",
                    "tenant_id": "acme",
                    "user_id": "alice",
                    "device_id": "laptop-1",
                    "kind": "screenshot",
                    "object_key": "media/acme/5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef.png",
                    "sha256": "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef",
                    "status": "done",
                    "stage": "store",
                    "observations": 1,
                    "updated_at": "2024-05-02T09:30:07Z",
                },
            ],
            "memories": {
                "observation": [
                    {
                        "id": "8d1c4e7a-2b3f-4c5d-8e9f-0a1b2c3d4e5f",
                        "memory_type": "observation",
                        "tenant_id": "acme",
                        "user_id": "alice",
                        "time": "2024-05-02T09:30:00Z",
                        "text": "Q2 budget review moved to Friday 3 pm",
                        "payload": {
                            "kind": "screenshot",
                            "app": "Firefox",
                            "event_id": "3f2b8c1e-6f0a-4d9b-9a57-0c8e2d6b1a42",
                        },
                    },
                ],
            },
        },
    ]})

    tenant_id: str = Field(description="The tenant.")
    user_id: str = Field(description="The exported user.")
    exported_at: AwareDatetime = Field(description="When the export was made (UTC).")
    events: list[LedgerRecord] = Field(
        description="The ledger records of the user's events: what was published, its status and reasons.")
    memories: dict[MemoryType, list[MemoryRecord]] = Field(
        description="Every observation and memory of the user per collection, newest first; vault entries without "
        "their secret.")


class ForgetReport(BaseModel):
    """What forgetting a user deleted: points per collection, the ledger records of the user's events, the
    objects no other user of the tenant references (media, what ingest cut from them, cached OCR text), the
    entities only the user's observations named; ``objects_kept`` are media another user still references."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {
            "tenant_id": "acme",
            "user_id": "alice",
            "points_deleted": {"observations": 120, "episodic": 9, "semantic": 4},
            "event_ids": ["3f2b8c1e-6f0a-4d9b-9a57-0c8e2d6b1a42"],
            "objects_deleted": ["media/acme/5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef.png"],
            "objects_kept": [],
            "entities_deleted": 1,
        },
    ]})

    tenant_id: str = Field(description="The tenant.")
    user_id: str = Field(description="The forgotten user.")
    points_deleted: dict[str, int] = Field(description="Points deleted per collection.")
    event_ids: list[uuid.UUID] = Field(description="The user's events whose ledger records were deleted.")
    objects_deleted: list[str] = Field(
        description="Object keys deleted: media no other user references, what ingest cut from it, cached OCR.")
    objects_kept: list[str] = Field(
        description="Media keys kept because another user of the tenant still references them.")
    entities_deleted: int = Field(0, description="Entities deleted because only the user's observations named them.")
