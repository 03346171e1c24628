"""Fixtures of the worker tests."""

from __future__ import annotations

import pytest
import structlog
import structlog.testing


@pytest.fixture
def log_events():
    """structlog events logged during the test, as dicts (every level: the CLI's level filter, configured by
    an earlier test in this process, is lifted for the test and restored after)."""
    old = structlog.get_config()
    structlog.reset_defaults()
    try:
        with structlog.testing.capture_logs() as events:
            yield events
    finally:
        structlog.configure(**old)
