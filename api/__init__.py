"""engram's front (``engram.api``): the HTTP API, the ``engram`` CLI, the client SDK and the producers.

- ``app`` builds the FastAPI app of the distributed mode from the routers in ``routes`` (one per resource), with
  ``keys`` (API keys in Redis), ``ratelimit`` and ``uploads`` (presigned uploads, verified on publish).
- ``entry`` is the ``engram`` console script: it runs ``cli`` when the command's extra is installed, else says in
  one line which extra it needs (standard library only until then, so a ``[client]`` install gets that line).
- ``cli`` is the ``engram`` command; ``memory_cli``, ``agent_cli``, ``capture`` and ``demo`` hold more commands,
  ``console`` what they all print with and share, ``embedded`` their ingestion and search on the configured
  runtime, ``processes`` the worker and beat command lines, ``watch`` the folder watcher.
- ``local`` publishes files on the embedded default and ``add`` adds texts and chats; ``client`` is the SDK of the
  API and ``mcp_server`` the MCP server for agents.

Imports run one way: the command modules import ``console`` and ``embedded``, never ``cli`` (tests/test_layout.py).
"""
