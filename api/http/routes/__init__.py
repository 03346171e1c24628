"""The HTTP API's routes, one ``APIRouter`` per resource, included by ``api.app.create_app``: ``health``
(/metrics, /healthz, /readyz), ``publish`` (uploads and events), ``search`` (search and ask), ``memories``
(memories, forgetting and exporting a user) and ``entities``. What they share: ``deps`` (the services and the
tenant of the API key, as FastAPI dependencies), ``errors`` (statuses, documented responses, exception handlers)
and ``queue`` (sending tasks by their ``workers.tasks.Task`` names).
"""
