"""Episode grouping of the consolidate stage: sessions, gaps, size, ties, and the stored episodic memories."""

from __future__ import annotations

import json
import random
import uuid

from qdrant_client import models as qm

from engram.schemas.memories import MemoryType
from engram.workers.memory.episodes import group_episodes
from engram.workers.stores.vectors import collection_for, tenant_filter

DAY = 1_700_000_000.0


def rec(session: str | None, t: float, i: int = 0, msg: str | None = None) -> qm.Record:
    """An observation record as consolidation scrolls it (times in seconds since the epoch)."""
    payload = {
        "start_ts": t,
        "end_ts": t,
        "segment_index": i,
        "session_id": session,
        "message_id": msg,
        "text": f"{session} {t}",
    }
    return qm.Record(id=str(uuid.uuid4()), payload=payload, vector=None)


def shape(episodes: list[list[qm.Record]]) -> list[list[tuple]]:
    return [[(r.payload["session_id"], r.payload["start_ts"]) for r in ep] for ep in episodes]


def test_sessions_on_the_same_date_stay_apart_whatever_the_order():
    """Two sessions whose turns have the same times (LongMemEval gives sessions of one date the same
    start) make one episode each, not one per turn, on every ordering of the input."""
    records = [rec(s, DAY + 60 * i, msg=f"{s}:{i}") for s in ("a", "b") for i in range(5)]
    expected = [[("a", DAY + 60 * i) for i in range(5)], [("b", DAY + 60 * i) for i in range(5)]]
    for seed in range(5):
        random.Random(seed).shuffle(records)
        assert shape(group_episodes(records, gap_s=1800, max_obs=12)) == expected


def test_gap_and_size_split_a_session_and_episodes_come_in_time_order():
    records = [rec("a", DAY + 10 * i) for i in range(5)] + [rec("a", DAY + 10_000 + i) for i in range(3)]
    records += [rec(None, DAY + 5), rec(None, DAY + 6)]  # screenshots between the turns: their own stream
    episodes = group_episodes(records, gap_s=1800, max_obs=3)
    assert [len(ep) for ep in episodes] == [3, 2, 2, 3]
    assert [ep[0].payload["session_id"] for ep in episodes] == ["a", None, "a", "a"]
    assert [ep[0].payload["start_ts"] for ep in episodes] == sorted(ep[0].payload["start_ts"] for ep in episodes)


def test_consolidated_episodes_cite_one_session_each(engram_env, tmp_path):
    """Through the real path: a chat file with two sessions at the same timestamps gives episodic memories
    whose sources each lie in one session, and every turn is in exactly one episode."""
    from engram.api.cli.main import ingest_paths

    lines = [
        {
            "message_id": f"{s}:{i}",
            "session_id": s,
            "speaker": "user" if i % 2 == 0 else "assistant",
            "text": f"{s} turn {i} about {'gardening tomatoes' if s == 'garden' else 'fixing the bicycle'}",
            "timestamp": f"2024-05-01T10:0{i}:00Z",
        }
        for s in ("garden", "bike")
        for i in range(4)
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = ingest_paths([path], tenant="acme", user="alice", device="laptop", quiet=True)
    assert not out["failed"]
    rt = engram_env
    episodes = rt.vectors.scroll(collection_for(MemoryType.episodic), tenant_filter("acme", "alice"))
    sessions = [(r.payload.get("provenance") or {}).get("session_ids") for r in episodes]
    assert sorted(map(tuple, sessions)) == [("bike",), ("garden",)]
    cited = [m for r in episodes for m in (r.payload.get("provenance") or {}).get("message_ids", [])]
    assert sorted(cited) == sorted(x["message_id"] for x in lines)
