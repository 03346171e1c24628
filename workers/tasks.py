"""Task and queue names of the pipeline, in one place: the stages register their tasks under these names
(``workers.app.task``), the distributed mode's chains are built from them (a stage never imports another), the
API publishes by them and ``workers.app`` routes them to their queues. This module imports nothing but the
standard library, so the slim API image can use it.

The names keep the wire form ``workers.<stage>.<task>`` of earlier releases (before the code moved into the
``engram`` namespace and into role folders), so messages already queued stay valid across an upgrade: no queue
needs draining.
"""

from __future__ import annotations

from enum import StrEnum


class Queue(StrEnum):
    """Queues, split by kind of work so operators scale each without code changes."""

    ingest = "ingest"
    perceive_cpu = "perceive.cpu"
    perceive_gpu = "perceive.gpu"
    store = "store"
    consolidate = "consolidate"
    query = "query"
    maintenance = "maintenance"  # beat's sweeps; every worker serves it (api.processes.worker_argv)


class Task(StrEnum):
    """Every Celery task by its wire name, ``workers.<module>.<task>``: the module is the one under ``workers/`` that
    defines the task (``tests/test_layout.py`` checks it), so a name found in a broker or a log leads to its code."""

    ingest = "workers.ingest.ingest"
    redeliver_stalled = "workers.ingest.redeliver_stalled"
    perceive = "workers.perceive.perceive"
    embed_batched = "workers.embed.embed_batched"
    store_batched = "workers.store.store_batched"
    consolidate_user = "workers.consolidate.consolidate_user"
    consolidate_due = "workers.consolidate.consolidate_due"
    archive_decayed = "workers.admin.archive_decayed"
    search = "workers.query.search"
    ask = "workers.ask.ask"
    memory_get = "workers.admin.memory_get"
    memory_list = "workers.admin.memory_list"
    memory_delete = "workers.admin.memory_delete"
    memory_export = "workers.admin.memory_export"
    memory_forget = "workers.admin.memory_forget"
    memory_forget_scope = "workers.admin.memory_forget_scope"
    memory_update = "workers.admin.memory_update"
    timeline = "workers.admin.timeline"
    entity_list = "workers.admin.entity_list"
    entity_name = "workers.admin.entity_name"
    entity_merge = "workers.admin.entity_merge"
    entity_split = "workers.admin.entity_split"
    entity_samples = "workers.admin.entity_samples"
    entity_samples_many = "workers.admin.entity_samples_many"
    memories_from = "workers.admin.memories_from"
    entity_sample_media = "workers.admin.entity_sample_media"
    expire_staged = "workers.admin.expire_staged"
    retention = "workers.retention.apply"
    store_backup = "workers.backup.store_backup"
    store_restore = "workers.backup.store_restore"
    archive_import = "workers.archive.import"
    archive_export = "workers.archive.export"


#: The queue of each task. Beat's sweeps have a queue of their own: behind an ingest backlog they would expire
#: unrun. Speech segments go to ``perceive.gpu`` per message (``workers.ingest.dispatch``), not by this table.
QUEUE_OF: dict[Task, Queue] = {
    Task.ingest: Queue.ingest,
    Task.redeliver_stalled: Queue.maintenance,
    Task.perceive: Queue.perceive_cpu,
    Task.embed_batched: Queue.perceive_gpu,
    Task.store_batched: Queue.store,
    Task.consolidate_user: Queue.consolidate,
    Task.consolidate_due: Queue.consolidate,
    Task.archive_decayed: Queue.consolidate,
    Task.search: Queue.query,
    Task.ask: Queue.query,  # ask and memory management read the vector store
    Task.memory_get: Queue.query,
    Task.memory_list: Queue.query,
    Task.memory_delete: Queue.query,
    Task.memory_export: Queue.query,
    Task.memory_forget: Queue.query,
    Task.memory_forget_scope: Queue.query,
    Task.memory_update: Queue.query,
    Task.timeline: Queue.query,
    Task.entity_list: Queue.query,
    Task.entity_name: Queue.query,
    Task.entity_merge: Queue.query,
    Task.entity_split: Queue.query,
    Task.entity_samples: Queue.query,
    Task.entity_samples_many: Queue.query,
    Task.memories_from: Queue.query,
    Task.entity_sample_media: Queue.query,
    Task.expire_staged: Queue.maintenance,
    Task.retention: Queue.consolidate,  # it marks observations: where the vector store opens
    Task.store_backup: Queue.consolidate,  # the store's owner copies its own shards (engram backup of a cluster)
    Task.store_restore: Queue.consolidate,
    Task.archive_import: Queue.consolidate,  # the store's owner writes an archive's points (engram import)
    Task.archive_export: Queue.consolidate,
}

#: Batched consumers (celery-batches' ``Batches``, options in ``runtime.TASK_OPTIONS["batch"]``) and how many messages
#: each buffers before it runs them as one call (one model pass, one store request); it runs what it holds
#: ``BATCH_FLUSH_SECONDS`` after the first came (the accumulation window) when fewer come. A worker serving their
#: queues prefetches enough messages to fill a batch (``api.processes.prefetch_multiplier``), or a batch would wait
#: for the window with fewer. The cpu workers' ``embed_batched`` takes 8: each message prefetched is held by that
#: worker (late acks), so a larger batch would let one cpu worker hold perception work other workers could do;
#: the one store worker takes 32 (nothing else serves its queues).
BATCH_FLUSH_EVERY: dict[Task, int] = {Task.embed_batched: 8, Task.store_batched: 32}
BATCHED = tuple(BATCH_FLUSH_EVERY)
#: Each batched consumer's accumulation window, seconds. The model's is the longer: when events come slower than
#: the cpu workers could take them, each worker's share fills its batches less as workers are added (300 chat
#: events on 2 cores, 4 cpu workers: 151 model calls of 7 texts with a 0.25 s window, 62 with 0.5 s, against 41
#: calls of 23 for one worker), and a call of few texts costs the model and the stage more per text. The store's
#: stays short: one store worker takes every segment, so its batches fill anyway. Both windows together add at
#: most 0.75 s to publish→searchable on an idle cluster (target: p95 ≤ 2 s).
BATCH_FLUSH_SECONDS: dict[Task, float] = {Task.embed_batched: 0.5, Task.store_batched: 0.25}

#: Queues whose tasks open the vector store. With the embedded store exactly one ``--pool solo`` worker serves
#: all of them.
QDRANT_BOUND = (Queue.store, Queue.consolidate, Queue.query)

#: The stage modules, which register the tasks above (imported by a worker at start and by ``app.load_tasks``).
STAGE_MODULES = tuple(
    f"engram.workers.{stage}"
    for stage in (
        "ingest",
        "perceive",
        "embed",
        "store",
        "consolidate",
        "query",
        "ask",
        "admin",
        "retention",
        "backup",
        "archive",
    )
)
