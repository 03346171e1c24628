"""What a file is, for the producer: media by content (``decode.sniff``), then conversation files by structure
(the import record, LoCoMo, LongMemEval, ChatGPT exports and their ``.zip``, WhatsApp exports, notes)."""

from __future__ import annotations

import stat
from pathlib import Path

from engram.schemas.events import MediaKind
from engram.workers.media.conversations import is_conversation
from engram.workers.media.decode import (
    CONVERSATION_EXTENSIONS,
    GUESS_MIME,
    MEDIA_EXTENSIONS,
    TEXT_CONVERSATION_EXTENSIONS,
    sniff,
)
from engram.workers.media.importers import is_zip, sniff_text

ZIP_MIME = "application/zip"  # a ChatGPT export as downloaded (conversations.json inside)


def detect(path: Path) -> tuple[MediaKind, str] | None:
    """What the CLI should publish ``path`` as: media by content, then conversation files by structure.

    A file that claims a media extension but whose content is not media is still returned (kind from the
    extension) so ingest fails it with a reason; anything else unknown returns None (skipped), and so is what is
    not a regular file: a FIFO, a socket or a device (a folder may hold one; reading it would wait for a writer or
    never end). Raises OSError when the file cannot be read.
    """
    if not stat.S_ISREG(path.stat().st_mode):  # follows a symlink: a link to a regular file is one
        return None
    with open(path, "rb") as fh:
        head = fh.read(8192)
    found = sniff(head)
    if found:
        return found
    suffix = path.suffix.lower()
    if is_zip(head):  # a ChatGPT export zip (also one with zip-bomb figures: ingest fails it with the reason)
        return (MediaKind.text, ZIP_MIME) if _looks_like_conversation(path) else None
    if suffix in CONVERSATION_EXTENSIONS and _looks_like_conversation(path):
        return MediaKind.text, "application/json" if suffix == ".json" else "application/x-ndjson"
    if suffix in TEXT_CONVERSATION_EXTENSIONS:  # WhatsApp exports and notes (media.importers)
        if sniff_text(head, path.name) and _looks_like_conversation(path):
            return MediaKind.text, "text/plain"
    if suffix in MEDIA_EXTENSIONS:
        kind = MEDIA_EXTENSIONS[suffix]
        return kind, GUESS_MIME[kind]
    return None


def _looks_like_conversation(path: Path) -> bool:
    """``conversations.is_conversation`` of the file's bytes; False when it cannot be read."""
    try:
        return is_conversation(path.read_bytes(), path.name)
    except OSError:
        return False
