"""The leases the Redis ledger's locks live on (``RedisLedger.try_lock``): renewed while their holder's work runs,
lapsing within ``LOCK_LEASE_S`` when it died.
"""

from __future__ import annotations

import time

import structlog

log = structlog.get_logger(__name__)

#: Seconds a lock of the Redis ledger (``RedisLedger.try_lock``) lives unless its holder renews it (every third of
#: this, while its work runs): how long a dead holder's lock blocks its work at most.
LOCK_LEASE_S = 15.0


class LockLease:
    """Keeps a held redis-py ``Lock`` (made with ``thread_local=False``) alive while its holder's work runs: a daemon
    thread of the holder renews it every third of ``lease_s`` (``Lock.extend`` with ``replace_ttl``: its ttl set to
    ``lease_s`` again), until ``stop`` or ``max_s`` seconds after the start (a holder alive but stuck does not hold
    it for ever: the last renewal gives what is left of ``max_s``). The lease is the liveness test that a pid cannot
    be across machines (Gray and Cheriton, "Leases", SOSP 1989): a holder that died renews nothing and its lock
    lapses within ``lease_s``. A renewal that fails on a connection error is tried again at the next tick; a lock
    found no longer held (it lapsed while Redis was unreachable and someone else may hold it now) stops the renewals
    with a warning. The thread owns nothing but the renewals; ``lost`` tells whether the lock was found gone."""

    def __init__(self, lock, name: str, lease_s: float, max_s: float) -> None:
        import threading

        self.lock, self.name, self.lease_s = lock, name, lease_s
        self.lost = False
        self._until = time.monotonic() + max_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"lease:{name}", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        import redis

        while not self._stopped.wait(self.lease_s / 3):
            left = self._until - time.monotonic()
            if left <= 0:
                log.warning("lock held for its whole ttl: no longer renewed", lock=self.name)
                return
            try:
                self.lock.extend(min(self.lease_s, left), replace_ttl=True)
            except redis.exceptions.LockError:  # LockNotOwnedError: it lapsed; another process may hold it
                self.lost = True
                log.warning("lock lost while held: its lease lapsed before it was renewed", lock=self.name)
                return
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                log.warning("lock lease not renewed; trying again", lock=self.name, error=str(exc)[:200])

    def stop(self) -> None:
        """End the renewals (the holder's work is over) and wait for the thread."""
        self._stopped.set()
        self._thread.join(timeout=10)


def log_lock_expired(name: str) -> None:
    """Note a lock that outlived its ttl (its work took longer than the ttl allows)."""

    log.warning("lock expired before release", lock=name)
