"""The documentation's generated pages are current: docs/settings.md is what `python scripts/docs.py` makes from
Settings, and every figure on docs/figures.md and in README.md's headline table equals its bench/results JSON."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("engram_docs_script", REPO / "scripts" / "docs.py")
assert _spec and _spec.loader
docs = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = docs  # dataclasses look their module up there
_spec.loader.exec_module(docs)

_DATE = re.compile(r"last committed (\d{4}-\d{2}-\d{2}|not committed)")
_FIX = "run `python scripts/docs.py` and commit what it writes"


def test_settings_page_is_generated_from_settings():
    assert docs.SETTINGS_PAGE.read_text() == docs.settings_page(), _FIX


def test_every_figure_on_the_figures_page_equals_its_json():
    files = docs.results()
    page = _DATE.sub("", docs.FIGURES_PAGE.read_text())
    assert page == _DATE.sub("", docs.figures_page(files)), _FIX
    # and the rows say what the JSON holds, read back independently of the page's layout
    for stem, data in files.items():
        section = page.split(f"## {stem}\n", 1)[1].split("\n## ", 1)[0]
        for path, value in docs.leaves(data):
            assert f"| `{path}` | {docs.show(value)} |" in section, (stem, path)


def test_readme_headline_figures_equal_their_json():
    files = docs.results()
    readme = docs.README.read_text()
    table = readme.split(docs.START, 1)[1].split(docs.END, 1)[0]
    shown = {row.split(" | ")[0].strip("| "): row.split(" | ")[1] for row in table.strip().splitlines()[2:]}
    expected = 0
    for h in docs.HEADLINES:
        value = docs.lookup(files.get(h.stem), h.path)
        if value is None or isinstance(value, (dict, list)):
            assert h.what not in shown, f"{h.what}: no figure in bench/results/{h.stem}.json; {_FIX}"
            continue
        expected += 1
        assert shown.get(h.what) == f"{docs.show(value)}{h.unit}", f"{h.what}; {_FIX}"
    assert len(shown) == expected and expected >= 5
