"""Per-API-key rate limits of the HTTP API, with the ``limits`` library (moving windows, counters in Redis).

``ENGRAM_API_RATE_LIMIT`` holds one or more rates in ``limits``' notation, ``;``-separated (default
``50/second;2000/minute``); every authenticated request of one API key counts against each of them, across all
API replicas (the counters live in the API's Redis). Past one, the request is refused with 429 and a
``Retry-After`` header (seconds until the window lets the next request through). Counters are keyed by a
sha256 of the API key, never the key itself. An empty setting turns the limits off.
"""

from __future__ import annotations

import hashlib
import math
import time

from fastapi import HTTPException
from limits import parse_many
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

from engram.schemas.settings import Settings

NAMESPACE = "engram-api-key"


class RateLimiter:
    """The API's per-key limits for ``settings`` (``api_rate_limit``; Redis at ``redis_url`` or
    ``broker_url``). Raises ValueError for a rate ``limits`` cannot parse."""

    def __init__(self, settings: Settings) -> None:
        spec = (settings.api_rate_limit or "").strip()
        self.items = parse_many(spec) if spec else []
        self.limiter = None
        if self.items:
            url = settings.redis_url or settings.broker_url
            if not url:
                raise ValueError("ENGRAM_API_RATE_LIMIT needs Redis (ENGRAM_REDIS_URL or ENGRAM_BROKER_URL)")
            url = "redis+unix://" + url[len("unix://") :] if url.startswith("unix://") else url
            self.limiter = MovingWindowRateLimiter(storage_from_string(url))

    def check(self, api_key: str) -> None:
        """Count one request of ``api_key``; raise HTTPException 429 (with ``Retry-After``) past a limit."""
        if self.limiter is None:
            return
        ident = hashlib.sha256(api_key.encode()).hexdigest()[:32]
        for item in self.items:
            if not self.limiter.hit(item, NAMESPACE, ident):
                reset = self.limiter.get_window_stats(item, NAMESPACE, ident).reset_time
                wait = max(1, math.ceil(reset - time.time()))
                raise HTTPException(
                    429,
                    f"rate limit exceeded for this API key: {item} (ENGRAM_API_RATE_LIMIT); retry after {wait} s",
                    headers={"Retry-After": str(wait)},
                )
