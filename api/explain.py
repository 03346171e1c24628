"""What the ``engram`` commands say when an answer is empty: why, and what to try.

A ``search``, ``ask`` or ``memories list`` in a tenant or for a user that holds nothing is a question asked in the
wrong place (a tenant left out after ``engram demo``, a misspelt user): the command says so on stderr and exits 1,
so a script or an agent sees it from the exit code as it does for an unknown memory id; a query that matched
nothing in data that exists is an answer ("no results") and exits 0.

On the embedded default the store is one person's own, and the line names the tenants and users that do hold
data (``workers.memory.holdings.data_holders``). With a broker the tenants are other people's: the line says only
that the tenant or user holds nothing (as the API and MCP do).

An empty memory type in a tenant with data says which extractor ran and what would fill the type
(``workers.extract``: the offline rules extractor, or the LLM one).
"""

from __future__ import annotations

import typer
from rich.text import Text

from engram.api.console import err
from engram.schemas.memories import MemoryType
from engram.schemas.search import EmptyReason

#: What the offline rules extractor (``workers.extract.rules``, with ``workers.extract.statements``' spaCy parse)
#: writes each type from (14 words: ``statements.MIN_WORDS``, not imported: the CLI's install may lack the workers').
RULES_WRITE = {
    MemoryType.semantic: "facts from statements such as 'I live in Lisbon', 'Ann works at Acme' or 'my favourite "
    "band is Muse', and from what a chat's speaker says about themselves in a turn of "
    '14 words or more ("I went to a support group yesterday and it was so powerful" becomes \'Caroline '
    "went to a support group yesterday'); a question, a turn about the other person or small talk gives none",
    MemoryType.procedural: "workflows from numbered step lists and 'first ..., then ..., finally ...' instructions",
    MemoryType.core: "the user's profile from the user's own statements in the first person ('I live in ...', 'I "
    "work as ...', 'I grew up in ...', 'I love ...'): chat turns whose speaker is the user (named as --user, or "
    "'me' or 'user')",
    MemoryType.resource: "resources from URLs, file names and the windows seen on screenshots",
}
LLM_HINT = (
    "set ENGRAM_EXTRACTOR=llm with an LLM (ENGRAM_MODELS__LLM_PROVIDER=openai or gemini, "
    "ENGRAM_MODELS__LLM_MODEL, ENGRAM_MODELS__LLM_API_KEY or ENGRAM_MODELS__LLM_BASE_URL) for what is "
    "consolidated from then on"
)


def _holders_line(tenant: str, user: str | None, reason: EmptyReason) -> str:
    """The embedded default's hint: the tenants (or the tenant's users) that do hold data."""
    from engram.workers.memory.holdings import data_holders, users_with_data  # workers: only on an empty answer
    from engram.workers.runtime import runtime  # workers: only on an empty answer

    rt = runtime()
    if reason is EmptyReason.unknown_user:
        users = users_with_data(rt, tenant)
        return f"; users with data: {', '.join(users)} - try --user {users[0]}" if users else ""
    holders = {t: us for t, us in data_holders(rt).items() if t != tenant}
    if not holders:
        return f"; no tenant holds data in {rt.settings.data_dir}: `engram ingest FILES --tenant {tenant}` adds some"
    named = "; ".join(f"{t} (users: {', '.join(us)})" for t, us in holders.items())
    return f"; tenants with data: {named} - try --tenant {next(iter(holders))}"


def explain_empty(reason: EmptyReason | None, tenant: str, user: str | None) -> None:
    """Say on stderr why an answer of ``tenant`` (and ``user``) is empty, and exit 1, when the tenant or user holds
    nothing (``reason`` ``no_data`` or ``unknown_user``); do nothing for ``no_match`` or None. On the embedded
    default, the line names the tenants or users that hold data.

    Raises:
        typer.Exit: code 1, when the tenant or user holds nothing.
    """
    from engram.schemas.settings import get_settings  # as the command runs (after --data-dir)

    if reason not in (EmptyReason.no_data, EmptyReason.unknown_user):
        return
    line = (
        f"nothing stored for tenant {tenant!r}"
        if reason is EmptyReason.no_data
        else f"nothing stored for user {user!r} in tenant {tenant!r}"
    )
    if get_settings().embedded:
        line += _holders_line(tenant, user, reason)
    err.print(Text(line))
    raise typer.Exit(1)


def why_empty_here(tenant: str, user: str | None) -> EmptyReason | None:
    """``workers.memory.holdings.why_empty`` on the embedded default's store; None with a broker (the command does
    not open the store there: the workers do)."""
    from engram.schemas.settings import get_settings  # as the command runs (after --data-dir)

    if not get_settings().embedded:
        return None
    from engram.workers.memory.holdings import why_empty  # workers: only on an empty answer
    from engram.workers.runtime import runtime  # workers: only on an empty answer

    return why_empty(runtime(), tenant, user)


def empty_type_line(memory_type: MemoryType) -> str | None:
    """Why a memory type is empty in a tenant that holds data: which extractor ran and what would fill it; None for
    the observations (never empty where there is data)."""
    from engram.schemas.settings import get_settings  # as the command runs (after --data-dir)

    settings = get_settings()
    if memory_type is MemoryType.episodic:
        return (
            "no episodic memories yet: consolidation writes them (at the end of `engram ingest`, or `engram "
            "consolidate` now)"
        )
    if memory_type is MemoryType.knowledge_vault:
        return "no secrets were found in what was ingested (keys, passwords, tokens, card numbers go here)"
    if memory_type not in RULES_WRITE:
        return None
    if settings.extractor == "llm":
        return (
            f"no {memory_type.value} memories: the LLM extractor ({settings.models.llm_provider}, "
            f"{settings.models.llm_model}) found none in what was consolidated"
        )
    return (
        f"no {memory_type.value} memories: the offline rules extractor ran (ENGRAM_EXTRACTOR=rules); it writes "
        f"only {RULES_WRITE[memory_type]}; {LLM_HINT}"
    )
