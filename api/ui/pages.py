"""The web app's pages (issue 42): server-rendered over the service layer (``api.service.MemoryService``), served
by ``engram ui`` on the embedded default. Every page is plain HTML that works without JavaScript (one small script:
``/`` focuses the search box); Jinja2 escapes every stored string; no asset comes from elsewhere.

Screens: start (``/``), timeline, search, people, memories, activity, connect; an item's page (``/item/<id>``);
its original (``/media/<id>``, HTTP range requests) and thumbnail (``/thumb/<id>``). Every route reads the one
tenant the app was made for, and with ``?user=U`` only that user's items (another's answers 404). Changes are
POSTs with a CSRF token (``api.ui.security``). The UI's routes are not in any OpenAPI document.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from fastapi import HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from engram.api.console import counted
from engram.api.service.base import MemoryService, ServiceError
from engram.api.ui import present
from engram.api.ui.security import CSRF_FIELD, Csrf
from engram.schemas.settings import get_settings

HERE = Path(__file__).parent
USER_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:+-]{0,127}$")
SCREENS = [
    (
        "timeline",
        "Timeline",
        "A day or a range of what was captured: screenshots by application and window, "
        "audio with its transcript, chat turns.",
    ),
    ("search", "Search", "One box over everything remembered (press / to jump to it)."),
    ("people", "People", "The people engram recognised, with their faces and voices; name, merge or split them."),
    (
        "memories",
        "Memories",
        "The six kinds of memory, each with the observations it came from and its history; correct or delete them.",
    ),
    (
        "activity",
        "Activity",
        "What was ingested per hour, what is pending, what failed and why (retry it), "
        "and the capture's privacy rules and pause.",
    ),
    ("connect", "Connect", "Give an AI assistant this memory over MCP."),
]


@dataclass
class UiConfig:
    """One app's settings: its service, the tenant it shows, the data dir (the Connect page's paths), and the
    Host values it answers (None: any, behind ``engram serve``)."""

    service: MemoryService
    tenant: str
    data_dir: Path
    allowed_hosts: frozenset[str] | None = None
    csrf: Csrf = field(default_factory=Csrf)


def environment(tz: tzinfo) -> jinja2.Environment:
    """The templates' environment: autoescape on for every template (stored text is always text); times shown in
    ``tz`` (``ENGRAM_TIMEZONE``, else the system's: read once, a page shows thousands)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )

    def local(t: datetime | None, fmt: str = "%Y-%m-%d %H:%M") -> str:
        return t.astimezone(tz).strftime(fmt) if t else ""

    def epoch(ts: float | None, fmt: str = "%Y-%m-%d %H:%M") -> str:
        return datetime.fromtimestamp(ts, tz).strftime(fmt) if ts else ""

    def iso(value: str | None, fmt: str = "%Y-%m-%d %H:%M") -> str:
        try:
            return datetime.fromisoformat(value).astimezone(tz).strftime(fmt) if value else ""
        except (TypeError, ValueError):
            return str(value)[:40]

    env.filters.update(
        local=local, epoch=epoch, iso=iso, short=present.short, why=present.why, counted=counted, marked=present.marked
    )
    env.globals.update(has_picture=present.has_picture, screens=SCREENS)
    return env


class Pages:
    """Renders pages for one app: the shared context (tenant, users, the chosen user, the CSRF token) and the
    session cookie a first visit gets."""

    def __init__(self, cfg: UiConfig) -> None:
        self.cfg = cfg
        self.env = environment(get_settings().tzinfo)

    def user(self, request: Request) -> str | None:
        """The ``user`` query parameter (None: every user). Raises HTTPException 404 for one that cannot be an id."""
        value = request.query_params.get("user") or None
        if value is not None and not USER_PATTERN.match(value):
            raise HTTPException(404, "no such user")
        return value

    def render(self, request: Request, template: str, http_status: int = 200, **context: Any) -> HTMLResponse:
        """``template`` with ``context`` and the shared context; sets the session cookie on a first visit."""
        session = Csrf.session_of(request)
        fresh = session is None
        session = session or Csrf.new_session()
        try:
            users = self.cfg.service.users(self.cfg.tenant)
        except ServiceError:
            users = []
        user = context.pop("user", None)
        html = self.env.get_template(template).render(
            tenant=self.cfg.tenant,
            users=users,
            user=user,
            csrf=self.cfg.csrf.token(session),
            csrf_field=CSRF_FIELD,
            path=request.url.path,
            query=dict(request.query_params),
            uq=f"?user={quote(user)}" if user else "",
            ua=f"&user={quote(user)}" if user else "",
            **context,
        )
        resp = HTMLResponse(html, status_code=http_status)
        if fresh:
            Csrf.set_cookie(resp, session)
        return resp

    def error(self, request: Request, status: int, message: str) -> HTMLResponse:
        """A page saying what went wrong, with ``status``."""
        return self.render(request, "error.html", http_status=status, message=message, user=None)


#: The policy an original is sent with (kept by ``security.Guard``): opened on its own, nothing in it runs.
MEDIA_CSP = "sandbox; default-src 'none'"


def media_type_of(mime_type: str, download: bool = False) -> tuple[str, str]:
    """The Content-Type and Content-Disposition type an original of ``mime_type`` is sent with: itself and
    ``inline`` for a picture (not SVG), a recording or a video; anything else (a page, a script, a document) as
    ``application/octet-stream`` and ``attachment``, so the browser never renders it under the app's origin."""
    inline = mime_type.split("/")[0] in ("image", "audio", "video") and mime_type != "image/svg+xml"
    return (mime_type if inline else "application/octet-stream", "inline" if inline and not download else "attachment")


def media_response(obj: Any, download: bool = False) -> Response:
    """A ``MediaObject`` as a response: a local file with HTTP range requests (Starlette's FileResponse), else its
    bytes. Anything but a picture, a recording or a video is sent as an attachment, never rendered here
    (``media_type_of``)."""
    headers = {"cache-control": "private, max-age=86400", "content-security-policy": MEDIA_CSP}
    media_type, disposition = media_type_of(obj.mime_type, download)
    if obj.path is not None:
        return FileResponse(
            obj.path,
            media_type=media_type,
            headers=headers,
            content_disposition_type=disposition,
            filename=obj.path.name,
        )
    return Response(
        obj.data or b"",
        media_type=media_type,
        headers={**headers, "content-disposition": f'{disposition}; filename="{Path(obj.key).name}"'},
    )


def parse_id(value: str) -> uuid.UUID:
    """``value`` as a UUID; HTTPException 404 otherwise."""
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise HTTPException(404, "no such item") from exc
