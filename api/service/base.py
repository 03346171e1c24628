"""The service layer's one typed interface: everything a front door (the CLI, the MCP server, the HTTP routes and
the web app) asks of engram's memory, with one timeout (``ENGRAM_SERVICE_TIMEOUT_SECONDS``).

Three implementations: ``api.service.embedded.EmbeddedService`` (the pipeline's tasks in this process, or on the
workers through the broker, as ``engram search`` runs them), ``api.service.queue.QueueService`` (the HTTP routes'
and ``engram serve``'s web app's: the query workers' request tasks) and ``api.service.remote.RemoteService`` (the
HTTP API through the SDK's ``EngramClient``). Every argument and answer is a model of ``schemas/``; they answer
alike, only where the work runs differs. Calls are blocking; each implementation says which of them may run at once.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from engram.schemas.add import AddMemoryRequest, AddMemoryResponse
from engram.schemas.ask import AskRequest, AskResponse
from engram.schemas.entities import EntityList, EntitySummary
from engram.schemas.errors import EngramError
from engram.schemas.events import EventStatus, LedgerRecord
from engram.schemas.memories import MemoryType
from engram.schemas.memory_admin import (
    ForgetReport,
    ForgetScope,
    ForgetScopeReport,
    MemoryPage,
    MemoryRecord,
    UserExport,
)
from engram.schemas.search import SearchRequest, SearchResponse
from engram.schemas.storage import StorageUse
from engram.schemas.timeline import TimelineRequest


class ServiceError(EngramError):
    """A service call that cannot be answered; the message says why, for a person."""


class NotFound(ServiceError, LookupError):
    """No such item for this tenant (unknown, deleted, or another tenant's): a 404."""


class MediaMissing(NotFound):
    """The item exists but its media cannot be shown: the object is gone (retention, forget), or the kind has no
    picture (audio, text). The message is the reason a placeholder shows."""


class NotOffered(ServiceError, NotImplementedError):
    """This implementation cannot do the call (a default of this base class an implementation did not override;
    none of the web app's calls raise it with the three implementations now); the message names what is missing."""


class ServiceTimeout(ServiceError, TimeoutError):
    """The call did not finish within the service timeout (``ENGRAM_SERVICE_TIMEOUT_SECONDS``)."""


class ServiceUnavailable(ServiceError):
    """The store or the API cannot serve now (another process holds the embedded store past the wait, the
    broker or the API is down); trying again later may work."""


@dataclass(frozen=True)
class MediaObject:
    """An observation's object (an original or a thumbnail): its key, media type and size in bytes, and either a
    local ``path`` (streamed with HTTP range requests) or its bytes ``data``."""

    key: str
    mime_type: str
    size: int
    path: Path | None = None
    data: bytes | None = None


@dataclass(frozen=True)
class SampleRef:
    """One face or voice sample of an entity: its key (``EntitySample.key``), modality (``face`` or ``voice``),
    when it was seen (epoch seconds) and the observation it came from (None when none is linked any more)."""

    key: str
    modality: str
    at_ts: float
    observation_id: str | None


class MemoryService(ABC):
    """What the front doors ask of memory. ``timeout``: seconds one call may take (``ServiceTimeout`` after).

    Tenancy: every call names its tenant and answers only that tenant's items (another tenant's id reads as
    unknown). Unknown ids answer None where the return type allows it, else raise ``NotFound``. Raises
    ``ServiceTimeout``, ``ServiceUnavailable``, ``NotOffered`` (see each implementation) and, for ``ask``,
    ``schemas.ask.AskFailed``."""

    timeout: float

    # --- search and ask ---------------------------------------------------------------------------------------
    @abstractmethod
    def search(self, req: SearchRequest) -> SearchResponse:
        """Hybrid search (``workers.memory.search``): hits highest score first."""

    @abstractmethod
    def ask(self, req: AskRequest) -> AskResponse:
        """An answer from memory with the memories it cites (the ranked evidence without an LLM)."""

    @abstractmethod
    def add(self, req: AddMemoryRequest, tenant_id: str, device_id: str) -> AddMemoryResponse:
        """Remember a text or chat messages now; returns when the memory is stored (searchable) or failed."""

    # --- memories ---------------------------------------------------------------------------------------------
    @abstractmethod
    def get_memory(self, tenant_id: str, memory_id: uuid.UUID) -> MemoryRecord | None:
        """One observation or memory of any type, or None."""

    @abstractmethod
    def list_memories(
        self, tenant_id: str, memory_type: MemoryType, user_id: str | None = None, limit: int = 50, offset: int = 0
    ) -> MemoryPage:
        """A page of one type, newest content first."""

    @abstractmethod
    def update_memory(self, tenant_id: str, memory_id: uuid.UUID, text: str) -> MemoryRecord | None:
        """A user's correction of a memory: a new version that supersedes the old one (kept as history)."""

    @abstractmethod
    def delete_memory(self, tenant_id: str, memory_id: uuid.UUID) -> MemoryType | None:
        """Delete one observation or memory; its type, or None when unknown."""

    def memories_from(self, tenant_id: str, observation_id: uuid.UUID) -> list[MemoryRecord]:
        """The memories an observation fed (its id in their ``provenance.observation_ids``), current versions only,
        newest first, at most 50 (``workers.memory.corrections.memories_from``); [] for an unknown id."""
        raise NotOffered("the memories an observation fed are not offered here")

    # --- users ------------------------------------------------------------------------------------------------
    def forget_user(self, tenant_id: str, user_id: str) -> ForgetReport:
        """Forget a user entirely (every collection, the ledger's records, the objects no other user references)."""
        raise NotOffered("forgetting a user is not offered here")

    def forget_scope(self, tenant_id: str, scope: ForgetScope, dry_run: bool = False) -> ForgetScopeReport:
        """Forget what ``scope`` selects (a time range, an app, a device, events or ids; ``workers.memory.forget``):
        the observations, the memories drawn only from them, the rest rewritten without them, their objects and
        cached text, leaving no byte behind; with ``dry_run`` only count it."""
        raise NotOffered("forgetting by time range, app, device or id is not offered here yet")

    def export_user(self, tenant_id: str, user_id: str) -> UserExport:
        """Everything stored about a user (vault entries without their secrets)."""
        raise NotOffered("exporting a user is not offered here")

    # --- entities ---------------------------------------------------------------------------------------------
    @abstractmethod
    def list_entities(self, tenant_id: str) -> EntityList:
        """The tenant's people, most observations first."""

    @abstractmethod
    def name_entity(self, tenant_id: str, entity_id: uuid.UUID, name: str) -> EntitySummary | None:
        """Give an entity a name (its first name from now on); None when unknown."""

    @abstractmethod
    def merge_entities(
        self, tenant_id: str, keep_id: uuid.UUID, drop_id: uuid.UUID, reason: str = "manual"
    ) -> EntitySummary | None:
        """Merge ``drop_id`` into ``keep_id``; the kept entity, or None when either is unknown."""

    @abstractmethod
    def split_entity(self, tenant_id: str, entity_id: uuid.UUID, sample_key: str) -> EntitySummary | None:
        """ "Not this person": move one face or voice sample (``EntitySample.key``) into an entity of its own."""

    def entity_samples(self, tenant_id: str, entity_id: uuid.UUID) -> list[SampleRef] | None:
        """An entity's face and voice samples (newest first, each with the observation it came from); None when
        unknown."""
        raise NotOffered("an entity's samples are not offered here")

    def entities_samples(self, tenant_id: str, entity_ids: list[uuid.UUID]) -> dict[uuid.UUID, list[SampleRef]]:
        """``entity_samples`` of several entities (the People page's): by entity id, the unknown ones left out.
        This default asks once per entity; an implementation with a round trip per call reads them in one."""
        out = {}
        for eid in entity_ids:
            got = self.entity_samples(tenant_id, eid)
            if got is not None:
                out[eid] = got
        return out

    def sample_media(self, tenant_id: str, entity_id: uuid.UUID, sample_key: str) -> MediaObject:
        """A sample's media: a face crop (WebP) or a few seconds of the voice (WAV). Raises NotFound for an
        unknown entity or sample, MediaMissing (with the reason) when it cannot be made."""
        raise NotOffered("face crops and voice clips are not offered here")

    # --- the ledger -------------------------------------------------------------------------------------------
    @abstractmethod
    def events(
        self, tenant_id: str, user_id: str | None = None, status: EventStatus | None = None, limit: int = 100
    ) -> list[LedgerRecord]:
        """The tenant's (user's) events, most recently changed first, optionally of one status."""

    @abstractmethod
    def event_counts(self, tenant_id: str) -> dict[EventStatus, int]:
        """How many of the tenant's events are in each status."""

    def failures(self, tenant_id: str, user_id: str | None = None, limit: int = 100) -> list[LedgerRecord]:
        """Failed events with their stage and reason, most recent first."""
        return self.events(tenant_id, user_id, EventStatus.failed, limit)

    def retry_event(self, tenant_id: str, event_id: uuid.UUID) -> LedgerRecord | None:
        """Run a failed event again (the segments already stored are kept); its record after, or None when it is
        unknown, another tenant's or not failed."""
        raise NotOffered("retrying a failed event is not offered here")

    @abstractmethod
    def users(self, tenant_id: str) -> list[str]:
        """The tenant's users (those with events), sorted."""

    def storage(self, tenant_id: str) -> StorageUse:
        """Bytes kept per kind: the tenant's originals per media kind, thumbnails, OCR cache and vault, and the
        data dir's shared store, ledger and caches, with the storage cap and retention rules
        (``workers.stores.retention.storage_use``)."""
        raise NotOffered("the bytes stored per kind are not offered here")

    # --- timeline and media -----------------------------------------------------------------------------------
    @abstractmethod
    def timeline(self, req: TimelineRequest) -> MemoryPage:
        """Observations in a time span, newest first (a ``MemoryPage`` of ``observation`` records)."""

    @abstractmethod
    def media(self, tenant_id: str, observation_id: uuid.UUID, user_id: str | None = None) -> MediaObject:
        """An observation's object (the image, recording or file it was read from). Raises NotFound for an unknown
        observation (or another user's, when ``user_id`` is given), MediaMissing when its object is gone."""

    @abstractmethod
    def thumbnail(self, tenant_id: str, observation_id: uuid.UUID, user_id: str | None = None) -> MediaObject:
        """A small WebP of an observation's picture. Raises as ``media``, and MediaMissing for a kind without a
        picture."""

    def close(self) -> None:  # noqa: B027 (nothing to release unless the implementation holds something)
        """Release what the service holds (the store, connections)."""
