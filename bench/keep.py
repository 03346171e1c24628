"""Backup and restore speed beside ``cp -r``, and what an incremental backup writes, on a data dir of 100 k
observations: ``engram backup`` and ``engram restore`` run as a user runs them, each in a new process.

The store is built as ``bench/scale.py`` builds it (``bench.lib.seed.build``: the real points of LoCoMo conversations
ingested into a seed data dir, copied with new ids over 99 more users until it holds ``--observations``), beside
the seed's ledger, embedding cache and objects. Memory for three times the data dir is touched once first
(``_touch_memory``: on a virtual machine the first use of a page costs far more than its reuse). Then, in one
run, ``--rounds`` times each, alternating: ``cp -r`` of the data dir, a full backup into a new folder and a
restore of it into a new data dir, ``cp -r`` of that data dir again (each reading warm files: a first ``cp -r``
warms the data dir for all of them, the backup folder is read once before its restore (``_warm``: the backup
writes its packs past the page cache), the restored data dir is warm as the restore wrote it; and each from a
settled page cache: ``sync`` first). ``cp -r`` is timed with the
``sync`` of its copy after it, as a backup is timed with its own (its manifest is written only once its packs
are on disk); ``*_unsynced`` ratios are against ``cp -r`` alone. Speeds are the data dir's bytes on disk
(allocated blocks: the engine's preallocated files are sparse, and ``cp``, the backup and the restore all skip
holes) over wall seconds; the ratios are medians of ``cp``'s seconds over the backup's (or the restore's). Then
1 % more observations (copies of seed points with new ids) are written through the store and a second backup
goes into the first one's folder: ``incremental_ratio`` is the bytes it wrote over the full backup's. The
restored store is checked: its collections hold the points the original held.

    python bench/keep.py [--seed-dir DIR] [--observations 100000] [--json bench/results/keep.json]

``--json FILE`` writes ``{"backup_ratio_to_cp", "restore_ratio_to_cp", "incremental_ratio",
"frame_bytes_ratio", "ocr_recall", "load", ...}``. ``frame_bytes_ratio`` (stored bytes per kept frame / PNG's) and
``ocr_recall`` (OCR word recall of the webui pages read back from the stored WebP, against their accessibility
tree; ``ocr_recall_png`` the same from the PNG) are the frame format's figures, measured by ``python
bench/capture_cpu.py --formats`` (OCR of every shared screenshot in both forms: minutes of CPU) and read here from
its JSON (``--formats-json``, default ``bench/results/capture-format.json``; ``frames_source`` names it, its load
and the format), not measured again. Not a test: figures depend on the machine and its load (printed with them).
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
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench  # noqa: E402,F401  (the offline model environment)

#: The frame format's figures (``python bench/capture_cpu.py --formats --json ...``), read by ``frame_figures``.
FORMATS_JSON = Path(__file__).resolve().parent / "results" / "capture-format.json"


def frame_figures(path: Path) -> dict[str, Any]:
    """``frame_bytes_ratio``, ``ocr_recall`` and ``ocr_recall_png`` of the frame format ``engram capture`` keeps,
    read from ``bench/capture_cpu.py --formats``'s JSON at ``path`` (its ``stored_format`` row of ``formats``:
    ``webui_recall``; the ``png`` row's for ``ocr_recall_png``), with ``frames_source`` (the file, the command that
    wrote it, its load and the format). All None, with the reason in ``frames_source``, when the file is absent or
    holds no such row."""
    missing = dict.fromkeys(("frame_bytes_ratio", "ocr_recall", "ocr_recall_png"))
    if not path.is_file():
        return {
            **missing,
            "frames_source": f"{path} not found: run python bench/capture_cpu.py --formats --json {path}",
        }
    got = json.loads(path.read_text())
    stored, rows = got.get("stored_format"), got.get("formats", {})
    if stored not in rows or "png" not in rows:
        return {**missing, "frames_source": f"{path} has no {stored!r} and 'png' rows under formats"}
    return {
        "frame_bytes_ratio": got.get("frame_bytes_ratio", rows[stored]["bytes_share_of_png"]),
        "ocr_recall": rows[stored]["webui_recall"],
        "ocr_recall_png": rows["png"]["webui_recall"],
        "frames_source": {
            "file": str(path.relative_to(path.parents[2])) if path.is_relative_to(path.parents[2]) else str(path),
            "command": "python bench/capture_cpu.py --formats",
            "stored_format": stored,
            "load": got.get("load"),
        },
    }


def _du(path: Path) -> int:
    """Bytes on disk under ``path`` (allocated blocks)."""
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _timed(fn) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _cp(src: Path, dest: Path) -> tuple[float, float]:
    """Seconds of ``cp -r src dest``, and of it followed by ``sync`` of its filesystem (its copy on disk, as a
    backup's is before its manifest is written), both from a settled page cache (``os.sync`` first)."""
    if dest.exists():
        shutil.rmtree(dest)
    os.sync()
    t0 = time.perf_counter()
    subprocess.run(["cp", "-r", str(src), str(dest)], check=True)
    copied = time.perf_counter() - t0
    subprocess.run(["sync", "-f", str(dest)], check=True)
    return copied, time.perf_counter() - t0


def _warm(path: Path) -> int:
    """Read every file under ``path`` once (into the page cache, as the first ``cp -r`` warms the data dir for
    the rounds); returns the bytes read. A backup's packs go to the disk without the page cache (``O_DIRECT``),
    so the restore would otherwise be the one measure reading cold files while ``cp -r`` of the restored data
    dir, its comparison, reads warm ones."""
    n = 0
    for f in path.rglob("*"):
        if f.is_file() and not f.is_symlink():
            with open(f, "rb", buffering=0) as fh:
                while chunk := fh.read(8 << 20):
                    n += len(chunk)
    return n


def _touch_memory(path: Path, n_bytes: int) -> float:
    """Write ``n_bytes`` of zeros to ``path`` through the page cache, then remove it; returns the seconds. On a
    virtual machine whose memory the host maps in at its first touch (this one: 1.3 GB written in 5.4 s the first
    time, 0.5 s once the pages had been used), whichever measure first wrote into memory never used before paid
    for it: the rounds' copies, packs and restored files then reuse pages touched here, as on a machine that has
    been running for a while."""
    t0 = time.perf_counter()
    block = bytes(8 << 20)
    with open(path, "wb") as f:
        for _ in range(max(1, n_bytes // len(block))):
            f.write(block)
    path.unlink()
    return time.perf_counter() - t0


def _engram(data_dir: Path, *args: str) -> dict:
    """Run ``engram ARGS --quiet --json`` on ``data_dir`` in a new process, as a user runs it (its start-up
    included in the time: ~0.5 s); returns its JSON summary."""
    env = {**os.environ, "ENGRAM_DATA_DIR": str(data_dir)}
    for var in ("ENGRAM_BROKER_URL", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT"):
        env.pop(var, None)
    out = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", *args, "--quiet", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[1],
    )
    if out.returncode:
        raise SystemExit(f"engram {' '.join(args)} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def build_data_dir(seed_dir: Path, data_dir: Path, n_obs: int, user: str) -> dict:
    """The store of ``n_obs`` observations (``bench.lib.seed.build``) with the seed's ledger, caches and objects."""
    from bench.lib.seed import build
    from bench.lib.seed import seed_points as _seed

    built = build(_seed(seed_dir), user, n_obs, data_dir)
    for name in ("ledger.sqlite", "cache/embeddings.sqlite"):
        if (seed_dir / name).is_file():
            (data_dir / name).parent.mkdir(parents=True, exist_ok=True)
            from engram.workers.stores.backup import sqlite_copy

            sqlite_copy(seed_dir / name, data_dir / name)
    if (seed_dir / "objects").is_dir():
        shutil.copytree(seed_dir / "objects", data_dir / "objects", dirs_exist_ok=True)
    return built


def add_new(seed_dir: Path, data_dir: Path, n: int) -> int:
    """Write ``n`` more observations (seed points with new ids, a new user) through the store; returns how many."""
    from bench.lib.seed import copy_point as _copy
    from bench.lib.seed import seed_points as _seed
    from engram.workers.stores.vectors import OBSERVATIONS, EdgeVectorStore

    recs = [r for by_coll in _seed(seed_dir).values() for r in by_coll.get(OBSERVATIONS, [])]
    store = EdgeVectorStore(data_dir / "vectors", optimize_after=None)
    written = 0
    try:
        copy = 0
        while written < n:
            batch = recs[: n - written]
            key = f"new:{copy}:{uuid.uuid4()}"
            new_id = {str(r.id): str(uuid.uuid5(uuid.NAMESPACE_URL, f"{key}:{r.id}")) for r in batch}
            points = [_copy(r, OBSERVATIONS, new_id, "tenant-new", "user-new", key) for r in batch]
            for i in range(0, len(points), 512):
                store.upsert(OBSERVATIONS, points[i : i + 512])
            written += len(points)
            copy += 1
    finally:
        store.close()
    return written


def counts(data_dir: Path) -> dict[str, int]:
    """Points per collection of the data dir's store."""
    from engram.workers.stores.vectors import COLLECTIONS, EdgeVectorStore

    store = EdgeVectorStore(data_dir / "vectors")
    try:
        return {c: store.count(c) for c in COLLECTIONS if store.has_collection(c)}
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--seed-dir",
        type=Path,
        default=None,
        help="a data dir holding ingested LoCoMo conversations (made with conversations 0 1 2 if empty; "
        "default: WORK_DIR/seed)",
    )
    ap.add_argument("--observations", type=int, default=100_000, help="observations in the store (default 100000)")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds of cp, backup and restore (default 2)")
    ap.add_argument("--work-dir", type=Path, default=None, help="where everything is written (default: a temp dir)")
    ap.add_argument("--reuse", action="store_true", help="reuse the data dir an earlier run built in --work-dir")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument(
        "--formats-json",
        type=Path,
        default=FORMATS_JSON,
        help="the frame format's figures to read (bench/capture_cpu.py --formats --json; default %(default)s)",
    )
    args = ap.parse_args(argv)

    from bench.lib.locomo import load_locomo
    from engram.workers.media.conversations import locomo_sample_id
    from engram.workers.stores import backup as bk

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="engram-keep-"))
    work.mkdir(parents=True, exist_ok=True)
    args.seed_dir = args.seed_dir or work / "seed"
    if not (args.seed_dir / "vectors").is_dir():
        from bench.lib.retrieval import evaluate

        print(f"ingesting LoCoMo conversations 0 1 2 into {args.seed_dir} ...", file=sys.stderr)
        evaluate([0, 1, 2], data_dir=args.seed_dir, ingest_only=True, progress=False)
    user = f"locomo-{locomo_sample_id(load_locomo()[0], 0)}"
    data = work / "data"
    result: dict = {"observations": args.observations, "load": list(os.getloadavg()), "chunk_bytes": bk.CHUNK_BYTES}
    if not (args.reuse and (data / "build.json").is_file()):
        if data.exists():
            shutil.rmtree(data)
        print(f"building {args.observations:,} observations in {data} ...", file=sys.stderr)
        (data).mkdir(parents=True)
        built = build_data_dir(args.seed_dir, data, args.observations, user)
        (work / "build.json").write_text(json.dumps(built))
        (data / "build.json").write_text(json.dumps(built))
    before = counts(data)
    size = _du(data)
    result.update(
        disk_bytes=size, apparent_bytes=sum(f.stat().st_size for f in data.rglob("*") if f.is_file()), points=before
    )
    _cp(data, work / "warm")  # the page cache warmed for every measure alike
    shutil.rmtree(work / "warm")
    _touch_memory(work / "touch", 3 * size)

    cp_s, cp_sync_s, backup_s, restore_s, cp_restored_s, cp_restored_sync_s, held_s = [], [], [], [], [], [], []
    full_written = 0
    for r in range(args.rounds):
        copied, synced = _cp(data, work / "cp")
        cp_s.append(copied)
        cp_sync_s.append(synced)
        shutil.rmtree(work / "cp")
        dest = work / f"backup-{r}"
        if dest.exists():
            shutil.rmtree(dest)
        os.sync()
        seconds, out = _timed(lambda dest=dest: _engram(data, "backup", str(dest)))
        backup_s.append(seconds)
        held_s.append(out["store_held_seconds"])
        full_written = out["written_bytes"]
        restored = work / "restored"
        if restored.exists():
            shutil.rmtree(restored)
        _warm(dest)  # the restore reads the backup from the page cache, as cp -r reads the data dir
        os.sync()
        seconds, _ = _timed(lambda dest=dest, restored=restored: _engram(restored, "restore", str(dest)))
        restore_s.append(seconds)
        copied, synced = _cp(restored, work / "cp")
        cp_restored_s.append(copied)
        cp_restored_sync_s.append(synced)
        shutil.rmtree(work / "cp")
        print(
            f"round {r + 1}: cp -r {cp_s[-1]:.2f} s (+ sync {cp_sync_s[-1]:.2f} s), backup {backup_s[-1]:.2f} s "
            f"(store held {held_s[-1]:.2f} s), restore {restore_s[-1]:.2f} s, cp -r of the restored "
            f"{cp_restored_s[-1]:.2f} s (+ sync {cp_restored_sync_s[-1]:.2f} s)",
            file=sys.stderr,
        )
        if r < args.rounds - 1:
            shutil.rmtree(dest)
    assert counts(work / "restored") == before, "the restored store does not hold the original's points"
    shutil.rmtree(work / "restored")

    added = add_new(args.seed_dir, data, max(1, args.observations // 100))
    inc_s, inc = _timed(lambda: _engram(data, "backup", str(work / f"backup-{args.rounds - 1}")))
    mb = 1e6
    cp_med, cp_rest_med = statistics.median(cp_sync_s), statistics.median(cp_restored_sync_s)
    result.update(
        backup_ratio_to_cp=cp_med / statistics.median(backup_s),
        restore_ratio_to_cp=cp_rest_med / statistics.median(restore_s),
        backup_ratio_to_cp_unsynced=statistics.median(cp_s) / statistics.median(backup_s),
        restore_ratio_to_cp_unsynced=statistics.median(cp_restored_s) / statistics.median(restore_s),
        incremental_ratio=inc["written_bytes"] / full_written,
        **frame_figures(args.formats_json),
        cp_mb_s=size / mb / cp_med,
        backup_mb_s=size / mb / statistics.median(backup_s),
        restore_mb_s=size / mb / statistics.median(restore_s),
        cp_restored_mb_s=size / mb / cp_rest_med,
        seconds={
            "cp": cp_s,
            "cp_sync": cp_sync_s,
            "backup": backup_s,
            "restore": restore_s,
            "cp_restored": cp_restored_s,
            "cp_restored_sync": cp_restored_sync_s,
            "incremental": inc_s,
        },
        store_held_s={"full": held_s, "incremental": inc["store_held_seconds"]},
        full_written_bytes=full_written,
        incremental_written_bytes=inc["written_bytes"],
        added_observations=added,
        incremental_read_bytes=inc["read_bytes"],
        load_after=list(os.getloadavg()),
    )
    print(
        f"data dir {size / mb:.0f} MB on disk ({result['apparent_bytes'] / mb:.0f} MB apparent), "
        f"{sum(before.values()):,} points\n"
        f"backup  {result['backup_mb_s']:.0f} MB/s, cp -r + sync {result['cp_mb_s']:.0f} MB/s: ratio "
        f"{result['backup_ratio_to_cp']:.2f} (to cp -r alone {result['backup_ratio_to_cp_unsynced']:.2f})\n"
        f"restore {result['restore_mb_s']:.0f} MB/s, cp -r + sync {result['cp_restored_mb_s']:.0f} MB/s: ratio "
        f"{result['restore_ratio_to_cp']:.2f} (to cp -r alone {result['restore_ratio_to_cp_unsynced']:.2f})\n"
        f"incremental after {added:,} new observations: wrote {inc['written_bytes'] / mb:.1f} MB of the full "
        f"{full_written / mb:.0f} MB ({result['incremental_ratio']:.3f}) in {inc_s:.1f} s\n"
        f"kept frames: {result['frame_bytes_ratio']} of PNG's bytes, OCR recall {result['ocr_recall']} "
        f"(PNG {result['ocr_recall_png']}; from {args.formats_json})\n"
        f"load {result['load']} -> {result['load_after']}",
        file=sys.stderr,
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
