"""Stored text is printed exactly as it was stored: rich markup in a chat line ("[/code]", "[bold]"), the vault's
placeholders and a file named with brackets neither crash the CLI nor turn into style or vanish; an empty query is
one line of error, not a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from PIL import Image, ImageDraw

from tests.conftest import REPO

HOSTILE = "key AKIAIOSFODNN7EXAMPLE [/code] [bold]x[/bold] [red]y"
#: a file name and a message holding what a terminal acts on: a colour, a clear screen, a window title, a
#: right-to-left override
ESCAPES_NAME = "evil\x1b[31mred\x1b]0;pwned\u202etxt.txt"
ESCAPES_TEXT = "launch codes \x1b[2J\x1b[1;1H are \u202e4321"
#: a file name whose line break would make its outcome's line read as two, the second naming another file
NEWLINE_NAME = "two\nfailed other.txt"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(root),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "ENGRAM_DATA_DIR": str(root / "data"),
        "COLUMNS": "400",
        "ENGRAM_USER": "ann",
    }
    folder = root / "in"
    folder.mkdir()
    (folder / "chat.jsonl").write_text(
        json.dumps(
            {
                "message_id": "m1",
                "session_id": "s1",
                "speaker": "Ann [admin]",
                "text": HOSTILE,
                "timestamp": "2024-05-02T18:03:00Z",
            }
        )
        + "\n"
    )
    shot = Image.new("RGB", (480, 120), "white")
    ImageDraw.Draw(shot).text((10, 40), "quarterly budget review", fill="black")
    shot.save(folder / "[final] shot.png")
    (folder / "[notes] readme.txt").write_text("not media")
    (folder / ESCAPES_NAME).write_text("not media")
    (folder / NEWLINE_NAME).write_text("not media")
    (folder / "terminal.jsonl").write_text(
        json.dumps(
            {
                "message_id": "t1",
                "session_id": "s2",
                "speaker": "Eve",
                "text": ESCAPES_TEXT,
                "timestamp": "2024-05-03T18:03:00Z",
            }
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", "ingest", str(folder)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return env, out


@pytest.mark.slow
def test_control_characters_are_shown_not_sent_to_the_terminal(store):
    """A file name and a stored message holding terminal escapes and a bidirectional override are printed with
    each such character written as its escape (every character shown, none acted on)."""
    env, out = store
    assert "\x1b" not in out.stdout + out.stderr and "\u202e" not in out.stdout + out.stderr
    assert r"evil\x1b[31mred\x1b]0;pwned\u202etxt.txt" in out.stdout
    shown = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", "search", "launch codes"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert r"launch codes \x1b[2J\x1b[1;1H are \u202e4321" in " ".join(shown.replace("│", " ").split())
    assert "\x1b" not in shown and "\u202e" not in shown


def test_a_file_name_with_a_line_break_stays_on_its_one_line(store):
    _, out = store
    assert r"two\nfailed other.txt: not media" in out.stdout
    assert not any(line.startswith("failed other.txt") for line in (out.stdout + out.stderr).splitlines())


def _run(env, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    return " ".join(out.stdout.replace("│", " ").split())  # table borders out: a wrapped cell reads as one line


def test_ingest_names_files_with_brackets_whole(store):
    _, out = store
    assert "[notes] readme.txt" in " ".join(out.stdout.split())


@pytest.mark.slow
def test_search_ask_and_memories_print_stored_text_as_stored(store):
    env, _ = store
    for args in (["search", "key"], ["ask", "which key"], ["memories", "list", "--user", "ann"]):
        shown = _run(env, *args)
        assert "aws_access_key] [/code] [bold]x[/bold] [red]y" in shown, (args, shown)
        assert "key [vault:" in shown and "AKIA" not in shown
    assert "[final] shot.png" in _run(env, "search", "budget review")


def test_entity_names_with_brackets(store):
    env, _ = store
    assert "Ann [admin]" in _run(env, "entities")


def test_an_empty_query_is_one_line_naming_the_argument(store):
    """A request the command's arguments cannot make (an empty query) is one line saying which argument and why
    (exit code 2, as for a bad option), not a traceback."""
    env, _ = store
    out = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", "search", ""],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip() == "error: query: String should have at least 1 character (given '')", out.stderr
