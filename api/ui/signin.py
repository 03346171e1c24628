"""The web app under ``engram serve`` (the distributed mode, issue 42), mounted at ``/ui`` by ``api.app``.

Signing in: ``/ui/signin`` takes an API key (a form, with the CSRF token of ``api.ui.security``); a key Redis knows
(``api.keys.tenant_for``) gives an HttpOnly, SameSite=Strict session cookie (``engram_ui_auth``, path ``/ui``,
``Secure`` when the request came over HTTPS) holding a Fernet token (``cryptography``: encrypted and signed, at most
``SESSION_MAX_AGE_S`` old) of the key's sha256 and its tenant; the key itself is never stored. Every request checks
the token and that Redis still holds the key (a revoked key ends its sessions at once); the session's tenant is the
key's. The CSRF session cookie is replaced at sign-in; ``POST /ui/signout`` ends both. Anything else without a
session goes to the sign-in page (GET) or is refused (401). Failed sign-ins are limited per client
(``SigninLimits``, ``ENGRAM_UI_SIGNIN_RATE_LIMIT``): past the limit the form answers 429 with ``Retry-After``, for
any key, until the window lets one through.

The secret (Fernet key; the CSRF HMAC key derives from it) is made once and kept in Redis (``SECRET_KEY``), so every
replica of the API reads the same one and a restart keeps sessions.

Each tenant has its own web app (``api.ui.app.create_ui``, kept for the ``TENANT_APPS`` most recent tenants) on one
``QueueService`` with the API's ledger and object store: search, memories and people through the query workers, the
timeline through ``Task.timeline``, events from the ledger, originals and thumbnails from the object store. An id of
another tenant reads as unknown there: 404. The pages link from the root (``/timeline``): the prefix is added to
every link, form action and redirect the app answers with (``Prefixed``), and a sign-out button to every page.

Media in the distributed mode (``media_routes``): originals stream from S3 with HTTP range requests passed through
(``Range: bytes=a-b`` to the store's ranged GET, 206 with ``Content-Range``), thumbnails come with ``ETag`` and
``Cache-Control: private, max-age=...`` and answer 304 to a matching ``If-None-Match``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
import structlog
from cryptography.fernet import Fernet, InvalidToken
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from limits import parse_many
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter
from redis.exceptions import RedisError
from starlette.concurrency import run_in_threadpool
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

from engram.api.http import keys
from engram.api.service.base import MediaMissing, MediaObject, NotFound
from engram.api.service.queue import QueueService
from engram.api.ui.pages import HERE, MEDIA_CSP, Pages, UiConfig, media_response, media_type_of, parse_id
from engram.api.ui.security import CSRF_FIELD, HEADERS, SESSION_COOKIE, Csrf, Guard

log = structlog.get_logger(__name__)

AUTH_COOKIE = "engram_ui_auth"
#: Redis key of the web app's secret (a Fernet key), shared by the API's replicas.
SECRET_KEY = "engram:ui:secret"
#: A session lasts at most this long after sign-in, seconds (12 h); then the key is asked for again.
SESSION_MAX_AGE_S = 12 * 3600
#: Tenants whose web app is kept made.
TENANT_APPS = 64
#: How long a browser may reuse a thumbnail without asking, seconds (a day); it asks with ``If-None-Match`` after.
THUMB_MAX_AGE_S = 86_400
#: Bytes read from the object store per chunk of a streamed original.
CHUNK = 256 * 1024
#: The ``limits`` namespace of the failed sign-in counters (keyed by a hash of the client's address).
SIGNIN_NAMESPACE = "engram-ui-signin"
_LINK = re.compile(rb'(\s(?:href|src|action|poster)=")/(?!/)')
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def secret(r: Any) -> bytes:
    """The web app's Fernet key, made and stored in Redis (``SECRET_KEY``) by the first replica that asks."""
    r.set(SECRET_KEY, Fernet.generate_key().decode(), nx=True)
    return r.get(SECRET_KEY).encode()


class Sessions:
    """Session tokens of one API (``key``: its Fernet key): made at sign-in, read on every request."""

    def __init__(self, key: bytes, max_age_s: int = SESSION_MAX_AGE_S) -> None:
        self.fernet = Fernet(key)
        self.max_age_s = max_age_s
        self.csrf = Csrf(hmac.new(base64.urlsafe_b64decode(key), b"engram ui csrf", hashlib.sha256).digest())

    def token(self, digest: str, tenant: str) -> str:
        """A session of the key whose sha256 is ``digest``, of ``tenant``."""
        return self.fernet.encrypt(json.dumps({"d": digest, "t": tenant}).encode()).decode()

    def read(self, token: str | None) -> tuple[str, str] | None:
        """(key digest, tenant) of a session token, or None when it is absent, forged, or older than allowed."""
        if not token or len(token) > 1024:
            return None
        try:
            got = json.loads(self.fernet.decrypt(token.encode(), ttl=self.max_age_s))
            return str(got["d"]), str(got["t"])
        except (InvalidToken, ValueError, KeyError, TypeError):
            return None


def local(target: str | None) -> str:
    """``target`` when it is a path of this app (``/...``, not ``//host``), else ``""``: where sign-in may send
    the browser back to."""
    target = target or ""
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else ""


def _cookie_value(scope: Scope, name: str) -> str | None:
    for k, v in scope.get("headers") or []:
        if k == b"cookie":
            for part in v.decode("latin-1").split(";"):
                key, _, value = part.strip().partition("=")
                if key == name:
                    return value
    return None


class Prefixed:
    """ASGI middleware: the pages of an app made for the root, served under ``prefix``. Links (``href``, ``src``,
    ``action``, ``poster`` starting with one ``/``) and redirects (``Location``) get the prefix; ``footer`` HTML
    (the sign-out form) is put before every page's ``</footer>``. Only HTML bodies are read whole."""

    def __init__(self, app: Any, prefix: str, footer: bytes = b"") -> None:
        self.app, self.prefix, self.footer = app, prefix.encode(), footer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start: Message | None = None
        body: list[bytes] = []

        async def rewrite(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = [
                    (
                        k,
                        self.prefix + v
                        if k.lower() == b"location" and v.startswith(b"/") and not v.startswith(b"//")
                        else v,
                    )
                    for k, v in message.get("headers", [])
                ]
                message = {**message, "headers": headers}
                if any(k.lower() == b"content-type" and v.startswith(b"text/html") for k, v in headers):
                    start = message
                    return
                await send(message)
                return
            if message["type"] == "http.response.body" and start is not None:
                body.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                html = _LINK.sub(rb"\1" + self.prefix + rb"/", b"".join(body))
                html = html.replace(b"</footer>", self.footer + b"</footer>", 1)
                headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
                await send({**start, "headers": [*headers, (b"content-length", str(len(html)).encode())]})
                await send({"type": "http.response.body", "body": html})
                return
            await send(message)

        await self.app(scope, receive, rewrite)


class SigninLimits:
    """Failed sign-ins per client, with the ``limits`` library (as ``api.ratelimit`` limits API keys): ``spec`` in
    its notation, ``;``-separated (``ENGRAM_UI_SIGNIN_RATE_LIMIT``; empty: no limit), moving windows counted in
    Redis at ``redis_url`` across the API's replicas. A client is the request's peer address (behind a proxy,
    uvicorn's ``--proxy-headers`` with ``--forwarded-allow-ips`` makes it the browser's), kept only as a hash.
    Raises ValueError for a rate ``limits`` cannot parse, or a limit without Redis."""

    def __init__(self, spec: str, redis_url: str | None) -> None:
        self.items = parse_many(spec) if spec.strip() else []
        self.limiter: MovingWindowRateLimiter | None = None
        if self.items:
            if not redis_url:
                raise ValueError("ENGRAM_UI_SIGNIN_RATE_LIMIT needs Redis (ENGRAM_REDIS_URL or ENGRAM_BROKER_URL)")
            url = "redis+unix://" + redis_url[len("unix://") :] if redis_url.startswith("unix://") else redis_url
            self.limiter = MovingWindowRateLimiter(storage_from_string(url))

    @staticmethod
    def _ident(client: str) -> str:
        return hashlib.sha256(client.encode()).hexdigest()[:32]

    def wait(self, client: str) -> int:
        """Seconds until ``client`` may try a key again (0: now); reads the counters, counts nothing."""
        if self.limiter is None:
            return 0
        ident = self._ident(client)
        for item in self.items:
            if not self.limiter.test(item, SIGNIN_NAMESPACE, ident):
                reset = self.limiter.get_window_stats(item, SIGNIN_NAMESPACE, ident).reset_time
                return max(1, math.ceil(reset - time.time()))
        return 0

    def failed(self, client: str) -> None:
        """Count one failed sign-in of ``client`` against every limit."""
        if self.limiter is not None:
            ident = self._ident(client)
            for item in self.items:
                self.limiter.hit(item, SIGNIN_NAMESPACE, ident)


class ServedUi:
    """The ASGI app ``api.app`` mounts at ``/ui`` (see the module's docstring; ``api.ui.app.served_ui`` makes it).
    ``make_app``: a tenant's web app from its ``UiConfig`` and ``ServeContext`` (``api.ui.app.create_ui``). Made at
    import; everything it needs comes from the API's ``app.state.services`` (opened by its lifespan) on the first
    request."""

    def __init__(self, make_app: Callable[[UiConfig, ServeContext], Any], prefix: str = "/ui") -> None:
        self.make_app, self.prefix = make_app, prefix
        self.static = StaticFiles(directory=HERE / "static")
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True)
        self._apps: OrderedDict[str, Any] = OrderedDict()
        self._ready: tuple[Any, Sessions, Any] | None = None
        self._signin: FastAPI | None = None

    # --- what the API opened ----------------------------------------------------------------------------------
    def _setup(self, api: Any) -> tuple[Any, Sessions, Any]:
        """(the API's Services, the Sessions, the QueueService of every tenant's app), made once."""
        if self._ready is None:
            svcs = api.state.services
            service = QueueService(
                svcs.celery, svcs.settings.service_timeout_seconds, svcs.ledger, svcs.objects, svcs.settings
            )
            self._ready = (svcs, Sessions(secret(svcs.redis)), service)
        return self._ready

    def _tenant_app(self, tenant: str) -> Any:
        """The web app of ``tenant`` (made on first use; the ``TENANT_APPS`` most recent kept)."""
        app = self._apps.get(tenant)
        if app is None:
            assert self._ready is not None  # _setup ran for this request
            svcs, sessions, service = self._ready
            cfg = UiConfig(service, tenant, svcs.settings.data_dir, None, sessions.csrf)
            app = self._apps[tenant] = self.make_app(cfg, ServeContext(svcs.redis, svcs.objects, self.prefix))
            while len(self._apps) > TENANT_APPS:
                self._apps.popitem(last=False)
        self._apps.move_to_end(tenant)
        return app

    # --- the ASGI entry ---------------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        root = scope.get("root_path", "")
        path = scope["path"][len(root) :] if scope["path"].startswith(root) else scope["path"]
        inner = {**scope, "path": path or "/", "raw_path": (path or "/").encode(), "root_path": ""}
        try:
            svcs, sessions, _ = await run_in_threadpool(self._setup, scope["app"])
            tenant = await run_in_threadpool(self._tenant_of, svcs, sessions, scope)
        except RedisError as exc:  # the keys and sessions live in Redis: nothing can be checked without it
            log.error("ui: redis unavailable", error=f"{type(exc).__name__}: {exc}")
            resp: Response = Response(
                "503: engram cannot reach Redis (API keys and sessions); try again shortly",
                status_code=503,
                media_type="text/plain",
                headers={**HEADERS, "retry-after": "5"},
            )
            await resp(inner, receive, send)
            return
        if path.startswith("/static/"):
            await Guard(self.static, None)({**inner, "path": path[len("/static") :]}, receive, send)
            return
        if path in ("/signin", "/signout"):
            await Guard(self._signin_app(svcs, sessions), None)(inner, receive, send)
            return
        if tenant is None:
            if scope["method"] in ("GET", "HEAD"):
                qs = scope.get("query_string", b"").decode("latin-1")
                back = path + (f"?{qs}" if qs else "")
                target = self.prefix + "/signin" + (f"?next={quote(back, safe='')}" if back not in ("", "/") else "")
                resp = RedirectResponse(target, status_code=303, headers=HEADERS)
            else:
                resp = Response("401: sign in first", status_code=401, media_type="text/plain", headers=HEADERS)
            await resp(inner, receive, send)
            return
        sid = _cookie_value(scope, SESSION_COOKIE) or ""
        footer = self._signout_form(sessions.csrf.token(sid)) if sid else b""
        await Prefixed(self._tenant_app(tenant), self.prefix, footer)(inner, receive, send)

    @staticmethod
    def _tenant_of(svcs: Any, sessions: Sessions, scope: Scope) -> str | None:
        """The tenant of the request's session: None without one, or when its key was revoked (or moved)."""
        session = sessions.read(_cookie_value(scope, AUTH_COOKIE))
        if session is None:
            return None
        tenant = svcs.redis.get(keys.KEY_PREFIX + session[0])
        return tenant if tenant == session[1] else None

    def _signout_form(self, token: str) -> bytes:
        return (
            self.env.from_string(
                '<form class="signout" method="post" action="{{ p }}/signout"><input type="hidden" name="{{ f }}" '
                'value="{{ t }}"><button type="submit">Sign out</button></form>'
            )
            .render(p=self.prefix, f=CSRF_FIELD, t=token)
            .encode()
        )

    # --- sign in and out --------------------------------------------------------------------------------------
    def _signin_app(self, svcs: Any, sessions: Sessions) -> FastAPI:
        if self._signin is not None:
            return self._signin
        app = self._signin = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
        csrf, prefix = sessions.csrf, self.prefix
        failures = SigninLimits(svcs.settings.ui_signin_rate_limit, svcs.settings.redis_url or svcs.settings.broker_url)

        def page(request: Request, status: int = 200, error: str = "", nxt: str | None = None) -> HTMLResponse:
            sid = Csrf.session_of(request)
            fresh = sid is None
            sid = sid or Csrf.new_session()
            html = self.env.get_template("signin.html").render(
                prefix=prefix,
                csrf=csrf.token(sid),
                csrf_field=CSRF_FIELD,
                error=error,
                next=local(nxt if nxt is not None else request.query_params.get("next")),
            )
            resp = HTMLResponse(html, status_code=status)
            if fresh:
                Csrf.set_cookie(resp, sid)
            return resp

        @app.get("/signin")
        def signin_form(request: Request) -> Response:
            return page(request)

        @app.post("/signin")
        async def signin(request: Request) -> Response:
            try:
                form = await csrf.checked_form(request)
            except PermissionError as exc:
                return await run_in_threadpool(page, request, 403, str(exc), "")
            key, nxt = (form.get("api_key") or "").strip(), local(form.get("next"))
            client = request.client.host if request.client else "unknown"
            wait = await run_in_threadpool(failures.wait, client)
            if wait:
                log.info("ui sign-in refused", reason="too many failed sign-ins")
                refused = await run_in_threadpool(
                    page, request, 429, f"Too many failed sign-ins from here: try again in {wait} s.", nxt
                )
                refused.headers["retry-after"] = str(wait)
                return refused
            tenant = await run_in_threadpool(keys.tenant_for, svcs.redis, key) if key else None
            if tenant is None:
                log.info("ui sign-in refused", reason="unknown key" if key else "no key")
                if key:
                    await run_in_threadpool(failures.failed, client)
                return await run_in_threadpool(
                    page,
                    request,
                    401,
                    "That API key is not known here: check it, or ask for one (engram keys create --tenant T).",
                    nxt,
                )
            return _signed_in(request, sessions, prefix, nxt or "/", key, tenant)

        @app.post("/signout")
        async def signout(request: Request) -> Response:
            try:
                await csrf.checked_form(request)
            except PermissionError as exc:
                raise HTTPException(403, str(exc)) from exc
            resp = RedirectResponse(prefix + "/signin", status_code=303)
            resp.delete_cookie(AUTH_COOKIE, path=prefix, httponly=True, samesite="strict")
            resp.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
            return resp

        return app


def _signed_in(request: Request, sessions: Sessions, prefix: str, path: str, key: str, tenant: str) -> Response:
    """The answer to a sign-in with a known API key: a redirect to `path` under the app's `prefix` (e.g. "/ui") that
    sets the HttpOnly, SameSite=Strict session cookie on `prefix` (Secure over HTTPS) for the key's tenant, and a new
    CSRF session."""
    resp = RedirectResponse(prefix + path, status_code=303)
    resp.set_cookie(
        AUTH_COOKIE,
        sessions.token(keys.hash_key(key), tenant),
        httponly=True,
        samesite="strict",
        path=prefix,
        secure=request.url.scheme == "https",
    )
    Csrf.set_cookie(resp, Csrf.new_session())  # a new CSRF session with the new sign-in
    log.info("ui signed in", tenant=tenant, key_id=keys.hash_key(key)[:12])
    return resp


# --- what a tenant's app adds under engram serve: its API keys, and media from S3 -------------------------------


class ServeContext:
    """What a tenant's web app under ``engram serve`` reaches besides its service: Redis (the API keys), the object
    store (originals streamed from S3) and the prefix it is mounted at."""

    def __init__(self, redis: Any, objects: Any, prefix: str = "/ui") -> None:
        self.redis, self.objects, self.prefix = redis, objects, prefix


def masked(key_id: str) -> str:
    """How a stored key is shown: its prefix and its id (the first 12 hex digits of its sha256), never the key."""
    return f"egk_…{key_id}"


def register(app: FastAPI, cfg: UiConfig, pages: Pages, serve: ServeContext) -> None:
    """Add the routes of a tenant's app under ``engram serve``: the Connect page with the tenant's API keys
    (create, revoke) and the media routes (``media_routes``). Registered before ``api.ui.routes``: these win."""
    tenant = cfg.tenant

    def connect_page(request: Request, new_key: str | None = None, status: int = 200) -> Response:
        listed = keys.list_keys(serve.redis, tenant)
        base = str(request.base_url).rstrip("/")
        entry = {
            "mcpServers": {
                "engram": {
                    "command": "engram",
                    "args": ["mcp", "--api", base],
                    "env": {"ENGRAM_API_KEY": "<one of the keys below>"},
                }
            }
        }
        return pages.render(
            request,
            "keys.html",
            http_status=status,
            user=pages.user(request),
            keys=listed,
            masked=masked,
            new_key=new_key,
            snippet=json.dumps(entry, indent=2),
        )

    async def form(request: Request) -> dict[str, str]:
        try:
            return await cfg.csrf.checked_form(request)
        except PermissionError as exc:
            raise HTTPException(403, str(exc)) from exc

    @app.get("/connect", include_in_schema=False)
    def connect(request: Request) -> Response:
        return connect_page(request)

    @app.post("/connect/keys", include_in_schema=False)
    async def create(request: Request) -> Response:
        got = await form(request)
        label = " ".join((got.get("label") or "").split())[:80] or None
        key = await run_in_threadpool(keys.create_key, serve.redis, tenant, label)
        log.info("ui key created", tenant=tenant, key_id=keys.hash_key(key)[:12])
        resp = await run_in_threadpool(connect_page, request, key, 201)
        resp.headers["cache-control"] = "no-store"  # the key is shown this once
        return resp

    @app.post("/connect/keys/{key_id}/revoke", include_in_schema=False)
    async def revoke(request: Request, key_id: str) -> Response:
        await form(request)
        mine = {k.key_id for k in await run_in_threadpool(keys.list_keys, serve.redis, tenant)}
        if key_id not in mine:  # another tenant's id (or none): unknown here
            raise HTTPException(404, "no such key")
        await run_in_threadpool(keys.revoke_key, serve.redis, key_id)
        log.info("ui key revoked", tenant=tenant, key_id=key_id)
        return RedirectResponse("/connect", status_code=303)

    media_routes(app, cfg, pages, serve.objects)


def etag_of(data: bytes) -> str:
    """A strong ETag of ``data`` (the first 16 bytes of its sha256, hex, quoted)."""
    return '"' + hashlib.sha256(data).hexdigest()[:32] + '"'


def thumbnail_response(request: Request, obj: MediaObject, max_age_s: int = THUMB_MAX_AGE_S) -> Response:
    """A thumbnail with ``Cache-Control: private, max-age`` and its ``ETag``; 304 when ``If-None-Match`` names it."""
    data = obj.data if obj.data is not None else Path(obj.path or "").read_bytes()
    headers = {"cache-control": f"private, max-age={max_age_s}", "etag": etag_of(data)}
    wanted = [t.strip() for t in request.headers.get("if-none-match", "").split(",")]
    if headers["etag"] in wanted or "*" in wanted:
        return Response(status_code=304, headers=headers)
    return Response(data, media_type=obj.mime_type, headers=headers)


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The one range ``[start, end]`` (inclusive) a ``Range`` header asks of ``size`` bytes, or None for none (or a
    form not served: several ranges, other units). Raises ValueError when it cannot be satisfied (a 416)."""
    m = _RANGE.match((header or "").strip())
    if m is None or not (m.group(1) or m.group(2)):
        return None
    first, last = m.group(1), m.group(2)
    if not first:  # the last N bytes
        n = int(last)
        if n == 0 or size == 0:
            raise ValueError("empty range")
        return max(0, size - n), size - 1
    start, end = int(first), min(int(last) if last else size - 1, size - 1)
    if start >= size or end < start:
        raise ValueError("range past the end")
    return start, end


def stream_object(objects: Any, obj: MediaObject, range_header: str | None) -> Response:
    """An original kept in S3 (``obj`` names its key and size) streamed from the store: the whole (200) or the one
    range asked (206 with ``Content-Range``, the store's ranged GET); 416 for a range past the end. Sent as
    ``media_response`` sends a local one: inline only when a picture, recording or video, in a sandbox."""
    media_type, disposition = media_type_of(obj.mime_type)
    headers = {
        "accept-ranges": "bytes",
        "cache-control": "private, max-age=86400",
        "content-security-policy": MEDIA_CSP,
        "etag": '"' + hashlib.sha256(f"{obj.key}:{obj.size}".encode()).hexdigest()[:32] + '"',
        "content-disposition": f'{disposition}; filename="{Path(obj.key).name}"',
    }
    try:
        span = byte_range(range_header, obj.size)
    except ValueError:
        return Response(status_code=416, headers={**headers, "content-range": f"bytes */{obj.size}"})
    start, end = span if span is not None else (0, obj.size - 1)
    length = max(0, end - start + 1)
    bucket = objects.bucket

    def chunks() -> Iterator[bytes]:
        if length == 0:
            return
        got = objects.client.get_object(bucket, obj.key, offset=start, length=length)
        try:
            yield from got.stream(CHUNK)
        finally:
            got.close()
            got.release_conn()

    headers["content-length"] = str(length)
    if span is not None:
        headers["content-range"] = f"bytes {start}-{end}/{obj.size}"
    return StreamingResponse(
        chunks(), status_code=206 if span is not None else 200, media_type=media_type, headers=headers
    )


def media_routes(app: FastAPI, cfg: UiConfig, pages: Pages, objects: Any) -> None:
    """``/media/{id}`` (ranges passed through to S3, a local file's ranges by Starlette's FileResponse) and
    ``/thumb/{id}`` (``thumbnail_response``; a missing one is the placeholder picture) for ``cfg``'s tenant."""
    svc, tenant = cfg.service, cfg.tenant

    @app.get("/media/{item_id}", include_in_schema=False)
    def media(request: Request, item_id: str) -> Response:
        try:
            obj = svc.media(tenant, parse_id(item_id), pages.user(request))
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from exc
        if obj.path is not None or obj.data is not None:
            return media_response(obj)
        kind = obj.mime_type.split("/")[0]
        if kind not in ("image", "audio", "video") or obj.mime_type == "image/svg+xml":
            return media_response(MediaObject(obj.key, obj.mime_type, obj.size, data=objects.get_bytes(obj.key)))
        return stream_object(objects, obj, request.headers.get("range"))

    @app.get("/thumb/{item_id}", include_in_schema=False)
    def thumb(request: Request, item_id: str) -> Response:
        try:
            return thumbnail_response(request, svc.thumbnail(tenant, parse_id(item_id), pages.user(request)))
        except MediaMissing:
            return RedirectResponse("/static/missing.svg", status_code=307)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from exc
