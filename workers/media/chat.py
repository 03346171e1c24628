"""A published conversation file's messages, parsed once per process and kept for its segments (perceive reads
one batch of messages per segment; ingest counts them), and the neighbouring turns each message is indexed with."""

from __future__ import annotations

import threading

from cachetools import LRUCache

from engram.schemas.events import MediaEvent
from engram.workers.media.conversations import parse_conversation_file
from engram.workers.runtime import Runtime

CONTEXT_TURNS = 2  # neighbouring turns of the same session, either side, indexed with a message


def message_context(messages: list, idx: int, turns: int = CONTEXT_TURNS) -> tuple[list[str], list[str]]:
    """Display texts of up to ``turns`` messages before and after ``messages[idx]`` in its session, in
    conversation order (the context of contextual indexing, ``workers.embed``)."""
    sid = messages[idx].session_id
    before = [m.display_text() for m in messages[max(0, idx - turns) : idx] if m.session_id == sid]
    after = [m.display_text() for m in messages[idx + 1 : idx + 1 + turns] if m.session_id == sid]
    return before, after


PARSED_CACHE_SIZE = 4  # conversation files whose parsed messages are kept (most recently used)


_PARSED: LRUCache[tuple[str, str, str], list] = LRUCache(maxsize=PARSED_CACHE_SIZE)


_PARSED_LOCK = threading.Lock()  # LRUCache is not thread safe


def conversation_messages(rt: Runtime, event: MediaEvent, data: bytes | None = None) -> list:
    """The messages of a text event's conversation file (``adapters.parse_conversation_file``), parsed once
    per process: ingest plans the segments and each of the file's perceive tasks reads its slice of the
    same list (a 500-turn file is cut into ~10 segments). Kept by (object key, sha256, source name) for the
    ``PARSED_CACHE_SIZE`` files used last; the object key is content-addressed, so a kept list is what
    parsing the object again would give. ``data``: the object's bytes when the caller has them (else they are
    read from the object store). Callers must not modify the list or its messages. Raises
    MediaError for a file that does not parse (not kept)."""
    key = (event.object_key, event.sha256, event.source_name or "", event.captured_at, event.user_id)
    with _PARSED_LOCK:
        messages = _PARSED.get(key)  # a hit counts as a use
        if messages is not None:
            return messages
    if data is None:
        data = rt.objects.get_bytes(event.object_key)
    messages = parse_conversation_file(data, event.source_name or "", event.captured_at, event.user_id)
    with _PARSED_LOCK:
        _PARSED[key] = messages
    return messages
