"""The requirements of the slim API/producer image, taken from pyproject.toml.

The API (`engram serve`) and the producer commands (`engram publish`, `watch`, `keys`) never load a model:
they need about a fifth of engram's dependencies and none of torch, the models or the media libraries.
``deploy/Dockerfile.api`` installs what this prints, then engram itself with ``--no-deps``, so the
version ranges stay those of pyproject.toml (one place). tests/deploy/test_images.py imports the API and
producer with every other distribution blocked, so a new import outside this set fails there, not in the
image.

Usage: python image_requirements.py [pyproject.toml] > requirements.txt
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

#: Distributions the API and producer import (normalised names, as in PEP 503).
API_PACKAGES = frozenset({
    "pydantic", "pydantic-settings", "platformdirs", "typer", "rich", "structlog", "prometheus-client", "psutil",
    "celery", "redis", "minio", "numpy", "filetype", "fastapi", "fastapi-offline", "uvicorn", "httpx", "tenacity",
    "watchdog",
    # the knowledge vault: POST /v1/events redacts an event's window title and metadata (workers.vault)
    "cryptography", "detect-secrets", "python-stdnum", "phonenumberslite",
})


def normalise(name: str) -> str:
    """PEP 503 name normalisation: ``Pydantic_Settings`` -> ``pydantic-settings``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """The distribution name of a PEP 508 requirement string (``celery[redis]>=5.4`` -> ``celery``)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return normalise(match.group(1))


def api_requirements(pyproject: Path) -> list[str]:
    """pyproject.toml's entries for API_PACKAGES from the base ``dependencies`` and the ``server`` extra, in file
    order. Raises LookupError naming any API package pyproject.toml no longer lists there."""
    project = tomllib.loads(pyproject.read_text())["project"]
    dependencies = [*project["dependencies"], *project["optional-dependencies"]["server"]]
    chosen = [r for r in dependencies if requirement_name(r) in API_PACKAGES]
    missing = API_PACKAGES - {requirement_name(r) for r in chosen}
    if missing:
        raise LookupError(f"not in pyproject.toml's dependencies: {', '.join(sorted(missing))}")
    return chosen


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "pyproject.toml"
    print("\n".join(api_requirements(path)))
