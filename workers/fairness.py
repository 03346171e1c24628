"""Fair scheduling across tenants: Celery message priorities that fall with a tenant's work in flight.

The Redis transport emulates priorities with one list per priority step (``ingest``, ``ingest\\x06\\x161``, ...,
``PRIORITY_STEPS``) and a worker's ``BRPOP`` takes from the lists in step order, 0 first (kombu's Redis
transport: 0 is the highest priority there). Every message of the pipeline carries a priority:

- ``ingest`` of an event: ``tenant_priority``, one step lower per ``fair_tenant_events_per_priority`` events
  of the same tenant queued or processing (from the ledger's per-tenant counts), so a tenant that publishes a
  flood sends most of it at low priority while another tenant's next event goes at 0;
- each segment chain (perceive → embed_batched → store_batched) of an event: ``segment_priority``, the event's priority
  plus one step per ``fair_segments_per_priority`` segments before it, so the tail of a long recording or
  conversation yields to other events' first segments.

Within one step messages stay first in, first out. On the embedded default (eager) priorities do nothing.
"""

from __future__ import annotations

from engram.schemas.events import EventStatus
from engram.schemas.settings import Settings
from engram.workers.stores.ledger import Ledger

#: Priority steps of the Redis transport (``broker_transport_options['priority_steps']``): 0 = highest.
PRIORITY_STEPS = list(range(10))
LOWEST = PRIORITY_STEPS[-1]
#: what kombu's Redis transport puts between a queue's name and a priority step in its list's name
PRIORITY_SEPARATOR = "\x06\x16"


def queue_lists(queue: str) -> list[str]:
    """The Redis lists holding ``queue``'s waiting messages, one per priority step: ``queue`` itself (step 0),
    then ``queue + "\\x06\\x16" + step`` (what ``LLEN`` must sum, e.g. for a queue's depth)."""
    return [f"{queue}{PRIORITY_SEPARATOR}{step}" if step else queue for step in PRIORITY_STEPS]


def queue_depth(redis_client, queue: str) -> int:
    """Messages waiting in ``queue`` on a Redis broker (``redis_client``: redis-py), every priority step."""
    with redis_client.pipeline() as pipe:
        for name in queue_lists(queue):
            pipe.llen(name)
        return sum(pipe.execute())


def tenant_priority(ledger: Ledger, tenant_id: str, settings: Settings) -> int:
    """The priority (0 highest .. 9) of a new message of ``tenant_id``'s events: one step lower per
    ``fair_tenant_events_per_priority`` of the tenant's other events queued or processing. Call it after the
    event itself was recorded as queued (it is not counted against itself)."""
    counts = ledger.counts(tenant_id)
    in_flight = counts.get(EventStatus.queued, 0) + counts.get(EventStatus.processing, 0)
    return min(LOWEST, max(0, in_flight - 1) // settings.fair_tenant_events_per_priority)


def segment_priority(base: int, segment_index: int, settings: Settings) -> int:
    """The priority of segment ``segment_index``'s chain of an event of priority ``base`` (0 highest .. 9):
    one step lower per ``fair_segments_per_priority`` segments before it."""
    return min(LOWEST, base + segment_index // settings.fair_segments_per_priority)
