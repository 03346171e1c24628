"""Sending the API's tasks to the workers, by the names in ``workers.tasks.Task`` (the API never imports a stage):
the publish retry policy of a request, and the round trip to a query worker.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import structlog
from celery.exceptions import TimeoutError as CeleryTimeout
from fastapi import HTTPException

from engram.api.routes.deps import Services
from engram.api.routes.errors import unavailable
from engram.schemas.ask import AskFailed
from engram.workers.tasks import Task

log = structlog.get_logger(__name__)

#: A request publishing to the broker answers 503 within about 2 s when the broker is down (workers wait
#: longer: see ``task_publish_retry_policy`` in workers.app); the client retries the request.
REQUEST_PUBLISH_RETRY = {"max_retries": 3, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 1.0}


def on_query_worker(svc: Services, task: Task, args: list, timeout: float, what: str,
                    timer: AbstractContextManager | None = None) -> Any:
    """Send ``task`` with ``args`` to its queue (``query``) and wait up to ``timeout`` seconds for its JSON result,
    inside ``timer`` when given (a metric's ``.time()``). ``what`` names the request in errors and logs.

    Raises HTTPException: 503 when the broker refuses the task, 504 when no query worker answers within
    ``timeout``, 502 when the task failed (with the reason when it is an ``AskFailed``, whose message is ours).
    """
    try:
        result = svc.celery.send_task(task.value, args=args, retry_policy=REQUEST_PUBLISH_RETRY)
    except Exception as exc:
        raise unavailable("queue", exc) from exc
    try:
        with timer or nullcontext():
            return result.get(timeout=timeout)
    except CeleryTimeout as exc:
        raise HTTPException(504, f"no query worker answered within {timeout:g} s") from exc
    except AskFailed as exc:
        raise HTTPException(502, f"{what} failed: {exc}") from exc
    except Exception as exc:
        log.error(f"{what} failed", error=f"{type(exc).__name__}: {exc}")
        raise HTTPException(502, f"{what} failed") from exc
    finally:
        result.forget()
