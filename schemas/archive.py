"""The HTTP API's archive bodies (``api.routes.archives``): an archive of ``engram export --archive`` uploaded and
imported into the cluster, or written by it and fetched (``workers.memory.archive``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engram.schemas.events import _ID_PATTERN


class ArchiveUpload(BaseModel):
    """Where to PUT the archive's bytes (``url``, expires after ``expires_in`` seconds), and the ``key`` to import
    once they are there."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "key": "uploads/archives/acme/0b8f6c1e-4f7b-4c55-9d1c-1f1a3c2d9e10.tar",
                    "url": "https://s3.example.com/engram/uploads/archives/acme/0b8f6c1e.tar?X-Amz-Signature=9c1e07",
                    "expires_in": 900,
                },
            ]
        }
    )

    key: str = Field(description="The staged archive's object key, for POST /v1/archives/imports.")
    url: str = Field(description="A presigned PUT URL of the object store.")
    expires_in: int = Field(description="Seconds the URL stays valid.")


class ArchiveImportRequest(BaseModel):
    """Import the archive uploaded to ``key`` (from POST /v1/archives/uploads)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"key": "uploads/archives/acme/0b8f6c1e-4f7b-4c55-9d1c-1f1a3c2d9e10.tar"},
            ]
        }
    )

    key: str = Field(min_length=1, max_length=512, description="The key POST /v1/archives/uploads answered.")


class ArchiveExportRequest(BaseModel):
    """Write the archive of one user of the key's tenant, or (no ``user_id``) of the whole tenant."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"user_id": "alice"},
            ]
        }
    )

    user_id: str | None = Field(None, pattern=_ID_PATTERN, description="The user (default: the whole tenant).")


class ArchiveAnswer(BaseModel):
    """What an import did or an export wrote (``workers.memory.archive.ArchiveResult``); an export's ``url`` is a
    presigned GET URL of the archive (valid ``expires_in`` seconds)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "path": "uploads/archives/acme/0b8f6c1e-4f7b-4c55-9d1c-1f1a3c2d9e10.tar",
                    "tenant_id": "acme",
                    "user_id": "alice",
                    "counts": {
                        "objects": 4,
                        "object_bytes": 180734,
                        "points": {"observations": 5, "episodic": 3, "entities": 3},
                        "events": 3,
                        "vault_entries": 1,
                    },
                    "written": {"objects": 4, "points": {"observations": 5, "episodic": 3, "entities": 3}, "events": 3},
                    "seconds": 1.2,
                },
            ]
        }
    )

    path: str = Field(description="The archive's object key.")
    tenant_id: str = Field(description="Its tenant.")
    user_id: str | None = Field(None, description="Its user; null: the whole tenant.")
    counts: dict[str, Any] = Field(
        description="What the archive holds: objects, object_bytes, points per collection, events, vault_entries."
    )
    written: dict[str, Any] = Field(
        default_factory=dict,
        description="An import: what was new (objects, points per collection, events); the rest was already there.",
    )
    seconds: float = Field(description="How long the store worker took.")
    url: str | None = Field(None, description="An export: where to GET the archive.")
    expires_in: int | None = Field(None, description="An export: seconds the URL stays valid.")
