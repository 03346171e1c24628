"""``engram mcp`` through the MCP SDK's own stdio client against a real server process on the embedded default:
the tools are listed with their schemas, a memory is added, found by search (through MCP, and by ``engram search``
in another process while the server runs), named entities and errors answer as errors, and the memory is deleted.
"""

from __future__ import annotations

import subprocess
import sys
import time

import anyio
import pytest

from tests.conftest import REPO

pytest.importorskip("mcp")

FACT = "The blue notebook with the vendor contracts is in the second drawer of the oak desk"


def _env(root) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(root), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO),
            "COLUMNS": "300", "ENGRAM_STORE_WAIT_SECONDS": "60"}


def _cli(env: dict[str, str], data, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engram.api.cli", "--data-dir", str(data), *args], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def test_mcp_server_over_stdio_adds_finds_and_deletes_while_the_cli_uses_the_store(tmp_path):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    data = tmp_path / "data"
    env = _env(tmp_path)
    params = StdioServerParameters(command=sys.executable, cwd=str(REPO), env=env,
                                   args=["-m", "engram.api.cli", "mcp", "--data-dir", str(data), "--user", "alice"])
    timings: dict[str, float] = {}

    async def session() -> None:
        async with Client(params, read_timeout_seconds=600) as client:
            await _exercise(client, data, env, timings)

    anyio.run(session)
    print(f"MCP add → searchable: {timings['add']:.2f} s (add_memory), {timings['search']:.2f} s (search)")


async def _exercise(client, data, env, timings) -> None:
    listed = await client.list_tools()
    tools = {t.name: t for t in listed.tools}
    assert set(tools) == {"search", "ask", "add_memory", "list_memories", "get_memory", "delete_memory",
                          "list_entities", "name_entity"}
    assert {"query", "user_id", "limit", "kinds", "time_from", "entities"} <= set(
        tools["search"].input_schema["properties"])
    assert "tenant_id" not in tools["search"].input_schema["properties"]
    assert {"text", "messages", "user_id", "id", "time", "source"} <= set(
        tools["add_memory"].input_schema["properties"])

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
    found = await client.call_tool("search", {"query": "where are the vendor contracts?", "user_id": "alice",
                                              "limit": 5})
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
    unknown = await client.call_tool("name_entity", {"entity_id": "00000000-0000-4000-8000-000000000000",
                                                     "name": "Maria"})
    assert unknown.is_error and "no entity" in unknown.content[0].text

    deleted = await client.call_tool("delete_memory", {"memory_id": hit["id"]})
    assert not deleted.is_error and "Deleted observation" in deleted.content[0].text
    after = await client.call_tool("search", {"query": "where are the vendor contracts?", "user_id": "alice",
                                              "memory_types": ["observation"]})
    assert FACT not in after.content[0].text
