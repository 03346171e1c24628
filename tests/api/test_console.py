"""The CLI's shared lines: counts read in the singular and the plural, the ingest's summary line, the search
table's title."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console

from engram.api.console import counted, ingest_summary, print_hits
from engram.schemas.memories import MemoryType
from engram.schemas.search import SearchHit, SearchResponse


def test_counts_read_in_the_singular_and_the_plural():
    assert [counted(n, "observation") for n in (0, 1, 2)] == ["0 observations", "1 observation", "2 observations"]
    assert [counted(n, "entity", "entities") for n in (1, 3)] == ["1 entity", "3 entities"]


def test_the_search_table_counts_one_result_in_the_singular():
    def title(n: int) -> str:
        hits = [
            SearchHit(
                id=uuid.uuid4(),
                memory_type=MemoryType.observation,
                score=0.5,
                text=f"turn {i}",
                time=datetime(2023, 5, 20, 12, tzinfo=UTC),
            )
            for i in range(n)
        ]
        out = StringIO()
        print_hits(SearchResponse(query="lab hours", hits=hits, took_ms=12.0), Console(file=out, width=160))
        return out.getvalue()

    assert "'lab hours' — 1 result in 12 ms" in title(1)
    assert "'lab hours' — 2 results in 12 ms" in title(2)


def test_the_ingest_summary_counts_files_and_observations():
    done = [(Path("a.png"), SimpleNamespace(observations=1))]
    result = {"done": done, "skipped": [], "failed": [(Path("b.wav"), "empty file")], "ignored": [], "resumed": []}
    assert ingest_summary(result) == (
        "[green]1 done[/green] (1 observation), 0 skipped, [red]1 failed[/red], 0 not media"
    )
    done.append((Path("c.jsonl"), SimpleNamespace(observations=16)))
    assert "2 done[/green] (17 observations)" in ingest_summary(result)


def test_a_hit_says_what_matched_in_words():
    from engram.api.console import why_found
    from engram.schemas.search import Matched

    def why(burst: int = 1, **matched) -> str:
        return why_found(
            SearchHit(
                id=uuid.uuid4(),
                memory_type=MemoryType.observation,
                score=0.0615,
                text="x",
                matched=Matched(**matched),
                burst_size=burst,
            )
        )

    assert why(dense_rank=3, sparse_rank=1, words=["budget", "review"]) == "words: budget, review + meaning"
    assert why(dense_rank=1) == "meaning"
    assert why(sparse_rank=2) == "words (nearby)"  # BM25 found it through the turns it is indexed with
    assert why(3, dense_rank=1, time=True, entity=True, memory=True) == "meaning + time + person + memory + 3 frames"
