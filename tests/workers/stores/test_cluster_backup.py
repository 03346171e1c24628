"""The parts of the distributed mode's backup that need no worker process (``workers.stores.cluster_backup``): the
Redis keys dumped and restored byte for byte with their time to live (a real redis-server), the objects of a folder
object store cut into blocks and reused unchanged by a second backup, a manifest's source without a password.
The whole, with worker processes: tests/integration/test_cluster_backup.py."""

from __future__ import annotations

import os

import redis

from engram.schemas.settings import Settings
from engram.workers.stores.backup import FolderRepository, Tally
from engram.workers.stores.cluster_backup import (
    REDIS_PREFIX,
    RESTORE_KEY,
    _ObjectPass,
    describe,
    dump_redis,
    load_redis,
)
from engram.workers.stores.objects import LocalObjectStore


def test_the_redis_keys_come_back_as_they_were_with_their_ttl(redis_server):
    base = redis_server.rsplit("/", 1)[0]
    src, dest = f"{base}/5", f"{base}/6"  # databases no other test uses
    a, b = redis.Redis.from_url(src), redis.Redis.from_url(dest)
    a.flushdb()
    b.flushdb()
    a.hset(f"{REDIS_PREFIX}event:1", mapping={"status": "done", "tenant_id": "t"})
    a.zadd(f"{REDIS_PREFIX}tenant:t:events", {"1": 1.5, "2": 2.5})
    a.set(f"{REDIS_PREFIX}apikey:abc", b"\x00\xffbytes", ex=3600)
    a.set("celery-task-meta-x", "not engram's")  # the broker's and result backend's keys are not copied
    a.set(RESTORE_KEY, "not copied either")
    data = dump_redis(src, batch=2)
    assert load_redis(dest, data) == 3
    assert sorted(b.keys("*")) == sorted(k for k in a.keys("*") if k.startswith(REDIS_PREFIX.encode()))
    assert b.hgetall(f"{REDIS_PREFIX}event:1") == {b"status": b"done", b"tenant_id": b"t"}
    assert b.zrange(f"{REDIS_PREFIX}tenant:t:events", 0, -1, withscores=True) == [(b"1", 1.5), (b"2", 2.5)]
    assert b.get(f"{REDIS_PREFIX}apikey:abc") == b"\x00\xffbytes" and 3500 < b.ttl(f"{REDIS_PREFIX}apikey:abc") <= 3600
    assert load_redis(dest, data) == 3  # again (a resumed restore): replaced, not refused


def test_folder_objects_are_cut_into_blocks_and_a_second_pass_reuses_them(tmp_path):
    objects = LocalObjectStore(tmp_path / "objects")
    payloads = {"media/t/a.png": os.urandom(200_000), "media/t/b.wav": b"\0" * 70_000 + b"end", "thumbs/t/c": b"x"}
    for key, data in payloads.items():
        objects.put_bytes(key, data)
    (tmp_path / "objects" / "media" / "t" / ".tmp-partial").write_bytes(b"a writer's temporary file")
    repo = FolderRepository(tmp_path / "repo", create=True)
    try:
        tally = Tally()
        entries, gone = _ObjectPass(objects, repo, {}, tally, lambda *a: None).run()
        assert not gone and sorted(e.path for e in entries) == sorted(f"objects/{k}" for k in payloads)
        repo.flush()
        for e in entries:
            data = bytearray(e.size)  # a block left out (all zeros) stays zeros
            for off, digest in e.blocks:
                chunk = repo.get_chunk(digest)
                data[off : off + len(chunk)] = chunk
            assert bytes(data) == payloads[e.path.removeprefix("objects/")]
        again = Tally()
        second, _ = _ObjectPass(objects, repo, {e.path: e for e in entries}, again, lambda *a: None).run()
        assert again.unchanged_files == 3 and again.written_bytes == 0 and again.read_bytes == 0
        assert [e.to_json() for e in sorted(second, key=lambda e: e.path)] == [
            e.to_json() for e in sorted(entries, key=lambda e: e.path)
        ]
    finally:
        repo.close()


def test_a_manifest_names_the_cluster_without_its_password():
    got = describe(
        Settings(broker_url="redis://:hunter2@redis.example:6380/4", s3_endpoint="s3:9000", s3_bucket="engram")
    )
    assert "hunter2" not in got and "redis://redis.example:6380/4" in got and "s3://engram@s3:9000" in got
