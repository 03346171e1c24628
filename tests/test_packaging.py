"""The distribution as a user installs it: the built wheel holds one import package, ``engram`` (engram.api,
engram.schemas, engram.workers), so it installs beside a project that has its own ``api/`` package, and its base
set (the ``client`` extra) is the SDK alone: no torch, Celery, FastAPI or model in the environment."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

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
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(REPO)], check=True, capture_output=True, text=True, timeout=300)
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
    found = {"engram." + ".".join(p.parent.relative_to(REPO).parts)
             for top in ("api", "schemas", "workers") for p in (REPO / top).rglob("__init__.py")}
    assert found == listed


def test_sdk_installs_alone_beside_a_users_api_package(wheel: Path, tmp_path: Path):
    """`pip install engram-multimodal[client]` in a fresh virtual environment, run from a project whose own
    top-level package is called ``api``: the SDK imports and nothing of the server came with it."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", f"{wheel}[client]"],
                             capture_output=True, text=True, timeout=600)
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
