"""Importers (workers/media/importers.py): a ChatGPT data export (``conversations.json`` and the ``.zip`` as
downloaded, with its zip-bomb bounds), WhatsApp chat exports in both date formats and
Markdown/plain notes, written here in each real format, read into the conversation record through the same
entry points as the benchmark adapters; then ``engram ingest`` of each on the embedded default, found by search."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engram.schemas.events import MediaKind
from engram.workers.media.conversations import InvalidConversation, parse_conversation_file
from engram.workers.media.detect import detect
from tests.conftest import REPO

T0 = 1_704_067_200.0  # 2024-01-01T00:00:00Z


def _node(node_id, parent, children, role=None, text=None, t=None, content_type="text", **meta):
    message = (
        None
        if role is None
        else {
            "id": node_id,
            "author": {"role": role, "name": None, "metadata": {}},
            "create_time": t,
            "update_time": None,
            "content": {"content_type": content_type, "parts": text if isinstance(text, list) else [text]},
            "status": "finished_successfully",
            "end_turn": True,
            "weight": 1.0,
            "metadata": meta,
            "recipient": "all",
        }
    )
    return {"id": node_id, "message": message, "parent": parent, "children": children}


def chatgpt_export() -> list[dict]:
    """conversations.json as the ChatGPT data export writes it: the user edited their first question, so the
    root's child has two branches; ``current_node`` ends the second one."""
    mapping = {
        "root": _node("root", None, ["sys"]),
        "sys": _node("sys", "root", ["u1", "u1b"], "system", "", None, is_visually_hidden_from_conversation=True),
        "u1": _node("u1", "sys", ["a1"], "user", "Which ferry goes to Tangier?", T0 + 10),
        "a1": _node("a1", "u1", [], "assistant", "The FRS ferry from Tarifa.", T0 + 12),
        "u1b": _node("u1b", "sys", ["a1b"], "user", "Which ferry goes to Tangier from Algeciras?", T0 + 60),
        "a1b": _node("a1b", "u1b", ["t1"], "assistant", "Baleària sails from Algeciras at 09:00.", T0 + 62),
        "t1": _node("t1", "a1b", ["u2"], "tool", "search results ...", T0 + 63),
        "u2": _node(
            "u2",
            "t1",
            ["a2"],
            "user",
            [{"content_type": "image_asset_pointer", "asset_pointer": "x"}, "Here is my ticket, gate B7"],
            T0 + 120,
            "multimodal_text",
        ),
        "a2": _node("a2", "u2", [], "assistant", "Gate B7 opens an hour before departure.", None),
    }
    return [
        {
            "title": "Ferry to Tangier",
            "create_time": T0,
            "update_time": T0 + 200,
            "mapping": mapping,
            "current_node": "a2",
            "conversation_id": "c-ferry",
            "id": "c-ferry",
            "moderation_results": [],
        },
        {"title": "Empty", "create_time": T0, "mapping": {"r": _node("r", None, [])}, "conversation_id": "c-0"},
    ]


def test_chatgpt_export_follows_the_current_branch(tmp_path):
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(chatgpt_export()))
    assert detect(path) == (MediaKind.text, "application/json")
    msgs = parse_conversation_file(path.read_bytes(), str(path))
    assert [(m.message_id, m.speaker) for m in msgs] == [
        ("u1b", "user"),
        ("a1b", "assistant"),
        ("u2", "user"),
        ("a2", "assistant"),
    ]
    assert msgs[0].text == "Which ferry goes to Tangier from Algeciras?"
    assert msgs[2].text == "Here is my ticket, gate B7"
    assert {m.session_id for m in msgs} == {"c-ferry"}
    assert msgs[0].timestamp == datetime(2024, 1, 1, 0, 1, tzinfo=UTC)
    assert msgs[3].timestamp == msgs[2].timestamp  # no create_time: the message before's


def test_chatgpt_without_current_node_takes_the_newest_branch():
    conv = chatgpt_export()[0]
    del conv["current_node"]
    msgs = parse_conversation_file(json.dumps([conv]).encode())
    assert [m.message_id for m in msgs] == ["u1b", "a1b", "u2", "a2"]


def test_chatgpt_without_any_time_fails_naming_the_conversation():
    conv = chatgpt_export()[0]
    conv["create_time"] = None
    for node in conv["mapping"].values():
        if node["message"]:
            node["message"]["create_time"] = None
    with pytest.raises(InvalidConversation, match="Ferry to Tangier.*u1b has no create_time"):
        parse_conversation_file(json.dumps([conv]).encode())


ANDROID_US = """\
12/31/23, 9:41\u202fPM - Messages and calls are end-to-end encrypted. No one outside of this chat, not even \
WhatsApp, can read or listen to them. Tap to learn more.
12/31/23, 9:41\u202fPM - Alice created group "Lisbon trip"
12/31/23, 9:41\u202fPM - Alice: The ferry to Lisbon leaves at 7
12/31/23, 9:42\u202fPM - Bob: Great, I'll bring the
boarding passes

and the snacks
1/2/24, 12:05\u202fAM - Bob: <Media omitted>
1/2/24, 12:06\u202fAM - Alice: This message was deleted
1/2/24, 12:07\u202fPM - Alice: meet at pier 3: the blue gate
"""

IOS_DOTTED = """\
\u200e[31.12.23, 21:41:05] Lisbon trip: \u200eMessages and calls are end-to-end encrypted. No one outside of \
this chat, not even WhatsApp, can read or listen to them.
[31.12.23, 21:41:09] Alice: Die Fähre nach Lissabon fährt um 7
[02.01.24, 08:15:00] Bob: \u200eimage omitted
[02.01.24, 08:16:30] Bob: Treffpunkt Pier 3
"""

DAY_FIRST_SLASHED = """\
31/12/2023, 21:41 - Alice: The ferry to Lisbon leaves at 7
01/01/2024, 09:00 - Bob: Happy new year
"""


@pytest.mark.parametrize(
    "name,text,expected",
    [
        (
            "WhatsApp Chat with Bob.txt",
            ANDROID_US,
            [
                ("L3", "Alice", "The ferry to Lisbon leaves at 7", datetime(2023, 12, 31, 21, 41, tzinfo=UTC)),
                (
                    "L4",
                    "Bob",
                    "Great, I'll bring the\nboarding passes\n\nand the snacks",
                    datetime(2023, 12, 31, 21, 42, tzinfo=UTC),
                ),
                ("L10", "Alice", "meet at pier 3: the blue gate", datetime(2024, 1, 2, 12, 7, tzinfo=UTC)),
            ],
        ),
        (
            "WhatsApp Chat - Lisbon trip.txt",
            IOS_DOTTED,
            [
                ("L2", "Alice", "Die Fähre nach Lissabon fährt um 7", datetime(2023, 12, 31, 21, 41, 9, tzinfo=UTC)),
                ("L4", "Bob", "Treffpunkt Pier 3", datetime(2024, 1, 2, 8, 16, 30, tzinfo=UTC)),
            ],
        ),
        (
            "chat.txt",
            DAY_FIRST_SLASHED,
            [
                ("L1", "Alice", "The ferry to Lisbon leaves at 7", datetime(2023, 12, 31, 21, 41, tzinfo=UTC)),
                ("L2", "Bob", "Happy new year", datetime(2024, 1, 1, 9, 0, tzinfo=UTC)),
            ],
        ),
    ],
)
def test_whatsapp_exports(tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert detect(path) == (MediaKind.text, "text/plain")
    msgs = parse_conversation_file(path.read_bytes(), str(path))
    assert [(m.message_id, m.speaker, m.text, m.timestamp) for m in msgs] == expected
    assert msgs[0].session_id == f"{path.stem}/2023-12-31"


def test_whatsapp_ambiguous_dates_fail_with_the_line(tmp_path):
    path = tmp_path / "chat.txt"
    path.write_text("01/02/24, 09:00 - Alice: hello\n03/04/24, 10:00 - Bob: hi\n")
    assert detect(path) == (MediaKind.text, "text/plain")  # shaped like an export: ingest fails it with the reason
    with pytest.raises(InvalidConversation, match=r"ambiguous date order at line 1 .*01/02/24, 09:00 - Alice"):
        parse_conversation_file(path.read_bytes(), str(path))
    path.write_text("13/02/24, 09:00 - Alice: hello\n03/14/24, 10:00 - Bob: hi\n")
    with pytest.raises(InvalidConversation, match="line 1 .* is day-first but line 2 .* month-first"):
        parse_conversation_file(path.read_bytes(), str(path))


NOTE_MD = """\
---
title: Trip planning
date: 2024-03-05 09:30
tags: [travel]
---
Loose thoughts before the headings.

# Lisbon
Ferry leaves Cais do Sodré at 7.

## Packing
- passport
- the green umbrella

```python
# not a heading inside code
print("x")
```

# Budget
About 400 EUR.
"""


def test_markdown_note_one_message_per_section(tmp_path):
    path = tmp_path / "trip.md"
    path.write_text(NOTE_MD)
    assert detect(path) == (MediaKind.text, "text/plain")
    msgs = parse_conversation_file(path.read_bytes(), str(path), owner="alice")
    assert [m.text.splitlines()[0] for m in msgs] == [
        "Loose thoughts before the headings.",
        "# Lisbon",
        "## Packing",
        "# Budget",
    ]
    assert "# not a heading inside code" in msgs[2].text
    assert {(m.speaker, m.session_id, m.timestamp) for m in msgs} == {
        ("alice", "Trip planning", datetime(2024, 3, 5, 9, 30, tzinfo=UTC))
    }


def test_notes_without_front_matter_take_the_file_time(tmp_path):
    path = tmp_path / "groceries.md"
    path.write_text("oat milk, lemons, the good coffee\n")
    when = datetime(2024, 6, 1, 8, 0, tzinfo=UTC)
    [msg] = parse_conversation_file(path.read_bytes(), str(path), default_time=when, owner="bob")
    assert (msg.text, msg.speaker, msg.session_id, msg.timestamp) == (
        "oat milk, lemons, the good coffee",
        "bob",
        "groceries",
        when,
    )


def test_plain_text_is_a_note_only_with_front_matter(tmp_path):
    note = tmp_path / "journal.txt"
    note.write_text("---\ndate: 2024-02-29\n---\nSaw the orca pod off Tarifa today.\n")
    assert detect(note) == (MediaKind.text, "text/plain")
    [msg] = parse_conversation_file(note.read_bytes(), str(note))
    assert msg.timestamp == datetime(2024, 2, 29, tzinfo=UTC)
    readme = tmp_path / "README.txt"
    readme.write_text("a readme, not a memory\n")
    assert detect(readme) is None
    ambiguous = tmp_path / "a.md"
    ambiguous.write_text("---\ndate: 03.04.2024\n---\ntext\n")
    with pytest.raises(InvalidConversation, match="front matter date: ambiguous date"):
        parse_conversation_file(ambiguous.read_bytes(), str(ambiguous))


def test_zoneless_export_times_are_read_in_the_users_zone(tmp_path, monkeypatch):
    """ENGRAM_TIMEZONE: WhatsApp's wall-clock times and a note's zoneless dates are the user's, daylight saving
    included (New York: EST in December, EDT in July); the session day stays the day the chat shows."""
    monkeypatch.setenv("ENGRAM_TIMEZONE", "America/New_York")
    chat = tmp_path / "WhatsApp Chat with Bob.txt"
    chat.write_text(ANDROID_US + "7/4/24, 11:30\u202fPM - Bob: fireworks over the river\n", encoding="utf-8")
    msgs = parse_conversation_file(chat.read_bytes(), str(chat))
    assert msgs[0].timestamp == datetime(2024, 1, 1, 2, 41, tzinfo=UTC)  # 21:41 EST
    assert msgs[0].session_id == f"{chat.stem}/2023-12-31"
    assert (msgs[-1].text, msgs[-1].timestamp) == ("fireworks over the river", datetime(2024, 7, 5, 3, 30, tzinfo=UTC))
    note = tmp_path / "trip.md"
    note.write_text("---\ndate: 2024-03-05 09:30\n---\nferry at seven\n")
    assert parse_conversation_file(note.read_bytes(), str(note))[0].timestamp == datetime(
        2024, 3, 5, 14, 30, tzinfo=UTC
    )
    note.write_text("---\ndate: 2024-07-01T09:30:00+02:00\n---\nferry at seven\n")  # a zone given: kept
    assert parse_conversation_file(note.read_bytes(), str(note))[0].timestamp == datetime(2024, 7, 1, 7, 30, tzinfo=UTC)
    note.write_text("---\ndate: 5 March 2024 09:30\n---\nferry at seven\n")  # read by dateparser
    assert parse_conversation_file(note.read_bytes(), str(note))[0].timestamp == datetime(
        2024, 3, 5, 14, 30, tzinfo=UTC
    )
    monkeypatch.setenv("ENGRAM_TIMEZONE", "Asia/Tokyo")
    assert parse_conversation_file(chat.read_bytes(), str(chat))[0].timestamp == datetime(
        2023, 12, 31, 12, 41, tzinfo=UTC
    )


def _chatgpt_zip(path: Path, extra: dict[str, bytes] | None = None, folder: str = "") -> Path:
    """A ChatGPT export as the download gives it: conversations.json beside chat.html and user.json."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{folder}conversations.json", json.dumps(chatgpt_export()))
        zf.writestr(f"{folder}chat.html", "<html><body>the same chats</body></html>")
        zf.writestr(f"{folder}user.json", json.dumps({"id": "user-x", "email": "a@example.com"}))
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return path


def test_chatgpt_zip_is_detected_and_read(tmp_path):
    path = _chatgpt_zip(tmp_path / "3f2a-2024-05-01-12-00-00.zip")
    assert detect(path) == (MediaKind.text, "application/zip")
    msgs = parse_conversation_file(path.read_bytes(), str(path))
    assert [m.message_id for m in msgs] == ["u1b", "a1b", "u2", "a2"]
    nested = _chatgpt_zip(tmp_path / "nested.zip", folder="export/")
    assert [m.message_id for m in parse_conversation_file(nested.read_bytes())] == ["u1b", "a1b", "u2", "a2"]
    other = tmp_path / "photos.zip"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("a.txt", "not a chat export")
    assert detect(other) is None


def test_chatgpt_zip_bombs_fail_with_the_bound(tmp_path, monkeypatch):
    """Zip-bomb bounds from the central directory, before anything is decompressed: 64 MiB of zeros in one
    member (deflated to ~64 KiB) over a lowered total bound, and an archive of too many entries."""
    from engram.workers.media import importers

    bomb = _chatgpt_zip(tmp_path / "bomb.zip", {"zeros.bin": bytes(64 << 20)})
    assert bomb.stat().st_size < 1 << 20
    assert detect(bomb) == (MediaKind.text, "application/zip")  # within the default bounds (4 GiB)
    with pytest.raises(ValueError, match=r"declares 67,1\d\d,\d+ bytes uncompressed, over the limit of 33,554,432"):
        importers.chatgpt_zip_member(bomb.read_bytes(), max_total=32 << 20)
    many = _chatgpt_zip(tmp_path / "many.zip", {f"f/{i}.txt": b"" for i in range(300)})
    with pytest.raises(ValueError, match=r"zip has 303 entries, over the limit of 100"):
        importers.chatgpt_zip_member(many.read_bytes(), max_members=100)
    with pytest.raises(ValueError, match=r"conversations.json declares [\d,]+ bytes, over the limit of 10$"):
        importers.chatgpt_zip_member(many.read_bytes(), max_member=10)
    monkeypatch.setattr(importers, "ZIP_MAX_TOTAL_BYTES", 32 << 20)  # the bound ingest applies, lowered
    with pytest.raises(InvalidConversation, match=r"ChatGPT export zip refused: zip declares 67,1[\d,]+ bytes"):
        parse_conversation_file(bomb.read_bytes(), str(bomb))
    broken = tmp_path / "broken.zip"
    broken.write_bytes(_chatgpt_zip(tmp_path / "ok.zip").read_bytes()[:-30])
    with pytest.raises(InvalidConversation, match="damaged or unsupported zip"):
        parse_conversation_file(broken.read_bytes(), str(broken))


def _cli(env: dict, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return " ".join(out.stdout.split())


@pytest.mark.slow
def test_engram_ingest_and_search_each_format(tmp_path: Path):
    folder = tmp_path / "exports"
    folder.mkdir()
    _chatgpt_zip(folder / "chatgpt-export.zip")
    (folder / "WhatsApp Chat with Bob.txt").write_text(ANDROID_US)
    (folder / "trip.md").write_text(NOTE_MD)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
        "COLUMNS": "300",
        "ENGRAM_USER": "alice",
    }
    out = _cli(env, "ingest", str(folder), "--no-consolidate")
    assert "3 done (11 observations), 0 skipped, 0 failed, 0 not media" in out, out  # 4 + 3 + 4 messages
    for query, found in (
        ("Baleària Algeciras ferry", "Baleària sails from Algeciras"),
        ("who brings the boarding passes", "boarding passes"),
        ("green umbrella packing", "the green umbrella"),
    ):
        assert found in _cli(env, "search", query, "-k", "3"), query
