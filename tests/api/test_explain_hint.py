"""The empty-memory-type hint names what the offline extractor reads, statement facts included (issue 45)."""

from __future__ import annotations

from engram.api.explain import empty_type_line
from engram.schemas.memories import MemoryType
from engram.workers.extract.statements import MIN_WORDS


def test_the_semantic_and_core_hints_describe_the_statement_facts():
    semantic = empty_type_line(MemoryType.semantic) or ""
    assert "says about themselves" in semantic and f"{MIN_WORDS} words or more" in semantic
    core = empty_type_line(MemoryType.core) or ""
    assert "speaker is the user" in core and "--user" in core
