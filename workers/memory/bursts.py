"""Bursts of near-duplicate screenshots, collapsed into one search hit (``workers.memory.search``).

A capture agent keeps a frame whenever the screen changes a little (a cursor, a clock, one new terminal line), so a
window that stays on screen for minutes leaves a run of frames whose texts differ in a word or two; a search for
what it showed would return that run as its first hits. screenpipe and Rewind show such a run as one moment; so
does engram's search.

A **burst** of a screenshot hit is the run of frames around it, in time order, that share its ``user_id``,
``device_id``, ``app`` and ``window`` (the window title; frames of other windows in between are ignored), where
each frame follows the previous one of the run within ``BURST_GAP_SECONDS`` and its text is a near-duplicate of the
hit's: the Jaccard similarity of their token sets (BM25's stemmed, stop-word-free tokens, ``workers.text.sparse``)
is at least ``BURST_JACCARD``. The run stops at the first frame that breaks either rule, so a screen that changed
and came back is two bursts, and a slowly scrolling terminal does not drift into one burst (each frame is compared
with the hit, not with its neighbour). Frames of other kinds (audio, chats, clips) never form bursts.

The hit kept is the best-ranked frame of its burst (search picks hits in rank order, and a frame already in a
kept hit's burst is skipped), so ``k`` hits are ``k`` distinct moments.
"""

from __future__ import annotations

from engram.schemas.events import MediaKind
from engram.workers.runtime import Runtime
from engram.workers.stores import models as qm
from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter
from engram.workers.text import sparse

BURST_GAP_SECONDS = 300.0  # a longer gap between consecutive frames of one window ends its burst

BURST_JACCARD = 0.8  # token-set Jaccard similarity to the hit's text at which a frame is a near-duplicate

WINDOW_SECONDS = 2 * BURST_GAP_SECONDS  # first span read on each side of a hit; doubled while the burst reaches
# its edge (a busy day's hour of frames, read for each screenshot hit, made a search of 100 k observations take 3 s)

MAX_WINDOW_SECONDS = 7 * 86400.0  # the longest span read on each side of a hit

FIELDS = ["kind", "tenant_id", "user_id", "device_id", "app", "window", "start_ts", "text"]


def jaccard(a: set[str], b: set[str]) -> float:
    """|a ∩ b| / |a ∪ b| of two token sets, 1.0 for two empty sets."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def _tokens(text: str) -> set[str]:
    return set(sparse.tokenize([text or ""])[0])


def _same_window(a: dict, b: dict) -> bool:
    return all(a.get(key) == b.get(key) for key in ("user_id", "device_id", "app", "window"))


def _frames(rt: Runtime, tenant_id: str, hit: dict, start: float, end: float) -> list[qm.Record]:
    """The screenshots of the hit's user and device in [start, end], of its window, in time order."""
    flt = tenant_filter(tenant_id, hit.get("user_id"), kind=MediaKind.screenshot.value)
    if hit.get("device_id") is not None:
        flt.must.append(qm.FieldCondition(key="device_id", match=qm.MatchValue(value=hit["device_id"])))
    flt.must.append(qm.FieldCondition(key="start_ts", range=qm.Range(gte=start, lte=end)))
    frames = [
        r for r in rt.vectors.scroll(OBSERVATIONS, flt, with_payload=FIELDS) if _same_window(r.payload or {}, hit)
    ]
    frames.sort(key=lambda r: ((r.payload or {}).get("start_ts") or 0.0, str(r.id)))
    return frames


def _walk(frames: list[qm.Record], pos: int, step: int, words: set[str]) -> tuple[list[qm.Record], float | None]:
    """The frames from ``pos`` (the hit) on in direction ``step`` that continue its burst, and, when the walk ran off
    the end of ``frames`` (the burst may go on beyond the span read), the time of the last frame it reached."""
    run: list[qm.Record] = []
    last = (frames[pos].payload or {}).get("start_ts") or 0.0
    i = pos + step
    while 0 <= i < len(frames):
        p = frames[i].payload or {}
        t = p.get("start_ts") or 0.0
        if abs(t - last) > BURST_GAP_SECONDS or jaccard(words, _tokens(p.get("text", ""))) < BURST_JACCARD:
            return run, None
        run.append(frames[i])
        last = t
        i += step
    return run, last


def burst_of(rt: Runtime, tenant_id: str, hit_id: str, hit: dict) -> list[str]:
    """The ids of the other frames of the burst of the screenshot ``hit_id`` (payload ``hit``: ``FIELDS``), in time
    order; [] for a hit that is not a screenshot or has no near-duplicate neighbours. Reads the hit's window's
    frames within ``WINDOW_SECONDS`` on each side, doubling the span (up to ``MAX_WINDOW_SECONDS``) while the burst
    reaches its edge."""
    if hit.get("kind") != MediaKind.screenshot.value or hit.get("start_ts") is None:
        return []
    words, t, span = _tokens(hit.get("text", "")), hit["start_ts"], WINDOW_SECONDS
    while True:
        frames = _frames(rt, tenant_id, hit, t - span, t + span)
        pos = next((i for i, r in enumerate(frames) if str(r.id) == hit_id), None)
        if pos is None:
            return []
        before, first = _walk(frames, pos, -1, words)
        after, last = _walk(frames, pos, 1, words)
        # a frame beyond the span read could continue the burst only if the run ends within one gap of its edge
        cut = (
            first is not None
            and first - (t - span) <= BURST_GAP_SECONDS
            or last is not None
            and (t + span) - last <= BURST_GAP_SECONDS
        )
        if not cut or span >= MAX_WINDOW_SECONDS:
            return [str(r.id) for r in [*reversed(before), *after]]
        span *= 2


def collapse(rt: Runtime, tenant_id: str, picked: list[str], bursts: dict[str, list[str]], absorbed: set[str]) -> None:
    """Find the bursts of the observation hits ``picked`` (ids, best first) that are neither kept yet (keys of
    ``bursts``) nor in a kept hit's burst (``absorbed``): each gets ``bursts[id]`` = the other frames of its burst,
    which join ``absorbed`` at once, so a later id of ``picked`` in an earlier one's burst is absorbed instead of
    kept. One read of the new hits' payloads, then one scroll per screenshot hit (``burst_of``)."""
    new = [pid for pid in picked if pid not in bursts and pid not in absorbed]
    payloads = {str(r.id): r.payload or {} for r in rt.vectors.retrieve(OBSERVATIONS, new, with_payload=FIELDS)}
    for pid in new:
        if pid in absorbed:
            continue
        bursts[pid] = [m for m in burst_of(rt, tenant_id, pid, payloads.get(pid, {})) if m not in bursts]
        absorbed.update(bursts[pid])
