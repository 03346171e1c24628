"""Workloads for the distributed tests and ``bench/distributed.py``: small screenshots that OCR reads, short
JSONL conversations and spoken memos, each with distinct content, spread over a few users."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from engram.schemas.events import EventStatus

USERS = ("alice", "bob", "carol")
FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
TOPICS = [
    "quarterly budget review",
    "flight to Lisbon on Friday",
    "dentist appointment moved",
    "kubernetes upgrade plan",
    "birthday gift for Sam",
    "invoice 4471 overdue",
    "marathon training week",
    "sourdough starter recipe",
    "rent increase letter",
    "guitar lesson schedule",
    "tax return deadline",
    "garden fence repair",
    "conference talk slides",
    "car insurance renewal",
    "piano recital tickets",
]
SPOKEN = [
    "Remember to call the plumber on Monday morning about the kitchen sink.",
    "The team meeting moves to Thursday afternoon in the large conference room.",
    "Buy oat milk, green apples and coffee beans on the way home.",
]


@dataclass
class Item:
    """One file to publish, who publishes it, and what must become of it: ``status`` and, when known,
    ``observations`` (None: decided by perception, e.g. speech-to-text segments; the ledger's count is
    then the reference)."""

    path: Path
    user: str
    device: str
    observations: int | None
    status: EventStatus = EventStatus.done
    app: str | None = None
    window: str | None = None
    captured_at: datetime | None = None


def _font(size: int):
    return ImageFont.truetype(str(FONT), size) if FONT.exists() else ImageFont.load_default(size=size)


def make_screenshot(path: Path, title: str, lines: list[str], seed: int) -> None:
    """A small window-like PNG with a title bar and a few lines of distinct text (OCR reads them)."""
    dark = seed % 2 == 0
    img = Image.new("RGB", (640, 360), (30, 32, 40) if dark else (250, 250, 250))
    draw = ImageDraw.Draw(img)
    draw.rectangle([0, 0, 640, 36], fill=(60 + 40 * (seed % 4), 90, 160))
    draw.text((12, 8), title, font=_font(18), fill="white")
    for i, line in enumerate(lines):
        draw.text((24, 70 + 44 * i), line, font=_font(24), fill=(230, 230, 230) if dark else (20, 20, 20))
    img.save(path)


def make_conversation(path: Path, session: str, speakers: tuple[str, str], topic: str, start: datetime) -> int:
    """A JSONL conversation of four messages about ``topic`` (engram's conversation record); returns the
    number of messages."""
    from engram.schemas.conversations import ConversationMessage
    from engram.workers.media.conversations import to_jsonl

    texts = [
        f"Did you see the note about the {topic}?",
        f"Yes, the {topic} is on my list for this week.",
        f"Let's talk about the {topic} tomorrow morning.",
        "Sounds good, I will bring the details.",
    ]
    msgs = [
        ConversationMessage(
            message_id=f"{session}:{i}",
            session_id=session,
            speaker=speakers[i % 2],
            text=t,
            timestamp=start + timedelta(minutes=2 * i),
        )
        for i, t in enumerate(texts)
    ]
    path.write_bytes(to_jsonl(msgs))
    return len(msgs)


def speech_files(folder: Path) -> list[Path]:
    """2-3 short speech recordings: espeak-ng WAVs when it is installed, else real files from
    ENGRAM_EVAL_DATA's audio folder (none when both are absent)."""
    espeak = shutil.which("espeak-ng")
    if espeak:
        out = []
        for i, text in enumerate(SPOKEN):
            path = folder / f"memo-{i}.wav"
            subprocess.run([espeak, "-s", "160", "-w", str(path), text], check=True, capture_output=True, timeout=30)
            out.append(path)
        return out
    from tests.conftest import eval_data_dir

    audio = eval_data_dir() / "audio"
    return [p for p in (audio / "jfk.flac", audio / "leopard_test.wav") if p.exists()]


def chats_and_screens(folder: Path, n: int, tag: str, offset: int = 0, kind: str | None = None) -> list[Item]:
    """``n`` items spread over the users: conversations (4 messages) and screenshots (1 OCR observation)
    alternating, or only ``kind`` ("text" or "screenshot"), each with distinct text. Each screenshot gets a
    device of its own, so that no frame is a near-duplicate of the previous one of its device stream."""
    folder.mkdir(parents=True, exist_ok=True)
    start = datetime(2024, 5, 1, 9, tzinfo=UTC)
    items = []
    for k in range(offset, offset + n):
        user = USERS[k % len(USERS)]
        topic = TOPICS[k % len(TOPICS)]
        when = start + timedelta(hours=k)
        chat = kind == "text" if kind else (k // len(USERS)) % 2 == 0
        if chat:
            path = folder / f"{tag}-{k}-{user}-chat.jsonl"
            count = make_conversation(path, f"{tag}-{user}-s{k}", (user, "friend"), f"{topic} ({tag} {k})", when)
            items.append(Item(path, user, f"{user}-phone", count, captured_at=when))
        else:
            path = folder / f"{tag}-{k}-{user}-screen.png"
            make_screenshot(path, f"Notes {k} - {user}", [topic, f"ticket {tag}-{k} for {user}"], seed=k)
            items.append(
                Item(
                    path,
                    user,
                    f"{user}-laptop-{tag}-{k}",
                    1,
                    app="Notes",
                    window=f"{topic} ({tag} {k})",
                    captured_at=when,
                )
            )
    return items
