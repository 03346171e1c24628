"""The Qdrant server the cluster runs (deploy/docker-compose.yml's image, helm/qdrant-values.yaml's tag for
Qdrant's own chart) is one the client pinned in the lock files accepts: qdrant-client's own rule
(``qdrant_client.common.version_check.is_compatible``, which ``QdrantClient`` applies at connect time and warns
on), same major version and minor versions at most one apart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from qdrant_client.common.version_check import is_compatible

REPO = Path(__file__).resolve().parents[2]
LOCKS = (REPO / "requirements.lock", REPO / "requirements-dev.lock")


def locked_client_version(lock: Path) -> str:
    """The ``qdrant-client==X.Y.Z`` pin of a lock file; fails the test when the lock has none."""
    found = re.findall(r"^qdrant-client==([^\s;]+)", lock.read_text(), flags=re.M)
    assert len(found) == 1, f"{lock.name}: {len(found)} qdrant-client pins"
    return found[0]


def server_tag(image: str) -> str:
    """``qdrant/qdrant:v1.20.0`` -> ``1.20.0`` (a moving tag such as ``latest`` is refused: nothing to check)."""
    tag = image.rpartition(":")[2].removeprefix("v")
    assert re.fullmatch(r"\d+\.\d+\.\d+", tag), f"{image}: pin a released version (vX.Y.Z)"
    return tag


def server_pins() -> dict[str, str]:
    compose = yaml.safe_load((REPO / "deploy" / "docker-compose.yml").read_text())
    helm_values = yaml.safe_load((REPO / "helm" / "qdrant-values.yaml").read_text())
    return {
        "deploy/docker-compose.yml": server_tag(compose["services"]["qdrant"]["image"]),
        "helm/qdrant-values.yaml": server_tag("qdrant/qdrant:" + helm_values["image"]["tag"]),
    }


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_the_servers_are_ones_the_locked_client_accepts(lock):
    client = locked_client_version(lock)
    for where, server in server_pins().items():
        assert is_compatible(client, server), (
            f"{where} runs Qdrant {server}, {lock.name} pins qdrant-client {client}: more than one minor version "
            "apart, the client warns on every connection; move the server's tag"
        )


def test_compose_and_helm_run_the_same_server():
    assert len(set(server_pins().values())) == 1, server_pins()


def test_the_rule_refuses_the_old_pin():
    """The check would have caught the server this stack ran before (v1.15.0 against client 1.20.0)."""
    assert not is_compatible("1.20.0", "1.15.0") and not is_compatible("1.20.0", "2.20.0")
    assert is_compatible("1.20.0", "1.21.3") and is_compatible("1.20.0", "1.19.0")
