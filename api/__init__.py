"""engram's front: the ``engram`` CLI, the producer side of publishing, and (later) the FastAPI app."""
