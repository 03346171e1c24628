"""``engram export --archive FILE`` and ``engram import FILE``: one user's (or a tenant's) whole memory in one
archive file, and that file imported into another data dir or cluster, ids kept (the engine:
``workers.memory.archive``; ``import`` is registered on the main app by ``api.cli.main.main``, ``export --archive`` is
``api.cli.memory.export``).

On the embedded default the command opens the data dir itself. On a cluster (``ENGRAM_BROKER_URL`` set) it stages
the archive in the cluster's object store (``STAGING_PREFIX``) and asks the store worker (``workers.archive``, queue
``consolidate``) to import it or to write one there, then fetches it. ``--json`` prints one summary object on
stdout. See docs/keep.md."""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from engram.api.cli.keep import cluster_settings, fail
from engram.api.console import console, counted

ApiUrl = Annotated[
    str | None,
    typer.Option(
        "--api",
        help="Through this engram API (a cluster's), e.g. "
        "http://127.0.0.1:8000, instead of the data dir or ENGRAM_BROKER_URL's "
        "cluster (never taken from ENGRAM_API_URL: an import goes to a cluster "
        "only when asked).",
    ),
]
ApiKey = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar="ENGRAM_API_KEY",
        show_envvar=True,
        show_default=False,
        help="With --api: an API key of the tenant.",
    ),
]


def _ask(settings: Any, task: str, args: list[Any], timeout: float = 3600.0) -> dict[str, Any]:
    """Send ``task`` to the cluster's store worker and return its answer; no answer within ``timeout`` seconds,
    or a refusal (``{"error": ...}``), exits with the reason."""
    from celery import Celery  # loaded when the command runs on a cluster (start-up)
    from celery.exceptions import TimeoutError as CeleryTimeout

    from engram.workers.app import configure  # loaded when the command runs on a cluster (start-up)

    app = Celery(f"engram-archive-{os.getpid()}")
    configure(app, settings)
    result = app.send_task(task, args=args)
    try:
        got = result.get(timeout=timeout)
    except CeleryTimeout as exc:
        raise fail(
            f"the store worker did not answer {task} within {timeout:g} s: is `engram worker --role store` running?", 3
        ) from exc
    finally:
        result.forget()
    if got.get("error"):
        raise fail(str(got["error"]))
    return got


def _points(counts: dict[str, Any]) -> str:
    points = counts.get("points") or {}
    return ", ".join(f"{n} {c}" for c, n in points.items() if n) or "no points"


def _export_in_cluster(settings: Any, dest: Path, tenant: str, user: str | None) -> dict[str, Any]:
    """The store worker writes the archive into the object store; it is fetched into ``dest`` (a temporary name in
    its folder, renamed when complete) and the staged object deleted."""
    from engram.workers.memory.archive import STAGING_PREFIX  # loaded when the command runs (start-up)
    from engram.workers.stores.objects import open_object_store  # loaded when the command runs (start-up)
    from engram.workers.tasks import Task  # loaded when the command runs (start-up)

    key = f"{STAGING_PREFIX}{uuid.uuid4()}.tar"
    got = _ask(settings, Task.archive_export.value, [tenant, user, key])
    objects = open_object_store(settings)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    os.close(fd)
    try:
        objects.download(key, Path(tmp))
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)
        objects.delete(key)
    return {**got, "path": str(dest)}


def _api(url: str, key: str | None) -> Any:
    """An httpx client of the API at ``url`` with the bearer ``key`` (exits without one)."""
    import httpx  # loaded when the command runs through the API (start-up)

    if not key:
        raise fail("--api needs an API key: --api-key or ENGRAM_API_KEY (`engram keys create --tenant T`)")
    return httpx.Client(base_url=url.rstrip("/"), headers={"Authorization": f"Bearer {key}"}, timeout=3700.0)


def _answer(resp: Any, what: str) -> dict[str, Any]:
    """The JSON of an API answer; an error exits with its detail (3: no answer from the store worker)."""
    if resp.status_code >= 400:
        try:
            detail = resp.json().get("detail")
        except ValueError:
            detail = resp.text[:300]
        raise fail(f"{what}: HTTP {resp.status_code}: {detail}", 3 if resp.status_code in (503, 504) else 2)
    return resp.json()


def _export_through_api(url: str, key: str | None, dest: Path, user: str | None) -> dict[str, Any]:
    """``POST /v1/archives/exports``, then the archive fetched from its URL into ``dest`` (a temporary name in its
    folder, renamed when complete)."""
    import httpx  # loaded when the command runs through the API (start-up)

    with _api(url, key) as api:
        got = _answer(api.post("/v1/archives/exports", json={"user_id": user}), "export")
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, httpx.stream("GET", got["url"], timeout=3700.0) as resp:
            if resp.status_code != 200:
                raise fail(f"cannot fetch the archive: HTTP {resp.status_code}")
            for chunk in resp.iter_bytes(1 << 20):
                out.write(chunk)
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return {**got, "path": str(dest)}


def _import_through_api(url: str, key: str | None, archive_file: Path) -> dict[str, Any]:
    """``POST /v1/archives/uploads``, the archive PUT to its URL (streamed), ``POST /v1/archives/imports``."""
    import httpx  # loaded when the command runs through the API (start-up)

    with _api(url, key) as api:
        staged = _answer(api.post("/v1/archives/uploads"), "upload")
        with open(archive_file, "rb") as fh:
            put = httpx.put(staged["url"], content=fh, timeout=3700.0)
        if put.status_code >= 300:
            raise fail(f"cannot upload the archive: HTTP {put.status_code}: {put.text[:300]}")
        got = _answer(api.post("/v1/archives/imports", json={"key": staged["key"]}), "import")
    return {**got, "path": str(archive_file)}


def export_archive(
    dest: Path, tenant: str, user: str | None, as_json: bool, api: str | None = None, api_key: str | None = None
) -> None:
    """Write the archive of ``user`` of ``tenant`` (None: the whole tenant) to ``dest``; exit 1 when there is
    nothing to export, 2 when ``dest`` cannot be written, 3 when the store stays busy or no store worker answers."""
    from engram.schemas.errors import StoreError  # loaded when the command runs (start-up)
    from engram.workers.memory import archive  # loaded when the command runs (start-up)
    from engram.workers.runtime import store_session  # loaded when the command runs (start-up)

    cluster = None if api else cluster_settings("export --archive")
    if dest.is_dir():
        raise fail(f"{dest} is a folder: give the archive's file name, e.g. {dest / 'memory.tar'}")
    try:
        if api:
            got = _export_through_api(api, api_key, dest, user)
        elif cluster is not None:
            got = _export_in_cluster(cluster, dest, tenant, user)
        else:
            with store_session() as rt:
                got = archive.export_archive(rt, dest, tenant, user).to_json()
    except archive.ArchiveError as exc:
        raise fail(str(exc), 1) from exc
    except StoreError as exc:
        raise fail(str(exc), 3) from exc
    except OSError as exc:
        raise fail(f"cannot write {dest}: {exc.strerror or exc}") from exc
    if as_json:
        print(json.dumps(got))
        return
    c = got["counts"]
    console.print(
        Text(
            f"exported {repr(user) if user else 'tenant ' + repr(tenant)} to {dest}: "
            f"{counted(c['objects'], 'object')} ({c['object_bytes'] / 1e6:.1f} MB), {_points(c)}, "
            f"{counted(c['events'], 'event')}, {counted(c['vault_entries'], 'vault entry', 'vault entries')}"
            f" (still encrypted: the vault key is not in the archive) in {got['seconds']:.1f} s"
        )
    )


def _import_in_cluster(settings: Any, archive_file: Path) -> dict[str, Any]:
    """Stage ``archive_file`` in the cluster's object store, have the store worker import it, delete it."""
    from engram.workers.memory.archive import STAGING_PREFIX  # loaded when the command runs (start-up)
    from engram.workers.stores.objects import open_object_store  # loaded when the command runs (start-up)
    from engram.workers.tasks import Task  # loaded when the command runs (start-up)

    objects = open_object_store(settings)
    key = f"{STAGING_PREFIX}{uuid.uuid4()}.tar"
    objects.put_file(key, archive_file, "application/x-tar")
    try:
        got = _ask(settings, Task.archive_import.value, [key])
    finally:
        objects.delete(key)
    return {**got, "path": str(archive_file)}


def import_(
    archive_file: Annotated[
        Path, typer.Argument(metavar="FILE", help="An archive written by `engram export --archive FILE`.")
    ],
    api: ApiUrl = None,
    api_key: ApiKey = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout.")] = False,
) -> None:
    """Import an archive (`engram export --user U --archive FILE`) into this data dir, into the cluster of
    ENGRAM_BROKER_URL (through its store worker), or through a cluster's API (--api, into the key's tenant), ids
    kept.

    The whole archive is checked first (its format and the engram that wrote it, every member's SHA-256 against
    its manifest): a bad, truncated or foreign file, or one written by a newer engram, is refused with the reason
    before anything is written. Then its objects, points and ledger records are written; what is already here as
    the archive has it is not written again, so importing twice stores nothing twice, and an import that was
    interrupted is completed by the same command. Vault entries stay encrypted: reading them needs the source's
    vault key (ENGRAM_VAULT_KEY, or its data_dir/vault.key copied here). Exit 2: refused; 3: the store stayed busy
    or no store worker answered.
    """
    from engram.schemas.errors import StoreError  # loaded when the command runs (start-up)
    from engram.workers.memory import archive  # loaded when the command runs (start-up)
    from engram.workers.runtime import store_session  # loaded when the command runs (start-up)

    cluster = None if api else cluster_settings("import")
    try:
        manifest = archive.verify_archive(archive_file)  # refused before the data dir is made or opened
        if api:
            got = _import_through_api(api, api_key, archive_file)
        elif cluster is not None:
            got = _import_in_cluster(cluster, archive_file)
        else:
            with store_session() as rt:
                got = archive.import_archive(rt, archive_file, manifest).to_json()
    except archive.ArchiveError as exc:
        raise fail(str(exc)) from exc
    except StoreError as exc:
        raise fail(str(exc), 3) from exc
    if as_json:
        print(json.dumps(got))
        return
    w, counts = got["written"], got["counts"]
    new = (
        f"{counted(w['objects'], 'object')}, {_points(w)}, {counted(w['events'], 'event')} written"
        if w["objects"] or any(w["points"].values()) or w["events"]
        else "nothing new: all of it was already here"
    )
    who = repr(got["user_id"]) if got["user_id"] else f"tenant {got['tenant_id']!r}"
    console.print(
        Text(
            f"imported {who} from {archive_file} ({_points(counts)}; "
            f"{counted(counts['objects'], 'object')}): {new} in {got['seconds']:.1f} s"
        )
    )


def register(app: typer.Typer) -> None:
    """Add ``import`` to the ``engram`` app."""
    app.command(
        "import",
        epilog="Example:  engram export --user alice --archive alice.tar  ·  engram --data-dir ~/new import alice.tar",
    )(import_)
