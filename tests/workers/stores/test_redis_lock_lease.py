"""The Redis ledger's locks (consolidation's, in the distributed mode) are leases tied to a live holder (issue 43):
a holder renews its lock while it works, so it keeps it past the lease; a holder killed with SIGKILL renews nothing
and its lock is taken within the lease, not after its ttl; a live holder stuck past its ttl gives it up. On a real
redis-server (tests/servers.py), the holder a real process."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid

from engram.workers.stores.ledger import RedisLedger
from tests.conftest import REPO

LEASE_S = 1.0

_HOLDER = """
import sys, time
from engram.workers.stores.ledger import RedisLedger
ledger = RedisLedger(sys.argv[1], prefix=sys.argv[2], lock_lease_s=float(sys.argv[3]))
with ledger.try_lock(sys.argv[4], 600) as got:
    print("held" if got else "busy", flush=True)
    time.sleep(600)
"""


def test_a_killed_holders_lock_is_taken_within_its_lease_a_live_one_keeps_it(redis_server):
    prefix, name = f"test-{uuid.uuid4().hex[:8]}:", "consolidate:t1:ann"
    ledger = RedisLedger(redis_server, prefix=prefix, lock_lease_s=LEASE_S)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, redis_server, prefix, str(LEASE_S), name],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        for _ in range(4):  # 3 s: three leases, each renewed by the live holder
            with ledger.try_lock(name, 600) as got:
                assert not got
            time.sleep(0.75)
        assert 0 < ledger.r.pttl(f"{prefix}lock:{name}") <= LEASE_S * 1000  # a lease, not the 600 s ttl
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        killed = time.monotonic()
        while True:
            with ledger.try_lock(name, 600) as got:
                if got:
                    break
            assert time.monotonic() - killed < LEASE_S + 1.0, "a dead holder's lock outlived its lease"
            time.sleep(0.05)
        taken = time.monotonic() - killed
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert taken <= LEASE_S + 0.2, taken
    with ledger.try_lock(name, 600) as got:  # released on leaving the block
        assert got


def test_a_live_holder_past_its_ttl_gives_the_lock_up(redis_server):
    prefix, name = f"test-{uuid.uuid4().hex[:8]}:", "consolidate:t1:bob"
    ledger = RedisLedger(redis_server, prefix=prefix, lock_lease_s=LEASE_S)
    other = RedisLedger(redis_server, prefix=prefix, lock_lease_s=LEASE_S)
    with ledger.try_lock(name, 2.0) as got:
        assert got
        time.sleep(1.5)  # renewed past its first lease
        with other.try_lock(name, 2.0) as second:
            assert not second
        time.sleep(1.5)  # past its 2 s ttl: no longer renewed, lapsed
        with other.try_lock(name, 2.0) as second:
            assert second
    with other.try_lock(name, 2.0) as again:  # the first holder's release left the second's lock alone...
        assert again  # ...which was released too
