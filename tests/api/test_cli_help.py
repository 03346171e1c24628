"""--help that teaches: flags shown as flags, plain types, placeholders and examples shown as written."""

from __future__ import annotations

from typer.testing import CliRunner

from engram.api.cli.main import app


def _help(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"}, terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def test_flags_are_flags_and_types_are_plain():
    forget = _help("forget")
    assert "--yes " in forget and "<bool>" not in forget and "<str>" not in forget
    ingest = _help("ingest")
    assert "PATH" in ingest and "list[Path]" not in ingest and "<path>" not in ingest


def test_placeholders_and_examples_are_shown_as_written():
    assert "(from a [vault:ID type] placeholder)" in _help("vault", "reveal")
    export = _help("export")
    assert "engram export --user U > file.json" in " ".join(export.split()) and "``" not in export
