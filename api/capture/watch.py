"""Publish files as they appear in a folder (a screenshot folder, a recorder's output folder).

watchdog reports created, modified and moved-in files; a file is published once its size and
modification time have not changed for ``settle`` seconds, so a file still being written is not sent
half-done. Ownership: watchdog's observer thread only records paths in ``_pending`` (under ``_lock``);
the thread that calls ``run`` owns stat-ing and publishing.

``engram watch`` publishes through the API (``--api``), or on the embedded default ingests each batch of
settled files in the calling process (``api.cli.main.ingest_paths``) inside a ``workers.runtime.StoreLease``: the
embedded store stays open between batches and is left at once to another process that asks for it, so ``engram
search`` and other commands run between batches.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

IGNORED_SUFFIXES = (".tmp", ".part", ".partial", ".crdownload", ".download", ".swp", "~")


def ignored(path: Path) -> bool:
    """Hidden files and the usual in-progress names (``.part``, ``.tmp``, ``~``...) are never published."""
    return path.name.startswith(".") or path.name.lower().endswith(IGNORED_SUFFIXES)


class FolderWatcher:
    """Calls ``publish(path)`` for each new or changed file under ``folder`` once it is stable.

    ``settle``: seconds a file's (size, mtime) must stay unchanged; ``poll``: seconds between checks;
    ``existing``: also publish the files already there at start. An exception from ``publish`` is
    passed to ``on_error(path, exc)`` (default: re-raised) and the file is not retried until it changes.
    Empty files wait until they get content. ``on_ready()`` is called once the folder is being watched
    (files that appear from then on are seen). ``on_batch(paths)``, when given, is called after each check
    that published files, with them (e.g. to release a store held for the batch).
    """

    def __init__(
        self,
        folder: Path,
        publish: Callable[[Path], object],
        settle: float = 2.0,
        poll: float = 0.5,
        recursive: bool = True,
        existing: bool = False,
        on_error: Callable[[Path, Exception], None] | None = None,
        on_ready: Callable[[], None] | None = None,
        on_batch: Callable[[list[Path]], None] | None = None,
    ) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise NotADirectoryError(f"{folder}: not a folder")
        self.publish, self.settle, self.poll, self.recursive = publish, settle, poll, recursive
        self.existing, self.on_error, self.on_ready, self.on_batch = existing, on_error, on_ready, on_batch
        self._pending: dict[Path, tuple[int, int, float] | None] = {}
        self._done: dict[Path, tuple[int, int]] = {}
        self._lock = threading.Lock()

    def _note(self, path: str | bytes) -> None:
        p = Path(os.fsdecode(path))
        if not ignored(p):
            with self._lock:
                self._pending.setdefault(p, None)

    def run(self, stop: threading.Event) -> None:
        """Watch until ``stop`` is set (or KeyboardInterrupt); the observer thread is stopped on exit."""
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer

        watcher = self

        class Handler(FileSystemEventHandler):
            def on_created(self, event):
                if not event.is_directory:
                    watcher._note(event.src_path)

            def on_modified(self, event):
                if not event.is_directory:
                    watcher._note(event.src_path)

            def on_moved(self, event):
                if not event.is_directory:
                    watcher._note(event.dest_path)

        observer = Observer()
        observer.schedule(Handler(), str(self.folder), recursive=self.recursive)
        observer.start()
        try:
            if self.existing:
                pattern = "**/*" if self.recursive else "*"
                for p in sorted(self.folder.glob(pattern)):
                    if p.is_file():
                        self._note(str(p))
            if self.on_ready is not None:
                self.on_ready()
            while not stop.wait(self.poll):
                self.check()
        finally:
            observer.stop()
            observer.join(timeout=5)

    def check(self, now: float | None = None) -> list[Path]:
        """Publish the pending files that became stable; returns them. Called by ``run`` every ``poll``."""
        now = time.monotonic() if now is None else now
        with self._lock:
            pending = dict(self._pending)
        ready = []
        for path, seen in pending.items():
            try:
                st = path.stat()
            except OSError:  # gone (renamed, deleted)
                self._forget(path)
                continue
            sig = (st.st_size, st.st_mtime_ns)
            if seen is None or seen[:2] != sig:
                with self._lock:
                    self._pending[path] = (*sig, now)
                continue
            if now - seen[2] < self.settle:
                continue
            self._forget(path)
            if st.st_size == 0 or self._done.get(path) == sig:
                continue
            self._done[path] = sig
            try:
                self.publish(path)
            except Exception as exc:
                if self.on_error is None:
                    raise
                self.on_error(path, exc)
            ready.append(path)
        if ready and self.on_batch is not None:
            self.on_batch(ready)
        return ready

    def retry(self, paths: list[Path]) -> None:
        """Check ``paths`` again (published anew once stable), e.g. after a batch that could not be stored."""
        with self._lock:
            for path in paths:
                self._done.pop(path, None)
                self._pending.setdefault(path, None)

    def _forget(self, path: Path) -> None:
        with self._lock:
            self._pending.pop(path, None)


class EmbeddedBatches:
    """``FolderWatcher``'s ``publish`` and ``on_batch`` for the embedded default: ``publish`` only collects the
    settled files; ``on_batch`` ingests them together with ``ingest(paths)`` (``api.cli.main.ingest_paths``: the same
    exact-duplicate, near-duplicate and resume rules as ``engram ingest``) in a session of a
    ``workers.runtime.StoreLease`` that keeps the store open ``linger`` seconds after a batch (the next batch does
    not open it again) unless another process asks for it, and passes its result (``{'done'|'skipped'|'failed'|
    'ignored': [(path, record or reason)]}``) to ``report``. While another process holds the store past
    ``ENGRAM_STORE_WAIT_SECONDS`` (StoreBusy), the batch is left for the next check (``FolderWatcher.retry``) and
    ``on_busy(exc)`` is told. ``close`` releases the store (the watch is over). Owned by the thread that runs the
    watcher."""

    def __init__(
        self,
        ingest: Callable[[list[Path]], dict[str, list]],
        report: Callable[[dict[str, list]], None],
        on_busy: Callable[[Exception], None] | None = None,
        linger: float = 0.0,
    ) -> None:
        self.ingest, self.report, self.on_busy, self.linger = ingest, report, on_busy, linger
        self.watcher: FolderWatcher | None = None
        self._batch: list[Path] = []
        self._lease = None  # workers.runtime.StoreLease, made by the first batch (the workers' stack loads then)

    def close(self) -> None:
        """Release the store now."""
        if self._lease is not None:
            self._lease.close()

    def publish(self, path: Path) -> None:
        """Collect one settled file for the batch."""
        self._batch.append(path)

    def on_batch(self, paths: list[Path]) -> None:
        """Ingest the collected files in one store session."""
        from engram.workers.runtime import StoreLease
        from engram.workers.stores.vectors import StoreBusy

        batch, self._batch = self._batch, []
        if not batch:
            return
        if self._lease is None:
            self._lease = StoreLease(self.linger)
        try:
            with self._lease.session():
                result = self.ingest(batch)
        except StoreBusy as exc:
            if self.watcher is not None:
                self.watcher.retry(batch)
            if self.on_busy is not None:
                self.on_busy(exc)
            return
        self.report(result)
