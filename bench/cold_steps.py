"""Where a cold ``engram search`` spends its time: the steps of one search timed one by one in a new process
(wall and CPU seconds each), and the whole ``engram search`` command in new processes (wall and CPU seconds).

Usage: ``python bench/cold_steps.py --data-dir DIR --user USER "question" [--runs 5] [--json FILE]``
(``DIR``: a data dir that holds a store, e.g. made by ``bench/retrieval.py --ingest-only --data-dir DIR``;
LoCoMo's users are ``locomo-<n>``). Prints one line per step (medians over ``--runs`` new processes) with
``/proc/loadavg`` before and after, and the command's wall and CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: The steps, in the order a search runs them, each timed in the child (``_child``).
STEPS = [
    "import engram.api.cli.main",
    "import search path",
    "runtime()",
    "open shards",
    "entity names",
    "time expressions",
    "query tokens",
    "query embedding",
    "search (warm)",
    "search (cold, whole)",
]


def _timed(out: dict, name: str, fn):
    w0, c0 = time.perf_counter(), time.process_time()
    value = fn()
    out[name] = (time.perf_counter() - w0, time.process_time() - c0)
    return value


def _child(question: str, user: str) -> dict:
    """The steps of one search in this (new) process: {step: (wall s, CPU s)}."""
    import importlib

    out: dict = {}
    w0, c0 = time.perf_counter(), time.process_time()
    _timed(out, STEPS[0], lambda: importlib.import_module("engram.api.cli.main"))
    search_mod = _timed(out, STEPS[1], lambda: importlib.import_module("engram.workers.memory.search"))
    from engram.schemas.search import DEFAULT_SEARCH_TYPES, SearchRequest
    from engram.schemas.settings import get_settings
    from engram.workers.runtime import runtime
    from engram.workers.stores.vectors import collection_for

    rt = _timed(out, STEPS[2], runtime)
    req = SearchRequest(
        query=question,
        tenant_id=get_settings().tenant,
        user_id=user,
        memory_types=list(DEFAULT_SEARCH_TYPES),
        limit=5,
        reinforce=False,
    )

    def open_shards():
        for mtype in req.memory_types:
            if rt.vectors.has_collection(collection_for(mtype)):
                rt.vectors.ensure(collection_for(mtype))

    _timed(out, STEPS[3], open_shards)
    _timed(out, STEPS[4], lambda: search_mod.named_entities(rt, req.tenant_id, req.query))
    _timed(out, STEPS[5], lambda: search_mod.resolve(req.query, None, None))
    _timed(out, STEPS[6], lambda: search_mod.sparse.query_vector(req.query))
    _timed(out, STEPS[7], lambda: search_mod.embed_query(rt, req.query))
    _timed(out, STEPS[8], lambda: search_mod.search(rt, req))
    out[STEPS[9]] = (time.perf_counter() - w0, time.process_time() - c0)
    return out


def _load() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("question")
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--tenant", default=None, help="ENGRAM_TENANT (default: the environment's)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.question, args.user)))
        return 0
    env = {**os.environ, "ENGRAM_DATA_DIR": str(args.data_dir)}
    if args.tenant:
        env["ENGRAM_TENANT"] = args.tenant
    env.setdefault("ENGRAM_VAULT_KEY", "bench-only-vault-key-not-secret-0000000000=")
    load_before = _load()
    steps: dict[str, list] = {s: [] for s in STEPS}
    cli: dict[str, list] = {"wall_s": [], "cpu_s": []}
    engram = Path(sys.executable).with_name("engram")
    for _ in range(args.runs):
        got = json.loads(
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    args.question,
                    "--data-dir",
                    str(args.data_dir),
                    "--user",
                    args.user,
                ],
                env=env,
                check=True,
                capture_output=True,
                text=True,
                timeout=600,
            ).stdout.splitlines()[-1]
        )
        for s in STEPS:
            steps[s].append(got[s])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(
            [str(engram), "search", args.question, "--user", args.user, "-k", "5"],
            env=env,
            check=True,
            capture_output=True,
            timeout=600,
        )
        cli["wall_s"].append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cli["cpu_s"].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    load_after = _load()
    print(f"load {load_before} -> {load_after}; medians of {args.runs} new processes")
    print(f"{'step':<24} {'wall s':>8} {'CPU s':>8}")
    for s in STEPS:
        wall, cpu = statistics.median(w for w, _ in steps[s]), statistics.median(c for _, c in steps[s])
        print(f"{s:<24} {wall:8.3f} {cpu:8.3f}")
    print(
        f"{'engram search (CLI)':<24} {statistics.median(cli['wall_s']):8.3f} {statistics.median(cli['cpu_s']):8.3f}"
        f"   runs: {' '.join(f'{w:.2f}' for w in cli['wall_s'])}"
    )
    if args.json:
        args.json.write_text(json.dumps({"load": [load_before, load_after], "steps": steps, "cli": cli}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
