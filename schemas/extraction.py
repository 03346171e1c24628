"""What an extractor finds in a batch of observations, before it becomes typed memories.

The drafts carry the content of MIRIX's semantic, procedural, resource and core memories (Wang & Chen,
2025) and ``sources``: indexes into the batch of observations the extractor was given (numbered from 0),
from which consolidation builds each memory's provenance. The same models are the JSON schemas the LLM
extractor asks for (structured outputs) and validates its answers with. Episodic memories are made by
consolidation's episode grouping; knowledge-vault entries by perceive's redaction.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

TypedKind = Literal["semantic", "procedural", "resource", "core"]


class Draft(BaseModel):
    """Fields shared by every draft."""

    model_config = ConfigDict(extra="forbid")

    sources: list[int] = Field(min_length=1, description="Indexes of the observations this comes from.")


class SemanticDraft(Draft):
    """A fact about an entity or concept. ``attribute``/``value`` (e.g. lives_in / Berlin) are set when the
    fact gives one value of a single-valued attribute, so a later value supersedes it."""

    name: str = Field(min_length=1, max_length=200, description="The entity or concept the fact is about.")
    summary: str = Field(min_length=1, max_length=1000, description="The fact, one sentence.")
    details: str = Field("", max_length=4000)
    attribute: str = Field(
        "",
        max_length=64,
        description="snake_case attribute, e.g. lives_in, works_at; "
        "empty when the fact is not one value of a single-valued attribute.",
    )
    value: str = Field("", max_length=200)


class ProceduralDraft(Draft):
    """A workflow, guide or step list."""

    entry_type: str = Field("workflow", max_length=32, description="workflow, guide, recipe, script, ...")
    summary: str = Field(min_length=1, max_length=500, description="What the procedure achieves.")
    steps: list[str] = Field(min_length=1, description="The steps, in order.")


class ResourceDraft(Draft):
    """A document, file, URL, page or window the user saw or worked with."""

    title: str = Field(min_length=1, max_length=500, description="URL, file name or window title.")
    summary: str = Field(min_length=1, max_length=1000)
    resource_type: str = Field(max_length=32, description="url, document, code, spreadsheet, image, window, ...")
    content: str = Field("", max_length=8000)


class CoreDraft(Draft):
    """Facts for a core memory block: ``human`` (the user's profile) or ``persona`` (the agent's)."""

    label: Literal["human", "persona"] = "human"
    facts: list[str] = Field(min_length=1, description="Short facts, e.g. 'lives in Berlin'.")


class Routing(BaseModel):
    """MIRIX's meta-memory step: which memory types the batch should update."""

    model_config = ConfigDict(extra="forbid")

    memory_types: list[TypedKind] = Field(default_factory=list)


class Extraction(BaseModel):
    """Everything extracted from one batch of observations."""

    model_config = ConfigDict(extra="forbid")

    semantic: list[SemanticDraft] = Field(default_factory=list)
    procedural: list[ProceduralDraft] = Field(default_factory=list)
    resource: list[ResourceDraft] = Field(default_factory=list)
    core: list[CoreDraft] = Field(default_factory=list)

    def extend(self, other: Extraction) -> None:
        """Append ``other``'s drafts (whose sources must already index the same observation list)."""
        for kind in ("semantic", "procedural", "resource", "core"):
            getattr(self, kind).extend(getattr(other, kind))

    def shifted(self, offset: int) -> Extraction:
        """A copy whose sources are moved by ``offset`` (a batch's drafts into the whole list's indexes)."""
        out = Extraction()
        for kind in ("semantic", "procedural", "resource", "core"):
            getattr(out, kind).extend(
                d.model_copy(update={"sources": [s + offset for s in d.sources]}) for d in getattr(self, kind)
            )
        return out
