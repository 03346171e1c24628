"""engram's errors: one root, ``EngramError``, and the few kinds callers tell apart.

- ``MediaError``: bad input (truncated, corrupt, too large, not what it claims). The event fails with the stage
  and the reason, is not retried, and nothing else is lost (``workers.runtime.stage``).
- ``StoreError``: a store cannot serve now or at all (held by another process, corrupt, an object missing);
  ``StoreCorrupt``: a file of the embedded store is damaged or missing (the message names it, in one line).
- ``ModelError``: a model or a remote model provider cannot answer.
- ``ConfigError``: settings or options that cannot work together; the message says which and how to mend them.

Each keeps the builtin base its callers caught before (``MediaError`` is a ``ValueError``, ``ObjectNotFound`` a
``KeyError``), so ``except ValueError`` still holds. This module imports nothing: the light SDK uses it too.
"""

from __future__ import annotations


class EngramError(Exception):
    """Root of every error engram raises on purpose."""


class MediaError(EngramError, ValueError):
    """Bad input: the item is quarantined with this message as its reason."""


class StoreError(EngramError):
    """The vector store, the object store or the ledger cannot serve the request."""


class StoreCorrupt(StoreError, RuntimeError):
    """A shard of the embedded store cannot be used as it is: a file of it damaged or removed. The message is one
    line naming the shard folder and the file, and what to do (``workers.stores.integrity.damaged``)."""


class ModelError(EngramError):
    """A model (local or a remote provider) cannot answer."""


class ConfigError(EngramError, ValueError):
    """Settings or options that cannot work together."""
