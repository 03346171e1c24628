"""Batching across events: on the embedded default (the runner ``workers.pipeline``, ``api.local.run_events``) the
segments of several files are embedded in one model pass, and a corrupt file inside the batch fails alone with its
reason; in the distributed mode the batched consumers (``workers.batching``) do the same on their workers."""

from __future__ import annotations

import json
from contextlib import contextmanager

from engram.api.local import classify, publish_file, run_events
from engram.schemas.events import EventStatus
from engram.schemas.search import SearchRequest
from engram.workers.memory.search import search
from engram.workers.models import get_model


def _conversation(path, speaker: str, lines: list[str]):
    path.write_text(
        "".join(
            json.dumps(
                {
                    "message_id": f"{path.stem}-{i}",
                    "session_id": "s1",
                    "speaker": speaker,
                    "text": t,
                    "timestamp": f"2023-05-0{i + 1}T10:00:00Z",
                }
            )
            + "\n"
            for i, t in enumerate(lines)
        )
    )
    return path


def test_files_embed_together_and_a_corrupt_one_fails_alone(engram_env, tmp_path, monkeypatch):
    rt = engram_env
    model = get_model("embedding", rt.settings)
    calls: list[list[str]] = []
    embed, embed_spans = model.embed, model.embed_spans

    def counting_embed(texts, *a, **k):
        calls.append(list(texts))
        return embed(texts, *a, **k)

    def counting_embed_spans(texts, *a, **k):
        calls.append(list(texts))
        return embed_spans(texts, *a, **k)

    monkeypatch.setattr(model, "embed", counting_embed)  # a spy: the real model runs
    monkeypatch.setattr(model, "embed_spans", counting_embed_spans)
    files = [
        _conversation(tmp_path / "a.jsonl", "Ann", ["I adopted a corgi named Biscuit.", "We walk at the lake."]),
        _conversation(tmp_path / "bad.jsonl", "Bob", ["fine"]),
        tmp_path / "broken.png",
        _conversation(tmp_path / "c.jsonl", "Cat", ["My sister flies to Lisbon in June.", "Ok."]),
    ]
    files[1].write_text(files[1].read_text().replace("2023-05-01T10:00:00Z", "yesterday-ish"))  # no timestamp
    files[2].write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\x00" * 20)  # a PNG cut short
    events = [publish_file(rt, classify(p), "t", "u", "d") for p in files]
    records = run_events(rt, events)

    assert [r.status for r in records] == [EventStatus.done, EventStatus.failed, EventStatus.failed, EventStatus.done]
    assert records[1].stage == "ingest" and "timestamp" in records[1].reason
    assert records[2].stage == "ingest" and records[2].reason
    # one model call for the turns of both good files (each text once), not one per file; later calls embed
    # other things (the speakers' names for their entities)
    good = [
        "Ann: I adopted a corgi named Biscuit.",
        "Ann: We walk at the lake.",
        "Cat: My sister flies to Lisbon in June.",
        "Cat: Ok.",
    ]
    turns = [[t for t in c if ": " in t] for c in calls]
    assert sorted(turns[0]) == sorted(good) and not any(turns[1:])
    hits = search(rt, SearchRequest(query="Where does the sister fly to?", tenant_id="t", user_id="u")).hits
    assert any("Lisbon" in h.text for h in hits)
    assert any(
        "corgi" in h.text for h in search(rt, SearchRequest(query="dog's name", tenant_id="t", user_id="u")).hits
    )


def test_engram_ingest_of_a_folder_runs_its_files_together(engram_env, tmp_path, monkeypatch):
    """``ingest_paths`` (``engram ingest``) publishes a folder's files and runs them together: one model pass for
    the turns of all of them; a conversation file with a bad record fails alone with its reason."""
    from engram.api.cli.main import ingest_paths

    rt = engram_env
    model = get_model("embedding", rt.settings)
    calls: list[list[str]] = []
    embed_spans = model.embed_spans

    def counting_embed_spans(texts, *a, **k):
        calls.append(list(texts))
        return embed_spans(texts, *a, **k)

    monkeypatch.setattr(model, "embed_spans", counting_embed_spans)  # a spy: the real model runs
    folder = tmp_path / "chats"
    folder.mkdir()
    _conversation(folder / "a.jsonl", "Ann", ["I adopted a corgi. His name is Biscuit."])
    _conversation(folder / "b.jsonl", "Bob", ["Fine."]).write_text('{"message_id": "x"}\n')
    _conversation(folder / "c.jsonl", "Cat", ["My sister flies to Lisbon. She leaves in June."])
    out = ingest_paths([folder], tenant="t", user="u", device="d", consolidate=False, quiet=True)
    assert sorted(p.name for p, _ in out["done"]) == ["a.jsonl", "c.jsonl"]
    assert [(p.name, r.stage) for p, r in out["failed"]] == [("b.jsonl", "ingest")]
    assert "invalid conversation record" in out["failed"][0][1].reason
    assert len(calls) == 1 and sorted(calls[0]) == [
        "Ann: I adopted a corgi. His name is Biscuit.",
        "Cat: My sister flies to Lisbon. She leaves in June.",
    ]


def test_a_rounds_observations_and_vectors_are_freed_once_stored_without_the_garbage_collector(engram_env, tmp_path):
    """``run_segments`` empties the round's batches once stored, so no observation or vector outlives the round
    waiting for a collection (with the collector off, nothing of the round is left among the live or unreachable
    objects)."""
    import gc

    from engram.schemas.observations import EmbeddedObservation, Observation

    rt = engram_env
    paths = [
        _conversation(tmp_path / f"{n}.jsonl", n.title(), [f"{n} keeps bees, hive number {i}." for i in range(4)])
        for n in ("ann", "bob")
    ]
    events = [publish_file(rt, classify(p), "t", "u", "d") for p in paths]
    gc.collect()
    gc.disable()
    try:
        records = run_events(rt, events)
        # type(), not isinstance: a dead weakref proxy among the objects raises on isinstance's __class__
        left = [o for o in gc.get_objects() if issubclass(type(o), EmbeddedObservation | Observation)]
    finally:
        gc.enable()
    assert [r.status for r in records] == [EventStatus.done] * 2
    assert rt.vectors.count("observations") == 8
    assert left == []


def _embedded_segments(rt, paths):
    """Publish and plan ``paths`` (conversation files), perceive and embed their segments together: (events,
    embedded batches)."""
    from engram.workers.embed import embed_batches
    from engram.workers.ingest import ingest_events
    from engram.workers.perceive import perceive_segments

    events = [publish_file(rt, classify(p), "t", "u", "d") for p in paths]
    batches = perceive_segments(rt, ingest_events(rt, events))
    return events, embed_batches(rt, batches)


def test_segments_of_many_events_are_linked_and_stored_in_one_upsert(engram_env, tmp_path, monkeypatch):
    """``link_and_store`` links and stores the segments of several events with one upsert of the observations
    collection and one entity save per tenant, and records each segment in the ledger."""
    from engram.workers.pipeline import link_and_store
    from engram.workers.stores.vectors import ENTITIES, OBSERVATIONS

    rt = engram_env
    paths = [
        _conversation(tmp_path / f"{n}.jsonl", n.title(), [f"{n} likes tea number {i}." for i in range(3)])
        for n in ("ann", "bob", "cat")
    ]
    events, embedded = _embedded_segments(rt, paths)
    assert len(embedded) == 3
    upserts: list[tuple[str, int]] = []
    upsert = rt.vectors.upsert

    def counting_upsert(collection, points, *a, **k):
        upserts.append((collection, len(points)))
        return upsert(collection, points, *a, **k)

    monkeypatch.setattr(rt.vectors, "upsert", counting_upsert)  # a spy: the real store writes
    assert sum(link_and_store(rt, embedded)) == 9
    assert [n for c, n in upserts if c == OBSERVATIONS] == [9]
    assert len([c for c, _ in upserts if c == ENTITIES]) <= 1
    assert [rt.ledger.get(e.event_id).status for e in events] == [EventStatus.done] * 3
    assert rt.vectors.count(OBSERVATIONS) == 9


def test_a_bad_segment_in_a_store_batch_fails_alone_with_its_reason(engram_env, tmp_path):
    """One segment the store refuses (a dense vector of the wrong size) fails its own event with the stage and
    reason; the joint write falls back to segment by segment and the others are stored and done."""
    from engram.workers.pipeline import link_and_store
    from engram.workers.stores.vectors import OBSERVATIONS

    rt = engram_env
    paths = [
        _conversation(tmp_path / f"{n}.jsonl", n.title(), [f"{n} flies to Oslo on day {i}." for i in range(2)])
        for n in ("ann", "bob", "cat")
    ]
    events, embedded = _embedded_segments(rt, paths)
    for item in embedded[1].items:
        item.dense = item.dense[:7]  # not a 384-d vector: the store refuses the point
    assert sum(link_and_store(rt, embedded)) == 4
    records = [rt.ledger.get(e.event_id) for e in events]
    assert [r.status for r in records] == [EventStatus.done, EventStatus.failed, EventStatus.done]
    assert records[1].stage == "store" and records[1].reason
    stored = {str(r.payload["event_id"]) for r in rt.vectors.scroll(OBSERVATIONS, None)}
    assert stored == {str(events[0].event_id), str(events[2].event_id)}


def test_a_transient_error_publishes_the_batch_again(engram_env, tmp_path):
    """A batched consumer's batch meets a transient error (a broker or store away for a moment): celery-batches
    acknowledges a batch whatever it raises, so ``consume`` publishes each request again (eager here: run at
    once) and the segments go on through ``embed_batched`` and ``store_batched`` to done. Bad JSON in a request
    is dropped alone."""
    from celery_batches import SimpleRequest

    from engram.schemas.jobs import ObservationBatch
    from engram.workers.batching import consume
    from engram.workers.embed import embed_batched
    from engram.workers.ingest import ingest_events
    from engram.workers.perceive import perceive

    rt = engram_env
    paths = [
        _conversation(tmp_path / f"{n}.jsonl", n.title(), [f"{n} parks at gate {i}." for i in range(2)])
        for n in ("ann", "bob")
    ]
    events = [publish_file(rt, classify(p), "t", "u", "d") for p in paths]
    jobs = ingest_events(rt, events)
    observed = [perceive.apply(args=[job]).result for job in jobs]

    def request(args):
        return SimpleRequest(
            id=f"r{len(args)}",
            name=embed_batched.name,
            args=args,
            kwargs={},
            delivery_info={},
            hostname="test",
            ignore_result=True,
            reply_to=None,
            correlation_id=None,
            request_dict={},
        )

    calls = []

    def flaky(rt_, batches):
        calls.append(len(batches))
        raise ConnectionError("broker restarting")

    pairs, done = consume(
        embed_batched,
        [request((o,)) for o in observed] + [request(({"job": 1},))],
        ObservationBatch,
        [("embed", flaky)],
    )
    assert len(pairs) == 2 and done == [] and calls == [2]  # one joint call; bad JSON left out
    assert [rt.ledger.get(e.event_id).status for e in events] == [EventStatus.done] * 2


def test_an_embed_pass_sends_its_segments_to_the_store_in_one_message_per_priority(engram_env, tmp_path):
    """``embed_batched`` hands the segments of one pass to ``store_batched`` as one message per priority they came
    with (a list of embedded segments), not one message per segment; the store reads both a list and a single
    segment (earlier releases), a bad item inside a list is dropped alone, and a transient error publishes a message
    of several segments again once. Eager here: each message published is one ``store_batched`` run, seen through
    Celery's ``task_prerun`` signal."""
    from celery_batches import SimpleRequest

    from engram.schemas.jobs import EmbeddedBatch
    from engram.workers.batching import consume
    from engram.workers.embed import embed_batched
    from engram.workers.perceive import perceive
    from engram.workers.store import store_batched

    rt = engram_env

    def request(i, args, priority):
        return SimpleRequest(
            id=f"r{i}",
            name=embed_batched.name,
            args=args,
            kwargs={},
            delivery_info={"priority": priority},
            hostname="test",
            ignore_result=True,
            reply_to=None,
            correlation_id=None,
            request_dict={},
        )

    def statuses(events):
        return [rt.ledger.get(e.event_id).status for e in events]

    events, jobs = _planned(rt, tmp_path, ("ann", "bob", "cat", "dan"), "rents bike {i} in Porto.")
    observed = [perceive.apply(args=[job]).result for job in jobs]
    with _store_messages() as sent:
        levels = (3, 5, 3, 3)
        assert embed_batched([request(i, (o,), p) for i, (o, p) in enumerate(zip(observed, levels, strict=True))]) == 4
    assert sorted(len(message) for message in sent) == [1, 3]  # priority 3's three segments, priority 5's one
    assert all(isinstance(message, list) for message in sent)
    assert statuses(events) == [EventStatus.done] * 4

    # a list with a bad item, and a single segment as earlier releases sent it: the good ones are stored
    events, jobs = _planned(rt, tmp_path, ("eve", "fay"), "rents a car on day {i}.")
    embedded = _embedded_segments_of(rt, jobs)
    requests = [request(0, ([embedded[0], {"job": 1}],), 3), request(1, (embedded[1],), 3)]
    assert store_batched(requests) == sum(len(b["items"]) for b in embedded)
    assert statuses(events) == [EventStatus.done] * 2

    # a transient error publishes a message of two segments again once, not once per segment
    events, jobs = _planned(rt, tmp_path, ("gus", "hal"), "sells a boat on day {i}.")
    embedded = _embedded_segments_of(rt, jobs)

    def flaky(rt_, batches):
        raise ConnectionError("store restarting")

    with _store_messages() as sent:
        pairs, done = consume(store_batched, [request(0, (embedded,), 3)], EmbeddedBatch, [("link", flaky)])
    assert len(pairs) == 2 and done == [] and len(sent) == 1 and len(sent[0]) == 2  # published again once, whole
    assert statuses(events) == [EventStatus.done] * 2


def _planned(rt, tmp_path, names, line: str):
    """Conversations of two messages (``line`` with ``{i}``), one per name, published and planned: (events,
    their segment jobs)."""
    from engram.workers.ingest import ingest_events

    paths = [
        _conversation(tmp_path / f"{n}.jsonl", n.title(), [f"{n} {line.format(i=i)}" for i in range(2)]) for n in names
    ]
    events = [publish_file(rt, classify(p), "t", "u", "d") for p in paths]
    return events, ingest_events(rt, events)


@contextmanager
def _store_messages():
    """Inside, the argument of each ``store_batched`` message run (eager: one request per run) is appended to the
    yielded list (Celery's ``task_prerun`` signal)."""
    from celery.signals import task_prerun

    from engram.workers.tasks import Task

    sent = []

    def seen(sender=None, args=None, **_):
        if sender is not None and sender.name == Task.store_batched.value:
            sent.append(args[0][0].args[0])

    task_prerun.connect(seen)
    try:
        yield sent
    finally:
        task_prerun.disconnect(seen)


def _embedded_segments_of(rt, jobs) -> list[dict]:
    """The JSON form of ``jobs``' segments perceived and embedded, as ``embed_batched`` sends them."""
    from engram.schemas.jobs import ObservationBatch
    from engram.workers.embed import embed_batches
    from engram.workers.perceive import perceive

    batches = [ObservationBatch.model_validate(perceive.apply(args=[job]).result) for job in jobs]
    return [b.model_dump(mode="json") for b in embed_batches(rt, batches)]
