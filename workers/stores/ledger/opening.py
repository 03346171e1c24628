"""Opening the configured ledger (``open_ledger``): Redis in the distributed mode, else SQLite under ``data_dir``."""

from __future__ import annotations

from engram.workers.stores.ledger.base import Ledger
from engram.workers.stores.ledger.redis_ledger import RedisLedger
from engram.workers.stores.ledger.sqlite_ledger import SqliteLedger


def open_ledger(settings) -> Ledger:
    """The configured ledger: Redis when ``redis_url`` or ``broker_url`` is a Redis URL (the distributed
    mode), else SQLite under ``data_dir`` (the embedded default)."""
    url = settings.redis_url or settings.broker_url
    if url and url.startswith(("redis://", "rediss://", "unix://")):
        return RedisLedger(url)
    return SqliteLedger(settings.data_dir / "ledger.sqlite")
