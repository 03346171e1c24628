"""``engram export --archive`` and ``engram import`` speed on the embedded default, each run as a user runs it (a
new process): a chat and a screenshot ingested by the real pipeline for one user, whose observations are then
copied under new ids (with their vectors, as ``bench/scale.py`` seeds a store) until the user holds
``--observations``; the user exported, imported into a new data dir, imported again (nothing new: what a second
import costs), ``--rounds`` times. Printed: medians of seconds, points per second, the archive's MB and its bytes
per observation, the load.

    python bench/archive.py [--observations 20000] [--rounds 3] [--json FILE]

Not a test: figures depend on the machine and its load (printed with them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

USER = "bench"


def _engram(data_dir: Path, *args: str) -> tuple[float, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")} | {"ENGRAM_DATA_DIR": str(data_dir)}
    t0 = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", *args, "--json"], env=env, capture_output=True, text=True, timeout=3600
    )
    took = time.perf_counter() - t0
    if run.returncode:
        raise SystemExit(run.stderr[-2000:])
    return took, json.loads(run.stdout)


def build(data_dir: Path, observations: int) -> int:
    """Ingest a chat and a screenshot for ``USER`` into ``data_dir``, then copy their observations until the user
    holds ``observations``; returns how many it holds."""
    from engram.api.embedded import ingest_paths
    from engram.workers.runtime import reset_runtimes, runtime
    from engram.workers.stores import models as qm
    from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter
    from tests.workers.media.test_bad_input import render_png
    from tests.workers.test_ask import write_chat

    os.environ["ENGRAM_DATA_DIR"] = str(data_dir)
    reset_runtimes()
    chat = write_chat(
        data_dir.parent / "chat.jsonl",
        [("Alice", "Flights to Lisbon are booked for the review."), ("Dan", "Great, the review is on Thursday at 10.")],
        1,
    )
    shot = render_png(data_dir.parent / "shot.png", ["Quarterly budget review", "Lisbon office, Thursday 10:00"])
    ingest_paths([chat, shot], "default", USER, "laptop", quiet=True)
    rt = runtime()
    flt = tenant_filter("default", USER)
    seeds = rt.vectors.scroll(OBSERVATIONS, flt, with_vectors=True)
    have = len(seeds)
    while have < observations:
        batch = [
            qm.PointStruct(
                id=str(uuid.uuid4()),
                vector=dict(s.vector),
                payload={**s.payload, "text": f"{s.payload.get('text', '')} #{have + i}"},
            )
            for i, s in zip(range(min(1000, observations - have)), seeds * 1000, strict=False)
        ]
        rt.vectors.upsert(OBSERVATIONS, batch)
        have += len(batch)
    held = rt.vectors.count(OBSERVATIONS, flt)
    reset_runtimes()
    return held


def main(argv: list[str] | None = None) -> int:
    """Run the measure; print it and (``--json``) write it."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--observations", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="engram-archive-bench-") as tmp:
        root = Path(tmp)
        held = build(root / "src", args.observations)
        times: dict[str, list[float]] = {"export": [], "import": [], "import_again": []}
        size = 0
        for n in range(args.rounds):
            archive, dest = root / f"a{n}.tar", root / f"dest{n}"
            times["export"].append(_engram(root / "src", "export", "--user", USER, "--archive", str(archive))[0])
            size = archive.stat().st_size
            took, got = _engram(dest, "import", str(archive))
            times["import"].append(took)
            assert got["written"]["points"]["observations"] == held, got
            times["import_again"].append(_engram(dest, "import", str(archive))[0])
            archive.unlink()
            shutil.rmtree(dest)
        med = {k: statistics.median(v) for k, v in times.items()}
        result = {
            "observations": held,
            "archive_mb": round(size / 1e6, 1),
            "archive_bytes_per_observation": round(size / held),
            **{f"{k}_seconds": round(v, 2) for k, v in med.items()},
            "export_points_per_second": round(held / med["export"]),
            "import_points_per_second": round(held / med["import"]),
            "load": os.getloadavg()[0],
        }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
