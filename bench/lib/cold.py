"""A cold ``engram search``: the whole command in new processes (wall and CPU seconds), and optionally each step
of one search timed in new processes of its own, alternating with the command's runs so the load weighs on both.

Used by ``bench/scale.py`` (its cold search on the largest store or, with ``--cold-only``, on the seed dir;
``--cold-steps`` adds the steps). Importing this module imports nothing of engram's (nor numpy): the steps' child
(``python -c`` calling ``steps_child``) times the imports from a bare interpreter.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench.lib.embedded import BENCH_VAULT_KEY

REPO = Path(__file__).resolve().parents[2]

#: The steps, in the order a search runs them, each timed in the child (``time_steps``); the last is the whole.
STEPS = [
    "import engram.api.cli.main",
    "import search path",
    "runtime()",
    "open shards",
    "entity names",
    "time expressions",
    "query tokens",
    "query embedding",
    "search (warm)",
    "search (cold, whole)",
]


def _timed(out: dict, name: str, fn):
    w0, c0 = time.perf_counter(), time.process_time()
    value = fn()
    out[name] = (time.perf_counter() - w0, time.process_time() - c0)
    return value


def time_steps(question: str, user: str) -> dict[str, tuple[float, float]]:
    """The steps of one search in this (new) process, on the store of ``ENGRAM_DATA_DIR`` for ``ENGRAM_TENANT``:
    {step: (wall s, CPU s)} (``STEPS``)."""
    import importlib  # on demand: the child's imports are what it times

    out: dict = {}
    w0, c0 = time.perf_counter(), time.process_time()
    _timed(out, STEPS[0], lambda: importlib.import_module("engram.api.cli.main"))
    search_mod = _timed(out, STEPS[1], lambda: importlib.import_module("engram.workers.memory.search"))
    from engram.schemas.search import DEFAULT_SEARCH_TYPES, SearchRequest  # in the child, after the timed imports
    from engram.schemas.settings import get_settings  # as above
    from engram.workers.runtime import runtime  # as above
    from engram.workers.stores.vectors import collection_for  # as above

    rt = _timed(out, STEPS[2], runtime)
    req = SearchRequest(
        query=question,
        tenant_id=get_settings().tenant,
        user_id=user,
        memory_types=list(DEFAULT_SEARCH_TYPES),
        limit=5,
        reinforce=False,
    )

    def open_shards():
        for mtype in req.memory_types:
            if rt.vectors.has_collection(collection_for(mtype)):
                rt.vectors.ensure(collection_for(mtype))

    _timed(out, STEPS[3], open_shards)
    _timed(out, STEPS[4], lambda: search_mod.named_entities(rt, req.tenant_id, req.query))
    _timed(out, STEPS[5], lambda: search_mod.resolve(req.query, None, None))
    _timed(out, STEPS[6], lambda: search_mod.sparse.query_vector(req.query))
    _timed(out, STEPS[7], lambda: search_mod.embed_query(rt, req.query))
    _timed(out, STEPS[8], lambda: search_mod.search(rt, req))
    out[STEPS[9]] = (time.perf_counter() - w0, time.process_time() - c0)
    return out


def steps_child() -> None:
    """The child's entry (``python -c``): ``sys.argv[1:]`` = question, user; prints ``time_steps`` as JSON."""
    print(json.dumps(time_steps(sys.argv[1], sys.argv[2])))


def cold_search(data_dir: Path, tenant: str, user: str, question: str, runs: int = 5, steps: bool = False) -> dict:
    """``engram search QUESTION --user USER -k 5`` in a new process on the store under ``data_dir``, ``runs`` times:
    {"wall_s": [...], "cpu_s": [...]} (CPU: user + system seconds of the process, less moved by the load). With
    ``steps``, each run is preceded by a new process timing ``STEPS``, under "steps": {step: [[wall s, CPU s],
    ...]}. Raises subprocess.CalledProcessError when a process fails."""
    env = {**os.environ, "ENGRAM_DATA_DIR": str(data_dir), "ENGRAM_TENANT": tenant}
    env.setdefault("ENGRAM_VAULT_KEY", BENCH_VAULT_KEY)
    engram = Path(sys.executable).with_name("engram")
    out: dict = {"wall_s": [], "cpu_s": []}
    if steps:
        out["steps"] = {s: [] for s in STEPS}
    for _ in range(runs):
        if steps:
            child = subprocess.run(
                [sys.executable, "-c", "from bench.lib.cold import steps_child; steps_child()", question, user],
                env=env,
                cwd=REPO,
                check=True,
                capture_output=True,
                text=True,
                timeout=600,
            )
            got = json.loads(child.stdout.splitlines()[-1])
            for s in STEPS:
                out["steps"][s].append(got[s])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(
            [str(engram), "search", question, "--user", user, "-k", "5"],
            env=env,
            check=True,
            capture_output=True,
            timeout=600,
        )
        out["wall_s"].append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out["cpu_s"].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return out
