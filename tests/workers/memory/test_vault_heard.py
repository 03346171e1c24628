"""The vault's redaction of what was heard and what OCR split (issue 43): an utterance's words are redacted as its
transcript is (one entry for both), a token wrapped over two OCR lines is one entry whose placeholder stands in
each line's part, a token cut short is kept as partial; ordinary notes go through the pipeline as written."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from engram.schemas.observations import Observation, OcrLine, WordTiming
from engram.workers.memory import vault
from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter
from tests.workers.memory.test_typed import TENANT, USER, chat, ingest
from tests.workers.text.test_secrets import JWT


def observation(**fields) -> Observation:
    return Observation(
        id=uuid.uuid4(),
        tenant_id=TENANT,
        user_id=USER,
        device_id="d",
        event_id=uuid.uuid4(),
        segment_index=0,
        object_key="media/x",
        captured_at=datetime(2024, 5, 1, tzinfo=UTC),
        **fields,
    )


def test_an_utterances_words_are_redacted_as_its_transcript(engram_env):
    """faster-whisper heard espeak-ng's "4512" as "4,500 and 12" in the words "4" ",500" "and" "12.": the words
    are read in the transcript, so the whole code is one word holding the transcript's placeholder."""
    said = "The door code is 4,500 and 12. My bank password is Hunter 2."
    heard = ["The", "door", "code", "is", "4", ",500", "and", "12.", "My", "bank", "password", "is", "Hunter", "2."]
    words = [WordTiming(word=w, start_s=i / 2, end_s=i / 2 + 0.4) for i, w in enumerate(heard)]
    red = vault.Redactor(engram_env)
    out = red.observation(observation(kind="audio", text=said, transcript=said, words=words))
    assert [w.word for w in out.words[:4]] == ["The", "door", "code", "is"]
    assert out.words[4].word.endswith(" pin]") and out.words[4].end_s == words[7].end_s
    assert out.words[-1].word.endswith(" password]") and out.words[-2].word == "is"
    assert vault.referenced_entries([w.word for w in out.words]) == vault.referenced_entries([out.transcript])
    assert out.text == out.transcript and sorted(e.entry_type for e in red.entries.values()) == ["password", "pin"]
    dumped = out.model_dump_json()
    assert not any(part in dumped for part in (",500", "4,500", "Hunter"))


def test_a_token_wrapped_over_two_ocr_lines_is_one_entry(engram_env):
    texts = ["Terminal", f"Authorization: Bearer {JWT[:62]}", f"{JWT[62:]}  (expires in 1 h)", "ok"]
    lines = [OcrLine(text=t, confidence=0.9, box=(0, 30 * i, 900, 30 * i + 25)) for i, t in enumerate(texts)]
    red = vault.Redactor(engram_env)
    out = red.observation(observation(kind="screenshot", text="\n".join(texts), ocr_lines=lines))
    got = [ln.text for ln in out.ocr_lines]
    [entry] = red.entries.values()
    holder = f"[vault:{entry.id} {entry.entry_type}]"
    assert got == ["Terminal", f"Authorization: Bearer {holder}", f"{holder}  (expires in 1 h)", "ok"]
    assert out.text == f"Terminal\nAuthorization: Bearer {holder}  (expires in 1 h)\nok"
    assert JWT[:20] not in out.model_dump_json() and JWT[-20:] not in out.model_dump_json()
    assert entry.entry_type == "jwt" and red.flush() == 1
    assert vault.reveal(engram_env, TENANT, entry.id) == JWT


def test_a_wrapped_token_on_a_clips_keyframe_leaves_its_text_too(engram_env):
    """A clip's text shows its keyframes' lines joined by " | " (``perceive._clip``): the wrapped token's parts
    and the " | " between them are replaced there by the placeholder its lines got."""
    texts = [f"Authorization: Bearer {JWT[:62]}", JWT[62:], "ok"]
    lines = [OcrLine(text=t, confidence=0.9, box=(0, 30 * i, 900, 30 * i + 25)) for i, t in enumerate(texts)]
    red = vault.Redactor(engram_env)
    out = red.observation(
        observation(
            kind="clip",
            text="so here it is\n[on screen] " + " | ".join(texts),
            transcript="so here it is",
            ocr_lines=lines,
        )
    )
    [entry] = red.entries.values()
    holder = f"[vault:{entry.id} jwt]"
    assert out.text == f"so here it is\n[on screen] Authorization: Bearer {holder} | ok"
    assert [ln.text for ln in out.ocr_lines] == [f"Authorization: Bearer {holder}", holder, "ok"]


def test_a_token_cut_at_the_edge_is_a_partial_entry(engram_env):
    cut = "export GITHUB_TOKEN=ghp_Q7xN2mK9pR4tL8vB3w"
    red = vault.Redactor(engram_env)
    out = red.observation(
        observation(kind="screenshot", text=cut, ocr_lines=[OcrLine(text=cut, confidence=0.9, box=(600, 0, 1024, 25))])
    )
    [entry] = red.entries.values()
    assert out.ocr_lines[0].text == f"export GITHUB_TOKEN=[vault:{entry.id} api_key]"
    assert entry.caption == "API key or token (partial: cut off or misread) seen in a screenshot"
    red.flush()
    assert vault.reveal(engram_env, TENANT, entry.id) == "ghp_Q7xN2mK9pR4tL8vB3w"


ORDINARY = [
    "the number of people is 12",
    "the meeting code review is at 3",
    "We paid $4,512 on 2024-05-08.",
    "Order #415-555-2671 shipped, 3 boxes of 24",
    "PIN codes are 4 digits, passwords 12 characters",
    "the error code is 404",
]


def test_ordinary_notes_stay_as_written(engram_env, tmp_path):
    """Counts, dates, prices, an order number shaped like a phone number and sentences about codes: stored as
    written, no vault entry."""
    rt = engram_env
    ingest(chat(tmp_path / "notes.jsonl", [("alice", t) for t in ORDINARY]), consolidate=False)
    texts = {r.payload["message_id"]: r.payload["text"] for r in rt.vectors.scroll(OBSERVATIONS, tenant_filter(TENANT))}
    assert [texts[f"m{i}"] for i in range(1, len(ORDINARY) + 1)] == [f"alice: {t}" for t in ORDINARY]
    assert vault.list_entries(rt, TENANT) == []
