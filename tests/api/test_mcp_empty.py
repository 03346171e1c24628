"""Empty answers through MCP say why without naming anyone else: the MCP SDK's stdio client against a real
``engram mcp`` process on the embedded default, with another tenant's data in the same store. A tenant that holds
nothing answers "nothing is stored yet", an unknown user "unknown user", for search, ask and list_memories alike;
neither names the other tenant or its users (only the embedded CLI does, for its one owner)."""

from __future__ import annotations

import sys

import anyio
import pytest

from tests.api.test_mcp import _cli, _env
from tests.conftest import REPO

pytest.importorskip("mcp")


@pytest.mark.slow
def test_mcp_says_unknown_user_and_names_no_other_tenant(tmp_path):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    data, env = tmp_path / "data", _env(tmp_path)
    other = _cli(env, data, "add", "The spare key is under the blue flowerpot", "--user", "bob", "--tenant", "globex")
    assert other.returncode == 0, other.stderr[-3000:]
    params = StdioServerParameters(
        command=sys.executable,
        cwd=str(REPO),
        env=env,
        args=[
            "-m",
            "engram.api.cli",
            "mcp",
            "--data-dir",
            str(data),
            "--tenant",
            "acme",
            "--all-users",
            "--user",
            "alice",
        ],
    )
    texts: list[str] = []

    async def session() -> None:
        async with Client(params, read_timeout_seconds=600) as client:
            nothing = await client.call_tool("search", {"query": "where is the spare key?"})
            assert not nothing.is_error and nothing.structured_content["empty"] == "no_data"
            assert "nothing is stored yet" in nothing.content[0].text
            added = await client.call_tool("add_memory", {"text": "Alice parks on level 3 of the station garage"})
            assert not added.is_error, added.content[0].text
            for tool, args in (
                ("search", {"query": "where is the spare key?", "user_id": "carol"}),
                ("ask", {"question": "where is the spare key?", "user_id": "carol"}),
                ("list_memories", {"memory_type": "observation", "user_id": "carol"}),
            ):
                got = await client.call_tool(tool, args)
                assert not got.is_error and "unknown user 'carol'" in got.content[0].text, (tool, got.content)
                assert got.structured_content["empty"] == "unknown_user", tool
                texts.extend([got.content[0].text, str(got.structured_content)])
            found = await client.call_tool("search", {"query": "where does Alice park?", "user_id": "alice"})
            assert found.structured_content["empty"] is None and "level 3" in found.content[0].text
            texts.append(nothing.content[0].text + str(nothing.structured_content))

    anyio.run(session)
    for text in texts:
        assert "globex" not in text and "bob" not in text and "alice" not in text.lower(), text
