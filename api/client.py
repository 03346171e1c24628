"""The producer SDK for edge devices: hash a file, upload it through a presigned URL, publish its event.

    with EngramClient("http://engram:8000", api_key) as client:
        event_id = client.publish_file("shot.png", user="alice", device="laptop")
        client.wait([event_id], timeout=120)
        hits = client.search("budget review").hits
        answer = client.ask("when is the budget review?").answer

``add`` remembers a text or chat messages directly (``POST /v1/memories``); ``AsyncEngramClient`` makes the
same API calls from asyncio, publishing files included. Both build their requests with the same functions
(``_Call``: method, path, body, how the answer is read, what is retried); only sending differs.

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
import stat
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import tenacity
from pydantic import BaseModel

from engram.schemas.add import AddMemoryRequest, AddMemoryResponse, AddMessage
from engram.schemas.api import (
    EventList,
    EventStatusResponse,
    PublishRequest,
    PublishResponse,
    UploadRequest,
    UploadResponse,
)
from engram.schemas.ask import AskRequest, AskResponse
from engram.schemas.entities import EntityList, EntitySampleList, EntitySummary
from engram.schemas.errors import EngramError
from engram.schemas.events import EventStatus, MediaKind
from engram.schemas.ids import sha256_file
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

FINAL = (EventStatus.done, EventStatus.skipped, EventStatus.failed)
_PUBLISH_NAMESPACE = uuid.UUID("0b7e0c1e-55a4-5f61-9d0e-3a1f2c4b5d6e")
_MIME_BY_SUFFIX = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
    ".wav": "audio/wav",
    ".flac": "audio/flac",
    ".mp3": "audio/mpeg",
    ".ogg": "audio/ogg",
    ".m4a": "audio/mp4",
    ".mp4": "video/mp4",
    ".mov": "video/quicktime",
    ".webm": "video/webm",
    ".mkv": "video/x-matroska",
    ".json": "application/json",
    ".jsonl": "application/x-ndjson",
    ".ndjson": "application/x-ndjson",
    ".txt": "text/plain",
}


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
    file suffix. Raises NotMedia when neither says what it is, or for what is not a regular file (a FIFO, a
    socket, a device: hashing it would wait for a writer or never end, whatever ``kind`` says)."""
    from engram.workers.media.detect import detect as sniff_file  # the worker extra's decoders: only to publish

    if not stat.S_ISREG(path.stat().st_mode):
        raise NotMedia(f"{path}: not a regular file (a FIFO, a socket or a device)")
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


# --- request building, shared by both clients ------------------------------------------------------------


def _identity(answer: Any) -> Any:
    return answer


@dataclass(frozen=True)
class _Call:
    """One API request as both clients send it: ``method`` and ``path``, the JSON ``body`` and query
    ``params``, ``parse`` turning the JSON answer into the result, ``retry_if`` the errors retried."""

    method: str
    path: str
    body: Any = None
    params: dict[str, Any] | None = None
    parse: Callable[[Any], Any] = _identity
    retry_if: Callable[[BaseException], bool] = field(default=_transient)


def _search_call(
    query: str,
    user: str | None,
    memory_types: Iterable[MemoryType] | None,
    kinds: Iterable[MediaKind] | None,
    time_from: datetime | None,
    time_to: datetime | None,
    limit: int,
) -> _Call:
    """``POST /v1/search``."""
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
    return _Call("POST", "/v1/search", body, parse=SearchResponse.model_validate)


def _ask_call(
    question: str, user: str | None, memory_types: Iterable[MemoryType] | None, limit: int, max_rounds: int
) -> _Call:
    """``POST /v1/ask`` (a 502 is the answer, not retried)."""
    body: dict[str, Any] = {"question": question, "limit": limit, "max_rounds": max_rounds}
    if user:
        body["user_id"] = user
    if memory_types is not None:
        body["memory_types"] = [MemoryType(t).value for t in memory_types]
    return _Call("POST", "/v1/ask", body, parse=AskResponse.model_validate, retry_if=_transient_for_ask)


def _add_call(
    messages_or_text: str | list[AddMessage | dict],
    user_id: str,
    client_id: str | None,
    time: datetime | None,
    source: str | None,
    session_id: str | None,
) -> _Call:
    """``POST /v1/memories``, its body validated here (pydantic.ValidationError before any request)."""
    if isinstance(messages_or_text, str):
        content: dict[str, Any] = {"text": messages_or_text}
    else:
        content = {
            "messages": [m if isinstance(m, AddMessage) else AddMessage.model_validate(m) for m in messages_or_text]
        }
    req = AddMemoryRequest(**content, user_id=user_id, id=client_id, time=time, source=source, session_id=session_id)
    return _Call(
        "POST", "/v1/memories", req.model_dump(mode="json", exclude_none=True), parse=AddMemoryResponse.model_validate
    )


def _list_memories_call(memory_type: MemoryType | str, user: str | None, limit: int, offset: int) -> _Call:
    """``GET /v1/memories``."""
    params: dict[str, Any] = {"type": MemoryType(memory_type).value, "limit": limit, "offset": offset}
    if user:
        params["user"] = user
    return _Call("GET", "/v1/memories", params=params, parse=MemoryPage.model_validate)


def _upload_call(sha256: str, size: int, mime_type: str) -> _Call:
    """``POST /v1/uploads``."""
    body = UploadRequest(sha256=sha256, size=size, mime_type=mime_type).model_dump()
    return _Call("POST", "/v1/uploads", body, parse=UploadResponse.model_validate)


def _publish_call(event: PublishRequest) -> _Call:
    """``POST /v1/events``."""
    return _Call(
        "POST", "/v1/events", event.model_dump(mode="json", exclude_none=True), parse=PublishResponse.model_validate
    )


def _forget_call(
    user: str | None,
    since: datetime | None,
    until: datetime | None,
    app: str | None,
    device: str | None,
    memory_ids: Iterable[uuid.UUID | str],
    event_ids: Iterable[uuid.UUID | str],
    dry_run: bool,
) -> _Call:
    """``POST /v1/forget``; raises ValueError (pydantic's) for a scope that names nothing. Retried when transient:
    forgetting again what is already forgotten changes nothing."""
    scope = ForgetScope(
        user_id=user,
        since=since,
        until=until,
        app=app,
        device_id=device,
        memory_ids=[uuid.UUID(str(i)) for i in memory_ids],
        event_ids=[uuid.UUID(str(i)) for i in event_ids],
    )
    return _Call(
        "POST",
        "/v1/forget",
        scope.model_dump(mode="json", exclude_none=True, exclude_defaults=True),
        params={"dry_run": "true"} if dry_run else None,
        parse=ForgetScopeReport.model_validate,
    )


def _update_call(memory_id: uuid.UUID | str, text: str) -> _Call:
    """``PATCH /v1/memories/{id}``: not retried (a second correction of a superseded memory is refused)."""
    return _Call(
        "PATCH",
        f"/v1/memories/{memory_id}",
        {"text": text},
        parse=MemoryRecord.model_validate,
        retry_if=lambda exc: isinstance(exc, httpx.ConnectError),
    )


def _model_call(path: str, request: BaseModel, answer: type[BaseModel], retry_if=_transient) -> _Call:
    """``POST path`` with a request model as its body (``tenant_id`` left out: the key's)."""
    body = request.model_dump(mode="json", exclude_none=True, exclude={"tenant_id"})
    return _Call("POST", path, body, parse=answer.model_validate, retry_if=retry_if)


def _events_call(user: str | None, status: EventStatus | str | None, limit: int) -> _Call:
    """``GET /v1/events``."""
    params: dict[str, Any] = {"limit": limit}
    if user:
        params["user"] = user
    if status is not None:
        params["status"] = EventStatus(status).value
    return _Call("GET", "/v1/events", params=params, parse=EventList.model_validate)


def _timeline_call(request: TimelineRequest) -> _Call:
    """``GET /v1/timeline`` with the request's fields as query parameters (``tenant_id`` left out: the key's)."""
    req = request.model_dump(mode="json", exclude_none=True, exclude={"tenant_id"})
    names = {"user_id": "user", "kinds": "kind", "apps": "app", "devices": "device"}
    return _Call(
        "GET", "/v1/timeline", params={names.get(k, k): v for k, v in req.items()}, parse=MemoryPage.model_validate
    )


def _media_path(observation_id: uuid.UUID | str, thumbnail: bool) -> str:
    return f"/v1/{'thumbnails' if thumbnail else 'media'}/{observation_id}"


def _media_answer(resp: httpx.Response, path: str) -> tuple[bytes, str]:
    """The object's bytes and media type; EngramAPIError for an error status."""
    if resp.status_code >= 400:
        _raise_for_error(resp, path)
    return resp.content, resp.headers.get("content-type", "application/octet-stream")


_CALLS: dict[str, Callable[..., _Call]] = {
    "event_status": lambda eid: _Call("GET", f"/v1/events/{eid}", parse=EventStatusResponse.model_validate),
    "get_memory": lambda mid: _Call("GET", f"/v1/memories/{mid}", parse=MemoryRecord.model_validate),
    "delete_memory": lambda mid: _Call("DELETE", f"/v1/memories/{mid}"),
    "forget_user": lambda user: _Call("DELETE", f"/v1/users/{user}", parse=ForgetReport.model_validate),
    "export_user": lambda user: _Call("GET", f"/v1/users/{user}/export", parse=UserExport.model_validate),
    "list_entities": lambda: _Call("GET", "/v1/entities", parse=EntityList.model_validate),
    "users": lambda: _Call("GET", "/v1/users", parse=list),
    "retry_event": lambda eid: _Call(
        "POST",
        f"/v1/events/{eid}/retry",
        parse=EventStatusResponse.model_validate,
        retry_if=lambda exc: isinstance(exc, httpx.ConnectError),
    ),  # again: a 404
    "storage": lambda: _Call("GET", "/v1/storage", parse=StorageUse.model_validate),
    "memories_from": lambda oid: _Call(
        "GET", f"/v1/memories/{oid}/derived", parse=lambda items: [MemoryRecord.model_validate(r) for r in items]
    ),
    "entity_samples": lambda eid: _Call("GET", f"/v1/entities/{eid}/samples", parse=EntitySampleList.model_validate),
    "split_entity": lambda eid, key: _Call(
        "POST",
        f"/v1/entities/{eid}/split",
        {"sample_key": key},
        parse=EntitySummary.model_validate,  # a second split would 404
        retry_if=lambda exc: isinstance(exc, httpx.ConnectError),
    ),
    "merge_entities": lambda keep, drop, reason: _Call(
        "POST",
        f"/v1/entities/{keep}/merge",
        {"entity_id": str(drop), "reason": reason},
        parse=EntitySummary.model_validate,
    ),
    "name_entity": lambda eid, name: _Call(
        "POST", f"/v1/entities/{eid}/name", {"name": name}, parse=EntitySummary.model_validate
    ),
}


def _raise_for_error(resp: httpx.Response, path: str) -> Any:
    """The JSON answer (None when empty); EngramAPIError with the server's detail for an error status."""
    if resp.status_code >= 400:
        try:
            detail = resp.json().get("detail", resp.text)
        except ValueError:
            detail = resp.text[:500]
        raise EngramAPIError(resp.status_code, detail, path)
    return resp.json() if resp.content else None


@dataclass(frozen=True)
class _Staged:
    """A file ready to upload: what it is (``kind``, ``mime``), ``size`` bytes, ``mtime`` (epoch s), ``sha256``."""

    path: Path
    kind: MediaKind
    mime: str
    size: int
    mtime: float
    sha256: str


def _stage(path: Path, kind: MediaKind | None) -> _Staged:
    """Detect and hash ``path`` (blocking file I/O). Raises NotMedia, OSError."""
    kind, mime = detect(path, kind)
    stat = path.stat()
    return _Staged(path, kind, mime, stat.st_size, stat.st_mtime, sha256_file(path))


def _put_headers(staged: _Staged) -> dict[str, str]:
    # a Content-Length given: httpx sends the streamed body without chunked encoding, as presigned PUTs need
    return {"Content-Type": staged.mime, "Content-Length": str(staged.size)}


def _check_put(resp: httpx.Response) -> None:
    if resp.status_code >= 300:
        raise EngramAPIError(resp.status_code, resp.text[:500] or "upload refused", "presigned PUT")


class _Base:
    """What both clients share: the base URL, default user and device, the key's hash (for event ids), the
    retry policy's arguments, and the event a published file makes."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        retries: int,
        backoff: float,
        max_backoff: float,
        user: str | None,
        device: str | None,
    ) -> None:
        if not api_key:
            raise ValueError("an API key is required (engram keys create --tenant T)")
        self.base_url = base_url.rstrip("/")
        self.user = user or os.environ.get("ENGRAM_USER") or safe_id(getpass.getuser())
        self.device = device or os.environ.get("ENGRAM_DEVICE") or safe_id(socket.gethostname())
        self._key_id = hashlib.sha256(api_key.encode()).hexdigest()[:16]
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._stop = tenacity.stop_after_attempt(max(1, retries))
        self._wait = tenacity.wait_exponential(multiplier=backoff, max=max_backoff)

    def _event(
        self,
        staged: _Staged,
        up: UploadResponse,
        user: str | None,
        device: str | None,
        captured_at: datetime | None,
        app: str | None,
        window: str | None,
        event_id: uuid.UUID | None,
        metadata: dict[str, str] | None,
        source_name: str | None = None,
    ) -> PublishRequest:
        """The event of a staged and uploaded file (default id from key, user, device and sha256; default name
        the file's absolute path)."""
        user, device = user or self.user, device or self.device
        eid = event_id or uuid.uuid5(_PUBLISH_NAMESPACE, f"{self._key_id}\x1f{user}\x1f{device}\x1f{staged.sha256}")
        return PublishRequest(
            event_id=eid,
            user_id=user,
            device_id=device,
            kind=staged.kind,
            object_key=up.object_key,
            sha256=staged.sha256,
            size=staged.size,
            mime_type=staged.mime,
            captured_at=captured_at or datetime.fromtimestamp(staged.mtime, UTC),
            source_name=source_name or os.path.abspath(staged.path),
            app=app,
            window=window,
            metadata=metadata or {},
        )


def _pending_report(pending: set, out: dict, timeout: float) -> TimeoutError:
    return TimeoutError(f"{len(pending)} of {len(pending) + len(out)} events not finished after {timeout:g} s")


class EngramClient(_Base):
    """A client of one engram API as one tenant (the API key's).

    ``retries``: attempts per call (at least 1); waits grow exponentially from ``backoff`` seconds up to
    ``max_backoff``. ``transport``: an httpx transport for both the API and the object store (tests).
    ``user`` / ``device``: defaults for ``publish_file`` (default: ENGRAM_USER / ENGRAM_DEVICE, else the OS
    user and the host name).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        user: str | None = None,
        device: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, api_key, retries, backoff, max_backoff, user, device)
        self._api = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport, headers=self._headers)
        self._store = httpx.Client(timeout=timeout, transport=transport)  # presigned URLs carry no API key
        self._retrying = tenacity.Retrying(
            stop=self._stop, wait=self._wait, retry=tenacity.retry_if_exception(_transient), reraise=True
        )

    def close(self) -> None:
        """Close the HTTP connections."""
        self._api.close()
        self._store.close()

    def __enter__(self) -> EngramClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- HTTP ---------------------------------------------------------------------------------------

    def _send(self, call: _Call) -> Any:
        """One API call with retries (of the errors ``call.retry_if`` accepts); returns ``call.parse`` of the
        JSON answer (None for an empty one). Raises EngramAPIError for error answers (after the retries for
        transient ones) and httpx.TransportError when the server stays unreachable."""

        def once() -> Any:
            resp = self._api.request(call.method, call.path, json=call.body, params=call.params)
            return _raise_for_error(resp, call.path)

        answer = self._retrying.copy(retry=tenacity.retry_if_exception(call.retry_if))(once)
        return call.parse(answer) if answer is not None else None

    def _put(self, url: str, staged: _Staged) -> None:
        """PUT the file's bytes to a presigned URL (streamed, with retries)."""

        def once() -> None:
            with open(staged.path, "rb") as fh:
                _check_put(self._store.put(url, content=fh, headers=_put_headers(staged)))

        self._retrying(once)

    # --- API ----------------------------------------------------------------------------------------

    def upload_url(self, sha256: str, size: int, mime_type: str) -> UploadResponse:
        """``POST /v1/uploads``: the object key and a presigned PUT URL (to a staging key the publish
        verifies), or ``exists`` when stored."""
        return self._send(_upload_call(sha256, size, mime_type))

    def publish_event(self, event: PublishRequest) -> PublishResponse:
        """``POST /v1/events``: publish an event whose object is stored; idempotent by event id."""
        return self._send(_publish_call(event))

    def publish(
        self,
        path: str | Path,
        kind: MediaKind | None = None,
        user: str | None = None,
        device: str | None = None,
        captured_at: datetime | None = None,
        app: str | None = None,
        window: str | None = None,
        event_id: uuid.UUID | None = None,
        metadata: dict[str, str] | None = None,
        source_name: str | None = None,
    ) -> PublishResult:
        """Hash ``path``, upload it unless the store has it, and publish its event (named ``source_name``,
        default the file's absolute path).

        ``kind``: detected from the content when None. ``captured_at``: default the file's modification
        time (UTC). ``event_id``: default derived from (API key, user, device, sha256), so publishing the
        same file again is a no-op; pass a new one (e.g. ``uuid.uuid4()``) to publish it anew after a
        failure. Raises NotMedia, OSError, EngramAPIError, httpx.TransportError.
        """
        staged = _stage(Path(path), kind)
        up = self.upload_url(staged.sha256, staged.size, staged.mime)
        if not up.exists:
            self._put(up.url, staged)
        resp = self.publish_event(
            self._event(staged, up, user, device, captured_at, app, window, event_id, metadata, source_name)
        )
        return PublishResult(resp.event_id, resp.status, not up.exists, resp.duplicate, staged.size)

    def publish_file(
        self,
        path: str | Path,
        kind: MediaKind | None = None,
        user: str | None = None,
        device: str | None = None,
        captured_at: datetime | None = None,
        app: str | None = None,
        window: str | None = None,
    ) -> uuid.UUID:
        """``publish`` returning only the event id."""
        return self.publish(path, kind, user, device, captured_at, app, window).event_id

    def event_status(self, event_id: uuid.UUID | str) -> EventStatusResponse:
        """``GET /v1/events/{id}``: the ledger status. EngramAPIError 404 for an unknown (or another
        tenant's) event."""
        return self._send(_CALLS["event_status"](event_id))

    def events(self, user: str | None = None, status: EventStatus | str | None = None, limit: int = 100) -> EventList:
        """``GET /v1/events``: the tenant's events (``user``'s), most recently changed first, optionally of one
        status, with how many of the tenant's events are in each status."""
        return self._send(_events_call(user, status, limit))

    def users(self) -> list[str]:
        """``GET /v1/users``: the tenant's users (those with events), sorted."""
        return self._send(_CALLS["users"]())

    def retry_event(self, event_id: uuid.UUID | str) -> EventStatusResponse:
        """``POST /v1/events/{id}/retry``: run a failed event again; its status after (queued). Retried only when
        the connection failed (a second retry of the same failure answers 404). EngramAPIError 404 for an unknown
        event, another tenant's, or one that is not failed."""
        return self._send(_CALLS["retry_event"](event_id))

    def memories_from(self, observation_id: uuid.UUID | str) -> list[MemoryRecord]:
        """``GET /v1/memories/{id}/derived``: the memories drawn from an observation (current versions, newest
        first, at most 50); empty for an unknown or another tenant's id."""
        return self._send(_CALLS["memories_from"](observation_id))

    def storage(self) -> StorageUse:
        """``GET /v1/storage``: the bytes kept per kind (the tenant's originals per media kind, thumbnails, caches,
        vault; the data dir's shared files), the storage cap and the retention rules."""
        return self._send(_CALLS["storage"]())

    def timeline_request(self, request: TimelineRequest) -> MemoryPage:
        """``GET /v1/timeline``: observations in a time span, newest first (``request.tenant_id`` is ignored: the
        key's tenant)."""
        return self._send(_timeline_call(request))

    def media(
        self, observation_id: uuid.UUID | str, thumbnail: bool = False, user: str | None = None
    ) -> tuple[bytes, str]:
        """``GET /v1/media/{id}`` (the original) or, with ``thumbnail``, ``GET /v1/thumbnails/{id}`` (a small
        WebP): the object's bytes and media type, whole. EngramAPIError 404 for an unknown (or another tenant's,
        or with ``user`` another user's) observation, 410 when its object is gone or it has no picture (the reason
        in ``detail``)."""
        path, params = _media_path(observation_id, thumbnail), {"user": user} if user else None
        return self._retrying(lambda: _media_answer(self._api.get(path, params=params), path))

    def search(
        self,
        query: str,
        user: str | None = None,
        memory_types: Iterable[MemoryType] | None = None,
        kinds: Iterable[MediaKind] | None = None,
        time_from: datetime | None = None,
        time_to: datetime | None = None,
        limit: int = 10,
    ) -> SearchResponse:
        """``POST /v1/search``: hybrid search over the tenant's memories (hits best first)."""
        return self._send(_search_call(query, user, memory_types, kinds, time_from, time_to, limit))

    def search_request(self, request: SearchRequest) -> SearchResponse:
        """``POST /v1/search`` with every filter of a ``SearchRequest`` (entities, apps, devices...); its
        ``tenant_id`` is left out (the key's)."""
        return self._send(_model_call("/v1/search", request, SearchResponse))

    def ask_request(self, request: AskRequest) -> AskResponse:
        """``POST /v1/ask`` with an ``AskRequest`` (``tenant_id`` left out; a 502 is the answer, not retried)."""
        return self._send(_model_call("/v1/ask", request, AskResponse, _transient_for_ask))

    def add_request(self, request: AddMemoryRequest) -> AddMemoryResponse:
        """``POST /v1/memories`` with an ``AddMemoryRequest`` (see ``add``)."""
        return self._send(_model_call("/v1/memories", request, AddMemoryResponse))

    def ask(
        self,
        question: str,
        user: str | None = None,
        memory_types: Iterable[MemoryType] | None = None,
        limit: int = 10,
        max_rounds: int = 5,
    ) -> AskResponse:
        """``POST /v1/ask``: an answer from memory with the memories it cites (M3-Agent's multi-round
        retrieval when the workers have an LLM), or the ranked evidence with ``answer`` None. ``limit``: hits
        per round. EngramAPIError 502 (not retried) when the LLM failed, with the reason."""
        return self._send(_ask_call(question, user, memory_types, limit, max_rounds))

    def add(
        self,
        messages_or_text: str | list[AddMessage | dict],
        user_id: str | None = None,
        *,
        id: str | None = None,
        time: datetime | None = None,
        source: str | None = None,
        session_id: str | None = None,
    ) -> AddMemoryResponse:
        """``POST /v1/memories``: remember one text, or chat messages (each an ``AddMessage`` or a dict with at
        least ``text``; the conversation record's speaker, timestamp, message_id and session_id optional), for
        ``user_id`` (default: the client's user). ``id``: your id for this addition; adding again with it stores
        nothing and answers ``duplicate`` (so retries are safe); when the first addition never finished (its task
        lost, its worker killed), the retry takes it up and answers once it is stored (within about 20 s), with
        ``resumed`` set. Returns the event to poll (``wait``); the memory is searchable once it is done. Raises
        pydantic.ValidationError for invalid input (before any request), EngramAPIError."""
        return self._send(_add_call(messages_or_text, user_id or self.user, id, time, source, session_id))

    def name_entity(self, entity_id: uuid.UUID | str, name: str) -> EntitySummary:
        """``POST /v1/entities/{id}/name``: give a person entity a name (its first name from now on: searches
        naming it filter to it, ``ask`` shows it). EngramAPIError 404 when unknown (or another tenant's)."""
        return self._send(_CALLS["name_entity"](entity_id, name))

    def get_memory(self, memory_id: uuid.UUID | str) -> MemoryRecord:
        """``GET /v1/memories/{id}``: one observation or memory. EngramAPIError 404 when unknown (or another
        tenant's)."""
        return self._send(_CALLS["get_memory"](memory_id))

    def list_memories(
        self, memory_type: MemoryType | str, user: str | None = None, limit: int = 50, offset: int = 0
    ) -> MemoryPage:
        """``GET /v1/memories``: a page of one type, newest content first."""
        return self._send(_list_memories_call(memory_type, user, limit, offset))

    def delete_memory(self, memory_id: uuid.UUID | str) -> None:
        """``DELETE /v1/memories/{id}``. EngramAPIError 404 when unknown (or another tenant's)."""
        self._send(_CALLS["delete_memory"](memory_id))

    def forget_user(self, user: str) -> ForgetReport:
        """``DELETE /v1/users/{user}``: forget the user entirely; returns what was deleted."""
        return self._send(_CALLS["forget_user"](user))

    def forget(
        self,
        *,
        user: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        app: str | None = None,
        device: str | None = None,
        memory_ids: Iterable[uuid.UUID | str] = (),
        event_ids: Iterable[uuid.UUID | str] = (),
        dry_run: bool = False,
    ) -> ForgetScopeReport:
        """``POST /v1/forget``: forget, leaving nothing behind, a time range (aware datetimes), an app, a device,
        events or ids (every criterion given must match), optionally of one user; memories drawn also from other
        sources are rewritten without it. ``dry_run``: only count. Raises ValueError for a scope naming nothing,
        EngramAPIError 501 where the server does not offer it."""
        return self._send(_forget_call(user, since, until, app, device, memory_ids, event_ids, dry_run))

    def update_memory(self, memory_id: uuid.UUID | str, text: str) -> MemoryRecord:
        """``PATCH /v1/memories/{id}``: correct a memory; the new version (the old one is kept as its history,
        superseded). EngramAPIError 404 when unknown, 422 for an observation or a superseded memory, 501 where
        corrections are not built."""
        return self._send(_update_call(memory_id, text))

    def export_user(self, user: str) -> UserExport:
        """``GET /v1/users/{user}/export``: everything stored about the user (vault entries without secrets)."""
        return self._send(_CALLS["export_user"](user))

    def list_entities(self) -> EntityList:
        """``GET /v1/entities``: the tenant's person entities with names, counts and first/last seen."""
        return self._send(_CALLS["list_entities"]())

    def merge_entities(self, keep: uuid.UUID | str, drop: uuid.UUID | str, reason: str = "manual") -> EntitySummary:
        """``POST /v1/entities/{keep}/merge``: merge entity ``drop`` into ``keep``; returns the kept entity.
        EngramAPIError 404 when either is unknown (or another tenant's), 422 when they are the same."""
        return self._send(_CALLS["merge_entities"](keep, drop, reason))

    def entity_samples(self, entity_id: uuid.UUID | str) -> EntitySampleList:
        """``GET /v1/entities/{id}/samples``: the entity's face and voice samples. EngramAPIError 404 when
        unknown (or another tenant's)."""
        return self._send(_CALLS["entity_samples"](entity_id))

    def sample_media(self, entity_id: uuid.UUID | str, sample_key: str) -> tuple[bytes, str]:
        """``GET /v1/entities/{id}/samples/media``: a sample's face crop (WebP) or voice clip (WAV), bytes and media
        type. EngramAPIError 404 for an unknown entity or sample, 410 when it cannot be made (the reason)."""
        path = f"/v1/entities/{entity_id}/samples/media"
        return self._retrying(lambda: _media_answer(self._api.get(path, params={"key": sample_key}), path))

    def split_entity(self, entity_id: uuid.UUID | str, sample_key: str) -> EntitySummary:
        """``POST /v1/entities/{id}/split``: "not this person", the sample moved into a new entity (returned).
        EngramAPIError 404 for an unknown entity or sample."""
        return self._send(_CALLS["split_entity"](entity_id, sample_key))

    def wait(
        self, ids: Iterable[uuid.UUID | str], timeout: float = 300.0, interval: float = 0.5
    ) -> dict[uuid.UUID, EventStatusResponse]:
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
                raise _pending_report(pending, out, timeout)
            time.sleep(interval)


class AsyncEngramClient(_Base):
    """``EngramClient`` for asyncio (httpx.AsyncClient, tenacity's AsyncRetrying): the same API calls with the
    same arguments, requests, retries and errors, awaited, publishing files included (hashing runs in a worker
    thread, the upload streams the file in 1 MiB blocks). Use one client per event loop::

        async with AsyncEngramClient("http://engram:8000", api_key, user="alice") as client:
            added = await client.add("Maria moves to Lisbon in March", id="note-42")
            shot = await client.publish("shot.png")
            await client.wait([added.event_id, shot.event_id])
            hits = (await client.search("where does Maria move?")).hits
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        user: str | None = None,
        device: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, api_key, retries, backoff, max_backoff, user, device)
        self._api = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout, transport=transport, headers=self._headers
        )
        self._store = httpx.AsyncClient(timeout=timeout, transport=transport)  # presigned URLs carry no API key
        self._retrying = tenacity.AsyncRetrying(
            stop=self._stop, wait=self._wait, retry=tenacity.retry_if_exception(_transient), reraise=True
        )

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._api.aclose()
        await self._store.aclose()

    async def __aenter__(self) -> AsyncEngramClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def _send(self, call: _Call) -> Any:
        """As ``EngramClient._send``, awaited."""

        async def once() -> Any:
            resp = await self._api.request(call.method, call.path, json=call.body, params=call.params)
            return _raise_for_error(resp, call.path)

        answer: Any = await self._retrying.copy(retry=tenacity.retry_if_exception(call.retry_if))(once)
        return call.parse(answer) if answer is not None else None

    async def _put(self, url: str, staged: _Staged) -> None:
        """As ``EngramClient._put``: the file streamed in 1 MiB blocks read in a worker thread."""
        import asyncio

        async def blocks() -> AsyncIterator[bytes]:
            with open(staged.path, "rb") as fh:
                while block := await asyncio.to_thread(fh.read, 1 << 20):
                    yield block

        async def once() -> None:
            _check_put(await self._store.put(url, content=blocks(), headers=_put_headers(staged)))

        await self._retrying(once)

    async def upload_url(self, sha256: str, size: int, mime_type: str) -> UploadResponse:
        """``POST /v1/uploads`` (see ``EngramClient.upload_url``)."""
        return await self._send(_upload_call(sha256, size, mime_type))

    async def publish_event(self, event: PublishRequest) -> PublishResponse:
        """``POST /v1/events`` (see ``EngramClient.publish_event``)."""
        return await self._send(_publish_call(event))

    async def publish(
        self,
        path: str | Path,
        kind: MediaKind | None = None,
        user: str | None = None,
        device: str | None = None,
        captured_at: datetime | None = None,
        app: str | None = None,
        window: str | None = None,
        event_id: uuid.UUID | None = None,
        metadata: dict[str, str] | None = None,
        source_name: str | None = None,
    ) -> PublishResult:
        """Hash ``path`` (in a worker thread), upload it unless the store has it, publish its event (see
        ``EngramClient.publish``: the same event id, so either client publishing a file again is a no-op).
        Raises NotMedia, OSError, EngramAPIError, httpx.TransportError."""
        import asyncio

        staged = await asyncio.to_thread(_stage, Path(path), kind)
        up = await self.upload_url(staged.sha256, staged.size, staged.mime)
        if not up.exists:
            await self._put(up.url, staged)
        resp = await self.publish_event(
            self._event(staged, up, user, device, captured_at, app, window, event_id, metadata, source_name)
        )
        return PublishResult(resp.event_id, resp.status, not up.exists, resp.duplicate, staged.size)

    async def publish_file(
        self,
        path: str | Path,
        kind: MediaKind | None = None,
        user: str | None = None,
        device: str | None = None,
        captured_at: datetime | None = None,
        app: str | None = None,
        window: str | None = None,
    ) -> uuid.UUID:
        """``publish`` returning only the event id."""
        return (await self.publish(path, kind, user, device, captured_at, app, window)).event_id

    async def event_status(self, event_id: uuid.UUID | str) -> EventStatusResponse:
        """``GET /v1/events/{id}`` (see ``EngramClient.event_status``)."""
        return await self._send(_CALLS["event_status"](event_id))

    async def events(
        self, user: str | None = None, status: EventStatus | str | None = None, limit: int = 100
    ) -> EventList:
        """``GET /v1/events`` (see ``EngramClient.events``)."""
        return await self._send(_events_call(user, status, limit))

    async def users(self) -> list[str]:
        """``GET /v1/users``."""
        return await self._send(_CALLS["users"]())

    async def retry_event(self, event_id: uuid.UUID | str) -> EventStatusResponse:
        """``POST /v1/events/{id}/retry`` (see ``EngramClient.retry_event``)."""
        return await self._send(_CALLS["retry_event"](event_id))

    async def memories_from(self, observation_id: uuid.UUID | str) -> list[MemoryRecord]:
        """``GET /v1/memories/{id}/derived`` (see ``EngramClient.memories_from``)."""
        return await self._send(_CALLS["memories_from"](observation_id))

    async def storage(self) -> StorageUse:
        """``GET /v1/storage`` (see ``EngramClient.storage``)."""
        return await self._send(_CALLS["storage"]())

    async def timeline_request(self, request: TimelineRequest) -> MemoryPage:
        """``GET /v1/timeline`` (see ``EngramClient.timeline_request``)."""
        return await self._send(_timeline_call(request))

    async def media(
        self, observation_id: uuid.UUID | str, thumbnail: bool = False, user: str | None = None
    ) -> tuple[bytes, str]:
        """``GET /v1/media/{id}`` or ``/v1/thumbnails/{id}`` (see ``EngramClient.media``)."""
        path, params = _media_path(observation_id, thumbnail), {"user": user} if user else None

        async def once() -> tuple[bytes, str]:
            return _media_answer(await self._api.get(path, params=params), path)

        return await self._retrying(once)

    async def search(
        self,
        query: str,
        user: str | None = None,
        memory_types: Iterable[MemoryType] | None = None,
        kinds: Iterable[MediaKind] | None = None,
        time_from: datetime | None = None,
        time_to: datetime | None = None,
        limit: int = 10,
    ) -> SearchResponse:
        """``POST /v1/search`` (see ``EngramClient.search``)."""
        return await self._send(_search_call(query, user, memory_types, kinds, time_from, time_to, limit))

    async def search_request(self, request: SearchRequest) -> SearchResponse:
        """``POST /v1/search`` with a whole ``SearchRequest`` (see ``EngramClient.search_request``)."""
        return await self._send(_model_call("/v1/search", request, SearchResponse))

    async def ask_request(self, request: AskRequest) -> AskResponse:
        """``POST /v1/ask`` with an ``AskRequest`` (see ``EngramClient.ask_request``)."""
        return await self._send(_model_call("/v1/ask", request, AskResponse, _transient_for_ask))

    async def add_request(self, request: AddMemoryRequest) -> AddMemoryResponse:
        """``POST /v1/memories`` with an ``AddMemoryRequest``."""
        return await self._send(_model_call("/v1/memories", request, AddMemoryResponse))

    async def ask(
        self,
        question: str,
        user: str | None = None,
        memory_types: Iterable[MemoryType] | None = None,
        limit: int = 10,
        max_rounds: int = 5,
    ) -> AskResponse:
        """``POST /v1/ask`` (see ``EngramClient.ask``; a 502 is the answer, not retried)."""
        return await self._send(_ask_call(question, user, memory_types, limit, max_rounds))

    async def add(
        self,
        messages_or_text: str | list[AddMessage | dict],
        user_id: str | None = None,
        *,
        id: str | None = None,
        time: datetime | None = None,
        source: str | None = None,
        session_id: str | None = None,
    ) -> AddMemoryResponse:
        """``POST /v1/memories`` (see ``EngramClient.add``)."""
        return await self._send(_add_call(messages_or_text, user_id or self.user, id, time, source, session_id))

    async def get_memory(self, memory_id: uuid.UUID | str) -> MemoryRecord:
        """``GET /v1/memories/{id}``."""
        return await self._send(_CALLS["get_memory"](memory_id))

    async def list_memories(
        self, memory_type: MemoryType | str, user: str | None = None, limit: int = 50, offset: int = 0
    ) -> MemoryPage:
        """``GET /v1/memories``: a page of one type, newest content first."""
        return await self._send(_list_memories_call(memory_type, user, limit, offset))

    async def delete_memory(self, memory_id: uuid.UUID | str) -> None:
        """``DELETE /v1/memories/{id}``."""
        await self._send(_CALLS["delete_memory"](memory_id))

    async def forget_user(self, user: str) -> ForgetReport:
        """``DELETE /v1/users/{user}``."""
        return await self._send(_CALLS["forget_user"](user))

    async def forget(
        self,
        *,
        user: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        app: str | None = None,
        device: str | None = None,
        memory_ids: Iterable[uuid.UUID | str] = (),
        event_ids: Iterable[uuid.UUID | str] = (),
        dry_run: bool = False,
    ) -> ForgetScopeReport:
        """``POST /v1/forget`` (see ``EngramClient.forget``)."""
        return await self._send(_forget_call(user, since, until, app, device, memory_ids, event_ids, dry_run))

    async def update_memory(self, memory_id: uuid.UUID | str, text: str) -> MemoryRecord:
        """``PATCH /v1/memories/{id}`` (see ``EngramClient.update_memory``)."""
        return await self._send(_update_call(memory_id, text))

    async def export_user(self, user: str) -> UserExport:
        """``GET /v1/users/{user}/export``."""
        return await self._send(_CALLS["export_user"](user))

    async def list_entities(self) -> EntityList:
        """``GET /v1/entities``."""
        return await self._send(_CALLS["list_entities"]())

    async def merge_entities(
        self, keep: uuid.UUID | str, drop: uuid.UUID | str, reason: str = "manual"
    ) -> EntitySummary:
        """``POST /v1/entities/{keep}/merge``."""
        return await self._send(_CALLS["merge_entities"](keep, drop, reason))

    async def name_entity(self, entity_id: uuid.UUID | str, name: str) -> EntitySummary:
        """``POST /v1/entities/{id}/name``."""
        return await self._send(_CALLS["name_entity"](entity_id, name))

    async def entity_samples(self, entity_id: uuid.UUID | str) -> EntitySampleList:
        """``GET /v1/entities/{id}/samples`` (see ``EngramClient.entity_samples``)."""
        return await self._send(_CALLS["entity_samples"](entity_id))

    async def sample_media(self, entity_id: uuid.UUID | str, sample_key: str) -> tuple[bytes, str]:
        """``GET /v1/entities/{id}/samples/media`` (see ``EngramClient.sample_media``)."""
        path = f"/v1/entities/{entity_id}/samples/media"

        async def once() -> tuple[bytes, str]:
            return _media_answer(await self._api.get(path, params={"key": sample_key}), path)

        return await self._retrying(once)

    async def split_entity(self, entity_id: uuid.UUID | str, sample_key: str) -> EntitySummary:
        """``POST /v1/entities/{id}/split`` (see ``EngramClient.split_entity``)."""
        return await self._send(_CALLS["split_entity"](entity_id, sample_key))

    async def wait(
        self, ids: Iterable[uuid.UUID | str], timeout: float = 300.0, interval: float = 0.5
    ) -> dict[uuid.UUID, EventStatusResponse]:
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
                raise _pending_report(pending, out, timeout)
            await asyncio.sleep(interval)
