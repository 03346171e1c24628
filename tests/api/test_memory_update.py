"""Correcting a memory (issue 44): a corrected memory supersedes the old one with its history kept, through the MCP
server's ``update_memory`` tool (stdio, on the embedded default) and ``engram memories update``; search answers the
newest version only; the old versions stay readable with ``superseded_by`` and ``valid_to``; an old version cannot
be edited again; and ``engram export --archive`` / ``engram import`` carry the whole history into another data dir."""

from __future__ import annotations

import json
import sys

import anyio
import pytest

from tests.conftest import REPO, cli_env, run_cli

pytest.importorskip("mcp")

FACT = "The spare key to the bike shed hangs on the blue hook in the hallway"
FIRST = "The spare key to the bike shed hangs on the red hook in the kitchen"
SECOND = "The spare key to the bike shed is in the kitchen drawer under the toaster"


def _env(root) -> dict[str, str]:
    return cli_env(root)


_cli = run_cli


def _versions(env: dict[str, str], data) -> dict[str, dict]:
    """alice's episodic memories, superseded versions included, by id (``engram memories list --json``)."""
    run = _cli(env, data, "memories", "list", "--type", "episodic", "--user", "alice", "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    return {m["id"]: m for m in json.loads(run.stdout)["items"]}


def _episodic_texts(env: dict[str, str], data, *types: str) -> list[str]:
    """The texts ``engram search --type episodic`` answers (a search of every type, ``types=()``, shows the note's
    observation, what was captured, in place of an uncorrected episodic memory drawn from it alone)."""
    run = _cli(
        env,
        data,
        "search",
        "where is the spare key to the bike shed?",
        "--user",
        "alice",
        *[a for t in types for a in ("--type", t)],
        "--json",
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return [h["text"] for h in json.loads(run.stdout)["hits"]]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_correction_supersedes_the_old_version_which_is_kept_and_moves_with_an_archive(tmp_path):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    data, env = tmp_path / "data", _env(tmp_path)
    params = StdioServerParameters(
        command=sys.executable,
        cwd=str(REPO),
        env=env,
        args=["-m", "engram.api.cli", "mcp", "--data-dir", str(data), "--user", "alice"],
    )
    ids: dict[str, str] = {}

    async def session() -> None:
        async with Client(params) as client:
            added = await client.call_tool("add_memory", {"text": FACT, "id": "key-1"})
            assert not added.is_error, added.content[0].text
            found = await client.call_tool(
                "search", {"query": "bike shed spare key", "user_id": "alice", "memory_types": ["episodic"]}
            )
            ids["old"] = next(h["id"] for h in found.structured_content["hits"] if "blue hook" in h["text"])
            wrong = await client.call_tool("update_memory", {"memory_id": ids["old"], "text": "  "})
            assert wrong.is_error
            fixed = await client.call_tool("update_memory", {"memory_id": ids["old"], "text": FIRST})
            assert not fixed.is_error, fixed.content[0].text
            assert "kept as its history" in fixed.content[0].text
            ids["first"] = fixed.structured_content["id"]
            assert ids["first"] != ids["old"] and FIRST in fixed.structured_content["text"]
            again = await client.call_tool("update_memory", {"memory_id": ids["old"], "text": SECOND})
            assert again.is_error and "already superseded" in again.content[0].text

    anyio.run(session)

    versions = _versions(env, data)
    old = versions[ids["old"]]
    assert FACT in old["text"] and old["payload"]["superseded_by"] == ids["first"] and old["payload"]["valid_to"]
    assert versions[ids["first"]]["payload"]["corrected_from"] == ids["old"]
    texts = _episodic_texts(env, data, "episodic")
    assert any("red hook" in t for t in texts) and not any("blue hook" in t for t in texts), texts
    # a search of every type shows the correction beside the note it corrects (not dropped as a repeat of it)
    every = _episodic_texts(env, data)
    assert any("red hook" in t for t in every) and any("blue hook" in t for t in every), every

    # the CLI: the newest version corrected again; the superseded one refused
    refused = _cli(env, data, "memories", "update", ids["old"], SECOND)
    assert refused.returncode == 1 and "already superseded" in refused.stderr and "Traceback" not in refused.stderr
    run = _cli(env, data, "memories", "update", ids["first"], SECOND, "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    ids["second"] = json.loads(run.stdout)["id"]
    texts = _episodic_texts(env, data, "episodic")
    assert any("toaster" in t for t in texts) and not any("red hook" in t or "blue hook" in t for t in texts), texts
    history = _versions(env, data)
    assert set(ids.values()) <= set(history), history
    assert history[ids["first"]]["payload"]["superseded_by"] == ids["second"]
    assert history[ids["second"]]["payload"].get("superseded_by") is None

    # the history moves with an archive: every version, the same ids and links
    archive = tmp_path / "alice.tar"
    run = _cli(env, data, "export", "--user", "alice", "--archive", str(archive))
    assert run.returncode == 0, run.stderr[-2000:]
    moved = tmp_path / "moved"
    run = _cli(env, moved, "import", str(archive))
    assert run.returncode == 0, run.stderr[-2000:]
    assert {
        k: (m["text"], m["payload"].get("superseded_by"), m["payload"].get("corrected_from"))
        for k, m in _versions(env, moved).items()
    } == {
        k: (m["text"], m["payload"].get("superseded_by"), m["payload"].get("corrected_from"))
        for k, m in history.items()
    }
    assert _episodic_texts(env, moved, "episodic") == texts
