"""What the web app's pages show, computed from the service's answers: the timeline's groups (screenshots by
application and window, chat turns by session), short texts, local times, and the "why it matched" line of a
search hit. Nothing here renders HTML: the templates do, with autoescaping."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

from engram.schemas.memory_admin import MemoryRecord
from engram.schemas.search import SearchHit

#: Thumbnails shown per run of one application's screenshots on the day's page; the rest behind a link.
GROUP_THUMBS = 12
#: Characters of a text shown in lists (the whole text is on the item's page).
SHORT_TEXT = 400
PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff")


@dataclass
class Group:
    """A run of consecutive timeline items of one kind (and, for screenshots, one app and window; for chat turns,
    one session), newest first. ``shown``: the items drawn (every one, or ``GROUP_THUMBS`` sampled evenly)."""

    kind: str
    app: str | None
    window: str | None
    session: str | None
    items: list[MemoryRecord] = field(default_factory=list)
    shown: list[MemoryRecord] = field(default_factory=list)

    @property
    def more(self) -> int:
        """Items in the run that are not drawn."""
        return len(self.items) - len(self.shown)


def _key(rec: MemoryRecord) -> tuple:
    p = rec.payload
    kind = p.get("kind") or "observation"
    if kind == "screenshot":
        return kind, p.get("app"), p.get("window"), None
    if kind == "text":
        return kind, None, None, p.get("session_id")
    return kind, None, None, p.get("event_id")


def group_timeline(items: list[MemoryRecord], sample: bool = True) -> list[Group]:
    """``items`` (newest first) as runs of ``Group``; with ``sample`` a screenshot run draws at most
    ``GROUP_THUMBS`` of its frames, evenly spread over it."""
    groups: list[Group] = []
    for rec in items:
        key = _key(rec)
        if not groups or (groups[-1].kind, groups[-1].app, groups[-1].window, groups[-1].session) != key:
            groups.append(Group(*key))
        groups[-1].items.append(rec)
    for g in groups:
        n = len(g.items)
        if sample and g.kind == "screenshot" and n > GROUP_THUMBS:
            g.shown = [g.items[round(i * (n - 1) / (GROUP_THUMBS - 1))] for i in range(GROUP_THUMBS)]
        else:
            g.shown = list(g.items)
    return groups


def short(text: str | None, limit: int = SHORT_TEXT) -> str:
    """``text`` cut to ``limit`` characters (with an ellipsis when cut)."""
    text = text or ""
    return text if len(text) <= limit else text[:limit].rstrip() + "…"


def has_picture(object_key: str | None) -> bool:
    """Whether an object key names a picture a thumbnail can be made of."""
    return object_key is not None and object_key.lower().endswith(PICTURE_SUFFIXES)


def day_span(day: date, last: date | None, tz) -> tuple[datetime, datetime]:
    """``[start of day, end of last)`` in the zone ``tz`` (``last`` defaults to ``day``)."""
    start = datetime.combine(day, time(0), tz)
    end = datetime.combine((last or day) + timedelta(days=1), time(0), tz)
    return start, end


def why(hit: SearchHit) -> str:
    """Why a hit was found, in words (the search layer's ``matched``), or ``""`` when it did not say."""
    m = getattr(hit, "matched", None)
    if m is None:
        return ""
    parts = []
    if m.words:
        parts.append("words: " + ", ".join(m.words))
    if m.dense_rank is not None:
        parts.append(f"meaning: #{m.dense_rank}")
    if m.sparse_rank is not None:
        parts.append(f"keywords: #{m.sparse_rank}")
    parts += [label for flag, label in ((m.time, "in the time asked"), (m.entity, "the person named"),
                                        (m.memory, "a memory built from it")) if flag]
    return " · ".join(parts)
