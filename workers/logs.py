"""Logging of every engram process: structlog's lines and the standard library's (Celery's, the libraries') through
one handler on stderr, rendered alike by structlog's ``ProcessorFormatter``, each at its own level.

structlog hands its events to the standard library's ``logging`` (``structlog.stdlib.LoggerFactory``), so a
Celery worker never sees them as writes to stderr: Celery redirects a worker's stdout and stderr to a logger at
WARNING (``worker_redirect_stdouts_level``), which had turned every structured info line into a WARNING one.
Workers and beat take this configuration instead of Celery's (``celery_setup_logging``, connected to Celery's
``setup_logging`` signal by ``workers.app``: Celery then neither installs its own handlers nor redirects the
streams), at the level of their ``--loglevel``.

Lines: ``console`` (structlog's ``ConsoleRenderer``; colours only on a terminal) or ``json`` (one object per line:
``event``, ``level``, ``logger``, ``timestamp`` in ISO 8601 UTC, the bound context such as ``event_id`` and
``stage``, and ``process`` in a worker's pool processes).
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

LogFormat = Literal["console", "json"]
_format: LogFormat = "console"


def _process_name(logger, method: str, event: dict) -> dict:
    """The process's name (``ForkPoolWorker-2``) on lines of a pool's child processes; none on the main one."""
    record = event.get("_record")
    name = record.processName if record is not None else None
    if name and name != "MainProcess":
        event.setdefault("process", name)
    return event


class _StderrHandler(logging.StreamHandler):
    """A ``StreamHandler`` writing to whatever ``sys.stderr`` is at each line, not the one at configuration
    (tests capture and swap it)."""

    @property
    def stream(self):  # noqa: D102
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def configure_logging(level: int | str = logging.INFO, fmt: LogFormat | None = None) -> None:
    """Route structlog and the standard library's logging to one handler on the current ``sys.stderr`` at ``level``
    (a ``logging`` level or its name), rendered as ``fmt`` lines (default: the format of the last call, at first
    ``console``). Replaces the root logger's handlers; may be called again (a worker's pool processes do)."""
    global _format
    level = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    _format = fmt or _format
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso"),
    ]
    renderer = (
        structlog.processors.JSONRenderer()
        if _format == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )  # no colour codes in a file
    handler = _StderrHandler()
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[_process_name, structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    logging.basicConfig(level=level, handlers=[handler], force=True)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )


def celery_setup_logging(loglevel: int | str | None = None, **_: object) -> None:
    """Receiver of Celery's ``setup_logging`` signal (a worker's or beat's start, and each pool process's):
    ``configure_logging`` at the ``--loglevel`` given to Celery, in the format last configured."""
    configure_logging(loglevel or logging.INFO)
