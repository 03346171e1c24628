"""Search routes: ``POST /v1/search`` (hybrid search) and ``POST /v1/ask`` (an answer from memory), each run by a
query worker (``workers.query``, ``workers.ask``) through the ``query`` queue: the API never opens the vector store.
The body's tenant, when given, must be the API key's."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from engram.api.http.routes.deps import Svc, Tenant
from engram.api.http.routes.errors import AUTH_ERRORS, WORKER_ERRORS, responses
from engram.api.http.routes.queue import answered
from engram.schemas.api import SearchQuery
from engram.schemas.ask import AskQuery, AskRequest, AskResponse
from engram.schemas.search import SearchRequest, SearchResponse
from engram.workers.metrics import SEARCH_SECONDS

router = APIRouter(tags=["search"])


@router.post(
    "/v1/search", response_model=SearchResponse, responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 403, 413, 422)
)
def search(body: SearchQuery, tenant: Tenant, svc: Svc) -> SearchResponse:
    """Hybrid search over the key's tenant, run by a query worker. 403 for a body naming another
    tenant; 504 when no query worker answers in time; 502 when the search failed."""
    if body.tenant_id is not None and body.tenant_id != tenant:
        raise HTTPException(403, "this API key cannot search another tenant")
    req = SearchRequest.model_validate({**body.model_dump(exclude={"tenant_id"}), "tenant_id": tenant})
    with answered("search"), SEARCH_SECONDS.time():
        return svc.service.search(req)


@router.post("/v1/ask", response_model=AskResponse, responses=responses(*AUTH_ERRORS, *WORKER_ERRORS, 403, 413, 422))
def ask(body: AskQuery, tenant: Tenant, svc: Svc) -> AskResponse:
    """Answer a question from the tenant's memories, run by a query worker: with an LLM configured on
    the workers, up to ``max_rounds`` rounds of search-then-decide (M3-Agent), returning the answer and
    the memories it cites; without one, the ranked evidence with ``answer`` null. 403 for a body naming
    another tenant; 502 when the LLM failed (the reason is given) or the ask failed; 504 when no query
    worker answers within ``ENGRAM_SERVICE_TIMEOUT_SECONDS``."""
    if body.tenant_id is not None and body.tenant_id != tenant:
        raise HTTPException(403, "this API key cannot ask about another tenant")
    req = AskRequest.model_validate({**body.model_dump(exclude={"tenant_id"}), "tenant_id": tenant})
    with answered("ask"):
        return svc.service.ask(req)
