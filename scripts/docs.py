"""Writes the documentation site's two generated pages and the README's table of headline figures.

- ``docs/figures.md``: every ``bench/results/*.json`` rendered as tables (each number as the JSON holds it), with the
  command that makes the file and the date of its last commit.
- ``docs/settings.md``: every field of :class:`engram.schemas.settings.Settings` (and its nested model groups) as
  the environment variable that sets it, its type, default and description.
- ``README.md``: the rows between ``<!-- figures:start -->`` and ``<!-- figures:end -->``, from :data:`HEADLINES`.

Usage: ``python scripts/docs.py`` (rewrite), ``python scripts/docs.py --check`` (exit 1 naming each stale file;
``tests/test_docs.py`` runs the same comparison). Dated runs live in the JSON and in git history, not in prose.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
README = ROOT / "README.md"
FIGURES_PAGE = ROOT / "docs" / "figures.md"
SETTINGS_PAGE = ROOT / "docs" / "settings.md"
START, END = "<!-- figures:start -->", "<!-- figures:end -->"

# the command that writes each results file, where it is not `python bench/<stem>.py --json bench/results/<stem>.json`
COMMANDS = {
    "ingest": "python bench/ingest.py --sections text screenshot audio distributed --json bench/results/ingest.json",
    "capture": "python bench/capture_cpu.py --minutes 10 --json bench/results/capture.json",
    "capture-format": "python bench/capture_cpu.py --formats --json bench/results/capture-format.json",
    "scale": "python bench/scale.py --seed-dir DIR --json bench/results/scale.json",
    "scale-2026-11-24": "python bench/scale.py --seed-dir DIR --json bench/results/scale-2026-11-24.json",
}


@dataclass(frozen=True)
class Headline:
    """One row of the README's figures table: ``path`` leads into ``bench/results/<stem>.json`` (dotted, or a
    tuple of keys where a key holds a dot)."""

    what: str
    stem: str
    path: str | tuple[str, ...]
    target: str
    unit: str = ""


HEADLINES = [
    Headline("LoCoMo evidence recall@10 (engram)", "retrieval", "recall.engram.overall.10", "above raw turns"),
    Headline("LoCoMo evidence recall@10 (RRF over raw turns)", "retrieval", "recall.RRF.overall.10", ""),
    Headline("text ingest, cold, share of the embedder's ceiling", "ingest", "text.cold_ratio", "≥ 0.8"),
    Headline("text ingest, warm", "ingest", "text.warm_msgs_per_s", "≥ 400", " msg/s"),
    Headline("screenshot: CPU per kept frame", "ingest", "screenshot.cpu_s", "≤ 1.5", " s"),
    Headline("screenshot: OCR word recall", "ingest", "screenshot.ocr_word_recall", "≥ 0.95"),
    Headline("audio: times real time", "ingest", "audio.x_real_time", "≥ 20", "x"),
    Headline("search at 100 k observations, median", "scale", "sizes.100000.p50_ms", "", " ms"),
    Headline("capture: CPU of one core", "capture", "cpu_percent", "≤ 10", " %"),
    Headline("voices: pairwise F1 across recordings", "voices", ("pairwise_f1", "engram (threshold 0.88)", "f1"), ""),
    Headline("web app: a busy day's timeline", "ui", "timeline_ms", "≤ 300", " ms"),
    Headline("backup: speed against cp -r", "keep", "backup_ratio_to_cp", "≥ 0.5"),
    Headline("stored frame bytes against PNG", "capture-format", "frame_bytes_ratio", "≤ 0.25"),
]


def command(stem: str) -> str:
    """The command that writes ``bench/results/<stem>.json``."""
    return COMMANDS.get(stem, f"python bench/{stem}.py --json bench/results/{stem}.json")


def committed(path: Path) -> str:
    """The date (YYYY-MM-DD) of ``path``'s last commit, or ``"not committed"`` (also without git)."""
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%cs", "--", str(path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout.strip()
    except OSError:
        out = ""
    return out or "not committed"


def show(value: Any) -> str:
    """A JSON leaf as the page prints it: numbers and strings as stored, lists of scalars comma-joined."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list):
        return ", ".join(show(v) for v in value)
    if isinstance(value, float):
        return format(value, ".4g")
    text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def leaves(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, value) for every leaf worth a row: dicts are walked, lists of scalars are one leaf, and lists
    of objects (per-round detail) are one leaf that says how many there are."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(data, list) and any(isinstance(v, (dict, list)) for v in data):
        yield prefix, f"({len(data)} entries: see the JSON)"
    else:
        yield prefix, data


def lookup(data: Any, path: str | tuple[str, ...]) -> Any:
    """The value at a dotted path (or a tuple of keys), or None when any step is missing."""
    for part in path.split(".") if isinstance(path, str) else path:
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def results() -> dict[str, Any]:
    """Every results file by stem, in name order."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))}


def figures_page(files: dict[str, Any]) -> str:
    """docs/figures.md: one section per results file."""
    out = [
        "# Figures",
        "",
        "Generated by `python scripts/docs.py` from `bench/results/*.json`; do not edit by hand. Each benchmark "
        "writes its JSON there; dated runs live in those files and in git history. Figures are medians measured "
        "side by side in one run on a shared two-core machine; `load` is the load average at the time.",
        "",
    ]
    for stem, data in files.items():
        out += [
            f"## {stem}",
            "",
            f"`{command(stem)}` · last committed {committed(RESULTS / f'{stem}.json')}",
            "",
            "| figure | value |",
            "|---|---|",
        ]
        out += [f"| `{path}` | {show(value)} |" for path, value in leaves(data)]
        out.append("")
    return "\n".join(out)


def headline_rows(files: dict[str, Any]) -> str:
    """The README's table rows (with header) for every headline whose file and path exist."""
    rows = ["| figure | measured | target | date | command |", "|---|---|---|---|---|"]
    for h in HEADLINES:
        value = lookup(files.get(h.stem), h.path)
        if value is None or isinstance(value, (dict, list)):
            continue
        date = committed(RESULTS / f"{h.stem}.json")
        rows.append(f"| {h.what} | {show(value)}{h.unit} | {h.target} | {date} | `{command(h.stem)}` |")
    return "\n".join(rows)


def readme_text(files: dict[str, Any], current: str) -> str:
    """README.md with the table between the markers replaced (unchanged when the markers are absent)."""
    if START not in current or END not in current:
        return current
    head, rest = current.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{headline_rows(files)}\n{END}{tail}"


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation).replace("typing.", "").replace("pathlib.", "")
    return text.replace("pydantic.types.", "").replace("|", "\\|")


def _default(field: Any) -> str:
    if field.default_factory is not None:
        return "computed"
    value = field.default
    if value is None:
        return "unset"
    if hasattr(value, "get_secret_value"):
        return "(secret)"
    if isinstance(value, list) and not value:
        return "`[]`"
    if isinstance(value, Path) and value.is_absolute():  # made from the checkout's place: shown relative to it
        return f"`{os.path.relpath(value, ROOT)}` (from the repository)"
    return f"`{show(value)}`" if show(value) else '`""`'


def settings_page() -> str:
    """docs/settings.md: one row per environment variable."""
    sys.path.insert(0, str(ROOT))
    from schemas.settings import Settings  # noqa: PLC0415 (the repository's folder, installed or not)

    out = [
        "# Settings",
        "",
        "Generated by `python scripts/docs.py` from `schemas/settings.py`; do not edit by hand. Every setting is "
        "an environment variable with the prefix `ENGRAM_` (pydantic-settings); a nested group's fields take "
        "`__` (e.g. `ENGRAM_MODELS__ASR_MODEL`).",
        "",
    ]
    groups: list[tuple[str, str, Any]] = [("", "ENGRAM_", Settings)]
    while groups:
        title, prefix, model = groups.pop(0)
        out += [f"## {title or 'Settings'}", "", "| variable | type | default | meaning |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            annotation = field.annotation
            if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
                groups.append((name, f"{prefix}{name.upper()}__", annotation))
                out.append(f"| `{prefix}{name.upper()}__*` | group | | see [{name}](#{name}) |")
                continue
            meaning = (field.description or "").replace("|", "\\|").replace("\n", " ")
            out.append(f"| `{prefix}{name.upper()}` | {_type_name(annotation)} | {_default(field)} | {meaning} |")
        out.append("")
    return "\n".join(out)


def expected() -> dict[Path, str]:
    """What each generated file should hold now."""
    files = results()
    return {
        FIGURES_PAGE: figures_page(files),
        SETTINGS_PAGE: settings_page(),
        README: readme_text(files, README.read_text()),
    }


def main(argv: list[str] | None = None) -> int:
    """Rewrite the generated files, or with ``--check`` name the stale ones and exit 1."""
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a generated file is stale")
    args = ap.parse_args(argv)
    stale = [path for path, text in expected().items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"stale: {path.relative_to(ROOT)} (run: python scripts/docs.py)", file=sys.stderr)
        return 1 if stale else 0
    for path, text in expected().items():
        if path in stale:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
