"""Ten kinds of damage to a real embedded store: each is named or repaired, never answered from silently.

A small store is made by ``engram ingest`` of three Markdown notes; each test copies it and damages one file (or
folder) of the copy's ``observations`` shard the way a disk, a crash or a careless hand would: a dense vector
file deleted, cut to half or with 256 KiB zeroed, a payload page truncated or zeroed, a segment's
``segment.json`` deleted or not JSON, the write-ahead log truncated, an id tracker file deleted, a whole segment
folder deleted. Then ``engram search``, ``engram status`` and ``engram export`` run on the copy (each its own
process, as a user runs them; forked by ``tests.forked_cli`` once the CLI and the model libraries are imported):
each either answers as on the undamaged store (the engine repaired it: the same hits, the same counts, the same
export) or exits non-zero with one line naming the damaged file and no traceback; and no file of the damaged
shard changes (size, modification time, content) when it is refused. Each damage is tried with the manifest the
store's last clean close wrote and without it (an older engram's store, or one whose process was killed), where
what only a read-back finds is found on a scratch copy of the shard, so the refused shard is never written to
either.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.files import copy_tree
from tests.forked_cli import ForkedCli

pytestmark = pytest.mark.slow

NOTES = {
    "garden.md": "# Garden plan\n\nThe tomatoes go along the south fence this year. Basil between them keeps the "
    "aphids away.\nWater the seedlings every morning before nine.\n",
    "trip.md": "# Lisbon trip\n\nFlight TP1353 leaves on the 14th of June at 07:40. The hotel in Alfama is booked "
    "for four nights.\nMaria recommended the tram 28 and the pasteis at Belem.\n",
    "meeting.md": "# Budget meeting\n\nThe quarterly budget review moved to Thursday. Tom will bring the hiring "
    "numbers; we cut travel by ten percent.\n",
}
QUERY = "where do the tomatoes go"
COMMANDS = {"search": ["search", QUERY, "--json"], "status": ["status"], "export": ["export", "--user", "ann"]}


def _env(data: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(data.parent),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "ENGRAM_DATA_DIR": str(data),
        "ENGRAM_USER": "ann",
        "COLUMNS": "200",
        "ENGRAM_TIMEZONE": "UTC",
    }


@pytest.fixture(scope="module")
def cli(tmp_path_factory) -> Iterator[ForkedCli]:
    """The commands' server: each command a child process of its own, forked once the CLI and the model libraries
    are imported (``tests.forked_cli``): ~13 s of a 15 s ``engram search`` on a busy machine, 60 commands here."""
    root = tmp_path_factory.mktemp("forked")
    server = ForkedCli(_env(root / "data"), REPO, root)
    yield server
    server.close()


def _engram(cli: ForkedCli, data: Path, *args: str) -> subprocess.CompletedProcess:
    return cli.run(_env(data), list(args), timeout=600)


def _answer(command: str, stdout: str) -> object:
    """What must be the same on a repaired store as on the undamaged one: the hits' ids in order, the status
    tables but the bytes stored (the engine's files change size as it repairs a shard, and as it opens one), the
    export without its time stamp."""
    if command == "search":
        return [(h["id"], h["memory_type"], h["text"]) for h in json.loads(stdout)["hits"]]
    if command == "export":
        return {k: v for k, v in json.loads(stdout).items() if k != "exported_at"}
    return stdout.split("bytes stored")[0]


@pytest.fixture(scope="module")
def pristine(cli, tmp_path_factory) -> tuple[Path, dict[str, object]]:
    """The undamaged store (ingested once) and each command's answer on a copy of it."""
    root = tmp_path_factory.mktemp("damage")
    notes = root / "notes"
    notes.mkdir()
    for name, text in NOTES.items():
        (notes / name).write_text(text)
    data = root / "pristine"
    out = _engram(cli, data, "ingest", str(notes))
    assert out.returncode == 0, out.stderr[-3000:]
    copy_tree(data, root / "baseline")
    answers = {}
    for command, args in COMMANDS.items():
        out = _engram(cli, root / "baseline", *args)
        assert out.returncode == 0, out.stderr[-3000:]
        answers[command] = _answer(command, out.stdout)
    assert answers["search"], "the undamaged store finds nothing"
    return data, answers


def _segment(shard: Path) -> Path:
    """The shard's segment holding its points (the largest on disk)."""
    return max(
        (p for p in (shard / "segments").iterdir() if p.is_dir()),
        key=lambda p: sum(f.stat().st_blocks for f in p.rglob("*") if f.is_file()),
    )


def _zero(path: Path, size: int = 256 * 1024) -> None:
    with open(path, "r+b") as f:
        f.write(bytes(min(size, path.stat().st_size)))


def _cut(path: Path, size: int) -> None:
    os.truncate(path, size)


def _dense(shard: Path) -> Path:
    return _segment(shard) / "vector_storage-text" / "vectors" / "chunk_0.mmap"


def _page(shard: Path) -> Path:
    return _segment(shard) / "payload_storage" / "page_0.dat"


def _meta(shard: Path) -> Path:
    return _segment(shard) / "segment.json"


def _wal(shard: Path) -> Path:
    return min((shard / "wal").glob("open-*"))


def _ids(shard: Path) -> Path:
    return _segment(shard) / "mutable_id_tracker.mappings"


#: Each damage: (what it damages, given the shard folder; what it does to it).
DAMAGES = {
    "dense vectors deleted": (_dense, Path.unlink),
    "dense vectors cut to half": (_dense, lambda p: _cut(p, p.stat().st_size // 2)),
    "dense vectors 256 KiB zeroed": (_dense, _zero),
    "payload page truncated": (_page, lambda p: _cut(p, 1024)),
    "payload page zeroed": (_page, _zero),
    "segment metadata deleted": (_meta, Path.unlink),
    "segment metadata not JSON": (_meta, lambda p: p.write_text("{ not json")),
    "write-ahead log truncated": (_wal, lambda p: _cut(p, 1024)),
    "id tracker deleted": (_ids, Path.unlink),
    "segment folder deleted": (_segment, shutil.rmtree),
}


def _extents(fd: int, size: int) -> list[tuple[int, int]]:
    """The byte ranges of the file ``fd`` holding data (``SEEK_DATA``/``SEEK_HOLE``: the engine's 32 MiB pages and
    chunks are mostly holes, read here at no cost); zeros written into a hole make it data, so they show."""
    out, pos = [], 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: no data after pos
            break
        pos = os.lseek(fd, start, os.SEEK_HOLE)
        out.append((start, pos))
    return out


def _files(shard: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``shard``: (size, modification time in ns, digest of its data extents and their bytes)."""
    out = {}
    for path in sorted(p for p in shard.rglob("*") if p.is_file()):
        st = path.stat()
        h = hashlib.blake2b(digest_size=16)
        with open(path, "rb") as f:
            for start, end in _extents(f.fileno(), st.st_size):
                h.update(f"{start}-{end}".encode())
                f.seek(start)
                for pos in range(start, end, 1 << 20):
                    h.update(f.read(min(1 << 20, end - pos)))
        out[str(path.relative_to(shard))] = (st.st_size, st.st_mtime_ns, h.hexdigest())
    return out


def _named(line: str, target: Path, shard: Path, manifest: bool) -> bool:
    """Whether the error ``line`` names the damaged ``target`` (with a manifest: the file or folder itself;
    without one, where the files cannot say which: the storage folder or the segments folder holding it)."""
    if manifest:
        return str(target) in line
    return any(
        str(p) in line for p in (target, *target.parents) if p.is_relative_to(shard / "segments") or p == shard / "wal"
    )


@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "no manifest"])
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_shard_is_named_or_repaired(cli, pristine, tmp_path, damage, manifest):
    """With the manifest of the store's last clean close (the store as ``engram ingest`` left it) every damage is
    named before the engine opens the shard; without one (an older engram's store, or a process killed while it
    held the store) by the files' own sizes, or by reading every point back from a scratch copy the engine opened:
    either way the refused shard's files are left as they were."""
    from engram.workers.stores.integrity import MANIFEST

    source, answers = pristine
    data = tmp_path / "data"
    copy_tree(source, data)
    shard = data / "vectors" / "observations"
    assert (shard / MANIFEST).is_file()
    if not manifest:
        (shard / MANIFEST).unlink()
    which, harm = DAMAGES[damage]
    target = which(shard)
    harm(target)
    before = _files(shard)
    for command, args in COMMANDS.items():
        out = _engram(cli, data, *args)
        assert "Traceback" not in out.stderr, f"{damage}, {command}: {out.stderr[-3000:]}"
        if out.returncode == 0:  # repaired: the same answer as on the undamaged store
            assert _answer(command, out.stdout) == answers[command], f"{damage}, {command}: answered differently"
            continue
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), f"{damage}, {command}: {out.stderr[-3000:]}"
        assert _named(lines[0], target, shard, manifest), f"{damage}, {command}: not named: {lines[0]}"
        assert _files(shard) == before, f"{damage}, {command}: the refused shard was written to"
        assert not shard.with_name(shard.name + ".trial").exists(), "the scratch copy was left behind"


def test_a_shard_that_cannot_be_copied_for_its_check_is_one_line(cli, pristine, tmp_path):
    """A shard without a manifest whose scratch copy cannot be made (a full disk; here a file in the copy's place)
    is refused in one line naming the shard and the copy, exit 3, no traceback, the shard left as it was."""
    from engram.workers.stores.integrity import MANIFEST

    source, _ = pristine
    data = tmp_path / "data"
    copy_tree(source, data)
    shard = data / "vectors" / "observations"
    (shard / MANIFEST).unlink()
    blocker = shard.with_name(shard.name + ".trial")
    blocker.write_text("not a folder")
    blocker.chmod(0o600)  # as engram makes its files: no warning beside the error
    before = _files(shard)
    out = _engram(cli, data, "status")
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 3 and len(lines) == 1, out.stderr[-3000:]
    assert str(shard) in lines[0] and str(blocker) in lines[0] and "could not be made" in lines[0], lines[0]
    assert _files(shard) == before
