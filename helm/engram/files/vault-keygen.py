"""The vault-keygen hook Job of helm/engram: make the vault's Secret once, if absent (Python's standard library
only; runs in the engram-api image with the Job's own ServiceAccount).

VAULT_SECRET (name) and VAULT_SECRET_KEY (its key) name the Secret; when it exists, nothing is changed. Otherwise
its key is the ENGRAM_VAULT_KEY of LEGACY_SECRET (the chart's Secret of releases before this Job, where the key
was made by `lookup` at render time) when that one holds it, else a new Fernet key (32 random bytes, URL-safe
base64, as `engram vault keygen` prints). The Secret is created with helm.sh/resource-policy: keep; a 409 (made
meanwhile) keeps the other one. LABELS: a JSON object of labels for the Secret.
"""

import base64
import json
import os
import secrets
import ssl
import sys
import urllib.error
import urllib.request

SA = "/var/run/secrets/kubernetes.io/serviceaccount"


def call(method, url, token, context, body=None):
    """(HTTP status, parsed JSON body or None) of one Kubernetes API request."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Authorization": "Bearer " + token, "Accept": "application/json", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, None


def main():
    with open(SA + "/namespace") as f:
        namespace = f.read().strip()
    with open(SA + "/token") as f:
        token = f.read().strip()
    context = ssl.create_default_context(cafile=SA + "/ca.crt")
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    if ":" in host:  # IPv6
        host = "[" + host + "]"
    base = "https://{}:{}/api/v1/namespaces/{}/secrets".format(host, os.environ["KUBERNETES_SERVICE_PORT"], namespace)
    name, key = os.environ["VAULT_SECRET"], os.environ["VAULT_SECRET_KEY"]

    status, _ = call("GET", base + "/" + name, token, context)
    if status == 200:
        print(f"Secret {namespace}/{name} exists: its vault key is kept")
        return 0
    if status != 404:
        print(f"reading Secret {namespace}/{name}: HTTP {status}", file=sys.stderr)
        return 1

    value, source = None, "a new Fernet key"
    legacy = os.environ.get("LEGACY_SECRET")
    if legacy:
        status, old = call("GET", base + "/" + legacy, token, context)
        encoded = ((old or {}).get("data") or {}).get("ENGRAM_VAULT_KEY") if status == 200 else None
        if encoded:
            value, source = base64.b64decode(encoded).decode(), "the key of Secret " + legacy
    if value is None:
        value = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()

    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "labels": json.loads(os.environ.get("LABELS") or "{}"),
            "annotations": {"helm.sh/resource-policy": "keep"},
        },
        "stringData": {key: value},
    }
    status, _ = call("POST", base, token, context, body)
    if status == 201:
        print(f"Secret {namespace}/{name} made with {source}")
        return 0
    if status == 409:
        print(f"Secret {namespace}/{name} was made meanwhile: that one is kept")
        return 0
    print(f"creating Secret {namespace}/{name}: HTTP {status}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
