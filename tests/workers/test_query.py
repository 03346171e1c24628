"""Hybrid search filters on a small real corpus (rendered screenshots through OCR, a chat JSONL), and RRF."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from engram.api.cli.main import ingest_paths
from engram.schemas.ask import AskRequest
from engram.schemas.events import EventStatus, MediaKind
from engram.schemas.memories import MemoryType
from engram.schemas.search import SearchRequest
from engram.workers.memory.search import rrf, search
from tests.workers.media.test_bad_input import render_png

JAN = datetime(2024, 1, 10, 9, 0, tzinfo=UTC)
FEB = datetime(2024, 2, 1, 18, 0, tzinfo=UTC)
MAR = datetime(2024, 3, 5, 9, 0, tzinfo=UTC)


@dataclass
class Corpus:
    """The ingested data: the runtime, and event ids by tenant and by source file name."""

    rt: object
    events: dict[str, set[str]]
    event_of: dict[str, str]

    def find(self, query: str, tenant: str = "acme", **kw):
        """Hits of a search in ``tenant`` (limit 50 unless given)."""
        kw.setdefault("limit", 50)
        return search(self.rt, SearchRequest(query=query, tenant_id=tenant, **kw)).hits


def _chat(path: Path) -> Path:
    msgs = [
        ("c1", "bob", "Did you approve the quarterly budget review yet?", "2024-02-01T18:00:00Z"),
        ("c2", "alice", "Yes, the invoice total looked fine to me.", "2024-02-01T18:00:30Z"),
        ("c3", "bob", "Great, then I will book the flight to Lisbon.", "2024-02-01T18:01:00Z"),
    ]
    path.write_text(
        "".join(
            json.dumps({"message_id": m, "session_id": "chat-1", "speaker": s, "text": t, "timestamp": ts}) + "\n"
            for m, s, t, ts in msgs
        )
    )
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Corpus:
    """Two tenants, two users, screenshots from January and March and a February chat, ingested once into
    an embedded default of this module (with consolidation, so episodic memories exist)."""
    from engram.workers.runtime import reset_runtimes, runtime

    root = tmp_path_factory.mktemp("query")
    src = root / "src"
    src.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENGRAM_DATA_DIR", str(root / "data"))
        for var in ("ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT", "ENGRAM_BROKER_URL"):
            mp.delenv(var, raising=False)
        reset_runtimes()
        rt = runtime()
        batches = [
            (
                "acme",
                "alice",
                "laptop",
                JAN,
                [render_png(src / "budget.png", ["Quarterly budget review", "invoice total 4812 dollars"])],
            ),
            (
                "acme",
                "alice",
                "laptop",
                MAR,
                [
                    render_png(
                        src / "trip.png", ["Flight to Lisbon boarding pass", "Gate 42 departs at noon"], size=(700, 160)
                    )
                ],
            ),
            ("acme", "alice", "laptop", None, [_chat(src / "chat.jsonl")]),
            (
                "acme",
                "bob",
                "desktop",
                JAN,
                [
                    render_png(
                        src / "bob.png", ["Bob spreadsheet: quarterly budget", "marketing costs 1200"], size=(660, 220)
                    )
                ],
            ),
            (
                "globex",
                "alice",
                "laptop",
                JAN,
                [
                    render_png(
                        src / "globex.png",
                        ["Globex quarterly budget review", "confidential merger plan"],
                        size=(680, 180),
                    )
                ],
            ),
        ]
        for tenant, user, device, when, files in batches:
            out = ingest_paths(files, tenant=tenant, user=user, device=device, captured_at=when, quiet=True)
            assert [p.name for p, _ in out["done"]] == [f.name for f in files], out
        events: dict[str, set[str]] = {}
        event_of: dict[str, str] = {}
        for tenant in ("acme", "globex"):
            for rec in rt.ledger.records(tenant, EventStatus.done, limit=1000):
                events.setdefault(tenant, set()).add(str(rec.event_id))
                event_of[Path(rec.source_name).name] = str(rec.event_id)
        yield Corpus(rt, events, event_of)
        reset_runtimes()


def test_hits_are_ranked_and_relevant(corpus):
    hits = corpus.find("Lisbon boarding pass", memory_types=[MemoryType.observation])
    assert hits and hits[0].source_name.endswith("trip.png")
    assert "Lisbon" in hits[0].text
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_tenant_isolation(corpus):
    acme, globex = corpus.events["acme"], corpus.events["globex"]
    assert acme and globex and not acme & globex
    for query in ("Globex quarterly budget review confidential merger plan", "budget", "Lisbon"):
        hits = corpus.find(query)
        assert hits
        for hit in hits:
            assert {str(e) for e in hit.event_ids} <= acme, hit
            assert "globex" not in hit.text.lower() and "merger" not in hit.text.lower()
    hits = corpus.find("quarterly budget review", tenant="globex")
    assert hits and all({str(e) for e in h.event_ids} <= globex for h in hits)
    assert corpus.find("budget", tenant="initech") == []


def test_user_filter(corpus):
    bob = corpus.find("quarterly budget", user_id="bob")
    assert bob and all(h.user_id == "bob" for h in bob)
    assert all({str(e) for e in h.event_ids} == {corpus.event_of["bob.png"]} for h in bob)
    alice = corpus.find("quarterly budget spreadsheet marketing", user_id="alice")
    assert alice and all(h.user_id == "alice" for h in alice)
    assert corpus.event_of["bob.png"] not in {str(e) for h in alice for e in h.event_ids}
    assert corpus.find("budget", user_id="carol") == []


def test_kinds_filter(corpus):
    shots = corpus.find("quarterly budget invoice", memory_types=[MemoryType.observation], kinds=[MediaKind.screenshot])
    assert shots and all(h.kind is MediaKind.screenshot for h in shots)
    assert not any(h.message_ids for h in shots)
    chat = corpus.find("quarterly budget invoice", memory_types=[MemoryType.observation], kinds=[MediaKind.text])
    assert chat and all(h.kind is MediaKind.text for h in chat)
    assert {h.message_ids[0] for h in chat} <= {"c1", "c2", "c3"}
    # memories are kept when one of their sources has the kind
    episodes = corpus.find("quarterly budget", memory_types=[MemoryType.episodic], kinds=[MediaKind.text])
    chat_event = corpus.event_of["chat.jsonl"]
    assert episodes and all({str(e) for e in h.event_ids} == {chat_event} for h in episodes)
    assert corpus.find("budget", kinds=[MediaKind.audio, MediaKind.clip]) == []


def test_time_range_filter(corpus):
    march_on = corpus.find(
        "budget Lisbon invoice flight",
        time_from=datetime(2024, 3, 1, tzinfo=UTC),
        memory_types=[MemoryType.observation, MemoryType.episodic],
    )
    assert march_on
    assert {str(e) for h in march_on for e in h.event_ids} == {corpus.event_of["trip.png"]}
    assert all(h.time >= datetime(2024, 3, 1, tzinfo=UTC) for h in march_on)

    january = corpus.find("budget Lisbon invoice flight", time_to=datetime(2024, 1, 31, tzinfo=UTC))
    assert january
    assert {str(e) for h in january for e in h.event_ids} == {corpus.event_of["budget.png"], corpus.event_of["bob.png"]}

    february = corpus.find(
        "budget Lisbon invoice flight",
        memory_types=[MemoryType.observation],
        time_from=datetime(2024, 2, 1, 17, tzinfo=UTC),
        time_to=datetime(2024, 2, 2, tzinfo=UTC),
    )
    assert sorted(h.message_ids[0] for h in february) == ["c1", "c2", "c3"]
    assert all(FEB <= h.time <= datetime(2024, 2, 1, 18, 1, tzinfo=UTC) for h in february)

    assert corpus.find("budget", time_from=datetime(2025, 1, 1, tzinfo=UTC)) == []


def test_memory_types_filter(corpus):
    episodic = corpus.find("quarterly budget Lisbon", memory_types=[MemoryType.episodic])
    assert episodic and all(h.memory_type is MemoryType.episodic for h in episodic)
    chat_episode = [h for h in episodic if corpus.event_of["chat.jsonl"] in {str(e) for e in h.event_ids}]
    assert chat_episode and set(chat_episode[0].message_ids) == {"c1", "c2", "c3"}
    observations = corpus.find("quarterly budget Lisbon", memory_types=[MemoryType.observation])
    assert observations and all(h.memory_type is MemoryType.observation for h in observations)
    mixed = {h.memory_type for h in corpus.find("quarterly budget Lisbon")}  # default: all but the vault
    assert MemoryType.observation in mixed and mixed <= {MemoryType.observation, MemoryType.episodic}
    assert corpus.find("budget", memory_types=[MemoryType.knowledge_vault]) == []  # never searched here


def test_limit(corpus):
    assert len(corpus.find("budget", limit=2)) == 2


def test_rrf_math():
    scores = rrf([["a", "b", "c"], ["b", "a"]], k=60)
    assert scores["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["c"] == pytest.approx(1 / 63)
    assert set(scores) == {"a", "b", "c"}
    assert rrf([["x", "y"]], k=1) == {"x": pytest.approx(1 / 2), "y": pytest.approx(1 / 3)}
    assert rrf([], k=60) == {} and rrf([[], []], k=60) == {}
    # an item ranked first once beats one ranked second once; appearing in more rankings beats both
    s = rrf([["p", "q"], ["r"], ["q"]], k=60)
    assert s["q"] > s["p"] == s["r"]


def test_device_and_app_filters(corpus):
    desk = corpus.find("quarterly budget", devices=["desktop"])
    assert desk and {str(e) for h in desk for e in h.event_ids} == {corpus.event_of["bob.png"]}
    assert {h.memory_type for h in corpus.find("quarterly budget", devices=["laptop"])} >= {MemoryType.observation}
    assert corpus.find("quarterly budget", devices=["phone"]) == []
    assert corpus.find("quarterly budget", apps=["Slack"]) == []


def test_entity_filter(corpus):
    from engram.workers.memory.entities import own_id

    alice = str(own_id("acme", "self", "alice"))  # the user's own turns link to the user's own entity
    hits = corpus.find("budget invoice flight", entities=[alice])
    assert hits and all(h.message_ids for h in hits)
    assert {h.message_ids[0] for h in hits if h.memory_type is MemoryType.observation} == {"c2"}
    # the chat's episode names alice among its sources, and lists alice's turn first
    episodes = [h for h in hits if h.memory_type is MemoryType.episodic]
    assert all(h.message_ids[0] == "c2" for h in episodes)


def test_named_speaker_boosts_their_turns(corpus):
    # bob's turns say "budget"; the query names alice, so her turn comes first
    hits = corpus.find(
        "what did alice say about the quarterly budget review",
        kinds=[MediaKind.text],
        memory_types=[MemoryType.observation],
    )
    assert hits[0].message_ids == ["c2"]
    plain = corpus.find(
        "what was said about the quarterly budget review", kinds=[MediaKind.text], memory_types=[MemoryType.observation]
    )
    assert plain[0].message_ids == ["c1"]


def test_names_in_the_query_become_entities_and_leave_the_dense_query(corpus):
    from engram.workers.link import entity_id
    from engram.workers.memory.entities import own_id
    from engram.workers.memory.search import named_entities

    ids, content = named_entities(corpus.rt, "acme", "What did ALICE's team and Bob say about the budget?")
    assert ids == {str(own_id("acme", "self", "alice")), str(entity_id("acme", "bob"))}  # alice is the user
    assert content == "What did team and say about the budget?"
    assert named_entities(corpus.rt, "acme", "What did Alicea say?") == (set(), "What did Alicea say?")


def test_turns_are_indexed_with_their_neighbours(corpus):
    from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter
    from engram.workers.text import sparse

    # only c3 says "Lisbon"; BM25 finds c1 and c2 through their neighbouring turns (contextual indexing)
    _, found = corpus.rt.vectors.search(
        OBSERVATIONS, None, sparse.query_vector("Lisbon"), tenant_filter("acme", "alice"), 10
    )
    assert {p.payload.get("message_id") for p in found} >= {"c1", "c2", "c3"}
    hits = corpus.find("Lisbon", kinds=[MediaKind.text], memory_types=[MemoryType.observation])
    assert hits[0].message_ids == ["c3"]
    assert all("Lisbon" not in h.text for h in hits[1:])  # a hit's text is the turn itself


def test_hits_carry_their_neighbouring_turns(corpus):
    hits = corpus.find(
        "Lisbon", kinds=[MediaKind.text], memory_types=[MemoryType.observation], user_id="alice", context_turns=1
    )
    by_msg = {h.message_ids[0]: h for h in hits}
    assert [(c.message_id, c.offset) for c in by_msg["c3"].context] == [("c2", -1)]
    assert [(c.message_id, c.offset) for c in by_msg["c2"].context] == [("c1", -1), ("c3", 1)]
    assert "invoice total" in by_msg["c3"].context[0].text
    two = corpus.find(
        "Lisbon", kinds=[MediaKind.text], memory_types=[MemoryType.observation], user_id="alice", context_turns=2
    )
    assert [c.message_id for c in next(h for h in two if h.message_ids == ["c3"]).context] == ["c1", "c2"]
    assert all(not h.context for h in corpus.find("Lisbon", user_id="alice"))  # none unless asked for


def test_time_expression_is_resolved_and_boosts_its_range(corpus):
    ref = datetime(2024, 3, 20, 12, 0, tzinfo=UTC)
    resp = search(
        corpus.rt,
        SearchRequest(
            query="quarterly budget review in January",
            tenant_id="acme",
            user_id="alice",
            reference_time=ref,
            limit=20,
            memory_types=[MemoryType.observation],
        ),
    )
    assert resp.time_range is not None and resp.time_range.expression == "in January"
    assert (resp.time_range.start, resp.time_range.end) == (
        datetime(2024, 1, 1, tzinfo=UTC),
        datetime(2024, 2, 1, tzinfo=UTC),
    )
    assert resp.hits[0].time.month == 1  # the January screenshot, over the February chat that says the same
    resp = search(
        corpus.rt,
        SearchRequest(
            query="quarterly budget review in February",
            tenant_id="acme",
            user_id="alice",
            reference_time=ref,
            limit=20,
            memory_types=[MemoryType.observation],
        ),
    )
    assert resp.hits[0].time.month == 2
    # a soft boost: what lies outside the range is still found
    assert {h.time.month for h in resp.hits} >= {1, 2}
    off = search(
        corpus.rt,
        SearchRequest(
            query="quarterly budget review in February", tenant_id="acme", reference_time=ref, resolve_time=False
        ),
    )
    assert off.time_range is None


def test_a_request_reads_time_words_in_its_own_zone(corpus):
    """``timezone`` on the request: "yesterday" counts from the asker's wall clock, not the server's zone."""
    ref = datetime(2024, 3, 20, 3, 0, tzinfo=UTC)  # 20 March in UTC, still 19 March in Los Angeles
    ask = dict(
        query="budget review yesterday",
        tenant_id="acme",
        user_id="alice",
        reference_time=ref,
        memory_types=[MemoryType.observation],
        reinforce=False,
    )
    utc = search(corpus.rt, SearchRequest(**ask, timezone="UTC")).time_range
    la = search(corpus.rt, SearchRequest(**ask, timezone="America/Los_Angeles")).time_range
    assert (utc.start, utc.end) == (datetime(2024, 3, 19, tzinfo=UTC), datetime(2024, 3, 20, tzinfo=UTC))
    assert (la.start, la.end) == (datetime(2024, 3, 18, 7, tzinfo=UTC), datetime(2024, 3, 19, 7, tzinfo=UTC))
    with pytest.raises(ValidationError, match="not an IANA time zone"):
        SearchRequest(**ask, timezone="Mars/Olympus")
    with pytest.raises(ValidationError, match="not an IANA time zone"):
        AskRequest(question="what happened yesterday?", tenant_id="acme", timezone="Europe/Nowhere")


def _episode(corpus, query="quarterly budget invoice"):
    hits = corpus.find(query, user_id="alice", memory_types=[MemoryType.episodic], reinforce=False)
    assert hits, "the chat's episode"
    return hits[0]


def test_superseded_and_archived_memories_are_left_out_unless_history(corpus):
    from engram.workers.stores.vectors import collection_for

    coll = collection_for(MemoryType.episodic)
    ep = _episode(corpus)
    try:
        for change in ({"archived": True}, {"superseded_by": "00000000-0000-0000-0000-000000000001"}):
            corpus.rt.vectors.set_payload(coll, [ep.id], change)
            found = corpus.find("quarterly budget invoice", user_id="alice", reinforce=False)
            assert ep.id not in {h.id for h in found}
            history = corpus.find(
                "quarterly budget invoice",
                user_id="alice",
                reinforce=False,
                include_history=True,
                memory_types=[MemoryType.episodic],
            )
            assert ep.id in {h.id for h in history}
            corpus.rt.vectors.set_payload(coll, [ep.id], {"archived": False, "superseded_by": None})
    finally:
        corpus.rt.vectors.set_payload(coll, [ep.id], {"archived": False, "superseded_by": None})
    assert _episode(corpus).id == ep.id


def test_faded_memories_rank_lower_and_returned_ones_are_reinforced(corpus):
    from engram.workers.stores.vectors import collection_for

    coll = collection_for(MemoryType.episodic)
    ep = _episode(corpus)
    before = corpus.rt.vectors.retrieve(coll, [ep.id])[0].payload
    old = datetime(2020, 1, 1, tzinfo=UTC).isoformat()
    try:
        corpus.rt.vectors.set_payload(coll, [ep.id], {"last_recalled_at": old, "updated_at": old, "recalls": 0})
        faded = next(
            h
            for h in corpus.find(
                "quarterly budget invoice", user_id="alice", reinforce=False, memory_types=[MemoryType.episodic]
            )
            if h.id == ep.id
        )
        assert faded.score < 0.6 * ep.score  # retention ~0: the floor of decayed_score (0.5)
        assert corpus.rt.vectors.retrieve(coll, [ep.id])[0].payload["recalls"] == 0  # reinforce=False
        hits = corpus.find("quarterly budget invoice", user_id="alice", memory_types=[MemoryType.episodic])
        assert ep.id in {h.id for h in hits}
        after = corpus.rt.vectors.retrieve(coll, [ep.id])[0].payload
        assert after["recalls"] == 1 and after["last_recalled_at"] > old
        assert _episode(corpus).score == pytest.approx(ep.score, rel=0.02)  # recalled now: fresh again
    finally:
        corpus.rt.vectors.set_payload(
            coll, [ep.id], {k: before.get(k) for k in ("last_recalled_at", "updated_at", "recalls", "strength")}
        )


def test_search_output_shows_the_resolved_time_range():
    from io import StringIO

    from rich.console import Console

    from engram.api.cli.main import print_hits
    from engram.schemas.search import SearchResponse
    from engram.workers.text.timeexpr import resolve

    ref = datetime(2023, 5, 20, 12, tzinfo=UTC)
    resp = SearchResponse(
        query="what did I buy last Tuesday",
        hits=[],
        took_ms=1.0,
        time_range=resolve("what did I buy last Tuesday", ref),
    )
    out = StringIO()
    print_hits(resp, Console(file=out, width=200))
    assert "'last Tuesday' → 2023-05-16 00:00 UTC to 2023-05-17 00:00 UTC (as of 2023-05-20" in out.getvalue()


def test_search_output_shows_sources_by_their_file_names():
    from io import StringIO

    from rich.console import Console

    from engram.api.cli.main import print_hits
    from engram.schemas.memories import MemoryType
    from engram.schemas.search import SearchHit, SearchResponse

    at = datetime(2023, 5, 20, 12, tzinfo=UTC)
    hits = [
        SearchHit(
            id=uuid.uuid4(),
            memory_type=MemoryType.observation,
            score=0.5,
            text="ask not",
            time=at,
            source_name="/data/audio/jfk.flac",
            start_s=8.3,
        ),
        SearchHit(
            id=uuid.uuid4(),
            memory_type=MemoryType.observation,
            score=0.45,
            text="notes",
            time=at,
            source_name="/data/Notes, May/plan, v2.png",
        ),
        SearchHit(
            id=uuid.uuid4(),
            memory_type=MemoryType.episodic,
            score=0.4,
            text="a morning",
            time=at,
            source_name="/data/audio/jfk.flac, /data/screens/a.png, b.png …",
        ),
        # a memory with no source names (``memory.search._hit`` gives None) prints an empty source
        SearchHit(id=uuid.uuid4(), memory_type=MemoryType.core, score=0.3, text="likes kayaking", time=at),
    ]
    out = StringIO()
    print_hits(SearchResponse(query="q", hits=hits, took_ms=1.0), Console(file=out, width=200))
    text = out.getvalue()
    assert "jfk.flac @8.3s" in text and "jfk.flac, a.png, b.png …" in text and "plan, v2.png" in text
    assert "/data/" not in text and "May" not in text and "likes kayaking" in text


def test_weighted_rrf():
    from engram.workers.memory.search import rrf

    plain = rrf([["a", "b"], ["b", "c"]], k=60)
    assert plain["b"] == pytest.approx(1 / 62 + 1 / 61) and plain["a"] == pytest.approx(1 / 61)
    weighted = rrf([["a", "b"], ["b", "c"]], k=60, weights=[2.0, 1.0])
    assert weighted["a"] == pytest.approx(2 / 61) and weighted["c"] == pytest.approx(1 / 62)
    assert max(weighted, key=weighted.get) == "b"
    with pytest.raises(ValueError):
        rrf([["a"]], k=60, weights=[1.0, 1.0])
