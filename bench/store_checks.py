"""What the embedded store's damage checks cost a cold ``engram search``: on a store of N observations (10,000 by
default; built by ``bench.scale.build`` from the points of a seed data dir, copied over 99 more users), in a
fresh process per figure:

- ``verify_ms``: the open-time check of each shard against its manifest (``integrity.verify_manifest``: every
  file's size and stamp; a file written since is digested), the cost every open of a store closed where it is
  pays; ``verify_full_ms``: every file's BLAKE2b digest read again (a copied store, or every file touched);
- ``manifest_ms``: writing the manifest again as the store closes, after the engine opened and closed the shard
  (files the engine left untouched are not read again);
- ``structure_ms`` and ``read_back_ms``: the checks of a shard without a manifest (an older engram's store, or
  one whose process was killed): the files' own sizes before the engine opens it, every point read back after;
- ``cli_search_s``: the median wall time of ``--cli-runs`` cold ``engram search`` runs on the store, for scale.

    python bench/store_checks.py [--seed-dir DIR] [--size 10000] [--json bench/results/store_checks.json]

Without ``--seed-dir`` three Markdown notes are ingested into a temporary data dir as the seed. Prints a table
(medians of ``--repeat`` runs, with the load average) and writes the JSON. Not a test: figures depend on the
machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench  # noqa: E402,F401  (the offline model environment)

NOTES = {
    "garden.md": "# Garden plan\n\nThe tomatoes go along the south fence this year. Basil between them keeps the "
                 "aphids away.\n",
    "trip.md": "# Lisbon trip\n\nFlight TP1353 leaves on the 14th of June at 07:40. The hotel in Alfama is booked "
               "for four nights.\n",
    "meeting.md": "# Budget meeting\n\nThe quarterly budget review moved to Thursday; we cut travel by ten "
                  "percent.\n",
}
USER = "ann"


def _engram(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ENGRAM_DATA_DIR": str(data_dir), "ENGRAM_USER": USER}
    return subprocess.run([str(Path(sys.executable).with_name("engram")), *args], env=env, capture_output=True,
                          text=True, timeout=1200, check=True)


def seed_store(work: Path) -> Path:
    """A data dir holding the three notes, ingested through the real path."""
    notes, data = work / "notes", work / "seed"
    notes.mkdir(parents=True, exist_ok=True)
    for name, text in NOTES.items():
        (notes / name).write_text(text)
    _engram(data, "ingest", str(notes))
    return data


def measure(data_dir: Path) -> dict[str, dict[str, float]]:
    """Per shard of the store at ``data_dir``: the checks' milliseconds (this process: run it fresh). The store is
    left as it was (closed, its manifests written again)."""
    import qdrant_edge

    from engram.workers.stores import integrity
    from engram.workers.stores.vectors import read_back

    out: dict[str, dict[str, float]] = {}
    root = data_dir / "vectors"
    for shard in sorted(p for p in root.iterdir() if p.is_dir()):
        tf = time.perf_counter()
        integrity.verify_manifest(shard, integrity.read_manifest(shard) or {}, full=True)
        t0 = time.perf_counter()
        known = integrity.verify_manifest(shard, integrity.read_manifest(shard) or {})
        t1 = time.perf_counter()
        integrity.check_structure(shard)
        t2 = time.perf_counter()
        integrity.drop_manifest(shard)  # as the store does before the engine opens a shard
        engine = qdrant_edge.EdgeShard.load(str(shard))
        points = engine.info().points_count
        t3 = time.perf_counter()
        read_back(shard, engine)
        t4 = time.perf_counter()
        engine.close()
        t5 = time.perf_counter()
        integrity.write_manifest(shard, known)
        t6 = time.perf_counter()
        out[shard.name] = {"points": points, "files": len(known), "verify_ms": (t1 - t0) * 1e3,
                           "verify_full_ms": (t0 - tf) * 1e3,
                           "structure_ms": (t2 - t1) * 1e3, "read_back_ms": (t4 - t3) * 1e3,
                           "manifest_ms": (t6 - t5) * 1e3,
                           "data_bytes": sum(f.stat().st_blocks * 512 for f in shard.rglob("*") if f.is_file())}
    return out


def cli_search(data_dir: Path, runs: int) -> list[float]:
    """Wall seconds of ``runs`` cold ``engram search`` processes on the store."""
    wall = []
    for _ in range(runs):
        t0 = time.perf_counter()
        _engram(data_dir, "search", "where do the tomatoes go", "--user", USER, "-k", "5")
        wall.append(time.perf_counter() - t0)
    return wall


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed-dir", type=Path, default=None, help="an ingested data dir to copy points from")
    ap.add_argument("--size", type=int, default=10_000, help="observations in the store (default 10000)")
    ap.add_argument("--repeat", type=int, default=5, help="fresh processes measuring the checks (median)")
    ap.add_argument("--cli-runs", type=int, default=5, help="cold `engram search` runs (median)")
    ap.add_argument("--work-dir", type=Path, default=None, help="where the stores are built (default: temp)")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--measure", type=Path, default=None, help=argparse.SUPPRESS)  # internal: one fresh process
    args = ap.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    from bench.scale import _seed, build

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="engram-checks-"))
    seed_dir = args.seed_dir or seed_store(work)
    seed = _seed(seed_dir)
    user = USER if USER in seed else next(u for u in seed if u)
    data_dir = work / f"store-{args.size}"
    if not (data_dir / "vectors").is_dir():
        print(f"building {args.size:,} observations in {data_dir} ...", file=sys.stderr)
        built = build(seed, user, args.size, data_dir)
        print(f"built: {built['points']}", file=sys.stderr)
    load_before = list(os.getloadavg())
    runs = []
    for _ in range(args.repeat):
        out = subprocess.run([sys.executable, __file__, "--measure", str(data_dir)], capture_output=True, text=True,
                             check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    shards = {name: {key: statistics.median(r[name][key] for r in runs) for key in runs[0][name]}
              for name in runs[0]}
    wall = cli_search(data_dir, args.cli_runs) if args.cli_runs else []
    total = {key: sum(s[key] for s in shards.values()) for key in ("verify_ms", "verify_full_ms", "manifest_ms",
                                                                      "structure_ms", "read_back_ms")}
    result = {"size": args.size, "shards": shards, "total": total,
              "added_to_cold_search_ms": total["verify_ms"] + total["manifest_ms"],
              "cli_search_s": statistics.median(wall) if wall else None, "cli_search_runs_s": wall,
              "load": load_before, "load_after": list(os.getloadavg()), "repeat": args.repeat}
    for name, s in shards.items():
        print(f"{name:16} {int(s['points']):>7} points {s['data_bytes'] / 1e6:7.1f} MB  verify {s['verify_ms']:7.1f} ms"
              f" (all digests {s['verify_full_ms']:7.1f} ms)  manifest {s['manifest_ms']:6.1f} ms  structure "
              f"{s['structure_ms']:5.1f} ms  read-back {s['read_back_ms']:7.1f} ms")
    print(f"added to a cold search (all shards: verify + manifest): {result['added_to_cold_search_ms']:.0f} ms; "
          f"cold engram search median {result['cli_search_s'] or 0:.2f} s; load {load_before}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
