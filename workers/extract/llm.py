"""The LLM extractor: MIRIX's meta-memory routing (Wang & Chen, 2025), through the text LLM of
``workers.models.llm`` (an OpenAI-compatible endpoint in JSON mode, or Gemini).

Observations are read in batches of ``consolidate_min_observations`` (MIRIX consolidates every 20 messages).
For each batch the meta step asks which memory types to update (``schemas.extraction.Routing``); then, for
each chosen type, the type's own step asks for its drafts, as ``{"items": [...]}`` objects whose JSON schema
(from the pydantic draft models) is part of the instruction. Every answer is validated by those models: an
answer that does not validate, or an endpoint that fails after the SDK's retries, raises ExtractionFailed
with a one-line reason (``workers.memory.typed`` then falls back to the rules extractor, or fails the
consolidation with ``llm_extract_required``). Sources outside the batch are dropped (and a draft left
with none).
The texts sent are the stored observations', already redacted by the vault.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ValidationError, create_model

from engram.schemas.extraction import CoreDraft, Extraction, ProceduralDraft, ResourceDraft, Routing, SemanticDraft
from engram.schemas.settings import Settings
from engram.workers.extract.base import ExtractionFailed, Extractor, Seen
from engram.workers.models import ModelUnavailable, get_model
from engram.workers.models.llm import ChatLlm, LlmUnavailable

_DRAFTS = {"semantic": SemanticDraft, "procedural": ProceduralDraft, "resource": ResourceDraft, "core": CoreDraft}
_ITEMS: dict[str, type[BaseModel]] = {
    k: create_model(f"{k.capitalize()}Items", items=(list[v], ...)) for k, v in _DRAFTS.items()
}

_WHAT = {
    "semantic": "facts about people, places, organisations and concepts, independent of when they were said "
    "(name = the subject; attribute and value when the fact sets one value of a single-valued "
    "attribute such as lives_in, works_at, age)",
    "procedural": "workflows, instructions and step lists (how to do something), with their steps in order",
    "resource": "documents, files, URLs, web pages and app windows the user saw or shared",
    "core": "lasting facts about the user (label 'human': profile, preferences, relationships) or about the "
    "assistant's persona (label 'persona'), each as a short 'attribute: value' line",
}
ROUTING_PROMPT = (
    "You are the meta memory manager of a personal memory system. Read the numbered observations and decide "
    "which memory types must be updated with what they contain: "
    + "; ".join(f"{k}: {v}" for k, v in _WHAT.items())
    + ". Answer with one JSON object matching this JSON schema: "
    + json.dumps(Routing.model_json_schema())
    + ". Choose none when nothing lasting is said."
)


def type_prompt(kind: str) -> str:
    """The instruction of one memory type's extraction step."""
    return (
        f"You are the {kind} memory manager of a personal memory system. From the numbered observations, "
        f"extract {_WHAT[kind]}. Cite in 'sources' the numbers of the observations each item comes from. "
        "Never copy a placeholder such as [vault:...] into anything but where it stands. Answer with one "
        f"JSON object matching this JSON schema: {json.dumps(_ITEMS[kind].model_json_schema())}"
    )


def listing(seen: list[Seen], user_id: str) -> str:
    """The batch as the LLM reads it: one numbered line per observation with its time and speaker or kind."""
    lines = [f"The user is {user_id!r}. Observations:"]
    for i, s in enumerate(seen):
        who = s.speaker or " — ".join(x for x in (s.kind, s.app, s.window) if x)
        lines.append(f"[{i}] {s.captured_at:%Y-%m-%d %H:%M} ({who}) {' '.join(s.text.split())[:2000]}")
    return "\n".join(lines)


class LlmExtractor(Extractor):
    """Drafts by an LLM with MIRIX's routing; owned by the consolidating task (the LLM client is shared)."""

    name = "llm"

    def __init__(self, llm: ChatLlm, batch_size: int = 20) -> None:
        self.llm = llm
        self.batch_size = batch_size

    @classmethod
    def from_settings(cls, settings: Settings) -> LlmExtractor:
        """The extractor on the configured LLM. Raises ExtractionFailed when none is configured."""
        try:
            return cls(get_model("llm", settings), settings.consolidate_min_observations)
        except ModelUnavailable as exc:
            raise ExtractionFailed(f"extractor 'llm' needs an LLM: {exc}") from exc

    def extract(self, seen: list[Seen], user_id: str) -> Extraction:
        """Routing, then one extraction per chosen type, for each batch. Raises ExtractionFailed."""
        out = Extraction()
        for start in range(0, len(seen), self.batch_size):
            out.extend(self._batch(seen[start : start + self.batch_size], user_id).shifted(start))
        return out

    def _batch(self, part: list[Seen], user_id: str) -> Extraction:
        text = listing(part, user_id)
        routing = self._ask(ROUTING_PROMPT, text, Routing, "routing")
        found = Extraction()
        for kind in dict.fromkeys(routing.memory_types):
            items = self._ask(type_prompt(kind), text, _ITEMS[kind], kind).items
            for d in items:  # sources outside the batch are dropped, and a draft left with none
                valid = [i for i in d.sources if 0 <= i < len(part)]
                if valid:
                    getattr(found, kind).append(d.model_copy(update={"sources": valid}))
        return found

    def _ask(self, system: str, text: str, model: type[BaseModel], step: str):
        try:
            answer = self.llm.complete_json(system, [("user", text)])
        except LlmUnavailable as exc:
            raise ExtractionFailed(f"{step} step: {exc}") from exc
        try:
            return model.model_validate_json(answer)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "answer"
            raise ExtractionFailed(
                f"LLM {self.llm.name!r} {step} answer does not validate: {where}: {first['msg']}"
            ) from exc
