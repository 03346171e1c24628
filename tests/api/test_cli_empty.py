"""Empty answers say why on the embedded default's CLI: after notes were ingested into tenant ``demo`` (as ``engram
demo`` stores its sample), a search, ask or list of tenant ``default`` or of an unknown user names where the data
is and exits 1; an empty memory type says which extractor ran and what would fill it; hits show what matched
instead of fused scores (kept in ``--json``). Real ingest into a temporary ENGRAM_DATA_DIR, the CLI in-process."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from engram.api.cli.main import app

NOTES = {
    "lease.md": "# Lease\n\nThe lease for Flat 4B ends on 30 April. Dana sent the renewal form to sign by 31 March.\n",
    "budget.md": "# Budget\n\nThe quarterly budget review moved to Thursday at three pm.\n",
}


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    """``run(*args)``: the ``engram`` CLI in this process on a store holding two notes of tenant ``demo``, user
    ``demo-user``."""
    from engram.workers.runtime import reset_runtimes

    root = tmp_path_factory.mktemp("empty")
    (root / "notes").mkdir()
    for name, text in NOTES.items():
        (root / "notes" / name).write_text(text)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENGRAM_DATA_DIR", str(root / "data"))
        for var in ("ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT", "ENGRAM_BROKER_URL", "ENGRAM_TENANT", "ENGRAM_USER"):
            mp.delenv(var, raising=False)
        reset_runtimes()

        def run(*args: str):
            return CliRunner().invoke(app, list(args))

        done = run("ingest", str(root / "notes"), "--tenant", "demo", "--user", "demo-user")
        assert done.exit_code == 0 and "2 done" in done.stdout, done.output
        yield run
        reset_runtimes()


def test_a_search_of_the_default_tenant_names_the_tenants_with_data(cli):
    out = cli("search", "when does the lease end")
    assert out.exit_code == 1, out.output
    assert "no results" in out.stdout
    assert (
        "nothing stored for tenant 'default'; tenants with data: demo (users: demo-user) - try --tenant demo"
        in " ".join(out.stderr.split())
    )
    as_json = cli("search", "when does the lease end", "--json")
    assert as_json.exit_code == 1 and json.loads(as_json.stdout)["empty"] == "no_data"


def test_an_unknown_user_names_the_tenants_users(cli):
    out = cli("search", "lease", "--tenant", "demo", "--user", "carol")
    assert out.exit_code == 1, out.output
    assert (
        "nothing stored for user 'carol' in tenant 'demo'; users with data: demo-user - try --user demo-user"
        in " ".join(out.stderr.split())
    )


def test_ask_and_list_say_why_too(cli):
    asked = cli("ask", "when does the lease end")
    assert asked.exit_code == 1 and "tenants with data: demo" in " ".join(asked.stderr.split()), asked.output
    listed = cli("memories", "list")
    assert listed.exit_code == 1 and "try --tenant demo" in " ".join(listed.stderr.split()), listed.output


def test_an_empty_memory_type_says_which_extractor_ran(cli):
    out = cli("memories", "list", "--tenant", "demo", "--type", "procedural")
    assert out.exit_code == 0, out.output
    said = " ".join(out.stderr.split())
    assert "the offline rules extractor ran (ENGRAM_EXTRACTOR=rules)" in said
    assert "numbered step lists" in said and "ENGRAM_MODELS__LLM_PROVIDER" in said


def test_hits_show_what_matched_not_scores(cli):
    out = cli("search", "lease renewal", "--tenant", "demo", "--type", "observation")
    assert out.exit_code == 0 and not out.stderr, out.output
    table = " ".join(out.stdout.replace("│", " ").split())
    assert "matched" in table and "score" not in table
    assert "words: lease, renewal +" in table and "meaning" in table  # both rankings found the lease note
    raw = json.loads(cli("search", "lease renewal", "--tenant", "demo", "--json").stdout)
    first = raw["hits"][0]
    assert first["score"] > 0 and first["matched"]["words"] == ["lease", "renewal"]
