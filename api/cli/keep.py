"""``engram backup DEST`` and ``engram restore SRC``: the embedded default's data dir, or a cluster's store, objects
and Redis ledger (ENGRAM_BROKER_URL set), copied to a folder or ``s3://bucket/prefix`` and back (the engines:
``workers.stores.backup`` and ``workers.stores.cluster_backup``; registered on the main app by ``api.cli.main.main``).
Progress goes to stderr; ``--json`` prints one summary object on stdout. See docs/keep.md."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn, TransferSpeedColumn
from rich.text import Text

from engram.api.console import console, err

_S3_HELP = (
    "S3 endpoint for an s3:// DEST, e.g. http://127.0.0.1:8333 (default: AWS_ENDPOINT_URL_S3, "
    "AWS_ENDPOINT_URL, else ENGRAM_S3_ENDPOINT). Keys: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, else "
    "ENGRAM_S3_ACCESS_KEY / ENGRAM_S3_SECRET_KEY."
)


def fail(message: str, code: int = 2) -> typer.Exit:
    """The exit of a keeping command (backup, restore, export --archive, import) that cannot go on: ``message``
    printed on stderr as one line; raise what it returns."""
    err.print(Text.assemble(("error: ", "red"), " ".join(message.split())), soft_wrap=True)
    return typer.Exit(code)


def _s3_options(endpoint: str | None) -> dict[str, Any]:
    """The ``S3Repository`` keyword arguments from ``--s3-endpoint``, the AWS variables, else engram's S3
    settings."""
    from engram.schemas.settings import get_settings

    settings = get_settings()
    url = (
        endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or settings.s3_endpoint
    )
    if not url:
        return {}
    secure = settings.s3_secure
    if "://" in url:
        scheme, url = url.split("://", 1)
        secure = scheme == "https"
    return {
        "endpoint": url.rstrip("/"),
        "secure": secure,
        "access_key": os.environ.get("AWS_ACCESS_KEY_ID") or settings.s3_access_key,
        "secret_key": os.environ.get("AWS_SECRET_ACCESS_KEY") or settings.s3_secret_key,
        "region": os.environ.get("AWS_REGION") or settings.s3_region,
    }


def cluster_settings(what: str) -> Any:
    """The settings of the cluster ``engram <what>`` works on (ENGRAM_BROKER_URL set:
    ``workers.stores.cluster_backup``, ``workers.archive``), or None for the embedded default's data dir; exits
    with the reason for settings that are neither (a Qdrant server or S3 without a broker)."""
    from engram.schemas.settings import get_settings

    settings = get_settings()
    if settings.broker_url:
        return settings
    if settings.qdrant_url or settings.s3_endpoint:
        raise fail(
            f"engram {what} covers the embedded default's data dir, or a cluster (ENGRAM_BROKER_URL set); "
            "ENGRAM_QDRANT_URL or ENGRAM_S3_ENDPOINT without a broker is neither"
        )
    return None


def _ask_store_worker(settings: Any, find: float = 60.0, timeout: float = 3600.0) -> Any:
    """``cluster_backup.Ask`` for the cluster of ``settings``: the task sent through its broker, its answer awaited
    (``timeout`` seconds: a backup of a large store takes long). A worker serving the task's queue is looked for
    first, for up to ``find`` seconds (the solo store worker answers only between two tasks): none is a one-line
    error at once, not after ``timeout``."""
    from celery import Celery
    from celery.exceptions import TimeoutError as CeleryTimeout

    from engram.workers.app import configure
    from engram.workers.tasks import QUEUE_OF, Task

    app = Celery(f"engram-keep-{os.getpid()}")
    configure(app, settings)

    def served(queue: str) -> bool:
        deadline = time.monotonic() + find
        while True:
            replies = app.control.inspect(timeout=min(3.0, max(find, 0.5))).active_queues() or {}
            if queue in {q["name"] for qs in replies.values() for q in qs}:
                return True
            if time.monotonic() >= deadline:
                return False

    def ask(task: str, args: list[Any]) -> dict[str, Any]:
        queue = QUEUE_OF[Task(task)].value
        if not served(queue):
            raise fail(
                f"no worker serves the {queue} queue here (looked for {find:g} s): start the store worker "
                "(`engram worker --role store`) on the cluster ENGRAM_BROKER_URL names, then run this again"
            )
        result = app.send_task(task, args=args)
        try:
            return result.get(timeout=timeout)
        except CeleryTimeout as exc:
            raise fail(
                f"the store worker did not answer {task} within {timeout:g} s: is `engram worker --role store` running?"
            ) from exc
        finally:
            result.forget()

    return ask


def _progress(quiet: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=quiet,
        transient=False,
    )


class _Bars:
    """One rich bar per phase, fed by the engine's ``progress(phase, done, total)`` from its threads; a bar is
    updated at most every ``every`` seconds (and at its end): an update per block made a 100 k observations'
    restore 0.5 s slower."""

    def __init__(self, progress: Progress, every: float = 0.1) -> None:
        self.progress = progress
        self.every = every
        self.tasks: dict[str, Any] = {}
        self.last: dict[str, float] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if phase not in self.tasks:
            self.tasks[phase] = self.progress.add_task(phase, total=total)
        elif done < total and now - self.last[phase] < self.every:
            return
        self.last[phase] = now
        self.progress.update(self.tasks[phase], completed=done, total=total)


def _bars(progress: Progress, quiet: bool) -> _Bars | None:
    """The engine's progress callback: None with ``--quiet`` or ``--json`` (no bars to draw)."""
    return None if quiet else _Bars(progress)


def backup(
    dest: Annotated[
        str,
        typer.Argument(
            help="A folder (made if missing) or s3://BUCKET/PREFIX. The same DEST again "
            "makes an incremental backup: only new content is written."
        ),
    ],
    s3_endpoint: Annotated[str | None, typer.Option(help=_S3_HELP)] = None,
    include_vault_key: Annotated[
        bool,
        typer.Option(
            "--include-vault-key",
            help="Also copy data_dir/vault.key. Without it the vault's entries are in the backup "
            "still encrypted and the key is not: keep the key elsewhere (or set ENGRAM_VAULT_KEY).",
        ),
    ] = False,
    wait: Annotated[
        float,
        typer.Option(
            min=0,
            help="Seconds to wait for the store while another engram command "
            "works in it (a cluster: for its store worker to answer, "
            "at most 60).",
        ),
    ] = 300.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
) -> None:
    """Back up the embedded default's data dir (store, ledger, objects, vault entries, caches) into DEST.

    Consistent while `engram capture`, `mcp` or `ui` run: the store is held for the moment its files are read
    (they pause, then go on), the ledger and caches are copied with SQLite's backup API. Content is stored by
    BLAKE3 digest, in 64 KiB blocks: a second backup into the same DEST writes only what changed. The snapshot's
    manifest is written last: a backup that is interrupted (killed, a full disk) is never taken for complete,
    and the earlier ones stay usable; run it again and it reuses what was written. Exit 3: the store stayed
    busy past --wait.

    With ENGRAM_BROKER_URL set it backs up that cluster: the store worker copies its closed shards and the Redis
    keys into DEST itself (DEST: s3://... or a folder it shares), then the objects are copied (see docs/keep.md).
    """
    from engram.schemas.errors import StoreError
    from engram.schemas.settings import get_settings
    from engram.workers.stores import backup as engine

    cluster = cluster_settings("backup") is not None
    settings = get_settings()
    data_dir = settings.data_dir
    with _progress(quiet or as_json) as progress:
        try:
            s3 = _s3_options(s3_endpoint)
            repo = engine.open_repository(dest, create=True, s3=s3)
            try:
                if cluster:
                    from engram.workers.stores.cluster_backup import backup_cluster  # the distributed mode's

                    result = backup_cluster(
                        settings,
                        repo,
                        _ask_store_worker(settings, min(wait, 60.0)),
                        s3,
                        progress=_bars(progress, quiet or as_json),
                    )
                else:
                    result = engine.backup(
                        data_dir,
                        repo,
                        wait=wait,
                        include_vault_key=include_vault_key,
                        progress=_bars(progress, quiet or as_json),
                    )
            finally:
                repo.close()
        except engine.BackupError as exc:
            raise fail(str(exc)) from exc
        except StoreError as exc:
            raise fail(str(exc), 3) from exc
        except OSError as exc:
            raise fail(
                f"backup into {dest} failed: {exc.strerror or exc}"
                + (" (the disk is full)" if exc.errno == 28 else "")
                + "; earlier backups there are untouched and complete"
            ) from exc
    if as_json:
        console.print_json(json.dumps(result.to_json()))
        return
    mb = 1e6
    what = "the cluster" if cluster else str(data_dir)
    console.print(
        f"backed up {what} to {result.location}: snapshot {result.snapshot}, {result.files} files, "
        f"{result.logical_bytes / mb:.1f} MB; wrote {result.written_bytes / mb:.1f} MB new "
        f"({result.new_chunks} chunks, {result.reused_chunks} already there) in {result.seconds:.1f} s "
        f"(store held {result.store_held_seconds:.1f} s)",
        highlight=False,
        soft_wrap=True,
    )
    if not cluster and result.vault_key == "excluded" and (data_dir / engine.VAULT_KEY).is_file():
        err.print(
            f"note: the vault key {data_dir / engine.VAULT_KEY} is not in the backup (--include-vault-key "
            "puts it in): keep a copy elsewhere, or the vault's entries cannot be read after a restore",
            highlight=False,
            soft_wrap=True,
        )
    for rel in result.vanished:
        err.print(f"note: {rel} was deleted while the backup ran and is not in it", highlight=False, soft_wrap=True)


def restore(
    src: Annotated[str, typer.Argument(help="A folder or s3://BUCKET/PREFIX written by `engram backup`.")],
    snapshot: Annotated[
        str | None,
        typer.Option(help="The snapshot to restore (a name or its unique start, see --list; default: the newest)."),
    ] = None,
    list_snapshots: Annotated[bool, typer.Option("--list", help="List SRC's snapshots and restore nothing.")] = False,
    s3_endpoint: Annotated[str | None, typer.Option(help=_S3_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
) -> None:
    """Restore a backup into the data dir (--data-dir or ENGRAM_DATA_DIR), which must be new or empty.

    Every chunk is checked against its digest as it is read; folders are made 0700, files 0600. A restore that
    is interrupted is completed by the same command again. A backup written by a newer engram is refused.
    Keep the vault key: without it (ENGRAM_VAULT_KEY, or data_dir/vault.key copied back) the vault's entries
    stay unreadable. With ENGRAM_BROKER_URL set it restores a cluster's backup into that cluster, which must be
    empty (Redis, bucket and store; its store worker running).
    """
    from engram.schemas.settings import get_settings
    from engram.workers.stores import backup as engine

    cluster = cluster_settings("restore") is not None
    settings = get_settings()
    data_dir = settings.data_dir
    s3 = _s3_options(s3_endpoint)
    try:
        repo = engine.open_repository(src, create=False, s3=s3)
    except engine.BackupError as exc:
        raise fail(str(exc)) from exc
    try:
        if list_snapshots:
            rows = engine.snapshot_list(repo)
            if as_json:
                console.print_json(json.dumps(rows))
            for row in [] if as_json else rows:
                console.print(
                    f"{row['snapshot']}  {row.get('created', '')}  engram {row.get('engram_version')}  "
                    f"{row.get('files', 0)} files  {row.get('bytes', 0) / 1e6:.1f} MB  {row.get('source')}"
                    if "error" not in row
                    else f"{row['snapshot']}  {row['error']}",
                    highlight=False,
                    soft_wrap=True,
                )
            return
        with _progress(quiet or as_json) as progress:
            try:
                if cluster:
                    from engram.workers.stores.cluster_backup import restore_cluster  # the distributed mode's

                    result = restore_cluster(
                        settings,
                        repo,
                        _ask_store_worker(settings),
                        snapshot,
                        s3,
                        progress=_bars(progress, quiet or as_json),
                    )
                else:
                    result = engine.restore(
                        repo, data_dir, snapshot=snapshot, progress=_bars(progress, quiet or as_json)
                    )
            except engine.BackupError as exc:
                raise fail(str(exc)) from exc
            except OSError as exc:
                raise fail(
                    f"restore into {data_dir} failed: {exc.strerror or exc}; run the same command again to complete it"
                ) from exc
    finally:
        repo.close()
    if as_json:
        console.print_json(json.dumps(result.to_json()))
        return
    console.print(
        f"restored snapshot {result.snapshot} (engram {result.engram_version}, {result.created}) into "
        f"{result.data_dir if cluster else data_dir}: {result.files} files, {result.bytes / 1e6:.1f} MB "
        f"in {result.seconds:.1f} s",
        highlight=False,
        soft_wrap=True,
    )
    if (
        not cluster
        and result.vault_key == "excluded"
        and (Path(data_dir) / "objects" / "vault").is_dir()
        and not get_settings().vault_key
    ):
        err.print(
            f"note: the backup holds vault entries but not their key: copy the old vault.key to "
            f"{Path(data_dir) / 'vault.key'} (mode 0600) or set ENGRAM_VAULT_KEY",
            highlight=False,
            soft_wrap=True,
        )


def register(app: typer.Typer) -> None:
    """Add ``backup`` and ``restore`` to the ``engram`` app."""
    app.command(
        epilog="Examples:  engram backup ~/engram-backups  ·  engram backup s3://my-bucket/engram "
        "--s3-endpoint https://s3.example.com  ·  engram backup /mnt/usb/engram --json"
    )(backup)
    app.command(
        epilog="Examples:  engram --data-dir ~/engram-restored restore ~/engram-backups  ·  "
        "engram restore ~/engram-backups --list"
    )(restore)
