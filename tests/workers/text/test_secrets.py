"""Secrets heard and secrets OCR split (issue 43): passwords, PINs and door codes told after a cue in typed or
spoken form, tokens wrapped over lines, tokens cut short at a known prefix; and the ordinary notes that must
stay as written (counts, dates, prices, order numbers, "the number of people is 12")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram.workers.text.secrets import detect

JWT = (
    "eyJhbGciOiAiSFMyNTYiLCAidHlwIjogIkpXVCJ9.eyJzdWIiOiAiMTIzNDU2Nzg5MCIsICJuYW1lIjogIkFkYSIsICJpYXQiOiAxNzE2"
    "MjAwMDAwfQ.q86-mEKsrLv2qJReR0yeRE-L-L8gfPUQ2MR_k-WExMM"
)


def found(text: str) -> list[tuple[str, str]]:
    return [(f.entry_type, f.secret) for f in detect(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the sentences, as written and as faster-whisper's tiny.en heard espeak-ng say them
        (
            "the WiFi password is blue Falcon 77, my bank password is Hunter 2",
            [("password", "blue Falcon 77"), ("password", "Hunter 2")],
        ),
        ("the door code is 4512", [("pin", "4512")]),
        (
            "The Wi-Fi password is Blue Falcon 77. My bank password is Hunter 2. The door code is 4,500 and 12.",
            [("password", "Blue Falcon 77"), ("password", "Hunter 2"), ("pin", "4,500 and 12")],
        ),
        # numbers and letters said as words
        ("the door code is four five one two", [("pin", "four five one two")]),
        ("my password is hunter two", [("password", "hunter two")]),
        (
            "the WiFi password is blue Falcon seven seven and the router is upstairs",
            [("password", "blue Falcon seven seven")],
        ),
        ("my PIN is 9-3-7-1.", [("pin", "9-3-7-1")]),
        ("PIN 4512", [("pin", "4512")]),
        ("ok the passcode is nine three seven one, got it?", [("pin", "nine three seven one")]),
        ("the alarm code 2 4 6 8 then press enter", [("pin", "2 4 6 8")]),
        ("my bank password is Hunter2 because I like it", [("password", "Hunter2")]),
        ("the password is B as in bravo 7 7", []),  # "as" is a function word: the clause ends at "B", too short
    ],
)
def test_told_secrets(text, expected):
    assert found(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "the number of people is 12",
        "the meeting code review is at 3",
        "the code is 200 lines long",
        "the error code is 404 and the status code is 500",
        "pin 3 of the chip is ground",
        "PIN codes are 4 digits",
        "The password is 8 characters long.",
        "Passwords are 12 characters or more.",
        "my pin is in the drawer",
        "The password is stored in the vault, as always.",
        "the password is short and the meeting is on 2024-05-08 at 13:56",
        "It costs $4,512 in total, and we sold 4512 units on 05/12/2024 at 4:51 pm.",
        "May 4, 2012: 12 people, 3 rooms, 1,250 chairs",
        "order number 4155552671 shipped",
        "Order #415-555-2671 shipped",
        "Your order 112-4567890-1234567 has shipped; ticket 4155552671, reference 202-555-0188",
        "Order ID: 650-253-0000",
        "sk-learn-models and Node.js",
        "see https://example.com/docs/a1b2c3d4e5f6\nSettings",
    ],
)
def test_ordinary_notes_stay_in_clear(text):
    assert found(text) == []


def test_a_jwt_wrapped_over_two_lines_is_one_secret():
    text = f"Authorization: Bearer {JWT[:62]}\n{JWT[62:]}\nok"
    [f] = detect(text)
    assert (f.entry_type, f.secret, f.partial) == ("jwt", JWT, False)
    assert text[f.start : f.end] == f"{JWT[:62]}\n{JWT[62:]}"  # the span holds the line break: both lines go


def test_an_ocr_misread_wrapped_jwt_is_vaulted_whole_as_partial():
    """rapidocr reads DejaVu Sans' l as I (and back): the token no longer decodes, but it begins as a JWT does."""
    misread = JWT.translate(str.maketrans("lI", "Il"))
    [f] = detect(f"token: {misread[:50]}\n{misread[50:90]}\n{misread[90:]} expires")
    assert (f.entry_type, f.secret, f.partial) == ("jwt", misread, True)
    assert found(f"Bearer {misread[:50]}\n{misread[50:]}") == [("api_key", misread)]  # a bearer token, whole


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("export GITHUB_TOKEN=ghp_Q7xN2mK9pR4tL8", ("api_key", "ghp_Q7xN2mK9pR4tL8")),
        ("aws_access_key_id = AKIAJ7Q2WXYZ", ("aws_access_key", "AKIAJ7Q2WXYZ")),
        ("SLACK=xoxb-2024Q", None),  # too short to tell
        ("cookie: session=eyJhbGciOiJIUzI1Ni", ("jwt", "eyJhbGciOiJIUzI1Ni")),
    ],
)
def test_a_token_cut_at_an_edge_is_partial(text, expected):
    findings = [(f.entry_type, f.secret) for f in detect(text) if f.partial]
    assert findings == ([expected] if expected else [])


def test_a_whole_token_is_not_partial_and_a_private_key_keeps_its_lines():
    assert [(f.entry_type, f.partial) for f in detect("token ghp_" + "a1B2" * 9)] == [("api_key", False)]
    key = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAE\nQyNTUxOQAAACAg6Yhr\n"
        "-----END OPENSSH PRIVATE KEY-----"
    )
    assert found(f"key:\n{key}\nok") == [("private_key", key)]


def test_real_conversations_gain_no_finding(eval_data: Path):
    """LoCoMo's 5,882 turns hold no told password, PIN or wrapped token: none of them is found as one."""
    data = json.loads((eval_data / "conversations" / "locomo10.json").read_text())
    turns = [
        t["text"]
        for c in data
        for k, v in c["conversation"].items()
        if k.startswith("session_") and isinstance(v, list)
        for t in v
    ]
    kinds = {f.entry_type for t in turns for f in detect(t)}
    assert not kinds & {"pin", "password", "jwt", "api_key", "aws_access_key"}, kinds
