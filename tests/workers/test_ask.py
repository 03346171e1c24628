"""``ask`` on the embedded default with a few ingested chats: without an LLM (the ranked evidence) and with
an LLM played by a scripted stub HTTP server (a search round then an answer, malformed replies, the endpoint
down, the round limit, Gemini)."""

from __future__ import annotations

import json
import re
import socket
import uuid
from pathlib import Path

import pytest

from engram.schemas.ask import AskFailed, AskRequest
from engram.schemas.memories import MemoryType
from engram.schemas.search import SearchRequest
from engram.workers.stores.vectors import tenant_filter
from tests.llm_stub import ScriptedLlm, last_user_text

TENANT = "default"
QUESTION = "Where is Alice flying to for the budget review?"

CHATS = {
    "trip.jsonl": [
        ("Alice", "Flights to Lisbon are booked for the budget review next week."),
        ("Bob", "Nice, the review is on Thursday at 10 in the Lisbon office."),
        ("Alice", "I land at 8 in the morning, so I will go straight there."),
    ],
    "garden.jsonl": [
        ("Alice", "The tomatoes in the garden finally turned red."),
        ("Carol", "Pick them before the birds do! Basil is doing well too."),
    ],
    "music.jsonl": [
        ("Bob", "I started learning the cello last month."),
        ("Alice", "Wonderful, my sister plays the violin in an orchestra."),
    ],
}


def write_chat(path: Path, lines: list[tuple[str, str]], day: int) -> Path:
    recs = [
        {
            "message_id": f"{path.stem}-{i}",
            "session_id": path.stem,
            "speaker": who,
            "text": text,
            "timestamp": f"2024-05-{day:02d}T09:{i:02d}:00Z",
        }
        for i, (who, text) in enumerate(lines)
    ]
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return path


@pytest.fixture(scope="module")
def chats(tmp_path_factory):
    """An embedded default with the three chats ingested (and consolidated) for user alice, shared by this
    module's tests (ask only reads); yields the Runtime."""
    from engram.api.cli.main import ingest_paths
    from engram.workers.runtime import reset_runtimes, runtime

    tmp = tmp_path_factory.mktemp("ask")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENGRAM_DATA_DIR", str(tmp / "data"))
        for var in ("ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT", "ENGRAM_BROKER_URL"):
            mp.delenv(var, raising=False)
        reset_runtimes()
        files = [write_chat(tmp / name, lines, day) for day, (name, lines) in enumerate(CHATS.items(), start=1)]
        out = ingest_paths(files, TENANT, "alice", "laptop", quiet=True)
        assert len(out["done"]) == 3, out
        yield runtime()
        reset_runtimes()


def use_llm(monkeypatch, url: str, provider: str = "openai") -> None:
    monkeypatch.setenv("ENGRAM_MODELS__LLM_PROVIDER", provider)
    monkeypatch.setenv("ENGRAM_MODELS__LLM_BASE_URL", url)
    monkeypatch.setenv("ENGRAM_MODELS__LLM_MODEL", "stub-model")
    monkeypatch.setenv("ENGRAM_MODELS__LLM_MAX_RETRIES", "0")


def run(question: str = QUESTION, **kw):
    from engram.workers.ask import ask
    from engram.workers.runtime import runtime

    return ask(runtime(), AskRequest(question=question, tenant_id=TENANT, **kw))


def evidence_id(body: dict, needle: str) -> str:
    """The id of the first evidence line of the request's prompts that contains ``needle``."""
    prompts = "\n".join(m["content"] for m in body["messages"]) if "messages" in body else last_user_text(body)
    for line in prompts.splitlines():
        if needle in line and (m := re.match(r"\[([0-9a-f-]{36})\]", line)):
            return m.group(1)
    raise AssertionError(f"{needle!r} not in the evidence shown to the LLM")


def test_without_llm_returns_the_ranked_evidence(chats):
    from engram.workers.memory.search import search

    resp = run(limit=5)
    ranked = search(chats, SearchRequest(query=QUESTION, tenant_id=TENANT, limit=5)).hits
    assert resp.answer is None and resp.llm is None
    assert [h.id for h in resp.memories] == [h.id for h in ranked] and resp.memories
    assert "Lisbon" in resp.memories[0].text
    assert len(resp.rounds) == 1 and resp.rounds[0].query == QUESTION and resp.rounds[0].decision is None


def test_llm_searches_again_then_answers_with_the_memories_it_used(chats, monkeypatch):
    made_up = str(uuid.uuid4())
    answer = lambda body: {  # noqa: E731
        "action": "answer",
        "answer": "To Lisbon.",
        "memory_ids": [evidence_id(body, "Flights to Lisbon"), made_up],
    }
    with ScriptedLlm([{"action": "search", "query": "Alice flights booked"}, answer]) as llm:
        use_llm(monkeypatch, llm.openai_url)
        resp = run(user_id="alice")
    assert resp.answer == "To Lisbon." and resp.llm == "openai:stub-model"
    assert [r.query for r in resp.rounds] == [QUESTION, "Alice flights booked"]
    assert [r.decision for r in resp.rounds] == ["search", "answer"]
    [used] = resp.memories  # the made-up id is dropped
    assert "Flights to Lisbon" in used.text and used.id in {h.id for h in resp.evidence}
    assert [p for p, _ in llm.requests] == ["/v1/chat/completions"] * 2
    first, second = (body for _, body in llm.requests)
    assert first["model"] == "stub-model" and first["response_format"] == {"type": "json_object"}
    assert first["messages"][0]["role"] == "system" and '"action": "search"' in first["messages"][0]["content"]
    assert QUESTION in last_user_text(first) and "Round 1 of 5" in last_user_text(first)
    assert "'Alice flights booked'" in last_user_text(second) and "Round 2 of 5" in last_user_text(second)


def test_evidence_shows_neighbouring_turns_and_the_cited_memories_are_reinforced(chats, monkeypatch):
    from engram.workers.stores.vectors import collection_for

    coll = collection_for(MemoryType.episodic)
    shown: set[str] = set()

    def recalls_now() -> dict[str, int]:
        return {
            str(r.id): (r.payload or {}).get("recalls", 0) for r in chats.vectors.scroll(coll, tenant_filter(TENANT))
        }

    def cite_first_episode(body):
        shown.update(re.findall(r"^\[([0-9a-f-]{36})\] episodic", last_user_text(body), re.M))
        return {"action": "answer", "answer": "The cello.", "memory_ids": [evidence_id(body, "] episodic")]}

    question = "What instrument did Bob start learning?"
    recalls = recalls_now()
    cello = {"action": "answer", "answer": "The cello.", "memory_ids": []}
    with ScriptedLlm([cello, cite_first_episode]) as llm:
        use_llm(monkeypatch, llm.openai_url)
        run(question, user_id="alice", memory_types=[MemoryType.observation])
        resp = run(question, user_id="alice", memory_types=[MemoryType.episodic])
    # the cello turn is shown with the reply that follows it in its chat
    prompt = last_user_text(llm.requests[0][1])
    assert re.search(r"started learning the cello.*\n    \(context \+1\) .*sister plays the violin", prompt)
    [used] = resp.memories
    assert used.memory_type is MemoryType.episodic and len(shown) >= 2
    after = recalls_now()
    assert after[str(used.id)] == recalls[str(used.id)] + 1  # the cited memory, once
    assert all(after[e] == recalls[e] for e in shown - {str(used.id)})  # shown (searched) but not cited: untouched


def test_a_malformed_reply_is_sent_back_once(chats, monkeypatch):
    fenced = lambda body: (  # noqa: E731
        "```json\n"
        + json.dumps({"action": "answer", "answer": "Lisbon", "memory_ids": [evidence_id(body, "Lisbon")]})
        + "\n```"
    )
    with ScriptedLlm(['{"action": "maybe"}', fenced]) as llm:
        use_llm(monkeypatch, llm.openai_url)
        resp = run()
    assert resp.answer == "Lisbon" and len(resp.memories) == 1 and len(resp.rounds) == 1
    retry = llm.requests[1][1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": '{"action": "maybe"}'}
    assert "not valid" in retry[-1]["content"]


def test_two_malformed_replies_fail_clearly(chats, monkeypatch):
    with ScriptedLlm(["I think it is Lisbon.", '{"action": "answer"}']) as llm:
        use_llm(monkeypatch, llm.openai_url)
        with pytest.raises(AskFailed, match="replied twice without the ask protocol's JSON") as err:
            run()
    assert "answer.answer: Field required" in str(err.value) and "stub-model" in str(err.value)
    assert len(llm.requests) == 2


def test_endpoint_down_or_failing_fails_clearly(chats, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    use_llm(monkeypatch, f"http://127.0.0.1:{closed}/v1")
    with pytest.raises(AskFailed, match=rf"'stub-model' at http://127.0.0.1:{closed}/v1 failed: APIConnectionError"):
        run()
    with ScriptedLlm([503]) as llm:
        use_llm(monkeypatch, llm.openai_url)
        with pytest.raises(AskFailed, match="InternalServerError|503"):
            run()


def test_the_round_limit_ends_without_an_answer(chats, monkeypatch):
    with ScriptedLlm([{"action": "search", "query": "garden"}, {"action": "search", "query": "cello"}]) as llm:
        use_llm(monkeypatch, llm.openai_url)
        resp = run(max_rounds=2)
    assert resp.answer is None and resp.memories == [] and [r.query for r in resp.rounds] == [QUESTION, "garden"]
    assert "last round: answer now" in last_user_text(llm.requests[1][1])
    assert any("tomatoes" in h.text for h in resp.evidence)


def test_gemini(chats, monkeypatch):
    answer = lambda body: {  # noqa: E731
        "action": "answer",
        "answer": "Lisbon",
        "memory_ids": [evidence_id(body, "Lisbon")],
    }
    with ScriptedLlm([answer]) as llm:
        use_llm(monkeypatch, llm.url, provider="gemini")
        resp = run()
    assert resp.answer == "Lisbon" and resp.llm == "gemini:stub-model" and len(resp.memories) == 1
    [(path, body)] = llm.requests
    assert path.endswith("/models/stub-model:generateContent")
    assert body["generationConfig"]["responseMimeType"] == "application/json"


def test_cli_ask(chats, monkeypatch):
    from typer.testing import CliRunner

    from engram.api.cli.main import app

    runner = CliRunner()
    plain = runner.invoke(app, ["ask", QUESTION, "--json", "-k", "3"])
    assert plain.exit_code == 0, plain.output
    body = json.loads(plain.stdout)
    assert body["answer"] is None and len(body["memories"]) == 3
    answer = lambda body: {  # noqa: E731
        "action": "answer",
        "answer": "Lisbon",
        "memory_ids": [evidence_id(body, "Lisbon")],
    }
    with ScriptedLlm([answer, '"oops"', "[]"]) as llm:
        use_llm(monkeypatch, llm.openai_url)
        shown = runner.invoke(app, ["ask", QUESTION, "--user", "alice"])
        assert shown.exit_code == 0, shown.output
        assert "Lisbon" in shown.stdout and "1 round:" in shown.stdout
        failed = runner.invoke(app, ["ask", QUESTION])
    assert failed.exit_code == 1 and "error:" in failed.stderr and "replied twice" in failed.stderr
