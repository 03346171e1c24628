"""helm/engram: `helm lint --strict`, `helm template` under several value sets, the rendered core kinds
validated offline by kubernetes-validate (strict: unknown fields fail), the KEDA and Prometheus-operator
kinds (no schemas there) checked field by field, and the chart's rules: probes on /healthz and /readyz and on
every worker and beat, one beat, GPU requests, every queue served by a worker command engram accepts, no secret
in the ConfigMap, a vault key never made at render time (two renders are byte-identical; an existing Secret or
a pre-install hook Job), read-only root filesystems, the optional NetworkPolicies, and nothing exposed by accident:
every Service internal (ClusterIP), Redis's password and Qdrant's API key required and read from Secrets.

The helm binary comes from scripts/get_helm.sh (run by `scripts/setup.sh --dev`); without it these tests
skip and say so."""

from __future__ import annotations

import copy
import functools
import importlib.util
import inspect
import json
import os
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from engram.api.processes import ALL_QUEUES, plan_worker
from engram.schemas.settings import Settings
from engram.workers.fairness import queue_lists
from tests.deploy.test_compose import _setting_exists, _tool

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "engram"
K8S_VERSION = "1.33.0"  # a release kubernetes-validate has schemas for
RELEASE = "eg"
OPERATOR_KINDS = {"ScaledObject", "TriggerAuthentication", "ServiceMonitor"}  # CRDs: no schemas offline
ALL_GROUPS = ("cpu", "gpu", "store", "query")

SCENARIOS: dict[str, dict] = {
    "default": {},
    "gpu": {"workers": {"gpu": {"enabled": True}}},
    "keda": {
        "keda": {"enabled": True},
        "redis": {"existingSecret": "eg-redis"},
        "workers": {g: {"enabled": True, "autoscaling": {"enabled": True}} for g in ALL_GROUPS},
    },
    "hpa": {
        "api": {"autoscaling": {"enabled": True}},
        "workers": {g: {"autoscaling": {"enabled": True}} for g in ("cpu", "store", "query")},
    },
    "ingress": {
        "api": {
            "ingress": {
                "enabled": True,
                "className": "nginx",
                "tls": [{"secretName": "engram-tls", "hosts": ["engram.example.com"]}],
            }
        }
    },
    "servicemonitor": {"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}},
    "secrets": {
        "redis": {"password": "redis-pw-1"},
        "s3": {"accessKey": "s3-user-1", "secretKey": "s3-secret-1"},
        "qdrant": {"apiKey": "qdrant-key-1"},
        "secrets": {"vlmApiKey": "vlm-key-1", "vaultKey": "vault-key-1"},
    },
    "existing": {
        "redis": {"existingSecret": "eg-redis"},
        "s3": {"existingSecret": "eg-minio"},
        "qdrant": {"existingSecret": "eg-qdrant"},
        "secrets": {"existingSecret": "engram-env"},
    },
    "vault-existing": {"vault": {"existingSecret": "engram-vault", "existingSecretKey": "fernet"}},
    "networkpolicy": {
        "networkPolicy": {
            "enabled": True,
            "apiIngressFrom": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
            ],
            "extraEgress": [{"ports": [{"protocol": "TCP", "port": 443}]}],
        },
        "workers": {"gpu": {"enabled": True}},
    },
}
SECRET_VALUES = ["redis-pw-1", "s3-user-1", "s3-secret-1", "qdrant-key-1", "vlm-key-1", "vault-key-1"]


def with_credentials(values: dict) -> dict:
    """``values`` plus the credentials the chart requires (redis.requirePassword, qdrant.requireApiKey) as existing
    Secrets, where the values name no password or key of their own (nor turn the requirement off)."""
    values = copy.deepcopy(values)
    redis, qdrant = values.setdefault("redis", {}), values.setdefault("qdrant", {})
    if redis.get("requirePassword", True) and not (redis.get("password") or redis.get("existingSecret")):
        redis["existingSecret"] = "eg-redis"
    given = qdrant.get("apiKey") or qdrant.get("existingSecret") or values.get("secrets", {}).get("existingSecret")
    if qdrant.get("requireApiKey", True) and not given:
        qdrant["existingSecret"] = "eg-qdrant"
    return values


@functools.cache
def helm_binary() -> str | None:
    return _tool("helm")


def helm(
    *args: str, values: dict | None = None, check: bool = True, credentials: bool = True
) -> subprocess.CompletedProcess:
    """Run helm with ``values`` given as a values file (JSON is YAML), ``with_credentials`` unless
    ``credentials`` is false; skips when helm is absent."""
    binary = helm_binary()
    if binary is None:
        pytest.skip("helm not found: `bash scripts/setup.sh --dev` puts it in .venv/bin (scripts/get_helm.sh)")
    with tempfile.TemporaryDirectory() as tmp:
        values_file = Path(tmp) / "values.json"
        values_file.write_text(json.dumps(with_credentials(values or {}) if credentials else values or {}))
        proc = subprocess.run([binary, *args, "-f", str(values_file)], capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@functools.cache
def _render(name: str) -> tuple[dict, ...]:
    out = helm("template", RELEASE, str(CHART), "--namespace", "memory", values=SCENARIOS[name]).stdout
    return tuple(d for d in yaml.safe_load_all(out) if d)


def render(name: str) -> list[dict]:
    return list(_render(name))


def find(docs: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict], kind: str, name: str) -> dict:
    found = find(docs, kind, name)
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def workers(docs: list[dict]) -> dict[str, dict]:
    """Worker Deployments by group name."""
    prefix = f"{RELEASE}-engram-worker-"
    return {
        d["metadata"]["name"].removeprefix(prefix): d
        for d in find(docs, "Deployment")
        if d["metadata"]["name"].startswith(prefix)
    }


def container(deployment: dict) -> dict:
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return c


def option(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


@pytest.mark.parametrize("scenario", ["default", "gpu", "networkpolicy"])
def test_lint_strict(scenario):
    proc = helm("lint", "--strict", str(CHART), values=SCENARIOS[scenario])
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_rendered_core_kinds_are_valid(scenario):
    """Every core object passes kubernetes-validate's strict schema of K8S_VERSION (unknown fields fail)."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install -e '.[dev]'")
    docs = render(scenario)
    assert {"Deployment", "Service", "ConfigMap", "Secret", "ServiceAccount"} <= {d["kind"] for d in docs} | (
        {"Secret"} if scenario == "existing" else set()
    )
    if scenario == "networkpolicy":
        assert "NetworkPolicy" in {d["kind"] for d in docs}
    if scenario == "default":
        assert {"Job", "Role", "RoleBinding"} <= {d["kind"] for d in docs}  # the vault-keygen hook
    for doc in docs:
        if doc["kind"] in OPERATOR_KINDS:
            continue
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_api_probes_service_and_ingress():
    docs = render("ingress")
    api = one(docs, "Deployment", f"{RELEASE}-engram-api")
    c = container(api)
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert {"name": "http", "containerPort": 8000, "protocol": "TCP"} in c["ports"]
    assert c["args"][:1] == ["serve"] and option(c["args"], "--port") == "8000"
    svc = one(docs, "Service", f"{RELEASE}-engram-api")
    assert svc["spec"]["selector"].items() <= api["spec"]["template"]["metadata"]["labels"].items()
    ingress = one(docs, "Ingress", f"{RELEASE}-engram-api")
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": svc["metadata"]["name"], "port": {"name": "http"}}
    assert ingress["spec"]["tls"][0]["secretName"] == "engram-tls"
    assert not find(render("default"), "Ingress")


@pytest.mark.parametrize("scenario", ["default", "gpu", "keda"])
def test_beat_is_a_single_replica(scenario):
    beat = one(render(scenario), "Deployment", f"{RELEASE}-engram-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    assert container(beat)["args"] == ["beat"]
    beats = [d for d in find(render(scenario), "Deployment") if container(d)["args"][:1] == ["beat"]]
    assert len(beats) == 1


def test_gpu_worker_requests_a_gpu_and_takes_the_gpu_queue():
    default, gpu_on = workers(render("default")), workers(render("gpu"))
    assert "gpu" not in default  # off by default; the CPU workers serve perceive.gpu meanwhile
    assert "perceive.gpu" in option(container(default["cpu"])["args"], "--queues").split(",")
    gpu = gpu_on["gpu"]
    c = container(gpu)
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert c["image"].startswith("engram-worker-gpu:")
    assert {"name": "ENGRAM_MODELS__DEVICE", "value": "cuda"} in c["env"]
    spec = gpu["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert option(c["args"], "--queues") == "perceive.gpu"
    assert "perceive.gpu" not in option(container(gpu_on["cpu"])["args"], "--queues").split(",")
    for name, deployment in gpu_on.items():  # no other pod asks for a GPU
        if name != "gpu":
            assert "nvidia.com/gpu" not in str(container(deployment)["resources"])


def _pod_environment(docs: list[dict], deployment: dict) -> dict[str, str]:
    """The variables a pod would see: its ConfigMap and chart Secret, then its env (secret refs as 'x')."""
    env: dict[str, str] = {}
    for source in container(deployment).get("envFrom", []):
        if ref := source.get("configMapRef"):
            env.update(one(docs, "ConfigMap", ref["name"])["data"])
        elif (ref := source.get("secretRef")) and find(docs, "Secret", ref["name"]):
            env.update(one(docs, "Secret", ref["name"])["stringData"])
    for var in container(deployment)["env"]:
        value = var.get("value", "x")
        for name, known in env.items():  # Kubernetes' $(VAR) expansion of earlier variables
            value = value.replace(f"$({name})", known)
        env[var["name"]] = value
    return env


@pytest.mark.parametrize("scenario", ["default", "gpu", "keda", "secrets"])
def test_worker_commands_are_accepted_and_serve_every_queue(scenario, monkeypatch):
    """Each worker's arguments pass `engram worker`'s own check (api.processes.plan_worker) with the
    settings its pod gets, and together the workers serve all seven queues of workers/app.py."""
    docs = render(scenario)
    served: set[str] = set()
    for deployment in workers(docs).values():
        args = container(deployment)["args"]
        assert args[0] == "worker"
        for var in [v for v in os.environ if v.startswith("ENGRAM_")]:
            monkeypatch.delenv(var)
        for var, value in _pod_environment(docs, deployment).items():
            monkeypatch.setenv(var, value)
        settings = Settings()
        assert settings.qdrant_url and settings.broker_url.startswith("redis://")
        assert "$(" not in settings.broker_url
        plan = plan_worker(
            settings, option(args, "--queues"), None, option(args, "--pool"), int(option(args, "--concurrency"))
        )
        served.update(plan.queues)
    assert served == set(ALL_QUEUES)


@pytest.mark.parametrize("scenario", ["default", "secrets", "existing"])
def test_environment_names_are_engram_settings(scenario):
    docs = render(scenario)
    names = set(one(docs, "ConfigMap", f"{RELEASE}-engram-config")["data"])
    for secret in find(docs, "Secret"):
        names |= set(secret["stringData"])
    for deployment in find(docs, "Deployment"):
        names |= {v["name"] for v in container(deployment)["env"]}
    for name in names - {"ENGRAM_VAULT_KEY"}:  # the vault's key rides in secrets.extra until the vault lands
        if name.startswith("ENGRAM_"):
            assert _setting_exists(name.removeprefix("ENGRAM_")), f"{name} is not a setting"


def test_secrets_stay_out_of_the_configmap():
    docs = render("secrets")
    config = one(docs, "ConfigMap", f"{RELEASE}-engram-config")
    text = yaml.safe_dump(config)
    for value in SECRET_VALUES:
        assert value not in text
    secret = one(docs, "Secret", f"{RELEASE}-engram-secrets")
    assert set(secret["stringData"].values()) == set(SECRET_VALUES)
    for deployment in find(docs, "Deployment"):  # the Redis password reaches the URLs only by reference
        env = {v["name"]: v for v in container(deployment)["env"]}
        assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": secret["metadata"]["name"],
            "key": "REDIS_PASSWORD",
        }
        assert env["ENGRAM_BROKER_URL"]["value"].startswith("redis://:$(REDIS_PASSWORD)@")
        assert not any(value in yaml.safe_dump(deployment) for value in SECRET_VALUES)


def _vault_ref(deployment: dict) -> dict:
    (var,) = [v for v in container(deployment)["env"] if v["name"] == "ENGRAM_VAULT_KEY"]
    return var["valueFrom"]["secretKeyRef"]


def _hooks(docs: list[dict]) -> list[dict]:
    return [d for d in docs if "helm.sh/hook" in (d["metadata"].get("annotations") or {})]


def test_no_key_is_made_at_render_time():
    """Nothing random and no cluster lookup in any template: a render is a function of the values."""
    for template in sorted((CHART / "templates").iterdir()):
        text = re.sub(r"\{\{-?\s*/\*.*?\*/\s*-?\}\}", "", template.read_text(), flags=re.S)  # comments
        actions = " ".join(re.findall(r"\{\{(.*?)\}\}", text, flags=re.S))
        assert actions, template.name
        for word in (
            "lookup",
            "randAlphaNum",
            "randAlpha",
            "randNumeric",
            "randAscii",
            "randBytes",
            "randInt",
            "uuidv4",
            "genPrivateKey",
            "genCA",
            "genSelfSignedCert",
            "genSignedCert",
            "now",
        ):
            assert not re.search(r"\b" + word + r"\b", actions), f"{template.name} calls {word}"


@pytest.mark.parametrize("scenario", ["default", "secrets", "existing", "vault-existing", "networkpolicy"])
def test_two_renders_are_byte_identical(scenario):
    """`helm template` twice with the same values (what Argo CD does on every sync) gives the same bytes: no
    new key, so no new checksum/secret annotation and no rollout."""
    args = ("template", RELEASE, str(CHART), "--namespace", "memory")
    first = helm(*args, values=SCENARIOS[scenario]).stdout
    second = helm(*args, values=SCENARIOS[scenario]).stdout
    assert first == second
    docs = [d for d in yaml.safe_load_all(first) if d]
    checksums = {d["spec"]["template"]["metadata"]["annotations"]["checksum/secret"] for d in find(docs, "Deployment")}
    assert len(checksums) == 1  # api, workers and beat see one and the same Secret


def test_vault_key_from_an_existing_secret():
    """vault.existingSecret: every pod reads ENGRAM_VAULT_KEY from that Secret's key; no hook, and the chart's
    own Secret holds no vault key."""
    docs = render("vault-existing")
    assert not _hooks(docs) and not find(docs, "Job")
    for deployment in find(docs, "Deployment"):
        assert _vault_ref(deployment) == {"name": "engram-vault", "key": "fernet"}
    assert "ENGRAM_VAULT_KEY" not in (one(docs, "Secret", f"{RELEASE}-engram-secrets")["stringData"] or {})
    existing = render("existing")  # secrets.existingSecret: the key is read from that Secret, as before
    assert not _hooks(existing)
    for deployment in find(existing, "Deployment"):
        assert _vault_ref(deployment) == {"name": "engram-env", "key": "ENGRAM_VAULT_KEY"}


def test_vault_key_made_once_by_a_pre_install_hook_when_not_given():
    """No Secret named and no key given: a hook Job (pre-install, and pre-upgrade for releases made before it)
    with its own ServiceAccount, Role and RoleBinding makes <fullname>-vault; every pod reads the key there;
    the rendered Secret holds none."""
    docs = render("default")
    secret_name = f"{RELEASE}-engram-vault"
    for deployment in find(docs, "Deployment"):
        assert _vault_ref(deployment) == {"name": secret_name, "key": "ENGRAM_VAULT_KEY"}
    assert "ENGRAM_VAULT_KEY" not in (one(docs, "Secret", f"{RELEASE}-engram-secrets")["stringData"] or {})
    assert not find(docs, "Secret", secret_name)  # made by the Job, never rendered
    name = f"{RELEASE}-engram-vault-keygen"
    hooks = {d["kind"]: d for d in _hooks(docs)}
    assert set(hooks) == {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Job"}
    for kind, doc in hooks.items():
        annotations = doc["metadata"]["annotations"]
        assert doc["metadata"]["name"] == name
        assert annotations["helm.sh/hook"].split(",")[0] == "pre-install"
        assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
        if kind != "Job":  # everything the Job needs exists before it
            assert int(annotations["helm.sh/hook-weight"]) < int(
                hooks["Job"]["metadata"]["annotations"]["helm.sh/hook-weight"]
            )
    rules = hooks["Role"]["rules"]
    assert {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]} in rules
    assert {
        "apiGroups": [""],
        "resources": ["secrets"],
        "verbs": ["get"],
        "resourceNames": [secret_name, f"{RELEASE}-engram-secrets"],
    } in rules
    assert all(set(r["verbs"]) <= {"get", "create"} and r["resources"] == ["secrets"] for r in rules)
    binding = hooks["RoleBinding"]
    assert binding["roleRef"]["name"] == name and binding["subjects"] == [
        {"kind": "ServiceAccount", "name": name, "namespace": "memory"}
    ]
    job = hooks["Job"]
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == name and pod["restartPolicy"] == "Never"
    (c,) = pod["containers"]
    assert c["image"].startswith("engram-api:") and c["command"] == ["python", "/opt/engram/vault-keygen.py"]
    env = {v["name"]: v["value"] for v in c["env"]}
    assert env["VAULT_SECRET"] == secret_name and env["VAULT_SECRET_KEY"] == "ENGRAM_VAULT_KEY"
    assert hooks["ConfigMap"]["data"]["vault-keygen.py"] == (CHART / "files" / "vault-keygen.py").read_text()
    for scenario in ("existing", "vault-existing", "secrets"):  # a Secret or a key was given: no Job
        assert not find(render(scenario), "Job"), scenario


def _keygen_module():
    spec = importlib.util.spec_from_file_location("vault_keygen", CHART / "files" / "vault-keygen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _FakeApi:
    """The Kubernetes API as the keygen script sees it: a dict of Secrets (base64 data) by name."""

    def __init__(self, secrets: dict[str, dict] | None = None, conflict: bool = False):
        self.secrets, self.conflict, self.posts = dict(secrets or {}), conflict, []

    def __call__(self, method, url, token, context, body=None):
        assert token == "tok" and "/api/v1/namespaces/memory/secrets" in url
        if method == "GET":
            name = url.rsplit("/", 1)[1]
            return (200, self.secrets[name]) if name in self.secrets else (404, None)
        self.posts.append(body)
        return (409, None) if self.conflict else (201, body)


@pytest.fixture
def keygen(tmp_path, monkeypatch):
    """The hook's script with a fake service-account folder and API; returns (module, run(api) -> status)."""
    import base64

    (tmp_path / "namespace").write_text("memory")
    (tmp_path / "token").write_text("tok")
    module = _keygen_module()
    monkeypatch.setattr(module, "SA", str(tmp_path))
    monkeypatch.setattr(module.ssl, "create_default_context", lambda cafile: None)
    for var, value in {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "VAULT_SECRET": "eg-engram-vault",
        "VAULT_SECRET_KEY": "ENGRAM_VAULT_KEY",
        "LEGACY_SECRET": "eg-engram-secrets",
        "LABELS": '{"app.kubernetes.io/instance": "eg"}',
    }.items():
        monkeypatch.setenv(var, value)

    def run(api: _FakeApi) -> int:
        monkeypatch.setattr(module, "call", api)
        return module.main()

    return base64, run


def test_keygen_job_makes_a_fernet_key_once_and_keeps_it(keygen):
    """The hook's script: a new Fernet key in a Secret marked resource-policy keep when none exists; nothing
    when the Secret exists; the older chart's key (made by `lookup`) carried over; a concurrent create kept."""
    from cryptography.fernet import Fernet

    base64, run = keygen
    api = _FakeApi()
    assert run(api) == 0
    (body,) = api.posts
    assert body["metadata"]["name"] == "eg-engram-vault"
    assert body["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert body["metadata"]["labels"] == {"app.kubernetes.io/instance": "eg"}
    key = body["stringData"]["ENGRAM_VAULT_KEY"]
    assert Fernet(key.encode()).decrypt(Fernet(key.encode()).encrypt(b"x")) == b"x"

    existing = _FakeApi({"eg-engram-vault": {"data": {"ENGRAM_VAULT_KEY": "a2VwdA=="}}})
    assert run(existing) == 0 and existing.posts == []  # never replaced

    old_key = Fernet.generate_key()
    legacy = _FakeApi({"eg-engram-secrets": {"data": {"ENGRAM_VAULT_KEY": base64.b64encode(old_key).decode()}}})
    assert run(legacy) == 0
    assert legacy.posts[0]["stringData"]["ENGRAM_VAULT_KEY"] == old_key.decode()

    assert run(_FakeApi(conflict=True)) == 0  # made meanwhile by another run: that one stays


def test_the_secret_holding_the_vault_key_is_kept():
    """helm.sh/resource-policy: keep on every Secret that holds the key: the hook's (above) and the chart's own
    when secrets.vaultKey is given; the chart's Secret without the key is an ordinary one."""
    secret = one(render("secrets"), "Secret", f"{RELEASE}-engram-secrets")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    plain = one(render("default"), "Secret", f"{RELEASE}-engram-secrets")
    assert "helm.sh/resource-policy" not in (plain["metadata"].get("annotations") or {})
    assert '"helm.sh/resource-policy": "keep"' in (CHART / "files" / "vault-keygen.py").read_text()


def test_existing_secrets_are_referenced_not_created():
    docs = render("existing")
    assert not find(docs, "Secret")
    api = container(one(docs, "Deployment", f"{RELEASE}-engram-api"))
    refs = {v["name"]: v["valueFrom"]["secretKeyRef"] for v in api["env"] if "valueFrom" in v}
    assert refs == {
        "ENGRAM_VAULT_KEY": {"name": "engram-env", "key": "ENGRAM_VAULT_KEY"},
        "REDIS_PASSWORD": {"name": "eg-redis", "key": "redis-password"},
        "ENGRAM_S3_ACCESS_KEY": {"name": "eg-minio", "key": "rootUser"},
        "ENGRAM_S3_SECRET_KEY": {"name": "eg-minio", "key": "rootPassword"},
        "ENGRAM_QDRANT_API_KEY": {"name": "eg-qdrant", "key": "api-key"},
    }
    assert {"secretRef": {"name": "engram-env"}} in api["envFrom"]


def test_keda_scaled_objects_have_their_required_fields():
    """ScaledObject (keda.sh/v1alpha1): scaleTargetRef naming a rendered Deployment, one redis trigger
    per queue of that worker (listName = Celery's Redis list, listLength a number), auth by reference."""
    docs = render("keda")
    deployments = workers(docs)
    scaled = {d["spec"]["scaleTargetRef"]["name"]: d for d in find(docs, "ScaledObject")}
    assert set(scaled) == {d["metadata"]["name"] for d in deployments.values()}
    assert not find(docs, "HorizontalPodAutoscaler", f"{RELEASE}-engram-worker-cpu")
    auth = one(docs, "TriggerAuthentication", f"{RELEASE}-engram-redis")
    assert auth["apiVersion"] == "keda.sh/v1alpha1"
    assert auth["spec"]["secretTargetRef"] == [{"parameter": "password", "name": "eg-redis", "key": "redis-password"}]
    for deployment in deployments.values():
        obj = scaled[deployment["metadata"]["name"]]
        assert obj["apiVersion"] == "keda.sh/v1alpha1"
        assert "replicas" not in deployment["spec"]  # the autoscaler owns it
        assert obj["spec"]["scaleTargetRef"] == {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": deployment["metadata"]["name"],
        }
        assert 1 <= obj["spec"]["minReplicaCount"] <= obj["spec"]["maxReplicaCount"]
        queues = option(container(deployment)["args"], "--queues").split(",")
        triggers = obj["spec"]["triggers"]
        lists = [name for q in queues for name in queue_lists(q)]  # every priority step (workers.fairness)
        assert [t["metadata"]["listName"] for t in triggers] == lists
        for trigger in triggers:
            assert trigger["type"] == "redis"
            meta = trigger["metadata"]
            assert meta["listLength"].isdigit() and int(meta["listLength"]) > 0
            assert meta["address"] == "engram-redis-master:6379" and meta["databaseIndex"] == "0"
            assert trigger["authenticationRef"] == {"name": auth["metadata"]["name"]}


def test_hpa_on_cpu_without_keda():
    docs = render("hpa")
    hpas = {h["spec"]["scaleTargetRef"]["name"]: h for h in find(docs, "HorizontalPodAutoscaler")}
    expected = {f"{RELEASE}-engram-{n}" for n in ("api", "worker-cpu", "worker-store", "worker-query")}
    assert set(hpas) == expected
    for name, hpa in hpas.items():
        assert "replicas" not in one(docs, "Deployment", name)["spec"]
        (metric,) = hpa["spec"]["metrics"]
        assert metric["resource"]["name"] == "cpu" and metric["resource"]["target"]["type"] == "Utilization"
    assert not find(docs, "ScaledObject")


def test_service_monitors_select_services_with_their_ports():
    """ServiceMonitor (monitoring.coreos.com/v1): a selector matching a rendered Service and endpoints
    naming a port of it with the /metrics path; worker pods expose ENGRAM_METRICS_PORT as that port."""
    docs = render("servicemonitor")
    monitors = find(docs, "ServiceMonitor")
    assert len(monitors) == 2 and not find(render("default"), "ServiceMonitor")
    for monitor in monitors:
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        selector = monitor["spec"]["selector"]["matchLabels"]
        services = [s for s in find(docs, "Service") if selector.items() <= s["metadata"]["labels"].items()]
        assert len(services) == 1, monitor["metadata"]["name"]
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics" and endpoint["interval"]
        assert endpoint["port"] in {p["name"] for p in services[0]["spec"]["ports"]}
    metrics_svc = one(docs, "Service", f"{RELEASE}-engram-worker-metrics")
    for deployment in workers(docs).values():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert metrics_svc["spec"]["selector"].items() <= labels.items()
        c = container(deployment)
        assert {"name": "metrics", "containerPort": 9808, "protocol": "TCP"} in c["ports"]
        assert {"name": "ENGRAM_METRICS_PORT", "value": "9808"} in c["env"]
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == "9808"


def test_pod_disruption_budgets_select_their_pods():
    docs = render("gpu")
    pdbs = find(docs, "PodDisruptionBudget")
    assert len(pdbs) == 5  # api and four worker groups; beat has none (one replica)
    pod_labels = [d["spec"]["template"]["metadata"]["labels"] for d in find(docs, "Deployment")]
    for pdb in pdbs:
        selector = pdb["spec"]["selector"]["matchLabels"]
        assert sum(selector.items() <= labels.items() for labels in pod_labels) == 1
        assert pdb["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ({"workers": {"query": {"enabled": False}}}, "no enabled worker group serves query"),
        ({"workers": {"cpu": {"gpuFallback": False}}}, "no enabled worker group serves perceive.gpu"),
        ({"workers": {"store": {"queues": ["store", "consolidate", "stores"]}}}, "value must be one of"),
        ({"workers": {"cpu": {"pool": "gevent"}}}, "value must be one of 'prefork', 'solo', 'threads'"),
        ({"workers": {"cpu": {"concurency": 4}}}, "additional properties 'concurency' not allowed"),
        ({"config": {"S3_BUCKET": "b"}}, "'S3_BUCKET' does not match pattern '^ENGRAM_"),
        ({"qdrant": {"url": ""}}, "qdrant.url is required"),
        ({"config": {"ENGRAM_S3_SECRET_KEY": "x"}}, "looks like a secret"),
        ({"secrets": {"existingSecret": "env", "vlmApiKey": "k"}}, "secrets.existingSecret is set"),
        ({"vault": {"existingSecret": "v"}, "secrets": {"vaultKey": "k"}}, "vault.existingSecret is set"),
        ({"secrets": {"extra": {"ENGRAM_VAULT_KEY": "k"}}}, "secrets.extra.ENGRAM_VAULT_KEY"),
        ({"networkPolicy": {"enabled": "yes"}}, "got string, want boolean"),
    ],
)
def test_bad_values_fail_with_the_reason(values, reason):
    proc = helm("template", RELEASE, str(CHART), values=values, check=False)
    assert proc.returncode != 0 and reason in proc.stderr, proc.stderr


def _value_paths(node: dict, prefix: str = "") -> list[str]:
    """Dotted paths of values.yaml down to its documented leaves (free-form maps count as one value)."""
    free_form = {
        "resources",
        "nodeSelector",
        "tolerations",
        "affinity",
        "env",
        "podAnnotations",
        "annotations",
        "labels",
        "config",
        "extra",
        "livenessProbe",
        "readinessProbe",
        "podSecurityContext",
        "containerSecurityContext",
        "hosts",
        "tls",
    }
    paths = []
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in free_form:
            paths += _value_paths(value, path + ".")
        else:
            paths.append(path)
    return paths


def test_readme_documents_every_value():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    documented = {line.split("|")[1].strip().strip("`") for line in readme.splitlines() if line.startswith("| `")}
    for path in _value_paths(values):
        generic = (
            path.replace(".cpu.", ".<group>.")
            .replace(".gpu.", ".<group>.")
            .replace(".store.", ".<group>.")
            .replace(".query.", ".<group>.")
        )
        assert path in documented or generic in documented, f"{path} is not in helm/engram/README.md's table"


@pytest.mark.parametrize("scenario", ["default", "gpu", "keda"])
def test_every_worker_and_beat_has_liveness_and_readiness(scenario):
    """Workers: `celery inspect ping` of the pod's own node, named by the worker's --hostname (an option `engram
    worker` has); beat: its schedule file, where `engram beat` keeps it, written recently."""
    from engram.api.cli.main import worker as worker_command
    from engram.api.processes import beat_schedule_path

    assert "hostname" in inspect.signature(worker_command).parameters
    docs = render(scenario)
    groups = workers(docs)
    assert groups
    for name, deployment in groups.items():
        c = container(deployment)
        node = f"worker-{name}"
        assert option(c["args"], "--hostname") == f"{node}@%h"
        for probe in ("livenessProbe", "readinessProbe"):
            command = c[probe]["exec"]["command"]
            assert command[:2] == ["sh", "-c"], (name, probe)
            assert command[2] == (
                f'exec celery -A engram.workers.app inspect ping --destination "{node}@$HOSTNAME" --timeout 10'
            ), (name, probe)
            assert c[probe]["timeoutSeconds"] > 10 and c[probe]["periodSeconds"] >= 10
    beat = one(docs, "Deployment", f"{RELEASE}-engram-beat")
    c = container(beat)
    data_dir = one(docs, "ConfigMap", f"{RELEASE}-engram-config")["data"]["ENGRAM_DATA_DIR"]
    schedule = beat_schedule_path(Settings(data_dir=data_dir))
    assert any(m["mountPath"] == data_dir for m in c["volumeMounts"])
    for probe in ("livenessProbe", "readinessProbe"):
        command = c[probe]["exec"]["command"]
        assert command[:2] == ["python", "-c"] and f"{schedule}*" in command[2]
        compile(command[2], "probe", "exec")


def test_beat_probe_passes_on_a_fresh_schedule_and_fails_on_a_stale_one(tmp_path):
    import sys

    command = container(one(render("default"), "Deployment", f"{RELEASE}-engram-beat"))["livenessProbe"]
    code = command["exec"]["command"][2].replace("/data/beat/", f"{tmp_path}/")

    def run() -> int:
        return subprocess.run([sys.executable, "-c", code], timeout=30).returncode

    assert run() == 1  # no schedule yet
    (tmp_path / "celerybeat-schedule.db").write_bytes(b"x")
    assert run() == 0
    os.utime(tmp_path / "celerybeat-schedule.db", (0, 0))
    assert run() == 1


def _under(path: str, mounts: list[str]) -> bool:
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts)


@pytest.mark.parametrize("scenario", ["default", "gpu"])
def test_read_only_root_filesystem_with_writable_emptydirs(scenario):
    """Every container (api, workers, beat, the keygen hook) runs with a read-only root filesystem and an emptyDir
    at /tmp; every place engram and its libraries write (data dir, model cache, caches, metrics) is on an
    emptyDir it mounts."""
    docs = render(scenario)
    config = one(docs, "ConfigMap", f"{RELEASE}-engram-config")["data"]
    pods = [d["spec"]["template"]["spec"] for d in find(docs, "Deployment") + find(docs, "Job")]
    assert len(pods) >= 5
    for pod in pods:
        empty = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
        for c in pod["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, c["name"]
            mounts = [m["mountPath"] for m in c["volumeMounts"] if m["name"] in empty]
            assert "/tmp" in mounts, c["name"]
            if c["name"] == "keygen":
                continue
            env = {**config, **{v["name"]: v["value"] for v in c["env"] if "value" in v}}
            for var in (
                "ENGRAM_DATA_DIR",
                "ENGRAM_MODELS__CACHE_DIR",
                "XDG_CACHE_HOME",
                "NUMBA_CACHE_DIR",
                "MPLCONFIGDIR",
                "PROMETHEUS_MULTIPROC_DIR",
            ):
                if var in env:
                    assert _under(env[var], mounts), (c["name"], var, env[var])
            assert _under(env["ENGRAM_DATA_DIR"], mounts) and _under(env["ENGRAM_MODELS__CACHE_DIR"], mounts)


def test_network_policy_only_when_enabled():
    """networkPolicy.enabled: every engram pod but the keygen hook denies ingress except the api port (from the
    peers given) and the workers' metrics port, and reaches only DNS, Redis, Qdrant, S3 and extraEgress."""
    assert not find(render("default"), "NetworkPolicy")
    docs = render("networkpolicy")
    policies = {p["metadata"]["name"]: p for p in find(docs, "NetworkPolicy")}
    assert set(policies) == {f"{RELEASE}-engram", f"{RELEASE}-engram-api", f"{RELEASE}-engram-worker-metrics"}

    def selects(policy: dict, labels: dict) -> bool:
        selector = policy["spec"]["podSelector"]
        if not selector["matchLabels"].items() <= labels.items():
            return False
        return all(
            labels.get(e["key"]) not in e["values"]
            for e in selector.get("matchExpressions", [])
            if e["operator"] == "NotIn"
        )

    main = policies[f"{RELEASE}-engram"]
    assert main["spec"]["policyTypes"] == ["Ingress", "Egress"] and main["spec"]["ingress"] == []
    for deployment in find(docs, "Deployment"):
        assert selects(main, deployment["spec"]["template"]["metadata"]["labels"]), deployment["metadata"]["name"]
    (job,) = find(docs, "Job")
    assert not selects(main, job["spec"]["template"]["metadata"]["labels"])  # it talks to the Kubernetes API
    ports = {(p["protocol"], p["port"]) for rule in main["spec"]["egress"] for p in rule["ports"]}
    assert ports == {("UDP", 53), ("TCP", 53), ("TCP", 6379), ("TCP", 6333), ("TCP", 9000), ("TCP", 443)}
    api = policies[f"{RELEASE}-engram-api"]
    api_pod = one(docs, "Deployment", f"{RELEASE}-engram-api")["spec"]["template"]["metadata"]["labels"]
    assert selects(api, api_pod) and not any(
        selects(api, d["spec"]["template"]["metadata"]["labels"]) for d in workers(docs).values()
    )
    (rule,) = api["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8000}]
    assert rule["from"][0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "ingress-nginx"}
    metrics = policies[f"{RELEASE}-engram-worker-metrics"]
    assert metrics["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 9808}]
    for deployment in workers(docs).values():
        assert selects(metrics, deployment["spec"]["template"]["metadata"]["labels"])


def test_network_policy_ports_follow_the_service_addresses():
    values = {
        "networkPolicy": {"enabled": True},
        "redis": {"port": 6380},
        "qdrant": {"url": "https://qdrant.example.com"},
        "s3": {"endpoint": "s3.amazonaws.com", "secure": True},
    }
    docs = [d for d in yaml.safe_load_all(helm("template", RELEASE, str(CHART), values=values).stdout) if d]
    main = one(docs, "NetworkPolicy", f"{RELEASE}-engram")
    ports = {(p["protocol"], p["port"]) for rule in main["spec"]["egress"] for p in rule["ports"]}
    assert ports == {("UDP", 53), ("TCP", 53), ("TCP", 6380), ("TCP", 443)}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_service_is_internal(scenario):
    """The chart's Services (the API, the workers' metrics) are ClusterIP: the API leaves the cluster only
    through api.ingress or a type asked for in api.service.type."""
    services = find(render(scenario), "Service")
    assert services
    for svc in services:
        assert svc["spec"]["type"] == "ClusterIP", svc["metadata"]["name"]


def test_redis_password_and_qdrant_api_key_are_required():
    """Without Redis's password or Qdrant's API key the chart refuses to render, saying which value gives it;
    requirePassword / requireApiKey false render a cluster without them (no password in the URLs, no key)."""
    proc = helm("template", RELEASE, str(CHART), values={}, check=False, credentials=False)
    assert proc.returncode != 0 and "redis.password or redis.existingSecret is required" in proc.stderr
    proc = helm("template", RELEASE, str(CHART), values={"redis": {"password": "p"}}, check=False, credentials=False)
    assert proc.returncode != 0 and "qdrant.apiKey or qdrant.existingSecret is required" in proc.stderr
    for values in (
        {"secrets": {"existingSecret": "env"}, "redis": {"existingSecret": "env"}},
        {"redis": {"password": "p"}, "qdrant": {"apiKey": "k"}},
    ):
        helm("template", RELEASE, str(CHART), values=values, credentials=False)
    values = {"redis": {"requirePassword": False}, "qdrant": {"requireApiKey": False}}
    docs = [
        d
        for d in yaml.safe_load_all(helm("template", RELEASE, str(CHART), values=values, credentials=False).stdout)
        if d
    ]
    env = {v["name"]: v for v in container(one(docs, "Deployment", f"{RELEASE}-engram-api"))["env"]}
    assert env["ENGRAM_BROKER_URL"]["value"] == "redis://engram-redis-master:6379/0"
    assert "ENGRAM_QDRANT_API_KEY" not in env and "REDIS_PASSWORD" not in env


def _readme_install_args() -> list[str]:
    """The arguments of helm/engram/README.md's `helm install engram helm/engram ...` command."""
    readme = (CHART / "README.md").read_text()
    (command,) = [
        block
        for block in re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
        if block.startswith("helm install engram helm/engram")
    ]
    words = shlex.split(command.split("\nkubectl")[0].replace("\\\n", " "), comments=True)
    assert words[:4] == ["helm", "install", "engram", "helm/engram"]
    return words[4:]


def test_the_readmes_install_reads_every_credential_from_the_companion_charts_secrets():
    """The README's install, rendered as written: every pod reads Redis's password from Bitnami's Secret and
    Qdrant's API key from the Secret Qdrant's chart makes with helm/qdrant-values.yaml (apiKey: true ->
    <release>-apikey, key api-key); no credential in the ConfigMap or a value; Qdrant's Service internal."""
    docs = [
        d
        for d in yaml.safe_load_all(
            helm("template", "engram", str(CHART), *_readme_install_args(), credentials=False).stdout
        )
        if d
    ]
    qdrant_values = yaml.safe_load((REPO / "helm" / "qdrant-values.yaml").read_text())
    assert qdrant_values["apiKey"] is True and qdrant_values["service"]["type"] == "ClusterIP"
    assert "engram-qdrant qdrant/qdrant -f helm/qdrant-values.yaml" in (CHART / "README.md").read_text()
    deployments = find(docs, "Deployment")
    assert deployments
    for deployment in deployments:
        env = {v["name"]: v for v in container(deployment)["env"]}
        assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "engram-redis", "key": "redis-password"}
        assert env["ENGRAM_QDRANT_API_KEY"]["valueFrom"]["secretKeyRef"] == {
            "name": "engram-qdrant-apikey",
            "key": "api-key",
        }
        assert env["ENGRAM_BROKER_URL"]["value"].startswith("redis://:$(REDIS_PASSWORD)@")
    config = one(docs, "ConfigMap", "engram-config")["data"]  # release "engram": fullname "engram"
    assert not any(re.search("PASSWORD|API_KEY|SECRET", name) for name in config)
    for svc in find(docs, "Service"):
        assert svc["spec"]["type"] == "ClusterIP", svc["metadata"]["name"]
