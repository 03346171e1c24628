"""LoCoMo evidence recall of engram's search against raw-turn baselines, at a budget of k turns.

For each LoCoMo conversation: the dialog turns (and image captions) are written as engram's JSONL
conversation record through the adapter, ingested through the real path (``api.embedded.ingest_paths`` with
consolidation, on the embedded default under a temporary ``ENGRAM_DATA_DIR`` or ``--data-dir``), and every
counted question (categories 1-4 with evidence, 1,536 over the 10 conversations) is searched with
``workers.memory.search.search`` as the conversation's user. Each hit expands into its ``message_ids`` in the
order given; recall@k keeps the first k distinct turns (``../shared/data/README.md``, "How the retrieval
figures are counted"). Baselines over the raw turns of the same conversation: BM25 (bm25s), dense MiniLM,
and their reciprocal rank fusion (k=60).

LongMemEval-S (``--longmemeval``): each question's haystack is ingested fresh as its own user (a new data
dir per question), the question is searched, and hits expand into their ``session_ids``; recall_any@k at a
budget of k sessions beside BM25, dense and RRF over the haystack's sessions as documents.

A protocol that cannot overfit (issue 45, ``docs/quality.md``): every figure is also reported on two halves,
side by side. *Chosen on* — LoCoMo conversations 0-4 (positions in the file) and the public LongMemEval questions
whose ``int(hashlib.md5(question_id.encode()).hexdigest(), 16) % 2 == 0`` — is where weights, thresholds and
switches may be tuned; *held out* — conversations 5 and up, the other questions — is where a change is judged.
The halves are computed from the same per-question results (no second ingest). JSON keys (``--json``):

- ``recall.<system>.overall.<k>`` / ``.by_category.<cat>.<k>`` (LongMemEval: ``.by_type.<type>.<k>``): all the
  questions run, as before;
- ``recall_halves.<system>.<half>.overall.<k>`` and ``.by_category.<cat>.<k>`` (LongMemEval ``.by_type``), with
  ``<half>`` ``chosen_on`` or ``held_out``; an empty half has ``{}`` for both;
- ``halves.<half>``: ``questions`` (0 for an empty half), ``category_counts`` (LongMemEval ``type_counts``) and,
  for LoCoMo, ``conversations`` (the sample ids in that half);
- ``lift_halves.<half>.<k>``: engram's recall minus RRF's on that half (absent for an empty half).

A LoCoMo-format file with five conversations or fewer (``--eval-data``) has an empty held-out half, printed as
such. The JSON also carries ``load``: ``os.getloadavg()`` when the run ended.

    python bench/retrieval.py [--conversations 0 1 ...] [--half chosen_on] [--ks 5 10 25] [--data-dir DIR] [--json F]
    python bench/retrieval.py --longmemeval [--questions N] [--half chosen_on] [--embedding-cache DIR] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.lib.embedded import quiet_logs  # noqa: E402
from bench.lib.locomo import CATEGORIES, HALVES, half_conversations, load_locomo, paired_comparison  # noqa: E402
from bench.lib.retrieval import LME_KS, evaluate, evaluate_longmemeval, print_halves  # noqa: E402


def print_longmemeval_report(result: dict, console: Console | None = None) -> None:
    """The LongMemEval table: systems × recall_any@k overall and per question type at the middle k."""
    console = console or Console()
    ks = result["ks"]
    kc = 5 if 5 in ks else ks[len(ks) // 2]
    table = Table(
        title=f"LongMemEval-S session recall_any at a budget of k sessions — {result['questions']} "
        "questions (no abstention)"
    )
    table.add_column("system")
    for k in ks:
        table.add_column(f"R@{k}", justify="right")
    types = list(result["type_counts"])
    for t in types:
        table.add_column(f"{t} @{kc}\n(n={result['type_counts'][t]})", justify="right")
    for s in result["systems"]:
        rec = result["recall"][s]
        table.add_row(s, *[f"{rec['overall'][k]:.3f}" for k in ks], *[f"{rec['by_type'][t][kc]:.3f}" for t in types])
    console.print(table)
    console.print(
        f"ingest: {result['ingest_seconds']:.1f} s total, median {result['ingest_seconds_median']:.1f} s "
        f"per question; search latency median {result['search_ms_median']:.1f} ms"
    )
    console.print(f"engram misses at R@{ks[0]}: {', '.join(result['misses_at_1']) or 'none'}")
    print_halves(result, "type", console=console)


def print_report(result: dict, console: Console | None = None) -> None:
    """The recall table (systems × recall@k overall and per category at @10), timings and diagnostics."""
    console = console or Console()
    ks = result["ks"]
    kc = 10 if 10 in ks else ks[len(ks) // 2]
    counts = result["category_counts"]
    table = Table(
        title=f"LoCoMo evidence recall at a budget of k turns — conversations "
        f"{', '.join(result['conversations'])}; {result['questions']} questions "
        "(categories 1-4)"
    )
    table.add_column("system")
    for k in ks:
        table.add_column(f"R@{k}", justify="right")
    cats = [c for c in CATEGORIES if counts.get(c)]
    for c in cats:
        table.add_column(f"{c} {CATEGORIES[c]} @{kc}\n(n={counts[c]})", justify="right")
    for s in result["systems"]:
        rec = result["recall"][s]
        table.add_row(s, *[f"{rec['overall'][k]:.3f}" for k in ks], *[f"{rec['by_category'][c][kc]:.3f}" for c in cats])
    console.print(table)
    print_halves(result, "category", CATEGORIES, console)
    per_conv = ", ".join(f"{sid} {s:.1f} s" for sid, s in result["ingest_seconds_by_conversation"].items())
    console.print(f"ingest: {result['ingest_seconds']:.1f} s total ({per_conv})")
    console.print(
        f"search latency: median {result['search_ms_median']:.1f} ms, "
        f"p95 {result['search_ms_p95']:.1f} ms over {result['questions']} searches"
    )
    if len(result["per_conversation"]) > 1:
        per = Table(title=f"per conversation, R@{kc}")
        per.add_column("conversation")
        for s in result["systems"]:
            per.add_column(s, justify="right")
        for sid, summ in result["per_conversation"].items():
            per.add_row(sid, *[f"{summ[s][kc]:.3f}" for s in result["systems"]])
        console.print(per)
    budget = "; ".join(f"{k} {v:.2f}" for k, v in result["engram_budget"].items())
    console.print(f"engram's turn budget: {budget}")


def compare_main(before: Path, after: Path, ks: Sequence[int], console: Console, out: Path | None = None) -> int:
    """``--compare``: engram's recall in two ``--rows`` files question by question
    (``bench.lib.locomo.paired_comparison``) at each k of ``ks`` present in the rows, a table per k with a row per half
    and group: before, after, the mean difference with its paired-bootstrap 95 % interval, questions better / worse.
    ``out``: also the figures as JSON."""
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    have = {int(k) for k in b[0]["recall"]["engram"]} if b else set()
    figures = {k: paired_comparison(a, b, "engram", k) for k in sorted(set(ks) & have)}
    for k, cmp in figures.items():
        table = Table(title=f"engram R@{k}: {after.name} against {before.name}, question by question")
        for col in ("half", "group", "n", "before", "after", "after − before", "95 % interval", "better / worse"):
            table.add_column(col, justify="left" if col in ("half", "group") else "right")
        for half, groups in cmp.items():
            for g, f in groups.items():
                label = f"{g} {CATEGORIES[int(g)]}" if g.isdigit() and int(g) in CATEGORIES else g
                table.add_row(
                    half.replace("_", " "),
                    label,
                    str(f["n"]),
                    f"{f['before']:.3f}",
                    f"{f['after']:.3f}",
                    f"{f['diff']:+.3f}",
                    f"[{f['ci95'][0]:+.3f}, {f['ci95'][1]:+.3f}]",
                    f"{f['better']} / {f['worse']}",
                )
        console.print(table)
    if out:
        out.write_text(json.dumps(figures, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--conversations", type=int, nargs="+", default=None, help="LoCoMo conversation positions 0-9 (default: all)"
    )
    ap.add_argument("--ks", type=int, nargs="+", default=[5, 10, 25], help="turn budgets")
    ap.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="engram data dir (ENGRAM_DATA_DIR) to ingest into and keep (default: a temporary one); "
        "LongMemEval: one sub-folder per question",
    )
    ap.add_argument(
        "--search-only",
        action="store_true",
        help="reuse what an earlier run ingested into --data-dir: only search (after a query change)",
    )
    ap.add_argument(
        "--ingest-only", action="store_true", help="LoCoMo: time the ingest through consolidation, no searches"
    )
    ap.add_argument(
        "--eval-data",
        type=Path,
        default=None,
        help="evaluation data folder (default: ENGRAM_EVAL_DATA or ../shared/data)",
    )
    ap.add_argument(
        "--embedding-cache",
        type=Path,
        default=None,
        help="folder of an embedding cache kept across runs (default: none, a cold cache)",
    )
    ap.add_argument(
        "--json",
        type=Path,
        default=None,
        help="also write the figures as JSON here (LongMemEval: rewritten after each question)",
    )
    ap.add_argument("--diagnose", action="store_true", help="extra engram rows: observations only, episodic only")
    ap.add_argument(
        "--longmemeval",
        action="store_true",
        help="LongMemEval-S session recall instead of LoCoMo (--ks default 1 5 10)",
    )
    ap.add_argument("--questions", type=int, default=None, help="LongMemEval: only the first N questions")
    ap.add_argument(
        "--rows", type=Path, default=None, help="also write each question's recall here (JSON), for --compare"
    )
    ap.add_argument(
        "--compare",
        type=Path,
        nargs=2,
        default=None,
        metavar=("BEFORE", "AFTER"),
        help="no run: compare two --rows files question by question (paired bootstrap), per half",
    )
    ap.add_argument(
        "--half",
        choices=HALVES,
        default=None,
        help="run one half only: chosen_on (tune here: LoCoMo conversations 0-4, LongMemEval questions "
        "of even md5) or held_out (judge here); with --conversations, those of the half",
    )
    args = ap.parse_args(argv)
    quiet_logs()
    console = Console(width=None if sys.stdout.isatty() else 170)
    variants = {"engram obs-only": ["observation"], "engram episodic-only": ["episodic"]} if args.diagnose else None
    if args.compare:
        return compare_main(args.compare[0], args.compare[1], args.ks, console, args.json)
    try:
        if args.longmemeval:
            result = evaluate_longmemeval(
                args.questions,
                LME_KS if args.ks == [5, 10, 25] else args.ks,
                args.eval_data,
                embedding_cache=args.embedding_cache,
                data_dir=args.data_dir,
                search_only=args.search_only,
                checkpoint=args.json,
                half=args.half,
            )
        else:
            picked = half_conversations(len(load_locomo(args.eval_data)), args.half, args.conversations)
            result = evaluate(
                picked,
                args.ks,
                args.data_dir,
                args.eval_data,
                variants=variants,
                embedding_cache=args.embedding_cache,
                search_only=args.search_only,
                ingest_only=args.ingest_only,
            )
    except FileNotFoundError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    rows = result.pop("rows", [])
    if args.rows:
        args.rows.write_text(json.dumps(rows))
    if args.json:  # written before the tables, so a figure is kept whatever the printing does
        result["load"] = list(os.getloadavg())
        args.json.write_text(json.dumps(result, indent=2))
    if args.ingest_only and not args.longmemeval:
        by_conv = result["ingest_seconds_by_conversation"]
        console.print(
            f"ingest through consolidation: {len(by_conv)} conversations in {result['ingest_seconds']:.1f} s "
            f"(median {statistics.median(by_conv.values()):.1f} s per conversation)"
        )
    else:
        (print_longmemeval_report if args.longmemeval else print_report)(result, console)
    if args.json:
        console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
