"""The CLI's shared lines: counts read in the singular and the plural, the ingest's summary line."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from engram.api.console import counted, ingest_summary


def test_counts_read_in_the_singular_and_the_plural():
    assert [counted(n, "observation") for n in (0, 1, 2)] == ["0 observations", "1 observation", "2 observations"]


def test_the_ingest_summary_counts_files_and_observations():
    done = [(Path("a.png"), SimpleNamespace(observations=1))]
    result = {"done": done, "skipped": [], "failed": [(Path("b.wav"), "empty file")], "ignored": [], "resumed": []}
    assert ingest_summary(result) == ("[green]1 done[/green] (1 observation), 0 skipped, [red]1 failed[/red], "
                                      "0 not media")
    done.append((Path("c.jsonl"), SimpleNamespace(observations=16)))
    assert "2 done[/green] (17 observations)" in ingest_summary(result)
