"""Throughput, CPU efficiency and latency of the distributed pipeline, beside the embedded default (issue 15).

How it is measured (the backlog drained by 1, 2, 4 cpu workers, events per CPU-second, store busy, publish-to-
searchable latency, the machine's contention control) is told in ``bench.lib.distributed``, which holds the
measurement; this script runs it and prints the table and the targets' checks.

    python bench/distributed.py                                         # 300 events, 1 2 4 workers, both kinds
    python bench/distributed.py --events 60 --kinds text --no-embedded --rounds 1  # quicker
    python bench/distributed.py --json figures.json                     # also write the figures ('-': stdout)

Needs ``redis-server`` (``scripts/setup.sh`` installs it).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import structlog  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.lib.distributed import (  # noqa: E402
    KINDS,
    Figure,
    checks,
    contention_line,
    efficiency_ratios,
    load_average,
    machine_contention,
    rates,
    run,
    task_cpu_line,
)


def table(figures: list[Figure], events: int) -> Table:
    """The figures side by side."""
    out = Table(title=f"engram pipeline: {events} events per row (2-core machine, shared: noisy)")
    cols = (
        "mode",
        "kind",
        "cpu workers",
        "round",
        "events/s",
        "CPU s",
        "events/CPU-s",
        "store CPU",
        "store tasks",
        "idle CPU",
        "failed",
        "p50",
        "p95",
        "max",
        "1st search",
    )
    for col in cols:
        out.add_column(col, justify="left" if col in ("mode", "kind") else "right")

    def pct(x):
        return f"{x:.0%}" if x is not None else ""

    def sec(x):
        return f"{x:.2f} s" if x is not None else ""

    for f in figures:
        out.add_row(
            f.mode,
            f.kind,
            str(f.workers or "-"),
            str(f.round) if f.mode == "distributed" else "",
            f"{f.events_per_s:.2f}",
            f"{f.cpu_s:.1f}",
            f"{f.events_per_cpu_s:.3f}",
            pct(f.store_busy),
            pct(f.store_task_busy),
            pct(f.idle_cpu_share),
            str(f.failed),
            sec(f.latency_p50_s),
            sec(f.latency_p95_s),
            sec(max(f.latency_s) if f.latency_s else None),
            sec(f.first_search_s),
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=300, help="events per configuration (default 300)")
    parser.add_argument(
        "--workers",
        type=int,
        nargs="*",
        default=[1, 2, 4],
        help="numbers of cpu worker processes to measure (default 1 2 4; none: embedded only)",
    )
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of the distributed rows, interleaved (default 3): the JSON's figures are "
        "their medians and the efficiency check the median of each round's ratio",
    )
    parser.add_argument(
        "--latency-samples",
        type=int,
        default=20,
        help="events published one at a time for the latency (default 20; 0: skip)",
    )
    parser.add_argument("--no-embedded", action="store_true", help="skip the embedded default")
    parser.add_argument(
        "--json", type=Path, default=None, help="write the figures as JSON to this file ('-': stdout, and no table)"
    )
    args = parser.parse_args(argv)
    if shutil.which("redis-server") is None:
        parser.error("redis-server not found (scripts/setup.sh installs it)")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    to_stdout = args.json is not None and str(args.json) == "-"
    say = Console(stderr=to_stdout, width=None if sys.stdout.isatty() else 180)
    load_before = load_average()
    say.print(f"load average before: {load_before}")
    figures = run(
        args.kinds,
        args.workers,
        args.events,
        args.latency_samples,
        not args.no_embedded,
        Console(stderr=True),
        args.rounds,
    )
    load_after = load_average()
    say.print(table(figures, args.events))
    for f in figures:
        if line := task_cpu_line(f):
            say.print(f"{f.kind}, {f.workers} worker(s), round {f.round}: {line}", highlight=False)
    for line in checks(figures):
        say.print(line, highlight=False)
    control = machine_contention() if args.workers else None  # no distributed rows: nothing to set it beside
    if control is not None:
        for kind in args.kinds:
            say.print(contention_line(control, figures, kind), highlight=False)
    say.print(f"load average after: {load_after}")
    if args.json is not None:
        data = {
            "distributed": rates(figures, args.kinds[0]),
            "by_kind": {k: rates(figures, k) for k in args.kinds},
            "efficiency_ratios": {
                k: {str(n): [round(r, 3) for r in rs] for n, rs in efficiency_ratios(figures, k).items()}
                for k in args.kinds
            },
            "latency": {
                f"{f.kind}/{f.mode}/{f.workers}": {"p50_s": f.latency_p50_s, "p95_s": f.latency_p95_s}
                for f in figures
                if f.latency_samples
            },
            "figures": [asdict(f) for f in figures],
            "contention": control,
            "load": {"before": load_before, "after": load_after},
        }
        text = json.dumps(data, indent=2) + "\n"
        if to_stdout:
            sys.stdout.write(text)
        else:
            args.json.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
