"""Who holds data: the answer to "why is this empty?" when a search, ask or list finds nothing.

``why_empty`` tells a tenant that holds nothing from a user that holds nothing in a tenant that does, from a query
that matched nothing in data that exists; it reads only the asking tenant, so every front door may return it (the
API and MCP say "unknown user" with it, never naming anyone else). ``data_holders`` names the tenants and users
that do hold data, for the embedded default's CLI only (one person's own store): it must never reach an API or MCP
answer, where tenants are other people.

An observation stands for data: every memory is built from observations, and ``add`` stores one too.
"""

from __future__ import annotations

from engram.schemas.search import EmptyReason
from engram.workers.runtime import Runtime
from engram.workers.stores import models as qm
from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter


def holds_data(rt: Runtime, tenant_id: str, user_id: str | None = None) -> bool:
    """Whether the tenant (and, when given, its user) has any observation stored."""
    return bool(rt.vectors.newest(OBSERVATIONS, tenant_filter(tenant_id, user_id), 1))


def why_empty(rt: Runtime, tenant_id: str, user_id: str | None = None) -> EmptyReason:
    """Why an answer for ``tenant_id`` (and ``user_id``) is empty: ``no_data``, ``unknown_user`` or ``no_match``
    (``schemas.search.EmptyReason``); reads only that tenant."""
    if not holds_data(rt, tenant_id):
        return EmptyReason.no_data
    if user_id is not None and not holds_data(rt, tenant_id, user_id):
        return EmptyReason.unknown_user
    return EmptyReason.no_match


def _distinct(rt: Runtime, key: str, must: list, limit: int) -> list[str]:
    """Up to ``limit`` distinct values of payload ``key`` among the observations matching ``must``: one read of a
    single point per value, each excluding the values found (``MatchExcept`` on an indexed field), so the cost
    grows with the number of values, not of points."""
    found: list[str] = []
    while len(found) < limit:
        conds = [*must, qm.FieldCondition(key=key, match=qm.MatchExcept(except_=list(found)))] if found else must
        got = rt.vectors.newest(OBSERVATIONS, qm.Filter(must=list(conds)), 1)
        value = (got[0].payload or {}).get(key) if got else None
        if value is None or value in found:
            return found
        found.append(value)
    return found


def users_with_data(rt: Runtime, tenant_id: str, limit: int = 10) -> list[str]:
    """The users (at most ``limit``, sorted) that hold data in ``tenant_id``."""
    return sorted(_distinct(rt, "user_id", list(tenant_filter(tenant_id).must), limit))


def data_holders(rt: Runtime, tenants: int = 20, users: int = 10) -> dict[str, list[str]]:
    """{tenant: its users} of the tenants holding data (at most ``tenants`` of them, ``users`` users each), tenants
    and users sorted. For the embedded default's CLI only (see the module docstring)."""
    return {t: users_with_data(rt, t, users) for t in sorted(_distinct(rt, "tenant_id", [], tenants))}
