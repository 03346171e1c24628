"""The embedded default as the benches run it: a data dir of their own, a shared embedding cache, the bench's
tenant and vault key, an ingest checked, logs quieted, and figures merged into a JSON file.

Used by ``bench/retrieval.py``, ``bench/ingest.py``, ``bench/scale.py`` and the scripts
that write ``bench/results/*.json`` (through ``merge_json``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TENANT = "bench"
_SERVER_VARS = ("ENGRAM_BROKER_URL", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT")
#: The vault key of the benches' data dirs unless ``ENGRAM_VAULT_KEY`` is set: one key for all the bench's
#: users, as one deployment has (benchmark data holds no real secrets). Without it each fresh data dir makes
#: its own key, so the vault placeholders in turns that hold a secret differ per run and miss a warm cache.
BENCH_VAULT_KEY = "q0ZVuNhzjXjuHnBcHEGoeCcB8ebwZMVLtTrP8k8kDv4="


@contextmanager
def embedded_data_dir(path: Path) -> Iterator[None]:
    """Point the embedded default at ``path`` (no broker, no Qdrant server, no S3; the vault key
    ``ENGRAM_VAULT_KEY`` or else ``BENCH_VAULT_KEY``; time words read in UTC unless ``ENGRAM_TIMEZONE`` is set,
    as the datasets' dates are) for the duration, then restore the environment; runtimes are reset on entry
    and exit."""
    from engram.workers.runtime import reset_runtimes

    saved = {v: os.environ.get(v) for v in ("ENGRAM_DATA_DIR", "ENGRAM_VAULT_KEY", "ENGRAM_TIMEZONE", *_SERVER_VARS)}
    os.environ["ENGRAM_DATA_DIR"] = str(path)
    os.environ.setdefault("ENGRAM_VAULT_KEY", BENCH_VAULT_KEY)
    os.environ.setdefault("ENGRAM_TIMEZONE", "UTC")  # the datasets' dates carry no zone and are stored as UTC
    for var in _SERVER_VARS:
        os.environ.pop(var, None)
    reset_runtimes()
    try:
        yield
    finally:
        reset_runtimes()
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def share_embedding_cache(data_dir: Path, cache_dir: Path | None) -> None:
    """Make ``data_dir/cache`` (where the runtime keeps ``embeddings.sqlite``) a link to ``cache_dir``, so a
    fresh data dir starts with a warm embedding cache. Does nothing without ``cache_dir``."""
    if cache_dir is None:
        return
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    link = data_dir / "cache"
    if not link.exists():
        link.symlink_to(Path(cache_dir).resolve(), target_is_directory=True)


def check_ingest(name: str, out: dict[str, list]) -> None:
    """Raise RuntimeError (with the first reason) unless ``api.embedded.ingest_paths``'s result ``out`` stored the
    conversation: a failed file, and one ignored as not a conversation, both stop the bench."""
    if out["failed"] or not out["done"]:
        raise RuntimeError(f"ingest of {name} failed: {(out['failed'] or out['ignored'])[0][1]}")


def quiet_logs() -> None:
    """Warnings and errors only, through engram's own logging configuration (``workers.logs.configure_logging``:
    structlog and the standard library on one stderr handler). Setting structlog's logger factory alone kept the
    processors of engram's configuration, which need a standard-library logger: a warning then raised
    AttributeError ('PrintLogger' object has no attribute 'name') where it was logged."""
    import logging

    from engram.workers.logs import configure_logging

    configure_logging(logging.WARNING)
    import bm25s  # noqa: F401  (it sets its own logger to DEBUG on import)

    for name in ("bm25s", "kombu", "celery"):
        logging.getLogger(name).setLevel(logging.ERROR)


def merge_json(path: Path, results: dict) -> None:
    """Write ``results``' keys into the JSON object in ``path`` (made when absent; other keys kept; text as it is,
    not escaped: the screenshot section's strings include Chinese). ``bench/ingest.py``, ``bench/perception_speed.py``
    and ``bench/capture_cpu.py`` write with it."""
    data = json.loads(path.read_text()) if path.exists() and path.stat().st_size else {}
    data.update(results)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
