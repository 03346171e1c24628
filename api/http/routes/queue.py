"""The routes' calls to the query workers go through the service layer (``api.service.queue.QueueService``: by the
names in ``workers.tasks.Task``, the API never imports a stage; one timeout, ``ENGRAM_SERVICE_TIMEOUT_SECONDS``);
``answered`` turns the service's errors into the API's answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import HTTPException

from engram.api.http.routes.errors import unavailable
from engram.api.service.base import ServiceError, ServiceTimeout, ServiceUnavailable
from engram.api.service.queue import REQUEST_PUBLISH_RETRY
from engram.schemas.ask import AskFailed

__all__ = ["REQUEST_PUBLISH_RETRY", "answered"]


@contextmanager
def answered(what: str) -> Iterator[None]:
    """Run a service call; its errors as HTTPException: 503 when the broker refuses the task, 504 when no query
    worker answers in time, 502 when the task failed (with the reason when it is an ``AskFailed``, whose message
    is ours). ``what`` names the request in the errors."""
    try:
        yield
    except ServiceUnavailable as exc:
        raise unavailable("queue", exc) from exc
    except ServiceTimeout as exc:
        raise HTTPException(504, str(exc)) from exc
    except AskFailed as exc:
        raise HTTPException(502, f"{what} failed: {exc}") from exc
    except ServiceError as exc:
        raise HTTPException(502, f"{what} failed") from exc
