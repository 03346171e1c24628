"""The code's layout holds (docs/architecture.md): imports run one way, stages stand alone, functions stay short.

Read from the source with ``ast`` (nothing is imported): every ``import`` of an ``engram`` module, at module level
or inside a function, is an arrow from one module to another.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from tests.conftest import REPO

#: Import package → source folder (pyproject's ``package-dir``).
ROOTS = {"engram.api": "api", "engram.schemas": "schemas", "engram.workers": "workers"}

#: The pipeline's stages: the only modules that define Celery tasks.
STAGES = {
    f"engram.workers.{s}"
    for s in (
        "ingest",
        "perceive",
        "embed",
        "link",
        "store",
        "consolidate",
        "query",
        "ask",
        "admin",
        "retention",
        "backup",
        "archive",
    )
}

#: The embedded default's runner: it imports the stages and calls their functions over batches, in rounds; no stage
#: imports it (the distributed mode's runner is Celery, through the stages' tasks).
RUNNER = "engram.workers.pipeline"

#: The stages of an ingest, in the order the runner calls them.
PIPELINE_STAGES = tuple(f"engram.workers.{s}" for s in ("ingest", "perceive", "embed", "link", "store"))

#: The wings the stages build on: no Celery task inside, and no import of a stage or of the Celery app.
WINGS = tuple(f"engram.workers.{w}" for w in ("stores", "media", "text", "memory", "models", "extract"))

#: Modules whose commands import their implementation when they run, so that ``engram --help`` and the light
#: SDK start without the workers' stack: their function-local imports need no comment each.
LAZY_BY_DESIGN = {
    "engram.api.cli.main",
    "engram.api.cli.memory",
    "engram.api.cli.agent",
    "engram.api.mcp_server",
    "engram.api.console",
    "engram.api.demo",
    "engram.api.capture.agent",
    "engram.api.capture.watch",
    "engram.api.cli.keep",
}

MAX_FUNCTION_LINES = 80  # a function's body: from its first statement after the docstring to its end


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function's body, its signature and docstring left out: `ruff format` puts each of a command's typer
    options on a line of its own, which says nothing about how much the function does."""
    body = node.body
    docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    first = body[1] if docstring and len(body) > 1 else body[0]
    return node.end_lineno - first.lineno + 1


@cache
def modules() -> dict[str, Path]:
    """Every module of the three packages, by dotted name."""
    found = {}
    for package, folder in ROOTS.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            name = ".".join((package, *parts))
            found[name.removesuffix(".__init__")] = path
    return found


def _resolve(target: str) -> str | None:
    mods = modules()
    while target and target not in mods:
        target = target.rpartition(".")[0]
    return target or None


def _engram_imports(name: str, node: ast.AST, in_function: bool, lines: list[str], arrows: list) -> None:
    for child in ast.iter_child_nodes(node):
        inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
        targets = []
        if isinstance(child, ast.ImportFrom) and child.module and child.module.startswith("engram"):
            targets = [f"{child.module}.{a.name}" for a in child.names]
        elif isinstance(child, ast.Import):
            targets = [a.name for a in child.names if a.name.startswith("engram")]
        for target in targets:
            resolved = _resolve(target)
            if resolved and resolved != name:
                arrows.append((name, resolved, inside, child.lineno, lines[child.lineno - 1]))
        _engram_imports(name, child, inside, lines, arrows)


@cache
def imports() -> list[tuple[str, str, bool, int, str]]:
    """(importer, imported, inside a function, line, source line) for every engram import."""
    arrows: list = []
    for name, path in modules().items():
        source = path.read_text()
        _engram_imports(name, ast.parse(source), False, source.splitlines(), arrows)
    return arrows


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_no_import_circle_even_through_function_local_imports():
    graph: dict[str, set[str]] = {}
    for importer, imported, _, _, _ in imports():
        graph.setdefault(importer, set()).add(imported)
    assert _cycles(graph) == []


def test_a_stage_never_imports_another_stage():
    crossings = [(a, b, line) for a, b, _, line, _ in imports() if a in STAGES and b in STAGES]
    assert crossings == []


def test_the_runner_imports_the_stages_and_no_stage_imports_the_runner():
    """The rule of docs/architecture.md: ``workers.pipeline`` imports each stage of an ingest (it calls their
    functions); a stage, a wing, or anything else of ``workers`` imports no runner (the API may: it runs it)."""
    arrows = imports()
    assert {b for a, b, _, _, _ in arrows if a == RUNNER} >= set(PIPELINE_STAGES)
    upward = [
        (a, line) for a, b, _, line, _ in arrows if b == RUNNER and a.startswith("engram.workers") and a != RUNNER
    ]
    assert upward == []
    assert RUNNER not in STAGES


def test_wings_import_no_stage_and_no_celery_app():
    upward = [
        (a, b, line)
        for a, b, _, line, _ in imports()
        if a.startswith(WINGS) and (b in STAGES or b == "engram.workers.app")
    ]
    assert upward == []


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_models_and_memory_never_import_media():
    """``models/`` and ``memory/`` sit below ``media/``: neither imports it, not even inside a function. What they
    need of decoded media (a VLM's JPEG, a sample's WAV, the sample rate, the pixel digest that keys the OCR cache)
    is in ``workers/codecs.py``, which ``media/`` imports too."""
    upward = [
        (a, b, line)
        for a, b, _, line, _ in imports()
        if (_within(a, "engram.workers.models") or _within(a, "engram.workers.memory"))
        and _within(b, "engram.workers.media")
    ]
    assert upward == []


def test_stores_never_import_media():
    """``stores/`` sits below ``media/``: it does not import it, not even inside a function. The thumbnail that
    retention keeps of a removed original is made by ``workers/thumbs.py``, beside ``workers/codecs.py``."""
    upward = [
        (a, b, line)
        for a, b, _, line, _ in imports()
        if _within(a, "engram.workers.stores") and _within(b, "engram.workers.media")
    ]
    assert upward == []


def test_only_stages_define_celery_tasks():
    defining = set()
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for decorator in node.decorator_list:
                    text = ast.unparse(decorator)
                    if text.startswith(("app.task", "task(", "stage_task(")):
                        defining.add(name)
    assert defining - STAGES == set()


def test_function_local_imports_say_why():
    """A function-local import of an engram module either sits in a module that defers its commands' imports by
    design, or carries a comment on its line saying why (a heavy optional dependency, start-up time)."""
    silent = [
        (a, line, text.strip())
        for a, _, inside, line, text in imports()
        if inside and a not in LAZY_BY_DESIGN and "#" not in text
    ]
    assert silent == []


def test_no_function_over_80_lines_in_api_and_workers():
    long = []
    for name, path in modules().items():
        if name.startswith("engram.schemas"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = body_lines(node)
                if length > MAX_FUNCTION_LINES:
                    long.append((name, node.name, length))
    assert long == []


def test_every_module_logs_through_its_own_logger():
    """``structlog.get_logger(__name__)`` in each module that logs; no module borrows another's logger."""
    borrowed = [
        (a, line)
        for a, _, _, line, text in imports()
        if " import " in text
        and "log" in [n.strip().split(" as ")[0] for n in text.split(" import ", 1)[1].split("#")[0].split(",")]
    ]
    assert borrowed == []
    shared = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "structlog.get_logger" and node.args:
                if ast.unparse(node.args[0]) != "__name__":
                    shared.append((name, ast.unparse(node)))
    assert shared == []


def test_every_task_name_is_a_registered_task_on_its_queue():
    """Chains are built from ``workers.tasks.Task`` names: each must be registered by a stage module, and routed."""
    from engram.workers.app import ROUTES, load_tasks
    from engram.workers.tasks import QUEUE_OF, Task

    app = load_tasks()
    assert [t for t in Task if t.value not in app.tasks] == []
    assert set(QUEUE_OF) == set(Task) and set(ROUTES) == {t.value for t in Task}
    engram_tasks = {name for name in app.tasks if name.startswith("workers.")}
    assert engram_tasks == {t.value for t in Task}
    elsewhere = {
        t.value: app.tasks[t.value].run.__module__
        for t in Task
        if app.tasks[t.value].run.__module__ != "engram." + t.value.rsplit(".", 1)[0]
    }
    assert elsewhere == {}, "a wire name must name the module that defines its task"


def test_schemas_and_the_sdk_stand_on_their_own():
    """``schemas/`` (with the base modules ``errors`` and ``ids``) imports nothing of the workers or the front doors,
    and the SDK (``api/client.py``) nothing of the workers at import time (publishing a file loads the worker
    extra's media sniffing inside the function), so a ``[client]`` install and the schemas need neither."""
    leaning = [
        (a, b, line)
        for a, b, inside, line, _ in imports()
        if (a.startswith("engram.schemas") and not b.startswith("engram.schemas"))
        or (a == "engram.api.client" and b.startswith("engram.workers") and not inside)
    ]
    assert leaning == []


#: Bench scripts a test may import: those whose ``main()`` a test runs (``tests/bench/test_compare.py``).
BENCH_SCRIPTS_TESTS_RUN = {"bench.retrieval"}


def test_tests_import_bench_scripts_only_through_bench_lib():
    """Tests import what the benches share from ``bench.lib``; a bench script (``bench/<name>.py``) only when its
    ``main()`` is run (``BENCH_SCRIPTS_TESTS_RUN``), so a script stays free to change everything but its output."""
    reached = []
    for path in (REPO / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "bench" else [node.module]
            else:
                continue
            reached += [
                (str(path.relative_to(REPO)), node.lineno, n)
                for n in names
                if n.startswith("bench.")
                and not n.startswith("bench.lib")
                and ".".join(n.split(".")[:2]) not in BENCH_SCRIPTS_TESTS_RUN
            ]
    assert reached == []


def test_a_search_in_a_new_process_imports_no_perception_stack():
    """A cold ``engram search`` pays for every module its path imports: the service layer and the query task must
    not pull in the pipeline (perceive's OpenCV, scipy and models; 0.3 CPU s per search when they did)."""
    import subprocess
    import sys

    probe = (
        "import sys, engram.api.cli.main, engram.api.embedded, engram.api.service.embedded, engram.workers.query; "
        "print(sorted(m for m in ('cv2', 'scipy', 'engram.workers.pipeline', 'engram.workers.perceive', 'spacy') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
