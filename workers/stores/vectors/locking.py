"""The embedded store between processes and at this process's end: the request a process waiting for the store's
file lock keeps beside it (``WANTED_SUFFIX``), whether that process still lives, and the stores this process
opened (``opening.open_vector_store``), closed at exit before filelock releases their locks
(``close_vector_stores``).
"""

from __future__ import annotations

import atexit
import os
import threading

from engram.workers.stores.vectors.base import VectorStore

#: Beside the embedded store's lock (``<root>.lock``), a process waiting for it keeps ``<root>.wanted-<pid>``
#: (``EdgeVectorStore.hold``), which a holder with nothing to do reads as "close the store now" (``wanted``).
WANTED_SUFFIX = ".wanted-"


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0: nothing is sent; one owned by another user exists too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: The stores this process opened, by location (``opening.open_vector_store``), and the lock opening one takes.
open_stores: dict[str, VectorStore] = {}
open_stores_lock = threading.Lock()


@atexit.register
def close_vector_stores() -> None:
    """Close every store this process opened (flushes the embedded store and releases its lock)."""
    with open_stores_lock:
        for store in open_stores.values():
            store.close()
        open_stores.clear()


_exit_order_set = False


def close_before_filelock_at_exit() -> None:
    """Make ``close_vector_stores`` run at exit before filelock's own exit handler, which releases the locks the
    process still holds (filelock 4, when only the main thread is left). Exit handlers run last registered
    first, and filelock registers its handler when it is first imported, after this module registered
    ``close_vector_stores``: a process ending with the store open released the store's lock first, and another
    process opened a shard while this one still flushed and closed it and wrote ``CLOSED_FILE`` (seen with two
    ``engram ingest`` sharing a data dir). Called once the lock is taken (filelock is imported by then)."""
    global _exit_order_set
    if not _exit_order_set:
        atexit.unregister(close_vector_stores)
        atexit.register(close_vector_stores)
        _exit_order_set = True
