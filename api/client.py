"""The producer SDK for edge devices: hash a file, upload it through a presigned URL, publish its event.

    with EngramClient("http://engram:8000", api_key) as client:
        event_id = client.publish_file("shot.png", user="alice", device="laptop")
        client.wait([event_id], timeout=120)
        hits = client.search("budget review").hits
        answer = client.ask("when is the budget review?").answer

``add`` remembers a text or chat messages directly (``POST /v1/memories``); ``AsyncEngramClient`` makes the
same API calls (all but publishing files) from asyncio.

Resumable: the server answers ``exists`` for content it already stores (the bytes are not sent again),
and the default event id is derived from (API key, user, device, sha256), so publishing the same file
again enqueues nothing (the server returns the existing event's status). Connection errors, timeouts,
429 and 5xx answers are retried with exponential backoff (tenacity), a bounded number of times; every
call is safe to repeat. A client is meant for one thread at a time.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import tenacity

from engram.schemas.add import AddMemoryRequest, AddMemoryResponse, AddMessage
from engram.schemas.api import EventStatusResponse, PublishRequest, PublishResponse, UploadRequest, UploadResponse
from engram.schemas.ask import AskResponse
from engram.schemas.entities import EntityList, EntitySummary
from engram.schemas.events import EventStatus, MediaKind
from engram.schemas.memories import MemoryType
from engram.schemas.memory_admin import ForgetReport, MemoryPage, MemoryRecord, UserExport
from engram.schemas.search import SearchResponse
from engram.workers.errors import EngramError
from engram.workers.ids import sha256_file

FINAL = (EventStatus.done, EventStatus.skipped, EventStatus.failed)
_PUBLISH_NAMESPACE = uuid.UUID("0b7e0c1e-55a4-5f61-9d0e-3a1f2c4b5d6e")
_MIME_BY_SUFFIX = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp",
                   ".wav": "audio/wav", ".flac": "audio/flac", ".mp3": "audio/mpeg", ".ogg": "audio/ogg",
                   ".m4a": "audio/mp4", ".mp4": "video/mp4", ".mov": "video/quicktime", ".webm": "video/webm",
                   ".mkv": "video/x-matroska", ".json": "application/json", ".jsonl": "application/x-ndjson",
                   ".ndjson": "application/x-ndjson", ".txt": "text/plain"}


class EngramAPIError(EngramError):
    """An error answer: ``status`` is the HTTP status, ``detail`` the server's message (a string, or a
    list of ``{loc, msg, type}`` for invalid bodies)."""

    def __init__(self, status: int, detail: Any, url: str = "") -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status, self.detail, self.url = status, detail, url


class NotMedia(EngramError, ValueError):
    """The file is neither media nor a conversation file (and no kind was given)."""


@dataclass(frozen=True)
class PublishResult:
    """What publishing one file did: ``uploaded`` False when the object store already had the bytes;
    ``duplicate`` True when this event was published before (nothing was enqueued)."""

    event_id: uuid.UUID
    status: EventStatus
    uploaded: bool
    duplicate: bool
    size: int


def safe_id(value: str) -> str:
    """``value`` as a tenant/user/device id: characters outside ``[A-Za-z0-9._@:+-]`` become ``-``."""
    cleaned = "".join(c if c.isalnum() and c.isascii() or c in "._@:+-" else "-" for c in value).strip("-._@:+")
    return cleaned[:128] or "unknown"


def detect(path: Path, kind: MediaKind | None = None) -> tuple[MediaKind, str]:
    """(kind, mime type) of ``path``: by content (``workers.media.detect.detect``), else from ``kind`` and the
    file suffix. Raises NotMedia when neither says what it is."""
    from engram.workers.media.detect import detect as sniff_file

    found = sniff_file(path)
    if found is not None:
        return (kind or found[0]), found[1]
    mime = _MIME_BY_SUFFIX.get(path.suffix.lower())
    if kind is None or mime is None:
        raise NotMedia(f"{path}: not media or a conversation file")
    return kind, mime


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, EngramAPIError) and (exc.status == 429 or (exc.status >= 500 and exc.status != 501))


def _transient_for_ask(exc: BaseException) -> bool:
    """As ``_transient``, but a 502 (the LLM failed, or broke the protocol) is the answer, not retried."""
    return _transient(exc) and not (isinstance(exc, EngramAPIError) and exc.status == 502)


def _search_body(query: str, user: str | None, memory_types: Iterable[MemoryType] | None,
                 kinds: Iterable[MediaKind] | None, time_from: datetime | None, time_to: datetime | None,
                 limit: int) -> dict[str, Any]:
    """The JSON body of ``POST /v1/search``."""
    body: dict[str, Any] = {"query": query, "limit": limit}
    if user:
        body["user_id"] = user
    if memory_types is not None:
        body["memory_types"] = [MemoryType(t).value for t in memory_types]
    if kinds is not None:
        body["kinds"] = [MediaKind(k).value for k in kinds]
    for name, t in (("time_from", time_from), ("time_to", time_to)):
        if t is not None:
            body[name] = t.isoformat()
    return body


def _ask_body(question: str, user: str | None, memory_types: Iterable[MemoryType] | None, limit: int,
              max_rounds: int) -> dict[str, Any]:
    """The JSON body of ``POST /v1/ask``."""
    body: dict[str, Any] = {"question": question, "limit": limit, "max_rounds": max_rounds}
    if user:
        body["user_id"] = user
    if memory_types is not None:
        body["memory_types"] = [MemoryType(t).value for t in memory_types]
    return body


def _add_body(messages_or_text: str | list[AddMessage | dict], user_id: str, client_id: str | None,
              time: datetime | None, source: str | None, session_id: str | None) -> dict[str, Any]:
    """The JSON body of ``POST /v1/memories``, validated here (pydantic.ValidationError before any request)."""
    if isinstance(messages_or_text, str):
        content: dict[str, Any] = {"text": messages_or_text}
    else:
        content = {"messages": [m if isinstance(m, AddMessage) else AddMessage.model_validate(m)
                                for m in messages_or_text]}
    req = AddMemoryRequest(**content, user_id=user_id, id=client_id, time=time, source=source,
                           session_id=session_id)
    return req.model_dump(mode="json", exclude_none=True)


class EngramClient:
    """A client of one engram API as one tenant (the API key's).

    ``retries``: attempts per call (at least 1); waits grow exponentially from ``backoff`` seconds up to
    ``max_backoff``. ``transport``: an httpx transport for both the API and the object store (tests).
    ``user`` / ``device``: defaults for ``publish_file`` (default: ENGRAM_USER / ENGRAM_DEVICE, else the OS
    user and the host name).
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0, retries: int = 5,
                 backoff: float = 0.5, max_backoff: float = 8.0, user: str | None = None,
                 device: str | None = None, transport: httpx.BaseTransport | None = None) -> None:
        if not api_key:
            raise ValueError("an API key is required (engram keys create --tenant T)")
        self.base_url = base_url.rstrip("/")
        self.user = user or os.environ.get("ENGRAM_USER") or safe_id(getpass.getuser())
        self.device = device or os.environ.get("ENGRAM_DEVICE") or safe_id(socket.gethostname())
        self._key_id = hashlib.sha256(api_key.encode()).hexdigest()[:16]
        self._api = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport,
                                 headers={"Authorization": f"Bearer {api_key}"})
        self._store = httpx.Client(timeout=timeout, transport=transport)  # presigned URLs carry no API key
        self._retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(max(1, retries)),
            wait=tenacity.wait_exponential(multiplier=backoff, max=max_backoff),
            retry=tenacity.retry_if_exception(_transient), reraise=True)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._api.close()
        self._store.close()

    def __enter__(self) -> EngramClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- HTTP ---------------------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None,
              retry_if=_transient) -> Any:
        """One API call with retries (of the errors ``retry_if`` accepts); returns the JSON answer, None for
        an empty one (204). Raises EngramAPIError for error answers (after the retries for transient ones)
        and httpx.TransportError when the server stays unreachable."""

        def once() -> Any:
            resp = self._api.request(method, path, json=body, params=params)
            if resp.status_code >= 400:
                try:
                    detail = resp.json().get("detail", resp.text)
                except ValueError:
                    detail = resp.text[:500]
                raise EngramAPIError(resp.status_code, detail, path)
            return resp.json() if resp.content else None

        return self._retrying.copy(retry=tenacity.retry_if_exception(retry_if))(once)

    def _put(self, url: str, path: Path, mime_type: str, size: int) -> None:
        """PUT the file's bytes to a presigned URL (streamed, with retries)."""

        def once() -> None:
            with open(path, "rb") as fh:
                resp = self._store.put(url, content=fh, headers={"Content-Type": mime_type,
                                                                 "Content-Length": str(size)})
            if resp.status_code >= 300:
                raise EngramAPIError(resp.status_code, resp.text[:500] or "upload refused", "presigned PUT")

        self._retrying(once)

    # --- API ----------------------------------------------------------------------------------------

    def upload_url(self, sha256: str, size: int, mime_type: str) -> UploadResponse:
        """``POST /v1/uploads``: the object key and a presigned PUT URL, or ``exists`` when stored."""
        req = UploadRequest(sha256=sha256, size=size, mime_type=mime_type)
        return UploadResponse.model_validate(self._call("POST", "/v1/uploads", req.model_dump()))

    def publish_event(self, event: PublishRequest) -> PublishResponse:
        """``POST /v1/events``: publish an event whose object is stored; idempotent by event id."""
        body = event.model_dump(mode="json", exclude_none=True)
        return PublishResponse.model_validate(self._call("POST", "/v1/events", body))

    def publish(self, path: str | Path, kind: MediaKind | None = None, user: str | None = None,
                device: str | None = None, captured_at: datetime | None = None, app: str | None = None,
                window: str | None = None, event_id: uuid.UUID | None = None,
                metadata: dict[str, str] | None = None) -> PublishResult:
        """Hash ``path``, upload it unless the store has it, and publish its event.

        ``kind``: detected from the content when None. ``captured_at``: default the file's modification
        time (UTC). ``event_id``: default derived from (API key, user, device, sha256), so publishing the
        same file again is a no-op; pass a new one (e.g. ``uuid.uuid4()``) to publish it anew after a
        failure. Raises NotMedia, OSError, EngramAPIError, httpx.TransportError.
        """
        path = Path(path)
        kind, mime = detect(path, kind)
        user, device = user or self.user, device or self.device
        stat = path.stat()
        digest = sha256_file(path)
        up = self.upload_url(digest, stat.st_size, mime)
        if not up.exists:
            self._put(up.url, path, mime, stat.st_size)
        eid = event_id or uuid.uuid5(_PUBLISH_NAMESPACE, f"{self._key_id}\x1f{user}\x1f{device}\x1f{digest}")
        event = PublishRequest(
            event_id=eid, user_id=user, device_id=device, kind=kind, object_key=up.object_key, sha256=digest,
            size=stat.st_size, mime_type=mime, captured_at=captured_at or datetime.fromtimestamp(stat.st_mtime, UTC),
            source_name=os.path.abspath(path), app=app, window=window, metadata=metadata or {})
        resp = self.publish_event(event)
        return PublishResult(resp.event_id, resp.status, not up.exists, resp.duplicate, stat.st_size)

    def publish_file(self, path: str | Path, kind: MediaKind | None = None, user: str | None = None,
                     device: str | None = None, captured_at: datetime | None = None, app: str | None = None,
                     window: str | None = None) -> uuid.UUID:
        """``publish`` returning only the event id."""
        return self.publish(path, kind, user, device, captured_at, app, window).event_id

    def event_status(self, event_id: uuid.UUID | str) -> EventStatusResponse:
        """``GET /v1/events/{id}``: the ledger status. EngramAPIError 404 for an unknown (or another
        tenant's) event."""
        return EventStatusResponse.model_validate(self._call("GET", f"/v1/events/{event_id}"))

    def search(self, query: str, user: str | None = None, memory_types: Iterable[MemoryType] | None = None,
               kinds: Iterable[MediaKind] | None = None, time_from: datetime | None = None,
               time_to: datetime | None = None, limit: int = 10) -> SearchResponse:
        """``POST /v1/search``: hybrid search over the tenant's memories (hits best first)."""
        body = _search_body(query, user, memory_types, kinds, time_from, time_to, limit)
        return SearchResponse.model_validate(self._call("POST", "/v1/search", body))

    def ask(self, question: str, user: str | None = None, memory_types: Iterable[MemoryType] | None = None,
            limit: int = 10, max_rounds: int = 5) -> AskResponse:
        """``POST /v1/ask``: an answer from memory with the memories it cites (M3-Agent's multi-round
        retrieval when the workers have an LLM), or the ranked evidence with ``answer`` None. ``limit``: hits
        per round. EngramAPIError 502 (not retried) when the LLM failed, with the reason."""
        body = _ask_body(question, user, memory_types, limit, max_rounds)
        return AskResponse.model_validate(self._call("POST", "/v1/ask", body, retry_if=_transient_for_ask))

    def add(self, messages_or_text: str | list[AddMessage | dict], user_id: str | None = None, *,
            id: str | None = None, time: datetime | None = None, source: str | None = None,
            session_id: str | None = None) -> AddMemoryResponse:
        """``POST /v1/memories``: remember one text, or chat messages (each an ``AddMessage`` or a dict with at
        least ``text``; the conversation record's speaker, timestamp, message_id and session_id optional), for
        ``user_id`` (default: the client's user). ``id``: your id for this addition; adding again with it stores
        nothing and answers ``duplicate`` (so retries are safe). Returns the event to poll (``wait``); the
        memory is searchable once it is done. Raises pydantic.ValidationError for invalid input (before any
        request), EngramAPIError."""
        body = _add_body(messages_or_text, user_id or self.user, id, time, source, session_id)
        return AddMemoryResponse.model_validate(self._call("POST", "/v1/memories", body))

    def name_entity(self, entity_id: uuid.UUID | str, name: str) -> EntitySummary:
        """``POST /v1/entities/{id}/name``: give a person entity a name (its first name from now on: searches
        naming it filter to it, ``ask`` shows it). EngramAPIError 404 when unknown (or another tenant's)."""
        return EntitySummary.model_validate(self._call("POST", f"/v1/entities/{entity_id}/name", {"name": name}))

    def get_memory(self, memory_id: uuid.UUID | str) -> MemoryRecord:
        """``GET /v1/memories/{id}``: one observation or memory. EngramAPIError 404 when unknown (or another
        tenant's)."""
        return MemoryRecord.model_validate(self._call("GET", f"/v1/memories/{memory_id}"))

    def list_memories(self, memory_type: MemoryType | str, user: str | None = None, limit: int = 50,
                      offset: int = 0) -> MemoryPage:
        """``GET /v1/memories``: a page of one type, newest content first."""
        params: dict[str, Any] = {"type": MemoryType(memory_type).value, "limit": limit, "offset": offset}
        if user:
            params["user"] = user
        return MemoryPage.model_validate(self._call("GET", "/v1/memories", params=params))

    def delete_memory(self, memory_id: uuid.UUID | str) -> None:
        """``DELETE /v1/memories/{id}``. EngramAPIError 404 when unknown (or another tenant's)."""
        self._call("DELETE", f"/v1/memories/{memory_id}")

    def forget_user(self, user: str) -> ForgetReport:
        """``DELETE /v1/users/{user}``: forget the user entirely; returns what was deleted."""
        return ForgetReport.model_validate(self._call("DELETE", f"/v1/users/{user}"))

    def export_user(self, user: str) -> UserExport:
        """``GET /v1/users/{user}/export``: everything stored about the user (vault entries without secrets)."""
        return UserExport.model_validate(self._call("GET", f"/v1/users/{user}/export"))

    def list_entities(self) -> EntityList:
        """``GET /v1/entities``: the tenant's person entities with names, counts and first/last seen."""
        return EntityList.model_validate(self._call("GET", "/v1/entities"))

    def merge_entities(self, keep: uuid.UUID | str, drop: uuid.UUID | str, reason: str = "manual") -> EntitySummary:
        """``POST /v1/entities/{keep}/merge``: merge entity ``drop`` into ``keep``; returns the kept entity.
        EngramAPIError 404 when either is unknown (or another tenant's), 422 when they are the same."""
        return EntitySummary.model_validate(self._call("POST", f"/v1/entities/{keep}/merge",
                                                       {"entity_id": str(drop), "reason": reason}))

    def wait(self, ids: Iterable[uuid.UUID | str], timeout: float = 300.0,
             interval: float = 0.5) -> dict[uuid.UUID, EventStatusResponse]:
        """Poll until every event is done, skipped or failed; returns each one's final status.
        Raises TimeoutError (naming how many are pending) after ``timeout`` seconds."""
        pending = {uuid.UUID(str(i)) for i in ids}
        out: dict[uuid.UUID, EventStatusResponse] = {}
        deadline = time.monotonic() + timeout
        while True:
            for eid in sorted(pending):
                st = self.event_status(eid)
                if st.status in FINAL:
                    out[eid] = st
                    pending.discard(eid)
            if not pending:
                return out
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{len(pending)} of {len(pending) + len(out)} events not finished "
                                   f"after {timeout:g} s")
            time.sleep(interval)


class AsyncEngramClient:
    """``EngramClient`` for asyncio (httpx.AsyncClient, tenacity's AsyncRetrying): the same API calls with the
    same arguments, retries and errors, awaited. Publishing files (hashing and presigned uploads) stays with
    ``EngramClient``. Use one client per event loop::

        async with AsyncEngramClient("http://engram:8000", api_key, user="alice") as client:
            added = await client.add("Maria moves to Lisbon in March", id="note-42")
            await client.wait([added.event_id])
            hits = (await client.search("where does Maria move?")).hits
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0, retries: int = 5,
                 backoff: float = 0.5, max_backoff: float = 8.0, user: str | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        if not api_key:
            raise ValueError("an API key is required (engram keys create --tenant T)")
        self.base_url = base_url.rstrip("/")
        self.user = user or os.environ.get("ENGRAM_USER") or safe_id(getpass.getuser())
        self._api = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, transport=transport,
                                      headers={"Authorization": f"Bearer {api_key}"})
        self._retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(max(1, retries)),
            wait=tenacity.wait_exponential(multiplier=backoff, max=max_backoff),
            retry=tenacity.retry_if_exception(_transient), reraise=True)

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._api.aclose()

    async def __aenter__(self) -> AsyncEngramClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def _call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None,
                    retry_if=_transient) -> Any:
        """As ``EngramClient._call``, awaited."""

        async def once() -> Any:
            resp = await self._api.request(method, path, json=body, params=params)
            if resp.status_code >= 400:
                try:
                    detail = resp.json().get("detail", resp.text)
                except ValueError:
                    detail = resp.text[:500]
                raise EngramAPIError(resp.status_code, detail, path)
            return resp.json() if resp.content else None

        return await self._retrying.copy(retry=tenacity.retry_if_exception(retry_if))(once)

    async def event_status(self, event_id: uuid.UUID | str) -> EventStatusResponse:
        """``GET /v1/events/{id}`` (see ``EngramClient.event_status``)."""
        return EventStatusResponse.model_validate(await self._call("GET", f"/v1/events/{event_id}"))

    async def search(self, query: str, user: str | None = None, memory_types: Iterable[MemoryType] | None = None,
                     kinds: Iterable[MediaKind] | None = None, time_from: datetime | None = None,
                     time_to: datetime | None = None, limit: int = 10) -> SearchResponse:
        """``POST /v1/search`` (see ``EngramClient.search``)."""
        body = _search_body(query, user, memory_types, kinds, time_from, time_to, limit)
        return SearchResponse.model_validate(await self._call("POST", "/v1/search", body))

    async def ask(self, question: str, user: str | None = None, memory_types: Iterable[MemoryType] | None = None,
                  limit: int = 10, max_rounds: int = 5) -> AskResponse:
        """``POST /v1/ask`` (see ``EngramClient.ask``; a 502 is the answer, not retried)."""
        body = _ask_body(question, user, memory_types, limit, max_rounds)
        return AskResponse.model_validate(await self._call("POST", "/v1/ask", body, retry_if=_transient_for_ask))

    async def add(self, messages_or_text: str | list[AddMessage | dict], user_id: str | None = None, *,
                  id: str | None = None, time: datetime | None = None, source: str | None = None,
                  session_id: str | None = None) -> AddMemoryResponse:
        """``POST /v1/memories`` (see ``EngramClient.add``)."""
        body = _add_body(messages_or_text, user_id or self.user, id, time, source, session_id)
        return AddMemoryResponse.model_validate(await self._call("POST", "/v1/memories", body))

    async def get_memory(self, memory_id: uuid.UUID | str) -> MemoryRecord:
        """``GET /v1/memories/{id}``."""
        return MemoryRecord.model_validate(await self._call("GET", f"/v1/memories/{memory_id}"))

    async def list_memories(self, memory_type: MemoryType | str, user: str | None = None, limit: int = 50,
                            offset: int = 0) -> MemoryPage:
        """``GET /v1/memories``: a page of one type, newest content first."""
        params: dict[str, Any] = {"type": MemoryType(memory_type).value, "limit": limit, "offset": offset}
        if user:
            params["user"] = user
        return MemoryPage.model_validate(await self._call("GET", "/v1/memories", params=params))

    async def delete_memory(self, memory_id: uuid.UUID | str) -> None:
        """``DELETE /v1/memories/{id}``."""
        await self._call("DELETE", f"/v1/memories/{memory_id}")

    async def forget_user(self, user: str) -> ForgetReport:
        """``DELETE /v1/users/{user}``."""
        return ForgetReport.model_validate(await self._call("DELETE", f"/v1/users/{user}"))

    async def export_user(self, user: str) -> UserExport:
        """``GET /v1/users/{user}/export``."""
        return UserExport.model_validate(await self._call("GET", f"/v1/users/{user}/export"))

    async def list_entities(self) -> EntityList:
        """``GET /v1/entities``."""
        return EntityList.model_validate(await self._call("GET", "/v1/entities"))

    async def merge_entities(self, keep: uuid.UUID | str, drop: uuid.UUID | str,
                             reason: str = "manual") -> EntitySummary:
        """``POST /v1/entities/{keep}/merge``."""
        return EntitySummary.model_validate(await self._call("POST", f"/v1/entities/{keep}/merge",
                                                             {"entity_id": str(drop), "reason": reason}))

    async def name_entity(self, entity_id: uuid.UUID | str, name: str) -> EntitySummary:
        """``POST /v1/entities/{id}/name``."""
        return EntitySummary.model_validate(await self._call("POST", f"/v1/entities/{entity_id}/name",
                                                             {"name": name}))

    async def wait(self, ids: Iterable[uuid.UUID | str], timeout: float = 300.0,
                   interval: float = 0.5) -> dict[uuid.UUID, EventStatusResponse]:
        """Poll until every event is done, skipped or failed (see ``EngramClient.wait``). Raises TimeoutError."""
        import asyncio

        pending = {uuid.UUID(str(i)) for i in ids}
        out: dict[uuid.UUID, EventStatusResponse] = {}
        deadline = time.monotonic() + timeout
        while True:
            for eid in sorted(pending):
                st = await self.event_status(eid)
                if st.status in FINAL:
                    out[eid] = st
                    pending.discard(eid)
            if not pending:
                return out
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{len(pending)} of {len(pending) + len(out)} events not finished "
                                   f"after {timeout:g} s")
            await asyncio.sleep(interval)
