"""LoCoMo and LongMemEval recall of engram's search beside the raw-turn (or session) baselines: the evaluations
``bench/retrieval.py`` runs and prints, and the per-half figures (issue 45, ``docs/quality.md``).

``evaluate`` ingests LoCoMo conversations through the real path on the embedded default and measures evidence
recall@k at a budget of k turns; ``evaluate_longmemeval`` does LongMemEval-S session recall_any@k; both return
per-question ``rows`` that ``half_summaries`` turns into the figures of each half. The JSON keys are listed in
``bench/retrieval.py``'s docstring.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench.lib.embedded import TENANT, check_ingest, embedded_data_dir, share_embedding_cache
from bench.lib.locomo import (
    CATEGORIES,
    HALVES,
    kept_turns,
    load_locomo,
    locomo_half,
    recall_at_budget,
    sample_questions,
    sample_turns,
    turn_baselines,
)

SYSTEMS = ("engram", "BM25", "dense", "RRF")


def _search_sources(
    rt,
    query: str,
    user: str,
    limit: int,
    need: int,
    memory_types=None,
    tenant: str = TENANT,
    unit: str = "message_ids",
    reference_time=None,
) -> tuple[list[list[str]], list[str], float]:
    """Hits of one search as (sources per hit — its ``unit``, message or session ids —, memory type per hit,
    milliseconds). The limit grows (up to 1000) while the hits expand to fewer than ``need`` distinct sources
    and more hits may exist. ``reference_time``: the question's date (time expressions resolve against it).
    Searches do not reinforce memories (``reinforce=False``), so a re-run on a kept data dir ranks alike."""
    from engram.schemas.search import SearchRequest
    from engram.workers.memory.search import search

    extra = {"memory_types": memory_types} if memory_types else {}
    extra.update(reference_time=reference_time, reinforce=False)
    while True:
        t0 = time.perf_counter()
        resp = search(rt, SearchRequest(query=query, tenant_id=tenant, user_id=user, limit=limit, **extra))
        ms = (time.perf_counter() - t0) * 1000
        sources = [list(getattr(h, unit)) for h in resp.hits]
        if len(kept_turns(sources, need)) >= need or len(resp.hits) < limit or limit >= 1000:
            return sources, [h.memory_type.value for h in resp.hits], ms
        limit = min(1000, limit * 4)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def evaluate(
    conversation_indices: Sequence[int] | None = None,
    ks: Sequence[int] = (5, 10, 25),
    data_dir: Path | None = None,
    eval_data: Path | None = None,
    progress: bool = True,
    variants: dict[str, list[str]] | None = None,
    console: Console | None = None,
    embedding_cache: Path | None = None,
    search_only: bool = False,
    ingest_only: bool = False,
) -> dict:
    """Ingest the chosen LoCoMo conversations through the real path and compute evidence recall@k at a
    budget of k turns for engram and the raw-turn baselines (BM25, dense, RRF).

    ``conversation_indices``: positions in ``locomo10.json`` (default: all). ``data_dir``: engram's data
    dir (default: a fresh temporary one). ``eval_data``: the evaluation data folder (default
    ``ENGRAM_EVAL_DATA`` or ``../shared/data``). ``variants``: extra engram rows, name → memory types
    searched (diagnostics). ``embedding_cache``: a folder whose ``embeddings.sqlite`` is kept across runs
    (default: inside the data dir). ``search_only``: ``data_dir`` already holds the conversations (from an
    earlier run with the same ``data_dir``): skip the ingest and only search, e.g. after a change to the
    query worker (raises FileNotFoundError without a data dir that holds a store). ``ingest_only``: time the
    ingest (through consolidation) and skip the searches (no recall figures). Returns a JSON-serialisable
    dict: ``recall[system]["overall"][k]``, ``recall[system]["by_category"][cat][k]``, question counts,
    ingest seconds, search latency, per conversation figures, diagnostics of what fills engram's turn budget, and
    ``rows``: each question's ``sample_id``, ``conversation``, ``question`` (its index in the sample's ``qa``),
    ``half``, ``category`` and ``recall[system][k]`` (``main`` writes them to ``--rows``, not to ``--json``).
    """
    from engram.api.cli.main import ingest_paths
    from engram.workers.media.conversations import locomo_sample_id, to_jsonl
    from engram.workers.runtime import runtime

    ks = sorted({int(k) for k in ks})
    kmax = ks[-1]
    samples = load_locomo(eval_data)
    indices = list(range(len(samples))) if conversation_indices is None else [int(i) for i in conversation_indices]
    variants = variants or {}
    systems = [*SYSTEMS, *variants]
    err = console or Console(stderr=True)

    # per question: system -> {k: recall}
    if search_only and not (data_dir and any((Path(data_dir) / d).is_dir() for d in ("vectors", "qdrant"))):
        raise FileNotFoundError(f"--search-only needs --data-dir with an ingested store (got {data_dir})")
    rows: list[dict] = []
    ingest_s: dict[str, float] = {}
    ingest_counts: dict[str, dict[str, int]] = {}
    latencies: list[float] = []
    diag = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="engram-locomo-") as tmp:
        tmp_path = Path(tmp)
        store_dir = Path(data_dir) if data_dir else tmp_path / "data"
        conv_dir = tmp_path / "conversations"
        conv_dir.mkdir()
        share_embedding_cache(store_dir, embedding_cache)
        with embedded_data_dir(store_dir):
            bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[current]}"),
                console=err,
                disable=not progress,
            )
            with bar:
                task = bar.add_task("LoCoMo", total=len(indices), current="")
                for ci in indices:
                    sample = samples[ci]
                    sid = locomo_sample_id(sample, ci)
                    user = f"locomo-{sid}"
                    msgs = sample_turns(sample)
                    if not search_only:
                        bar.update(task, current=f"{sid}: ingest")
                        path = conv_dir / f"{sid}.jsonl"
                        path.write_bytes(to_jsonl(msgs))
                        t0 = time.perf_counter()
                        out = ingest_paths(
                            [path], tenant=TENANT, user=user, device="bench", consolidate=True, quiet=True
                        )
                        ingest_s[sid] = time.perf_counter() - t0
                        ingest_counts[sid] = {k: len(v) for k, v in out.items()}
                        check_ingest(sid, out)
                    if ingest_only:
                        bar.console.print(f"{sid}: ingest {ingest_s[sid]:.1f} s, {len(msgs)} turns")
                        bar.advance(task)
                        continue
                    rt = runtime()
                    # LoCoMo questions carry no date: time expressions resolve against the last session's
                    reference = max(m.timestamp for m in msgs)
                    bar.update(task, current=f"{sid}: search")
                    base = turn_baselines(sample, rt.settings, rt.embedding_cache)
                    for q in sample_questions(sample, ci):
                        ev = set(q.evidence)
                        sources, types, ms = _search_sources(
                            rt, q.question, user, 2 * kmax, kmax, reference_time=reference
                        )
                        latencies.append(ms)
                        ranked = {"engram": sources}
                        for name, ranking in base.rankings(q.question).items():
                            ranked[name] = [[t] for t in ranking]
                        for name, mtypes in variants.items():
                            ranked[name] = _search_sources(
                                rt, q.question, user, 2 * kmax, kmax, mtypes, reference_time=reference
                            )[0]
                        rows.append(
                            {
                                "sample_id": sid,
                                "conversation": ci,
                                "question": q.index,
                                "half": locomo_half(ci),
                                "category": q.category,
                                "recall": {s: {k: recall_at_budget(ranked[s], ev, k) for k in ks} for s in systems},
                            }
                        )
                        budget_diagnostics(diag, sources, types, ks, ev)
                    bar.update(task, current=f"{sid}: done")
                    bar.advance(task)

    def summary(sel: list[dict]) -> dict:
        return {s: {k: _mean([r["recall"][s][k] for r in sel]) for k in ks} for s in systems}

    by_cat = {c: [r for r in rows if r["category"] == c] for c in CATEGORIES}
    overall = summary(rows)
    cat_summ = {c: summary(sel) for c, sel in by_cat.items() if sel}
    result = {
        "conversations": [locomo_sample_id(samples[i], i) for i in indices],
        "conversations_total": len(samples),
        "ks": ks,
        "systems": systems,
        "questions": len(rows),
        "category_counts": {c: len(sel) for c, sel in by_cat.items()},
        "recall": {
            s: {"overall": overall[s], "by_category": {c: cs[s] for c, cs in cat_summ.items()}} for s in systems
        },
        "ingest_seconds": sum(ingest_s.values()),
        "ingest_seconds_by_conversation": ingest_s,
        "ingest_files": ingest_counts,
        "search_ms_median": statistics.median(latencies) if latencies else float("nan"),
        "search_ms_p95": (
            statistics.quantiles(latencies, n=20)[-1] if len(latencies) >= 20 else max(latencies, default=float("nan"))
        ),
        **half_summaries(rows, ks, systems, "category", list(CATEGORIES)),
        "per_conversation": {
            sid: summary([r for r in rows if r["sample_id"] == sid])
            for sid in dict.fromkeys(r["sample_id"] for r in rows)
        },
        "engram_budget": {key: _mean(vals) for key, vals in sorted(diag.items())},
        "rows": rows,
    }
    for half in HALVES:
        result["halves"][half]["conversations"] = [
            locomo_sample_id(samples[i], i) for i in indices if locomo_half(i) == half
        ]
    return result


def half_summaries(
    rows: Sequence[dict], ks: Sequence[int], systems: Sequence[str], group: str, groups: Sequence
) -> dict:
    """The figures of each half (``HALVES``) from the per-question ``rows`` a run already has.

    Each row holds ``"half"``, its ``group`` key (``"category"`` for LoCoMo, ``"type"`` for LongMemEval) and
    ``"recall"[system][k]``. Returns ``{"recall_halves": {system: {half: {"overall": {k: mean},
    "by_<group>": {g: {k: mean}}}}}, "halves": {half: {"questions": n, "<group>_counts": {g: n}}},
    "lift_halves": {half: {k: engram − RRF}}}``. ``by_<group>`` holds only the groups with questions in the
    half; an empty half has ``{}`` for ``overall`` and ``by_<group>``, 0 questions and no lift."""
    by = "by_category" if group == "category" else f"by_{group}"
    counts = "category_counts" if group == "category" else f"{group}_counts"
    recall_halves: dict = {s: {} for s in systems}
    halves: dict = {}
    lift: dict = {}
    for half in HALVES:
        sel = [r for r in rows if r["half"] == half]
        per_group = {g: [r for r in sel if r[group] == g] for g in groups}
        halves[half] = {"questions": len(sel), counts: {g: len(v) for g, v in per_group.items() if v}}
        for s in systems:
            recall_halves[s][half] = {
                "overall": {k: _mean([r["recall"][s][k] for r in sel]) for k in ks} if sel else {},
                by: {g: {k: _mean([r["recall"][s][k] for r in v]) for k in ks} for g, v in per_group.items() if v},
            }
        if sel and "engram" in systems and "RRF" in systems:
            lift[half] = {
                k: recall_halves["engram"][half]["overall"][k] - recall_halves["RRF"][half]["overall"][k] for k in ks
            }
    return {"recall_halves": recall_halves, "halves": halves, "lift_halves": lift}


def print_halves(result: dict, group: str, names: dict | None = None, console: Console | None = None) -> None:
    """The chosen-on and held-out halves side by side: systems × R@k and per ``group`` (``"category"`` or
    ``"type"``) at the middle k, each cell ``chosen on / held out``; an empty half is shown as "—" and said so.
    ``names``: labels of the groups (LoCoMo's category names)."""
    console = console or Console()
    ks = result["ks"]
    kc = 10 if 10 in ks and group == "category" else (5 if 5 in ks else ks[len(ks) // 2])
    by = "by_category" if group == "category" else f"by_{group}"
    counts = "category_counts" if group == "category" else f"{group}_counts"
    halves = result["halves"]
    n = {h: halves[h]["questions"] for h in HALVES}
    table = Table(
        title=f"chosen on / held out — {n['chosen_on']} / {n['held_out']} questions"
        + "".join(
            f"; {h.replace('_', ' ')}: {', '.join(halves[h]['conversations']) or 'none'}"
            for h in HALVES
            if "conversations" in halves[h]
        )
    )
    table.add_column("system")
    for k in ks:
        table.add_column(f"R@{k}\nchosen / held", justify="right")
    groups = list(dict.fromkeys([*halves["chosen_on"][counts], *halves["held_out"][counts]]))
    for g in groups:
        label = f"{g} {names[g]}" if names and g in names else str(g)
        table.add_column(
            f"{label} @{kc}\n(n={halves['chosen_on'][counts].get(g, 0)}/{halves['held_out'][counts].get(g, 0)})",
            justify="right",
        )

    def cell(figures: dict, key) -> str:
        return f"{figures[key]:.3f}" if key in figures else "—"

    for s in result["systems"]:
        rec = result["recall_halves"][s]
        table.add_row(
            s,
            *[f"{cell(rec['chosen_on']['overall'], k)} / {cell(rec['held_out']['overall'], k)}" for k in ks],
            *[
                f"{cell(rec['chosen_on'][by].get(g, {}), kc)} / {cell(rec['held_out'][by].get(g, {}), kc)}"
                for g in groups
            ],
        )
    console.print(table)
    for h in HALVES:
        if not n[h]:
            console.print(
                f"{h.replace('_', ' ')} half: empty (no question of the run falls in it"
                + (
                    f"; the eval file holds {result['conversations_total']} conversations, held out are "
                    "positions 5 and up)"
                    if "conversations_total" in result
                    else ")"
                )
            )
    lift = result.get("lift_halves", {})
    if lift:
        console.print(
            "engram − RRF: "
            + "; ".join(
                f"{h.replace('_', ' ')} " + " ".join(f"@{k} {lift[h][k]:+.3f}" for k in ks) for h in HALVES if h in lift
            )
        )


LME_KS = (1, 5, 10)


def evaluate_longmemeval(
    limit: int | None = None,
    ks: Sequence[int] = LME_KS,
    eval_data: Path | None = None,
    progress: bool = True,
    console: Console | None = None,
    embedding_cache: Path | None = None,
    data_dir: Path | None = None,
    search_only: bool = False,
    checkpoint: Path | None = None,
    half: str | None = None,
) -> dict:
    """LongMemEval-S session recall_any@k (budget of k sessions) for engram and the session baselines.

    Each of the first ``limit`` counted questions (default: all 98) is ingested through the real path
    into a fresh temporary data dir as its own user (``embedding_cache`` shares the embedding cache across
    them and across runs), then searched once, with the question's ``question_date`` as the reference time
    of time expressions. ``data_dir``: keep each question's store in ``data_dir/<question id>`` instead;
    ``search_only``: search those kept stores without ingesting again (FileNotFoundError when one is
    missing). Returns ``recall[system]["overall"][k]``,
    ``recall[system]["by_type"][question_type][k]``, the question count, ingest seconds (total, median and
    per question) and the search latency median. ``checkpoint``: a JSON file rewritten with the figures so
    far after each question (``"complete": false`` until the last), so a run stopped early still leaves the
    figures of the questions it finished; the result's ``rows`` (each question's ``question_id``, ``half``,
    ``type`` and ``recall[system][k]``) are left out of it. ``half``: only the questions of that half
    (``"chosen_on"`` or ``"held_out"``), then the first ``limit`` of them."""
    from bench.lib.longmemeval import SessionBaselines, load_longmemeval, longmemeval_half, recall_any_at_budget
    from engram.api.cli.main import ingest_paths
    from engram.workers.media.conversations import longmemeval_messages, parse_longmemeval_date, to_jsonl
    from engram.workers.runtime import runtime

    ks = sorted({int(k) for k in ks})
    questions = [q for q in load_longmemeval(eval_data) if half is None or longmemeval_half(q.question_id) == half][
        :limit
    ]
    systems = list(SYSTEMS)
    rows: list[dict] = []
    ingest_s: list[float] = []
    latencies: list[float] = []
    err = console or Console(stderr=True)
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[current]}"),
        console=err,
        disable=not progress,
    )
    with bar:
        task = bar.add_task("LongMemEval", total=len(questions), current="")
        for q in questions:
            bar.update(task, current=q.question_id)
            with tempfile.TemporaryDirectory(prefix="engram-lme-") as tmp:
                store_dir = Path(data_dir) / q.question_id if data_dir else Path(tmp) / "data"
                if search_only and not any((store_dir / d).is_dir() for d in ("vectors", "qdrant")):
                    raise FileNotFoundError(f"--search-only: no ingested store at {store_dir}")
                share_embedding_cache(store_dir, embedding_cache)
                path = Path(tmp) / f"{q.question_id}.jsonl"
                path.write_bytes(to_jsonl(longmemeval_messages(q.item)))
                with embedded_data_dir(store_dir):
                    if not search_only:
                        t0 = time.perf_counter()
                        out = ingest_paths(
                            [path], tenant=TENANT, user=q.question_id, device="bench", consolidate=True, quiet=True
                        )
                        ingest_s.append(time.perf_counter() - t0)
                        check_ingest(q.question_id, out)
                    rt = runtime()
                    reference = parse_longmemeval_date(q.question_date) if q.question_date else None
                    sources, _, ms = _search_sources(
                        rt, q.question, q.question_id, 2 * ks[-1], ks[-1], unit="session_ids", reference_time=reference
                    )
                    latencies.append(ms)
                    ranked = {"engram": sources}
                    base = SessionBaselines(q.item, rt.settings, rt.embedding_cache)
                    for name, ranking in base.rankings(q.question).items():
                        ranked[name] = [[sid] for sid in ranking]
            answers = set(q.answer_sessions)
            rows.append(
                {
                    "question_id": q.question_id,
                    "half": longmemeval_half(q.question_id),
                    "type": q.question_type,
                    "recall": {s: {k: recall_any_at_budget(ranked[s], answers, k) for k in ks} for s in systems},
                }
            )
            if progress:
                took = f"ingest {ingest_s[-1]:.1f} s" if ingest_s and not search_only else "search only"
                bar.console.print(
                    f"{len(rows)} {q.question_id} ({q.question_type}, {took}): "
                    + "; ".join(f"{s} " + "/".join(f"{rows[-1]['recall'][s][k]:.0f}" for k in ks) for s in systems)
                )
            bar.advance(task)
            if checkpoint is not None:
                done = _longmemeval_summary(rows, ks, systems, ingest_s, latencies)
                Path(checkpoint).write_text(json.dumps({**done, "complete": len(rows) == len(questions)}, indent=2))
    return {**_longmemeval_summary(rows, ks, systems, ingest_s, latencies), "rows": rows}


def _longmemeval_summary(
    rows: list[dict], ks: list[int], systems: list[str], ingest_s: list[float], latencies: list[float]
) -> dict:
    """The LongMemEval figures of the question ``rows`` done so far (see ``evaluate_longmemeval``)."""

    def summary(sel: list[dict]) -> dict:
        return {s: {k: _mean([r["recall"][s][k] for r in sel]) for k in ks} for s in systems}

    types = sorted({r["type"] for r in rows})
    by_type = {t: summary([r for r in rows if r["type"] == t]) for t in types}
    overall = summary(rows)
    return {
        "benchmark": "LongMemEval-S",
        "ks": ks,
        "systems": systems,
        "questions": len(rows),
        "type_counts": {t: sum(r["type"] == t for r in rows) for t in types},
        "recall": {s: {"overall": overall[s], "by_type": {t: by_type[t][s] for t in types}} for s in systems},
        **half_summaries(rows, ks, systems, "type", types),
        "ingest_seconds": sum(ingest_s),
        "ingest_seconds_median": statistics.median(ingest_s) if ingest_s else 0.0,
        "ingest_seconds_by_question": (
            dict(zip([r["question_id"] for r in rows], ingest_s, strict=True)) if len(ingest_s) == len(rows) else {}
        ),
        "search_ms_median": statistics.median(latencies) if latencies else float("nan"),
        "misses_at_1": [r["question_id"] for r in rows if r["recall"]["engram"][ks[0]] < 1],
    }


def budget_diagnostics(
    diag: dict[str, list],
    sources: list[list[str]],
    types: list[str],
    ks: Sequence[int],
    evidence: set[str] | None = None,
) -> None:
    """What fills engram's budget of k turns, appended per question to ``diag`` (means are reported).

    Per k: the share of kept turns that came from non-observation hits (memories), the hits consumed, the share
    of consumed hits that are episodic and, given the question's ``evidence``, whether memories earned their
    place: ``memory-only evidence`` is 1 when a consumed memory hit brought an evidence turn that no turn hit
    before it did (its budget was spent on evidence), ``evidence a returned memory cites beyond`` is 1 when any
    returned memory hit (consumed or not) cites an evidence turn that the first k kept turns miss (what memories
    could have brought). Per search: memory hits among the hits returned and the rank of the first (1-based,
    over the searches that returned one)."""
    memory = [t != "observation" for t in types]
    diag["memory hits among returned (count)"].append(sum(memory))
    diag["questions with a memory hit returned (share)"].append(float(any(memory)))
    if any(memory):
        diag["rank of the first memory hit returned"].append(memory.index(True) + 1)
    for k in ks:
        kept: dict[str, bool] = {}  # turn -> brought by a memory hit
        used = 0
        for src, is_mem in zip(sources, memory, strict=True):
            if len(kept) >= k:
                break
            used += 1
            for turn in src:
                if len(kept) >= k:
                    break
                kept.setdefault(turn, is_mem)
        diag[f"@{k} turns from memories (share)"].append(sum(kept.values()) / max(1, len(kept)))
        diag[f"@{k} hits consumed"].append(used)
        diag[f"@{k} episodic hits among consumed (share)"].append(
            sum(t == "episodic" for t in types[:used]) / max(1, used)
        )
        if evidence is None:
            continue
        diag[f"@{k} memory-only evidence (share of questions)"].append(
            float(any(m and t in evidence for t, m in kept.items()))
        )
        cited = {t for src, is_mem in zip(sources, memory, strict=True) if is_mem for t in src}
        diag[f"@{k} evidence a returned memory cites beyond the top k (share of questions)"].append(
            float(bool(evidence & cited - set(kept)))
        )
