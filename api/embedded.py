"""The work of the ``engram`` commands on the configured runtime (the embedded default, or through the broker):
ingesting files and folders with a progress bar (``ingest_paths``, used by ``engram ingest``, ``watch`` and
``demo``), and the service layer of the ``engram`` commands (``service_call``: the process's one
``api.service.embedded.EmbeddedService``, whose timeout is ``ENGRAM_SERVICE_TIMEOUT_SECONDS``).

Importing this module is light (``engram --help`` and the slim API image import the CLI): the workers' stack
(runtime, stores, stages) is imported by the functions, when they run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text

from engram.api.console import STORE_HOLD_SECONDS, err, shown_name
from engram.api.service.base import ServiceError
from engram.schemas.events import EventStatus, MediaEvent
from engram.schemas.search import SearchRequest, SearchResponse

_service: Any = None  # the process's EmbeddedService, made by the first command that asks


@dataclass
class _IngestRun:
    """One ``ingest_paths`` call: its runtime ``rt``, the outcome ``out`` by status, the (tenant, user) pairs to
    consolidate, and the files published but not yet run (``pending``, run a batch at a time)."""

    rt: Any  # workers.runtime.Runtime
    tenant: str
    user: str
    progress: Progress
    task: TaskID | None = None
    out: dict[str, list] = field(
        default_factory=lambda: {k: [] for k in ("done", "skipped", "failed", "ignored", "resumed")}
    )
    users: set[tuple[str, str]] = field(default_factory=set)
    pending: list[tuple[Path, MediaEvent]] = field(default_factory=list)

    def fail(self, path: Path, reason: str) -> None:
        """Record ``path`` as failed with ``reason`` and say so on stderr."""
        self.out["failed"].append((path, reason))
        err.print(Text.assemble(("failed ", "red"), f"{shown_name(path)}: {reason}"))
        self.progress.advance(self.task)

    def resume(self, quiet: bool) -> None:
        """Finish the events a run killed before left unfinished (``api.local.resume_interrupted``), first."""
        from engram.api.local import resume_interrupted  # the workers' stack, when a command runs

        for record in resume_interrupted(self.rt):
            self.out["resumed"].append((Path(record.source_name or record.object_key), record))
            self.users.add((record.tenant_id, record.user_id))
            if not quiet:
                err.print(
                    Text(
                        f"resumed {shown_name(record.source_name or record.event_id)} (interrupted earlier): "
                        f"{record.status.value}"
                    )
                )

    def _resumed_copy(self, record: Any) -> Any:
        """The record of the event this run resumed (``resume``) and finished, taken out of ``out['resumed']``, when
        ``record`` (a file of this run) was skipped as its exact duplicate: the same content of the same user, whose
        event an earlier run left unfinished. None otherwise. So the summary counts such a file done, not skipped."""
        if record.status is not EventStatus.skipped:
            return None
        for at, (_, earlier) in enumerate(self.out["resumed"]):
            if (earlier.tenant_id, earlier.user_id, earlier.sha256) == (
                record.tenant_id,
                record.user_id,
                record.sha256,
            ) and earlier.status is EventStatus.done:
                del self.out["resumed"][at]
                return earlier
        return None

    def classify(self, path: Path):
        """``path``'s ``api.local.Candidate``, or None when it failed (unreadable, larger than
        ``ENGRAM_MAX_OBJECT_BYTES``, a detector's crash) or is not media (recorded as ignored). A file over the
        limit is failed before anything reads it: the conversation detectors parse a whole file, and it would be
        hashed and copied into the object store only for ingest to refuse it."""
        from engram.api.local import classify  # the workers' stack, when a command runs

        try:
            size, limit = path.stat().st_size, self.rt.settings.max_object_bytes
            if size > limit:
                self.fail(path, f"too large: {size} bytes exceeds ENGRAM_MAX_OBJECT_BYTES ({limit}); not read")
                return None
            cand = classify(path)
        except OSError as exc:
            self.fail(path, f"cannot read: {exc.strerror or exc}")
            return None
        except Exception as exc:  # noqa: BLE001 (a detector's crash, a RecursionError: this file only)
            self.fail(path, f"cannot tell what it is: {type(exc).__name__}: {exc}"[:500])
            return None
        if cand.kind is None:
            self.out["ignored"].append((path, "not media or a conversation file"))
            self.progress.advance(self.task)
            return None
        return cand

    def run_pending(self) -> None:
        """Run the published events together (``api.local.run_events``) and record each file's outcome. Raises
        StoreBusy or StoreCorrupt (the store, not these files: nothing else can be stored either)."""
        from engram.api.local import run_events  # the workers' stack, when a command runs
        from engram.workers.stores.vectors import StoreBusy, StoreCorrupt  # idem

        try:
            records = run_events(self.rt, [event for _, event in self.pending])
        except (StoreBusy, StoreCorrupt):
            raise
        except Exception as exc:  # noqa: BLE001 (the batch's files fail with the reason; the run goes on)
            records = [f"{type(exc).__name__}: {exc}"[:500]] * len(self.pending)
        for (path, _), record in zip(self.pending, records, strict=True):
            if isinstance(record, str):
                self.fail(path, record)
                continue
            if (resumed := self._resumed_copy(record)) is not None:
                record = resumed  # this file is the one the run resumed: done by this run, not a duplicate
            status = (
                record.status.value
                if record.status in (EventStatus.done, EventStatus.skipped, EventStatus.failed)
                else "failed"
            )
            self.out[status].append((path, record))
            if record.status is EventStatus.failed:
                err.print(
                    f"[red]failed[/red] {escape(shown_name(path))}: {escape(str(record.reason))} "
                    f"(stage {record.stage})",
                    highlight=False,
                )
            elif status == "failed":  # the run ended with the event unfinished: never counted in silence
                err.print(
                    f"[red]failed[/red] {escape(shown_name(path))}: still {record.status.value} when the run "
                    f"ended (stage {record.stage}); `engram ingest` again resumes it",
                    highlight=False,
                )
            self.users.add((self.tenant, self.user))
            self.progress.advance(self.task)
        self.pending.clear()


def ingest_paths(
    paths: list[Path],
    tenant: str,
    user: str,
    device: str,
    captured_at: datetime | None = None,
    app_name: str | None = None,
    window: str | None = None,
    consolidate: bool = True,
    quiet: bool = False,
) -> dict[str, list]:
    """Ingest files and folders on the configured runtime, showing progress on stderr (none with ``quiet``);
    returns {'done'|'skipped'|'failed'|'ignored'|'resumed': [...]} where each item is (path, record or reason).
    Events a killed run left unfinished are run first ('resumed'). One bad file never stops the rest.

    Raises FileNotFoundError for a path that does not exist, and StoreBusy or StoreCorrupt
    (``workers.stores.vectors``) when the store cannot be used.
    """
    from engram.workers.runtime import bulk_work, runtime  # the workers' stack, when it runs

    with bulk_work():
        return _ingest_paths(runtime(), paths, tenant, user, device, captured_at, app_name, window, consolidate, quiet)


def _ingest_paths(
    rt: Any,
    paths: list[Path],
    tenant: str,
    user: str,
    device: str,
    captured_at: datetime | None,
    app_name: str | None,
    window: str | None,
    consolidate: bool,
    quiet: bool,
) -> dict[str, list]:
    from engram.api.local import RUN_BATCH_FILES, iter_files, publish_file  # the workers' stack, when it runs
    from engram.workers.pipeline import release_held  # idem
    from engram.workers.stores.vectors import StoreBusy, StoreCorrupt  # idem

    files = list(iter_files(paths))
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[current]}"),
        console=err,
        disable=quiet,
        transient=False,
    )
    run = _IngestRun(rt, tenant, user, progress)
    run.resume(quiet)
    with progress:
        run.task = progress.add_task("ingest", total=len(files), current="")
        try:
            for path in files:
                progress.update(run.task, current=shown_name(path.name)[:50])
                if (cand := run.classify(path)) is None:
                    continue
                try:
                    run.pending.append(
                        (path, publish_file(run.rt, cand, tenant, user, device, captured_at, app_name, window))
                    )
                except (StoreBusy, StoreCorrupt):
                    raise  # the store, not this file: nothing else can be stored either
                except Exception as exc:  # noqa: BLE001 (one file never stops the batch, whatever it raises)
                    run.fail(path, f"{type(exc).__name__}: {exc}"[:500])
                    continue
                if len(run.pending) >= RUN_BATCH_FILES:
                    run.run_pending()
            run.run_pending()
        except (StoreBusy, StoreCorrupt):
            progress.remove_task(run.task)  # the store's one line alone on stderr: no bar left half done above it
            release_held(run.rt, [event.event_id for _, event in run.pending])  # published, not run: not a death
            raise
    if consolidate and run.users:
        from engram.workers.consolidate import consolidate_user  # a stage: the workers' stack

        for t, u in sorted(run.users):
            consolidate_user.delay(t, u)
    return run.out


def embedded_service() -> Any:
    """The process's ``EmbeddedService`` (made on first use; the store lingers ``STORE_HOLD_SECONDS`` after a call
    unless another engram process asks for it)."""
    global _service
    if _service is None:
        from engram.api.service.embedded import EmbeddedService  # the workers' stack, when a command runs

        _service = EmbeddedService(linger=STORE_HOLD_SECONDS)
    return _service


def close_embedded_service() -> None:
    """Release the process's ``EmbeddedService``, if one was made: its store closed now and its lingering (up to
    ``STORE_HOLD_SECONDS``) stopped, so its store's lock is not held for minutes after the last call. For a process
    that goes on with another data dir, e.g. the tests."""
    global _service
    if _service is not None:
        _service.close()
        _service = None


@contextmanager
def service_call() -> Iterator[Any]:
    """Yield the process's ``EmbeddedService`` for a command's calls; a ``ServiceError`` it raises (the store busy
    past ``ENGRAM_STORE_WAIT_SECONDS``, no worker answering within ``ENGRAM_SERVICE_TIMEOUT_SECONDS``) ends the
    command with one line on stderr and exit status 3 (``schemas.ask.AskFailed`` and the store's own errors pass)."""
    try:
        yield embedded_service()
    except ServiceError as exc:
        err.print(Text.assemble(("error: ", "red"), " ".join(str(exc).split())), soft_wrap=True)
        raise SystemExit(3) from exc


def run_search(req: SearchRequest) -> SearchResponse:
    """Run a search through the service layer (``service_call``: inline on the embedded default, through the
    ``query`` queue with a broker)."""
    with service_call() as service:
        return service.search(req)
