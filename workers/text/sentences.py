"""Sentences of a text: lines, then syntok's rule-based segmenter within each line, as exact spans of the text."""

from __future__ import annotations

import functools
import re

_LINES = re.compile(r"\n+")


def sentences(text: str) -> list[str]:
    """``text`` split into lines, and each line into sentences by syntok's rule-based segmenter (abbreviations,
    initials, decimals and times stay whole: "Dr. Smith", "3 p.m. on Friday", "U.S. Navy"); each sentence is
    the exact span of the text (inner whitespace kept), stripped. Texts of up to ``_MEMO_CHARS`` characters
    (chat turns) are kept per process for the ones split last (``_split_memo``): embedding
    (``workers.memory.vectors.sentence_spans``) and extraction ask for the same turns, and syntok costs ~3 ms a turn."""
    return list(_split_memo(text) if len(text) <= _MEMO_CHARS else _split(text))


_MEMO_CHARS = 2000  # longer texts (documents) are split each time, not kept


def _split(text: str) -> tuple[str, ...]:
    """``sentences`` uncached, as a tuple (immutable: shared by every caller of the same text)."""
    from syntok import segmenter

    out = []
    for line in _LINES.split(text):
        for paragraph in segmenter.analyze(line):
            for sentence in paragraph:
                if sentence:
                    start = sentence[0].offset
                    end = sentence[-1].offset + len(sentence[-1].value)
                    if piece := line[start:end].strip():
                        out.append(piece)
    return tuple(out)


_split_memo = functools.lru_cache(maxsize=16384)(_split)
