"""The web app's routes (``api.ui.app.create_ui`` registers them). Each reads the app's one tenant and, with
``?user=U``, only that user's items; an item of another tenant or user answers 404 like an unknown one. GET
routes are plain functions (run in the server's thread pool: the service blocks); POSTs check the CSRF token."""

from __future__ import annotations

import json
import shutil
import sys
from datetime import date, datetime, timedelta, tzinfo
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlencode

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from engram.api.capture.agent import configured_rules
from engram.api.service.base import MediaMissing, MemoryService, NotFound, NotOffered, ServiceError
from engram.api.ui import present
from engram.api.ui.pages import Pages, UiConfig, media_response, parse_id
from engram.schemas.events import EventStatus, MediaKind
from engram.schemas.memories import MEMORY_TYPES, MemoryType
from engram.schemas.search import DEFAULT_SEARCH_TYPES, SearchRequest
from engram.schemas.settings import get_settings
from engram.schemas.timeline import TimelineRequest

#: Observations the day's timeline reads at most (a busy day: 1,680 frames), and search hits shown.
TIMELINE_LIMIT = 5000
SEARCH_LIMIT = 30
MEMORIES_PAGE = 50
#: Memories of one type read to find each one's superseded versions (its history); the newest first.
MEMORY_SCAN = 1000
#: People whose face crops and voice clips are shown (the most observed first), and samples shown per person.
PEOPLE_WITH_SAMPLES = 60
FACES_SHOWN, VOICES_SHOWN = 8, 3
#: Ledger records the activity's hourly plot counts (the most recently changed), and the capture's pause file
#: (``engram capture --pause-file``'s default, under the data dir).
PLOT_EVENTS = 20_000
CAPTURE_PAUSE = "capture.pause"
#: The longest correction of a memory, characters.
MAX_CORRECTION = 20_000


def _day(value: str | None) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise HTTPException(400, f"not a date (YYYY-MM-DD): {value[:40]}") from exc


E = TypeVar("E", bound=StrEnum)


def _choice(enum: type[E], value: str | None, what: str) -> E | None:
    """``value`` as a member of ``enum`` (None when empty); HTTPException 400 naming ``what`` otherwise."""
    if not value:
        return None
    try:
        return enum(value)
    except ValueError as exc:
        raise HTTPException(400, f"no such {what}: {value[:40]}") from exc


def _kind(value: str | None) -> MediaKind | None:
    return _choice(MediaKind, value, "kind")


def _memory_type(value: str | None) -> MemoryType | None:
    return _choice(MemoryType, value, "memory type")


#: The search form's filters besides the query (``?kind=&type=&app=&device=&person=&from=&to=``).
SEARCH_FILTERS = ("kind", "type", "app", "device", "person", "from", "to")


def _search_form(q) -> dict[str, str]:
    """The search form's filters as asked (stripped, at most 256 characters each; "" when not given)."""
    return {name: (q.get(name) or "").strip()[:256] for name in SEARCH_FILTERS}


def _search_span(first: str, last: str) -> tuple[datetime | None, datetime | None]:
    """The span of the days ``first``..``last`` (YYYY-MM-DD, either may be empty), in the configured zone; 400 for a
    date that is none or a range that ends before it starts."""
    tz = get_settings().tzinfo
    start, end = _day(first), _day(last)
    if start and end and end < start:
        raise HTTPException(400, "the range ends before it starts")
    start_at = present.day_span(start, None, tz)[0] if start else None
    end_at = present.day_span(end, None, tz)[1] if end else None
    return start_at, end_at


def _people_named(svc: MemoryService, tenant: str, person: str) -> list[str]:
    """The ids of the tenant's entities called ``person`` (any of their names, case ignored), or ``person`` itself
    when it is an entity's id; [] when none is."""
    wanted = person.casefold()
    return [
        str(e.id)
        for e in svc.list_entities(tenant).items
        if str(e.id) == wanted or any(n.casefold() == wanted for n in e.names)
    ]


def _newest_day(svc: MemoryService, tenant: str, user: str | None, tz: tzinfo) -> date | None:
    """The day (in ``tz``) of the user's newest observation: the timeline opens there when no date is asked for,
    so a memory made of older files (the demo's, an import) does not open on an empty today."""
    newest = svc.timeline(TimelineRequest(tenant_id=tenant, user_id=user, limit=1)).items
    return newest[0].time.astimezone(tz).date() if newest and newest[0].time else None


def register(app: FastAPI, cfg: UiConfig, pages: Pages) -> None:
    """Add every route of the web app to ``app``."""
    _screens(app, cfg, pages)
    _search_screen(app, cfg, pages)
    _lists(app, cfg, pages)
    _items(app, cfg, pages)
    _changes(app, cfg, pages)
    _corrections(app, cfg)


def _screens(app: FastAPI, cfg: UiConfig, pages: Pages) -> None:
    svc, tenant = cfg.service, cfg.tenant

    @app.get("/", include_in_schema=False)
    def start(request: Request) -> Response:
        return pages.render(request, "index.html", user=pages.user(request))

    @app.get("/timeline", include_in_schema=False)
    def timeline(request: Request) -> Response:
        q, user = request.query_params, pages.user(request)
        tz = get_settings().tzinfo
        first = _day(q.get("date")) or _newest_day(svc, tenant, user, tz) or datetime.now(tz).date()
        last = _day(q.get("to"))
        if last is not None and last < first:
            raise HTTPException(400, "the range ends before it starts")
        start_at, end_at = present.day_span(first, last, tz)
        kind, app_name = _kind(q.get("kind")), q.get("app") or None
        page = svc.timeline(
            TimelineRequest(
                tenant_id=tenant,
                user_id=user,
                time_from=start_at,
                time_to=end_at,
                kinds=[kind] if kind else None,
                apps=[app_name] if app_name else None,
                limit=TIMELINE_LIMIT,
            )
        )
        groups = present.group_timeline(page.items, sample=not q.get("full"))
        hours = present.scrubber(groups, first, last, tz)
        span = ((last or first) - first).days + 1
        return pages.render(
            request,
            "timeline.html",
            user=user,
            groups=groups,
            total=page.total,
            day=first,
            hours=hours,
            today=datetime.now(tz).date(),
            last=last,
            before=first - timedelta(days=span),
            after=first + timedelta(days=span),
            kind=kind.value if kind else "",
            app_name=app_name or "",
            kinds=[k.value for k in MediaKind],
            capped=page.total > len(page.items),
        )

    @app.get("/connect", include_in_schema=False)
    def connect(request: Request) -> Response:
        return pages.render(request, "connect.html", user=pages.user(request), snippet=mcp_snippet(cfg.data_dir))


def _search_screen(app: FastAPI, cfg: UiConfig, pages: Pages) -> None:
    """The search screen (GET /search?q=...): the hybrid search with the CLI's filters, hits by burst, each saying
    why it matched."""
    svc, tenant = cfg.service, cfg.tenant

    @app.get("/search", include_in_schema=False)
    def search(request: Request) -> Response:
        q, user = request.query_params, pages.user(request)
        text = (q.get("q") or "").strip()[:4000]
        form = _search_form(q)
        kind, mtype = _kind(form["kind"]), _memory_type(form["type"])
        resp, unknown = None, None
        if text:
            start_at, end_at = _search_span(form["from"], form["to"])
            people = _people_named(svc, tenant, form["person"]) if form["person"] else None
            if people == []:
                unknown = form["person"]
            else:
                resp = svc.search(
                    SearchRequest(
                        query=text,
                        tenant_id=tenant,
                        user_id=user,
                        limit=SEARCH_LIMIT,
                        kinds=[kind] if kind else None,
                        apps=[form["app"]] if form["app"] else None,
                        devices=[form["device"]] if form["device"] else None,
                        entities=people,
                        time_from=start_at,
                        time_to=end_at,
                        timezone=get_settings().timezone,
                        memory_types=[mtype] if mtype else list(DEFAULT_SEARCH_TYPES),
                    )
                )
        return pages.render(
            request,
            "search.html",
            user=user,
            q=text,
            resp=resp,
            form=form,
            unknown_person=unknown,
            kinds=[k.value for k in MediaKind],
            types=[t.value for t in DEFAULT_SEARCH_TYPES],
        )


def _lists(app: FastAPI, cfg: UiConfig, pages: Pages) -> None:
    svc, tenant = cfg.service, cfg.tenant

    @app.get("/people", include_in_schema=False)
    def people(request: Request) -> Response:
        entities = svc.list_entities(tenant)
        shown = [e.id for e in entities.items[:PEOPLE_WITH_SAMPLES] if e.faces or e.voices]
        try:  # one request task under engram serve (QueueService), not one per person
            samples = {str(eid): found for eid, found in svc.entities_samples(tenant, shown).items()}
        except NotOffered:
            samples = {}
        return pages.render(
            request,
            "people.html",
            user=pages.user(request),
            entities=entities,
            samples=samples,
            faces_shown=FACES_SHOWN,
            voices_shown=VOICES_SHOWN,
        )

    @app.get("/memories", include_in_schema=False)
    def memories(request: Request) -> Response:
        user = pages.user(request)
        mtype = _memory_type(request.query_params.get("type")) or MemoryType.episodic
        try:
            offset = max(0, int(request.query_params.get("offset") or 0))
        except ValueError as exc:
            raise HTTPException(400, "not an offset") from exc
        scan = svc.list_memories(tenant, mtype, user, MEMORY_SCAN, 0)
        current, history = present.with_history(scan.items)
        return pages.render(
            request,
            "memories.html",
            user=user,
            items=current[offset : offset + MEMORIES_PAGE],
            history=history,
            total=len(current),
            offset=offset,
            capped=scan.total > MEMORY_SCAN,
            mtype=mtype.value,
            types=[t.value for t in MEMORY_TYPES],
            step=MEMORIES_PAGE,
            editable=mtype is not MemoryType.knowledge_vault,
        )

    @app.get("/activity", include_in_schema=False)
    def activity(request: Request) -> Response:
        user = pages.user(request)
        status = request.query_params.get("status") or None
        try:
            wanted = EventStatus(status) if status else None
        except ValueError as exc:
            raise HTTPException(400, "no such status") from exc
        tz = get_settings().tzinfo
        plot = present.ingest_plot(svc.events(tenant, user, None, PLOT_EVENTS), datetime.now(tz), tz)
        pause = cfg.data_dir / CAPTURE_PAUSE
        deny_apps, deny_titles = configured_rules()
        return pages.render(
            request,
            "activity.html",
            user=user,
            counts=svc.event_counts(tenant),
            statuses=[s.value for s in EventStatus],
            status=status or "",
            events=svc.events(tenant, user, wanted, 200),
            failures=svc.failures(tenant, user, 50),
            plot=plot,
            deny_apps=deny_apps,
            deny_titles=deny_titles,
            pause_file=str(pause),
            paused=pause.exists(),
            storage=_storage(svc, tenant),
        )


def _storage(svc, tenant: str):
    """The bytes stored per kind for the Activity page (``MemoryService.storage``), or None where not offered."""
    try:
        return svc.storage(tenant)
    except NotOffered:
        return None


def _fed(svc: MemoryService, tenant: str, observation_id) -> list:
    """The memories an observation fed (``MemoryService.memories_from``), [] where not offered."""
    try:
        return svc.memories_from(tenant, observation_id)
    except NotOffered:
        return []


def mcp_snippet(data_dir: Path) -> str:
    """The ``claude_desktop_config.json`` entry that serves this install's memory over MCP (``engram mcp``), with
    the real paths of the ``engram`` command and the data dir."""
    exe = shutil.which("engram") or str(Path(sys.executable).with_name("engram"))
    entry = {"mcpServers": {"engram": {"command": exe, "args": ["mcp", "--data-dir", str(data_dir)]}}}
    return json.dumps(entry, indent=2)


def _items(app: FastAPI, cfg: UiConfig, pages: Pages) -> None:
    svc, tenant = cfg.service, cfg.tenant

    def record(request: Request, item_id: str):
        rec = svc.get_memory(tenant, parse_id(item_id))
        user = pages.user(request)
        if rec is None or (user and rec.user_id != user):
            raise HTTPException(404, "Nothing here: it was deleted, or never was.")
        return rec, user

    @app.get("/item/{item_id}", include_in_schema=False)
    def item(request: Request, item_id: str) -> Response:
        rec, user = record(request, item_id)
        missing, fed = None, []
        if rec.memory_type is MemoryType.observation:
            try:
                svc.media(tenant, rec.id, user)
            except MediaMissing as exc:
                missing = str(exc)
            fed = _fed(svc, tenant, rec.id)
        names = {str(e.id): e for e in svc.list_entities(tenant).items} if rec.payload.get("entity_ids") else {}
        return pages.render(
            request,
            "item.html",
            user=user,
            rec=rec,
            missing=missing,
            names=names,
            evidence=(rec.payload.get("provenance") or {}).get("observation_ids") or [],
            hl=present.highlight_words(request.query_params.get("hl")),
            fed=fed,
        )

    @app.get("/media/{item_id}", include_in_schema=False)
    def media(request: Request, item_id: str) -> Response:
        try:
            return media_response(svc.media(tenant, parse_id(item_id), pages.user(request)))
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from exc

    @app.get("/people/{entity_id}/sample", include_in_schema=False)
    def sample(request: Request, entity_id: str) -> Response:
        key = request.query_params.get("key") or ""
        if not key or len(key) > 300:
            raise HTTPException(404, "no such sample")
        try:
            obj = svc.sample_media(tenant, parse_id(entity_id), key)
        except MediaMissing:
            return RedirectResponse("/static/missing.svg", status_code=307)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from exc
        return media_response(obj)

    @app.get("/thumb/{item_id}", include_in_schema=False)
    def thumb(request: Request, item_id: str) -> Response:
        try:
            return media_response(svc.thumbnail(tenant, parse_id(item_id), pages.user(request)))
        except MediaMissing:
            return RedirectResponse("/static/missing.svg", status_code=307)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from exc


async def _form(cfg: UiConfig, request: Request) -> dict[str, str]:
    """The POSTed form when its CSRF token is the session's; HTTPException 403 otherwise."""
    try:
        return await cfg.csrf.checked_form(request)
    except PermissionError as exc:
        raise HTTPException(403, str(exc)) from exc


def back(path: str, anchor: str = "", **params: str | None) -> RedirectResponse:
    """A 303 to ``path`` with the non-empty ``params`` as its query and ``anchor`` as its fragment."""
    kept = {k: v for k, v in params.items() if v}
    return RedirectResponse(
        path + (f"?{urlencode(kept)}" if kept else "") + (f"#{anchor}" if anchor else ""), status_code=303
    )


def _changes(app: FastAPI, cfg: UiConfig, pages: Pages) -> None:
    svc, tenant = cfg.service, cfg.tenant

    form = partial(_form, cfg)

    @app.post("/people/{entity_id}/name", include_in_schema=False)
    async def name(request: Request, entity_id: str) -> Response:
        got = await form(request)
        new = " ".join((got.get("name") or "").split())[:256]
        if not new:
            raise HTTPException(400, "a name cannot be empty")
        if await run_in_threadpool(svc.name_entity, tenant, parse_id(entity_id), new) is None:
            raise HTTPException(404, "no such person")
        return back("/people", user=got.get("user"))

    @app.post("/people/{entity_id}/merge", include_in_schema=False)
    async def merge(request: Request, entity_id: str) -> Response:
        got = await form(request)
        keep, drop = parse_id(got.get("into") or ""), parse_id(entity_id)
        if keep == drop:
            raise HTTPException(400, "a person cannot be merged into themselves")
        if await run_in_threadpool(svc.merge_entities, tenant, keep, drop, "merged in engram ui") is None:
            raise HTTPException(404, "no such person")
        return back("/people", user=got.get("user"))

    @app.post("/people/{entity_id}/split", include_in_schema=False)
    async def split(request: Request, entity_id: str) -> Response:
        got = await form(request)
        key = got.get("key") or ""
        if not key or len(key) > 300:
            raise HTTPException(400, "which face or voice is not this person?")
        new = await run_in_threadpool(svc.split_entity, tenant, parse_id(entity_id), key)
        if new is None:
            raise HTTPException(404, "no such person or sample")
        return back("/people", user=got.get("user"), anchor=f"person-{new.id}")

    @app.post("/memories/{item_id}/delete", include_in_schema=False)
    async def delete(request: Request, item_id: str) -> Response:
        got = await form(request)
        mid, user = parse_id(item_id), got.get("user") or None
        rec = await run_in_threadpool(svc.get_memory, tenant, mid)
        if rec is None or (user and rec.user_id != user):
            raise HTTPException(404, "Nothing here: it was deleted, or never was.")
        await run_in_threadpool(svc.delete_memory, tenant, mid)
        return back("/memories", type=rec.memory_type.value, user=user)

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> Response:
        return await run_in_threadpool(pages.error, request, 404, str(exc))

    @app.exception_handler(NotOffered)
    async def not_offered(request: Request, exc: NotOffered) -> Response:
        return await run_in_threadpool(pages.error, request, 501, f"Not built yet: {exc}")

    @app.exception_handler(ServiceError)
    async def unavailable(request: Request, exc: ServiceError) -> Response:
        return await run_in_threadpool(pages.error, request, 503, f"engram cannot answer now: {exc}")


def _corrections(app: FastAPI, cfg: UiConfig) -> None:
    """A memory's correction, a failed event's retry, and the capture's pause."""
    svc, tenant = cfg.service, cfg.tenant
    form = partial(_form, cfg)

    @app.post("/memories/{item_id}/edit", include_in_schema=False)
    async def edit(request: Request, item_id: str) -> Response:
        got = await form(request)
        mid, user = parse_id(item_id), got.get("user") or None
        text = (got.get("text") or "").strip()
        if not text:
            raise HTTPException(400, "a correction cannot be empty")
        if len(text) > MAX_CORRECTION:
            raise HTTPException(400, f"a correction holds at most {MAX_CORRECTION} characters")
        rec = await run_in_threadpool(svc.get_memory, tenant, mid)
        if rec is None or (user and rec.user_id != user):
            raise HTTPException(404, "Nothing here: it was deleted, or never was.")
        try:
            new = await run_in_threadpool(svc.update_memory, tenant, mid, text)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from exc
        if new is None:
            raise HTTPException(404, "Nothing here: it was deleted, or never was.")
        return back("/memories", type=rec.memory_type.value, user=user, anchor=f"m-{new.id}")

    @app.post("/activity/{event_id}/retry", include_in_schema=False)
    async def retry(request: Request, event_id: str) -> Response:
        got = await form(request)
        eid, user = parse_id(event_id), got.get("user") or None
        if user:
            known = await run_in_threadpool(svc.events, tenant, user, EventStatus.failed, 1000)
            if all(r.event_id != eid for r in known):
                raise HTTPException(404, "no such failed event")
        if await run_in_threadpool(svc.retry_event, tenant, eid) is None:
            raise HTTPException(404, "no such failed event (it may have been retried already)")
        return back("/activity", user=user, anchor="failures")

    @app.post("/activity/pause", include_in_schema=False)
    async def pause(request: Request) -> Response:
        got = await form(request)
        flag = cfg.data_dir / CAPTURE_PAUSE
        if got.get("pause") == "1":
            flag.touch()
        else:
            flag.unlink(missing_ok=True)
        return back("/activity", user=got.get("user"), anchor="capture")
