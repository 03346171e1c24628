"""Arguments of the agent-facing operations that have no request model elsewhere: the MCP server's tools
(``api/mcp_server.py``; ``search``, ``ask`` and ``add_memory`` take ``SearchRequest``, ``AskRequest`` and
``AddMemoryRequest`` without the tenant) and naming an entity (``POST /v1/entities/{id}/name``, ``engram
entities name``). The tenant never comes from the caller's arguments: it is the server's (``--tenant``) or the
API key's.
"""

from __future__ import annotations

import uuid

from pydantic import BaseModel, ConfigDict, Field

from engram.schemas.events import _ID_PATTERN
from engram.schemas.memories import MemoryType
from engram.schemas.memory_admin import ForgetScope, MemoryUpdate


class EntityNameRequest(BaseModel):
    """Give an entity a name: it becomes the entity's first name, so a query naming it filters to it and ``ask``
    shows it in its evidence."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"name": "Maria"},
            ]
        },
    )

    name: str = Field(min_length=1, max_length=256, pattern=r"\S", description="The person's name, e.g. 'Maria'.")


class NameEntityArgs(EntityNameRequest):
    """The MCP tool ``name_entity``: which entity (an id from ``list_entities``) and its name."""

    entity_id: uuid.UUID = Field(description="The entity's id, from list_entities.")


class ListMemoriesArgs(BaseModel):
    """The MCP tool ``list_memories``: a page of one memory type, newest content first."""

    model_config = ConfigDict(extra="forbid")

    memory_type: MemoryType = Field(MemoryType.episodic, description="Which collection.")
    user_id: str | None = Field(None, pattern=_ID_PATTERN, description="Only this user's (default: all users).")
    limit: int = Field(20, ge=1, le=500, description="Items per page.")
    offset: int = Field(0, ge=0, le=100_000, description="Items to skip.")


class MemoryIdArgs(BaseModel):
    """The MCP tools ``get_memory`` and ``delete_memory``: one observation or memory of any type by id."""

    model_config = ConfigDict(extra="forbid")

    memory_id: uuid.UUID = Field(description="The id of an observation or memory (from search or list_memories).")


class NoArgs(BaseModel):
    """A tool without arguments (``list_entities``)."""

    model_config = ConfigDict(extra="forbid")


class ForgetArgs(ForgetScope):
    """The MCP tool ``forget``: what to forget (a time range, an app, a device, events or ids; every criterion
    given must match, optionally one user's) and whether only to count it."""

    dry_run: bool = Field(False, description="Only say what would be forgotten; nothing is deleted.")

    def scope(self) -> ForgetScope:
        """The scope without ``dry_run``."""
        return ForgetScope.model_validate(self.model_dump(exclude={"dry_run"}))


class UpdateMemoryArgs(MemoryUpdate):
    """The MCP tool ``update_memory``: which memory (not an observation) and its corrected text."""

    memory_id: uuid.UUID = Field(description="The id of the memory to correct (from search or list_memories).")
