"""Memory management: one stored item by id, pages of a type, a user's export, and what forgetting did.

Every item is read from the vector store as stored (its payload), tenant-scoped, with secrets removed:
a knowledge-vault entry comes without its ``secret_ciphertext`` (revealing a secret is its own call).
"""

from __future__ import annotations

import uuid

from pydantic import AwareDatetime, BaseModel, Field

from engram.schemas.events import LedgerRecord
from engram.schemas.memories import MemoryType

#: Payload fields never returned by get, list or export (the vault's encrypted secret, vectors' bookkeeping).
HIDDEN_FIELDS = frozenset({"secret_ciphertext", "secret", "consolidated"})


class MemoryRecord(BaseModel):
    """One stored observation or memory. ``text``: what it says (an observation's text, a memory's summary,
    a vault entry's caption, a core block's value). ``time``/``time_end``: the span its content covers (UTC).
    ``payload``: every stored field (provenance included) but ``HIDDEN_FIELDS``."""

    id: uuid.UUID
    memory_type: MemoryType
    tenant_id: str
    user_id: str | None = None
    time: AwareDatetime | None = None
    time_end: AwareDatetime | None = None
    text: str = ""
    payload: dict = Field(default_factory=dict)


class MemoryPage(BaseModel):
    """A page of one memory type, newest content first: ``total`` items match, ``offset`` were skipped."""

    memory_type: MemoryType
    user_id: str | None = None
    total: int
    limit: int
    offset: int
    items: list[MemoryRecord]


class UserExport(BaseModel):
    """Everything stored about one user of a tenant: the ledger's events (what was published, its status
    and quarantine reasons) and every observation and memory of every type, each type newest first."""

    tenant_id: str
    user_id: str
    exported_at: AwareDatetime
    events: list[LedgerRecord]
    memories: dict[MemoryType, list[MemoryRecord]]


class ForgetReport(BaseModel):
    """What forgetting a user deleted: points per collection, the ledger records of the user's events, the
    objects no other user of the tenant references (media, what ingest cut from them, cached OCR text), the
    entities only the user's observations named; ``objects_kept`` are media another user still references."""

    tenant_id: str
    user_id: str
    points_deleted: dict[str, int]
    event_ids: list[uuid.UUID]
    objects_deleted: list[str]
    objects_kept: list[str]
    entities_deleted: int = 0
