"""Deletion leaves nothing behind (issue 44) for the two scopes ``test_forget_nowhere`` does not take: a device
(``engram forget --device``) and an event (``engram forget --event``). Alice's chat from her phone and one of her
laptop's share a session (one episode quotes both), a second laptop chat stands alone; after each forget every file
under the data dir and the commands' JSON logs are searched for the deleted sentences, as ``test_forget_nowhere``
does: none is found, search does not return them, the ledger row of the forgotten event is gone, and the episode
drawn from both devices keeps the laptop's words without the phone's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram.api.local import classify, publish_file, run_events
from engram.schemas.events import EventStatus
from engram.schemas.memories import MemoryType
from engram.workers.stores.vectors import tenant_filter
from tests.workers.memory.test_forget_nowhere import cli, found_in, fresh_runtime, persisted, searched, stored

TENANT, USER = "acme", "alice"
PHONE = "The tangerine heron borrowed my accordion behind the lighthouse bakery"
LAPTOP = "The quarterly invoice for the Oslo office is due on the fourteenth"
EVENT = "Our cobalt marmot password hint is the name of the second goldfish"
EVENT_KEPT = "The dentist moved the check-up to Tuesday afternoon"


def _chat(path: Path, session: str, lines: list[tuple[str, str]]) -> Path:
    """A chat file of ``(time, text)`` turns in one session, spoken by alice."""
    path.write_text(
        "".join(
            json.dumps(
                {"message_id": f"{session}-{i}", "session_id": session, "speaker": "alice", "text": t, "timestamp": ts}
            )
            + "\n"
            for i, (ts, t) in enumerate(lines)
        )
    )
    return path


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_forget_by_device_and_by_event_leaves_nothing(engram_env, tmp_path):
    from engram.workers.consolidate import consolidate_user
    from engram.workers.runtime import reset_runtimes

    rt = engram_env
    data = rt.settings.data_dir
    phone = _chat(tmp_path / "phone.jsonl", "s1", [("2024-05-01T10:00:00+00:00", PHONE)])
    laptop = _chat(tmp_path / "laptop.jsonl", "s1", [("2024-05-01T10:01:00+00:00", LAPTOP)])
    other = _chat(
        tmp_path / "other.jsonl",
        "s2",
        [("2024-05-02T09:00:00+00:00", EVENT), ("2024-05-02T17:00:00+00:00", EVENT_KEPT)],
    )
    events = [
        publish_file(rt, classify(phone), TENANT, USER, "phone"),
        publish_file(rt, classify(laptop), TENANT, USER, "laptop"),
        publish_file(rt, classify(other), TENANT, USER, "laptop"),
    ]
    assert all(r.status is EventStatus.done for r in run_events(rt, events))
    consolidate_user(TENANT, USER)
    episodes = [json.dumps(p.payload) for p in rt.vectors.scroll(MemoryType.episodic.value, tenant_filter(TENANT))]
    assert any(PHONE in e and LAPTOP in e for e in episodes), episodes  # one episode quotes both devices
    assert any(EVENT in e for e in episodes)
    before = persisted(data)
    assert found_in(before, [PHONE.encode()]) and found_in(before, [EVENT.encode()])  # the test can see them
    reset_runtimes()  # the CLI below takes the embedded store
    logs = b""

    # 1. a device: the phone's chat, its original and ledger row; a memory quoting the laptop's too keeps it
    logs += cli(data, "forget", "--device", "phone", "--tenant", TENANT, "--yes")
    blobs = persisted(data)
    assert not found_in(blobs, [PHONE.encode(), b"tangerine heron"]), found_in(blobs, [PHONE.encode()])
    assert found_in(blobs, [LAPTOP.encode()]) and found_in(blobs, [EVENT_KEPT.encode()])
    rt = fresh_runtime()
    assert rt.ledger.get(events[0].event_id) is None and rt.ledger.get(events[1].event_id) is not None
    assert PHONE not in stored(rt) and "tangerine" not in searched(rt, "tangerine heron accordion bakery")
    laptop_memories = [
        p.payload
        for c in (MemoryType.episodic.value, MemoryType.semantic.value)
        for p in rt.vectors.scroll(c, tenant_filter(TENANT, USER))
        if LAPTOP in json.dumps(p.payload)
    ]
    assert laptop_memories  # the memory drawn from both devices stays, rewritten without the phone's words
    assert "Oslo office" in searched(rt, "quarterly invoice Oslo office")
    reset_runtimes()

    # 2. an event: the second laptop chat, every one of its messages and what quoted them
    logs += cli(data, "forget", "--event", str(events[2].event_id), "--tenant", TENANT, "--yes")
    blobs = persisted(data)
    gone = [EVENT.encode(), b"cobalt marmot", EVENT_KEPT.encode(), b"dentist moved"]
    assert not found_in(blobs, gone), found_in(blobs, gone)
    assert found_in(blobs, [LAPTOP.encode()])
    rt = fresh_runtime()
    assert rt.ledger.get(events[2].event_id) is None
    everything = stored(rt) + searched(rt, "cobalt marmot password goldfish") + searched(rt, "dentist check-up")
    assert "marmot" not in everything and "dentist" not in everything
    assert not found_in({"cli logs": logs}, gone + [PHONE.encode()])
    assert b'"event"' in logs  # JSON log lines were written
