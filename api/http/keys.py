"""API keys per tenant, hashed at rest in Redis.

A key is ``egk_`` + 32 random bytes (URL-safe base64); it is shown once, when created. Redis keeps only
its sha256: ``engram:apikey:<sha256 hex>`` → tenant, and ``engram:apikeys`` (hash: sha256 hex → JSON
``{tenant, created_at, label}``) for listing. The key id shown to operators is the hash's first 12 hex
digits, which reveals nothing usable.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from engram.schemas.events import _ID_PATTERN

KEY_PREFIX = "engram:apikey:"
INDEX = "engram:apikeys"
MAX_KEY_LENGTH = 256


@dataclass(frozen=True)
class ApiKeyInfo:
    """A stored key as listed: its id (hash prefix), tenant, creation time (UTC) and optional label."""

    key_id: str
    tenant: str
    created_at: datetime
    label: str | None


def redis_client(settings):
    """A redis-py client for the API's shared state: ``redis_url``, else ``broker_url``.
    Raises RuntimeError when neither is a Redis URL (the API and keys need Redis)."""
    url = settings.redis_url or settings.broker_url
    if not url or not url.startswith(("redis://", "rediss://", "unix://")):
        raise RuntimeError(
            "API keys and the API need Redis: set ENGRAM_BROKER_URL (or ENGRAM_REDIS_URL) to redis://host:port/db"
        )
    return redis.Redis.from_url(
        url, decode_responses=True, socket_connect_timeout=3, socket_timeout=10, health_check_interval=30
    )


def hash_key(key: str) -> str:
    """The sha256 (hex) under which ``key`` is stored."""
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(r, tenant: str, label: str | None = None) -> str:
    """Make and store a new key for ``tenant``; returns the key (the only time it is seen in clear).
    Raises ValueError for a tenant id that is not ``[A-Za-z0-9][A-Za-z0-9._@:+-]{0,127}``."""
    if not re.fullmatch(_ID_PATTERN, tenant):
        raise ValueError(f"invalid tenant id {tenant!r}")
    key = "egk_" + secrets.token_urlsafe(32)
    digest = hash_key(key)
    info = {"tenant": tenant, "created_at": datetime.now(UTC).isoformat(), "label": label}
    with r.pipeline() as pipe:
        pipe.set(KEY_PREFIX + digest, tenant)
        pipe.hset(INDEX, digest, json.dumps(info))
        pipe.execute()
    return key


def tenant_for(r, key: str) -> str | None:
    """The tenant of ``key``, or None for an unknown (or absurdly long) key."""
    if not key or len(key) > MAX_KEY_LENGTH:
        return None
    return r.get(KEY_PREFIX + hash_key(key))


def list_keys(r, tenant: str | None = None) -> list[ApiKeyInfo]:
    """Stored keys (of ``tenant`` if given), oldest first."""
    out = []
    for digest, raw in r.hgetall(INDEX).items():
        info = json.loads(raw)
        if tenant is None or info["tenant"] == tenant:
            out.append(
                ApiKeyInfo(digest[:12], info["tenant"], datetime.fromisoformat(info["created_at"]), info.get("label"))
            )
    return sorted(out, key=lambda k: k.created_at)


def revoke_key(r, key_id: str) -> int:
    """Delete the keys whose id (hash prefix, at least 8 hex digits) starts with ``key_id``; returns how
    many. Raises ValueError for a shorter prefix."""
    if len(key_id) < 8:
        raise ValueError("give at least 8 characters of the key id")
    gone = 0
    for digest in r.hkeys(INDEX):
        if digest.startswith(key_id):
            with r.pipeline() as pipe:
                pipe.delete(KEY_PREFIX + digest)
                pipe.hdel(INDEX, digest)
                pipe.execute()
            gone += 1
    return gone
