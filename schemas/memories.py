"""The six memory types of MIRIX (Wang & Chen, 2025, "MIRIX: Multi-Agent Memory System"), with provenance.

Every memory keeps where it came from (observation ids, event ids, message ids such as LoCoMo's
``dia_id``, and the time span it covers) and its memory dynamics: a strength in [0, 1] with the recalls
that reinforce it (MemoryBank's forgetting curve, ``workers.memory.dynamics``), and its history: a memory that a
newer one contradicts is ``superseded_by`` it from ``valid_to`` on (Mem0's UPDATE/DELETE, kept as
history instead of deleted); one whose retention decayed below the threshold is ``archived``.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field


class MemoryType(StrEnum):
    """Memory collections. ``observation`` is the raw layer; the other six are MIRIX's types."""

    observation = "observation"
    episodic = "episodic"
    semantic = "semantic"
    procedural = "procedural"
    resource = "resource"
    knowledge_vault = "knowledge_vault"
    core = "core"


MEMORY_TYPES: tuple[MemoryType, ...] = tuple(t for t in MemoryType if t is not MemoryType.observation)


class Provenance(BaseModel):
    """Where a memory came from: observations, events, source message ids, and the time span covered."""

    observation_ids: list[uuid.UUID] = Field(default_factory=list)
    event_ids: list[uuid.UUID] = Field(default_factory=list)
    message_ids: list[str] = Field(default_factory=list)
    session_ids: list[str] = Field(default_factory=list)
    object_keys: list[str] = Field(default_factory=list)
    source_names: list[str] = Field(default_factory=list)
    start: AwareDatetime | None = None
    end: AwareDatetime | None = None

    def union(self, other: Provenance) -> Provenance:
        """Both provenances: each id list in order without repeats (``self``'s first), the wider time span."""
        lists = {
            k: list(dict.fromkeys([*getattr(self, k), *getattr(other, k)]))
            for k in ("observation_ids", "event_ids", "message_ids", "session_ids", "object_keys", "source_names")
        }
        starts = [t for t in (self.start, other.start) if t]
        ends = [t for t in (self.end, other.end) if t]
        return Provenance(**lists, start=min(starts) if starts else None, end=max(ends) if ends else None)


class MemoryBase(BaseModel):
    """Fields shared by all memory types."""

    model_config = ConfigDict(extra="forbid")

    id: uuid.UUID
    tenant_id: str
    user_id: str
    created_at: AwareDatetime
    updated_at: AwareDatetime
    strength: float = Field(1.0, ge=0, le=1, description="Retention strength (MemoryBank); 1 = fresh.")
    provenance: Provenance = Field(default_factory=Provenance)
    recalls: int = Field(
        0,
        ge=0,
        description="Times the memory was recalled or reinforced by a repeat "
        "(MemoryBank: each one lengthens its stability S).",
    )
    last_recalled_at: AwareDatetime | None = Field(
        None,
        description="When it was last recalled or reinforced; the forgetting curve counts from here "
        "(unset: from updated_at).",
    )
    archived: bool = Field(
        False, description="Retention fell below the archive threshold: kept, not searched by default."
    )
    superseded_by: uuid.UUID | None = Field(None, description="The newer memory that contradicts this one.")
    valid_to: AwareDatetime | None = Field(None, description="Until when this memory held (set when superseded).")

    def index_text(self) -> str:
        """The text that is embedded and BM25-indexed for this memory."""
        raise NotImplementedError


class EpisodicMemory(MemoryBase):
    """A time-stamped event: what happened, when, who was involved."""

    memory_type: Literal[MemoryType.episodic] = MemoryType.episodic
    occurred_at: AwareDatetime
    ended_at: AwareDatetime | None = None
    actor: str
    event_type: str = Field(description="e.g. conversation, screen_activity, audio, video.")
    summary: str
    details: str = ""
    entities: list[str] = Field(default_factory=list)

    def index_text(self) -> str:
        return f"{self.summary}\n{self.details}".strip()


class SemanticMemory(MemoryBase):
    """A fact about an entity or concept, independent of when it was learnt."""

    memory_type: Literal[MemoryType.semantic] = MemoryType.semantic
    name: str
    summary: str
    details: str = ""
    source: str = ""
    attribute: str = Field(
        "",
        description="What the fact says about ``name`` (lives_in, works_at, ...); with "
        "``value``, lets a newer fact on the same attribute supersede an older one.",
    )
    value: str = ""

    def index_text(self) -> str:
        return f"{self.name}: {self.summary}\n{self.details}".strip()


class ProceduralMemory(MemoryBase):
    """A workflow or how-to, as an ordered list of steps."""

    memory_type: Literal[MemoryType.procedural] = MemoryType.procedural
    entry_type: str = Field(description="workflow, guide, script, ...")
    summary: str
    steps: list[str] = Field(default_factory=list)

    def index_text(self) -> str:
        return "\n".join([self.summary, *self.steps])


class ResourceMemory(MemoryBase):
    """A document, file, URL or page the user saw or worked with."""

    memory_type: Literal[MemoryType.resource] = MemoryType.resource
    title: str
    summary: str
    resource_type: str = Field(description="document, url, code, image, ...")
    content: str = ""

    def index_text(self) -> str:
        return f"{self.title}\n{self.summary}\n{self.content[:2000]}".strip()


class KnowledgeVaultEntry(MemoryBase):
    """A sensitive item (credential, key, address, phone number). The secret is stored Fernet-encrypted;
    only ``caption`` is indexed and returned by search."""

    memory_type: Literal[MemoryType.knowledge_vault] = MemoryType.knowledge_vault
    entry_type: str = Field(description="credential, api_key, address, phone_number, ...")
    source: str = ""
    sensitivity: Literal["low", "medium", "high"] = "high"
    caption: str
    secret_ciphertext: str = Field("", description="Fernet token of the secret value; never logged.")

    def index_text(self) -> str:
        return f"{self.entry_type}: {self.caption}"


class CoreMemory(MemoryBase):
    """A block of the user's profile or the agent's persona (MIRIX core memory), size-limited."""

    memory_type: Literal[MemoryType.core] = MemoryType.core
    label: str = Field(description="'human' (user profile) or 'persona'.")
    value: str
    limit: int = Field(2000, description="Maximum characters of value.")

    def index_text(self) -> str:
        return f"{self.label}: {self.value}"


Memory = Annotated[
    EpisodicMemory | SemanticMemory | ProceduralMemory | ResourceMemory | KnowledgeVaultEntry | CoreMemory,
    Field(discriminator="memory_type"),
]

MEMORY_MODELS: dict[MemoryType, type[MemoryBase]] = {
    MemoryType.episodic: EpisodicMemory,
    MemoryType.semantic: SemanticMemory,
    MemoryType.procedural: ProceduralMemory,
    MemoryType.resource: ResourceMemory,
    MemoryType.knowledge_vault: KnowledgeVaultEntry,
    MemoryType.core: CoreMemory,
}


def memory_time(memory: MemoryBase) -> datetime | None:
    """The start of the time span a memory covers, if known."""
    return memory.provenance.start
