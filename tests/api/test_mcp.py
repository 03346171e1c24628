"""``engram mcp`` through the MCP SDK's own stdio client against a real server process on the embedded default:
the tools are listed with their schemas, a memory is added, found by search (through MCP, and by ``engram search``
in another process while the server runs), named entities and errors answer as errors, and the memory is deleted.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from tests.conftest import REPO, cli_env, run_cli

pytest.importorskip("mcp")

FACT = "The blue notebook with the vendor contracts is in the second drawer of the oak desk"
SECOND = "The car is parked on level minus three of the parking garage, spot 47"


def _env(root) -> dict[str, str]:
    return cli_env(root)


_cli = run_cli


@pytest.mark.slow
def test_mcp_server_over_stdio_adds_finds_and_deletes_while_the_cli_uses_the_store(tmp_path):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    data = tmp_path / "data"
    env = _env(tmp_path)
    params = StdioServerParameters(
        command=sys.executable,
        cwd=str(REPO),
        env=env,
        args=["-m", "engram.api.cli", "mcp", "--data-dir", str(data), "--user", "alice"],
    )
    timings: dict[str, float] = {}

    async def session() -> None:
        async with Client(params, read_timeout_seconds=600) as client:
            await _exercise(client, data, env, timings)

    anyio.run(session)
    print(f"MCP add → searchable: {timings['add']:.2f} s (add_memory), {timings['search']:.2f} s (search)")


async def _exercise(client, data, env, timings) -> None:
    listed = await client.list_tools()
    tools = {t.name: t for t in listed.tools}
    assert set(tools) == {
        "search",
        "ask",
        "add_memory",
        "list_memories",
        "get_memory",
        "delete_memory",
        "forget",
        "update_memory",
        "list_entities",
        "name_entity",
    }
    assert tools["forget"].annotations.destructive_hint is True and not tools["forget"].annotations.read_only_hint
    assert {"since", "until", "app", "device_id", "memory_ids", "dry_run"} <= set(
        tools["forget"].input_schema["properties"]
    )
    assert {"query", "user_id", "limit", "kinds", "time_from", "entities"} <= set(
        tools["search"].input_schema["properties"]
    )
    assert "tenant_id" not in tools["search"].input_schema["properties"]
    assert {"text", "messages", "user_id", "id", "time", "source"} <= set(
        tools["add_memory"].input_schema["properties"]
    )

    t0 = time.perf_counter()
    added = await client.call_tool("add_memory", {"text": FACT, "id": "note-1", "source": "test-agent"})
    timings["add"] = time.perf_counter() - t0
    assert not added.is_error, added.content[0].text
    assert added.structured_content["status"] == "done" and added.structured_content["observations"] >= 1
    again = await client.call_tool("add_memory", {"text": FACT, "id": "note-1"})
    assert again.structured_content["duplicate"] is True

    # the server holds the store only during a call: another process searches it meanwhile
    out = await anyio.to_thread.run_sync(lambda: _cli(env, data, "search", "oak desk drawer", "--user", "alice"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "second drawer of the oak desk" in out.stdout

    t0 = time.perf_counter()
    found = await client.call_tool(
        "search", {"query": "where are the vendor contracts?", "user_id": "alice", "limit": 5}
    )
    timings["search"] = time.perf_counter() - t0
    assert not found.is_error, found.content[0].text
    assert FACT in found.content[0].text
    hit = next(h for h in found.structured_content["hits"] if h["memory_type"] == "observation")

    got = await client.call_tool("get_memory", {"memory_id": hit["id"]})
    assert FACT in got.content[0].text
    page = await client.call_tool("list_memories", {"memory_type": "observation", "user_id": "alice"})
    assert page.structured_content["total"] == 1

    bad = await client.call_tool("search", {"query": ""})
    assert bad.is_error and "query" in bad.content[0].text
    unknown = await client.call_tool(
        "name_entity", {"entity_id": "00000000-0000-4000-8000-000000000000", "name": "Maria"}
    )
    assert unknown.is_error and "no entity" in unknown.content[0].text

    deleted = await client.call_tool("delete_memory", {"memory_id": hit["id"]})
    assert not deleted.is_error and "Deleted observation" in deleted.content[0].text
    after = await client.call_tool(
        "search", {"query": "where are the vendor contracts?", "user_id": "alice", "memory_types": ["observation"]}
    )
    assert FACT not in after.content[0].text
    everywhere = await client.call_tool(
        "search",
        {"query": "where are the vendor contracts?", "user_id": "alice", "memory_types": ["observation", "episodic"]},
    )
    assert "oak desk" not in everywhere.content[0].text  # the episodic memory quoting it went with it

    # forget by time: a dry run says what would go, then it goes
    since = (datetime.now(UTC) - timedelta(minutes=10)).isoformat()
    await client.call_tool("add_memory", {"text": SECOND, "id": "note-2"})
    nothing = await client.call_tool("forget", {"dry_run": True})
    assert nothing.is_error and "name what to forget" in nothing.content[0].text
    dry = await client.call_tool("forget", {"since": since, "dry_run": True})
    assert not dry.is_error and dry.structured_content["dry_run"] and dry.structured_content["observations"] == 1
    assert "Would forget" in dry.content[0].text
    gone = await client.call_tool("forget", {"since": since})
    assert not gone.is_error and gone.structured_content["observations"] == 1, gone.content[0].text
    left = await client.call_tool(
        "search", {"query": "parking garage level", "user_id": "alice", "memory_types": ["observation", "episodic"]}
    )
    assert "minus three" not in left.content[0].text and left.structured_content["hits"] == []


def test_an_embedded_mcp_server_loads_the_search_models_before_the_first_call_without_the_store(tmp_path):
    """The embedder and the time-expression parser load as the stdio server starts (an agent's first search does
    not wait ~2-8 s for them), and the store is not opened for it: other engram commands keep it."""
    import select

    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram.api.cli", "-v", "mcp", "--data-dir", str(data)],
        env=_env(tmp_path),
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wanted, seen = {"text embedder loaded", "time-expression parser loaded"}, ""
    try:
        deadline = time.monotonic() + 240
        while not all(w in seen for w in wanted):
            assert proc.poll() is None and time.monotonic() < deadline, seen[-3000:]
            if select.select([proc.stderr], [], [], 1.0)[0]:
                seen += proc.stderr.readline()
        assert "not loaded" not in seen and "not warmed up" not in seen, seen[-3000:]
        assert not (data / "vectors").exists()
    finally:
        proc.stdin.close()  # the end of stdin ends the server
        proc.wait(timeout=60)
    assert proc.returncode == 0


def test_an_embedded_mcp_server_opens_an_existing_store_as_it_starts_and_lets_a_cli_have_it(tmp_path):
    """With a store in the data dir and no other process holding it, the server opens it as it starts (an agent's
    first call does not pay the open), and a CLI command that then needs the store gets it (it asks; the server
    lets go)."""
    import select

    from engram.workers.stores.vectors import OBSERVATIONS, EdgeVectorStore

    data = tmp_path / "data"
    store = EdgeVectorStore(data / "vectors")
    store.ensure(OBSERVATIONS)
    store.close()
    env = _env(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram.api.cli", "-v", "mcp", "--data-dir", str(data)],
        env=env,
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = ""
    try:
        deadline = time.monotonic() + 240
        while "embedded store opened: 0 points" not in seen:
            assert proc.poll() is None and time.monotonic() < deadline, seen[-3000:]
            if select.select([proc.stderr], [], [], 1.0)[0]:
                seen += proc.stderr.readline()
        out = _cli(env, data, "status", "--tenant", "t")
        assert out.returncode == 0, out.stderr[-2000:]
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert proc.returncode == 0


@pytest.mark.slow
def test_mcp_over_http_needs_an_api_key_and_uses_its_tenant(tmp_path, redis_server):
    import httpx
    import httpx2
    import redis
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from engram.api.http.keys import create_key
    from tests.api.conftest import db_url
    from tests.servers import free_ports

    redis_url = db_url(redis_server, 14)
    key = create_key(redis.Redis.from_url(redis_url, decode_responses=True), "acme")
    (port,) = free_ports(1)
    data = tmp_path / "data"
    env = {**_env(tmp_path), "ENGRAM_REDIS_URL": redis_url}
    url = f"http://127.0.0.1:{port}/mcp"
    with open(tmp_path / "server.log", "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "engram.api.cli",
                "mcp",
                "--http",
                "--all-users",
                "--port",
                str(port),
                "--data-dir",
                str(data),
            ],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=log,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                refused = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
                time.sleep(0.5)
        assert refused.status_code == 401
        assert httpx.post(url, json={}, headers={"Authorization": "Bearer egk_wrong"}, timeout=5).status_code == 401

        async def session() -> None:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=600)
            async with http, Client(streamable_http_client(url, http_client=http), read_timeout_seconds=600) as c:
                assert "add_memory" in {t.name for t in (await c.list_tools()).tools}
                added = await c.call_tool("add_memory", {"text": FACT, "user_id": "ann"})
                assert not added.is_error and added.structured_content["status"] == "done", added.content[0].text
                found = await c.call_tool("search", {"query": "vendor contracts", "user_id": "ann"})
                assert FACT in found.content[0].text

        anyio.run(session)
        # stored under the key's tenant
        out = _cli(env, data, "search", "vendor contracts", "--tenant", "acme")
        assert out.returncode == 0 and "oak desk" in out.stdout, out.stderr[-2000:]
        out = _cli(env, data, "search", "vendor contracts", "--tenant", "default")
        assert "oak desk" not in out.stdout
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.mark.slow
def test_mcp_through_the_http_api(tmp_path, query_worker):
    """``engram mcp --api URL`` (key from ENGRAM_API_KEY): the tools call a real API (uvicorn in this process)
    backed by a real Celery worker through the SDK; the MCP process opens no store. A memory is added (stored
    when the call returns), found, read, deleted; unknown ids answer as errors; no key exits 2 with one line."""
    import redis
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from engram.api.http.keys import create_key
    from tests.api.conftest import served

    key = create_key(redis.Redis.from_url(query_worker.broker_url, decode_responses=True), "mcp-api")
    local = tmp_path / "never-opened"
    env = {**_env(tmp_path), "ENGRAM_DATA_DIR": str(local)}
    with served(query_worker) as url:
        no_key = subprocess.run(
            [sys.executable, "-m", "engram.api.cli", "mcp", "--api", url],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert no_key.returncode == 2 and "--api needs an API key" in no_key.stderr, no_key.stderr[-2000:]
        params = StdioServerParameters(
            command=sys.executable,
            cwd=str(REPO),
            env={**env, "ENGRAM_API_URL": url, "ENGRAM_API_KEY": key},
            args=["-m", "engram.api.cli", "mcp", "--user", "alice"],
        )
        timings: dict[str, float] = {}

        async def session() -> None:
            async with Client(params, read_timeout_seconds=600) as client:
                assert "add_memory" in {t.name for t in (await client.list_tools()).tools}
                t0 = time.perf_counter()
                added = await client.call_tool("add_memory", {"text": FACT, "id": "api-note-1"})
                timings["add"] = time.perf_counter() - t0
                assert not added.is_error, added.content[0].text
                assert added.structured_content["status"] == "done", added.structured_content
                assert added.structured_content["observations"] >= 1
                again = await client.call_tool("add_memory", {"text": FACT, "id": "api-note-1"})
                assert again.structured_content["duplicate"] is True
                t0 = time.perf_counter()  # the worker's models are loaded by now
                warm = await client.call_tool("add_memory", {"text": "The spare key is under the blue flowerpot"})
                timings["warm_add"] = time.perf_counter() - t0
                assert warm.structured_content["status"] == "done", warm.structured_content
                t0 = time.perf_counter()
                found = await client.call_tool(
                    "search",
                    {"query": "where are the vendor contracts?", "user_id": "alice", "memory_types": ["observation"]},
                )
                timings["search"] = time.perf_counter() - t0
                assert FACT in found.content[0].text, found.content[0].text
                hit = found.structured_content["hits"][0]
                got = await client.call_tool("get_memory", {"memory_id": hit["id"]})
                assert FACT in got.content[0].text
                unknown = await client.call_tool(
                    "name_entity", {"entity_id": "00000000-0000-4000-8000-000000000000", "name": "Maria"}
                )
                assert unknown.is_error and "no entity" in unknown.content[0].text
                deleted = await client.call_tool("delete_memory", {"memory_id": hit["id"]})
                assert not deleted.is_error and "Deleted observation" in deleted.content[0].text
                gone = await client.call_tool("get_memory", {"memory_id": hit["id"]})
                assert gone.is_error and "no memory" in gone.content[0].text

        anyio.run(session)
    assert not local.exists()  # the MCP process never opened an embedded store
    print(
        f"MCP through the API, add → stored: {timings['add']:.2f} s first (the worker loading its models), "
        f"{timings['warm_add']:.2f} s warm; search {timings['search']:.2f} s"
    )
