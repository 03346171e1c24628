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

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


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
    """The slim image's requirements: pyproject.toml's base ``dependencies`` (the client's) and its ``server``
    extra (the API, the CLI and the producer), in file order, with the extras ``server`` takes from engram itself
    (``engram-multimodal[mcp]``) spelled out, since the image installs engram with ``--no-deps``."""
    project = tomllib.loads(pyproject.read_text())["project"]
    extras, own = project["optional-dependencies"], normalise(project["name"])

    def expand(requirements: list[str]) -> list[str]:
        out: list[str] = []
        for req in requirements:
            if requirement_name(req) != own:
                out.append(req)
                continue
            names = re.search(r"\[([^\]]*)\]", req)
            for extra in names.group(1).split(",") if names else []:
                out += [r for r in expand(extras[extra.strip()]) if r not in out]
        return out

    return expand([*project["dependencies"], *extras["server"]])


def api_packages(pyproject: Path = PYPROJECT) -> frozenset[str]:
    """The distributions the API and producer may import (normalised names, as in PEP 503)."""
    return frozenset(requirement_name(r) for r in api_requirements(pyproject))


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else PYPROJECT
    print("\n".join(api_requirements(path)))
