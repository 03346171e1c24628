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
    (``workers.memory.embedding.sentence_spans``) and extraction ask for the same turns, and syntok costs ~3 ms a
    turn."""
    return list(_split_memo(text) if len(text) <= _MEMO_CHARS else _split(text))


_MEMO_CHARS = 2000  # longer texts (documents) are split each time, not kept


def sentences_without_prefix(text: str, prefix: str) -> list[str]:
    """``sentences(text[len(prefix):].strip())`` for a ``text`` that starts with ``prefix`` (a chat turn's
    ``speaker:``), read off the split of the whole ``text``, which the embedding stage has already made and kept
    (``_split_memo``): the prefix is cut from the first sentence, which is dropped when nothing else is in it. So
    extraction, which reads a turn without its speaker, does not run syntok over each turn a second time (the same
    sentences on every LoCoMo turn, 5,882, as splitting the text without the prefix). A ``text`` not starting with
    ``prefix``, or whose first sentence does not, is split as it is given (without the prefix)."""
    if not prefix or not text.startswith(prefix):
        return sentences(text)
    whole = sentences(text)
    if not whole or not whole[0].startswith(prefix):
        return sentences(text[len(prefix) :].strip())
    first = whole[0][len(prefix) :].strip()
    return [first, *whole[1:]] if first else whole[1:]


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


def clear_memo() -> None:
    """Forget the splits kept by ``sentences`` (a benchmark's cold run, a test of the split itself)."""
    _split_memo.cache_clear()
