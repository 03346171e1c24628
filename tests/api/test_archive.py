"""``engram export --archive FILE`` / ``engram import FILE`` on the embedded default: a user's chats, screenshot
and vault entry (``tests.workers.memory.test_records``' template, ingested by the real pipeline) exported and
imported into a new data dir, where a search for the user answers the same ids in the same order; importing twice
stores nothing twice; bad, truncated, damaged, foreign and newer archives refused with the reason before anything
is written; an import killed with SIGKILL completed by the same command; the data dir owner-only."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engram.schemas.search import SearchRequest
from engram.workers.stores.vectors import COLLECTIONS, OBSERVATIONS, tenant_filter
from tests.conftest import REPO
from tests.files import copy_tree
from tests.workers.memory.test_records import CIPHERTEXT, T, template, use_data_dir  # noqa: F401 (a fixture)

QUERIES = [
    "budget review",
    "Lisbon flights",
    "tomatoes in the garden",
    "Quarterly budget review Thursday",
    "cello lessons",
]


def _cli(*args: str):
    from engram.api.cli.main import app

    return CliRunner().invoke(app, list(args))


def _searches(user: str) -> dict[str, list[str]]:
    from engram.api.embedded import run_search

    return {
        q: [str(h.id) for h in run_search(SearchRequest(query=q, tenant_id=T, user_id=user, limit=10)).hits]
        for q in QUERIES
    }


def _objects(rt) -> list[str]:
    return sorted(rt.objects.keys(f"media/{T}/") + rt.objects.keys(f"derived/{T}/") + rt.objects.keys(f"vault/{T}/"))


def _holdings(rt, user: str | None) -> dict[str, list[str]]:
    """{collection: sorted point ids} of the user (None: the tenant), the ledger's events (id, status,
    observations), and (the tenant) the objects."""
    out = {
        c: sorted(str(p.id) for p in rt.vectors.scroll(c, tenant_filter(T, user), with_payload=False))
        for c in COLLECTIONS
    }
    if user is None:
        out["objects"] = _objects(rt)
    out["events"] = sorted(
        f"{r.event_id} {r.status} {r.observations}"
        for r in rt.ledger.records(T, limit=10_000)
        if user is None or r.user_id == user
    )
    return out


def _owner_only(data_dir: Path) -> list[str]:
    """Paths under ``data_dir`` that others could read (a folder not 0700, a file with group or other bits)."""
    loose = []
    for root, dirs, files in os.walk(data_dir):
        for name in [*dirs, *files]:
            path = Path(root) / name
            mode = path.lstat().st_mode & 0o777
            if (path.is_dir() and mode != 0o700) or mode & 0o077:
                loose.append(f"{path.relative_to(data_dir)} {mode:o}")
    return loose


@pytest.fixture
def exported(template, tmp_path, monkeypatch):  # noqa: F811 (the fixture imported above)
    """alice's archive written from a copy of the template: (archive, searches there, holdings there)."""
    from engram.workers.runtime import reset_runtimes

    copy_tree(template / "data", tmp_path / "src")
    shutil.copy(template / "alice.jsonl", tmp_path / "alice.jsonl")
    rt = use_data_dir(monkeypatch, tmp_path / "src")
    before = _searches("alice"), _holdings(rt, "alice")
    assert before[0]["budget review"], before
    run = _cli("export", "--user", "alice", "--archive", str(tmp_path / "alice.tar"), "--json")
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["counts"]["vault_entries"] == 1
    reset_runtimes()
    yield tmp_path / "alice.tar", *before
    reset_runtimes()


@pytest.mark.slow
def test_a_user_moved_to_a_new_data_dir_answers_the_same_ids_in_the_same_order(exported, tmp_path, monkeypatch):
    from engram.workers.runtime import reset_runtimes, runtime

    archive, searches, holdings = exported
    assert holdings["entities"], holdings  # her own entity (an entity is moved with the points that name it)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert names[0] == "engram-archive.json" and names[-1] == "manifest.json"
    assert not any("vault.key" in n for n in names) and any("/thumb-" in n for n in names), names
    dest = tmp_path / "dest"
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(dest))
    reset_runtimes()
    run = _cli("import", str(archive))
    assert run.exit_code == 0 and "imported 'alice'" in run.stdout, run.output
    rt = runtime()
    assert _holdings(rt, "alice") == holdings
    assert _holdings(rt, "bob")[OBSERVATIONS] == []  # only alice's
    assert _objects(rt) == sorted(n.removeprefix("objects/") for n in names if n.startswith("objects/"))
    assert {r.object_key for r in rt.ledger.user_events(T, "alice")} <= set(_objects(rt))
    assert not any("bob" in (r.source_name or "") for r in rt.ledger.records(T))
    entry = next(k for k in _objects(rt) if k.startswith("vault/"))
    assert CIPHERTEXT in rt.objects.get_bytes(entry).decode()  # still encrypted, as stored
    assert _searches("alice") == searches
    files = {p: p.stat().st_mtime_ns for p in (dest / "objects").rglob("*")}

    reset_runtimes()
    again = _cli("import", str(archive), "--json")
    assert again.exit_code == 0, again.output
    written = json.loads(again.stdout)["written"]
    assert written["objects"] == 0 and written["events"] == 0 and not any(written["points"].values()), written
    rt = runtime()
    assert _holdings(rt, "alice") == holdings
    assert {p: p.stat().st_mtime_ns for p in (dest / "objects").rglob("*")} == files
    assert _searches("alice") == searches

    from engram.api.cli.main import ingest_paths

    reset_runtimes()  # the same chat ingested again in the new data dir: a duplicate of the imported event
    out = ingest_paths([tmp_path / "alice.jsonl"], T, "alice", "laptop", quiet=True)
    assert not out["done"] and len(out["skipped"]) == 1, out
    after = _holdings(runtime(), "alice")
    new = sorted(set(after.pop("events")) - set(holdings["events"]))
    assert len(new) == 1 and new[0].endswith(" skipped 0"), new  # recorded as a duplicate, nothing stored
    assert after == {k: v for k, v in holdings.items() if k != "events"}
    reset_runtimes()
    assert _owner_only(dest) == []


def _tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_bad_truncated_damaged_foreign_and_newer_archives_are_refused_before_anything_is_written(
    exported, tmp_path, monkeypatch
):
    from engram.workers.memory.archive import FORMAT_VERSION, HEADER
    from engram.workers.stores.backup import engram_version

    archive = exported[0]
    data = archive.read_bytes()
    with tarfile.open(archive) as tar:  # a byte of the screenshot's original changed
        shot = next(m for m in tar.getmembers() if m.name.endswith(".png"))
    damaged = bytearray(data)
    damaged[shot.offset_data + 100] ^= 0xFF
    newer = {
        "format": "engram-archive",
        "format_version": FORMAT_VERSION + 1,
        "engram_version": "999.0",
        "tenant_id": T,
        "user_id": "alice",
    }
    cases = {
        "not-a-tar": (b"just some text\n" * 100, "not an engram archive"),
        "truncated": (data[: len(data) // 2], "truncated"),
        "damaged": (bytes(damaged), "do not match their checksum"),
        "foreign": (_tar(tmp_path / "f.tar", [("notes.txt", b"hello")]).read_bytes(), "not an engram archive"),
        "newer": (
            _tar(tmp_path / "n.tar", [(HEADER, json.dumps(newer).encode())]).read_bytes(),
            f"written by engram 999.0 (archive format {FORMAT_VERSION + 1}); this is engram {engram_version()}",
        ),
    }
    nothing = _cli("export", "--user", "nobody", "--archive", str(tmp_path / "nobody.tar"))
    assert nothing.exit_code == 1 and "holds nothing to export" in nothing.stderr, nothing.output
    assert not (tmp_path / "nobody.tar").exists() and not list(tmp_path.glob(".nobody.tar.*"))
    for name, (content, reason) in cases.items():
        bad = tmp_path / f"{name}.tar"
        bad.write_bytes(content)
        dest = tmp_path / f"dest-{name}"
        run = subprocess.run(
            [sys.executable, "-m", "engram.api.cli", "--data-dir", str(dest), "import", str(bad)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
            env=_env(),
        )
        assert run.returncode == 2 and reason in " ".join(run.stderr.split()), (name, run.stderr)
        assert not dest.exists(), name  # nothing written, not even the data dir


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "250"}
    for var in ("ENGRAM_BROKER_URL", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT", "ENGRAM_DATA_DIR"):
        env.pop(var, None)
    return env


def _grow(rt, copies: int) -> None:
    """``copies`` more observations of alice: her own, copied under new ids (as bench/scale.py seeds a store)."""
    import uuid

    seeds = rt.vectors.scroll(OBSERVATIONS, tenant_filter(T, "alice"), with_vectors=True)
    from engram.workers.stores import models as qm  # the store's own point type

    points = [
        qm.PointStruct(
            id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"copy-{n}")),
            vector=dict(s.vector),
            payload={**s.payload, "text": f"{s.payload.get('text', '')} copy {n}"},
        )
        for n in range(copies)
        for s in seeds[n % len(seeds) : n % len(seeds) + 1]
    ]
    for start in range(0, len(points), 500):
        rt.vectors.upsert(OBSERVATIONS, points[start : start + 500])


@pytest.mark.slow
def test_an_import_killed_with_sigkill_is_completed_by_the_same_command(
    template,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    from engram.workers.runtime import reset_runtimes

    copy_tree(template / "data", tmp_path / "src")
    rt = use_data_dir(monkeypatch, tmp_path / "src")
    _grow(rt, 6000)
    holdings = _holdings(rt, None)
    archive = tmp_path / "tenant.tar"
    run = _cli("export", "--archive", str(archive))
    assert run.exit_code == 0, run.output
    reset_runtimes()
    dest = tmp_path / "dest"
    argv = [sys.executable, "-m", "engram.api.cli", "--data-dir", str(dest), "import", str(archive)]
    proc = subprocess.Popen(argv, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not (dest / "vectors" / OBSERVATIONS).is_dir() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)  # in the middle of writing the observations
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    rt = use_data_dir(monkeypatch, dest)
    partial = _holdings(rt, None)
    assert partial != holdings and len(partial[OBSERVATIONS]) < len(holdings[OBSERVATIONS])  # killed part way
    reset_runtimes()

    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=REPO, env=_env())
    assert done.returncode == 0, done.stderr[-2000:]
    rt = use_data_dir(monkeypatch, dest)
    assert _holdings(rt, None) == holdings  # nothing lost, nothing doubled
    reset_runtimes()
    assert _owner_only(dest) == []
