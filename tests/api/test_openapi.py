"""The API's OpenAPI schema documents itself: a description on every property of every model, examples on every
request and response model that validate against it, and each route listing only the errors it can return."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel

from engram.api.http.app import create_app
from engram.schemas.settings import Settings

AUTH = {401, 429, 503}
WORKER = {502, 504}
#: (method, path) -> the error statuses the route can return (see each route's body in api/http/routes/)
EXPECTED = {
    ("GET", "/metrics"): {401, 404},
    ("GET", "/healthz"): set(),
    ("GET", "/readyz"): {503},
    ("POST", "/v1/uploads"): AUTH | {413, 422, 501},
    ("POST", "/v1/events"): AUTH | {403, 404, 409, 413, 422},
    ("GET", "/v1/events/{event_id}"): AUTH | {404, 422},
    ("POST", "/v1/archives/uploads"): AUTH | {501},
    ("POST", "/v1/archives/imports"): AUTH | {403, 404, 422, 504},
    ("POST", "/v1/archives/exports"): AUTH | {422, 501, 504},
    ("POST", "/v1/search"): AUTH | WORKER | {403, 413, 422},
    ("POST", "/v1/ask"): AUTH | WORKER | {403, 413, 422},
    ("POST", "/v1/memories"): AUTH | {409, 413, 422},
    ("GET", "/v1/memories"): AUTH | WORKER | {422},
    ("GET", "/v1/memories/{memory_id}"): AUTH | WORKER | {404, 422},
    ("DELETE", "/v1/memories/{memory_id}"): AUTH | WORKER | {404, 422},
    ("PATCH", "/v1/memories/{memory_id}"): AUTH | WORKER | {404, 422, 501},
    ("POST", "/v1/forget"): AUTH | WORKER | {413, 422, 501},
    ("DELETE", "/v1/users/{user_id}"): AUTH | WORKER | {422},
    ("GET", "/v1/users/{user_id}/export"): AUTH | WORKER | {422},
    ("GET", "/v1/entities"): AUTH | WORKER,
    ("POST", "/v1/entities/{entity_id}/merge"): AUTH | WORKER | {404, 413, 422},
    ("POST", "/v1/entities/{entity_id}/name"): AUTH | WORKER | {404, 413, 422},
    ("GET", "/v1/events"): AUTH | {422},
    ("POST", "/v1/events/{event_id}/retry"): AUTH | {404, 422},
    ("GET", "/v1/storage"): AUTH,
    ("GET", "/v1/memories/{observation_id}/derived"): AUTH | WORKER | {422},
    ("GET", "/v1/users"): AUTH,
    ("GET", "/v1/timeline"): AUTH | WORKER | {422},
    ("GET", "/v1/media/{observation_id}"): AUTH | WORKER | {404, 410, 416, 422},
    ("GET", "/v1/thumbnails/{observation_id}"): AUTH | WORKER | {404, 410, 422},
    ("GET", "/v1/entities/{entity_id}/samples"): AUTH | WORKER | {404, 422},
    ("GET", "/v1/entities/{entity_id}/samples/media"): AUTH | WORKER | {404, 410, 422},
    ("POST", "/v1/entities/{entity_id}/split"): AUTH | WORKER | {404, 413, 422},
}


@pytest.fixture(scope="module")
def app():
    return create_app(Settings(broker_url="redis://127.0.0.1:1/0"))  # nothing is opened: the schema only


def test_every_property_of_every_model_has_a_description(app):
    schemas = app.openapi()["components"]["schemas"]
    assert len(schemas) > 15
    missing = [
        f"{name}.{prop}"
        for name, schema in schemas.items()
        for prop, spec in schema.get("properties", {}).items()
        if not spec.get("description")
    ]
    assert not missing, missing


def _route_models(app) -> dict[str, type[BaseModel]]:
    models = {}
    for context in iter_route_contexts(app.routes):  # included routers flattened (FastAPI >= 0.137.2)
        route = context.original_route
        if not isinstance(route, APIRoute):
            continue
        body = route.body_field.field_info.annotation if route.body_field is not None else None
        if isinstance(body, type) and issubclass(body, BaseModel):
            models[route.path + " body"] = body
        if isinstance(route.response_model, type) and issubclass(route.response_model, BaseModel):
            models[route.path + " response"] = route.response_model
    return models


def test_every_request_and_response_model_has_examples_that_validate(app):
    models = _route_models(app)
    assert len(models) >= 15
    schemas = app.openapi()["components"]["schemas"]
    for where, model in models.items():
        examples = schemas[model.__name__].get("examples")
        assert examples, f"{where}: {model.__name__} has no examples"
        for example in examples:
            model.model_validate(example)  # raises when an example is not a valid instance


def test_each_route_lists_only_the_errors_it_can_return(app):
    paths = app.openapi()["paths"]
    seen = {}
    for path, ops in paths.items():
        for method, op in ops.items():
            errors = {int(c) for c in op["responses"] if int(c) >= 400}
            seen[(method.upper(), path)] = errors
            for code in errors:
                assert op["responses"][str(code)].get("description"), (method, path, code)
    unknown = set(seen) - set(EXPECTED)
    assert not unknown, f"routes without an entry here: {unknown}"
    assert seen == {k: v for k, v in EXPECTED.items() if k in seen}
    assert seen[("GET", "/v1/entities")].isdisjoint({403, 404, 409, 413, 422})  # no body, no path parameter
