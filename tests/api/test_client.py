"""The producer SDK, ``engram publish`` and the folder watcher against the API served by uvicorn on a real
redis-server and SeaweedFS S3 (uploads go to SeaweedFS through presigned URLs)."""

from __future__ import annotations

import os
import threading
import time
import uuid

import httpx
import pytest

from engram.api.client import AsyncEngramClient, EngramAPIError, EngramClient, NotMedia
from engram.schemas.events import EventStatus, MediaKind
from tests.api.conftest import chat_jsonl, png_bytes, queue_length, wav_bytes

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def files(tmp_path):
    """Three small real media files of different kinds, unique to the test."""
    salt = uuid.uuid4().int % 10_000
    folder = tmp_path / "media"
    folder.mkdir()
    (folder / "shot.png").write_bytes(png_bytes(seed=salt))
    (folder / "memo.wav").write_bytes(wav_bytes(freq=300 + salt % 500))
    (folder / "chat.jsonl").write_bytes(chat_jsonl([("alice", f"note {salt}"), ("bob", "ok")]))
    return folder


def test_publish_three_files_then_republish_skips_uploads(api_server, api_keys, api_redis, files):
    paths = sorted(files.iterdir())
    before = queue_length(api_redis)
    with EngramClient(api_server, api_keys["acme"], user="alice", device="laptop") as client:
        first = [client.publish(p) for p in paths]
        assert all(r.uploaded and not r.duplicate and r.status is EventStatus.queued for r in first)
        assert queue_length(api_redis) == before + 3
        kinds = {p.name: client.event_status(r.event_id).kind.value for p, r in zip(paths, first, strict=True)}
        assert kinds == {"chat.jsonl": "text", "memo.wav": "audio", "shot.png": "screenshot"}

        again = [client.publish(p) for p in paths]
        assert [r.event_id for r in again] == [r.event_id for r in first]
        assert not any(r.uploaded for r in again) and all(r.duplicate for r in again)
        assert queue_length(api_redis) == before + 3

        assert client.publish_file(paths[0]) == first[0].event_id
        (files / "notes.txt").write_text("not media")
        with pytest.raises(NotMedia):
            client.publish(files / "notes.txt")
        os.mkfifo(files / "pipe.png")  # even said to be a screenshot, a FIFO is not opened (it would block)
        with pytest.raises(NotMedia, match="not a regular file"):
            client.publish(files / "pipe.png", kind=MediaKind.screenshot)
        (files / "pipe.png").unlink()

    # another device publishing the same bytes: no upload, but a new event
    with EngramClient(api_server, api_keys["acme"], user="alice", device="phone") as client:
        other = client.publish(paths[0])
        assert not other.uploaded and not other.duplicate and other.event_id != first[0].event_id


def test_async_client_publishes_files_like_the_sync_one(api_server, api_keys, api_redis, files):
    """AsyncEngramClient.publish: detection, a staged upload through the presigned URL (a 2.4 MB WAV streamed
    in 1 MiB blocks; the API verifies size and sha256 at publish), the event; the same event ids as the sync
    client's, so publishing again from either is a no-op."""
    import anyio

    (files / "long.wav").write_bytes(wav_bytes(seconds=75, freq=523))
    paths = sorted(files.iterdir())
    before = queue_length(api_redis)

    async def run() -> list:
        async with AsyncEngramClient(api_server, api_keys["acme"], user="alice", device="tablet") as aio:
            first = [await aio.publish(p) for p in paths]
            again = [await aio.publish(p) for p in paths]
            kinds = [(await aio.event_status(r.event_id)).kind.value for r in first]
            with pytest.raises(NotMedia):
                await aio.publish(_write(files / "readme.txt", "not media"))
            assert await aio.publish_file(paths[0]) == first[0].event_id
            return first, again, kinds

    first, again, kinds = anyio.run(run)
    assert kinds == ["text", "audio", "audio", "screenshot"]  # chat.jsonl, long.wav, memo.wav, shot.png
    assert first[1].size > 2_000_000 and all(r.uploaded and not r.duplicate for r in first)
    assert all(r.duplicate and not r.uploaded for r in again)
    assert [r.event_id for r in again] == [r.event_id for r in first]
    assert queue_length(api_redis) == before + 4
    with EngramClient(api_server, api_keys["acme"], user="alice", device="tablet") as sync:
        assert sync.publish(paths[1]).event_id == first[1].event_id and queue_length(api_redis) == before + 4


def _write(path, text: str):
    path.write_text(text)
    return path


def test_status_wait_and_tenant_scope(api_server, api_keys, api_settings, files):
    from engram.workers.stores.ledger import RedisLedger

    with EngramClient(api_server, api_keys["acme"]) as client:
        eid = client.publish_file(files / "shot.png")
        assert client.event_status(eid).status is EventStatus.queued
        with pytest.raises(TimeoutError, match="1 of 1"):
            client.wait([eid], timeout=0.3, interval=0.1)
        RedisLedger(api_settings.broker_url).mark(eid, EventStatus.failed, stage="ingest", reason="test reason")
        final = client.wait([eid], timeout=5, interval=0.1)
        assert final[eid].status is EventStatus.failed and final[eid].reason == "test reason"
    with EngramClient(api_server, api_keys["globex"], retries=1) as other:
        with pytest.raises(EngramAPIError) as info:
            other.event_status(eid)
        assert info.value.status == 404


def test_retries_transient_errors_with_backoff_and_gives_up():
    calls = []

    def flaky(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) < 3:
            return httpx.Response(503, json={"detail": "queue unavailable, try again"})
        return httpx.Response(
            200,
            json={
                "event_id": str(uuid.uuid4()),
                "kind": "text",
                "status": "done",
                "updated_at": "2024-05-01T12:00:00Z",
            },
        )

    client = EngramClient("http://engram.test", "egk_x", retries=4, backoff=0.01, transport=httpx.MockTransport(flaky))
    assert client.event_status(uuid.uuid4()).status is EventStatus.done
    assert len(calls) == 3

    calls.clear()
    refused = EngramClient(
        "http://engram.test",
        "egk_x",
        retries=4,
        backoff=0.01,
        transport=httpx.MockTransport(
            lambda r: (
                calls.append(1)
                or httpx.Response(422, json={"detail": [{"loc": ["body", "x"], "msg": "bad", "type": "t"}]})
            )
        ),
    )
    with pytest.raises(EngramAPIError) as info:
        refused.event_status(uuid.uuid4())
    assert info.value.status == 422 and len(calls) == 1  # client errors are not retried

    from tests.servers import free_ports

    (closed,) = free_ports(1)
    t0 = time.monotonic()
    with EngramClient(f"http://127.0.0.1:{closed}", "egk_x", retries=3, backoff=0.05) as down:
        with pytest.raises(httpx.ConnectError):
            down.event_status(uuid.uuid4())
    assert 0.1 < time.monotonic() - t0 < 5  # two waits of 0.05 s and 0.1 s between three attempts


def test_cli_publish_is_resumable(api_server, api_keys, api_redis, files):
    from typer.testing import CliRunner

    from engram.api.cli.main import app as cli

    (files / "notes.txt").write_text("not media")
    runner = CliRunner()
    env = {"ENGRAM_API_URL": api_server, "ENGRAM_API_KEY": api_keys["globex"]}
    before = queue_length(api_redis)
    first = runner.invoke(cli, ["publish", str(files), "--user", "carol", "--device", "desk"], env=env)
    assert first.exit_code == 0, first.output
    assert "3 published (3 uploaded, 0 already stored, 0 published before), 1 not media" in first.stdout
    assert queue_length(api_redis) == before + 3
    again = runner.invoke(cli, ["publish", str(files), "--user", "carol", "--device", "desk"], env=env)
    assert "3 published (0 uploaded, 3 already stored, 3 published before)" in again.stdout
    assert queue_length(api_redis) == before + 3

    bad = runner.invoke(
        cli,
        ["publish", str(files / "shot.png"), "--api", api_server, "--api-key", "egk_wrong"],
        env={"ENGRAM_API_URL": "", "ENGRAM_API_KEY": ""},
    )
    assert bad.exit_code == 1 and "HTTP 401" in bad.stderr


def test_watch_publishes_new_files_once_complete(api_server, api_keys, api_redis, tmp_path):
    from engram.api.capture.watch import FolderWatcher

    folder = tmp_path / "shots"
    folder.mkdir()
    published, errors = [], []
    before = queue_length(api_redis)
    with EngramClient(api_server, api_keys["acme"], device="watcher") as client:
        # settle 1.5 s against a 0.2 s pause in the write: a loaded machine may stretch the pause, not by 1.3 s
        ready = threading.Event()
        watcher = FolderWatcher(
            folder,
            lambda p: published.append((p, client.publish(p))),
            settle=1.5,
            poll=0.05,
            on_error=lambda p, e: errors.append((p, e)),
            on_ready=ready.set,
        )
        stop = threading.Event()
        thread = threading.Thread(target=watcher.run, args=(stop,))
        thread.start()
        try:
            assert ready.wait(30)  # the observer is watching
            data = png_bytes(seed=uuid.uuid4().int % 10_000)
            with open(folder / "shot.png", "wb") as fh:  # written in two steps, 0.2 s apart
                fh.write(data[: len(data) // 2])
                fh.flush()
                time.sleep(0.2)
                assert not published  # not stable yet
                fh.write(data[len(data) // 2 :])
            (folder / "download.png.part").write_bytes(data)  # in-progress names are ignored
            (folder / "notes.txt").write_text("not media")
            deadline = time.monotonic() + 20
            while not (published and errors) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(2.0)  # nothing else arrives (longer than settle)
        finally:
            stop.set()
            thread.join(timeout=10)
        assert not thread.is_alive()
    assert [p.name for p, _ in published] == ["shot.png"]
    assert published[0][1].size == len(data) and published[0][1].uploaded
    assert [p.name for p, _ in errors] == ["notes.txt"] and isinstance(errors[0][1], NotMedia)
    assert queue_length(api_redis) == before + 1


def test_watch_command_publishes_and_stops_on_ctrl_c(api_server, api_keys, api_redis, tmp_path):
    """``engram watch`` as a user runs it: a new file is published; SIGINT (Ctrl-C) ends it cleanly."""
    import os
    import select
    import signal
    import subprocess
    import sys

    folder = tmp_path / "recorder"
    folder.mkdir()
    env = {**os.environ, "ENGRAM_API_URL": api_server, "ENGRAM_API_KEY": api_keys["acme"], "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram.api.cli", "watch", str(folder), "--settle", "0.3", "--device", "recorder"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    printed = ""
    try:
        ready = select.select([proc.stderr], [], [], 120)[0] and proc.stderr.readline()  # imports: slow when loaded
        assert ready and ready.startswith("watching"), ready  # printed once the observer runs
        before = queue_length(api_redis)
        (folder / "memo.wav").write_bytes(wav_bytes(freq=1000 + uuid.uuid4().int % 10**6 / 1000))
        deadline = time.monotonic() + 60
        while queue_length(api_redis) == before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert queue_length(api_redis) == before + 1
        # the event is enqueued before the CLI has its response: wait for its line before Ctrl-C
        printed = ""
        while "memo.wav" not in printed and time.monotonic() < deadline + 60:
            if select.select([proc.stdout], [], [], 1)[0]:
                printed += proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    out = printed + out
    assert "published" in out and "memo.wav (uploaded)" in out, out
    assert proc.returncode == 0, err
    assert "stopped" in err
