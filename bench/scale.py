"""Search as the store grows: engram's own ``workers.memory.search.search`` on stores of 10 k, 100 k (and 1 M)
observations, beside an exact numpy scan of the queried user's rows, in one run.

Stores are built from real ingested points: a seed data dir holding LoCoMo conversations ingested through the
real path (``--seed-dir``; made by ``bench/retrieval.py --ingest-only --data-dir DIR`` or by this script with
``--seed-conversations``). The queried user (conversation ``--conversation``'s, tenant ``bench``) keeps its
real rows at every size; the rest are copies of the seed conversations (observations and the memories built
from them, ids and provenance remapped) spread over 99 more users in 10 tenants until the store holds N
observations.

Each size is measured in a fresh process: open time and memory after open (RSS; peak RSS over open and
queries), then for ``--questions`` of that conversation's LoCoMo questions the real ``search`` (query text to
hits, the query embedding uncached, reinforcement off; wall and CPU ms), and the same fusion computed exactly in
numpy over the user's rows (dense cosine / MaxSim, BM25 with IDF over the user's rows, weighted RRF per
collection): its time, and the overlap of each collection's fused top 10 with the engine's. Then the wall time
of a cold ``engram search`` in a new process on the largest store (``bench/lib/cold.py``).

    python bench/scale.py --seed-dir DIR [--sizes 10000 100000] [--json scale.json]
    python bench/scale.py --seed-dir DIR --cold-only --cold-steps [--question "..."] [--json FILE]

Prints a table; ``--json FILE`` writes ``{"sizes": {"<N>": {"p50_ms", "p95_ms", "overlap", "build_s",
"disk_bytes", "rss_bytes", "open_s", "numpy_p50_ms", ...}}, "growth_per_10x", "cli_search_s", "load"}``
(``cli_search_s``: the median wall time of ``--cli-runs`` cold searches of ``cli_search_question``, beside
``cli_search_cpu_s``).

Where a cold search spends its time: ``--cold-steps`` precedes each cold ``engram search`` by a new process that
times the steps of one search (``bench.lib.cold.STEPS``: the imports, the runtime, opening the shards, entity
names, time expressions, the query's tokens and embedding, the search), printed as medians (wall and CPU s) and
written under ``cli_search_steps`` ({step: [[wall s, CPU s], ...]}). ``--cold-only`` builds no store and measures
only the cold search, on ``--seed-dir`` as it is (e.g. a data dir made by ``bench/retrieval.py --ingest-only
--data-dir DIR``, or a store an earlier run built: ``WORK/store-<N>``). The question is ``--question`` or the
conversation's first. Not a test: figures depend on the machine and its load (printed with them).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench  # noqa: E402,F401  (the offline model environment)
from bench.lib.cold import cold_search  # noqa: E402
from bench.lib.embedded import BENCH_VAULT_KEY, TENANT  # noqa: E402
from bench.lib.locomo import load_locomo, sample_questions  # noqa: E402
from bench.lib.seed import build, seed_points  # noqa: E402

# --- measuring (in a fresh process per store) -----------------------------------------------------------------


def _user_rows(store, tenant: str, user: str) -> dict[str, dict]:
    """The user's rows per collection as numpy: ids, dense rows (a MaxSim collection: all rows and the point of
    each), sparse vectors."""
    import numpy as np

    from engram.workers.stores.vectors import (
        COLLECTIONS,
        DENSE,
        DENSE_SEARCH_MULTIVECTOR,
        ENTITIES,
        SPARSE,
        tenant_filter,
    )

    out = {}
    for coll in COLLECTIONS:
        if coll == ENTITIES or not store.has_collection(coll):
            continue
        recs = store.scroll(coll, tenant_filter(tenant, user), with_vectors=True, with_payload=False)
        if not recs:
            continue
        multi = DENSE_SEARCH_MULTIVECTOR.get(coll)
        rows, owner = [], []
        for i, r in enumerate(recs):
            vecs = (r.vector or {}).get(multi) if multi else [(r.vector or {}).get(DENSE)]
            for v in vecs or []:
                if v is not None:
                    rows.append(v)
                    owner.append(i)
        sparse = [(r.vector or {}).get(SPARSE) for r in recs]
        out[coll] = {
            "ids": [str(r.id) for r in recs],
            "dense": np.asarray(rows, dtype=np.float32),
            "owner": np.asarray(owner),
            "sparse": sparse,
        }
    return out


def _numpy_fused(rows: dict, dense, sparse_q, depth: int, rrf_k: int, weights: tuple[float, float]) -> list[str]:
    """The exact per-collection fusion in numpy: dense (best row per point) and BM25 (Qdrant's IDF over these
    rows: ln(1 + (N - n + 0.5) / (n + 0.5))) rankings of ``depth``, fused by weighted RRF; the fused ids."""
    import numpy as np

    n = len(rows["ids"])
    best = np.full(n, -np.inf, dtype=np.float32)
    np.maximum.at(best, rows["owner"], rows["dense"] @ dense)
    dense_rank = np.argsort(-best, kind="stable")[:depth]
    ranked = [[rows["ids"][i] for i in dense_rank]]
    if sparse_q[0]:
        q = dict(zip(*sparse_q, strict=True))
        df: dict[int, int] = defaultdict(int)
        for sv in rows["sparse"]:
            if sv is not None:
                for t in sv.indices:
                    if t in q:
                        df[t] += 1
        idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
        scores = np.zeros(n)
        for i, sv in enumerate(rows["sparse"]):
            if sv is not None:
                scores[i] = sum(idf[t] * q[t] * v for t, v in zip(sv.indices, sv.values, strict=True) if t in idf)
        hit = np.flatnonzero(scores > 0)
        ranked.append([rows["ids"][i] for i in hit[np.argsort(-scores[hit], kind="stable")][:depth]])
    fused: dict[str, float] = defaultdict(float)
    for w, ranking in zip(weights, ranked, strict=False):
        for r, pid in enumerate(ranking):
            fused[pid] += w / (rrf_k + r + 1)
    return sorted(fused, key=lambda p: -fused[p])


def _peak_rss() -> int:
    """This process's peak resident set size in bytes (``VmHWM``; getrusage's ``ru_maxrss`` would count the
    parent's as the child starts with a fork of it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(data_dir: Path, user: str, questions: list[str]) -> dict:
    """Open the store under ``data_dir`` in this process and time ``search`` and the numpy scan (module
    docstring). Returns the figures of one size."""
    import numpy as np
    import psutil

    os.environ.update(
        ENGRAM_DATA_DIR=str(data_dir), ENGRAM_VAULT_KEY=os.environ.get("ENGRAM_VAULT_KEY", BENCH_VAULT_KEY)
    )
    from engram.schemas.search import SearchRequest
    from engram.workers.memory.embedding import embed_query, embed_texts
    from engram.workers.memory.search import DENSE_WEIGHT, MIN_DEPTH, search
    from engram.workers.runtime import runtime
    from engram.workers.stores.vectors import COLLECTIONS, ENTITIES, tenant_filter
    from engram.workers.text import sparse

    proc = psutil.Process()
    rt = runtime()
    embed_texts(rt, ["warm the model up"])  # the model's load is not a search's
    t0 = time.perf_counter()
    store = rt.vectors
    for coll in COLLECTIONS:
        store.count(coll)
    open_s = time.perf_counter() - t0
    rss_open = proc.memory_info().rss
    rows = _user_rows(store, TENANT, user)
    wall, cpu, scan, overlap = [], [], [], []
    depth = max(MIN_DEPTH, 10 * 5)
    for q in questions:
        c0, w0 = time.process_time(), time.perf_counter()
        search(rt, SearchRequest(query=q, tenant_id=TENANT, user_id=user, limit=10, reinforce=False))
        wall.append((time.perf_counter() - w0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        dense = np.asarray(embed_query(rt, q), dtype=np.float32)  # the whole query (search embeds it without names)
        sparse_q = sparse.query_vector(q)
        w0 = time.perf_counter()
        exact = {
            c: _numpy_fused(r, dense, sparse_q, depth, rt.settings.rrf_k, (DENSE_WEIGHT, 1.0))[:10]
            for c, r in rows.items()
        }
        scan.append((time.perf_counter() - w0) * 1000)
        for coll, want in exact.items():
            if len(want) < 10 or coll == ENTITIES:
                continue
            d, s = store.search(
                coll,
                dense.tolist(),
                sparse_q,
                tenant_filter(TENANT, user),
                depth,
                idf_corpus=tenant_filter(TENANT, user),
                with_payload=False,
            )
            fused: dict[str, float] = defaultdict(float)
            for w, ranking in ((DENSE_WEIGHT, d), (1.0, s)):
                for r, p in enumerate(ranking):
                    fused[str(p.id)] += w / (rt.settings.rrf_k + r + 1)
            got = sorted(fused, key=lambda p: -fused[p])[:10]
            overlap.append(len(set(got) & set(want)) / 10)
    return {
        "p50_ms": statistics.median(wall),
        "p95_ms": float(np.percentile(wall, 95)),
        "cpu_p50_ms": statistics.median(cpu),
        "numpy_p50_ms": statistics.median(scan),
        "overlap": statistics.mean(overlap) if overlap else None,
        "open_s": open_s,
        "rss_open_bytes": rss_open,
        "rss_bytes": max(rss_open, proc.memory_info().rss, _peak_rss()),
        "questions": len(questions),
        "user_rows": {c: len(r["ids"]) for c, r in rows.items()},
    }


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--seed-dir",
        type=Path,
        required=True,
        help="a data dir holding ingested LoCoMo conversations (made with --seed-conversations if empty)",
    )
    ap.add_argument(
        "--seed-conversations",
        type=int,
        nargs="+",
        default=[0, 1, 2],
        help="LoCoMo conversations to ingest into an empty --seed-dir (default 0 1 2)",
    )
    ap.add_argument("--conversation", type=int, default=0, help="the queried user's conversation (default 0)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="observations per store")
    ap.add_argument("--questions", type=int, default=40, help="questions timed per size (default 40)")
    ap.add_argument("--work-dir", type=Path, default=None, help="where the stores are built (default: a temp dir)")
    ap.add_argument("--embedding-cache", type=Path, default=None, help="kept embedding cache for the seed ingest")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--cli-runs", type=int, default=5, help="cold `engram search` runs (the median is reported)")
    ap.add_argument("--cold-steps", action="store_true", help="also time each step of the cold search (new processes)")
    ap.add_argument("--cold-only", action="store_true", help="only the cold search, on --seed-dir: no store built")
    ap.add_argument("--question", default=None, help="the cold search's question (default: the conversation's first)")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="measure the stores an earlier run built in --work-dir instead of building them again",
    )
    ap.add_argument("--measure", type=Path, default=None, help=argparse.SUPPRESS)  # internal: one size
    ap.add_argument("--user", default=None, help=argparse.SUPPRESS)
    return ap


def _measure_size(args, seed: dict, user: str, n: int, work: Path) -> dict:
    """Build (or with ``--reuse`` reuse) the store of ``n`` observations under ``work`` and measure it in a
    fresh process (``--measure``): the figures of one size."""
    data_dir = work / f"store-{n}"
    record = data_dir / "build.json"
    if args.reuse and record.is_file():
        built = json.loads(record.read_text())
        print(f"reusing the store of {n:,} observations in {data_dir}", file=sys.stderr)
    else:
        if data_dir.exists():
            import shutil  # only when a store is built again

            shutil.rmtree(data_dir)
        print(f"building {n:,} observations ...", file=sys.stderr)
        built = build(seed, user, n, data_dir)
        record.write_text(json.dumps(built))
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--seed-dir",
            str(args.seed_dir),
            "--measure",
            str(data_dir),
            "--user",
            user,
            "--conversation",
            str(args.conversation),
            "--questions",
            str(args.questions),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise SystemExit(f"measuring {n}: {out.stderr[-3000:]}")
    figures = {**built, **json.loads(out.stdout.strip().splitlines()[-1])}
    print(
        f"{n:>9,}  p50 {figures['p50_ms']:.1f} ms  p95 {figures['p95_ms']:.1f} ms  numpy p50 "
        f"{figures['numpy_p50_ms']:.1f} ms  overlap {figures['overlap']:.3f}  build {built['build_s']:.0f} s "
        f"+ optimize {built['optimize_s']:.0f} s  "
        f"disk {built['disk_bytes'] / 1e6:.0f} MB  rss {figures['rss_bytes'] / 1e6:.0f} MB  open "
        f"{figures['open_s']:.2f} s",
        file=sys.stderr,
    )
    return figures


def _grow(args, user: str) -> tuple[dict, Path]:
    """The sizes' figures (``{"sizes": {...}, "growth_per_10x"}``) and the largest store's data dir."""
    seed = seed_points(args.seed_dir)
    if user not in seed:
        raise SystemExit(f"{args.seed_dir} holds no points of {user} (conversation {args.conversation})")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="engram-scale-"))
    result: dict = {"sizes": {str(n): _measure_size(args, seed, user, n, work) for n in sorted(args.sizes)}}
    sizes = sorted(args.sizes)
    if len(sizes) > 1:
        first, last = result["sizes"][str(sizes[0])], result["sizes"][str(sizes[-1])]
        result["growth_per_10x"] = (last["p50_ms"] / first["p50_ms"]) ** (1 / math.log10(sizes[-1] / sizes[0]))
    return result, work / f"store-{sizes[-1]}"


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    args = _parser().parse_args(argv)
    from engram.workers.media.conversations import locomo_sample_id  # after the arguments: --help stays quick

    sample = load_locomo()[args.conversation]
    user = f"locomo-{locomo_sample_id(sample, args.conversation)}"
    questions = [q.question for q in sample_questions(sample, args.conversation)][: args.questions]
    if args.measure:
        print(json.dumps(measure(args.measure, args.user or user, questions)))
        return 0
    if not (args.seed_dir / "vectors").is_dir():
        from bench.lib.retrieval import evaluate  # only when the seed must be ingested

        print(f"ingesting LoCoMo conversations {args.seed_conversations} into {args.seed_dir} ...", file=sys.stderr)
        evaluate(
            args.seed_conversations, data_dir=args.seed_dir, ingest_only=True, embedding_cache=args.embedding_cache
        )
    load = list(os.getloadavg())
    if args.cold_only:
        result, store = {"store": str(args.seed_dir)}, args.seed_dir
    else:
        result, store = _grow(args, user)
    result["load"] = load
    question = args.question or questions[0]
    cold = cold_search(store, TENANT, user, question, args.cli_runs, steps=args.cold_steps)
    steps = cold.pop("steps", None)
    result.update(
        cli_search_s=statistics.median(cold["wall_s"]),
        cli_search_cpu_s=statistics.median(cold["cpu_s"]),
        cli_search_runs=cold,
        cli_search_question=question,
    )
    if steps:
        result["cli_search_steps"] = steps
    result["load_after"] = list(os.getloadavg())
    _print(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


def _print(result: dict) -> None:
    """The sizes' table (none with ``--cold-only``), the growth, the cold search and with ``--cold-steps`` its
    steps (medians), on stderr."""
    if "sizes" in result:
        _print_sizes(result)
    print(
        f"cold `engram search` (median of {len(result['cli_search_runs']['wall_s'])}): "
        f"{result['cli_search_s']:.2f} s wall, {result['cli_search_cpu_s']:.2f} CPU s"
        f" (load {result['load'][0]:.1f} before, {result['load_after'][0]:.1f} after)",
        file=sys.stderr,
    )
    if "cli_search_steps" in result:
        print(f"{'step':<27} {'wall s':>8} {'CPU s':>8}   (medians of new processes)", file=sys.stderr)
        for step, runs in result["cli_search_steps"].items():
            wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
            print(f"{step:<27} {wall:8.3f} {cpu:8.3f}", file=sys.stderr)


def _print_sizes(result: dict) -> None:
    from rich.console import Console  # only where a table is printed
    from rich.table import Table  # as above

    table = Table(
        title=f"search as the store grows (load {result['load'][0]:.1f} before, {result['load_after'][0]:.1f} after)"
    )
    for col in (
        "observations",
        "points",
        "p50 ms",
        "p95 ms",
        "CPU p50 ms",
        "numpy p50 ms",
        "ratio",
        "top-10 overlap",
        "build s",
        "optimize s",
        "disk MB",
        "RSS MB",
        "open s",
    ):
        table.add_column(col, justify="right")
    for n, f in sorted(result["sizes"].items(), key=lambda kv: int(kv[0])):
        table.add_row(
            f"{int(n):,}",
            f"{sum(f['points'].values()):,}",
            f"{f['p50_ms']:.1f}",
            f"{f['p95_ms']:.1f}",
            f"{f['cpu_p50_ms']:.1f}",
            f"{f['numpy_p50_ms']:.1f}",
            f"{f['p50_ms'] / f['numpy_p50_ms']:.1f}",
            f"{f['overlap']:.3f}",
            f"{f['build_s']:.0f}",
            f"{f.get('optimize_s', 0):.0f}",
            f"{f['disk_bytes'] / 1e6:.0f}",
            f"{f['rss_bytes'] / 1e6:.0f}",
            f"{f['open_s']:.2f}",
        )
    Console(stderr=True, width=200).print(table)
    if "growth_per_10x" in result:
        print(f"growth per 10x: {result['growth_per_10x']:.2f}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
