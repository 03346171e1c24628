"""Ingest throughput, side by side in one run: the embedder's own ceiling and the pipeline's pace (issue 15).

Section ``text`` (LoCoMo conversations through the LoCoMo adapter, as ``bench/retrieval.py`` writes them):

- **ceiling**: messages ÷ the seconds the embedding model alone (the runtime the pipeline uses, loaded and
  warmed up first, no cache) takes to encode one text per message (the message's indexed text,
  ``ConversationMessage.display_text``), in batches of the configured ``embedding_batch_size``;
- **cold**: messages ÷ the seconds ``api.embedded.ingest_paths`` (the embedded default, consolidation included)
  takes on a fresh data dir with a fresh embedding cache, made by the bench; in-process after imports, the
  model already loaded (as a worker runs);
- **warm**: the same ingest into another fresh data dir whose embedding cache is the cold run's;
- apart, not in the figures above: the process's first ingest (imports; 8 messages into a throwaway data dir)
  and each fresh data dir's store setup (Qdrant Edge collections and payload indexes, made before timing);
- ``--rounds`` rounds (default 5), each timing the ceiling, then cold, then the ceiling again, then warm, side by
  side: a round's ceiling is the mean of the two timings around its cold run (``ceiling_s_around``: before,
  after), so a machine that speeds up or slows down during the round (other jobs, clocks) moves the ceiling
  with the cold run instead of biasing their ratio; the figures are the medians over the rounds, ``cold_ratio``
  the median of each round's cold ÷ ceiling, ``cold_ratio_cpu`` the same in CPU seconds of this process
  (steadier when other jobs load the machine); ``rounds`` lists each round's figures. Before each cold
  run the process's text memos are cleared (``workers.memory.embedding.clear_text_memos``: sentence splits,
  secret findings, BM25 tokens), so every round is as cold as the first;
- ``cold_task_cpu_s``: the cold run's CPU seconds by task (medians over the rounds; ``task_cpu_seconds``), where the
  time beside the model goes: ``embed_many`` holds the model's calls (compare the ceiling's CPU seconds), then
  ``store_many``, ``consolidate_user``, ``perceive``, ``ingest``; what no task counts is ``ingest_paths``' own;
- ``encodes_per_msg`` = texts the cold run encoded (rows of its embedding cache: every encoded text is written
  there once) ÷ messages.

    python bench/ingest.py [--sections text screenshot audio distributed longmemeval] [--conversations 0 1]
                           [--limit N] [--rounds N] [--json FILE]

Section ``distributed``: events/s, events per CPU-second and the store worker's busy share with 1, 2 and 4 cpu
workers, medians of ``--distributed-rounds`` (default 3) interleaved rounds (``bench/distributed.py``, which also
prints publish→searchable and checks the targets).

Sections ``screenshot`` and ``audio``: CPU seconds per kept screenshot frame with OCR word recall, and audio ×
real time with WER and speaker F1, each measured by ``bench/perception_speed.py`` in a process of its own (its
own data dir and model settings; ``--long-seconds`` and ``--audio-runs`` passed on), its rows printed as they
come. ``--sections text screenshot audio distributed`` gives every figure of issue 15 in one run.

Section ``longmemeval`` (was ``bench/ingest_speed.py``): warm ingest seconds of LongMemEval-S haystacks, no
searches. Each of the first ``--questions`` (default 10) haystacks (~40-50 sessions, ~500 turns) is written as
engram's JSONL conversation record and ingested through ``api.embedded.ingest_paths(..., consolidate=True)`` into a
fresh data dir as its own user, exactly as ``bench/retrieval.py --longmemeval`` does, with the embedding cache
shared across questions and runs (``--embedding-cache``, needed by this section). Prints each question's seconds and
stored counts per collection, then the median. With ``--passes 2`` the first pass warms the cache and only the last
pass is reported. ``--profile FILE`` writes cProfile statistics of the reported pass (``python -m pstats FILE``).
The data dirs share one vault key (``ENGRAM_VAULT_KEY`` or ``bench.lib.embedded.BENCH_VAULT_KEY``), so the vault
placeholders in turns that hold a secret are the same on every run and hit the warm cache.

    python bench/ingest.py --sections longmemeval --questions 10 --embedding-cache /tmp/emb [--passes 2]

``--json FILE`` merges ``{"<section>": {...}, "load": <1-minute load average>}`` for the sections run into FILE's
JSON object (created when absent), keeping the sections other runs wrote. A section is a function
``name(args) -> dict`` in ``SECTIONS``; add one there and it is one of ``--sections``' choices.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.lib.embedded import merge_json, quiet_logs  # noqa: E402


def _cache_rows(data_dir: Path) -> int:
    """Texts encoded into the data dir's embedding cache (``cache/embeddings.sqlite``): its rows of plain
    embeddings (a model name without ``#``; the late-chunked sentence rows of a turn come from its own pass)."""
    path = data_dir / "cache" / "embeddings.sqlite"
    if not path.exists():
        return 0
    with closing(sqlite3.connect(path)) as db:
        return int(db.execute("SELECT count(*) FROM emb WHERE model NOT LIKE '%#%'").fetchone()[0])


def task_cpu_seconds() -> dict[str, float]:
    """CPU seconds by task this process has counted so far (``engram_task_cpu_seconds_total``, read from its own
    Prometheus registry): {task's short name: seconds}. On the embedded default each stage's task (``ingest``,
    ``perceive``, ``embed_many``, ``store_many``, ``consolidate_user``) is applied by the ingest itself, so each
    counts as an outermost task and the family sums without double counting (``workers.metrics.TaskCpuClock``)."""
    from prometheus_client import REGISTRY

    return {
        sample.labels["task"].rsplit(".", 1)[-1]: sample.value
        for family in REGISTRY.collect()
        if family.name == "engram_task_cpu_seconds"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def _ingest_seconds(
    files: list[Path], data_dir: Path, cache_of: Path | None = None
) -> tuple[float, float, float, dict[str, float]]:
    """Wall and CPU seconds (this process, all its threads) ``ingest_paths`` takes on ``files`` (each its own
    user, consolidation included) into the fresh ``data_dir``, and apart from them the wall seconds of the
    store's setup before (opening the fresh Qdrant Edge store and creating its collections and payload
    indexes, once per data dir), then those CPU seconds by task (``task_cpu_seconds``; a task that did not run is
    left out). ``cache_of``: a data dir whose embedding cache is shared (warm), else a fresh cache (cold). Raises
    RuntimeError when a file fails."""
    from bench.lib.embedded import TENANT, check_ingest, embedded_data_dir, share_embedding_cache
    from engram.api.cli.main import ingest_paths
    from engram.workers.runtime import runtime
    from engram.workers.stores.vectors import COLLECTIONS

    if cache_of is not None:
        share_embedding_cache(data_dir, cache_of / "cache")
    with embedded_data_dir(data_dir):
        t0 = time.perf_counter()
        for collection in COLLECTIONS:
            runtime().vectors.ensure(collection)
        setup = time.perf_counter() - t0
        tasks0 = task_cpu_seconds()
        t0, c0 = time.perf_counter(), time.process_time()
        for path in files:
            out = ingest_paths(
                [path], tenant=TENANT, user=f"locomo-{path.stem}", device="bench", consolidate=True, quiet=True
            )
            check_ingest(path.stem, out)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        by_task = {t: v - tasks0.get(t, 0.0) for t, v in task_cpu_seconds().items()}
        return wall, cpu, setup, {t: v for t, v in by_task.items() if v > 0}


def _encode_seconds(model, texts: list[str], batch_size: int) -> tuple[float, float]:
    """Wall and CPU seconds the model alone takes to encode ``texts``."""
    t0, c0 = time.perf_counter(), time.process_time()
    model.embed(texts, batch_size)
    return time.perf_counter() - t0, time.process_time() - c0


def text(args: argparse.Namespace) -> dict:
    """The text section: ceiling, cold and warm messages/s, their ratio and encodes per message, medians of
    ``args.rounds`` rounds (see the module's docstring). Raises FileNotFoundError without the LoCoMo data."""
    from bench.lib.locomo import load_locomo, sample_turns
    from engram.schemas.settings import get_settings
    from engram.workers.media.conversations import to_jsonl
    from engram.workers.memory.embedding import clear_text_memos
    from engram.workers.models import get_model

    samples = load_locomo(args.eval_data)
    rounds: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="engram-bench-ingest-") as tmp:
        tmp_path = Path(tmp)
        files, texts = [], []
        for ci in args.conversations:
            sample = samples[ci]
            msgs = sample_turns(sample)[: args.limit]
            texts += [m.display_text() for m in msgs]
            path = tmp_path / f"{sample.get('sample_id', ci)}.jsonl"
            path.write_bytes(to_jsonl(msgs))
            files.append(path)
        n = len(texts)
        settings = get_settings()
        model = get_model("embedding", settings)
        batch = settings.models.embedding_batch_size
        model.embed(texts[:64], batch)  # load and warm up, not timed
        # the first ingest of a process imports the pipeline's modules: a short conversation, apart
        warmup = tmp_path / "warmup.jsonl"
        warmup.write_bytes(to_jsonl(sample_turns(samples[-1])[:8]))
        imports_s = _ingest_seconds([warmup], tmp_path / "warmup")[0]
        for r in range(args.rounds):
            before_s, before_cpu = _encode_seconds(model, texts, batch)
            clear_text_memos()
            cold_dir, warm_dir = tmp_path / f"cold{r}", tmp_path / f"warm{r}"
            cold_s, cold_cpu, cold_setup, cold_tasks = _ingest_seconds(files, cold_dir)
            after_s, after_cpu = _encode_seconds(model, texts, batch)
            ceiling_s, ceiling_cpu = (before_s + after_s) / 2, (before_cpu + after_cpu) / 2
            encoded = _cache_rows(cold_dir)
            warm_s, warm_cpu, warm_setup, _ = _ingest_seconds(files, warm_dir, cache_of=cold_dir)
            rounds.append(
                {
                    "ceiling_s": round(ceiling_s, 3),
                    "ceiling_s_around": [round(before_s, 3), round(after_s, 3)],
                    "cold_s": round(cold_s, 3),
                    "warm_s": round(warm_s, 3),
                    "cpu_s": {"ceiling": round(ceiling_cpu, 2), "cold": round(cold_cpu, 2), "warm": round(warm_cpu, 2)},
                    "cold_ratio": round(ceiling_s / cold_s, 3),
                    "cold_ratio_cpu": round(ceiling_cpu / cold_cpu, 3),
                    "encodes_per_msg": round(encoded / n, 2),
                    "store_setup_s": round((cold_setup + warm_setup) / 2, 2),
                    "cold_task_cpu_s": {t: round(v, 3) for t, v in cold_tasks.items()},
                }
            )
            print(
                f"  round {r + 1}: ceiling {ceiling_s:.2f} s ({before_s:.2f} before, {after_s:.2f} after), cold "
                f"{cold_s:.2f} s, warm {warm_s:.2f} s: "
                f"{ceiling_s / cold_s:.0%} of the ceiling ({ceiling_cpu / cold_cpu:.0%} in CPU seconds)"
            )

    def med(key: str, sub: str | None = None) -> float:
        return statistics.median(x[key][sub] if sub else x[key] for x in rounds)

    tasks = {
        t: round(statistics.median(x["cold_task_cpu_s"].get(t, 0.0) for x in rounds), 3)
        for t in {t for x in rounds for t in x["cold_task_cpu_s"]}
    }
    cold_tasks = dict(sorted(tasks.items(), key=lambda kv: -kv[1]))  # the costliest first
    runtime = type(model.session).__name__ + (" int8" if model.int8 else "")  # the int8 model runs in the same class
    out = {
        "messages": n,
        "conversations": list(args.conversations),
        "embedding_runtime": runtime,
        "ceiling_msgs_per_s": round(n / med("ceiling_s"), 2),
        "cold_msgs_per_s": round(n / med("cold_s"), 2),
        "warm_msgs_per_s": round(n / med("warm_s"), 2),
        "cold_ratio": round(med("cold_ratio"), 3),
        "encodes_per_msg": med("encodes_per_msg"),
        "cpu_s": {k: round(med("cpu_s", k), 2) for k in ("ceiling", "cold", "warm")},
        "cold_ratio_cpu": round(med("cold_ratio_cpu"), 3),
        "first_ingest_s": round(imports_s, 2),
        "store_setup_s": med("store_setup_s"),
        "cold_task_cpu_s": cold_tasks,
        "rounds": rounds,
    }
    print(
        f"text, {n} messages of LoCoMo conversations {args.conversations} (embedder {runtime}), medians of "
        f"{len(rounds)} rounds:"
    )
    print(
        f"  embedder alone (ceiling) {out['ceiling_msgs_per_s']:8.1f} msgs/s  ({med('ceiling_s'):.1f} s, "
        f"{out['cpu_s']['ceiling']:.1f} CPU s)"
    )
    print(
        f"  pipeline cold            {out['cold_msgs_per_s']:8.1f} msgs/s  ({med('cold_s'):.1f} s, "
        f"{out['cpu_s']['cold']:.1f} CPU s)  = {out['cold_ratio']:.0%} of the ceiling "
        f"({out['cold_ratio_cpu']:.0%} in CPU seconds), {out['encodes_per_msg']:.2f} encodes/msg"
    )
    print(
        "    its CPU s by task: "
        + ", ".join(f"{t} {v:.2f}" for t, v in cold_tasks.items())
        + f"; in no task {out['cpu_s']['cold'] - sum(cold_tasks.values()):.2f} (the model's own: the ceiling's "
        f"{out['cpu_s']['ceiling']:.2f}, inside embed_many)"
    )
    print(
        f"  pipeline warm            {out['warm_msgs_per_s']:8.1f} msgs/s  ({med('warm_s'):.1f} s, "
        f"{out['cpu_s']['warm']:.1f} CPU s)"
    )
    print(
        f"  apart: a fresh data dir's store setup {out['store_setup_s']:.1f} s each; the process's first ingest "
        f"(imports, 8 messages) {imports_s:.1f} s"
    )
    return out


def distributed(args: argparse.Namespace) -> dict:
    """``{"<workers>": {"events_per_s", "events_per_cpu_s", "store_busy", "efficiency_vs_fewest"}}``: text events
    through the distributed mode with each count of cpu workers in ``--distributed-workers``, medians of
    ``--distributed-rounds`` interleaved rounds, each row and the targets' checks printed
    (``bench.lib.distributed.distributed_rates``: its own redis-server and ``engram worker`` processes; minutes)."""
    from bench.lib.distributed import distributed_rates  # starts servers: only when this section is asked for

    print(
        f"distributed, {args.distributed_events} text events per row, {args.distributed_rounds} interleaved "
        f"round(s) of {', '.join(map(str, args.distributed_workers))} cpu worker(s) (minutes):"
    )
    return distributed_rates(
        events=args.distributed_events, workers=args.distributed_workers, kind="text", rounds=args.distributed_rounds
    )


def perception(section: str, args: argparse.Namespace) -> dict:
    """``section`` ("screenshot" or "audio") of ``bench/perception_speed.py`` (its module docstring says what each
    figure is), run in a process of its own: it sets its own data dir and model settings (the audio's "before"
    run), which must not leak into this process's runtime. Its rows go to this process's stdout as they come.
    Raises RuntimeError when it fails."""
    with tempfile.TemporaryDirectory(prefix="engram-bench-perception-") as tmp:
        out = Path(tmp) / f"{section}.json"
        cmd = [
            sys.executable,
            str(REPO / "bench" / "perception_speed.py"),
            "--sections",
            section,
            "--long-seconds",
            str(args.long_seconds),
            "--runs",
            str(args.audio_runs),
            "--json",
            str(out),
        ]
        env = {k: v for k, v in os.environ.items() if k != "ENGRAM_DATA_DIR"}  # it makes its own, never a user's
        if args.eval_data is not None:
            env["ENGRAM_EVAL_DATA"] = str(args.eval_data)
        sys.stdout.flush()
        done = subprocess.run(cmd, env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"bench/perception_speed.py --sections {section} exited {done.returncode}")
        return json.loads(out.read_text())[section]


def _longmemeval_seconds(
    limit: int, embedding_cache: Path, eval_data: Path | None = None, profile: cProfile.Profile | None = None
) -> list[tuple[str, float, dict[str, int]]]:
    """(question id, warm ingest seconds, points per collection) for each of the first ``limit`` LongMemEval-S
    questions. ``profile``: enabled around each ingest only. Raises FileNotFoundError without the LongMemEval data
    and RuntimeError when an ingest fails."""
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
                done = ingest_paths(
                    [path], tenant=TENANT, user=q.question_id, device="bench", consolidate=True, quiet=True
                )
                took = time.perf_counter() - t0
                if profile is not None:
                    profile.disable()
                check_ingest(q.question_id, done)
                vectors = runtime().vectors
                counts = {c: vectors.count(c) for c in vectors.collections()}
        out.append((q.question_id, took, dict(sorted(counts.items()))))
    return out


def longmemeval(args: argparse.Namespace) -> dict:
    """The longmemeval section (see the module's docstring): ``{"questions", "passes", "median_s", "total_s",
    "by_question": {<question id>: {"seconds", "points": {<collection>: n}}}}`` of the last pass, each question's
    row and the median printed."""
    rows: list[tuple[str, float, dict[str, int]]] = []
    passes = max(1, args.passes)
    for n in range(passes):
        prof = cProfile.Profile() if args.profile and n == passes - 1 else None
        rows = _longmemeval_seconds(args.questions, args.embedding_cache, args.eval_data, prof)
        if prof is not None:
            prof.dump_stats(args.profile)
    for qid, took, counts in rows:
        print(f"{qid}  {took:6.2f} s  " + " ".join(f"{k}={v}" for k, v in counts.items()))
    secs = [t for _, t, _ in rows]
    print(
        f"median warm ingest {statistics.median(secs):.2f} s per question over {len(secs)} questions "
        f"(total {sum(secs):.1f} s; load {os.getloadavg()[0]:.1f})"
    )
    return {
        "questions": len(rows),
        "passes": passes,
        "median_s": statistics.median(secs),
        "total_s": sum(secs),
        "by_question": {qid: {"seconds": took, "points": counts} for qid, took, counts in rows},
    }


#: Section name -> function(args) -> its JSON dict, in the order ``--sections`` lists them.
SECTIONS: dict[str, Callable[[argparse.Namespace], dict]] = {
    "text": text,
    "screenshot": lambda args: perception("screenshot", args),
    "audio": lambda args: perception("audio", args),
    "distributed": distributed,
    "longmemeval": longmemeval,
}


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--sections",
        nargs="+",
        choices=list(SECTIONS),
        default=["text"],
        help="what to measure, in this order (default: text)",
    )
    ap.add_argument(
        "--conversations",
        type=int,
        nargs="+",
        default=[0, 1],
        help="LoCoMo conversations by position in locomo10.json (default: 0 1)",
    )
    ap.add_argument("--limit", type=int, default=None, help="only the first N messages of each conversation")
    ap.add_argument(
        "--eval-data",
        type=Path,
        default=None,
        help="evaluation data folder (default: ENGRAM_EVAL_DATA or ../shared/data)",
    )
    ap.add_argument("--distributed-events", type=int, default=300, help="distributed: text events per row")
    ap.add_argument(
        "--distributed-workers",
        type=int,
        nargs="+",
        default=[1, 2, 4],
        help="distributed: cpu worker counts (default: 1 2 4)",
    )
    ap.add_argument(
        "--distributed-rounds",
        type=int,
        default=3,
        help="distributed: rounds of every worker count, interleaved; figures are medians (default: 3)",
    )
    ap.add_argument(
        "--long-seconds",
        type=float,
        default=180.0,
        help="audio: length of the looped recording whose × real time is reported (default: 180)",
    )
    ap.add_argument(
        "--audio-runs",
        type=int,
        default=3,
        help="audio: runs of the current and the former settings, in turn; medians (default: 3)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="text: rounds of ceiling, cold and warm, side by side; medians reported (default: 5)",
    )
    ap.add_argument(
        "--questions", type=int, default=10, help="longmemeval: the first N LongMemEval-S questions (default 10)"
    )
    ap.add_argument(
        "--embedding-cache",
        type=Path,
        default=None,
        help="longmemeval (needed): folder of the embedding cache kept across runs (warm it with "
        "--passes 2 or a bench run)",
    )
    ap.add_argument(
        "--passes", type=int, default=1, help="longmemeval: ingest the questions this many times; report the last"
    )
    ap.add_argument(
        "--profile", type=Path, default=None, help="longmemeval: write cProfile statistics of the last pass here"
    )
    ap.add_argument("--json", type=Path, default=None, help="merge the figures into this JSON file")
    args = ap.parse_args(argv)
    if "longmemeval" in args.sections and args.embedding_cache is None:
        ap.error("--sections longmemeval needs --embedding-cache")
    quiet_logs()
    results: dict = {}
    for name in args.sections:
        results[name] = SECTIONS[name](args)
    results["load"] = round(os.getloadavg()[0], 2)
    print(f"load average {results['load']}")
    if args.json:
        merge_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
