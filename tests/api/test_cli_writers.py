"""The embedded default's writers, with real ``engram`` processes on one temporary data dir (issue 43): ten
``engram add --id`` of which three are killed with SIGKILL, then all ten retried (all searchable, none doubled); a
consolidation killed while it holds its lock, then consolidated again at once; two and four ``engram ingest`` on
overlapping folders (every file done once, no false failure, ledger and store agree); the data dir owner-only
(a looser one tightened with a warning); ``engram vault reveal`` audited and counted by ``engram status``."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
        "COLUMNS": "300",
        "ENGRAM_USER": "ann",
        "ENGRAM_STORE_WAIT_SECONDS": "900",
    }


def _engram(tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "engram.api.cli", *args]


def _run(tmp_path: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        _engram(tmp_path, *args), env=_env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def _query(db: Path, sql: str, args: tuple = ()) -> list[tuple]:
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return conn.execute(sql, args).fetchall()
    except sqlite3.Error:  # not made yet
        return []


def _python(tmp_path: Path, code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], env=_env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


#: Prints the observations' (event id, text) of every stored observation, as JSON.
_OBSERVATIONS = (
    "import json\n"
    "from engram.workers.runtime import runtime\n"
    "from engram.workers.stores.vectors import OBSERVATIONS\n"
    "rt = runtime()\n"
    "points = rt.vectors.scroll(OBSERVATIONS, None, with_payload=['event_id', 'text']) "
    "if rt.vectors.has_collection(OBSERVATIONS) else []\n"
    "print(json.dumps([[p.payload['event_id'], p.payload['text']] for p in points]))\n"
)


@pytest.mark.slow
def test_ten_adds_three_killed_then_retried_are_all_stored_once(tmp_path):
    from engram.api.add import add_event_id

    notes = {
        f"note-{n}": f"Note {n}: the {w} key hangs by the {p} door"
        for n, (w, p) in enumerate(
            zip(
                "brass iron silver copper golden steel bronze wooden plastic glass".split(),
                "kitchen garden cellar attic garage office studio porch shed hall".split(),
                strict=True,
            )
        )
    }
    ids = {add_event_id("default", "ann", cid): cid for cid in notes}
    db = tmp_path / "data" / "ledger.sqlite"
    procs = {
        cid: subprocess.Popen(
            _engram(tmp_path, "add", text, "--id", cid, "--no-consolidate"),
            env=_env(tmp_path),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for cid, text in notes.items()
    }
    killed: list[str] = []
    deadline = time.monotonic() + 600
    while len(killed) < 3 and time.monotonic() < deadline:  # kill the first three whose event is recorded
        for (eid,) in _query(db, "SELECT event_id FROM events WHERE status IN ('queued', 'processing')"):
            cid = ids.get(uuid.UUID(eid))
            if cid and cid not in killed and procs[cid].poll() is None and len(killed) < 3:
                procs[cid].send_signal(signal.SIGKILL)
                killed.append(cid)
        time.sleep(0.02)
    for proc in procs.values():
        proc.communicate(timeout=900)
    assert len(killed) == 3, killed
    unfinished = {
        ids[uuid.UUID(e)]
        for (e,) in _query(db, "SELECT event_id FROM events WHERE status NOT IN ('done', 'skipped', 'failed')")
    }
    assert unfinished and unfinished <= set(killed)  # killed mid-way: recorded, never finished

    again = {
        cid: subprocess.Popen(
            _engram(tmp_path, "add", text, "--id", cid, "--no-consolidate"),
            env=_env(tmp_path),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for cid, text in notes.items()
    }
    answers = {cid: proc.communicate(timeout=900) + (proc.returncode,) for cid, proc in again.items()}
    for cid, (out, errs, code) in answers.items():
        assert code == 0, (cid, out, errs[-2000:])
        want = "resumed an interrupted addition: done" if cid in unfinished else "already added"
        assert out.startswith(want), (cid, out)
    stored = json.loads(_python(tmp_path, _OBSERVATIONS))
    texts = sorted(text.split(": ", 1)[1] for _, text in stored)
    assert texts == sorted(notes.values())  # all ten, none doubled
    assert _query(db, "SELECT COUNT(*), SUM(redeliveries) FROM events WHERE status='done'") == [(10, len(unfinished))]
    found = _run(tmp_path, "search", "which key hangs by the cellar door", "--json")
    assert "silver key hangs by the cellar door" in found.stdout, found.stderr[-2000:]


def _chat(path: Path, n: int) -> None:
    path.write_text(
        "".join(
            json.dumps(
                {
                    "message_id": f"m{i}",
                    "session_id": f"s{i // 20}",
                    "speaker": ["Ann", "Bob"][i % 2],
                    "text": f"Message {i}: we talked about the garden plan number {i} and the tools for day {i // 20}.",
                    "timestamp": f"2024-05-{1 + i // 20:02d}T10:{i % 60:02d}:00Z",
                }
            )
            + "\n"
            for i in range(n)
        )
    )


@pytest.mark.slow
def test_a_consolidation_killed_holding_its_lock_is_taken_over_at_once(tmp_path):
    chat = tmp_path / "days.jsonl"
    _chat(chat, 240)  # twelve days: twelve sessions
    out = _run(tmp_path, "ingest", str(chat), "--user", "ann", "--no-consolidate")
    assert out.returncode == 0, out.stderr[-3000:]
    db = tmp_path / "data" / "ledger.sqlite"
    proc = subprocess.Popen(
        _engram(tmp_path, "consolidate"), env=_env(tmp_path), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 600
    while (
        not _query(db, "SELECT name FROM locks WHERE name LIKE 'consolidate:%'")
        and proc.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert _query(db, "SELECT name FROM locks") == [("consolidate:default:ann",)]  # killed holding it
    started = time.monotonic()
    again = _run(tmp_path, "consolidate")
    assert again.returncode == 0, again.stderr[-3000:]
    written = re.match(r"(\d+) episodic memor", again.stdout)
    assert written and int(written.group(1)) >= 12, again.stdout
    assert time.monotonic() - started < 300 and _query(db, "SELECT name FROM locks") == []


def _files(folder: Path, names: range, pictures: range = range(0)) -> None:
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    for n in names:
        (folder / f"note{n}.md").write_text(
            f"# Note {n}\n\nThe delivery number {n} arrives at dock {n % 7} on "
            f"{['Monday', 'Tuesday', 'Friday'][n % 3]}; sign for crate {n * 13}.\n"
        )
    for n in pictures:
        img = Image.new("RGB", (640, 360), [(255, 255, 255), (20, 40, 90), (250, 230, 120)][n % 3])
        draw = ImageDraw.Draw(img)
        for k in range(n + 2):
            draw.rectangle((30 + 90 * k, 200 - 40 * (k % 3), 100 + 90 * k, 330), fill=(200, 30 * k % 255, 60))
        draw.text((30, 40), f"Invoice {folder.name}-{n} total {n * 117} EUR", fill=(0, 0, 0))
        img.save(folder / f"shot{n}.png")


@pytest.mark.slow
@pytest.mark.parametrize("writers", [2, 4])
def test_several_ingests_on_one_data_dir_share_the_work(tmp_path, writers):
    a, b = tmp_path / "in" / "a", tmp_path / "in" / "b"
    _files(a, range(0, 10), pictures=range(0, 2))
    _files(b, range(6, 16), pictures=range(2, 3))  # notes 6-9 in both: the same contents; screenshots unlike
    folders = [[a], [b], [a, b], [b, a]][:writers]
    procs = [
        subprocess.Popen(
            _engram(tmp_path, "ingest", *map(str, f), "--user", "ann", "--no-consolidate"),
            env=_env(tmp_path),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for f in folders
    ]
    outs = [p.communicate(timeout=1500) + (p.returncode,) for p in procs]
    for out, errs, code in outs:
        assert code == 0 and "failed" not in errs and "interrupted earlier" not in errs, (out, errs[-3000:])
    db = tmp_path / "data" / "ledger.sqlite"
    statuses = dict(_query(db, "SELECT status, COUNT(*) FROM events GROUP BY status"))
    skipped = _query(db, "SELECT source_name, reason FROM events WHERE status='skipped'")
    assert set(statuses) <= {"done", "skipped"} and statuses["done"] == 16 + 3, (statuses, skipped)  # each once
    assert all("exact duplicate" in reason for _, reason in skipped), skipped
    assert _query(db, "SELECT SUM(redeliveries) FROM events") == [(0,)]  # nobody died: nothing redelivered
    assert _query(db, "SELECT COUNT(*) FROM unfinished") == [(0,)]
    done = dict(
        _query(
            db,
            "SELECT e.event_id, COALESCE(SUM(s.observations), 0) FROM events e LEFT JOIN segments s "
            "ON s.event_id = e.event_id WHERE e.status='done' GROUP BY e.event_id",
        )
    )
    stored: dict[str, int] = {}
    for event_id, _ in json.loads(_python(tmp_path, _OBSERVATIONS)):  # every event's observations, once
        stored[event_id] = stored.get(event_id, 0) + 1
    assert stored == {e: n for e, n in done.items() if n}  # ledger and store agree
    assert all(n >= 1 for n in done.values())


@pytest.mark.slow
def test_the_data_dir_is_owner_only_and_a_looser_one_is_tightened(tmp_path):
    notes = tmp_path / "in"
    _files(notes, range(2))
    out = _run(tmp_path, "ingest", str(notes), "--user", "ann")
    assert out.returncode == 0, out.stderr[-3000:]
    data = tmp_path / "data"

    def readable_by_others() -> list[str]:
        return [str(p) for p in [data, *data.rglob("*")] if not p.is_symlink() and p.lstat().st_mode & 0o077]

    assert readable_by_others() == []
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert stat.S_IMODE((data / "ledger.sqlite").stat().st_mode) == 0o600
    for p in (data, data / "vectors", data / "ledger.sqlite", data / "cache" / "embeddings.sqlite"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)  # as an earlier engram left them
    status = _run(tmp_path, "status")
    assert status.returncode == 0 and "readable by other users; made owner-only" in status.stderr, status.stderr
    assert readable_by_others() == []


@pytest.mark.slow
def test_vault_reveal_is_audited_and_counted_by_status(tmp_path):
    secret = "ghp_" + "Z7q" * 12
    out = _run(tmp_path, "add", f"The deploy token for the build box is {secret}", "--no-consolidate")
    assert out.returncode == 0, out.stderr[-3000:]
    listed = _run(tmp_path, "vault", "list")
    entry = re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", listed.stdout)
    assert entry, listed.stdout + listed.stderr
    assert "reveal" not in _run(tmp_path, "status").stdout  # none yet
    for _ in range(2):
        shown = _run(tmp_path, "vault", "reveal", entry.group())
        assert shown.returncode == 0 and shown.stdout.strip() == secret, shown.stderr[-2000:]
    status = _run(tmp_path, "status")
    assert "vault: 2 reveals of a secret audited" in " ".join(status.stdout.split()), status.stdout
    rows = _query(tmp_path / "data" / "ledger.sqlite", "SELECT tenant_id, entry_id, os_user, pid, at FROM reveals")
    assert len(rows) == 2 and all(r[:2] == ("default", entry.group()) and r[2] and r[3] > 0 for r in rows)
    assert secret.encode() not in (tmp_path / "data" / "ledger.sqlite").read_bytes()


def _add_killed_mid_way(tmp_path: Path, cid: str, text: str) -> None:
    """Start ``engram add TEXT --id CID`` and SIGKILL it once its event is recorded and not finished."""
    from engram.api.add import add_event_id

    event_id = str(add_event_id("default", "ann", cid))
    proc = subprocess.Popen(
        _engram(tmp_path, "add", text, "--id", cid, "--no-consolidate"),
        env=_env(tmp_path),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    db, deadline = tmp_path / "data" / "ledger.sqlite", time.monotonic() + 600
    while (
        not _query(db, "SELECT 1 FROM events WHERE event_id=?", (event_id,))
        and proc.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert _query(db, "SELECT status FROM events WHERE event_id=?", (event_id,))[0][0] in ("queued", "processing")


@pytest.mark.slow
def test_the_mcp_servers_add_memory_resumes_an_interrupted_addition(tmp_path):
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    text = "The spare boiler fuse is taped under the third stair"
    _add_killed_mid_way(tmp_path, "fuse-1", text)
    params = StdioServerParameters(
        command=sys.executable, cwd=str(REPO), env=_env(tmp_path), args=["-m", "engram.api.cli", "mcp", "--user", "ann"]
    )
    answers = []

    async def session() -> None:
        async with Client(params, read_timeout_seconds=600) as client:
            for _ in range(2):
                answers.append(await client.call_tool("add_memory", {"text": text, "id": "fuse-1", "user_id": "ann"}))

    anyio.run(session)
    first, again = answers
    assert not first.is_error and first.content[0].text.startswith("Resumed an interrupted addition: Remembered"), (
        first.content[0].text
    )
    assert first.structured_content["resumed"] is True and first.structured_content["status"] == "done"
    assert again.structured_content["duplicate"] is True and again.content[0].text.startswith("Already added")
    stored = [t for _, t in json.loads(_python(tmp_path, _OBSERVATIONS))]
    assert stored == [f"ann: {text}"]
