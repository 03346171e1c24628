"""The web app's guards: the Host check of the embedded UI, the security headers of every answer (a
Content-Security-Policy without inline scripts), and CSRF tokens for every POST.

CSRF (OWASP's synchronizer-token pattern, stateless): each browser gets a random session id in an HttpOnly,
SameSite=Strict cookie; its token is HMAC-SHA256(app secret, session id), put in a hidden field of every form and
recomputed on POST. A request without the cookie, or with a token that does not match, is refused (403).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SESSION_COOKIE = "engram_ui_session"
CSRF_FIELD = "csrf_token"
#: Every page's policy: scripts, styles, pictures and media from this origin only; no inline script or style, no
#: plugin, not framed, forms post here only.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; media-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}


def with_security_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """A response's raw headers with ``HEADERS`` set (each replacing the response's own), except that a policy
    the response set itself is kept: an original's ``sandbox`` (``api.ui.pages.media_response``) is stricter than
    the pages' one."""
    own_csp = any(k.decode("latin-1").lower() == "content-security-policy" for k, _ in raw)
    keep = {"content-security-policy"} if own_csp else set()
    out = [(k, v) for k, v in raw if k.decode("latin-1").lower() not in HEADERS or k.decode("latin-1").lower() in keep]
    return out + [(k.encode(), v.encode()) for k, v in HEADERS.items() if k not in keep]


def loopback_hosts(host: str, port: int) -> frozenset[str]:
    """The Host header values a UI bound to ``host``:``port`` answers: the address itself and, for a loopback
    address, ``localhost`` (with and without the port). A DNS-rebinding page's Host is its own name: refused."""
    names = {host, "localhost"} if host in ("127.0.0.1", "::1", "[::1]") else {host}
    return frozenset({*names, *(f"{n}:{port}" for n in names)})


class Guard:
    """ASGI middleware: refuses (403) a request whose Host is not in ``allowed`` (None: any), and adds ``HEADERS``
    to every answer. ``allowed`` is ``loopback_hosts`` for the embedded UI."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str] | None) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1").lower()
        if self.allowed is not None and host not in self.allowed:
            resp = PlainTextResponse(
                "403: this address is not the one engram ui listens on", status_code=403, headers=HEADERS
            )
            await resp(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = with_security_headers(message.get("headers", []))
            await send(message)

        await self.app(scope, receive, with_headers)


class Csrf:
    """Session ids and their CSRF tokens for one app (``secret``: random per process unless given)."""

    def __init__(self, secret: bytes | None = None) -> None:
        self.secret = secret or secrets.token_bytes(32)

    def token(self, session: str) -> str:
        """The CSRF token of ``session``."""
        return hmac.new(self.secret, session.encode(), hashlib.sha256).hexdigest()

    @staticmethod
    def session_of(request: Request) -> str | None:
        """The request's session id (its cookie), or None."""
        value = request.cookies.get(SESSION_COOKIE)
        return value if value and len(value) <= 64 else None

    @staticmethod
    def new_session() -> str:
        """A fresh random session id."""
        return secrets.token_urlsafe(24)

    @staticmethod
    def set_cookie(response: Response, session: str) -> None:
        """Give the browser ``session``: HttpOnly, SameSite=Strict, the whole app."""
        response.set_cookie(SESSION_COOKIE, session, httponly=True, samesite="strict", path="/")

    async def checked_form(self, request: Request) -> dict[str, str]:
        """The POSTed form (urlencoded, at most 64 kB) when its token is the session's; raises PermissionError
        otherwise (no session cookie, a missing or wrong token, another origin)."""
        origin = request.headers.get("origin")
        if origin and origin.split("://", 1)[-1].lower() != request.headers.get("host", "").lower():
            raise PermissionError("the form was sent from another site")
        session = self.session_of(request)
        body = await request.body()
        if len(body) > 65_536:
            raise PermissionError("the form is too large")
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}
        sent = form.get(CSRF_FIELD, "")
        if session is None or not hmac.compare_digest(sent, self.token(session)):
            raise PermissionError("the form's security token is missing or stale: reload the page and try again")
        return form
