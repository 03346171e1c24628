"""The ``engram`` command line, a module per command group: ``main`` (the root app, its global options and the
commands on the embedded store: ingest, search, status, entities, vault, keys, serve, worker, publish, capture),
``memory`` (memories, forget, consolidate, export), ``agent`` (mcp, ask), ``ui``, ``retention``, ``keep`` (backup,
restore) and ``archive`` (export --archive, import). The console script (``api.entry``) imports ``main`` only
once the command's extra is known to be installed."""
