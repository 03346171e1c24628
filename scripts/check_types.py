"""Type check with mypy (and pydantic's plugin) against a baseline that may only shrink.

The repository keeps ``api/``, ``schemas/`` and ``workers/``, installed as ``engram.api``, ``engram.schemas`` and
``engram.workers`` (pyproject's ``package-dir``); an editable install resolves them through an import hook that
mypy cannot follow. So the check lays the three folders out as ``engram/{api,schemas,workers}`` (symbolic links in
``.mypy_layout/``, ignored by git, kept so mypy's cache in ``.mypy_cache/`` stays valid between runs) and runs
``mypy -p engram`` there with ``[tool.mypy]`` of pyproject.toml.

The baseline (``.ci/mypy-baseline.json``) counts errors per (file, error code), without line numbers, so edits
that move code do not disturb it. The check fails when a file has more errors of a code than its baseline, or
errors of a code it had none of, or any error at all in the fully typed parts (``STRICT``: the SDK, the schemas and
the service layer); fewer errors pass and are reported, so the baseline is then rewritten with
``--update`` (which refuses to grow it; with no baseline yet, it writes the first one).

Usage: python scripts/check_types.py [--update]
Exit codes: 0 at or below the baseline, 1 above it, 2 when mypy itself fails to run.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / ".ci" / "mypy-baseline.json"
LAYOUT = ROOT / ".mypy_layout"
#: fully typed: no error allowed whatever the baseline says (the SDK, the schemas, the service layer)
STRICT = ("schemas/", "api/client.py", "api/service/")
PACKAGES = ("api", "schemas", "workers")
#: ``engram/api/cli/main.py:363: error: Argument 1 ... [arg-type]``
ERROR = re.compile(r"^engram/(?P<file>[^:]+):\d+: error: .*\[(?P<code>[a-z0-9-]+)\]$")


def run_mypy() -> tuple[Counter[str], str]:
    """mypy over the ``engram`` layout: (errors counted by ``"<repo path> [<code>]"``, mypy's whole output).
    Raises RuntimeError when mypy crashes or cannot start (exit code 2)."""
    pkg = LAYOUT / "engram"
    pkg.mkdir(parents=True, exist_ok=True)
    for name in PACKAGES:
        if not (pkg / name).is_symlink():
            (pkg / name).symlink_to(ROOT / name, target_is_directory=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "-p",
            "engram",
        ],
        cwd=LAYOUT,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"mypy failed to run (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    counts: Counter[str] = Counter()
    for line in proc.stdout.splitlines():
        if m := ERROR.match(line):
            counts[f"{m['file']} [{m['code']}]"] += 1
    return counts, proc.stdout


def compare(counts: Counter[str], baseline: dict[str, int]) -> tuple[list[str], list[str]]:
    """(what rose above the baseline or is in a fully typed part, what fell below the baseline), a line per
    (file, code)."""
    worse = [
        f"{key}: {n} (baseline {baseline.get(key, 0)}{', fully typed' if key.startswith(STRICT) else ''})"
        for key, n in sorted(counts.items())
        if n > baseline.get(key, 0) or key.startswith(STRICT)
    ]
    better = [
        f"{key}: {counts.get(key, 0)} (baseline {n})" for key, n in sorted(baseline.items()) if counts.get(key, 0) < n
    ]
    return worse, better


def offending_lines(output: str, worse: list[str]) -> list[str]:
    """mypy's lines (with their notes) for the files named in ``worse``."""
    files = {line.split(" [", 1)[0] for line in worse}
    return [line for line in output.splitlines() if line.split(":", 1)[0].removeprefix("engram/") in files]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--update", action="store_true", help="rewrite the baseline with today's counts (refused when any count grew)"
    )
    args = parser.parse_args()
    try:
        counts, output = run_mypy()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    worse, better = compare(counts, baseline)
    total, before = sum(counts.values()), sum(baseline.values())
    if not BASELINE.exists() and args.update:  # the first baseline: only the fully typed parts must be clean
        worse = [line for line in worse if "fully typed" in line]
    if worse:
        print(*offending_lines(output, worse), sep="\n")
        print(f"mypy: {total} errors, above the baseline ({before}) in:", *worse, sep="\n  ", file=sys.stderr)
        print("fix them (or, for a real false positive, a `# type: ignore[code]` with the reason)", file=sys.stderr)
        return 1
    if args.update:
        BASELINE.write_text(json.dumps(dict(sorted(counts.items())), indent=1) + "\n")
        print(f"mypy: baseline rewritten: {total} errors (was {before})")
        return 0
    print(f"mypy: {total} errors, within the baseline ({before})")
    if better:
        print(
            "below the baseline (run `python scripts/check_types.py --update` to keep the gain):", *better, sep="\n  "
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
