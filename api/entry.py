"""The ``engram`` console script: the CLI (``api.cli.main``) when the command's extra is installed, else one line saying
which extra the command needs and how to install it (exit 2, no traceback).

``pip install engram-multimodal[client]`` gives the SDK alone (no typer, rich, Celery or model), ``[mcp]`` adds
what ``engram mcp --api URL`` needs, ``[server]`` the API and the producer commands (``serve``, ``publish``,
``keys``, ``watch`` and ``capture`` with ``--api``), ``[worker,cpu]`` the pipeline that every other command runs on
the embedded default. This module imports only the standard library until the CLI itself is imported, so a
``[client]`` install reaches the line that names the extra instead of ``ModuleNotFoundError: typer``.
"""

from __future__ import annotations

import os
import sys

#: The pip line of each extra (torch's CPU build for the pipeline, from PyTorch's CPU index).
INSTALL = {
    "mcp": "pip install 'engram-multimodal[mcp]'",
    "server": "pip install 'engram-multimodal[server]'",
    "worker": "pip install 'engram-multimodal[worker,cpu]' --extra-index-url https://download.pytorch.org/whl/cpu",
}
#: Commands that run on the API or Redis without the pipeline, and those that do with ``--api URL`` only.
SERVER_COMMANDS = {"serve", "publish", "keys"}
SERVER_WITH_API = {"watch", "capture"}
#: Global options (``api.cli.main.main_options``) that take a value, skipped when looking for the command's name.
_VALUED_OPTIONS = {"--data-dir", "--log-format"}


def command_name(argv: list[str]) -> str | None:
    """The command ``argv`` (``sys.argv[1:]``) runs (``ingest``, ``mcp``, ...), past the global options; None
    when it names none (``engram``, ``engram --help``)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _VALUED_OPTIONS:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def needed_extra(argv: list[str]) -> tuple[str, str]:
    """(the command as the user would name it, the extra it needs: ``"mcp"``, ``"server"`` or ``"worker"``) for
    ``argv``; a command reaching an API (``--api`` or ``ENGRAM_API_URL``) needs less than one on the embedded
    store."""
    name = command_name(argv)
    api = any(a == "--api" or a.startswith("--api=") for a in argv) or (
        name == "mcp" and bool(os.environ.get("ENGRAM_API_URL"))
    )
    if name == "mcp" and api:
        return "engram mcp --api", "mcp"
    if name in SERVER_COMMANDS or (name in SERVER_WITH_API and api):
        return f"engram {name}" + (" --api" if name in SERVER_WITH_API else ""), "server"
    return (f"engram {name}" if name else "engram"), "worker"


def missing_extra_line(argv: list[str], missing: str | None) -> str:
    """The one line for a command whose extra is not installed (``missing``: the module that was not found)."""
    command, extra = needed_extra(argv)
    if command == "engram":
        return (
            f"error: engram's commands need an extra (this install lacks {missing!r}): "
            f"'engram mcp --api URL' needs [mcp] ({INSTALL['mcp']}), serve, publish and keys need [server], "
            f"the others [worker,cpu]: {INSTALL['worker']}"
        )
    return f"error: {command} needs the [{extra}] extra (this install lacks the module {missing!r}): {INSTALL[extra]}"


def first_missing(exc: ModuleNotFoundError) -> str | None:
    """The module whose absence started ``exc``: the first of a chain of ModuleNotFoundErrors (the CLI's last line
    of defence imports more while handling the first), or None when it is engram's own (a broken install or a
    bug, not a missing extra: left to raise)."""
    while isinstance(exc.__context__, ModuleNotFoundError):
        exc = exc.__context__
    name = exc.name or ""
    return None if not name or name.split(".")[0] == "engram" else name


def main() -> None:
    """Console entry point (``[project.scripts]``): ``api.cli.main.main``, or the line naming the missing extra."""
    try:
        from engram.api.cli.main import main as cli_main  # only now: a [client] install lacks what it imports

        cli_main()
    except ModuleNotFoundError as exc:
        missing = first_missing(exc)
        if missing is None:
            raise
        print(missing_extra_line(sys.argv[1:], missing), file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
