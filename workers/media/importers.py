"""Personal exports into the conversation record (``schemas.ConversationMessage``): a ChatGPT data export, a
WhatsApp chat export and Markdown/plain-text notes.

Called by ``media.conversations.parse_conversation_file`` (so detection, ``engram ingest`` and perceive read them
like the benchmark adapters); every reader takes the file's content and raises ``ValueError`` naming the
conversation, node or line when the content has the format's shape but cannot be read (the adapter turns it
into ``InvalidConversation``, which quarantines the file whole with the reason).

- ChatGPT (``conversations.json`` of the data export): a list of conversations, each a tree of nodes in
  ``mapping`` (``{id: {"message", "parent", "children"}}``); the messages on the branch that ends at
  ``current_node`` (the one the user last saw), from the root down; ``author.role`` user/assistant (system and
  tool messages and hidden ones left out); ``content.parts`` strings; ``create_time`` epoch seconds.
- WhatsApp (``WhatsApp Chat with X.txt``): ``12/31/23, 9:41 PM - Name: text`` (Android),
  ``[31.12.23, 21:41:05] Name: text`` (iOS), ``31/12/2023, 21:41 - Name: text``; lines without a header continue
  the message above; system lines (end-to-end encryption notice, "<Media omitted>", deleted messages, group
  changes without a sender) are left out. Whether a slashed date is day- or month-first is read from the file:
  a first number above 12 anywhere means day-first, a second one above 12 month-first; a file where neither
  occurs (or both) fails naming a line, never guessed. Dotted dates (``31.12.23``) are day-first, as every
  locale that writes them. Times carry no zone in the export: read in the user's zone (``ENGRAM_TIMEZONE``,
  default the system's; ``schemas.settings.Settings.tzinfo``), daylight saving included, and stored as UTC.
- Notes: a Markdown file (``.md``, ``.markdown``), or a ``.txt`` file that opens with YAML front matter; one
  message per heading section (the whole note when it has no heading), spoken by the user; the time from the
  front matter's ``date`` (or ``created``; one without a zone read in the user's zone, as WhatsApp's), else
  the file's time (the event's capture time).
- A ChatGPT export as downloaded (``.zip`` holding ``conversations.json`` beside ``chat.html`` and the
  attachments): ``conversations.json`` is read out of it under zip-bomb bounds (``ZIP_MAX_MEMBERS`` entries,
  ``ZIP_MAX_TOTAL_BYTES`` uncompressed in all, as the central directory declares them; the member read no
  further than its declared size, which ``zipfile`` checks with the CRC), after OWASP's advice on archives.
"""

from __future__ import annotations

import io
import re
import zipfile
from datetime import UTC, date, datetime, time, tzinfo
from pathlib import PurePath

from engram.schemas.conversations import ConversationMessage
from engram.schemas.settings import get_settings
from engram.workers.text.timeexpr import date_order, parse_locomo_datetime

#: File suffixes whose content the text importers may read (JSON exports come by the JSON path).
TEXT_EXTENSIONS = {".txt", ".md", ".markdown"}
NOTE_EXTENSIONS = {".md", ".markdown"}
NOTE_SESSION_MAX = 200
CHATGPT_MEMBER = "conversations.json"
ZIP_MAX_MEMBERS = 100_000  # entries in a ChatGPT export zip (a large account's attachments: thousands)
ZIP_MAX_TOTAL_BYTES = 4 << 30  # uncompressed bytes of all its entries, as declared (4 GiB)
ZIP_MAX_CONVERSATIONS_BYTES = 1 << 30  # conversations.json itself, uncompressed (1 GiB)


def user_zone() -> tzinfo:
    """The zone zoneless export times are read in: ``ENGRAM_TIMEZONE``, else the system's."""
    return get_settings().tzinfo


def _local(naive: datetime, tz: tzinfo) -> datetime:
    """A wall-clock time in ``tz`` as UTC (``fold=0``: the first of a repeated hour)."""
    return naive.replace(tzinfo=tz).astimezone(UTC)


# --- ChatGPT --------------------------------------------------------------------------------------------


def is_chatgpt_export(doc: object) -> bool:
    """True for a parsed ChatGPT export: a list of conversations (or one) with a ``mapping`` of nodes."""
    first = doc[0] if isinstance(doc, list) and doc else doc
    return isinstance(first, dict) and isinstance(first.get("mapping"), dict)


def chatgpt_messages(doc: list | dict) -> list[ConversationMessage]:
    """The messages of every conversation of a parsed ChatGPT export, conversation by conversation.

    ``session_id`` is the conversation's ``conversation_id`` (else ``id``, else ``chatgpt-<n>``),
    ``message_id`` the node id, ``speaker`` the author's role (``user`` or ``assistant``). A message without
    ``create_time`` takes the one before it (the conversation's ``create_time`` for the first). Raises
    ValueError naming the conversation when one is malformed (no time at all, a node that is not an object)."""
    convs = doc if isinstance(doc, list) else [doc]
    out: list[ConversationMessage] = []
    for n, conv in enumerate(convs):
        if not isinstance(conv, dict) or not isinstance(conv.get("mapping"), dict):
            raise ValueError(f"conversation {n} has no mapping of messages")
        session = str(conv.get("conversation_id") or conv.get("id") or f"chatgpt-{n}")
        try:
            out.extend(_chatgpt_conversation(conv, session))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            title = conv.get("title") or session
            raise ValueError(f"conversation {n} ({title!r}): {exc}") from exc
    return out


def _chatgpt_conversation(conv: dict, session: str) -> list[ConversationMessage]:
    mapping: dict = conv["mapping"]
    last = _epoch(conv.get("create_time"))
    out = []
    for node_id in _chatgpt_branch(mapping, conv.get("current_node")):
        msg = mapping[node_id].get("message")
        if not msg:
            continue
        role = (msg.get("author") or {}).get("role")
        content = msg.get("content") or {}
        if (
            role not in ("user", "assistant")
            or content.get("content_type") not in ("text", "multimodal_text")
            or (msg.get("metadata") or {}).get("is_visually_hidden_from_conversation")
        ):
            continue
        text = "\n".join(p for p in content.get("parts") or [] if isinstance(p, str)).strip()
        when = _epoch(msg.get("create_time")) or last
        if not text:
            continue
        if when is None:
            raise ValueError(f"message {node_id} has no create_time, nor has the conversation")
        last = when
        out.append(
            ConversationMessage(message_id=str(node_id), session_id=session, speaker=role, text=text, timestamp=when)
        )
    return out


def _chatgpt_branch(mapping: dict, current: object) -> list[str]:
    """Node ids from the root to ``current`` (the branch the user last saw); without a known ``current_node``,
    from the root along each node's newest (last) child."""
    if isinstance(current, str) and current in mapping:
        path, seen, node = [], set(), current
        while node is not None and node in mapping and node not in seen:
            seen.add(node)
            path.append(node)
            node = mapping[node].get("parent")
        return path[::-1]
    roots = [k for k, v in mapping.items() if v.get("parent") not in mapping]
    path, seen = [], set()
    node = roots[0] if roots else None
    while node is not None and node in mapping and node not in seen:
        seen.add(node)
        path.append(node)
        children = mapping[node].get("children") or []
        node = children[-1] if children else None
    return path


def _epoch(value: object) -> datetime | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return datetime.fromtimestamp(float(value), UTC)
    return None


# --- WhatsApp -------------------------------------------------------------------------------------------

_WA_HEADER = re.compile(
    r"^\[?(?P<date>\d{1,4}(?P<sep>[./-])\d{1,2}(?P=sep)\d{2,4}),?\s+"
    r"(?P<time>\d{1,2}[:.]\d{2}(?:[:.]\d{2})?)(?:\s*(?P<ampm>[AaPp])\.?\s?[Mm]\.?)?"
    r"(?:\]\s+|\s+-\s+)(?P<rest>.*)$"
)
_WA_SYSTEM = re.compile(
    r"^(messages and calls are end-to-end encrypted|messages to this group are now secured|"
    r"this message was deleted|you deleted this message|<media omitted>|<attached: |null$|"
    r"(image|video|audio|sticker|gif|document|contact card) omitted|missed (voice|video) call|"
    r"waiting for this message)",
    re.IGNORECASE,
)
_INVISIBLE = str.maketrans({"\u200e": None, "\u200f": None, "\ufeff": None, "\u202f": " ", "\u00a0": " "})


#: Whitespace and the invisible marks a WhatsApp export may carry before its first line (``_INVISIBLE``).
_LEADING = " \t\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029\u200e\u200f\ufeff\u202f\u00a0"
#: Characters of the first line ``looks_like_whatsapp`` reads: a header (date, time, sender) is far shorter.
_HEADER_CHARS = 1000


def looks_like_whatsapp(text: str) -> bool:
    """True when the first non-empty line is a WhatsApp message header (date, time, then a sender). Reads that
    line only (its first ``_HEADER_CHARS`` characters), not the whole text: a file is asked this before it is
    parsed as whatever it is."""
    head = text.lstrip(_LEADING)[:_HEADER_CHARS]
    for line in head.translate(_INVISIBLE).splitlines():
        if line.strip():
            return _WA_HEADER.match(line.strip()) is not None
    return False


def whatsapp_messages(text: str, source_name: str = "", tz: tzinfo | None = None) -> list[ConversationMessage]:
    """The messages of a WhatsApp chat export (see the module docstring for the formats and date order), times
    read in ``tz`` (default: ``user_zone()``) and stored as UTC.

    ``speaker`` is the sender's name as exported, ``message_id`` ``L<line number>`` of the header line,
    ``session_id`` ``<file stem>/<YYYY-MM-DD>`` (a chat's day). Raises ValueError naming the line for an
    ambiguous date order or a date or time that does not exist."""
    stem = (PurePath(source_name).stem if source_name else "whatsapp")[:NOTE_SESSION_MAX] or "whatsapp"
    headers: list[tuple[int, re.Match]] = []
    bodies: list[list[str]] = []
    for n, raw in enumerate(text.translate(_INVISIBLE).splitlines(), start=1):
        m = _WA_HEADER.match(raw.strip())
        if m:
            headers.append((n, m))
            bodies.append([m["rest"]])
        elif bodies:
            bodies[-1].append(raw)
    day_first = _whatsapp_day_first(headers)
    tz = tz or user_zone()
    out = []
    for (n, m), lines in zip(headers, bodies, strict=True):
        sender, sep, first = lines[0].partition(": ")
        if not sep:  # "Alice created group", the encryption notice on Android: no sender
            continue
        body = "\n".join([first, *lines[1:]]).strip()
        if not body or _WA_SYSTEM.match(body):
            continue
        local = _whatsapp_time(m, day_first, n)
        when = _local(local, tz)
        out.append(
            ConversationMessage(
                message_id=f"L{n}",
                session_id=f"{stem}/{local:%Y-%m-%d}",
                speaker=sender.strip()[:256] or "unknown",
                text=body,
                timestamp=when,
            )
        )
    return out


def _whatsapp_day_first(headers: list[tuple[int, re.Match]]) -> bool:
    """Day-first or month-first for the file's slashed dates, from the numbers it holds (module docstring;
    ``text.timeexpr.date_order``, which names a line of each order when the file holds both)."""
    numeric = [(n, m) for n, m in headers if len(re.split(r"[./-]", m["date"])[0]) != 4]  # year first: unambiguous
    order = date_order((f"line {n}", m.string) for n, m in numeric)
    if order is not None:
        return order == "DMY"
    if any(m["sep"] == "." for _, m in numeric):
        return True
    if numeric:
        n, m = numeric[0]
        raise ValueError(
            f"ambiguous date order at line {n} ({m.string!r}): no day above 12 in the file says "
            "whether dates are day/month or month/day"
        )
    return True


def _whatsapp_time(m: re.Match, day_first: bool, n: int) -> datetime:
    """The header's date and time as written (naive, the sender's wall clock)."""
    a, b, c = (int(x) for x in re.split(r"[./-]", m["date"]))
    if len(m["date"].split(m["sep"])[0]) == 4:
        year, month, day = a, b, c
    else:
        day, month = (a, b) if day_first else (b, a)
        year = c + 2000 if c < 100 else c
    hms = [int(x) for x in re.split(r"[:.]", m["time"])]
    hour, minute, second = hms[0], hms[1], hms[2] if len(hms) > 2 else 0
    if m["ampm"]:
        if not 1 <= hour <= 12:
            raise ValueError(f"line {n}: hour {hour} with AM/PM: {m.string!r}")
        hour = hour % 12 + (12 if m["ampm"].lower() == "p" else 0)
    try:
        return datetime(year, month, day, hour, minute, second)
    except ValueError as exc:
        raise ValueError(f"line {n}: no such date or time ({exc}): {m.string!r}") from exc


# --- notes ----------------------------------------------------------------------------------------------

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(?P<yaml>.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(?P<title>.+?)[ \t#]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


def is_note(text: str, source_name: str) -> bool:
    """True for a note: a Markdown file by its name, or a ``.txt`` file that opens with YAML front matter."""
    suffix = PurePath(source_name).suffix.lower() if source_name else ""
    return suffix in NOTE_EXTENSIONS or (suffix == ".txt" and _FRONT_MATTER.match(text) is not None)


def note_messages(
    text: str,
    source_name: str = "",
    owner: str = "user",
    default_time: datetime | None = None,
    tz: tzinfo | None = None,
) -> list[ConversationMessage]:
    """A note as messages: one per heading section (ATX headings outside fenced code; text before the first
    heading is a section of its own), or one for a note without headings; each spoken by ``owner``.

    ``session_id`` is the front matter's ``title``, else the file stem; ``message_id`` ``section-<n>``. The
    time is the front matter's ``date`` (else ``created``): a YAML date or time, or a string with day, month
    and year (``text.timeexpr.parse_locomo_datetime``: ambiguous dates fail); else ``default_time`` (the
    file's time), else now; a date or time without a zone is read in ``tz`` (default: ``user_zone()``).
    Raises ValueError naming the field for front matter that is not YAML or a date that is not one."""
    import yaml

    meta: dict = {}
    if fm := _FRONT_MATTER.match(text):
        try:
            loaded = yaml.safe_load(fm["yaml"])
        except yaml.YAMLError as exc:
            raise ValueError(f"front matter is not YAML: {str(exc).splitlines()[0]}") from exc
        meta = loaded if isinstance(loaded, dict) else {}
        text = text[fm.end() :]
    when = _note_time(meta, tz or user_zone()) or default_time or datetime.now(UTC)
    stem = PurePath(source_name).stem if source_name else "note"
    session = str(meta.get("title") or stem or "note").strip()[:NOTE_SESSION_MAX] or "note"
    return [
        ConversationMessage(
            message_id=f"section-{i}", session_id=session, speaker=owner[:256] or "user", text=section, timestamp=when
        )
        for i, section in enumerate(_sections(text))
    ]


def _note_time(meta: dict, tz: tzinfo) -> datetime | None:
    for field in ("date", "created"):
        value = meta.get(field)
        if value is None or value == "":
            continue
        if isinstance(value, datetime):
            return value.astimezone(UTC) if value.tzinfo else _local(value, tz)
        if isinstance(value, date):
            return _local(datetime.combine(value, time()), tz)
        try:
            parsed = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
            return parsed.astimezone(UTC) if parsed.tzinfo else _local(parsed, tz)
        except ValueError:
            pass
        try:
            return parse_locomo_datetime(str(value), tz)
        except ValueError as exc:
            raise ValueError(f"front matter {field}: {exc}") from exc
    return None


def _sections(text: str) -> list[str]:
    sections: list[list[str]] = [[]]
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and _HEADING.match(line) and any(s.strip() for s in sections[-1]):
            sections.append([])
        sections[-1].append(line)
    return [joined for s in sections if (joined := "\n".join(s).strip())]


# --- entry point ----------------------------------------------------------------------------------------


def sniff_text(head: bytes, source_name: str) -> bool:
    """Whether a file whose first bytes are ``head`` may be a WhatsApp export or a note (checked before the
    whole file is read and parsed): a Markdown name, or a WhatsApp header or front matter at the start."""
    if PurePath(source_name).suffix.lower() in NOTE_EXTENSIONS:
        return True
    text = head.decode("utf-8-sig", errors="ignore")
    return looks_like_whatsapp(text) or _FRONT_MATTER.match(text) is not None or text.startswith("---")


def text_messages(
    data: bytes,
    source_name: str = "",
    owner: str = "user",
    default_time: datetime | None = None,
    tz: tzinfo | None = None,
) -> list[ConversationMessage] | None:
    """Messages of a WhatsApp export (by content) or a note (by name and content), or None when ``data`` is
    neither (not UTF-8, or another text); zoneless times read in ``tz`` (default: ``user_zone()``). Raises
    ValueError naming the line or field for one that is shaped like its format but cannot be read."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    if "\x00" in text:
        return None
    if looks_like_whatsapp(text):
        return whatsapp_messages(text, source_name, tz)
    if is_note(text, source_name):
        return note_messages(text, source_name, owner, default_time, tz)
    return None


# --- ChatGPT's zip --------------------------------------------------------------------------------------


def is_zip(data: bytes) -> bool:
    """True when ``data`` starts like a zip archive (a local file header, or an empty archive's end record)."""
    return data[:4] in (b"PK\x03\x04", b"PK\x05\x06")


def chatgpt_zip_member(
    data: bytes, max_members: int | None = None, max_total: int | None = None, max_member: int | None = None
) -> bytes | None:
    """The bytes of ``conversations.json`` in a ChatGPT export zip (at the top, or in one folder: the shallowest
    one), or None when the archive holds none (not a ChatGPT export).

    Bounds, checked on the central directory before anything is decompressed: at most ``max_members``
    entries and ``max_total`` uncompressed bytes declared in all, ``max_member`` for conversations.json; the
    member is then read no further than its declared size (``zipfile`` fails a member longer than declared or
    whose CRC differs). Raises ValueError naming the bound and the figures for an archive over them, or saying
    what is wrong with a damaged or encrypted one. The bounds default to ``ZIP_MAX_MEMBERS``,
    ``ZIP_MAX_TOTAL_BYTES`` and ``ZIP_MAX_CONVERSATIONS_BYTES``."""
    max_members = ZIP_MAX_MEMBERS if max_members is None else max_members
    max_total = ZIP_MAX_TOTAL_BYTES if max_total is None else max_total
    max_member = ZIP_MAX_CONVERSATIONS_BYTES if max_member is None else max_member
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
            found = sorted(
                (i for i in infos if PurePath(i.filename).name == CHATGPT_MEMBER and not i.is_dir()),
                key=lambda i: i.filename.count("/"),
            )
            if not found:
                return None
            if len(infos) > max_members:
                raise ValueError(f"zip has {len(infos):,} entries, over the limit of {max_members:,} (a zip bomb?)")
            total = sum(i.file_size for i in infos)
            if total > max_total:
                raise ValueError(
                    f"zip declares {total:,} bytes uncompressed, over the limit of {max_total:,} (a zip bomb?)"
                )
            member = found[0]
            if member.file_size > max_member:
                raise ValueError(
                    f"{member.filename} declares {member.file_size:,} bytes, over the limit of {max_member:,}"
                )
            if member.flag_bits & 0x1:
                raise ValueError(f"{member.filename} is encrypted")
            with zf.open(member) as fh:
                out = fh.read(member.file_size + 1)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as exc:
        raise ValueError(f"damaged or unsupported zip: {exc}") from exc
    if len(out) > member.file_size:  # zipfile stops at the declared size; kept as the bound's own check
        raise ValueError(f"{member.filename} holds more than its declared {member.file_size:,} bytes")
    return out
