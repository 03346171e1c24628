"""Stage ``query`` (queue ``query``): hybrid search over a tenant's memories for the API, the SDK and MCP
(``memory.search``: the ranking and its sources)."""

from __future__ import annotations

from engram.schemas.search import SearchRequest, SearchResponse
from engram.workers.app import task
from engram.workers.memory.search import search
from engram.workers.runtime import runtime
from engram.workers.tasks import Task


@task(Task.search, "request")
def search_task(request: SearchRequest) -> SearchResponse:
    """The query worker's search."""
    return search(runtime(), request)
