"""``ask`` (queue ``query``): answer a question from memory by multi-round retrieval.

With an LLM configured (``ENGRAM_MODELS__LLM_PROVIDER``), this is M3-Agent's control loop (Long et al., 2025,
arXiv:2508.09736, "control" process): in each of up to ``max_rounds`` rounds (5, as M3-Agent) the query
worker runs the hybrid search (``workers.memory.search.search``) and the LLM reads the question with all evidence
found so far, then replies with one JSON object (``schemas.ask.LlmDecision``):
``{"action": "answer", "answer": ..., "memory_ids": [...]}`` or ``{"action": "search", "query": ...}``. A
reply that breaks that protocol is sent back once with the validation error; a second bad reply, or an
endpoint that still fails after the SDK's retries, raises ``AskFailed``. The cited ids are checked against
the evidence: an id the LLM made up is dropped.

Without an LLM, ``ask`` is one search round: the ranked hits, ``answer`` None.

Each observation hit comes with ``CONTEXT_TURNS`` neighbouring turns of its session (``SearchHit.context``),
shown to the LLM under it, so a reply ("Yes, that one!") is read with what it answers. The searches do not
reinforce memories; the memories the answer cites (without an LLM: the hits returned) are reinforced once
at the end (MemoryBank: what is recalled and used fades more slowly).
"""

from __future__ import annotations

import re
import time
import uuid

from pydantic import TypeAdapter, ValidationError

from engram.schemas.ask import AnswerDecision, AskFailed, AskRequest, AskResponse, AskRound, LlmDecision, SearchDecision
from engram.schemas.memories import MemoryType
from engram.schemas.search import SearchHit, SearchRequest
from engram.workers.app import task
from engram.workers.memory.dynamics import reinforce
from engram.workers.memory.search import search
from engram.workers.models import LlmUnavailable, get_model
from engram.workers.runtime import Runtime, runtime
from engram.workers.tasks import Task

EVIDENCE_CHARS = 600  # of one hit's text shown to the LLM
EVIDENCE_BUDGET = 24_000  # characters of evidence per prompt; the earliest (best) hits are kept
CONTEXT_TURNS = 2  # neighbouring turns on each side of an observation hit, shown under it
CONTEXT_CHARS = 200  # of one neighbouring turn's text

SYSTEM_PROMPT = """You answer questions about a user's life from their long-term memory: observations \
(chat messages, screen text, speech transcripts) and memories consolidated from them (episodes, facts, \
workflows, documents, profile). Each round you get the question and every evidence item retrieved so far, each \
with an id. Reply with exactly one JSON object and nothing else, either
{"action": "answer", "answer": "<a short answer>", "memory_ids": ["<ids of the evidence items the answer rests on>"]}
when the evidence answers the question, or
{"action": "search", "query": "<a new search query>"}
to retrieve more evidence: use other words, a person's name, a place, or a time than the queries already run. \
Evidence times are UTC. On the last round you must answer; if the evidence does not hold the answer, say so \
in "answer" and leave "memory_ids" empty."""

_DECISION = TypeAdapter(LlmDecision)
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_decision(text: str) -> AnswerDecision | SearchDecision:
    """The LLM's reply as an AnswerDecision or SearchDecision (a Markdown code fence around the JSON is
    tolerated). Raises pydantic.ValidationError for anything else."""
    m = _FENCE.match(text)
    return _DECISION.validate_json(m.group(1) if m else text.strip())


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def evidence_block(hits: list[SearchHit]) -> str:
    """The evidence as numbered lines: ``[id] type, time, source: text`` (text cut to EVIDENCE_CHARS), each
    followed by its neighbouring turns as indented ``(context -1) text`` lines (cut to CONTEXT_CHARS), within
    EVIDENCE_BUDGET characters."""
    lines, used = [], 0
    for hit in hits:
        when = hit.time.strftime("%Y-%m-%d %H:%M") if hit.time else "time unknown"
        src = f", {hit.source_name}" if hit.source_name else ""
        line = f"[{hit.id}] {hit.memory_type.value}, {when}{src}: {_cut(hit.text, EVIDENCE_CHARS)}"
        if hit.context:
            line += "".join(f"\n    (context {c.offset:+d}) {_cut(c.text, CONTEXT_CHARS)}" for c in hit.context)
        if used + len(line) > EVIDENCE_BUDGET:
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines) or "(nothing found)"


def round_prompt(req: AskRequest, evidence: list[SearchHit], rounds: list[AskRound]) -> str:
    """The user turn of one round: the question, the searches run so far, the evidence, and the round count."""
    n = len(rounds)
    runs = "\n".join(f"{i}. {r.query!r}: {len(r.hit_ids)} hits, {r.new_hits} new" for i, r in enumerate(rounds, 1))
    last = " This is the last round: answer now." if n >= req.max_rounds else ""
    return (
        f"Question: {req.question}\n\nSearches so far:\n{runs}\n\nEvidence:\n{evidence_block(evidence)}\n\n"
        f"Round {n} of {req.max_rounds}.{last} Reply with the JSON object."
    )


def decide(rt: Runtime, prompt: str) -> AnswerDecision | SearchDecision:
    """One LLM decision for ``prompt``; a reply that breaks the protocol is sent back once with the reason.
    Raises AskFailed (endpoint down after retries, or two bad replies)."""
    llm = get_model("llm", rt.settings)
    turns = [("user", prompt)]
    for attempt in (1, 2):
        try:
            reply = llm.complete_json(SYSTEM_PROMPT, turns)
        except LlmUnavailable as exc:
            raise AskFailed(str(exc)) from exc
        try:
            return parse_decision(reply)
        except ValidationError as exc:
            reason = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors())[:400]
            if attempt == 2:
                raise AskFailed(
                    f"LLM {llm.name!r} at {llm.where} replied twice without the ask protocol's JSON "
                    f"({reason}); last reply: {reply[:200]!r}"
                ) from exc
            turns += [
                ("assistant", reply),
                (
                    "user",
                    f"That reply is not valid ({reason}). Reply with exactly one "
                    "JSON object as specified, nothing else.",
                ),
            ]
    raise AssertionError("unreachable")


def ask(rt: Runtime, req: AskRequest) -> AskResponse:
    """Answer ``req.question`` (see the module docstring). Raises AskFailed when the configured LLM fails."""
    t0 = time.perf_counter()
    provider = rt.settings.models.llm_provider
    evidence: dict[uuid.UUID, SearchHit] = {}
    rounds: list[AskRound] = []
    query = req.question
    search_fields = req.model_dump(
        include={"tenant_id", "user_id", "memory_types", "time_from", "time_to", "timezone", "reference_time", "limit"}
    )
    answer: str | None = None
    cited: list[SearchHit] = []
    while len(rounds) < req.max_rounds:
        found = search(rt, SearchRequest(query=query, context_turns=CONTEXT_TURNS, reinforce=False, **search_fields))
        hits, empty = found.hits, found.empty
        new = [h for h in hits if h.id not in evidence]
        evidence.update((h.id, h) for h in new)
        rounds.append(AskRound(query=query, hit_ids=[h.id for h in hits], new_hits=len(new)))
        if provider == "none":
            cited = hits
            break
        decision = decide(rt, round_prompt(req, list(evidence.values()), rounds))
        rounds[-1].decision = decision.action
        if isinstance(decision, AnswerDecision):
            answer = decision.answer
            cited = [evidence[i] for i in dict.fromkeys(decision.memory_ids) if i in evidence]
            break
        query = decision.query
    used = [h.id for h in cited if h.memory_type is not MemoryType.observation]
    if used:
        reinforce(rt, req.tenant_id, used)
    return AskResponse(
        question=req.question,
        answer=answer,
        memories=cited,
        evidence=list(evidence.values()),
        rounds=rounds,
        llm=None if provider == "none" else f"{provider}:{rt.settings.models.llm_model}",
        took_ms=(time.perf_counter() - t0) * 1000,
        empty=None if evidence else empty,
    )


@task(Task.ask, "request")
def ask_task(request: AskRequest) -> AskResponse:
    """The query worker's ``ask``. Raises AskFailed (the message says why) when the LLM fails."""
    return ask(runtime(), request)
