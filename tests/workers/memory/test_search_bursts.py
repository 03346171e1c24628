"""Bursts of near-duplicate screenshots collapse into one search hit (``workers.memory.bursts``), and every hit
says why it was found (``SearchHit.matched``): rendered frames through the real ingest (OCR, embeddings, the
embedded store) on a temporary ENGRAM_DATA_DIR."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engram.api.embedded import ingest_paths
from engram.schemas.search import SearchRequest
from engram.workers.memory.bursts import jaccard
from engram.workers.memory.search import search

T0 = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)
TERMINAL = [
    "sam@db-primary:~$ df -h /var/lib/postgresql",
    "/dev/nvme0n1p2 468G 451G 17G 97%",
    "sam@db-primary:~$ du -sh pg_wal",
    "112G /var/lib/postgresql/16/main/pg_wal",
    "replication slot analytics_sync inactive",
]
MAIL = ["From: Dana Whitfield", "Subject: lease renewal Flat 4B", "Please sign the renewal form by 31 March"]


def _frame(path: Path, lines: list[str], row: int, shade: tuple[int, int, int] = (150, 190, 250)) -> Path:
    """A screen of ``lines`` with row ``row`` highlighted in ``shade`` (a selection bar that moves between frames,
    so the frames differ as pictures and pass ingest's near-duplicate filter while their text stays the same)."""
    from PIL import Image, ImageDraw, ImageFont

    try:
        font = ImageFont.truetype("DejaVuSans.ttf", 22)
    except OSError:
        font = ImageFont.load_default(size=22)
    img = Image.new("RGB", (760, 60 + 40 * len(lines)), "white")
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 14 + 40 * row, 760, 50 + 40 * row), fill=shade)
    for i, line in enumerate(lines):
        draw.text((20, 20 + 40 * i), line, fill="black", font=font)
    img.save(path, format="PNG")
    return path


@dataclass
class Frames:
    """The ingested frames: the runtime and each frame's event id by name."""

    rt: object
    event_of: dict[str, str]

    def find(self, query: str, **kw):
        """The hits of a search in tenant ``acme``."""
        return search(self.rt, SearchRequest(query=query, tenant_id="acme", reinforce=False, **kw)).hits


@pytest.fixture(scope="module")
def frames(tmp_path_factory) -> Frames:
    """One terminal window seen in five frames a minute apart (a burst), again 20 minutes later (another burst), a
    mail window between them on the same device, and the terminal on another device at the same time."""
    from engram.schemas.events import EventStatus
    from engram.workers.runtime import reset_runtimes, runtime

    root = tmp_path_factory.mktemp("bursts")
    src = root / "src"
    src.mkdir()
    term = "sam@db-primary: ~"
    shots = [(f"term-{i}.png", TERMINAL, i, None, "laptop", "xterm", term, T0 + timedelta(minutes=i)) for i in range(5)]
    shots += [
        ("mail.png", MAIL, 0, None, "laptop", "Thunderbird", "Inbox", T0 + timedelta(minutes=2, seconds=30)),
        ("term-later.png", TERMINAL, 2, (250, 200, 150), "laptop", "xterm", term, T0 + timedelta(minutes=25)),
        ("term-desk.png", TERMINAL, 1, (180, 250, 180), "desktop", "xterm", term, T0 + timedelta(minutes=1)),
    ]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENGRAM_DATA_DIR", str(root / "data"))
        for var in ("ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT", "ENGRAM_BROKER_URL"):
            mp.delenv(var, raising=False)
        reset_runtimes()
        rt = runtime()
        for name, lines, row, shade, device, app, window, when in shots:
            path = _frame(src / name, lines, row, *([shade] if shade else []))
            out = ingest_paths(
                [path],
                tenant="acme",
                user="sam",
                device=device,
                captured_at=when,
                app_name=app,
                window=window,
                consolidate=False,
                quiet=True,
            )
            assert [p.name for p, _ in out["done"]] == [name], out
        event_of = {
            Path(r.source_name).name: str(r.event_id) for r in rt.ledger.records("acme", EventStatus.done, limit=100)
        }
        yield Frames(rt, event_of)
        reset_runtimes()


def _names(frames: Frames, hit) -> set[str]:
    by_event = {e: n for n, e in frames.event_of.items()}
    return {by_event[str(e)] for e in hit.event_ids}


def test_a_burst_is_one_hit_that_lists_its_frames(frames):
    loose = frames.find("pg_wal replication slot", collapse=False, kinds=["screenshot"])
    assert sum(h.burst_size for h in loose) == len(loose) and len(loose) >= 7
    hits = frames.find("pg_wal replication slot", kinds=["screenshot"])
    laptop = [
        h
        for h in hits
        if "term-later.png" not in _names(frames, h) and _names(frames, h) & {f"term-{i}.png" for i in range(5)}
    ]
    assert len(laptop) == 1, [(_names(frames, h), h.burst_size) for h in hits]
    burst = laptop[0]
    assert burst.burst_size == 5 and len(burst.burst_ids) == 4 and burst.id not in burst.burst_ids
    members = {h.id: h for h in loose}
    assert all(members[m].score <= burst.score for m in burst.burst_ids)  # the best-ranked frame is kept
    # 20 minutes later is another burst; the other device's frame is its own; the mail window never joins
    assert {"term-later.png", "term-desk.png"} <= {n for h in hits for n in _names(frames, h)}
    assert all(h.burst_size == 1 for h in hits if _names(frames, h) & {"term-later.png", "term-desk.png"})


def test_k_counts_collapsed_hits(frames):
    hits = frames.find("pg_wal replication slot", kinds=["screenshot"], limit=3)
    assert len(hits) == 3
    ids = {h.id for h in hits}
    assert not ids & {m for h in hits for m in h.burst_ids}
    assert sum(h.burst_size for h in hits) == 7  # five + later + other device


def test_no_collapse_returns_every_frame(frames):
    hits = frames.find("pg_wal replication slot", kinds=["screenshot"], collapse=False, limit=5)
    assert len(hits) == 5 and all(h.burst_size == 1 and not h.burst_ids for h in hits)


def test_matched_says_why(frames):
    hits = frames.find("replication slot of the lease renewal", limit=10)
    mail = next(h for h in hits if _names(frames, h) == {"mail.png"})
    assert mail.matched.words == ["lease", "renewal"]
    term = next(h for h in hits if "term-0.png" in _names(frames, h) or h.burst_size == 5)
    assert term.matched.words == ["replication", "slot"]
    assert term.matched.sparse_rank is not None and term.matched.dense_rank is not None
    assert not mail.matched.time and not mail.matched.entity


def test_jaccard():
    assert jaccard(set(), set()) == 1.0
    assert jaccard({"a", "b"}, {"a", "c"}) == pytest.approx(1 / 3)


def test_a_burst_longer_than_the_span_read_is_followed_to_its_end(frames, monkeypatch):
    from engram.workers.memory import bursts

    monkeypatch.setattr(bursts, "WINDOW_SECONDS", 90.0)  # the five frames span four minutes: the span must grow
    hits = frames.find("pg_wal replication slot", kinds=["screenshot"])
    assert max(h.burst_size for h in hits) == 5
