"""``POST /v1/memories`` retried in the distributed mode (issue 43): an addition whose task was lost (published
while no cpu worker ran, then the queue emptied, as a broker that lost it would; a task held by a worker killed with
SIGKILL comes back only after the broker's 30 min visibility timeout, beat's sweep after an hour) is taken up
by its retry through the SDK, which answers once it is stored, ``resumed`` set; retries at once publish it once; a
retry after that is a plain duplicate; an addition lost mid-pipeline (perceived and embedded, its store task lost
while the store worker was down) is finished by its retry too; the ledger and the store agree (one observation
each). Then the user's consolidation lock, held by a process killed with SIGKILL, is taken by the store worker's
consolidation within the lock's lease (``ledger.LOCK_LEASE_S``), not its 600 s ttl.

On the cluster of tests/integration/test_api_cluster.py (redis-server, SeaweedFS, ``engram worker`` processes,
the API in a thread)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from engram.api.add import add_event_id
from engram.schemas.events import EventStatus
from engram.workers.stores.ledger import LOCK_LEASE_S
from tests.cluster import broker_state
from tests.conftest import REPO
from tests.integration.test_api_cluster import db_url, make_stack, stop_and_count  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


def test_a_retried_addition_whose_task_was_lost_is_taken_up_and_answered_once_stored(make_stack, redis_server):  # noqa: F811 (the fixture imported above)
    t0 = time.monotonic()
    stack = make_stack(db_url(redis_server, 7), "addresume", cpu_workers=1, beat=False)
    notes = {
        "boat-1": "The dinghy oars are in the blue locker by the slipway",
        "boat-2": "The harbour master's office closes at four on Sundays",
    }
    stack.cluster.kill("cpu1", signal.SIGTERM)  # no cpu worker: the additions wait in the queue
    with stack.client(user="ann") as client:
        first = {cid: client.add(text, id=cid) for cid, text in notes.items()}
        assert all(r.status is EventStatus.queued and not r.duplicate for r in first.values()), first
        deadline = time.monotonic() + 30
        while broker_state(stack.redis_url)[0].get("ingest", 0) < len(notes):
            assert time.monotonic() < deadline, broker_state(stack.redis_url)
            time.sleep(0.1)
        stack.app.control.purge()  # and are lost: no copy of the tasks is left anywhere
        stack.cluster.restart("cpu1")
        stack.cluster.wait_ready(stack.app, stack.nodes, timeout=120)
        time.sleep(2.0)
        for r in first.values():  # lost: nothing runs them
            assert client.event_status(r.event_id).status is EventStatus.queued

        retried = client.add(notes["boat-1"], id="boat-1")
        assert retried.resumed and retried.duplicate, retried
        assert retried.status is EventStatus.done and retried.observations == 1, retried

        with ThreadPoolExecutor(4) as pool:  # four retries at once: one publishes it again, all answer done
            racing = list(pool.map(lambda _: client.add(notes["boat-2"], id="boat-2"), range(4)))
        assert all(r.status is EventStatus.done and r.observations == 1 and r.duplicate for r in racing), racing
        assert sum(r.resumed for r in racing) == 1, racing

        again = client.add(notes["boat-1"], id="boat-1")
        assert again.duplicate and not again.resumed and again.status is EventStatus.done, again
        midway = _killed_mid_stage(stack, client)
        final = {r.event_id: client.event_status(r.event_id) for r in [*first.values(), midway]}
        hits = client.search("where are the dinghy oars?", user="ann").hits
        assert any("blue locker" in h.text for h in hits), hits
    for cid in notes:
        eid = add_event_id(stack.tenant, "ann", cid)
        received = stack.cluster.count_in_logs(f"Task workers.ingest.ingest[{eid}] received", "cpu")
        assert received == 1, (cid, received)  # published again once, run once

    # ann's consolidation lock held by a process that is then killed: taken within the lease, not the 600 s ttl
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, stack.redis_url, f"consolidate:{stack.tenant}:ann"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert _consolidate(stack, "ann") == 0  # held by a live process: nothing done
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        killed = time.monotonic()
        lock = redis.Redis.from_url(stack.redis_url)
        while lock.exists(f"engram:lock:consolidate:{stack.tenant}:ann"):
            assert time.monotonic() - killed < LOCK_LEASE_S + 10, "a dead holder's lock outlived its lease"
            time.sleep(0.05)
        taken = time.monotonic() - killed
        lock.close()
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert taken <= LOCK_LEASE_S + 0.5, taken
    assert _consolidate(stack, "ann") >= 1  # at once: the lock lapsed
    counts = stop_and_count(stack, final, {"ann"})
    assert counts["observations"] == 3, counts
    print(
        f"\nlost additions taken up by their retries: {counts}; a killed holder's consolidation lock lapsed "
        f"{taken:.1f} s after its death; total {time.monotonic() - t0:.1f} s"
    )


MIDWAY = "The outboard's spare shear pin is taped inside the fuel locker lid"


def _killed_mid_stage(stack, client):
    """An addition lost mid-pipeline: the store worker stopped (SIGTERM: a SIGKILL would leave what it held
    unacknowledged until the broker's 30 min visibility timeout, and the broker never quiet for the final count),
    the cpu worker ingests, perceives and embeds the addition and hands its store task to the store queue, which is
    then emptied (the task lost, as a broker that lost it would), so the event is ``processing`` with no task
    anywhere. Its retry takes it up, runs it again and answers once it is stored, with one observation."""
    stack.cluster.kill("store", signal.SIGTERM)
    first = client.add(MIDWAY, id="boat-3")
    deadline = time.monotonic() + 120
    while broker_state(stack.redis_url)[0].get("store", 0) < 1:  # perceived and embedded: the store task waits
        assert time.monotonic() < deadline, (broker_state(stack.redis_url), client.event_status(first.event_id))
        time.sleep(0.2)
    stack.app.control.purge()
    stack.cluster.restart("store")
    stack.cluster.wait_ready(stack.app, stack.nodes, timeout=120)
    stuck = client.event_status(first.event_id)
    assert stuck.status is EventStatus.processing and stuck.observations == 0, stuck  # nothing will finish it
    retried = client.add(MIDWAY, id="boat-3")
    assert retried.resumed and retried.status is EventStatus.done and retried.observations == 1, retried
    assert any("shear pin" in h.text for h in client.search("where is the spare shear pin?", user="ann").hits)
    return retried


#: Holds the lock named by argv[2] on the Redis ledger at argv[1] (its default lease) until killed.
_HOLDER = """
import sys, time
from engram.workers.stores.ledger import RedisLedger
with RedisLedger(sys.argv[1]).try_lock(sys.argv[2], 600) as got:
    print("held" if got else "busy", flush=True)
    time.sleep(600)
"""


def _consolidate(stack, user: str) -> int:
    """``consolidate_user`` of ``user`` on the cluster's store worker: the episodic memories it wrote."""
    return stack.app.send_task("workers.consolidate.consolidate_user", args=[stack.tenant, user]).get(timeout=120)
