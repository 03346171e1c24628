"""Stage ``link``: link the observations of segments to persistent person entities (chat speakers by name, voices,
faces, names said, face-voice equivalence: ``workers.memory.linking`` has the methods and their sources, M3-Agent's
entity-centric memory, Long et al. 2025).

``link_batches`` links the segments of many events together (one entity save per tenant). It has no task nor queue
of its own: the embedded default's runner calls it before ``store_batches`` (``workers.pipeline``), and in the
distributed mode the store worker's batched consumer ``workers.store.store_batched`` links what it stores.
"""

from __future__ import annotations

from engram.workers.memory.entities import entity_id
from engram.workers.memory.linking import link_batches, link_observations

__all__ = ["entity_id", "link_batches", "link_observations"]
