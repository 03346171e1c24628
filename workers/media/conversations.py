"""Conversation files into the import record (``schemas.ConversationMessage``).

Accepted: the record itself (a JSON array, ``{"messages": [...]}``, or JSONL), LoCoMo (Maharana et al.,
2024; ``locomo10.json``: a list of samples or one sample) and LongMemEval (Wu et al., 2024; one question
file), and the personal exports of ``workers.media.importers`` (ChatGPT's ``conversations.json`` or its
``.zip``, WhatsApp, notes). Benchmark adapters carry dialog turns and image captions only, never annotations (LoCoMo's
``observation``, ``session_summary``, ``event_summary``, ``qa``; LongMemEval's ``has_answer``).

Dates are read once per file: whether a numeric date such as ``03.04.2024`` is day- or month-first comes from the
same file's dates that can be read one way only (``14.03.2024``), as for a WhatsApp export; a file with both
orders is refused naming one date of each, and one whose every such date could be either names the date and
what would settle it.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import ValidationError

from engram.schemas.conversations import Attachment, ConversationMessage
from engram.schemas.errors import MediaError
from engram.workers.media import importers
from engram.workers.text.timeexpr import date_order, parse_locomo_datetime

TURN_SPACING = timedelta(seconds=30)  # LoCoMo and LongMemEval time sessions, not turns


def locomo_sample_id(sample: dict, index: int = 0) -> str:
    """A LoCoMo sample's ``sample_id`` as an id engram accepts (``schemas.events``: letters, digits and
    ``._@:+-``, a letter or digit first), at most 100 characters so ``locomo-<id>`` is a valid user id; also a
    safe file name. A string keeps its allowed characters (``conv-26`` as is), runs of others become ``-``; a
    number is written as it is (``26``, ``7.5``); a missing, empty or unusable one is ``sample-<index>``
    (``index``: the sample's position in its file)."""
    raw = sample.get("sample_id")
    if raw is None or isinstance(raw, bool):
        text = ""
    elif isinstance(raw, float) and raw.is_integer():
        text = str(int(raw))
    else:
        text = raw if isinstance(raw, str) else json.dumps(raw) if isinstance(raw, dict | list) else str(raw)
    cleaned = re.sub(r"[^A-Za-z0-9._@:+-]+", "-", text)
    cleaned = re.sub(r"^[^A-Za-z0-9]+", "", cleaned)[:100].rstrip("-")
    return cleaned or f"sample-{index}"


def _locomo_session_times(sample: dict, index: int) -> list[tuple[str, str]]:
    """(where, text) of each ``session_<n>_date_time`` of one sample, ``where`` naming the sample and the key."""
    sample_id = locomo_sample_id(sample, index)
    conv = sample.get("conversation")
    if not isinstance(conv, dict):
        return []
    return [
        (f"sample {sample_id}, {key}", str(value))
        for key, value in conv.items()
        if re.fullmatch(r"session_\d+_date_time", key)
    ]


def locomo_date_order(samples: list[dict]) -> str | None:
    """The order (``"DMY"``, ``"MDY"`` or None) the session times of a LoCoMo file's samples write numeric dates
    in, read once for the whole file (``text.timeexpr.date_order``). Raises ValueError naming a day-first and a
    month-first session time when the file holds both."""
    return date_order(t for i, s in enumerate(samples) if isinstance(s, dict) for t in _locomo_session_times(s, i))


def locomo_sample_messages(sample: dict, index: int = 0, order: str | None = None) -> list[ConversationMessage]:
    """The dialog turns of one LoCoMo sample, in order; ``message_id`` is the turn's ``dia_id`` and
    ``session_id`` is ``<sample id>/session_<n>`` (``locomo_sample_id``; ``index``: the sample's position in
    its file). Turn times are the session time plus 30 s per turn. ``order`` is the file's date order
    (``locomo_date_order``); without it, the sample's own session times give it. Raises ValueError naming the
    session for a time that cannot be read, or two session times of contrary orders."""
    conv = sample["conversation"]
    sample_id = locomo_sample_id(sample, index)
    order = order or date_order(_locomo_session_times(sample, index))
    sessions = sorted((int(m.group(1)), key) for key in conv if (m := re.fullmatch(r"session_(\d+)", key)))
    out: list[ConversationMessage] = []
    for n, key in sessions:
        try:
            start = parse_locomo_datetime(conv[f"session_{n}_date_time"], order=order)
        except ValueError as exc:
            raise ValueError(f"sample {sample_id}, session_{n}_date_time: {exc}") from exc
        for i, turn in enumerate(conv[key]):
            atts = [Attachment(kind="image", caption=turn["blip_caption"])] if turn.get("blip_caption") else []
            out.append(
                ConversationMessage(
                    message_id=turn["dia_id"],
                    session_id=f"{sample_id}/session_{n}",
                    speaker=turn["speaker"],
                    text=turn.get("text", ""),
                    timestamp=start + i * TURN_SPACING,
                    attachments=atts,
                )
            )
    return out


def parse_longmemeval_date(text: str) -> datetime:
    """LongMemEval's ``"2023/04/30 (Sun) 13:59"`` as UTC."""
    return datetime.strptime(re.sub(r"\s*\(\w+\)\s*", " ", text).strip(), "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def longmemeval_messages(item: dict) -> list[ConversationMessage]:
    """The haystack of one LongMemEval question: ``session_id`` from ``haystack_session_ids``,
    ``message_id`` ``<session>:<turn>``, speaker ``user``/``assistant``."""
    out: list[ConversationMessage] = []
    for sid, date, session in zip(
        item["haystack_session_ids"], item["haystack_dates"], item["haystack_sessions"], strict=True
    ):
        start = parse_longmemeval_date(date)
        for i, turn in enumerate(session):
            out.append(
                ConversationMessage(
                    message_id=f"{sid}:{i}",
                    session_id=str(sid),
                    speaker=turn["role"],
                    text=turn["content"],
                    timestamp=start + i * TURN_SPACING,
                )
            )
    return out


class InvalidConversation(MediaError):
    """The content is shaped like a conversation file (record fields, LoCoMo, LongMemEval) but is invalid."""


_RECORD_FIELDS = {"message_id", "session_id", "speaker", "text", "timestamp"}


def _records(items: list) -> list[ConversationMessage]:
    if items and isinstance(items[0], dict) and not _RECORD_FIELDS & set(items[0]):
        raise MediaError("JSON objects are not conversation records (no message_id, speaker or text)")
    out = []
    for i, item in enumerate(items):
        try:
            out.append(ConversationMessage.model_validate(item))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in (i, *first["loc"]))  # record index first, as pydantic's list loc
            raise InvalidConversation(f"invalid conversation record at {where}: {first['msg']}") from exc
    return out


def parse_conversation_file(
    data: bytes, source_name: str = "", default_time: datetime | None = None, owner: str = "user"
) -> list[ConversationMessage]:
    """Messages of a conversation file in any accepted format (the record, LoCoMo, LongMemEval, and the
    exports of ``workers.media.importers``: ChatGPT, WhatsApp, notes; ``default_time`` and ``owner`` are a note's
    time and speaker when it names none). Raises MediaError if it is none of them (the
    reason names the record and field: a missing timestamp, a text over 100,000 characters, bytes that are
    not UTF-8), so the file is quarantined whole with it and nothing is half-imported.

    Messages with nothing to remember (no text, no attachment caption) are left out; a message repeated with
    the same ``message_id`` and content is kept once; a different message under an id already used in its
    session is kept as ``<id>#2`` (``#3``, ...), so a memory citing an id names one message."""
    messages = _parse_conversation(data, source_name, default_time, owner)
    out: list[ConversationMessage] = []
    first: dict[tuple[str, str], int] = {}
    for i, msg in enumerate(messages):
        if not msg.text.strip() and not any(a.caption for a in msg.attachments):
            continue
        key = (msg.session_id, msg.message_id)  # unique within a session (LoCoMo's dia_ids repeat per sample)
        if key in first:
            if messages[first[key]] == msg:
                continue
            n = 2  # another message under a used id (LongMemEval repeats session ids): kept, as <id>#2, #3, ...
            while (msg.session_id, f"{msg.message_id}#{n}") in first:
                n += 1
            msg = msg.model_copy(update={"message_id": f"{msg.message_id}#{n}"})
            key = (msg.session_id, msg.message_id)
        first[key] = i
        out.append(msg)
    if not out:
        raise MediaError("conversation file has no messages with text")
    return out


def _parse_conversation(
    data: bytes, source_name: str = "", default_time: datetime | None = None, owner: str = "user"
) -> list[ConversationMessage]:
    if not data.strip():
        raise MediaError("empty conversation file")
    if importers.is_zip(data):
        return _chatgpt_zip(data)
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        doc = None
    except RecursionError as exc:  # nested deeper than Python's parser goes: no conversation is
        raise MediaError("JSON nested too deeply to be a conversation file") from exc
    if doc is not None and importers.is_chatgpt_export(doc):
        try:
            return importers.chatgpt_messages(doc)
        except (ValueError, ValidationError) as exc:
            raise InvalidConversation(f"malformed ChatGPT export: {exc}") from exc
    if doc is None or Path(source_name).suffix.lower() in importers.NOTE_EXTENSIONS:
        try:  # a WhatsApp export (by content) or a note (by name and front matter)
            found = importers.text_messages(data, source_name, owner, default_time)
        except (ValueError, ValidationError) as exc:
            raise InvalidConversation(f"malformed {_text_format(data)}: {exc}") from exc
        if found is not None:
            return found
    if doc is None:  # JSONL
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            if is_conversation(data.decode("utf-8", errors="replace").encode("utf-8")):
                raise InvalidConversation(f"conversation file is not UTF-8: {exc}") from exc
            raise MediaError(f"not JSON or JSONL: {exc}") from exc
        lines = []
        # JSON Lines separates records by "\n" only: str.splitlines() would also split inside a record at the
        # U+2028/U+2029, \x85, \x0b, \x0c and \x1c-\x1e characters JSON strings may hold unescaped
        for n, line in enumerate(text.split("\n"), start=1):
            try:
                if line.strip():
                    lines.append(json.loads(line))
            except RecursionError as exc:
                raise MediaError(f"JSON nested too deeply to be a conversation file (line {n})") from exc
            except ValueError as exc:
                if lines and isinstance(lines[0], dict) and _RECORD_FIELDS & set(lines[0]):
                    raise InvalidConversation(f"invalid conversation record at line {n}: not JSON: {exc}") from exc
                raise MediaError(f"not JSON or JSONL: line {n}: {exc}") from exc
        return _records(lines)
    if isinstance(doc, dict) and "conversation" in doc and "sample_id" in doc:
        doc = [doc]
    if isinstance(doc, list) and doc and isinstance(doc[0], dict) and "conversation" in doc[0]:
        try:
            order = locomo_date_order(doc)  # once per file: its unambiguous dates settle the others'
            return [m for i, sample in enumerate(doc) for m in locomo_sample_messages(sample, i, order)]
        except (KeyError, ValueError, ValidationError) as exc:
            raise InvalidConversation(f"malformed LoCoMo file: {exc}") from exc
    if isinstance(doc, dict) and "haystack_sessions" in doc:
        try:
            return longmemeval_messages(doc)
        except (KeyError, ValueError, ValidationError) as exc:
            raise InvalidConversation(f"malformed LongMemEval file: {exc!r}") from exc
    if isinstance(doc, dict) and _RECORD_FIELDS & set(doc):  # JSONL of a single record (an invalid one is named)
        doc = [doc]
    if isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        doc = doc["messages"]
    if isinstance(doc, list) and all(isinstance(x, dict) for x in doc):
        if not doc:
            raise MediaError("conversation file has no messages")
        return _records(doc)
    raise MediaError("JSON is not a conversation record, LoCoMo or LongMemEval file")


def _chatgpt_zip(data: bytes) -> list[ConversationMessage]:
    """The messages of a ChatGPT export zip. Raises InvalidConversation for one over the zip bounds, damaged, or
    whose conversations.json is not an export; MediaError for a zip without conversations.json."""
    try:
        inner = importers.chatgpt_zip_member(data)
    except ValueError as exc:
        raise InvalidConversation(f"ChatGPT export zip refused: {exc}") from exc
    if inner is None:
        raise MediaError(f"zip archive without {importers.CHATGPT_MEMBER}: not a ChatGPT export")
    try:
        doc = json.loads(inner)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidConversation(f"ChatGPT export zip: {importers.CHATGPT_MEMBER} is not JSON: {exc}") from exc
    if not importers.is_chatgpt_export(doc):
        raise InvalidConversation(
            f"ChatGPT export zip: {importers.CHATGPT_MEMBER} holds no conversations with a mapping of messages"
        )
    try:
        return importers.chatgpt_messages(doc)
    except (ValueError, ValidationError) as exc:
        raise InvalidConversation(f"malformed ChatGPT export: {exc}") from exc


def _text_format(data: bytes) -> str:
    return "WhatsApp export" if importers.looks_like_whatsapp(data.decode("utf-8", "replace")) else "note"


def is_conversation(data: bytes, source_name: str = "") -> bool:
    """True when ``data`` reads as a conversation file in any accepted format, and when it is shaped like one
    but invalid (ingest then fails it with the reason and the record's location); False for anything else
    (other JSON, other text). ``source_name`` is the file's name (a note is told by its extension). Used by
    detection (``media.detect``) and by the parser itself for bytes that are not UTF-8."""
    try:
        return bool(_parse_conversation(data, source_name))
    except InvalidConversation:
        return True
    except MediaError:
        return False


def to_jsonl(messages: list[ConversationMessage]) -> bytes:
    """The import record as JSONL bytes."""
    return "".join(m.model_dump_json(exclude_defaults=False) + "\n" for m in messages).encode("utf-8")
