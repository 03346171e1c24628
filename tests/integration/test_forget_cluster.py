"""Deletion leaves nothing behind (issue 44) in the distributed mode, on the test cluster of
tests/integration/test_api_cluster.py: a redis-server of the test's own with AOF (``appendfsync always``), SeaweedFS
S3, ``engram worker`` processes (a cpu worker and the store worker owning the Qdrant Edge shards in its data dir)
and the API in a thread. Through the SDK: a distinctive chat sentence between two kept ones, a distinctive
screenshot (app Ledgerly) beside a kept one (app Firefox), and another user's chat, consolidated; then forgotten by
id and by scope (``POST /v1/forget``, SDK ``forget``) and a whole user (``forget_user``). After each, search does
not return them, the kept items are still found, and no byte of the deleted text or screenshot is left in

- every file under the data dir (the store's shards: write-ahead logs and segments; caches),
- Redis: every key's value (read by type) and the append-only files on disk (engram's forget rewrites them:
  ``workers.memory.forget.rewrite_redis``),
- S3: the bucket's objects (listed and read back),
- the workers' logs.

What the object store does with deleted objects' bytes is its own (SeaweedFS keeps a deleted needle in its volume
file until a vacuum; AWS S3's deletion is the provider's): the test says whether SeaweedFS's volume files still
hold them, and asserts nothing about it (docs/keep.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis

from engram.schemas.events import EventStatus
from engram.schemas.memories import MemoryType
from tests.integration.test_api_cluster import make_stack, wait_final  # noqa: F401 (a fixture)
from tests.workers.memory.test_forget_nowhere import (
    BOBS,
    GONE,
    KEPT,
    KEPT_TOO,
    MAY,
    SHOT_LINES,
    found_in,
    persisted,
    write_inputs,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

USER, OTHER = "alice", "bob"


def redis_blobs(url: str, aof_dir: Path) -> dict[str, bytes]:
    """Every key's value of every database of the Redis server at ``url``, read by its type (a DUMP compresses
    long strings), by key; and each file of its data dir (``aof_dir``: the append-only files), by path."""
    r = redis.Redis.from_url(url)
    out: dict[str, bytes] = {}
    try:
        dbs = [int(k[2:]) for k in r.info("keyspace")]
        for db in dbs:
            c = redis.Redis.from_url(url.rsplit("/", 1)[0] + f"/{db}")
            for key in c.scan_iter(count=1000):
                value = _value(c, key)
                out[f"redis {db} {key.decode(errors='replace')}"] = repr(value).encode() + (
                    value if isinstance(value, bytes) else b""
                )
            c.close()
    finally:
        r.close()
    out |= {str(p): p.read_bytes() for p in aof_dir.rglob("*") if p.is_file() and p.suffix != ".log"}
    return out


def _value(c: redis.Redis, key: bytes):
    """A key's value, read by its type."""
    kind = c.type(key).decode()
    if kind == "string":
        return c.get(key)
    if kind == "hash":
        return c.hgetall(key)
    if kind == "list":
        return c.lrange(key, 0, -1)
    if kind == "set":
        return c.smembers(key)
    if kind == "zset":
        return c.zrange(key, 0, -1, withscores=True)
    return c.xrange(key) if kind == "stream" else c.dump(key)


def s3_blobs(settings) -> dict[str, bytes]:
    """Every object of the cluster's bucket, by key."""
    from minio import Minio

    s3 = Minio(settings.s3_endpoint, settings.s3_access_key, settings.s3_secret_key, secure=False)
    out = {}
    for o in s3.list_objects(settings.s3_bucket, recursive=True):
        resp = s3.get_object(settings.s3_bucket, o.object_name)
        try:
            out[f"s3 {o.object_name}"] = resp.read()
        finally:
            resp.close()
            resp.release_conn()
    return out


def everywhere(stack, redis_proc) -> dict[str, bytes]:
    """The data dir's files, Redis (keys and AOF), the bucket's objects and the workers' logs."""
    logs = {f"log {p.name}": p.read_bytes() for p in (stack.cluster.root / "logs").glob("*.log")}
    return {
        **persisted(stack.settings.data_dir),
        **redis_blobs(redis_proc.url, redis_proc.data),
        **s3_blobs(stack.settings),
        **logs,
    }


def searched(client, query: str, user: str | None = None) -> str:
    """Every hit of ``query`` over every memory type, as JSON."""
    return json.dumps(
        [
            h.model_dump(mode="json")
            for h in client.search(query, user=user, memory_types=list(MemoryType), limit=50).hits
        ]
    )


def publish_all(stack, client, folder: Path) -> dict[str, object]:
    """Alice's chat (the sentence to delete between two kept ones), her screenshot to delete (Ledgerly) and one to
    keep (Firefox), captured in May 2024; Bob's chat. Waited for, then consolidated on the store worker."""
    chat, shot, kept_shot, bob = write_inputs(folder)
    events = [
        client.publish(chat, user=USER, device="laptop").event_id,
        client.publish(shot, user=USER, device="laptop", captured_at=MAY, app="Ledgerly").event_id,
        client.publish(kept_shot, user=USER, device="laptop", captured_at=MAY, app="Firefox").event_id,
        client.publish(bob, user=OTHER, device="phone").event_id,
    ]
    final = wait_final(stack, client, events, timeout=150)
    assert all(s.status is EventStatus.done for s in final.values()), final
    for user in (USER, OTHER):
        stack.app.send_task("workers.consolidate.consolidate_user", args=[stack.tenant, user]).get(timeout=120)
    return {"events": events, "shot": shot}


def check_gone(stack, redis_proc, needles: list[bytes], kept: list[bytes]) -> dict[str, bytes]:
    """No needle anywhere (the data dir, Redis, S3, logs); every ``kept`` one somewhere. Returns what was read."""
    blobs = everywhere(stack, redis_proc)
    left = found_in(blobs, needles)
    assert not left, left
    assert all(found_in(blobs, [k]) for k in kept), [k for k in kept if not found_in(blobs, [k])]
    return blobs


def seaweed_holds(tmp_path_factory, needles: list[bytes]) -> list[tuple[str, str]]:
    """Which of ``needles`` SeaweedFS's own volume files still hold (its deletion marks needles, a vacuum drops
    them): reported, not asserted."""
    root = Path(tmp_path_factory.getbasetemp())
    blobs = {str(p): p.read_bytes() for d in root.glob("seaweedfs*/data") for p in d.rglob("*.dat")}
    return found_in(blobs, needles)


@pytest.fixture
def info_logs():
    """engram's logging at info level for the test (an in-process CLI or bench run earlier in the session may have
    left warnings only, and the API's log lines would not reach the capture), put back as it was after."""
    import logging

    import structlog

    from engram.workers.logs import configure_logging

    old = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    configure_logging(logging.INFO)
    yield
    structlog.configure(**old)
    root.handlers[:] = handlers
    root.setLevel(level)


def test_forgotten_items_are_nowhere_on_the_cluster(
    make_stack,  # noqa: F811
    restartable_redis,
    tmp_path,
    tmp_path_factory,
    info_logs,
    capsys,
):
    t0 = time.monotonic()
    stack = make_stack(restartable_redis.url, "forgetc", cpu_workers=1, beat=False)
    with stack.client() as client:
        got = publish_all(stack, client, tmp_path)
        hits = client.search(
            "zebra quokka treaty violet lighthouse", user=USER, memory_types=[MemoryType.observation]
        ).hits
        gone_id = next(h.id for h in hits if GONE in h.text)
        shot_hit = next(
            h
            for h in client.search(
                "invoice approved by Marguerite Okonkwo", user=USER, memory_types=[MemoryType.observation]
            ).hits
            if "Marguerite" in h.text
        )
        assert "Halvorsen" in shot_hit.text, shot_hit.text
        png = Path(got["shot"]).read_bytes()
        words = " ".join(SHOT_LINES).split()  # the screenshot's words as OCR read them (not the app's name)
        shot_needles = [w.encode() for w in shot_hit.text.split() if len(w) >= 8 and w in words] + [
            png[len(png) // 2 : len(png) // 2 + 48]
        ]
        assert len(shot_needles) >= 4, shot_hit.text
        episodes = searched(client, "lunch with Priya, passport renewal, treaty", USER)
        assert GONE in episodes, episodes  # the episode quotes the sentence
        before = everywhere(stack, restartable_redis)
        for needle in (GONE.encode(), BOBS.encode(), shot_needles[0], shot_needles[-1]):
            assert found_in(before, [needle]), needle  # the test can see them
        where = [w for _, w in found_in(before, [GONE.encode()])]
        assert any(w.startswith(str(restartable_redis.data)) for w in where), where  # the AOF holds it
        assert any(w.startswith(str(stack.settings.data_dir)) for w in where), where  # and the store's files
        published = time.monotonic() - t0

        # 1. by id: the chat message; its episode rewritten with the kept messages only
        took = [time.monotonic()]
        report = client.forget(memory_ids=[gone_id])
        took[0] = time.monotonic() - took[0]
        assert report.observations == 1, report
        check_gone(stack, restartable_redis, [GONE.encode(), b"violet lighthouse"], [KEPT.encode()])
        assert "violet lighthouse" not in searched(client, "zebra quokka treaty lighthouse")
        assert KEPT in searched(client, "lunch with Priya Thai place", USER)

        # 2. by scope: the application, its screenshot's objects, OCR cache and resource memory
        took.append(time.monotonic())
        report = client.forget(app="Ledgerly")
        took[-1] = time.monotonic() - took[-1]
        assert report.observations == 1 and report.objects_deleted, report
        check_gone(stack, restartable_redis, shot_needles, [KEPT.encode()])
        assert "Marguerite" not in searched(client, "invoice approved by Marguerite Okonkwo")
        assert "Quarterly roadmap" in searched(client, "quarterly roadmap review design", USER)

        # 3. a whole user
        took.append(time.monotonic())
        report = client.forget_user(OTHER)
        took[-1] = time.monotonic() - took[-1]
        assert report.event_ids, report
        blobs = check_gone(
            stack, restartable_redis, [BOBS.encode(), b"ceramic hedgehog"], [KEPT.encode(), KEPT_TOO.encode()]
        )
        assert "hedgehog" not in searched(client, "spare garage key ceramic hedgehog")
        assert KEPT in searched(client, "lunch with Priya", USER)
    # (the searches above, sent after each check, put their own queries in Redis's AOF: not asserted on)
    deleted = [GONE.encode(), BOBS.encode(), *shot_needles]
    captured = capsys.readouterr()  # the API's log lines (it runs in this process)
    api_log = {"api log": (captured.out + captured.err).encode()}
    assert b"event published" in api_log["api log"]
    assert not found_in(api_log, [GONE.encode(), BOBS.encode(), b"Halvorsen"]), found_in(api_log, deleted)
    print(
        f"\nforgotten on the cluster: nothing left in {len(blobs)} files, keys and objects; SeaweedFS's volume "
        f"files still hold {len(seaweed_holds(tmp_path_factory, deleted))} of the deleted needles until its "
        f"vacuum; published {published:.1f} s, forgets took {', '.join(f'{t:.1f}' for t in took)} s, "
        f"total {time.monotonic() - t0:.1f} s"
    )


def test_a_redis_snapshot_is_taken_again_after_a_forget(tmp_path):
    """A Redis that persists by RDB snapshots (``save`` rules, AOF off): ``rewrite_redis`` takes a new snapshot, so
    ``dump.rdb`` no longer holds a deleted key's value; a Redis with neither is left alone."""
    import shutil
    import subprocess

    from engram.workers.memory.forget import rewrite_redis
    from tests.servers import free_ports

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server not installed (scripts/setup.sh installs it)")
    (port,) = free_ports(1)
    proc = subprocess.Popen(
        [
            binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(tmp_path),
            "--appendonly",
            "no",
            "--save",
            "3600 1",
            "--rdbcompression",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"redis://127.0.0.1:{port}/0"
        r = redis.Redis.from_url(url)
        deadline = time.monotonic() + 20
        while True:
            try:
                r.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
        r.set("k", GONE)
        r.set("kept", KEPT)
        r.save()
        assert GONE.encode() in (tmp_path / "dump.rdb").read_bytes()
        r.delete("k")
        assert rewrite_redis(url) == ["rdb"]
        dump = (tmp_path / "dump.rdb").read_bytes()
        assert GONE.encode() not in dump and KEPT.encode() in dump
        r.config_set("save", "")
        assert rewrite_redis(url) == []
        r.close()
    finally:
        proc.kill()
        proc.wait(timeout=10)
