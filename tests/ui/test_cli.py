"""``engram ui`` as a person runs it: it prints its loopback URL, serves the stored notes, refuses another Host,
and leaves the embedded store to other engram commands while it runs (``engram search`` in another process works
between its pages, as beside ``engram mcp``, and the UI reads the store again after)."""

from __future__ import annotations

import re
import subprocess
import sys

import httpx
import pytest

from tests.conftest import REPO, cli_env, run_cli


def _env(root) -> dict[str, str]:
    return cli_env(root, ENGRAM_TIMEZONE="UTC", ENGRAM_USER="ann")


_cli = run_cli


def _first_id(html: str) -> str:
    return re.search(r'href="/item/([0-9a-f-]{36})"', html).group(1)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_engram_ui_serves_the_store_and_shares_it(tmp_path):
    env, data = _env(tmp_path), tmp_path / "data"
    added = _cli(env, data, "add", "The piano tuner comes on Thursday morning", "--time", "2024-05-02T09:00:00Z")
    assert added.returncode == 0, added.stderr[-2000:]
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram.api.cli", "ui", "--port", "0", "--data-dir", str(data)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        while line and not line.startswith("engram ui on "):  # (a library's notice before it, if any)
            line = proc.stdout.readline()
        assert line.startswith("engram ui on http://127.0.0.1:"), (line, proc.stderr.read() if proc.poll() else "")
        url = line.split()[3].rstrip("/")
        with httpx.Client(base_url=url, timeout=300) as c:
            day = c.get("/timeline", params={"date": "2024-05-02"})
            assert day.status_code == 200 and "The piano tuner comes on Thursday morning" in day.text, day.text[-2000:]
            assert c.get("/", headers={"Host": "attacker.example"}).status_code == 403
            # the UI holds the store (lingering after the page): another command gets it when it asks
            found = _cli(env, data, "search", "when does the piano tuner come")
            assert found.returncode == 0 and "piano tuner comes on Thursday" in found.stdout, (
                found.stdout[-2000:],
                found.stderr[-2000:],
            )
            again = c.get(f"/item/{_first_id(day.text)}")
            assert again.status_code == 200 and "The piano tuner comes on Thursday morning" in again.text
    finally:
        proc.terminate()
        proc.wait(timeout=60)
