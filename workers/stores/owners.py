"""Which process holds a piece of shared work, and whether it still lives: a process is named by its pid and its
start time (psutil's ``create_time``, seconds since the epoch), so a pid the system gave again to another process
after the holder died is not taken for the holder.

Used by the SQLite ledger (``workers.stores.ledger``) for the owner of each unfinished event and of each lock on
the embedded default, where several engram processes (``ingest``, ``watch``, ``capture``, ``add``, ``mcp``) share one
data dir: an event or a lock is taken over only when its holder is gone, at once, never while it lives. The same
idea as a lease in a distributed lock manager (Gray and Cheriton, "Leases", SOSP 1989), with the kernel's process
table as the clock: on one machine a holder's death is known exactly, without waiting for a lease to run out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

#: Start times are compared to this many seconds (psutil reads them from /proc in clock ticks: 0.01 s).
START_TOLERANCE_S = 0.05


@dataclass(frozen=True)
class ProcessId:
    """A process: ``pid`` and ``started``, its start time (epoch seconds, from ``psutil.Process.create_time``)."""

    pid: int
    started: float


_this: ProcessId | None = None


def this_process() -> ProcessId:
    """This process (read once per process; a forked child reads its own)."""
    global _this
    if _this is None or _this.pid != os.getpid():
        _this = ProcessId(os.getpid(), round(psutil.Process().create_time(), 2))
    return _this


def is_alive(pid: int | None, started: float | None) -> bool:
    """Whether the process ``pid`` that started at ``started`` still runs. A zombie (killed, not yet reaped) is
    gone; a process of another user is alive (its start time is still readable); ``pid`` None (a holder recorded
    before owners were) is gone."""
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return started is None or abs(proc.create_time() - started) <= START_TOLERANCE_S
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
