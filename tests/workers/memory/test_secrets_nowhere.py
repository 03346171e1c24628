"""Secrets nowhere but the vault: a fixed set of secrets of every class is ingested on the embedded default as
chat text, as a screenshot (rendered with DejaVu Sans, read by rapidocr), as a window title and app name, and
as event metadata; then every byte the system persisted (the data dir: ledger, vector store, vault key, the
object store except the published originals, with the OCR cache) and every log line (``engram --log-format
json -v``) is searched for each secret, and none is found; ``vault.reveal`` gives each one back whole."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engram.api.local import classify, publish_file, run_event
from engram.schemas.events import EventStatus
from engram.workers.memory import vault
from tests.cluster import producer
from tests.workers.media.test_bad_input import render_png

REPO = Path(__file__).resolve().parents[3]
TENANT, USER = "acme", "alice"
# a private key's shape (not a usable key): BEGIN line, base64 body, END line
PRIVATE_KEY = "\n".join([
    "-----BEGIN OPENSSH PRIVATE KEY-----",
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
    "QyNTUxOQAAACAg6YhrPzecK5YBwPUKjPYpnTGl4rqOpktfpywYJWq6DQAAAJBJj0j6SY9I",
    "+gAAAAtzc2gtZWQyNTUxOQAAACAg6YhrPzecK5YBwPUKjPYpnTGl4rqOpktfpywYJWq6DQ",
    "-----END OPENSSH PRIVATE KEY-----"])
JWT = ("eyJhbGciOiAiSFMyNTYiLCAidHlwIjogIkpXVCJ9.eyJzdWIiOiAiMTIzNDU2Nzg5MCIsICJuYW1lIjogIkFkYSIsICJpYXQiOiAxNzE2"
       "MjAwMDAwfQ.q86-mEKsrLv2qJReR0yeRE-L-L8gfPUQ2MR_k-WExMM")
# (entry type, secret, how it is said in a chat message)
CHAT = [
    ("private_key", PRIVATE_KEY, f"here is the deploy key:\n{PRIVATE_KEY}\nkeep it safe"),
    ("jwt", JWT, f"curl -H 'Authorization: Bearer {JWT}' https://api.example.com/v1/me"),
    ("webhook", "https://hooks.slack.com/services/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",
     "post alerts to https://hooks.slack.com/services/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 please"),
    ("password", "s3cretDbPw9", "the db is at https://alice:s3cretDbPw9@db.example.com/prod"),
    ("password", "BlueFalcon77", "the wifi password is BlueFalcon77"),
    ("password", "Xk9pQ2zz!", "pw: Xk9pQ2zz!"),
    ("password", "Geheim123Wort", "Passwort: Geheim123Wort"),
    ("password", "hunter2RelWork!", "password: hunter2RelWork!"),
    ("password", "correct horse battery staple", "my password is correct horse battery staple. Don't tell."),
    ("api_key", "sk-proj-Q8vX2mN4pL7kR9tY3wZ6aB1c", "my OpenAI key is sk-proj-Q8vX2mN4pL7kR9tY3wZ6aB1c"),
    ("api_key", "ghp_" + "a1B2" * 9, "token ghp_" + "a1B2" * 9),
    ("aws_access_key", "AKIAIOSFODNN7EXAMPLE", "AWS: AKIAIOSFODNN7EXAMPLE"),
    ("credit_card", "4111 1111 1111 1111", "Pay with 4111 1111 1111 1111 tomorrow."),
    ("iban", "DE89 3704 0044 0532 0130 00", "transfer to DE89 3704 0044 0532 0130 00 today"),
    ("email", "alice.w@example.org", "Mail alice.w@example.org about it."),
    ("phone_number", "(415) 555-2671", "or call (415) 555-2671 tonight"),
]
SCREEN = [("password", "Scr33nPass!", "password: Scr33nPass!"),
          ("aws_access_key", "AKIAJ7Q2WXYZ3ABCD4EF", "key AKIAJ7Q2WXYZ3ABCD4EF"),
          ("email", "bob.k@example.net", "from bob.k@example.net")]
WINDOW = ("password", "W1ndowTitle#Pw", "Terminal — mysql -u root password: W1ndowTitle#Pw")
APP = ("email", "carol.m@example.com", "Mail (carol.m@example.com)")
METADATA = [("api_key", "sk-live-M3taDataK3yZ9x8w7v6u5t4", "deploy token sk-live-M3taDataK3yZ9x8w7v6u5t4"),
            ("password", "MetaPw!2024x", "password: MetaPw!2024x")]
EVERY = [*CHAT, *SCREEN, WINDOW, APP, *METADATA]
FINAL = (EventStatus.done, EventStatus.skipped, EventStatus.failed)


def needles(secret: str) -> list[bytes]:
    """What must be found nowhere: the secret, and each line of a multi-line one (a private key's body)."""
    parts = [secret, *(ln for ln in secret.splitlines() if len(ln) >= 16)]
    return [p.encode() for p in dict.fromkeys(parts)]


def make_inputs(folder: Path) -> tuple[Path, Path, Path]:
    """The chat (every class of secret, one a message), the screenshot and the metadata event's own file."""
    chat = folder / "chat.jsonl"
    chat.write_text("".join(json.dumps({"message_id": f"m{i}", "session_id": "s1", "speaker": "alice", "text": said,
                                        "timestamp": f"2024-05-01T10:{i:02d}:00+00:00"}) + "\n"
                            for i, (_, _, said) in enumerate(CHAT)))
    shot = render_png(folder / "shot.png", [said for _, _, said in SCREEN], size=(900, 180))
    note = folder / "note.jsonl"
    note.write_text(json.dumps({"message_id": "x1", "session_id": "s0", "speaker": "alice", "text": "see metadata",
                                "timestamp": "2024-05-01T09:00:00+00:00"}) + "\n")
    return chat, shot, note


def publish_metadata(rt, note: Path):
    """The metadata event (no CLI flag for it), published as a producer does."""
    return publish_file(rt, classify(note), TENANT, USER, "laptop", captured_at=datetime(2024, 5, 1, tzinfo=UTC),
                        metadata={f"k{i}": said for i, (_, _, said) in enumerate(METADATA)})


def find_leaks(blobs: dict[str, bytes]) -> list[tuple[str, str]]:
    """(entry type, where) of every secret found in ``blobs`` (name -> bytes)."""
    return [(entry_type, where) for entry_type, secret, _ in EVERY for needle in needles(secret)
            for where, blob in blobs.items() if needle in blob]


def persisted(root: Path, skip: str = "media") -> dict[str, bytes]:
    """Every file under ``root`` but the published originals (``objects/media/...``: the user's files as
    given), by path."""
    return {str(p): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and skip not in p.relative_to(root).parts}


def assert_revealed_whole(rt) -> None:
    revealed = {vault.reveal(rt, TENANT, e.id) for e in vault.list_entries(rt, TENANT)}
    missing = [(entry_type, secret) for entry_type, secret, _ in EVERY if secret not in revealed]
    assert not missing, missing


def test_secrets_are_nowhere_but_the_vault(engram_env, tmp_path, capsys):
    from engram.workers.runtime import reset_runtimes, runtime

    rt = engram_env
    data = rt.settings.data_dir
    chat, shot, note = make_inputs(tmp_path)
    assert run_event(rt, publish_metadata(rt, note)).status is EventStatus.done
    reset_runtimes()  # the CLI below takes the embedded store
    # chat, screenshot, window title and app name: through the CLI with JSON logs
    env = {**os.environ, "ENGRAM_DATA_DIR": str(data)}
    logs = tmp_path / "cli.log"
    with open(logs, "wb") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "engram.api.cli", "--log-format", "json", "-v", "ingest", str(chat), str(shot),
             "--tenant", TENANT, "--user", USER, "--device", "laptop", "--app", APP[2], "--window", WINDOW[2]],
            env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, timeout=300)
    assert proc.returncode == 0, logs.read_text()[-3000:]
    rt = runtime()
    blobs = persisted(data)
    assert any("ocr" in Path(p).parts for p in blobs) and any("vault" in Path(p).parts for p in blobs)
    blobs["cli log"] = logs.read_bytes()
    captured = capsys.readouterr()
    blobs["in-process log"] = (captured.out + captured.err).encode()
    assert b'"event"' in blobs["cli log"]  # JSON log lines were written
    # the search sees stored text: the chat's words around a placeholder are in the vector store's files
    assert any(b"post alerts to [vault:" in blob for where, blob in blobs.items() if "objects" not in Path(where).parts)
    assert not find_leaks(blobs), find_leaks(blobs)
    assert_revealed_whole(rt)  # the vault gives each one back whole


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_secrets_are_nowhere_in_the_distributed_mode(restartable_redis, tmp_path, monkeypatch, capsys):
    """The same on the distributed mode: a real redis-server (broker, result backend, ledger; its AOF and an
    RDB snapshot searched too) and one ``engram --log-format json -v worker --role all`` process."""
    import redis
    from cryptography.fernet import Fernet

    from engram.schemas.settings import get_settings
    from engram.workers.runtime import reset_runtimes, runtime

    data = tmp_path / "data"
    env = {"ENGRAM_BROKER_URL": restartable_redis.url, "ENGRAM_DATA_DIR": str(data),
           "ENGRAM_VAULT_KEY": Fernet.generate_key().decode(), "ENGRAM_TENANT": TENANT}
    for var in ("ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT", "ENGRAM_RESULT_BACKEND", "ENGRAM_REDIS_URL"):
        monkeypatch.delenv(var, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    reset_runtimes()
    app = producer(get_settings())  # this process's own app stays eager for the rest of the suite
    logs = tmp_path / "worker.log"
    proc_env = {**{k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}, **env}
    with open(logs, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "engram.api.cli", "--log-format", "json", "-v", "worker", "--role", "all",
             "--pool", "solo", "--hostname", "secrets@test", "--loglevel", "INFO"],
            env=proc_env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not any("secrets@test" in r for r in (app.control.ping(timeout=1.0) or [])):
            assert worker.poll() is None and time.monotonic() < deadline, logs.read_text()[-3000:]
        rt = runtime()
        chat, shot, note = make_inputs(tmp_path)
        events = [publish_metadata(rt, note),
                  publish_file(rt, classify(chat), TENANT, USER, "laptop"),
                  publish_file(rt, classify(shot), TENANT, USER, "laptop", app_name=APP[2], window=WINDOW[2])]
        for event in events:
            app.send_task("workers.ingest.ingest", args=[event.model_dump(mode="json")])
        deadline = time.monotonic() + 240
        while any((r := rt.ledger.get(e.event_id)) is None or r.status not in FINAL for e in events):
            assert worker.poll() is None and time.monotonic() < deadline, logs.read_text()[-3000:]
            time.sleep(0.5)
        assert all(rt.ledger.get(e.event_id).status is EventStatus.done for e in events)
        app.send_task("workers.consolidate.consolidate_user", args=[TENANT, USER]).get(timeout=120)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
        redis.Redis.from_url(restartable_redis.url).save()  # an RDB snapshot beside the AOF
        monkeypatch.undo()
        reset_runtimes()
    blobs = {**persisted(data), **persisted(restartable_redis.data)}
    assert any("appendonly" in p for p in blobs) and any(p.endswith(".rdb") for p in blobs)
    blobs["worker log"] = logs.read_bytes()
    captured = capsys.readouterr()
    blobs["test process log"] = (captured.out + captured.err).encode()
    assert b'succeeded in' in blobs["worker log"] and b'"event"' in blobs["worker log"]
    assert b"<not logged>" in blobs["worker log"]  # Celery's task lines without their values
    assert not find_leaks(blobs), find_leaks(blobs)
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(data))
    monkeypatch.setenv("ENGRAM_VAULT_KEY", env["ENGRAM_VAULT_KEY"])
    reset_runtimes()
    assert_revealed_whole(runtime())
    reset_runtimes()
