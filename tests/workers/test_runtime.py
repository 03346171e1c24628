"""Stage error handling: bad input fails at once, transient errors are retried and fail only when the
retries are exhausted, with the stage and reason in the ledger."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest

from engram.schemas.events import EventStatus, MediaEvent, MediaKind
from engram.workers.app import app
from engram.workers.media.decode import MediaError
from engram.workers.runtime import STAGE_TASK_OPTIONS, runtime, stage

calls: list[str] = []


def _event() -> MediaEvent:
    sha = hashlib.sha256(b"x").hexdigest()
    return MediaEvent(
        tenant_id="acme",
        user_id="alice",
        device_id="laptop",
        kind=MediaKind.text,
        object_key=f"media/acme/{sha}.json",
        sha256=sha,
        size=1,
        mime_type="application/json",
        captured_at=datetime(2024, 5, 1, tzinfo=UTC),
    )


@app.task(
    name="tests.flaky",
    **{**STAGE_TASK_OPTIONS, "max_retries": 2, "retry_backoff": False, "retry_jitter": False, "default_retry_delay": 0},
)
def flaky(event: MediaEvent, fail_times: int, error: str) -> str:
    """Raise ``error`` the first ``fail_times`` calls, inside the stage guard."""
    rt = runtime()
    with stage(rt, event.event_id, "flaky"):
        calls.append(error)
        if len(calls) <= fail_times:
            raise ConnectionError("broker restarting") if error == "transient" else MediaError("corrupt thing")
    return "ok"


def _run(engram_env, fail_times: int, error: str):
    calls.clear()
    ev = _event()
    engram_env.ledger.record_queued(ev)
    result = flaky.apply(args=[ev, fail_times, error])
    return ev, result


def test_transient_error_is_retried_then_succeeds(engram_env):
    ev, result = _run(engram_env, fail_times=2, error="transient")
    assert result.get() == "ok" and len(calls) == 3
    assert engram_env.ledger.get(ev.event_id).status is EventStatus.queued  # never marked failed


def test_transient_error_fails_when_retries_are_exhausted(engram_env):
    ev, result = _run(engram_env, fail_times=10, error="transient")
    assert len(calls) == 3  # the first try and two retries
    rec = engram_env.ledger.get(ev.event_id)
    assert rec.status is EventStatus.failed and rec.stage == "flaky"
    assert "ConnectionError: broker restarting (retries exhausted)" == rec.reason


def test_bad_input_fails_at_once_without_retry(engram_env):
    ev, _ = _run(engram_env, fail_times=10, error="bad")
    assert len(calls) == 1
    rec = engram_env.ledger.get(ev.event_id)
    assert (rec.status, rec.stage, rec.reason) == (EventStatus.failed, "flaky", "corrupt thing")


def test_bulk_work_collects_less_often_and_restores_the_collector():
    """Inside ``bulk_work`` what was allocated before is frozen out of collections and young collections are rarer;
    after it (also when the block raises) the thresholds and the frozen set are as they were."""
    import gc

    from engram.workers.runtime import BULK_GC_THRESHOLDS, bulk_work

    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with pytest.raises(RuntimeError), bulk_work():
        assert gc.get_threshold() == BULK_GC_THRESHOLDS
        assert gc.get_freeze_count() > frozen or frozen  # frozen by us, unless the process froze its own
        raise RuntimeError("a failed ingest")
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen


def test_a_worker_process_freezes_what_it_holds_at_start_and_collects_young_objects_less_often():
    """The receiver a worker's processes run as they start (``worker_process_init``, ``worker_ready``): what the
    process holds then is out of every collection, and young collections wait ``WORKER_GC_THRESHOLDS[0]``
    allocations."""
    import gc

    from engram.workers.app import _tune_collector
    from engram.workers.runtime import WORKER_GC_THRESHOLDS

    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    held = object.__new__(type("Held", (), {}))  # tracked by the collector, made before the worker "starts"
    try:
        _tune_collector()
        assert gc.get_threshold() == WORKER_GC_THRESHOLDS
        assert gc.get_freeze_count() > frozen and not any(o is held for o in gc.get_objects())
    finally:
        gc.set_threshold(*before)
        if not frozen:
            gc.unfreeze()


def test_a_lingering_lease_hands_the_store_to_a_process_that_asks_and_ignores_a_dead_ones_request(engram_env):
    """A lease lingering for 600 s keeps the store open between sessions; another process that waits for the store
    (20 s at most) gets it, because the lease reads its request and closes the store, and the lease's next session
    takes it back. A request left by a process that is gone is removed, and the lease keeps the store."""
    import subprocess
    import sys
    import threading
    import time

    from engram.workers.runtime import StoreLease
    from engram.workers.stores.vectors import OBSERVATIONS, WANTED_SUFFIX

    lease = StoreLease(linger=600)
    with lease.session() as rt:
        rt.vectors.ensure(OBSERVATIONS)
    assert lease.held
    store = engram_env.settings.data_dir / "vectors"

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    request = store.with_name(f"{store.name}{WANTED_SUFFIX}{gone}")
    request.touch()
    deadline = time.monotonic() + 30
    while request.exists():
        assert time.monotonic() < deadline, "a dead process's request was never removed"
        time.sleep(0.05)
    assert lease.held
    watchers = []  # over five looks (HANDOFF_POLL_S): the same one thread, not a thread per look
    for _ in range(20):
        watchers += [t for t in threading.enumerate() if t.name == "engram-store-lease"]
        time.sleep(0.05)
    assert len(watchers) == 20 and len(set(watchers)) == 1

    code = (
        "import sys; from engram.workers.stores.vectors import EdgeVectorStore\n"
        "s = EdgeVectorStore(sys.argv[1], wait=20); print('points', s.count('observations')); s.close()"
    )
    out = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "points 0" in out.stdout, out.stderr[-2000:]
    assert not lease.held
    assert not list(store.parent.glob(f"{store.name}{WANTED_SUFFIX}*"))  # the waiter took its request away

    with lease.session() as rt:
        assert rt.vectors.count(OBSERVATIONS) == 0
    assert lease.held
    lease.close()
    assert not lease.held


def test_a_lease_opens_an_existing_store_only_when_no_other_process_holds_it_and_never_makes_one(engram_env):
    """``open_existing`` makes no store where there is none; opens one that exists and keeps it (lingering);
    and leaves one held by another process to it, at once, without asking it to let go."""
    import subprocess
    import sys
    import time

    from engram.workers.runtime import StoreLease, reset_runtimes
    from engram.workers.stores.vectors import OBSERVATIONS, WANTED_SUFFIX

    store = engram_env.settings.data_dir / "vectors"
    reset_runtimes()
    lease = StoreLease(linger=600)
    assert not store.exists()
    assert lease.open_existing() is None and not store.exists() and not lease.held
    engram_env.vectors.ensure(OBSERVATIONS)
    reset_runtimes()  # the fixture's hold let go
    assert lease.open_existing() == 0 and lease.held
    lease.close()

    code = (
        "import sys, time; from engram.workers.stores.vectors import EdgeVectorStore\n"
        "s = EdgeVectorStore(sys.argv[1]); s.hold(); print('held', flush=True); time.sleep(30)"
    )
    other = subprocess.Popen([sys.executable, "-c", code, str(store)], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        assert StoreLease(linger=600).open_existing() is None
        assert time.monotonic() - t0 < 5
        assert not list(store.parent.glob(f"{store.name}{WANTED_SUFFIX}*"))  # nothing asked of the holder
    finally:
        other.kill()
        other.wait()


def test_a_lease_letting_go_closes_its_own_store_only(engram_env, tmp_path, monkeypatch):
    """When a lingering lease lets its store go, only that store is closed: a Runtime of another data dir in the same
    process (a test's, or a command working on a second store) keeps its store open and its file lock held."""
    import time

    from engram.workers.runtime import StoreLease, runtime
    from engram.workers.stores.vectors import OBSERVATIONS

    other = runtime()  # this test's data dir (engram_env)
    other.vectors.ensure(OBSERVATIONS)
    other_store = other.vectors

    monkeypatch.setenv("ENGRAM_DATA_DIR", str(tmp_path / "leased"))
    lease = StoreLease(linger=0.3)
    with lease.session() as rt:
        rt.vectors.ensure(OBSERVATIONS)
        leased_store = rt.vectors
    assert lease.held
    deadline = time.monotonic() + 10
    while lease.held:
        assert time.monotonic() < deadline, "the lease never let its store go"
        time.sleep(0.05)
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(engram_env.settings.data_dir))
    assert runtime() is other and other.vectors is other_store  # not forgotten, not reopened
    assert other_store.count(OBSERVATIONS) == 0  # still open: a closed store would raise
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(tmp_path / "leased"))
    assert runtime().vectors is not leased_store  # the leased one was closed and forgotten: opened anew
