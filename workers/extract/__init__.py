"""Extractors of typed memories (MIRIX's semantic, procedural, resource and core types) from observations.

Two behind one interface (``base.Extractor``): ``rules.RulesExtractor``, the offline default (patterns, no
LLM), and ``llm.LlmExtractor`` (MIRIX's meta-memory routing through an OpenAI-compatible endpoint or
Gemini). ``extractor_for`` picks one from settings.
"""

from __future__ import annotations

from engram.schemas.settings import Settings
from engram.workers.extract.base import ExtractionFailed, Extractor, Seen


def extractor_for(settings: Settings) -> Extractor:
    """The configured extractor: ``llm`` when ``extractor`` is 'llm' (raises ExtractionFailed when no LLM
    provider is set), else the rules extractor."""
    from engram.workers.extract.rules import RulesExtractor  # on demand: syntok loads with the rules

    if settings.extractor == "llm":
        from engram.workers.extract.llm import LlmExtractor  # on demand: only with an LLM provider set

        return LlmExtractor.from_settings(settings)
    return RulesExtractor()


__all__ = ["ExtractionFailed", "Extractor", "Seen", "extractor_for"]
