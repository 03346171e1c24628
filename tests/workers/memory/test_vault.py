"""The knowledge vault: secrets are detected with high precision, redacted in perceive before anything is
stored, kept Fernet-encrypted, indexed by caption only, and come back only through ``reveal``; no Qdrant
payload, search result or log line holds one."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime

import pytest
from cryptography.fernet import Fernet

from engram.schemas.memories import MemoryType
from engram.schemas.observations import Observation, OcrLine, WordTiming
from engram.schemas.search import SearchRequest
from engram.schemas.settings import Settings
from engram.workers.memory import vault
from engram.workers.stores.vectors import COLLECTIONS, OBSERVATIONS, tenant_filter
from tests.workers.memory.test_typed import TENANT, USER, chat, ingest

SECRETS = {
    "api_key": "sk-proj-Q8vX2mN4pL7kR9tY3wZ6aB1c",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "password": "Tr0ub4dor&3",
    "credit_card": "4111 1111 1111 1111",
    "email": "alice.w@example.org",
    "phone_number": "(415) 555-2671",
    "iban": "DE89 3704 0044 0532 0130 00",
}
TURNS = [
    ("alice", f"my OpenAI key is {SECRETS['api_key']} keep it safe"),
    ("alice", f"AWS: {SECRETS['aws_access_key']} and the password: {SECRETS['password']}"),
    ("Bob", f"Pay with {SECRETS['credit_card']} or transfer to {SECRETS['iban']}."),
    ("alice", f"Mail {SECRETS['email']} or call {SECRETS['phone_number']} tomorrow."),
    ("Bob", "The password is short and the meeting is on 2024-05-08 at 13:56, room 1234567."),
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("token ghp_" + "a1" * 18, [("api_key", "ghp_" + "a1" * 18)]),
        ("export GITHUB=github_pat_" + "A" * 40, [("api_key", "github_pat_" + "A" * 40)]),
        ("api_key = abcd1234efgh5678ijkl", [("api_key", "abcd1234efgh5678ijkl")]),
        ("my password is hunter2!", [("password", "hunter2")]),
        ("card 4242424242424242 exp 12/27", [("credit_card", "4242424242424242")]),
        ("ship to 221 Baker Street, London", [("address", "221 Baker Street, London")]),
        ("+44 20 7946 0958", [("phone_number", "+44 20 7946 0958")]),
        # detect-secrets' plugins, private key blocks, URL credentials, passwords after labels and passphrases
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nq2Xb==\n-----END RSA PRIVATE KEY-----\nok",
            [
                (
                    "private_key",
                    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nq2Xb==\n-----END RSA PRIVATE KEY-----",
                )
            ],
        ),
        (
            "cut off: -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXkt",
            [("private_key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXkt")],
        ),
        (
            "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZGEifQ.c2lnbmF0dXJlLXBhcnQ.",
            [("jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZGEifQ.c2lnbmF0dXJlLXBhcnQ")],
        ),
        (
            "hook https://hooks.slack.com/services/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 ok",
            [("webhook", "https://hooks.slack.com/services/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")],
        ),
        ("db https://alice:s3cretPw9@db.example.com/x", [("password", "s3cretPw9")]),
        ("the wifi password is BlueFalcon77", [("password", "BlueFalcon77")]),
        ("the wifi password is sunshine.", [("password", "sunshine")]),
        ("pw: Xk9pQ2!", [("password", "Xk9pQ2!")]),
        ("Passwort: geheim123", [("password", "geheim123")]),
        ("password: hunter2RelWork!", [("password", "hunter2RelWork!")]),
        ("password: MetaPw!2024x", [("password", "MetaPw!2024x")]),
        ("my password is correct horse battery staple. ok", [("password", "correct horse battery staple")]),
        ("Das Passwort ist geheim.", [("password", "geheim")]),
        # precision: none of these is a secret
        ("the password is changed daily.", []),
        ("Password: required", []),
        ("password is too short", []),
        ("Password is case sensitive.", []),
        ("card 4111 1111 1111 1112 fails Luhn", []),
        ("IBAN DE89 3704 0044 0532 0130 01 fails mod 97", []),
        ("The password is required. Password is incorrect.", []),
        ("password: ******** (hidden)", []),
        ('password = "your_password"', []),
        ("values 401425728 0 and 4.195655033 in a table", []),
        ("on 2023-05-08 at 13:56 I paid 1234567890 dollars", []),
        ("Node.js and sk-short", []),
    ],
)
def test_detect(text, expected):
    assert [(f.entry_type, f.secret) for f in vault.detect(text)] == expected


def test_secrets_never_stored_searched_or_logged(engram_env, tmp_path, caplog, capsys, log_events):
    caplog.set_level(logging.DEBUG)
    rt = engram_env
    ingest(chat(tmp_path / "c.jsonl", TURNS))
    events = list(log_events)
    # observations carry placeholders instead of the secrets
    by_id = {r.payload["message_id"]: r.payload["text"] for r in rt.vectors.scroll(OBSERVATIONS, tenant_filter(TENANT))}
    texts = [by_id[f"m{i}"] for i in range(1, len(TURNS) + 1)]
    placeholders = vault.referenced_entries(texts)
    assert len(placeholders) == len(SECRETS)
    assert texts[0].startswith("alice: my OpenAI key is [vault:") and texts[0].endswith(" api_key] keep it safe")
    assert any("The password is short" in t for t in texts)  # a sentence about passwords is left alone
    # no payload of any collection holds a secret (the vault's holds captions and ciphertext)
    for coll in COLLECTIONS:
        for rec in rt.vectors.scroll(coll, tenant_filter(TENANT)):
            dumped = json.dumps(rec.payload)
            for secret in SECRETS.values():
                assert secret not in dumped, (coll, secret)
    entries = {
        r.payload["entry_type"]: r.payload
        for r in rt.vectors.scroll(MemoryType.knowledge_vault.value, tenant_filter(TENANT, USER))
    }
    assert set(entries) == set(SECRETS)
    card = entries["credit_card"]
    assert card["caption"] == "payment card number ending 1111 seen in chat message m3 by Bob"
    assert card["sensitivity"] == "high" and card["provenance"]["message_ids"] == ["m3"]
    # nor does a search result
    from engram.workers.memory.search import search

    for q in ("password", "OpenAI key", "card number", "AWS", "call tomorrow"):
        resp = search(rt, SearchRequest(query=q, tenant_id=TENANT, memory_types=list(MemoryType), limit=50))
        dumped = resp.model_dump_json()
        assert not any(secret in dumped for secret in SECRETS.values())
    # only reveal gives a secret back
    revealed = {entries[t]["entry_type"]: vault.reveal(rt, TENANT, entries[t]["id"]) for t in entries}
    reveal_events = [e for e in log_events if e["event"] == "vault entry revealed"]
    assert revealed == SECRETS
    with pytest.raises(vault.VaultError, match="no vault entry"):
        vault.reveal(rt, "other-tenant", entries["password"]["id"])  # tenancy
    # no log line, captured from structlog (stdout) or stdlib logging, holds a secret
    logs = capsys.readouterr().out + capsys.readouterr().err + caplog.text + repr(log_events)
    assert any(e["event"] == "secrets redacted" for e in events)
    assert len(reveal_events) == len(SECRETS)
    assert not any(secret in logs for secret in SECRETS.values())
    # the same secret seen again is the same entry, with both sources
    ingest(chat(tmp_path / "d.jsonl", [("alice", f"again: {SECRETS['api_key']}")], session="s9", prefix="n"))
    entry = vault.get_entry(rt, TENANT, entries["api_key"]["id"])
    assert entry.provenance.message_ids == ["m1", "n1"]


def test_redacts_every_text_of_an_observation(engram_env):
    obs = Observation(
        id=uuid.uuid4(),
        tenant_id=TENANT,
        user_id=USER,
        device_id="d",
        event_id=uuid.uuid4(),
        kind="audio",
        segment_index=0,
        object_key="media/x",
        captured_at=datetime(2024, 5, 1, tzinfo=UTC),
        text="my password is hunter2! ok",
        transcript="my password is hunter2! ok",
        window="Mail - bob@example.com",
        ocr_lines=[OcrLine(text="AKIAIOSFODNN7EXAMPLE", confidence=0.9, box=(0, 0, 1, 1))],
        words=[
            WordTiming(word=w, start_s=i, end_s=i + 0.5)
            for i, w in enumerate(["my", "password", "is", "hunter2!", "ok"])
        ],
        context_before=["Bob: call me on +1 415 555 2671"],
    )
    red = vault.Redactor(engram_env)
    out = red.observation(obs)
    dumped = out.model_dump_json()
    for secret in ("hunter2", "bob@example.com", "AKIAIOSFODNN7EXAMPLE", "415 555 2671"):
        assert secret not in dumped
    assert [w.word.split()[0] for w in out.words] == ["my", "password", "is", out.words[3].word.split()[0], "ok"]
    assert out.words[3].word.startswith("[vault:") and out.words[3].end_s == 3.5
    assert out.text.split("[vault:")[1].split()[0] == out.words[3].word.split("[vault:")[1].split()[0]  # one entry
    assert len(red.entries) == 4 and red.flush() == 4


def test_keys(engram_env, tmp_path):
    # the embedded default generates a key file (0600) on the first secret
    rt = engram_env
    cipher = vault.fernet(rt.settings)
    key_file = rt.settings.data_dir / "vault.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    token = cipher.encrypt(b"s3cret")
    # the distributed mode without a key fails with a clear reason
    with pytest.raises(vault.VaultKeyMissing, match="ENGRAM_VAULT_KEY is not set"):
        vault.fernet(Settings(broker_url="redis://localhost:1/0", data_dir=tmp_path))
    with pytest.raises(vault.VaultError, match="not a Fernet key"):
        vault.fernet(Settings(vault_key="not-a-key", data_dir=tmp_path))
    # rotation: a new key first, the old one still decrypts
    rotated = vault.fernet(
        Settings(vault_key=f"{Fernet.generate_key().decode()},{key_file.read_text().strip()}", data_dir=tmp_path)
    )
    assert rotated.decrypt(token) == b"s3cret"


def test_a_deleted_key_file_with_entries_at_rest_is_an_error_not_a_new_key(engram_env):
    rt = engram_env
    entry = rt.settings.data_dir / "objects" / "vault" / TENANT / f"{uuid.uuid4()}.json"
    vault.fernet(rt.settings)  # the first secret makes the key
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text("{}")  # an entry at rest, encrypted with that key
    key_file = rt.settings.data_dir / "vault.key"
    key_file.unlink()
    with pytest.raises(vault.VaultKeyMissing, match=r"vault\.key is missing but entries at rest"):
        vault.fernet(rt.settings)
    assert not key_file.exists()  # no new key made in its place


def test_distributed_mode_without_key_raises_before_storing(engram_env, tmp_path):
    """Perceive raises (so the stage marks the event failed with this reason) rather than store a secret it
    cannot encrypt; an observation without a secret needs no key."""
    import dataclasses

    rt = dataclasses.replace(engram_env, settings=Settings(broker_url="redis://localhost:1/0", data_dir=tmp_path))
    obs = Observation(
        id=uuid.uuid4(),
        tenant_id=TENANT,
        user_id=USER,
        device_id="d",
        event_id=uuid.uuid4(),
        kind="text",
        segment_index=0,
        object_key="media/x",
        captured_at=datetime(2024, 5, 1, tzinfo=UTC),
        text="nothing secret here",
    )
    assert vault.redact_observations(rt, [obs]) == [obs]
    with pytest.raises(vault.VaultKeyMissing, match="publish the event again"):
        vault.redact_observations(rt, [obs.model_copy(update={"text": f"key {SECRETS['api_key']}"})])


def test_a_private_key_over_ocr_lines_is_one_entry(engram_env):
    """A key block read from a screenshot arrives as one OCR line per text line: every line of it becomes the
    block's placeholder, the lines around it stay."""
    body = [
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB",
        "QyNTUxOQAAACAg6YhrPzecK5YBwPUKjPYpnTGl4rqOpktfpywYJWq6",
        "-----END OPENSSH PRIVATE KEY-----",
    ]
    lines = [OcrLine(text=t, confidence=0.9, box=(0, i, 1, i + 1)) for i, t in enumerate(["id_ed25519", *body, "ok"])]
    obs = Observation(
        id=uuid.uuid4(),
        tenant_id=TENANT,
        user_id=USER,
        device_id="d",
        event_id=uuid.uuid4(),
        kind="screenshot",
        segment_index=0,
        object_key="media/x",
        captured_at=datetime(2024, 5, 1, tzinfo=UTC),
        text="\n".join(ln.text for ln in lines),
        ocr_lines=lines,
    )
    red = vault.Redactor(engram_env)
    out = red.observation(obs)
    texts = [ln.text for ln in out.ocr_lines]
    assert texts[0] == "id_ed25519" and texts[-1] == "ok"
    assert len(set(texts[1:-1])) == 1 and texts[1].endswith(" private_key]")
    assert not any(part in out.model_dump_json() for part in body[1:3])
    assert [e.entry_type for e in red.entries.values()] == ["private_key"]
    assert vault.referenced_entries([out.text]) == list(red.entries)  # the text's block is the same entry


def test_an_events_window_title_app_and_metadata_are_redacted(engram_env):
    from engram.schemas.events import MediaEvent

    event = MediaEvent(
        tenant_id=TENANT,
        user_id=USER,
        device_id="d",
        kind="screenshot",
        object_key="media/x.png",
        sha256="0" * 64,
        size=1,
        mime_type="image/png",
        captured_at=datetime(2024, 5, 1, tzinfo=UTC),
        app="Mail (carol.m@example.com)",
        window="mysql -u root password: W1ndow#Pw",
        metadata={"note": f"key {SECRETS['api_key']}", "plain": "nothing here"},
    )
    out = vault.redact_event(engram_env, event)
    dumped = out.model_dump_json()
    assert not any(s in dumped for s in ("carol.m@example.com", "W1ndow#Pw", SECRETS["api_key"]))
    assert out.metadata["plain"] == "nothing here" and out.window.startswith("mysql -u root password: [vault:")
    ids = vault.referenced_entries([out.app, out.window, *out.metadata.values()])
    assert {vault.reveal(engram_env, TENANT, i) for i in ids} == {
        "carol.m@example.com",
        "W1ndow#Pw",
        SECRETS["api_key"],
    }
    entry = vault.get_entry(engram_env, TENANT, ids[1])
    assert entry.provenance.event_ids == [event.event_id] and "window title" in entry.caption


def test_celery_task_lines_log_no_arguments_or_results(caplog):
    """Celery's "received" and "succeeded: <result>" lines keep the task's name and id, not its values."""
    from celery.app.trace import LOG_SUCCESS

    import engram.workers.app  # noqa: F401  (installs the filter)

    caplog.set_level(logging.INFO)
    caplog.set_level(logging.INFO, logger="celery.app.trace")  # a CLI test in this process may have quietened it
    context = {
        "id": "t1",
        "name": "workers.query.search",
        "return_value": "hunter2RelWork!",
        "runtime": 0.1,
        "args": "('W1ndow#Pw',)",
        "kwargs": "{}",
    }
    logging.getLogger("celery.app.trace").info(LOG_SUCCESS, context, extra={"data": context})
    assert "workers.query.search[t1] succeeded" in caplog.text
    assert "hunter2RelWork!" not in caplog.text and "W1ndow#Pw" not in repr(caplog.records[-1].__dict__)


def test_a_distributed_worker_does_not_start_without_a_vault_key(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(ENGRAM_BROKER_URL="redis://127.0.0.1:1/0", ENGRAM_DATA_DIR=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "engram.workers.app", "worker", "-Q", "ingest", "--pool", "solo"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "ENGRAM_VAULT_KEY is not set" in proc.stderr
