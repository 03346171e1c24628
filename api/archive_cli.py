"""``engram export --archive FILE`` and ``engram import FILE``: one user's (or a tenant's) whole memory in one
archive file, and that file imported into another data dir, ids kept (the engine: ``workers.memory.archive``;
``import`` is registered on the main app by ``api.cli``, ``export --archive`` is ``api.memory_cli.export``).
``--json`` prints one summary object on stdout. See docs/keep.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from engram.api.console import console, counted, err


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(Text.assemble(("error: ", "red"), " ".join(message.split())), soft_wrap=True)
    return typer.Exit(code)


def _embedded_only(what: str) -> None:
    from engram.schemas.settings import get_settings  # loaded when the command runs (start-up)

    settings = get_settings()
    if settings.broker_url or settings.qdrant_url or settings.s3_endpoint:
        raise _fail(f"engram {what} works on the embedded default's data dir; with ENGRAM_BROKER_URL, "
                    "ENGRAM_QDRANT_URL or ENGRAM_S3_ENDPOINT set the data lives in servers (an archive through the "
                    "HTTP API is not built yet)")


def _points(counts: dict[str, Any]) -> str:
    points = counts.get("points") or {}
    return ", ".join(f"{n} {c}" for c, n in points.items() if n) or "no points"


def export_archive(dest: Path, tenant: str, user: str | None, as_json: bool) -> None:
    """Write the archive of ``user`` of ``tenant`` (None: the whole tenant) to ``dest``; exit 1 when there is
    nothing to export, 2 when ``dest`` cannot be written or the mode has no embedded data dir."""
    from engram.workers.errors import StoreError  # loaded when the command runs (start-up)
    from engram.workers.memory import archive  # loaded when the command runs (start-up)
    from engram.workers.runtime import store_session  # loaded when the command runs (start-up)

    _embedded_only("export --archive")
    if dest.is_dir():
        raise _fail(f"{dest} is a folder: give the archive's file name, e.g. {dest / 'memory.tar'}")
    try:
        with store_session() as rt:
            result = archive.export_archive(rt, dest, tenant, user)
    except archive.ArchiveError as exc:
        raise _fail(str(exc), 1) from exc
    except StoreError as exc:
        raise _fail(str(exc), 3) from exc
    except OSError as exc:
        raise _fail(f"cannot write {dest}: {exc.strerror or exc}") from exc
    if as_json:
        print(json.dumps(result.to_json()))
        return
    c = result.counts
    console.print(Text(f"exported {repr(user) if user else 'tenant ' + repr(tenant)} to {dest}: "
                       f"{counted(c['objects'], 'object')} ({c['object_bytes'] / 1e6:.1f} MB), {_points(c)}, "
                       f"{counted(c['events'], 'event')}, {counted(c['vault_entries'], 'vault entry', 'vault entries')}"
                       f" (still encrypted: the vault key is not in the archive) in {result.seconds:.1f} s"))


def import_(
    archive_file: Annotated[Path, typer.Argument(metavar="FILE", help="An archive written by `engram export "
                                                 "--archive FILE`.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout.")] = False,
) -> None:
    """Import an archive (`engram export --user U --archive FILE`) into this data dir, ids kept.

    The whole archive is checked first (its format and the engram that wrote it, every member's SHA-256 against
    its manifest): a bad, truncated or foreign file, or one written by a newer engram, is refused with the reason
    before anything is written. Then its objects, points and ledger records are written; what is already here as
    the archive has it is not written again, so importing twice stores nothing twice, and an import that was
    interrupted is completed by the same command. Vault entries stay encrypted: reading them needs the source's
    vault key (ENGRAM_VAULT_KEY, or its data_dir/vault.key copied here). Exit 2: refused; 3: the store stayed busy.
    """
    from engram.workers.errors import StoreError  # loaded when the command runs (start-up)
    from engram.workers.memory import archive  # loaded when the command runs (start-up)
    from engram.workers.runtime import store_session  # loaded when the command runs (start-up)

    _embedded_only("import")
    try:
        manifest = archive.verify_archive(archive_file)  # refused before the data dir is made or opened
        with store_session() as rt:
            result = archive.import_archive(rt, archive_file, manifest)
    except archive.ArchiveError as exc:
        raise _fail(str(exc)) from exc
    except StoreError as exc:
        raise _fail(str(exc), 3) from exc
    if as_json:
        print(json.dumps(result.to_json()))
        return
    w = result.written
    new = (f"{counted(w['objects'], 'object')}, {_points(w)}, {counted(w['events'], 'event')} written"
           if w["objects"] or any(w["points"].values()) or w["events"] else "nothing new: all of it was already here")
    who = repr(result.user_id) if result.user_id else f"tenant {result.tenant_id!r}"
    console.print(Text(f"imported {who} from {archive_file} ({_points(result.counts)}; "
                       f"{counted(result.counts['objects'], 'object')}): {new} in {result.seconds:.1f} s"))


def register(app: typer.Typer) -> None:
    """Add ``import`` to the ``engram`` app."""
    app.command("import", epilog="Example:  engram export --user alice --archive alice.tar  ·  "
                "engram --data-dir ~/new import alice.tar")(import_)
