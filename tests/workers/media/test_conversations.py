"""Conversation files into the import record: LoCoMo, LongMemEval, and the record itself (JSON, JSONL)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from engram.schemas.conversations import ConversationMessage
from engram.workers.media.conversations import (
    InvalidConversation,
    locomo_sample_id,
    locomo_sample_messages,
    parse_conversation_file,
    parse_locomo_datetime,
    parse_longmemeval_date,
    to_jsonl,
)
from engram.workers.media.decode import MediaError

ANNOTATION = "ANNOTATION-MARKER"  # only in fields that must never become messages


def locomo_sample() -> dict:
    """A LoCoMo-shaped sample: two sessions (numbered 2 and 10, to check numeric order), one shared image,
    and every annotation field holding ``ANNOTATION``."""
    return {
        "sample_id": "conv-test",
        "qa": [{"question": f"{ANNOTATION} q", "answer": f"{ANNOTATION} a", "evidence": ["D1:1"], "category": 1}],
        "observation": {"session_2_observation": {"Ann": [[f"{ANNOTATION} obs", "D1:1"]]}},
        "session_summary": {"session_2_summary": f"{ANNOTATION} summary"},
        "event_summary": {"events_session_2": {"Ann": [f"{ANNOTATION} event"], "date": "8 May, 2023"}},
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_10_date_time": "9:05 am on 2 June, 2023",
            "session_10": [{"speaker": "Bob", "dia_id": "D10:1", "text": "Back from the trip."}],
            "session_2_date_time": "1:56 pm on 8 May, 2023",
            "session_2": [
                {
                    "speaker": "Ann",
                    "dia_id": "D2:1",
                    "text": "Look at my painting!",
                    "img_url": [f"https://example.invalid/{ANNOTATION}.jpg"],
                    "query": f"{ANNOTATION} query",
                    "blip_caption": "a photo of a sunrise over a lake",
                },
                {"speaker": "Bob", "dia_id": "D2:2", "text": "Lovely colours."},
            ],
        },
    }


def record(i: int, **over) -> dict:
    """One import record (``message_id`` m<i>), with fields overridden by ``over``."""
    rec = {
        "message_id": f"m{i}",
        "session_id": "s1",
        "speaker": "ann",
        "text": f"message number {i}",
        "timestamp": f"2024-05-01T10:0{i}:00Z",
    }
    rec.update(over)
    return rec


@pytest.mark.parametrize(
    ("sample_id", "expected"),
    [
        ("conv-26", "conv-26"),
        (26, "26"),
        (26.0, "26"),
        (7.5, "7.5"),
        ("conv 26 / Ann & Bob", "conv-26-Ann-Bob"),
        ("--x", "x"),
        (None, "sample-3"),
        ("", "sample-3"),
        (True, "sample-3"),
        ("ÄÖÜ", "sample-3"),
        ({"n": 1}, "n-:-1"),
        ([1, 2], "1-2"),
        ("x" * 300, "x" * 100),
    ],
)
def test_any_locomo_sample_id_becomes_a_valid_id(sample_id, expected):
    from engram.schemas.events import MediaEvent, MediaKind

    sample = {**locomo_sample(), "sample_id": sample_id}
    got = locomo_sample_id(sample, 3)
    assert got == expected
    MediaEvent(
        tenant_id="t",
        user_id=f"locomo-{got}",
        device_id=got,
        kind=MediaKind.text,
        object_key="k",
        sha256="0" * 64,
        size=1,
        mime_type="application/json",
        captured_at=datetime.now(UTC),
    )  # validates


def test_a_locomo_file_with_numeric_sample_ids_is_read():
    samples = [{**locomo_sample(), "sample_id": 26}, {**locomo_sample(), "sample_id": None}]
    msgs = parse_conversation_file(json.dumps(samples).encode())
    assert {m.session_id for m in msgs} == {
        "26/session_2",
        "26/session_10",
        "sample-1/session_2",
        "sample-1/session_10",
    }


def test_locomo_datetime():
    assert parse_locomo_datetime("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert parse_locomo_datetime(" 12:09 am on 1 January, 2024 ") == datetime(2024, 1, 1, 0, 9, tzinfo=UTC)
    # other unambiguous formats, as exports of real chats write them
    assert parse_locomo_datetime("29.12.2023, 00:51:12") == datetime(2023, 12, 29, 0, 51, 12, tzinfo=UTC)
    assert parse_locomo_datetime("8 May 2023") == datetime(2023, 5, 8, tzinfo=UTC)
    assert parse_locomo_datetime("2023-05-08T13:56:00Z") == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    with pytest.raises(
        ValueError,
        match=r"ambiguous date '03.04.2023': day-first it is 03 April 2023, month-first "
        r"04 March 2023, and no date in the file has a day above 12",
    ):
        parse_locomo_datetime("03.04.2023")
    assert parse_locomo_datetime("03.04.2023", order="DMY") == datetime(2023, 4, 3, tzinfo=UTC)
    assert parse_locomo_datetime("03.04.2023", order="MDY") == datetime(2023, 3, 4, tzinfo=UTC)
    for bad in ("sometime in May", "yesterday", "May 2023"):
        with pytest.raises(ValueError, match="not a date with day, month and year"):
            parse_locomo_datetime(bad)


def test_locomo_datetime_reads_zoneless_times_in_a_zone():
    """Notes and other exports read a time without a zone in the user's zone (``tz``); LoCoMo keeps UTC."""
    from zoneinfo import ZoneInfo

    berlin = ZoneInfo("Europe/Berlin")
    assert parse_locomo_datetime("1:56 pm on 8 May, 2023", berlin) == datetime(2023, 5, 8, 11, 56, tzinfo=UTC)
    assert parse_locomo_datetime("29.12.2023, 00:51:12", berlin) == datetime(2023, 12, 28, 23, 51, 12, tzinfo=UTC)
    assert parse_locomo_datetime("2023-05-08T13:56:00Z", berlin) == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def test_a_locomo_date_that_cannot_be_read_is_named_with_its_place():
    """A file whose every numeric date could be day- or month-first is refused naming the session, the date, both
    readings and what would settle it."""
    sample = locomo_sample()
    sample["conversation"]["session_10_date_time"] = "03.04.2023, 10:00"
    with pytest.raises(
        MediaError,
        match=r"malformed LoCoMo file: sample conv-test, session_10_date_time: "
        r"ambiguous date '03.04.2023, 10:00': day-first it is 03 April 2023, "
        r"month-first 04 March 2023, .*a day above 12",
    ):
        parse_conversation_file(json.dumps([sample]).encode())
    sample["conversation"]["session_10_date_time"] = "2.6.2023, 09:05"  # day-first only: June 2 (Feb 6 is
    with pytest.raises(MediaError, match="ambiguous"):  # as valid month-first: ambiguous too)
        parse_conversation_file(json.dumps([sample]).encode())
    sample["conversation"]["session_10_date_time"] = "29.12.2023, 09:05"
    assert parse_conversation_file(json.dumps([sample]).encode())[2].timestamp == datetime(
        2023, 12, 29, 9, 5, tzinfo=UTC
    )


def _dated_sample(sample_id: str, *times: str) -> dict:
    """A LoCoMo sample with one turn per session, its session times ``times`` (session_1, session_2, ...)."""
    conv: dict = {"speaker_a": "Ann", "speaker_b": "Bob"}
    for n, when in enumerate(times, start=1):
        conv[f"session_{n}_date_time"] = when
        conv[f"session_{n}"] = [{"speaker": "Ann", "dia_id": f"D{n}:1", "text": f"Session {n} of {sample_id}."}]
    return {"sample_id": sample_id, "conversation": conv}


def test_a_locomo_file_with_day_first_dates_reads_its_ambiguous_ones_day_first():
    """The file's dates settle the order once for the whole file (issue 41): 14.03 can only be day-first, so
    03.04 is 3 April, even in another sample of the same file."""
    doc = [
        _dated_sample("a", "14.03.2024, 09:12:45", "21.03.2024, 12:00:00"),
        _dated_sample("b", "03.04.2024, 18:20:05", "02.05.2024, 08:00:00"),
    ]
    msgs = parse_conversation_file(json.dumps(doc).encode())
    assert [m.timestamp for m in msgs] == [
        datetime(2024, 3, 14, 9, 12, 45, tzinfo=UTC),
        datetime(2024, 3, 21, 12, tzinfo=UTC),
        datetime(2024, 4, 3, 18, 20, 5, tzinfo=UTC),
        datetime(2024, 5, 2, 8, tzinfo=UTC),
    ]
    # month-first the same way, and LoCoMo's own times beside them tell nothing and need nothing
    doc = [_dated_sample("c", "03/14/2024, 9:12 AM", "04/03/2024, 6:20 PM", "1:56 pm on 8 May, 2023")]
    assert [m.timestamp for m in parse_conversation_file(json.dumps(doc).encode())] == [
        datetime(2024, 3, 14, 9, 12, tzinfo=UTC),
        datetime(2024, 4, 3, 18, 20, tzinfo=UTC),
        datetime(2023, 5, 8, 13, 56, tzinfo=UTC),
    ]


def test_a_locomo_file_whose_dates_contradict_each_other_is_refused_naming_both():
    doc = [_dated_sample("a", "13.03.2024, 09:00", "03.04.2024, 10:00"), _dated_sample("b", "03.14.2024, 11:00")]
    with pytest.raises(
        InvalidConversation,
        match=r"malformed LoCoMo file: sample a, session_1_date_time "
        r"\('13.03.2024, 09:00'\) is day-first but sample b, "
        r"session_1_date_time \('03.14.2024, 11:00'\) month-first",
    ):
        parse_conversation_file(json.dumps(doc).encode())


def test_locomo_sample_to_messages():
    msgs = locomo_sample_messages(locomo_sample())
    assert [m.message_id for m in msgs] == ["D2:1", "D2:2", "D10:1"]  # session 2 before session 10
    assert [m.session_id for m in msgs] == ["conv-test/session_2", "conv-test/session_2", "conv-test/session_10"]
    assert [m.speaker for m in msgs] == ["Ann", "Bob", "Bob"]
    start = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert [m.timestamp for m in msgs[:2]] == [start, start + timedelta(seconds=30)]
    assert msgs[2].timestamp == datetime(2023, 6, 2, 9, 5, tzinfo=UTC)
    [att] = msgs[0].attachments
    assert (att.kind, att.caption) == ("image", "a photo of a sunrise over a lake")
    assert msgs[1].attachments == []
    assert msgs[0].display_text() == "Ann: Look at my painting! [shared image: a photo of a sunrise over a lake]"


def test_locomo_annotations_never_leak():
    for data in (json.dumps(locomo_sample()), json.dumps([locomo_sample()])):  # one sample or a list
        msgs = parse_conversation_file(data.encode())
        assert len(msgs) == 3
        dumped = to_jsonl(msgs).decode()
        assert ANNOTATION not in dumped
        assert "img_url" not in dumped and "example.invalid" not in dumped


@pytest.mark.parametrize(
    "broken",
    [
        lambda s: s["conversation"].pop("session_2_date_time"),
        lambda s: s["conversation"].__setitem__("session_2_date_time", "sometime in May"),
        lambda s: s["conversation"]["session_2"][1].pop("dia_id"),
    ],
)
def test_malformed_locomo_raises_media_error(broken):
    sample = locomo_sample()
    broken(sample)
    with pytest.raises(MediaError, match="malformed LoCoMo file"):
        parse_conversation_file(json.dumps([sample]).encode())


def test_longmemeval_file():
    item = {
        "question_id": "q1",
        "question_type": "single-session-user",
        "question": f"{ANNOTATION} question?",
        "question_date": "2023/06/23 (Fri) 07:31",
        "answer": f"{ANNOTATION} answer",
        "answer_session_ids": ["answer_1"],
        "haystack_dates": ["2023/04/30 (Sun) 13:59", "2023/05/02 (Tue) 08:00"],
        "haystack_session_ids": ["sharegpt_1", "answer_1"],
        "haystack_sessions": [
            [
                {"role": "user", "content": "How do I keep sneakers fresh?"},
                {"role": "assistant", "content": "Use a shoe rack."},
            ],
            [{"role": "user", "content": "I moved my sneakers to the closet.", "has_answer": True}],
        ],
    }
    msgs = parse_conversation_file(json.dumps(item).encode())
    assert [(m.message_id, m.session_id, m.speaker) for m in msgs] == [
        ("sharegpt_1:0", "sharegpt_1", "user"),
        ("sharegpt_1:1", "sharegpt_1", "assistant"),
        ("answer_1:0", "answer_1", "user"),
    ]
    assert msgs[0].timestamp == datetime(2023, 4, 30, 13, 59, tzinfo=UTC)
    assert msgs[1].timestamp == datetime(2023, 4, 30, 13, 59, 30, tzinfo=UTC)
    assert msgs[2].timestamp == parse_longmemeval_date("2023/05/02 (Tue) 08:00")
    dumped = to_jsonl(msgs).decode()
    assert ANNOTATION not in dumped and "has_answer" not in dumped

    item["haystack_dates"].pop()  # lengths disagree
    with pytest.raises(MediaError, match="malformed LongMemEval file"):
        parse_conversation_file(json.dumps(item).encode())


@pytest.mark.parametrize(
    "encode",
    [
        lambda recs: "\n".join(json.dumps(r) for r in recs) + "\n",  # JSONL
        lambda recs: "\n\n".join(json.dumps(r) for r in recs),  # JSONL with blank lines, no final newline
        lambda recs: json.dumps(recs),  # JSON array
        lambda recs: json.dumps({"messages": recs}, indent=2),  # {"messages": [...]}
    ],
    ids=["jsonl", "jsonl-blank-lines", "array", "messages-object"],
)
def test_import_record_formats(encode):
    recs = [record(1), record(2, speaker="bob", attachments=[{"kind": "image", "caption": "a red bicycle"}])]
    msgs = parse_conversation_file(encode(recs).encode())
    assert [m.message_id for m in msgs] == ["m1", "m2"]
    assert msgs[1].attachments[0].caption == "a red bicycle"
    assert msgs[0].timestamp == datetime(2024, 5, 1, 10, 1, tzinfo=UTC)


def test_single_record_jsonl():
    msgs = parse_conversation_file((json.dumps(record(1)) + "\n").encode())
    assert [m.message_id for m in msgs] == ["m1"]


def test_jsonl_keeps_unicode_line_separators_inside_records():
    """JSON strings may hold U+2028/U+2029, NEL and form feeds unescaped; only "\\n" ends a JSONL record
    (a LongMemEval haystack has U+2028 inside a turn)."""
    text = "rewrite this.\u2028\u2028 Instructions:\u2029 a\x85b\x0bc\x0cd\x1ce"
    data = (
        json.dumps(record(1, text=text), ensure_ascii=False) + "\r\n" + json.dumps(record(2), ensure_ascii=False) + "\n"
    ).encode()
    msgs = parse_conversation_file(data, "chat.jsonl")
    assert [m.message_id for m in msgs] == ["m1", "m2"]
    assert msgs[0].text == text
    assert parse_conversation_file(to_jsonl(msgs)) == msgs


def test_timestamps_naive_are_utc_and_offsets_are_kept():
    msgs = parse_conversation_file(
        json.dumps(
            [record(1, timestamp="2024-05-01T10:00:00"), record(2, timestamp="2024-05-01T12:00:00+02:00")]
        ).encode()
    )
    assert msgs[0].timestamp == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert msgs[1].timestamp == datetime(2024, 5, 1, 10, tzinfo=UTC)


def test_jsonl_round_trip():
    msgs = locomo_sample_messages(locomo_sample())
    assert parse_conversation_file(to_jsonl(msgs)) == msgs


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty conversation file"),
        (b"  \n\n ", "empty conversation file"),
        (b"[]", "no messages"),
        (json.dumps({"messages": []}).encode(), "no messages"),
        (json.dumps({"title": "not a conversation"}).encode(), "not a conversation record"),
        (json.dumps([1, 2, 3]).encode(), "not a conversation record"),
        ((json.dumps(record(1)) + "\n{not json\n").encode(), "invalid conversation record at line 2: not JSON"),
        (b'{"title": 1}\n{not json\n', "not JSON or JSONL: line 2"),
        (b"\xff\xfe binary \x00\x01", "not JSON or JSONL"),
        (json.dumps([record(1), record(2, speaker="")]).encode(), "record at 1.speaker"),
        (
            (json.dumps(record(1)) + "\n" + json.dumps(record(2, timestamp="yesterday"))).encode(),
            "record at 1.timestamp",
        ),
        (
            json.dumps({"messages": [record(1), {k: v for k, v in record(2).items() if k != "text"}]}).encode(),
            "record at 1.text: Field required",
        ),
        (json.dumps([record(1, mood="happy")]).encode(), "record at 0.mood"),
        # one line of JSONL is a JSON document: a record without its id is named as two lines of them are
        (
            (json.dumps({k: v for k, v in record(1).items() if k != "message_id"}) + "\n").encode(),
            "record at 0.message_id: Field required",
        ),
        (
            json.dumps([record(1, attachments=[{"caption": "x", "exif": "1"}])]).encode(),
            "record at 0.attachments.0.exif",
        ),
    ],
)
def test_invalid_files_raise_media_error_with_location(data, reason):
    with pytest.raises(MediaError) as info:
        parse_conversation_file(data, "chat.jsonl")
    assert reason in str(info.value)
    assert "\n" not in str(info.value)  # one line


def test_real_locomo_file(eval_data):
    raw = (eval_data / "conversations" / "locomo10.json").read_bytes()
    samples = json.loads(raw)
    msgs = parse_conversation_file(raw, "locomo10.json")
    turns = [
        t
        for s in samples
        for k, v in s["conversation"].items()
        if k.startswith("session_") and not k.endswith("date_time")
        for t in v
    ]
    assert len(msgs) == len(turns) == 5882
    assert all(isinstance(m, ConversationMessage) for m in msgs)
    assert sum(1 for m in msgs if m.attachments) == sum(1 for t in turns if t.get("blip_caption"))
    first = msgs[0]
    assert (first.message_id, first.session_id, first.speaker) == ("D1:1", "conv-26/session_1", "Caroline")
    assert first.timestamp == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    ids = [(m.session_id.split("/")[0], m.message_id) for m in msgs]
    assert len(set(ids)) == len(ids)  # dia_id is unique within a sample
    summary = samples[0]["session_summary"]["session_1_summary"]
    texts = {m.text for m in msgs}
    assert summary not in texts
    assert not any(summary[:60] in m.display_text() for m in msgs)


def test_bad_conversations_imported_or_rejected_with_a_reason():
    # empty messages are left out, exact repeats kept once; the rest is imported
    msgs = parse_conversation_file(json.dumps([record(1), record(2, text="   "), record(1), record(3)]).encode())
    assert [m.message_id for m in msgs] == ["m1", "m3"]
    # an image with a caption but no text is something to remember
    assert parse_conversation_file(json.dumps([record(1, text="", attachments=[{"caption": "a cat"}])]).encode())
    with pytest.raises(MediaError, match="no messages with text"):
        parse_conversation_file(json.dumps([record(1, text=""), record(2, text="\n")]).encode())
    # one id for two different messages of a session (LongMemEval repeats session ids): both kept, one renamed
    msgs = parse_conversation_file(
        json.dumps([record(1), record(2), record(1, text="changed"), record(1, text="again")]).encode()
    )
    assert [(m.message_id, m.text) for m in msgs] == [
        ("m1", "message number 1"),
        ("m2", "message number 2"),
        ("m1#2", "changed"),
        ("m1#3", "again"),
    ]
    assert len(parse_conversation_file(json.dumps([record(1), record(1, session_id="s2")]).encode())) == 2
    # a missing timestamp, an over-long text, bytes that are not UTF-8: the file is rejected, saying where
    with pytest.raises(MediaError, match="record at 1.timestamp: Field required"):
        parse_conversation_file(
            json.dumps([record(1), {k: v for k, v in record(2).items() if k != "timestamp"}]).encode()
        )
    assert len(parse_conversation_file(json.dumps([record(1, text="x" * 100_000)]).encode())[0].text) == 100_000
    with pytest.raises(MediaError, match="record at 0.text: String should have at most 100000 characters"):
        parse_conversation_file(json.dumps([record(1, text="x" * 100_001)]).encode())
    latin1 = json.dumps([record(1, text="café")], ensure_ascii=False).encode("latin-1")
    with pytest.raises(
        InvalidConversation, match="conversation file is not UTF-8: 'utf-8' codec can't decode byte 0xe9 in position"
    ):
        parse_conversation_file(latin1)
