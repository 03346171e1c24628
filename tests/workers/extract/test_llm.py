"""The LLM extractor (MIRIX's meta-memory routing) against a scripted stub of an LLM API: recorded answers
become memories with provenance; a malformed answer falls back to the rules extractor, or fails the
consolidation with the reason when the LLM is required; Gemini takes the same path."""

from __future__ import annotations

import pytest

from engram.schemas.memories import MemoryType
from engram.workers.consolidate import consolidate_user
from engram.workers.extract import ExtractionFailed
from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter
from tests.llm_stub import ScriptedLlm
from tests.workers.memory.test_typed import TENANT, USER, chat, ingest, memories

TURNS = [
    ("alice", "I live in Paris."),
    ("Bob", "How do you make the sourdough?"),
    ("alice", "Feed the starter, mix the dough, bake it at 250 degrees."),
]
ANSWERS = {
    "meta memory manager": {"memory_types": ["semantic", "procedural"]},
    "semantic memory manager": {
        "items": [
            {
                "name": "alice",
                "summary": "Alice lives in Paris",
                "attribute": "lives_in",
                "value": "Paris",
                "sources": [0],
            }
        ]
    },
    "procedural memory manager": {
        "items": [
            {
                "entry_type": "recipe",
                "summary": "Making sourdough bread",
                "steps": ["feed the starter", "mix the dough", "bake at 250 degrees"],
                "sources": [1, 2, 99],
            }
        ]
    },  # 99: not in the batch (dropped)
}


def by_prompt(answers: dict):
    """A stub step answering by which manager the system prompt addresses (OpenAI or Gemini request)."""

    def answer(body: dict):
        system = body["messages"][0]["content"] if "messages" in body else body["systemInstruction"]["parts"][0]["text"]
        return next(v for k, v in answers.items() if k in system)

    return answer


@pytest.fixture
def llm_env(engram_env, monkeypatch):
    def use(stub: ScriptedLlm, provider: str = "openai", required: bool = False):
        monkeypatch.setenv("ENGRAM_EXTRACTOR", "llm")
        monkeypatch.setenv("ENGRAM_MODELS__LLM_PROVIDER", provider)
        monkeypatch.setenv("ENGRAM_MODELS__LLM_BASE_URL", stub.openai_url if provider == "openai" else stub.url)
        monkeypatch.setenv("ENGRAM_MODELS__LLM_MAX_RETRIES", "0")
        monkeypatch.setenv("ENGRAM_LLM_EXTRACT_REQUIRED", str(required).lower())

    return use


@pytest.mark.parametrize("provider", ["openai", "gemini"])
def test_llm_routing_then_extraction(llm_env, tmp_path, provider):
    with ScriptedLlm([by_prompt(ANSWERS)] * 3) as stub:
        llm_env(stub, provider)
        ingest(chat(tmp_path / "c.jsonl", TURNS))
        from engram.workers.runtime import runtime

        rt = runtime()
        systems = [
            b["messages"][0]["content"] if "messages" in b else b["systemInstruction"]["parts"][0]["text"]
            for _, b in stub.requests
        ]
    assert len(systems) == 3 and "meta memory manager" in systems[0]  # route first, then each chosen type
    assert {"semantic", "procedural"} == {
        t for t in ("semantic", "procedural") if any(f"{t} memory manager" in s for s in systems[1:])
    }
    [fact] = memories(rt, MemoryType.semantic)
    assert (fact["summary"], fact["value"], fact["provenance"]["message_ids"]) == (
        "Alice lives in Paris",
        "Paris",
        ["m1"],
    )
    [proc] = memories(rt, MemoryType.procedural)
    assert proc["steps"][0] == "feed the starter" and proc["provenance"]["message_ids"] == ["m2", "m3"]


def test_malformed_answer_falls_back_to_rules(llm_env, tmp_path, log_events):
    bad = {**ANSWERS, "meta memory manager": {"memory_types": ["everything"]}}
    with ScriptedLlm([by_prompt(bad)] * 3) as stub:
        llm_env(stub)
        ingest(chat(tmp_path / "c.jsonl", TURNS))
        from engram.workers.runtime import runtime

        rt = runtime()
    assert len(stub.requests) == 1  # the routing answer failed validation: no further calls
    [fact] = memories(rt, MemoryType.semantic)  # the rules extractor's reading of "I live in Paris"
    assert fact["summary"] == "alice lives in Paris"
    [warning] = [e for e in log_events if e["event"].startswith("LLM extraction failed")]
    assert "routing answer does not validate: memory_types.0" in warning["reason"]


def test_required_llm_fails_the_consolidation_with_the_reason(llm_env, tmp_path):
    with ScriptedLlm(['{"memory_types": ["semantic"]}', "this is not JSON"]) as stub:
        llm_env(stub, required=True)
        ingest(chat(tmp_path / "c.jsonl", TURNS), consolidate=False)
        with pytest.raises(ExtractionFailed, match="semantic answer does not validate"):
            consolidate_user.delay(TENANT, USER).get()
        from engram.workers.runtime import runtime

        rt = runtime()
    # the watermark was not set: the observations stay pending for the next run, nothing is lost
    assert all(not r.payload["consolidated"] for r in rt.vectors.scroll(OBSERVATIONS, tenant_filter(TENANT)))
    assert memories(rt, MemoryType.semantic) == []


def test_endpoint_down_falls_back(llm_env, tmp_path):
    with ScriptedLlm([503, 503]) as stub:
        llm_env(stub)
        ingest(chat(tmp_path / "c.jsonl", TURNS))
        from engram.workers.runtime import runtime

        rt = runtime()
    assert [m["value"] for m in memories(rt, MemoryType.semantic)] == ["Paris"]
