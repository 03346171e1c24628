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
        hits = [SearchHit(id=uuid.uuid4(), memory_type=MemoryType.observation, score=0.5, text=f"turn {i}",
                          time=datetime(2023, 5, 20, 12, tzinfo=UTC)) for i in range(n)]
        out = StringIO()
        print_hits(SearchResponse(query="lab hours", hits=hits, took_ms=12.0), Console(file=out, width=160))
        return out.getvalue()

    assert "'lab hours' — 1 result in 12 ms" in title(1)
    assert "'lab hours' — 2 results in 12 ms" in title(2)


def test_the_ingest_summary_counts_files_and_observations():
    done = [(Path("a.png"), SimpleNamespace(observations=1))]
    result = {"done": done, "skipped": [], "failed": [(Path("b.wav"), "empty file")], "ignored": [], "resumed": []}
    assert ingest_summary(result) == ("[green]1 done[/green] (1 observation), 0 skipped, [red]1 failed[/red], "
                                      "0 not media")
    done.append((Path("c.jsonl"), SimpleNamespace(observations=16)))
    assert "2 done[/green] (17 observations)" in ingest_summary(result)
