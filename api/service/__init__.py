"""The service layer: one typed interface to engram's memory (``base.MemoryService``) for every front door, with
an embedded implementation (``embedded.EmbeddedService``) and one through the HTTP API
(``remote.RemoteService``). Importing this package is light: each implementation imports the workers' stack or
the SDK when it is made."""

from engram.api.service.base import (
    MediaMissing,
    MediaObject,
    MemoryService,
    NotFound,
    NotOffered,
    ServiceError,
    ServiceTimeout,
    ServiceUnavailable,
)

__all__ = [
    "MediaMissing",
    "MediaObject",
    "MemoryService",
    "NotFound",
    "NotOffered",
    "ServiceError",
    "ServiceTimeout",
    "ServiceUnavailable",
]
