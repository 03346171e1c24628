"""What the web app's pages show, computed from the service's answers: the timeline's groups (screenshots by
application and window, chat turns by session), short texts, local times, and the "why it matched" line of a
search hit. Nothing here renders HTML: the templates do, with autoescaping."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

from engram.schemas.memory_admin import MemoryRecord
from engram.schemas.search import SearchHit

#: Thumbnails shown per run of one application's screenshots on the day's page; the rest behind a link.
GROUP_THUMBS = 12
#: A burst of near-identical frames is shown as one thumbnail (the search's rule, ``workers.memory.bursts``, on the
#: words as split on spaces, case ignored, of the text's first ``BURST_TEXT`` characters): consecutive frames of one
#: device, each within ``BURST_GAP_S`` seconds of the previous one, whose words' Jaccard similarity to the burst's
#: first frame is at least ``BURST_JACCARD``.
BURST_GAP_S = 300.0
BURST_JACCARD = 0.8
#: Characters of a text shown in lists (the whole text is on the item's page).
SHORT_TEXT = 400
PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff")


@dataclass
class Group:
    """A run of consecutive timeline items of one kind (and, for screenshots, one app and window; for chat turns,
    one session), newest first. ``shown``: the items drawn (every one, or ``GROUP_THUMBS`` sampled evenly);
    ``anchors``: the ids of the hours that start at this group (``scrubber``); ``bursts``: for a screenshot run,
    each burst's frame shown (its first) by id, with how many frames the burst holds."""

    kind: str
    app: str | None
    window: str | None
    session: str | None
    items: list[MemoryRecord] = field(default_factory=list)
    shown: list[MemoryRecord] = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)
    bursts: dict[str, int] = field(default_factory=dict)

    @property
    def more(self) -> int:
        """Items in the run that are not drawn (nor in a drawn burst)."""
        return len(self.items) - sum(self.bursts.get(str(r.id), 1) for r in self.shown)


#: Characters of a frame's text compared for bursts (the start of a long OCR text is enough to tell screens apart).
BURST_TEXT = 2000


def _words(rec: MemoryRecord) -> set[str]:
    return set((rec.text or "")[:BURST_TEXT].lower().split())


def bursts(frames: list[MemoryRecord]) -> list[list[MemoryRecord]]:
    """``frames`` (one window's screenshots, newest first) as bursts of near-identical frames (see
    ``BURST_GAP_S``), newest first, each in time order."""
    out: list[list[MemoryRecord]] = []
    head_words: set[str] = set()
    for rec in reversed(frames):
        last = out[-1][-1] if out else None
        near = (
            last is not None
            and rec.time is not None
            and last.time is not None
            and (rec.time - last.time).total_seconds() <= BURST_GAP_S
            and rec.payload.get("device_id") == last.payload.get("device_id")
        )
        words = _words(rec) if near or not out else None
        if near and words is not None:
            union = len(words | head_words)
            near = (len(words & head_words) / union if union else 1.0) >= BURST_JACCARD
        if near:
            out[-1].append(rec)
        else:
            out.append([rec])
            head_words = words if words is not None else _words(rec)
    return out[::-1]


def _key(rec: MemoryRecord) -> tuple:
    p = rec.payload
    kind = p.get("kind") or "observation"
    if kind == "screenshot":
        return kind, p.get("app"), p.get("window"), None
    if kind == "text":
        return kind, None, None, p.get("session_id")
    return kind, None, None, p.get("event_id")


def group_timeline(items: list[MemoryRecord], sample: bool = True) -> list[Group]:
    """``items`` (newest first) as runs of ``Group``; a screenshot run draws one frame per burst of near-identical
    frames (``bursts``), and with ``sample`` at most ``GROUP_THUMBS`` of them, evenly spread over it."""
    groups: list[Group] = []
    for rec in items:
        key = _key(rec)
        if not groups or (groups[-1].kind, groups[-1].app, groups[-1].window, groups[-1].session) != key:
            groups.append(Group(*key))
        groups[-1].items.append(rec)
    for g in groups:
        heads = list(g.items)
        if g.kind == "screenshot":
            found = bursts(g.items)
            heads = [b[0] for b in found]
            g.bursts = {str(b[0].id): len(b) for b in found}
        n = len(heads)
        if sample and g.kind == "screenshot" and n > GROUP_THUMBS:
            g.shown = [heads[round(i * (n - 1) / (GROUP_THUMBS - 1))] for i in range(GROUP_THUMBS)]
        else:
            g.shown = heads
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


#: Words a search hit's page highlights at most (``?hl=``), and the longest one, characters.
HIGHLIGHT_WORDS, HIGHLIGHT_LEN = 12, 64


def highlight_words(value: str | None) -> list[str]:
    """The words of an item page's ``?hl=`` (a search hit's ``matched.words``, space-separated): word characters
    only, at most ``HIGHLIGHT_WORDS`` of at most ``HIGHLIGHT_LEN`` characters each."""
    found = re.findall(r"\w+", value or "")
    return [w for w in found if len(w) <= HIGHLIGHT_LEN][:HIGHLIGHT_WORDS]


def marked(text: str | None, words: list[str]) -> list[tuple[str, bool]]:
    """``text`` cut into (part, matched) pieces: a part is matched where it is a word starting with one of
    ``words``, case ignored (the search compares BM25 stems: "review" matches "reviews"). The template shows a
    matched part in ``<mark>``, every part escaped as text."""
    if not text:
        return []
    if not words:
        return [(text, False)]
    pattern = re.compile(
        r"\b(?:" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")\w*", re.IGNORECASE
    )
    out, at = [], 0
    for m in pattern.finditer(text):
        if m.start() > at:
            out.append((text[at : m.start()], False))
        out.append((m.group(0), True))
        at = m.end()
    if at < len(text):
        out.append((text[at:], False))
    return out


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
    parts += [
        label
        for flag, label in (
            (m.time, "in the time asked"),
            (m.entity, "the person named"),
            (m.memory, "a memory built from it"),
        )
        if flag
    ]
    return " · ".join(parts)


# --- the timeline's scrubber -----------------------------------------------------------------------------------


@dataclass
class HourSlot:
    """One hour of the timeline's range: its day and hour (local), how many items it holds, and the anchor id
    of the page's first group holding one of them (``""`` when empty)."""

    day: date
    hour: int
    count: int = 0
    anchor: str = ""

    @property
    def label(self) -> str:
        """``HH:00``."""
        return f"{self.hour:02d}:00"


def hour_anchor(day: date, hour: int) -> str:
    """The id of the anchor that starts hour ``hour`` of ``day`` on the timeline's page."""
    return f"h-{day.isoformat()}-{hour:02d}"


def scrubber(groups: list[Group], first: date, last: date | None, tz) -> list[HourSlot]:
    """Every hour of ``[first, last]`` (local, oldest first) with its count of items, each non-empty hour's
    anchor set on the first group (in page order) that holds an item of it (``Group.anchors``, set here)."""
    slots: dict[tuple[date, int], HourSlot] = {}
    day = first
    while day <= (last or first):
        for h in range(24):
            slots[(day, h)] = HourSlot(day, h)
        day += timedelta(days=1)
    for g in groups:
        g.anchors = []
        for rec in g.items:
            if rec.time is None:
                continue
            t = rec.time.astimezone(tz)
            slot = slots.get((t.date(), t.hour))
            if slot is None:
                continue
            slot.count += 1
            if not slot.anchor:
                slot.anchor = hour_anchor(t.date(), t.hour)
                g.anchors.append(slot.anchor)
    return list(slots.values())


# --- the activity's plot ---------------------------------------------------------------------------------------

#: The plot's kinds, in stacking order, with their colours (distinguishable for common colour blindness:
#: Okabe & Ito's palette) and the plot's size in SVG units.
PLOT_KINDS = (("screenshot", "#0072B2"), ("audio", "#E69F00"), ("clip", "#009E73"), ("text", "#CC79A7"))
PLOT_W, PLOT_H, PLOT_PAD = 720, 200, 28


@dataclass
class Bar:
    """One kind's part of one hour's bar (SVG units)."""

    x: float
    y: float
    w: float
    h: float
    kind: str
    colour: str
    count: int
    hour: str


@dataclass
class Plot:
    """What was ingested per hour and per kind over the last 24 hours: ``hours`` (labels, oldest first),
    ``rows`` ({hour label: {kind: count}}), the stacked ``bars``, the y axis' top ``top`` and ``total``."""

    hours: list[str]
    rows: dict[str, dict[str, int]]
    bars: list[Bar]
    top: int
    total: int
    kinds: tuple = PLOT_KINDS
    width: int = PLOT_W
    height: int = PLOT_H
    pad: int = PLOT_PAD


def ingest_plot(records: list, now: datetime, tz, hours: int = 24) -> Plot:
    """``records`` (ledger records) counted by the local hour they were published (``created_at``, else
    ``updated_at``) and their kind, over the ``hours`` hours up to ``now``, as a stacked bar plot."""
    end = now.astimezone(tz).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    starts = [end - timedelta(hours=hours - i) for i in range(hours)]
    labels = [s.strftime("%H:00") for s in starts]
    counts = [dict.fromkeys((k for k, _ in PLOT_KINDS), 0) for _ in starts]
    for r in records:
        at = (r.created_at or r.updated_at).astimezone(tz)
        i = int((at - starts[0]).total_seconds() // 3600)
        if 0 <= i < hours:
            kind = r.kind.value if hasattr(r.kind, "value") else str(r.kind)
            counts[i][kind] = counts[i].get(kind, 0) + 1
    top = max([sum(c.values()) for c in counts] + [1])
    inner_w, inner_h = PLOT_W - 2 * PLOT_PAD, PLOT_H - 2 * PLOT_PAD
    step = inner_w / hours
    bars = []
    for i, c in enumerate(counts):
        y = float(PLOT_PAD + inner_h)
        for kind, colour in PLOT_KINDS:
            n = c.get(kind, 0)
            if n:
                h = inner_h * n / top
                y -= h
                bars.append(
                    Bar(
                        PLOT_PAD + i * step + 1,
                        round(y, 1),
                        round(step - 2, 1),
                        round(h, 1),
                        kind,
                        colour,
                        n,
                        labels[i],
                    )
                )
    return Plot(labels, dict(zip(labels, counts, strict=True)), bars, top, sum(sum(c.values()) for c in counts))


# --- memories and their history --------------------------------------------------------------------------------


def with_history(items: list[MemoryRecord]) -> tuple[list[MemoryRecord], dict[str, list[MemoryRecord]]]:
    """``items`` split into the current memories (not superseded) and, for each, the versions it superseded,
    directly or through a chain (newest first): {current id: [older versions]}."""
    by_id = {str(m.id): m for m in items}
    newer = {str(m.id): str(m.payload.get("superseded_by")) for m in items if m.payload.get("superseded_by")}

    def head(mid: str) -> str:
        seen = set()
        while mid in newer and newer[mid] in by_id and mid not in seen:
            seen.add(mid)
            mid = newer[mid]
        return mid

    history: dict[str, list[MemoryRecord]] = {}
    for mid in newer:
        if (top := head(mid)) != mid:
            history.setdefault(top, []).append(by_id[mid])
    for older in history.values():
        older.sort(key=lambda m: str(m.payload.get("valid_to") or ""), reverse=True)
    return [m for m in items if str(m.id) not in newer or newer[str(m.id)] not in by_id], history
