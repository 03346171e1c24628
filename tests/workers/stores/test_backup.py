"""``workers.stores.backup``: a data dir backed up into a folder or S3 (SeaweedFS) and restored as it was; the
second backup writes only new content; a manifest written last (a killed backup leaves none, the same command
completes it; a full disk leaves the earlier backup usable); a newer backup and a non-empty data dir refused;
restored files owner-only; a store written by another process throughout stays consistent in the backup."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from engram.workers.stores import backup as bk
from engram.workers.stores import models as qm
from engram.workers.stores.ledger import SqliteLedger
from engram.workers.stores.vectors import DENSE, OBSERVATIONS, SPARSE, EdgeVectorStore, tenant_filter
from tests.conftest import REPO

RNG = np.random.default_rng(3)
QUERY = RNG.normal(size=384).astype(np.float32)


def _points(start: int, n: int, batch: int = 0) -> list[qm.PointStruct]:
    vecs = RNG.normal(size=(n, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return [
        qm.PointStruct(
            id=str(uuid.UUID(int=start + i + 1)),
            vector={
                DENSE: vecs[i].tolist(),
                SPARSE: qm.SparseVector(indices=[(start + i) % 50, 77], values=[1.0, 0.5]),
            },
            payload={"tenant_id": "t", "user_id": "u", "seq": start + i, "batch": batch, "text": f"point {start + i}"},
        )
        for i in range(n)
    ]


def make_data_dir(root: Path, points: int = 300, object_mb: int = 2) -> Path:
    """A data dir as the embedded default lays it out: a store, a ledger in WAL mode, objects, a vault entry and
    key, and what a backup leaves out (the store's lock, the capture spool)."""
    store = EdgeVectorStore(root / "vectors")
    for i in range(0, points, 100):
        store.upsert(OBSERVATIONS, _points(i, min(100, points - i)))
    store.close()
    SqliteLedger(root / "ledger.sqlite")  # the real ledger's tables (WAL mode), plus rows of a table of ours
    db = sqlite3.connect(root / "ledger.sqlite")
    db.execute("CREATE TABLE backup_test (id TEXT PRIMARY KEY, status TEXT)")
    db.executemany("INSERT INTO backup_test VALUES (?, ?)", [(str(i), "done") for i in range(500)])
    db.commit()
    db.close()
    for i in range(object_mb):
        obj = root / "objects" / "media" / "t" / f"{i:03d}.bin"
        obj.parent.mkdir(parents=True, exist_ok=True)
        obj.write_bytes(os.urandom(1 << 20))
    (root / "objects" / "vault" / "t").mkdir(parents=True)
    (root / "objects" / "vault" / "t" / "e1.json").write_text('{"ciphertext": "gAAAA..."}')
    (root / "vault.key").write_text("not-a-real-key")
    (root / "capture-spool").mkdir()
    (root / "capture-spool" / "frame.png").write_bytes(b"spooled")
    return root


def _search_ids(data_dir: Path) -> list[str]:
    store = EdgeVectorStore(data_dir / "vectors")
    try:
        q = QUERY
        dense, sparse = store.search(
            OBSERVATIONS, (q / np.linalg.norm(q)).tolist(), ([3, 77], [1.0, 1.0]), tenant_filter("t", "u"), 20
        )
        return [str(h.id) for h in dense] + [str(h.id) for h in sparse]
    finally:
        store.close()


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _rows(path: Path) -> list[tuple]:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT * FROM backup_test ORDER BY id").fetchall()
    finally:
        db.close()


def test_a_restored_data_dir_is_the_backed_up_one_owner_only(tmp_path):
    data = make_data_dir(tmp_path / "data")
    repo = bk.open_repository(str(tmp_path / "backup"), create=True)
    result = bk.backup(data, repo)
    repo.close()
    assert result.files > 10 and result.written_bytes > 2 << 20 and result.vault_key == "excluded"
    for p in [tmp_path / "backup", *(tmp_path / "backup").rglob("*")]:  # the backup is as private as the data dir
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o700 if p.is_dir() else 0o600), (p, oct(mode))
    os.chmod(tmp_path / "backup", 0o755)
    restored = tmp_path / "restored"
    out = bk.restore(bk.open_repository(str(tmp_path / "backup"), create=False), restored)
    assert out.snapshot == result.snapshot and out.files == result.files

    before, after = _files(data), _files(restored)
    expected = {
        k
        for k in before
        if not k.startswith(("capture-spool/", "ledger.sqlite")) and k not in ("vectors.lock", "vault.key")
    }
    assert set(after) == expected | {"ledger.sqlite"}
    assert all(after[k] == before[k] for k in expected)
    assert _rows(restored / "ledger.sqlite") == _rows(data / "ledger.sqlite")
    for p in [restored, *restored.rglob("*")]:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o700 if p.is_dir() else 0o600), (p, oct(mode))
    assert _search_ids(restored) == _search_ids(data)
    vectors_on_disk = sum(p.stat().st_blocks for p in (restored / "vectors").rglob("*") if p.is_file())
    vectors_size = sum(p.stat().st_size for p in (restored / "vectors").rglob("*") if p.is_file())
    assert vectors_on_disk * 512 < vectors_size / 2  # the engine's preallocated files stay sparse


def test_runs_of_blocks_zeros_holes_repeats_and_a_short_tail_restore_byte_for_byte(tmp_path):
    """Blocks are read and restored in runs (``RUN_BLOCKS``) and segments (``SEGMENT_BLOCKS``): a file longer than
    both, with a written block of zeros (not stored), holes, the same block twice, a run across two segments and a
    short last block comes back the same; a byte changed in
    a pack is found by the restore (its block's digest), which writes nothing in place of the file."""
    c = bk.CHUNK_BYTES
    data = make_data_dir(tmp_path / "data", points=20, object_mb=0)
    odd = data / "objects" / "media" / "t" / "odd.bin"
    odd.parent.mkdir(parents=True, exist_ok=True)
    same = os.urandom(c)
    with open(odd, "wb") as f:
        f.write(os.urandom(c * (bk.RUN_BLOCKS + 3)) + bytes(c) + same + same)
        f.seek(c * (bk.SEGMENT_BLOCKS - 2))  # a hole, then a run across the threads' segments
        f.write(os.urandom(c * 4))
        f.seek(c * (bk.SEGMENT_BLOCKS + 40))  # a hole
        f.write(os.urandom(c // 3))  # a short tail
    repo = bk.open_repository(str(tmp_path / "backup"), create=True)
    result = bk.backup(data, repo)
    repo.close()
    assert result.reused_chunks >= 1  # the repeated block is stored once
    restored = tmp_path / "restored"
    bk.restore(bk.open_repository(str(tmp_path / "backup"), create=False), restored)
    assert (restored / "objects/media/t/odd.bin").read_bytes() == odd.read_bytes()
    pack = max((tmp_path / "backup" / "packs").rglob("*.pack"), key=lambda q: q.stat().st_size)
    raw = bytearray(pack.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    pack.write_bytes(bytes(raw))
    with pytest.raises(bk.BackupError, match="is damaged"):
        bk.restore(bk.open_repository(str(tmp_path / "backup"), create=False), tmp_path / "again")


def test_packs_hold_aligned_blocks_and_small_ones_back_to_back(tmp_path):
    """Packs are written past the page cache (``O_DIRECT``): every block starts at a page in its pack, except
    small or unaligned ones (a file's short tail, bytes from a caller), which are gathered back to back and
    padded once; each reads back as it was put, before and after the repository is opened again."""
    try:
        os.close(os.open(tmp_path / "probe", os.O_WRONLY | os.O_CREAT | os.O_DIRECT))
    except OSError:
        pytest.skip(f"the filesystem of {tmp_path} does not take O_DIRECT (packs are written buffered there)")
    c = bk.CHUNK_BYTES
    repo = bk.FolderRepository(tmp_path / "backup", create=True)
    aligned = bk.aligned_buffer(3 * c)
    aligned[:] = os.urandom(3 * c)
    small = [os.urandom(n) for n in (1, 700, 4096, 5000, c)]  # bytes: read-only, so staged whatever their size
    blocks = [memoryview(aligned)[k * c : (k + 1) * c] for k in range(3)]
    put = [(bk.chunk_digest(b), b) for b in [blocks[0], *small[:3], blocks[1], *small[3:], blocks[2]]]
    for i in range(0, len(put), 3):
        repo.put_chunks(put[i : i + 3])
    repo.flush()
    assert all(repo.get_chunk(d) == bytes(b) for d, b in put)
    repo.close()
    again = bk.FolderRepository(tmp_path / "backup", create=False)
    assert all(again.get_chunk(d) == bytes(b) for d, b in put)
    places = [
        line.split() for idx in (tmp_path / "backup" / "packs").rglob("*.idx") for line in idx.read_text().splitlines()
    ]
    offsets = {d: int(off) for d, off, _ in places}
    assert all(offsets[bk.chunk_digest(b)] % bk.DIRECT_ALIGN == 0 for b in blocks)
    # the small ones share pages: 700 bytes right after 1 byte, in the same page
    assert offsets[bk.chunk_digest(small[1])] == offsets[bk.chunk_digest(small[0])] + 1
    pack_bytes = sum(p.stat().st_size for p in (tmp_path / "backup" / "packs").rglob("*.pack"))
    assert pack_bytes < sum(len(b) for _, b in put) + 3 * bk.DIRECT_ALIGN
    again.close()


def test_a_second_backup_writes_only_new_content(tmp_path):
    data = make_data_dir(tmp_path / "data", points=2000, object_mb=4)
    dest = str(tmp_path / "backup")
    full = bk.backup(data, bk.open_repository(dest, create=True))
    same = bk.backup(data, bk.open_repository(dest, create=True))
    assert same.written_bytes == 0 and same.unchanged_files >= 5  # objects not even read again
    store = EdgeVectorStore(data / "vectors")
    store.upsert(OBSERVATIONS, _points(10_000, 20))  # 1 % new points
    store.close()
    (data / "objects" / "media" / "t" / "new.bin").write_bytes(os.urandom(100_000))
    more = bk.backup(data, bk.open_repository(dest, create=True))
    assert 100_000 <= more.written_bytes <= 0.25 * full.written_bytes, (more.written_bytes, full.written_bytes)
    repo = bk.open_repository(dest, create=False)
    assert len(repo.snapshots()) == 3
    bk.restore(repo, tmp_path / "restored")  # the newest
    assert len(EdgeVectorStore(tmp_path / "restored" / "vectors").scroll(OBSERVATIONS, None)) == 2020


def test_a_backup_of_a_newer_engram_is_refused_naming_both_versions(tmp_path):
    data = make_data_dir(tmp_path / "data", points=100, object_mb=1)
    repo = bk.open_repository(str(tmp_path / "backup"), create=True)
    name = bk.backup(data, repo).snapshot
    manifest = json.loads(gzip.decompress((tmp_path / "backup" / "snapshots" / name).read_bytes()))
    manifest.update(engram_version="99.1.0", format=bk.FORMAT_VERSION + 1)
    raw = gzip.compress(json.dumps(manifest).encode())
    newer = f"29990101T000000000000Z-{hashlib.sha256(raw).hexdigest()[:16]}.json.gz"
    (tmp_path / "backup" / "snapshots" / newer).write_bytes(raw)
    with pytest.raises(bk.BackupError, match=rf"engram 99\.1\.0 .*this is engram {bk.engram_version()}"):
        bk.restore(repo, tmp_path / "restored")
    assert not (tmp_path / "restored").exists()
    bk.restore(repo, tmp_path / "restored", snapshot=name)  # the older snapshot still restores


def test_a_backup_of_format_1_with_sha256_blocks_restores_and_a_new_backup_beside_it_is_whole(tmp_path):
    """engram before format 2 named blocks by their SHA-256 (the manifest's ``hash``): such a repository, made
    here from a new backup's blocks as that engram laid them out, restores byte for byte; a backup into it names
    its blocks by BLAKE3 and takes none of the older manifest's entries as unchanged."""
    data = make_data_dir(tmp_path / "data", points=100, object_mb=1)
    new = bk.open_repository(str(tmp_path / "new"), create=True)
    first = bk.backup(data, new)
    _, manifest = bk.load_manifest(new, first.snapshot)
    assert (manifest["format"], manifest["hash"]) == (2, "blake3")
    old = bk.open_repository(str(tmp_path / "old"), create=True)
    entries = []
    for f in manifest["files"]:
        entry = bk.FileEntry.from_json(f)
        blocks = []
        for off, digest in entry.blocks:
            block = new.get_chunk(digest)
            assert bk.chunk_digest(block) == digest
            blocks.append((off, hashlib.sha256(block).hexdigest()))
            old.put_chunk(blocks[-1][1], block)
        entry.blocks, entry.digest = blocks, ""
        entry.digest = entry.tree_digest()
        entries.append(entry)
    bk.write_manifest(old, manifest["source"], entries, manifest["dirs"], format=1, hash="sha256")
    old.close()
    new.close()

    bk.restore(bk.open_repository(str(tmp_path / "new"), create=False), tmp_path / "from-new")
    bk.restore(bk.open_repository(str(tmp_path / "old"), create=False), tmp_path / "from-old")
    assert _files(tmp_path / "from-old") == _files(tmp_path / "from-new")
    again = bk.backup(data, bk.open_repository(str(tmp_path / "old"), create=True))
    # nothing named by SHA-256 taken: every block written again, as into an empty repository
    assert again.unchanged_files == 0 and again.written_bytes == first.written_bytes
    bk.restore(bk.open_repository(str(tmp_path / "old"), create=False), tmp_path / "again")
    assert _files(tmp_path / "again") == _files(tmp_path / "from-new")
    assert _search_ids(tmp_path / "again") == _search_ids(data)


def test_a_non_empty_data_dir_is_refused_and_left_alone(tmp_path):
    data = make_data_dir(tmp_path / "data", points=100, object_mb=1)
    repo = bk.open_repository(str(tmp_path / "backup"), create=True)
    bk.backup(data, repo)
    target = tmp_path / "busy"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(bk.BackupError, match="is not empty .*notes.txt"):
        bk.restore(repo, target)
    assert [p.name for p in target.iterdir()] == ["notes.txt"]
    with pytest.raises(bk.BackupError, match="holds no engram backup"):
        bk.open_repository(str(tmp_path / "nothing"), create=False)


def _engram(*args: str, data_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "ENGRAM_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO)}
    for var in ("ENGRAM_BROKER_URL", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT"):
        env.pop(var, None)
    return subprocess.Popen(
        [sys.executable, "-m", "engram.api.cli", *args, "--quiet"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _kill_when(proc: subprocess.Popen, ready, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"finished before it could be killed: {proc.communicate()}"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.slow
def test_kill_9_during_backup_and_restore_then_the_same_command_completes(tmp_path):
    data = make_data_dir(tmp_path / "data", points=300, object_mb=160)
    dest = tmp_path / "backup"
    backup = _engram("backup", str(dest), data_dir=data)
    _kill_when(backup, lambda: len(list(dest.glob("packs/*/*.idx"))) >= 2)  # 2 of about 5 packs written
    assert list((dest / "snapshots").glob("*.json.gz")) == []  # never taken for a complete backup
    again = _engram("backup", str(dest), data_dir=data)
    assert again.wait(timeout=300) == 0, again.communicate()
    assert len(list((dest / "snapshots").glob("*.json.gz"))) == 1
    assert not list(dest.rglob(".tmp-*")) and not list(data.glob(f"{bk.TMP_PREFIX}*"))  # the killed one's too
    repo = bk.open_repository(str(dest), create=False)
    digests = [line.split()[0] for idx in dest.glob("packs/*/*.idx") for line in idx.read_text().splitlines()]
    assert len(digests) == len(set(digests))  # no block stored twice
    assert all(bk.chunk_digest(repo.get_chunk(d)) == d for d in digests)  # none torn
    repo.close()

    restored = tmp_path / "restored"
    restore = _engram("restore", str(dest), data_dir=restored)
    _kill_when(restore, lambda: len(list((restored / "objects").rglob("*.bin"))) >= 20)
    assert (restored / bk.RESTORE_MARKER).is_file()
    refused = _engram("backup", str(tmp_path / "other"), data_dir=restored)
    assert refused.wait(timeout=120) == 2 and "is not finished" in " ".join(refused.communicate()[1].split())
    again = _engram("restore", str(dest), data_dir=restored)
    assert again.wait(timeout=300) == 0, again.communicate()
    assert not (restored / bk.RESTORE_MARKER).exists() and not list(restored.rglob(f"*{bk.PART_SUFFIX}"))
    before, after = _files(data), _files(restored)
    objects = {k for k in before if k.startswith("objects/")}
    assert {k for k in after if k.startswith("objects/")} == objects  # nothing lost, nothing doubled
    assert all(after[k] == before[k] for k in objects)
    assert _search_ids(restored) == _search_ids(data)


_FULL_DISK = textwrap.dedent("""
    set -e
    mount -t tmpfs -o size=12m engram-test "$DEST_ROOT"
    "$PY" -m engram.api.cli backup "$DEST_ROOT/b" --quiet --json > "$OUT/first.json"
    head -c 16777216 /dev/urandom > "$ENGRAM_DATA_DIR/objects/media/t/big.bin"
    set +e
    "$PY" -m engram.api.cli backup "$DEST_ROOT/b" --quiet 2> "$OUT/second.err"
    echo $? > "$OUT/second.rc"
    set -e
    ls "$DEST_ROOT/b/snapshots" > "$OUT/snapshots.txt"
    find "$DEST_ROOT/b" -name '.tmp-*' > "$OUT/tmp.txt"
    "$PY" -m engram.api.cli --data-dir "$OUT/restored" restore "$DEST_ROOT/b" --quiet --json > "$OUT/restore.json"
""")


@pytest.mark.slow
def test_a_full_disk_during_backup_leaves_the_previous_backup_usable(tmp_path):
    """A real full disk: a 12 MB tmpfs mounted in a private mount namespace (``unshare -rm``: no root needed
    where user namespaces are allowed)."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-rm", "true"], capture_output=True).returncode:
        pytest.skip("cannot make a mount namespace here (unshare -rm) to mount a small tmpfs")
    data = make_data_dir(tmp_path / "data", points=300, object_mb=2)
    (tmp_path / "mnt").mkdir()
    out = tmp_path / "out"
    out.mkdir()
    env = {
        **os.environ,
        "ENGRAM_DATA_DIR": str(data),
        "PYTHONPATH": str(REPO),
        "PY": sys.executable,
        "DEST_ROOT": str(tmp_path / "mnt"),
        "OUT": str(out),
    }
    for var in ("ENGRAM_BROKER_URL", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT"):
        env.pop(var, None)
    run = subprocess.run(
        [unshare, "-rm", "sh", "-c", _FULL_DISK], env=env, cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    first = json.loads((out / "first.json").read_text())
    assert (out / "second.rc").read_text().strip() == "2"
    second_err = " ".join((out / "second.err").read_text().split())
    assert "the disk is full" in second_err and "earlier backups there are untouched" in second_err
    assert "Traceback" not in second_err
    assert (out / "snapshots.txt").read_text().split() == [first["snapshot"]]
    assert (out / "tmp.txt").read_text().strip() == ""
    restored = json.loads((out / "restore.json").read_text())
    assert restored["snapshot"] == first["snapshot"] and restored["files"] == first["files"]
    assert not (out / "restored" / "objects" / "media" / "t" / "big.bin").exists()
    assert _search_ids(out / "restored") == _search_ids(data)


_WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_backup import _points
    from engram.workers.runtime import StoreLease
    from engram.workers.stores.vectors import OBSERVATIONS
    lease = StoreLease(linger=30)  # as `engram capture` and `mcp` hold the store
    deadline = time.monotonic() + float(sys.argv[1])
    batch = 0
    while time.monotonic() < deadline:
        with lease.session() as rt:
            for part in range(5):  # one unit of work: 5 writes of 20 points, a batch of 100
                rt.vectors.upsert(OBSERVATIONS, _points(1000 + batch * 100 + part * 20, 20, batch))
        if batch == 0:
            print("ready", flush=True)
        batch += 1
        time.sleep(1.0)  # capture's next frames come seconds later
    lease.close()
    print(batch)
""")


@pytest.mark.slow
def test_a_store_written_throughout_is_backed_up_between_units_of_work(tmp_path):
    data = make_data_dir(tmp_path / "data", points=100, object_mb=1)
    env = {**os.environ, "ENGRAM_DATA_DIR": str(data), "PYTHONPATH": str(REPO), "ENGRAM_STORE_WAIT_SECONDS": "60"}
    for var in ("ENGRAM_BROKER_URL", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT"):
        env.pop(var, None)
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER.format(tests=str(Path(__file__).parent)), "14"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "ready"  # its first unit of work is done; it lingers between
        time.sleep(1.5)
        repo = bk.open_repository(str(tmp_path / "backup"), create=True)
        result = bk.backup(data, repo, wait=60)
        out, errs = writer.communicate(timeout=120)
    finally:
        writer.kill()
    assert writer.returncode == 0, errs[-3000:]
    assert result.store_held_seconds < 10
    bk.restore(repo, tmp_path / "restored")
    store = EdgeVectorStore(tmp_path / "restored" / "vectors")
    points = store.scroll(OBSERVATIONS, None)
    store.close()
    batches: dict[int, int] = {}
    for p in points:
        if p.payload["seq"] >= 1000:
            batches[p.payload["batch"]] = batches.get(p.payload["batch"], 0) + 1
    assert batches and all(n == 100 for n in batches.values()), batches  # whole units of work only
    assert sorted(batches) == list(range(len(batches)))  # a prefix of what was written
    assert int(out.split()[-1]) > len(batches)  # the writer went on after the backup


def test_a_backup_holds_the_store_by_its_lock_alone_as_the_engine_does(tmp_path):
    """The backup takes the store's file lock without the vector engine (a command starts faster): the same lock
    and request file as ``EdgeVectorStore.hold``, so a process holding the store keeps the backup out (StoreBusy
    after ``wait``, its request file removed), and the store's holder cannot open a shard while the backup holds it."""
    from engram.workers.stores import vectors

    assert bk.WANTED_SUFFIX == vectors.WANTED_SUFFIX
    data = make_data_dir(tmp_path / "data", points=20, object_mb=1)
    store = EdgeVectorStore(data / "vectors")
    store.hold()
    try:
        repo = bk.open_repository(str(tmp_path / "backup"), create=True)
        with pytest.raises(vectors.StoreBusy, match="waited 0.3 s"):
            bk.backup(data, repo, wait=0.3)
        assert not list(data.glob("vectors.wanted-*")) and not repo.snapshots()
    finally:
        store.close()
    hold = bk._StoreHold(data / "vectors", wait=0.0)
    hold.hold()
    try:
        with pytest.raises(vectors.StoreBusy):
            EdgeVectorStore(data / "vectors").hold(wait=False)
    finally:
        hold.close()
    result = bk.backup(data, repo)
    repo.close()
    assert result.files and result.store_held_seconds < 5


def test_a_backup_to_s3_is_incremental_and_restores(tmp_path, seaweedfs_s3):
    data = make_data_dir(tmp_path / "data", points=200, object_mb=2)
    s3 = {
        "endpoint": seaweedfs_s3.endpoint,
        "access_key": seaweedfs_s3.access_key,
        "secret_key": seaweedfs_s3.secret_key,
    }
    dest = f"s3://engram-backups/{uuid.uuid4().hex[:8]}/laptop"
    first = bk.backup(data, bk.open_repository(dest, create=True, s3=s3))
    second = bk.backup(data, bk.open_repository(dest, create=True, s3=s3))
    assert first.written_bytes > 2 << 20 and second.written_bytes == 0
    repo = bk.open_repository(dest, create=False, s3=s3)
    assert len(repo.snapshots()) == 2
    bk.restore(repo, tmp_path / "restored")
    before, after = _files(data), _files(tmp_path / "restored")
    assert all(after[k] == before[k] for k in before if k.startswith(("objects/", "vectors/")))
    assert _search_ids(tmp_path / "restored") == _search_ids(data)
    with pytest.raises(bk.BackupError, match="holds no engram backup"):
        bk.open_repository("s3://engram-backups/none", create=False, s3=s3)
