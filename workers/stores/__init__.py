"""Where engram keeps things: the vector store and its backends, the object store, the event ledger."""
