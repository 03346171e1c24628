"""The event ledger: the status of every event (queued, processing, done, skipped, failed + stage + reason).

One interface (``Ledger``); SQLite under ``ENGRAM_DATA_DIR`` in the embedded default. The ledger also
keeps the small shared state that ingest needs across processes: which content hash a tenant already
has (exact duplicates) and the last kept frame of each device stream (near-duplicates). Failed events
stay in the ledger with their reason and object key: that is the quarantine.

A module per role: ``base`` (the ``Ledger`` interface, ``FINAL_STATUSES``), ``sqlite_ledger`` (``SqliteLedger``, its
schema and ``migrate``), ``redis_ledger`` (``RedisLedger``) with its Lua scripts (``redis_scripts``) and the leases
its locks live on (``leases``), and ``opening`` (``open_ledger``). Every name is imported from this package
(``from engram.workers.stores.ledger import ...``).
"""

from __future__ import annotations

from engram.workers.stores.ledger.base import FINAL_STATUSES, Ledger
from engram.workers.stores.ledger.leases import LOCK_LEASE_S, LockLease, log_lock_expired
from engram.workers.stores.ledger.opening import open_ledger
from engram.workers.stores.ledger.redis_ledger import UNFINISHED_TTL_S, RedisLedger
from engram.workers.stores.ledger.sqlite_ledger import MIGRATIONS, SqliteLedger, migrate

__all__ = [
    "FINAL_STATUSES",
    "LOCK_LEASE_S",
    "MIGRATIONS",
    "UNFINISHED_TTL_S",
    "Ledger",
    "LockLease",
    "RedisLedger",
    "SqliteLedger",
    "log_lock_expired",
    "migrate",
    "open_ledger",
]
