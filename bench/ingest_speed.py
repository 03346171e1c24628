"""Warm ingest time of LongMemEval-S haystacks: seconds per question through the real path, no searches.

Each of the first N LongMemEval-S questions' haystack (~40-50 sessions, ~500 turns) is written as engram's
JSONL conversation record and ingested through ``api.embedded.ingest_paths(..., consolidate=True)`` into a fresh
data dir as its own user, exactly as ``bench/retrieval.py --longmemeval`` does, with the embedding cache
shared across questions and runs (``--embedding-cache``). Prints each question's seconds and stored counts
per collection, then the median. With ``--passes 2`` the first pass warms the cache and only the last pass
is reported. ``--profile FILE`` writes cProfile statistics of the reported pass (``python -m pstats FILE``).

The data dirs share one vault key (``ENGRAM_VAULT_KEY`` or ``bench.lib.embedded.BENCH_VAULT_KEY``), so the vault
placeholders in turns that hold a secret are the same on every run and hit the warm cache.

    python bench/ingest_speed.py --questions 10 --embedding-cache /tmp/emb [--passes 2]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.lib.embedded import quiet_logs  # noqa: E402


def ingest_seconds(limit: int, embedding_cache: Path, eval_data: Path | None = None,
                   profile: cProfile.Profile | None = None) -> list[tuple[str, float, dict[str, int]]]:
    """(question id, warm ingest seconds, points per collection) for each of the first ``limit`` questions.
    ``profile``: enabled around each ingest only. Raises FileNotFoundError without the LongMemEval data and
    RuntimeError when an ingest fails."""
    from bench.lib.embedded import TENANT, check_ingest, embedded_data_dir, share_embedding_cache
    from bench.lib.longmemeval import load_longmemeval
    from engram.api.cli.main import ingest_paths
    from engram.workers.media.conversations import longmemeval_messages, to_jsonl
    from engram.workers.runtime import runtime

    out = []
    for q in load_longmemeval(eval_data)[:limit]:
        with tempfile.TemporaryDirectory(prefix="engram-ingest-speed-") as tmp:
            store_dir = Path(tmp) / "data"
            share_embedding_cache(store_dir, embedding_cache)
            path = Path(tmp) / f"{q.question_id}.jsonl"
            path.write_bytes(to_jsonl(longmemeval_messages(q.item)))
            with embedded_data_dir(store_dir):
                if profile is not None:
                    profile.enable()
                t0 = time.perf_counter()
                done = ingest_paths([path], tenant=TENANT, user=q.question_id, device="bench", consolidate=True,
                                    quiet=True)
                took = time.perf_counter() - t0
                if profile is not None:
                    profile.disable()
                check_ingest(q.question_id, done)
                vectors = runtime().vectors
                counts = {c: vectors.count(c) for c in vectors.collections()}
        out.append((q.question_id, took, dict(sorted(counts.items()))))
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=10, help="the first N LongMemEval-S questions (default 10)")
    ap.add_argument("--embedding-cache", type=Path, required=True,
                    help="folder of the embedding cache kept across runs (warm it with --passes 2 or a bench run)")
    ap.add_argument("--passes", type=int, default=1, help="ingest the questions this many times; report the last")
    ap.add_argument("--profile", type=Path, default=None, help="write cProfile statistics of the last pass here")
    ap.add_argument("--eval-data", type=Path, default=None,
                    help="evaluation data folder (default: ENGRAM_EVAL_DATA or ../shared/data)")
    args = ap.parse_args(argv)
    quiet_logs()
    rows: list[tuple[str, float, dict[str, int]]] = []
    for n in range(max(1, args.passes)):
        last = n == max(1, args.passes) - 1
        prof = cProfile.Profile() if args.profile and last else None
        rows = ingest_seconds(args.questions, args.embedding_cache, args.eval_data, prof)
        if prof is not None:
            prof.dump_stats(args.profile)
    for qid, took, counts in rows:
        print(f"{qid}  {took:6.2f} s  " + " ".join(f"{k}={v}" for k, v in counts.items()))
    secs = [t for _, t, _ in rows]
    print(f"median warm ingest {statistics.median(secs):.2f} s per question over {len(secs)} questions "
          f"(total {sum(secs):.1f} s; load {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
