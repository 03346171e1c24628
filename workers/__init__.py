"""engram's workers: the Celery app, one module per pipeline stage, and the adapters they use (object
store, vector store, ledger, model providers)."""
