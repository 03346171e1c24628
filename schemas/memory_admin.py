"""Memory management: one stored item by id, pages of a type, a user's export, and what forgetting did.

Every item is read from the vector store as stored (its payload), tenant-scoped, with secrets removed:
a knowledge-vault entry comes without its ``secret_ciphertext`` (revealing a secret is its own call).
"""

from __future__ import annotations

import uuid

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from engram.schemas.events import LedgerRecord
from engram.schemas.memories import MemoryType
from engram.schemas.search import EmptyReason

#: Payload fields never returned by get, list or export (the vault's encrypted secret, vectors' bookkeeping).
HIDDEN_FIELDS = frozenset({"secret_ciphertext", "secret", "consolidated"})


class MemoryRecord(BaseModel):
    """One stored observation or memory. ``text``: what it says (an observation's text, a memory's summary,
    a vault entry's caption, a core block's value). ``time``/``time_end``: the span its content covers (UTC).
    ``payload``: every stored field (provenance included) but ``HIDDEN_FIELDS``."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
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
            ]
        }
    )

    id: uuid.UUID = Field(description="The observation's or memory's id.")
    memory_type: MemoryType = Field(description="Its collection.")
    tenant_id: str = Field(description="Its tenant.")
    user_id: str | None = Field(None, description="Whose it is.")
    time: AwareDatetime | None = Field(None, description="When its content starts (UTC).")
    time_end: AwareDatetime | None = Field(None, description="When its content ends (UTC).")
    text: str = Field(
        "",
        description="What it says (an observation's text, a memory's summary, a vault entry's caption, a core "
        "block's value).",
    )
    payload: dict = Field(
        default_factory=dict,
        description="Every stored field, provenance included, but the vault's encrypted secret and bookkeeping fields.",
    )


class MemoryPage(BaseModel):
    """A page of one memory type, newest content first: ``total`` items match, ``offset`` were skipped."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
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
            ]
        }
    )

    memory_type: MemoryType = Field(description="The collection listed.")
    user_id: str | None = Field(None, description="The user the page is limited to; null: every user.")
    total: int = Field(description="Items matching, over all pages.")
    limit: int = Field(description="Items per page asked for.")
    offset: int = Field(description="Items skipped (newest first).")
    items: list[MemoryRecord] = Field(description="This page's items, newest content first.")
    empty: EmptyReason | None = Field(
        None,
        description="Why nothing matches (total 0): no_data (nothing stored for the tenant), unknown_user "
        "(nothing stored for the user), no_match (there is data, none of this type); null otherwise.",
    )


class UserExport(BaseModel):
    """Everything stored about one user of a tenant: the ledger's events (what was published, its status
    and quarantine reasons) and every observation and memory of every type, each type newest first."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
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
                            "object_key": "media/acme/5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef.png",  # noqa: E501
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
            ]
        }
    )

    tenant_id: str = Field(description="The tenant.")
    user_id: str = Field(description="The exported user.")
    exported_at: AwareDatetime = Field(description="When the export was made (UTC).")
    events: list[LedgerRecord] = Field(
        description="The ledger records of the user's events: what was published, its status and reasons."
    )
    memories: dict[MemoryType, list[MemoryRecord]] = Field(
        description="Every observation and memory of the user per collection, newest first; vault entries without "
        "their secret."
    )


class ForgetReport(BaseModel):
    """What forgetting a user deleted: points per collection, the ledger records of the user's events, the
    objects no other user of the tenant references (media, what ingest cut from them, cached OCR text), the
    entities only the user's observations named; ``objects_kept`` are media another user still references."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "tenant_id": "acme",
                    "user_id": "alice",
                    "points_deleted": {"observations": 120, "episodic": 9, "semantic": 4},
                    "event_ids": ["3f2b8c1e-6f0a-4d9b-9a57-0c8e2d6b1a42"],
                    "objects_deleted": [
                        "media/acme/5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef.png"
                    ],
                    "objects_kept": [],
                    "entities_deleted": 1,
                },
            ]
        }
    )

    tenant_id: str = Field(description="The tenant.")
    user_id: str = Field(description="The forgotten user.")
    points_deleted: dict[str, int] = Field(description="Points deleted per collection.")
    event_ids: list[uuid.UUID] = Field(description="The user's events whose ledger records were deleted.")
    objects_deleted: list[str] = Field(
        description="Object keys deleted: media no other user references, what ingest cut from it, cached OCR."
    )
    objects_kept: list[str] = Field(
        description="Media keys kept because another user of the tenant still references them."
    )
    entities_deleted: int = Field(0, description="Entities deleted because only the user's observations named them.")


class ForgetScope(BaseModel):
    """What a scoped forget deletes (``workers.memory.forget``): the tenant's observations matching every criterion
    given (at least one of ``since``, ``until``, ``app``, ``device_id``, ``memory_ids``, ``event_ids``), optionally of
    one user, and every memory, vector, cached text and object that came from them."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"user_id": "alice", "since": "2024-05-02T09:15:00Z", "until": "2024-05-02T09:30:00Z"},
                {"user_id": "alice", "app": "Slack"},
            ]
        },
    )

    user_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._@:+-]{0,127}$",
        description="Only this user's (default: every user of the tenant).",
    )
    since: AwareDatetime | None = Field(None, description="Observations whose content starts at or after this time.")
    until: AwareDatetime | None = Field(None, description="Observations whose content starts before this time.")
    app: str | None = Field(None, min_length=1, max_length=256, description="Observations of this application.")
    device_id: str | None = Field(None, min_length=1, max_length=256, description="Observations of this device.")
    memory_ids: list[uuid.UUID] = Field(
        default_factory=list, max_length=10_000, description="These observations or memories (any type)."
    )
    event_ids: list[uuid.UUID] = Field(
        default_factory=list, max_length=10_000, description="Every observation of these events (published files)."
    )

    @model_validator(mode="after")
    def _names_something(self) -> ForgetScope:
        """Refuse a scope that names nothing (forgetting a whole user is ``DELETE /v1/users/{user}``)."""
        if not (self.since or self.until or self.app or self.device_id or self.memory_ids or self.event_ids):
            raise ValueError("name what to forget: since/until, an app, a device, memory ids or event ids")
        if self.since and self.until and self.since >= self.until:
            raise ValueError("since must be before until")
        return self


class ForgetScopeReport(BaseModel):
    """What a scoped forget deleted (or, with ``dry_run``, would delete): observations, memories deleted (all their
    sources gone) and rewritten (drawn also from sources that stay: the deleted content taken out and embedded
    again), ledger events, objects (originals, what ingest cut from them, thumbnails, cached OCR, vault entries)
    and entities only the deleted observations named."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "tenant_id": "acme",
                    "scope": {"user_id": "alice", "app": "Slack"},
                    "dry_run": False,
                    "observations": 42,
                    "points_deleted": {"observations": 42, "episodic": 3},
                    "memories_rewritten": {"episodic": 1},
                    "event_ids": ["3f2b8c1e-6f0a-4d9b-9a57-0c8e2d6b1a42"],
                    "objects_deleted": [
                        "media/acme/5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef.png"
                    ],
                    "objects_kept": [],
                    "entities_deleted": 0,
                    "compacted": ["episodic", "observations"],
                },
            ]
        }
    )

    tenant_id: str = Field(description="The tenant.")
    scope: ForgetScope = Field(description="What was asked.")
    dry_run: bool = Field(False, description="True: nothing was deleted; the counts say what would be.")
    observations: int = Field(0, description="Observations deleted.")
    points_deleted: dict[str, int] = Field(default_factory=dict, description="Points deleted per collection.")
    memories_rewritten: dict[str, int] = Field(
        default_factory=dict, description="Memories per collection rewritten without the deleted sources' content."
    )
    event_ids: list[uuid.UUID] = Field(
        default_factory=list, description="Events whose every observation went: their ledger records too."
    )
    objects_deleted: list[str] = Field(default_factory=list, description="Object keys deleted.")
    objects_kept: list[str] = Field(
        default_factory=list, description="Originals kept because an item that stays still references them."
    )
    entities_deleted: int = Field(0, description="Entities deleted because only deleted observations named them.")
    compacted: list[str] = Field(
        default_factory=list, description="Store collections rewritten so no byte of a deleted point is left."
    )


class MemoryUpdate(BaseModel):
    """A user's correction of a memory (``PATCH /v1/memories/{id}``): the corrected text, stored as a new version
    that supersedes the old one (kept as history)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"text": "Alice moved to Porto"}]})

    text: str = Field(min_length=1, max_length=20_000, description="The corrected text.")
