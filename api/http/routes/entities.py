"""Entity routes: the tenant's people (M3-Agent's entities: faces, voices and names linked across recordings),
listed, merged and named by a query worker (``workers.admin``) through the ``query`` queue. Tenant-scoped like
memories: another tenant's ids answer 404 like unknown ones."""

from __future__ import annotations

import uuid

import structlog
from fastapi import APIRouter, HTTPException

from engram.api.http.routes.deps import Svc, Tenant
from engram.api.http.routes.errors import AUTH_ERRORS, WORKER_ERRORS, invalid, responses
from engram.api.http.routes.queue import answered
from engram.schemas.entities import EntityList, EntityMergeRequest, EntitySummary
from engram.schemas.tools import EntityNameRequest

log = structlog.get_logger(__name__)

router = APIRouter(tags=["entities"])


@router.get("/v1/entities", response_model=EntityList, responses=responses(*AUTH_ERRORS, *WORKER_ERRORS))
def list_entities(tenant: Tenant, svc: Svc) -> EntityList:
    """The tenant's person entities (faces, voices and names linked across recordings) with their names,
    counts and first/last seen, most observations first."""
    with answered("entities"):
        return svc.service.list_entities(tenant)


@router.post(
    "/v1/entities/{entity_id}/merge",
    response_model=EntitySummary,
    responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 404, 413, 422),
)
def merge_entities(entity_id: uuid.UUID, body: EntityMergeRequest, tenant: Tenant, svc: Svc) -> EntitySummary:
    """Merge ``body.entity_id`` into ``entity_id`` (two entities found for one person): the kept entity takes
    the other's samples, names, links and counts, the merge is recorded in its ``merged_from``, and stored
    observations and memories naming the other name it. 404 when either is unknown or another tenant's;
    422 for an entity merged with itself."""
    if body.entity_id == entity_id:
        raise invalid("entity_id", "an entity cannot be merged with itself")
    with answered("merge"):
        kept = svc.service.merge_entities(tenant, entity_id, body.entity_id, body.reason)
    if kept is None:
        raise HTTPException(404, "entity not found")
    log.info("entities merged", tenant=tenant, kept=str(entity_id), dropped=str(body.entity_id))
    return kept


@router.post(
    "/v1/entities/{entity_id}/name",
    response_model=EntitySummary,
    responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 404, 413, 422),
)
def name_entity(entity_id: uuid.UUID, body: EntityNameRequest, tenant: Tenant, svc: Svc) -> EntitySummary:
    """Give a person entity (a face or voice found without a name, or another name for someone) the name
    ``body.name``, first among its names: a search naming it then filters to it and ``ask`` shows it in its
    evidence. 404 when the entity is unknown or another tenant's."""
    with answered("name"):
        named = svc.service.name_entity(tenant, entity_id, body.name)
    if named is None:
        raise HTTPException(404, "entity not found")
    return named
