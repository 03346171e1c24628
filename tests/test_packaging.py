"""The distribution as a user installs it: the built wheel holds one import package, ``engram`` (engram.api,
engram.schemas, engram.workers), so it installs beside a project that has its own ``api/`` package; its base
set (the ``client`` extra) is the SDK alone: no torch, Celery, FastAPI or model in the environment, and its
``engram`` script names the extra a command needs; the ``mcp`` extra alone serves ``engram mcp --api URL`` to the
MCP SDK's client against a real API, without Celery, FastAPI or the capture stack."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from engram.api.entry import missing_extra_line, needed_extra
from tests.api.conftest import query_worker, served  # noqa: F401  (a real API backed by a Celery worker)

REPO = Path(__file__).resolve().parents[1]

_PROBE = """
import importlib.util, sys
import api                      # the user's own package of that name
assert api.MINE == 1, api
from engram.api.client import AsyncEngramClient, EngramClient
from engram.schemas.search import SearchRequest
print("sdk", EngramClient.__name__, SearchRequest.__name__)
print("async", AsyncEngramClient.__name__)
print("absent", ",".join(m for m in ("torch", "celery", "fastapi", "qdrant_edge", "cv2", "typer")
                        if importlib.util.find_spec(m) is None))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (found,) = out.glob("engram_multimodal-*.whl")
    return found


def test_wheel_holds_only_the_engram_namespace(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.startswith("engram_multimodal-")}
    assert tops == {"engram"}
    assert "engram/api/client.py" in names and "engram/workers/models/embeddings.py" in names
    assert not any(n.startswith("engram/__init__") for n in names)  # a namespace of the three folders


def test_every_subpackage_is_listed_in_pyproject():
    """A folder with an __init__.py under api/, schemas/ or workers/ that pyproject.toml does not list would be
    left out of the wheel (the editable install would still find it)."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        "engram." + ".".join(p.parent.relative_to(REPO).parts)
        for top in ("api", "schemas", "workers")
        for p in (REPO / top).rglob("__init__.py")
    }
    assert found == listed


@pytest.mark.slow
def test_sdk_installs_alone_beside_a_users_api_package(wheel: Path, tmp_path: Path):
    """`pip install engram-multimodal[client]` in a fresh virtual environment, run from a project whose own
    top-level package is called ``api``: the SDK imports and nothing of the server came with it."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"{wheel}[client]"], capture_output=True, text=True, timeout=600
    )
    assert install.returncode == 0, install.stderr[-3000:]
    project = tmp_path / "project"
    (project / "api").mkdir(parents=True)
    (project / "api" / "__init__.py").write_text("MINE = 1\n")
    probe = subprocess.run([str(python), "-c", _PROBE], cwd=project, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in probe.stdout.splitlines())
    assert lines["sdk"] == "EngramClient SearchRequest"
    assert lines["async"] == "AsyncEngramClient"
    assert set(lines["absent"].split(",")) == {"torch", "celery", "fastapi", "qdrant_edge", "cv2", "typer"}
    # the `engram` script says which extra a command needs, in one line, instead of ModuleNotFoundError: typer
    for argv, needs in (
        (["ingest", "x"], "error: engram ingest needs the [worker] extra"),
        (["--data-dir", "d", "mcp", "--api", "http://h"], "error: engram mcp --api needs the [mcp] extra"),
        (["serve"], "error: engram serve needs the [server] extra"),
        ([], "error: engram's commands need an extra"),
    ):
        run = subprocess.run(
            [str(env_dir / "bin" / "engram"), *argv], cwd=project, capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 2, run.stderr[-3000:]
        assert run.stderr.startswith(needs) and run.stderr.count("\n") == 1 and run.stdout == "", run.stderr
        assert "pip install 'engram-multimodal[" in run.stderr and "typer" in run.stderr


def test_setup_ends_with_the_line_that_puts_engram_on_path(tmp_path: Path):
    """scripts/setup.sh's last lines, run in a folder whose name has a space and a dollar sign: the last line
    printed, run in a shell whose PATH lacks the virtual environment, finds that folder's ``.venv/bin/engram``."""
    script = (REPO / "scripts" / "setup.sh").read_text()
    end = script[script.index("# the end: ") :]
    repo = tmp_path / "my $repo copy"
    (repo / ".venv" / "bin").mkdir(parents=True)
    engram = repo / ".venv" / "bin" / "engram"
    engram.write_text("#!/bin/sh\necho engram-here\n")
    engram.chmod(0o755)
    out = subprocess.run(
        ["bash", "-c", end],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": f"{repo / '.venv' / 'bin'}:/usr/bin:/bin"},
    )  # setup's activated venv
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"==> ready: {engram}"
    line = lines[-1]
    assert line.startswith("export PATH=")
    run = subprocess.run(
        ["bash", "-c", f"{line}\ncommand -v engram && engram"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
    )
    assert run.stdout.splitlines() == [str(engram), "engram-here"], run.stderr
    readme = (REPO / "README.md").read_text()
    assert readme.count('export PATH="$PWD/.venv/bin:$PATH"') == 1  # once, then bare `engram`


@pytest.mark.parametrize(
    ("argv", "env_api", "command", "extra"),
    [
        (["ingest", "photos"], False, "engram ingest", "worker"),
        (
            ["-v", "--data-dir", "mcp", "search", "x"],
            False,
            "engram search",
            "worker",
        ),  # an option's value is no command
        (["mcp", "--api", "http://engram:8000"], False, "engram mcp --api", "mcp"),
        (["mcp", "--api=http://engram:8000"], False, "engram mcp --api", "mcp"),
        (["mcp"], True, "engram mcp --api", "mcp"),  # ENGRAM_API_URL is mcp's --api
        (["mcp", "--user", "alice"], False, "engram mcp", "worker"),
        (["keys", "create", "laptop"], False, "engram keys", "server"),
        (["watch", "~/Pictures", "--api", "http://engram:8000"], False, "engram watch --api", "server"),
        (["watch", "~/Pictures"], False, "engram watch", "worker"),
        (["ui", "--port", "8780"], False, "engram ui", "worker"),
        (["--log-format", "json"], False, "engram", "worker"),
    ],
)
def test_each_command_names_the_extra_it_needs(monkeypatch, argv, env_api, command, extra):
    if env_api:
        monkeypatch.setenv("ENGRAM_API_URL", "http://engram:8000")
    else:
        monkeypatch.delenv("ENGRAM_API_URL", raising=False)
    assert needed_extra(argv) == (command, extra)
    line = missing_extra_line(argv, "typer")
    assert "\n" not in line and "'typer'" in line and f"engram-multimodal[{extra}" in line


#: The packages the `mcp` extra must leave out: the worker's, the API server's and the capture stack.
_MCP_ABSENT = (
    "celery",
    "fastapi",
    "mss",
    "sounddevice",
    "Xlib",
    "webrtcvad",
    "redis",
    "minio",
    "numpy",
    "torch",
    "qdrant_edge",
    "watchdog",
)


@pytest.mark.slow
def test_the_mcp_extra_alone_serves_an_api_to_the_mcp_sdk_client(wheel: Path, tmp_path: Path, query_worker):  # noqa: F811
    """`pip install engram-multimodal[mcp]` (at the lock file's versions) in a fresh virtual environment: no Celery,
    FastAPI, capture stack or model in it; its `engram mcp --api URL` is driven by the MCP SDK's stdio client
    against a real API (uvicorn in this process, a Celery worker behind it): a memory added is found by search."""
    import anyio
    import redis
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from engram.api.http.keys import create_key

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"{wheel}[mcp]", "-c", str(REPO / "requirements-dev.lock")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.util, sys; print(','.join(m for m in sys.argv[1:] "
            "if importlib.util.find_spec(m) is not None))",
            *_MCP_ABSENT,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert probe.returncode == 0 and probe.stdout.strip() == "", probe.stdout + probe.stderr[-3000:]

    key = create_key(redis.Redis.from_url(query_worker.broker_url, decode_responses=True), "mcp-extra")
    never = tmp_path / "never-opened"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ENGRAM_DATA_DIR": str(never), "ENGRAM_API_KEY": key}
    fact = "The spare bicycle key hangs on the hook behind the pantry door"
    with served(query_worker) as url:
        params = StdioServerParameters(
            command=str(env_dir / "bin" / "engram"),
            cwd=str(tmp_path),
            env=env,
            args=["mcp", "--api", url, "--user", "alice"],
        )

        async def session() -> None:
            async with Client(params, read_timeout_seconds=600) as client:
                assert {"search", "add_memory"} <= {t.name for t in (await client.list_tools()).tools}
                added = await client.call_tool("add_memory", {"text": fact, "id": "extra-note-1"})
                assert not added.is_error, added.content[0].text
                assert added.structured_content["status"] == "done", added.structured_content
                found = await client.call_tool(
                    "search",
                    {"query": "where is the bicycle key?", "user_id": "alice", "memory_types": ["observation"]},
                )
                assert not found.is_error and fact in found.content[0].text, found.content[0].text

        anyio.run(session)
    assert not never.exists()  # the MCP process opened no embedded store
