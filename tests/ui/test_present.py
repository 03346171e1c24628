"""``api.ui.present``: the timeline's runs and bursts of near-identical frames (shown as one thumbnail)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from engram.api.ui.present import GROUP_THUMBS, group_timeline
from engram.schemas.memories import MemoryType
from engram.schemas.memory_admin import MemoryRecord

T0 = datetime(2024, 5, 2, 9, tzinfo=UTC)
CODE = "def reconcile_invoice_batches ledger batches tolerance unmatched total expected return"


def frame(second: float, text: str, device: str = "laptop", window: str = "editor.py") -> MemoryRecord:
    return MemoryRecord(
        id=uuid.uuid4(),
        memory_type=MemoryType.observation,
        tenant_id="t",
        user_id="u",
        time=T0 + timedelta(seconds=second),
        text=text,
        payload={"kind": "screenshot", "app": "Code", "window": window, "device_id": device},
    )


def test_a_burst_of_near_identical_frames_is_one_thumbnail():
    frames = [frame(10 * i, f"{CODE} 09:{i:02d}") for i in range(10)]  # one word (the clock) changes
    frames += [frame(100 + 10 * i, f"mail inbox {i} quarterly budget review from maya") for i in range(3)]
    frames += [frame(2000, f"{CODE} 09:40")]  # the same screen after a long gap: a burst of its own
    frames += [frame(2010, f"{CODE} 09:41", device="desktop")]  # another device's frame: its own
    (group,) = group_timeline(sorted(frames, key=lambda r: r.time, reverse=True))
    sizes = [group.bursts[str(r.id)] for r in group.shown]
    assert sizes == [1, 1, 1, 1, 1, 10]  # newest first: the two lone frames, three mails (each differs), the run
    assert group.shown[-1].id == frames[0].id  # a burst shows its first frame
    assert group.more == 0 and len(group.items) == len(frames)


def test_a_long_run_samples_its_bursts():
    frames = [frame(400 * i, f"page {i} " + " ".join(f"w{i}x{j}" for j in range(5))) for i in range(40)]
    frames += [frame(16_000 + i, "the same dashboard 42") for i in range(20)]
    (group,) = group_timeline(sorted(frames, key=lambda r: r.time, reverse=True))
    assert len(group.shown) == GROUP_THUMBS and group.bursts[str(frames[40].id)] == 20
    assert group.more == len(frames) - sum(group.bursts[str(r.id)] for r in group.shown)
    (full,) = group_timeline(sorted(frames, key=lambda r: r.time, reverse=True), sample=False)
    assert len(full.shown) == 41 and full.more == 0


def test_a_burst_is_drawn_once_on_the_timeline_and_in_search():
    """The templates: a timeline burst's one thumbnail says ×N (and its alt text how many frames follow); a search
    hit standing for a burst says how many similar frames it holds and why it matched."""
    from datetime import date
    from zoneinfo import ZoneInfo

    from engram.api.ui.pages import environment
    from engram.schemas.search import Matched, SearchHit, SearchResponse

    env = environment(ZoneInfo("UTC"))
    common = dict(user=None, uq="", ua="", tenant="t", users=[], csrf="x", csrf_field="c", path="/", query={})
    frames = [frame(10 * i, f"{CODE} 09:{i:02d}") for i in range(4)]
    groups = group_timeline(frames[::-1])
    html = env.get_template("timeline.html").render(
        groups=groups,
        total=4,
        day=date(2024, 5, 2),
        hours=[],
        today=date(2024, 5, 2),
        last=None,
        before=date(2024, 5, 1),
        after=date(2024, 5, 3),
        kind="",
        kinds=[],
        app_name="",
        capped=False,
        **common,
    )
    assert html.count('<img src="/thumb/') == 1 and "×4" in html and "and 3 near-identical frames after it" in html
    hit = SearchHit(
        id=frames[0].id,
        memory_type=MemoryType.observation,
        score=0.5,
        text=CODE,
        time=T0,
        object_key="media/t/a.png",
        burst_size=4,
        matched=Matched(words=["reconcile"], sparse_rank=1),
    )
    resp = SearchResponse(query="reconcile", hits=[hit], took_ms=3.0)
    page = env.get_template("search.html").render(
        q="reconcile", resp=resp, form={}, kinds=[], types=[], unknown_person=None, **common
    )
    assert "4 similar frames" in page and "Why: words: reconcile" in page and "hl=reconcile" in page
