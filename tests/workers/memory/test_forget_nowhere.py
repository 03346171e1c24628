"""Deletion leaves nothing behind (issue 44), on the embedded default: a distinctive chat sentence, a distinctive
screenshot (rendered with DejaVu Sans, read by rapidocr) and a note added with ``engram add`` are stored beside
items that stay, with their episodic and resource memories; then deleted through the CLI, by id (``engram memories
delete``), by application (``engram forget --app``) and by time range (``engram forget --since``), and a second
user is forgotten whole (``engram forget --user``). After each, every file under the data dir (the store's
write-ahead logs and segments, the ledger, the caches, the objects with the published originals) and the commands'
JSON logs are searched for the deleted text and the screenshot's bytes, as ``test_secrets_nowhere`` does for
secrets: none is found, search does not return them, and what stays is still stored and found (the episodic memory
that quoted the deleted sentence beside a kept one keeps the kept one's words)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engram.api.local import classify, publish_file, run_events
from engram.schemas.events import EventStatus
from engram.schemas.memories import MemoryType
from engram.workers.stores.vectors import OBSERVATIONS, tenant_filter
from tests.workers.media.test_bad_input import render_png

REPO = Path(__file__).resolve().parents[3]
TENANT, USER, OTHER = "acme", "alice", "bob"
GONE = "The zebra quokka treaty was signed under the violet lighthouse at dawn"
KEPT = "Lunch with Priya moved to the Thai place on Friday at noon"
KEPT_TOO = "Remember to renew the passport before the trip to Lisbon"
SHOT_LINES = ["Invoice QX7731 approved by Marguerite Okonkwo", "Wire transfer to Halvorsen Shipping"]
KEPT_SHOT = ["Quarterly roadmap review with the design team"]
NOTE = "The saffron walrus recipe needs seventeen cloves and smoked paprika"
BOBS = "Bob keeps the spare garage key under the ceramic hedgehog"


def persisted(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (the published originals included), by path. Read by a child process: closing a
    file of an SQLite database this process has open would drop this process's POSIX locks on it (all of them, by
    the process), and another process's close would then delete the write-ahead log under its connections."""
    code = (
        "import pathlib, pickle, sys; r = pathlib.Path(sys.argv[1]); "
        "sys.stdout.buffer.write(pickle.dumps({str(p): p.read_bytes() for p in r.rglob('*') if p.is_file()}))"
    )
    return pickle.loads(
        subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, check=True, timeout=120).stdout
    )


def found_in(blobs: dict[str, bytes], needles: list[bytes]) -> list[tuple[str, str]]:
    """(needle, where) for each needle found in a blob."""
    return [(n[:24].decode(errors="replace"), where) for n in needles for where, blob in blobs.items() if n in blob]


def cli(data: Path, *args: str) -> bytes:
    """``engram --log-format json -v <args>`` on ``data``: what it printed with its log lines (exit 0 asserted)."""
    proc = subprocess.run(
        [sys.executable, "-m", "engram.api.cli", "--log-format", "json", "-v", *args],
        env={**os.environ, "ENGRAM_DATA_DIR": str(data)},
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    return proc.stdout


def fresh_runtime():
    """A Runtime opened now, after another process changed the data dir: the cached ones are dropped and the
    SQLite connections they left open in this process closed (collected) first."""
    import gc

    from engram.workers.runtime import reset_runtimes, runtime

    reset_runtimes()
    gc.collect()
    return runtime()


def searched(rt, query: str, user: str | None = None) -> str:
    """Every hit of ``query`` over every memory type as JSON (what search would show; not the query itself)."""
    from engram.schemas.search import SearchRequest
    from engram.workers.memory.search import search

    resp = search(
        rt, SearchRequest(query=query, tenant_id=TENANT, user_id=user, memory_types=list(MemoryType), limit=50)
    )
    return json.dumps([h.model_dump(mode="json") for h in resp.hits])


def stored(rt) -> str:
    """Every point of every collection of the tenant, as JSON."""
    from engram.workers.stores.vectors import COLLECTIONS

    return json.dumps({c: [p.payload for p in rt.vectors.scroll(c, tenant_filter(TENANT))] for c in COLLECTIONS})


#: When the screenshots were captured (both in May 2024, so a forget by time range can take one app's).
MAY = datetime(2024, 5, 1, 11, 0, tzinfo=UTC)


def write_inputs(folder: Path) -> tuple[Path, Path, Path, Path]:
    """Write into ``folder`` alice's chat (``GONE`` between ``KEPT`` and ``KEPT_TOO``, one session), her screenshot
    to delete (``SHOT_LINES``), one to keep (``KEPT_SHOT``) and bob's chat (``BOBS``); returns (chat, shot,
    kept shot, bob's chat)."""
    chat = folder / "chat.jsonl"
    chat.write_text(
        "".join(
            json.dumps(
                {
                    "message_id": f"m{i}",
                    "session_id": "s1",
                    "speaker": "alice",
                    "text": t,
                    "timestamp": f"2024-05-01T10:0{i}:00+00:00",
                }
            )
            + "\n"
            for i, t in enumerate([KEPT, GONE, KEPT_TOO])
        )
    )
    bob = folder / "bob.jsonl"
    bob.write_text(
        json.dumps(
            {
                "message_id": "b0",
                "session_id": "b",
                "speaker": "bob",
                "text": BOBS,
                "timestamp": "2024-05-01T10:00:00+00:00",
            }
        )
        + "\n"
    )
    shot = render_png(folder / "ledger.png", SHOT_LINES, size=(900, 140))
    kept_shot = render_png(folder / "roadmap.png", KEPT_SHOT, size=(900, 100))
    return chat, shot, kept_shot, bob


def ingest(rt, folder: Path) -> dict[str, object]:
    """Alice's chat (the sentence to delete between two kept ones, one session: one episode), her screenshot to
    delete (app Ledgerly) and one to keep (app Firefox), both captured in May 2024; Bob's chat. Consolidated.
    Returns the events and the screenshot's path."""
    from engram.workers.consolidate import consolidate_user

    chat, shot, kept_shot, bob = write_inputs(folder)
    events = [
        publish_file(rt, classify(chat), TENANT, USER, "laptop"),
        publish_file(rt, classify(shot), TENANT, USER, "laptop", captured_at=MAY, app_name="Ledgerly"),
        publish_file(rt, classify(kept_shot), TENANT, USER, "laptop", captured_at=MAY, app_name="Firefox"),
        publish_file(rt, classify(bob), TENANT, OTHER, "phone"),
    ]
    assert all(r.status is EventStatus.done for r in run_events(rt, events))
    consolidate_user(TENANT, USER)
    consolidate_user(TENANT, OTHER)
    return {"events": events, "shot": shot}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_deleted_items_are_nowhere(engram_env, tmp_path, capsys):
    from engram.workers.runtime import reset_runtimes

    rt = engram_env
    data = rt.settings.data_dir
    got = ingest(rt, tmp_path)
    obs = {p.payload["text"]: p for p in rt.vectors.scroll(OBSERVATIONS, tenant_filter(TENANT))}
    gone_obs = next(p for t, p in obs.items() if GONE in t)
    shot_obs = next(p for p in obs.values() if p.payload.get("app") == "Ledgerly")
    read = shot_obs.payload["text"]  # the screenshot as OCR read it: what is stored
    assert "Marguerite" in read and "Halvorsen" in read, read
    png = Path(got["shot"]).read_bytes()
    shot_needles = [w.encode() for w in read.split() if len(w) >= 8] + [png[len(png) // 2 : len(png) // 2 + 48]]
    episode = json.dumps([p.payload for p in rt.vectors.scroll(MemoryType.episodic.value, tenant_filter(TENANT))])
    assert GONE in episode and KEPT in episode  # one episode quotes the sentence and the kept ones
    before = persisted(data)
    assert found_in(before, [GONE.encode()]) and found_in(before, shot_needles)  # the test can see them
    assert any("ocr" in Path(p).parts for p in before)  # the screenshot's OCR is cached
    reset_runtimes()  # the CLI below takes the embedded store
    logs = b""

    # 1. by id: the chat message; its episode is rewritten with the kept messages only
    logs += cli(data, "memories", "delete", gone_obs.id, "--tenant", TENANT)
    blobs = persisted(data)
    assert not found_in(blobs, [GONE.encode(), b"violet lighthouse"]), found_in(blobs, [GONE.encode()])
    assert found_in(blobs, [KEPT.encode()])  # another item's content stays
    rt = fresh_runtime()
    assert GONE not in stored(rt) and "violet lighthouse" not in searched(rt, "zebra quokka treaty lighthouse")
    kept_episode = [
        p.payload
        for p in rt.vectors.scroll(MemoryType.episodic.value, tenant_filter(TENANT, USER))
        if KEPT in p.payload.get("details", "")
    ]
    assert kept_episode and KEPT_TOO in kept_episode[0]["details"]  # rewritten, not deleted
    assert str(gone_obs.id) not in json.dumps(kept_episode[0]["provenance"])
    assert KEPT in searched(rt, "lunch with Priya Thai place")
    reset_runtimes()

    # 2. by application: the screenshot, its OCR cache, thumbnail, original and resource memory
    ocr_before = [p for p in before if "ocr" in Path(p).parts]
    logs += cli(data, "forget", "--app", "Ledgerly", "--tenant", TENANT, "--yes")
    blobs = persisted(data)
    assert not found_in(blobs, shot_needles), found_in(blobs, shot_needles)
    assert len([p for p in blobs if "ocr" in Path(p).parts]) == len(ocr_before) - 1  # the kept shot's stays
    assert not [p for p in blobs if str(shot_obs.payload["event_id"]) in p]  # no thumbnail or derived object
    rt = fresh_runtime()
    assert "Marguerite" not in searched(rt, "invoice approved by Marguerite Okonkwo")
    assert "Quarterly roadmap" in searched(rt, "quarterly roadmap review design")
    reset_runtimes()

    # 3. by time range: a note added now (its published .jsonl too); the May 2024 items stay
    logs += cli(data, "add", NOTE, "--user", USER, "--tenant", TENANT)
    assert found_in(persisted(data), [NOTE.encode()])
    logs += cli(data, "forget", "--since", "30m", "--user", USER, "--tenant", TENANT, "--yes")
    blobs = persisted(data)
    assert not found_in(blobs, [NOTE.encode(), b"saffron walrus"]), found_in(blobs, [NOTE.encode()])
    assert found_in(blobs, [KEPT.encode(), KEPT_TOO.encode()])

    # 4. a whole user
    logs += cli(data, "forget", "--user", OTHER, "--tenant", TENANT, "--yes")
    blobs = persisted(data)
    assert not found_in(blobs, [BOBS.encode(), b"ceramic hedgehog"]), found_in(blobs, [BOBS.encode()])

    rt = fresh_runtime()
    everything = (
        stored(rt)
        + searched(rt, "saffron walrus cloves")
        + searched(rt, "spare garage key hedgehog")
        + searched(rt, "zebra quokka treaty")
    )
    captured = capsys.readouterr()
    blobs = {
        **blobs,
        "cli logs": logs,
        "store": everything.encode(),
        "in-process log": (captured.out + captured.err).encode(),
    }
    needles = [
        GONE.encode(),
        b"violet lighthouse",
        NOTE.encode(),
        b"saffron walrus",
        BOBS.encode(),
        b"ceramic hedgehog",
        *shot_needles,
    ]
    assert not found_in(blobs, needles), found_in(blobs, needles)
    assert KEPT in everything or KEPT in searched(rt, "lunch with Priya")
    assert b'"event"' in logs  # JSON log lines were written
