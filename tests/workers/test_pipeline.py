"""The embedded default's runner (``workers.pipeline``): transient errors are tried again at once, up to the stage
tasks' retries, and the last try fails its event with the reason, as the stages' tasks applied in process did."""

from __future__ import annotations

import json

from engram.api.local import classify, publish_file
from engram.schemas.events import EventStatus
from engram.workers.pipeline import TRIES, run_events


def _conversations(tmp_path, names):
    paths = []
    for name in names:
        path = tmp_path / f"{name}.jsonl"
        path.write_text(
            "".join(
                json.dumps(
                    {
                        "message_id": f"{name}-{i}",
                        "session_id": "s1",
                        "speaker": name.title(),
                        "text": f"{name} waters the ferns on day {i}.",
                        "timestamp": f"2023-05-0{i + 1}T10:00:00Z",
                    }
                )
                + "\n"
                for i in range(2)
            )
        )
        paths.append(path)
    return paths


def test_a_transient_store_error_is_tried_again_and_the_round_stored(engram_env, tmp_path, monkeypatch):
    from engram.workers.stores.vectors import OBSERVATIONS

    rt = engram_env
    events = [publish_file(rt, classify(p), "t", "u", "d") for p in _conversations(tmp_path, ("ann", "bob"))]
    upsert, failed = rt.vectors.upsert, []

    def flaky_upsert(collection, points, *a, **k):  # the real store, away for its first two writes
        if collection == OBSERVATIONS and len(failed) < 2:
            failed.append(len(points))
            raise ConnectionError("store restarting")
        return upsert(collection, points, *a, **k)

    monkeypatch.setattr(rt.vectors, "upsert", flaky_upsert)
    records = run_events(rt, events)
    assert [r.status for r in records] == [EventStatus.done] * 2 and failed == [4, 4]
    assert rt.vectors.count(OBSERVATIONS) == 4


def test_a_transient_error_on_every_try_fails_the_event_with_retries_exhausted(engram_env, tmp_path, monkeypatch):
    rt = engram_env
    [bad, good] = [publish_file(rt, classify(p), "t", "u", "d") for p in _conversations(tmp_path, ("cat", "dan"))]
    size, tries = rt.objects.size, []

    def unreachable_for_one(key):  # the real object store, unreachable for one event's object
        if key == bad.object_key:
            tries.append(key)
            raise ConnectionError("object store unreachable")
        return size(key)

    monkeypatch.setattr(rt.objects, "size", unreachable_for_one)
    records = run_events(rt, [bad, good])
    assert len(tries) == TRIES
    assert (records[0].status, records[0].stage) == (EventStatus.failed, "ingest")
    assert records[0].reason == "ConnectionError: object store unreachable (retries exhausted)"
    assert records[1].status is EventStatus.done
