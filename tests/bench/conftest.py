"""Fixtures of the bench tests."""

from __future__ import annotations

import logging

import pytest
import structlog

#: Loggers a bench script quiets (``bench.lib.embedded.quiet_logs``) besides the root.
QUIETED = ("bm25s", "kombu", "celery")


@pytest.fixture(autouse=True)
def logging_as_it_was():
    """A bench script's ``main`` run in the test's process configures logging for a terminal (warnings only);
    put back the session's configuration after each test, so that later tests still see (and capture) what engram
    logs at info level."""
    old = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in QUIETED}
    yield
    structlog.configure(**old)
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, was in levels.items():
        logging.getLogger(name).setLevel(was)
