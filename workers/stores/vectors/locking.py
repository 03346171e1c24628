"""The embedded store between processes and at this process's end: its file lock taken (``take_lock``), the request
a process waiting for it keeps beside it (``WANTED_SUFFIX``) and whether a live process waits (``waiting``), and the
stores this process opened (``opening.open_vector_store``), closed at exit before filelock releases their locks
(``close_vector_stores``).
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path
from typing import Any

import structlog

from engram.workers.stores.vectors.base import StoreBusy, VectorStore

log = structlog.get_logger(__name__)

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


def close_vector_store(store: VectorStore) -> None:
    """Close one store this process opened (flushed, its lock released) and forget it, so the next
    ``open_vector_store`` of its location opens it again; the process's other stores stay open."""
    with open_stores_lock:
        for where, opened in list(open_stores.items()):
            if opened is store:
                del open_stores[where]
    store.close()


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


def request_file(root: Path, pid: int) -> Path:
    """The file process ``pid`` keeps beside the lock of the embedded store at ``root`` while it waits for it:
    ``<root>.wanted-<pid>``."""
    return root.with_name(f"{root.name}{WANTED_SUFFIX}{pid}")


def waiting(root: Path) -> bool:
    """Whether another live process waits for the lock of the embedded store at ``root`` (a ``request_file`` of
    its ``take_lock``). A request whose process is gone (killed while it waited) is removed and not counted."""
    for request in root.parent.glob(f"{root.name}{WANTED_SUFFIX}*"):
        pid = request.name[len(root.name) + len(WANTED_SUFFIX) :]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        if alive(int(pid)):
            return True
        request.unlink(missing_ok=True)
    return False


def take_lock(file_lock: Any, root: Path, wait: float | None) -> None:
    """Take ``file_lock`` (filelock's ``FileLock`` on ``<root>.lock``, the embedded store's at ``root``) unless this
    process holds it already. When another process holds it: with ``wait`` None, raise StoreBusy at once, neither
    waiting nor asking the holder to let go (a warm-up that may do without); else keep a ``request_file`` beside the
    lock while waiting up to ``wait`` seconds (a holder with nothing to do reads it as "close the store now":
    ``waiting``), then raise StoreBusy."""
    from filelock import Timeout  # filelock is imported with the first embedded store opened

    if file_lock.is_locked:
        return
    root.parent.mkdir(parents=True, exist_ok=True)
    try:
        file_lock.acquire(timeout=0)
        close_before_filelock_at_exit()
        return
    except Timeout as exc:
        if wait is None:
            raise StoreBusy(f"the embedded store {root} is open in another engram process") from exc
    # held by another process: say so, so a holder that is only lingering lets it go now
    wanted = request_file(root, os.getpid())
    request: Path | None = wanted
    try:
        wanted.touch()
    except OSError as exc:  # a folder this process may not write: it waits without asking
        log.info("cannot ask the store's holder to let it go", path=str(request), error=str(exc)[:200])
        request = None
    try:
        file_lock.acquire(timeout=wait)
        close_before_filelock_at_exit()
    except Timeout as exc:
        raise StoreBusy(
            f"the embedded store {root} is open in another engram process (waited "
            f"{wait:g} s); wait for it to finish, or run a Qdrant server and set "
            "ENGRAM_QDRANT_URL"
        ) from exc
    finally:
        if request is not None:
            request.unlink(missing_ok=True)
