"""The layering of docs/design.md §3.2, read off the source with ``ast`` (every import,
function-level ones included), from the bottom up: the MLflow name contract and ``science``
(pure) import nothing above them; ``trainables`` imports neither ``orchestrator`` nor
``dashboards``; ``dashboards`` imports neither ``orchestrator`` nor ``trainables``; nothing
imports ``api``, the top; no module
imports itself back through others; and every module of the package is in the graph and in a
layer, so a new one cannot slip past these rules."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the one import namespace; its layers are its sub-packages
TOP = "scalesweep"
#: bottom to top; a module imports only its own layer and layers below it, except as
#: ALSO_ALLOWED says (docs/design.md §3.2)
LAYERS = ("errors", "atomic_file", "mlflow_names", "science", "trainables", "workloads", "loop_helpers",
          "adapters", "dashboards", "orchestrator", "api")
#: the top: the Python API (scalesweep.api, docs/api.md) may import every layer, and none may
#: import it back (its rank above all of them says so); the package's own lazy names reach it
API = "api"
#: the modules directly in scalesweep/ that are no layer: the package and `python -m scalesweep`
ENTRY = ("scalesweep", "scalesweep.__main__")


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in (ROOT / TOP).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # "from pkg import mod" imports pkg.mod when that is a module
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                           else node.module for a in node.names]
            else:
                continue
            deps |= {t for t in targets if t.split(".")[0] == TOP and t != name}
        graph[name] = {d for d in deps if d in modules}
    return graph


def _files() -> set[str]:
    # counted apart from _graph, with os.walk: a module _graph missed fails the test below
    return {_module(Path(d) / f) for d, _, fs in os.walk(ROOT / TOP) for f in fs if f.endswith(".py")}


def test_graph_sees_every_module() -> None:
    graph = _graph()
    assert set(graph) == _files() and len(graph) > 60
    assert "scalesweep.science.stats.trial_summary" in graph["scalesweep.dashboards.convergence_table"]
    assert "scalesweep.trainables.loop" in graph["scalesweep.trainables.trial_driver"]


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_module_is_in_a_layer() -> None:
    assert [m for m in _graph() if _layer(m) is None and m not in ENTRY] == []


#: the exceptions to "only downwards by rank": dashboards sits above trainables, the public
#: helpers for users' own loops (scalesweep.loop_helpers) and the framework adapters but must
#: import none of them (torch, transformers, lightning); nor may the orchestrator import the
#: adapters, which import optional extras; the CLI reaches dashboards lazily, which the rank allows
FORBIDDEN = {("dashboards", "trainables"), ("dashboards", "loop_helpers"), ("dashboards", "adapters"),
             ("orchestrator", "adapters"),
             # scalesweep.workloads is the workload authors' face of trainables.workloads: our own
             # code imports trainables.workloads, and dashboards no torch
             ("dashboards", "workloads"), ("orchestrator", "workloads")}


def _upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    return [(m, d) for m, deps in graph.items() for d in deps
            if (lm := _layer(m)) is not None and (ld := _layer(d)) is not None
            and (rank[ld] > rank[lm] or (lm, ld) in FORBIDDEN)]


def test_lower_layers_never_import_higher_ones() -> None:
    assert _upward(_graph()) == []


def test_an_upward_import_is_caught() -> None:
    # the rule above on a graph with one planted arrow back up: it must see it
    graph = _graph()
    graph["scalesweep.science.scaling"].add("scalesweep.trainables.loop")
    graph["scalesweep.dashboards.report"].add("scalesweep.trainables.config")
    assert sorted(_upward(graph)) == [("scalesweep.dashboards.report", "scalesweep.trainables.config"),
                                      ("scalesweep.science.scaling", "scalesweep.trainables.loop")]


def test_the_api_is_the_top_layer() -> None:
    # everything below may be imported by the API, and an import of it from any layer is caught
    graph = _graph()
    assert LAYERS[-1] == API and f"{TOP}.{API}" in graph
    assert {f"{TOP}.orchestrator.usecases.study", f"{TOP}.orchestrator.spec.errors"} <= {
        d for m, deps in graph.items() if _layer(m) == API for d in deps}
    for below in ("orchestrator.commands.run", "orchestrator.launch.run", "dashboards.report",
                  "science.scaling"):
        planted = _graph()
        planted[f"{TOP}.{below}"].add(f"{TOP}.{API}._study")
        assert _upward(planted) == [(f"{TOP}.{below}", f"{TOP}.{API}._study")]


def test_science_imports_neither_torch_ray_nor_mlflow() -> None:
    # every module of the pure package, each in a fresh interpreter (one for all of them would
    # let one module's heavy import hide behind another's)
    science = sorted(m for m in _graph() if _layer(m) in ("science", "mlflow_names", "errors"))
    heavy = ("import importlib, sys; importlib.import_module(sys.argv[1]); "
             "print(sorted({m.split('.')[0] for m in sys.modules} & "
             "{'torch', 'ray', 'mlflow', 'pandas', 'matplotlib'}))")
    found = {}
    for name in science:
        out = subprocess.run([sys.executable, "-c", heavy, name], cwd=ROOT, capture_output=True,
                             text=True, check=True)
        found[name] = out.stdout.strip()
    assert len(science) >= 12 and set(found.values()) == {"[]"}, found


def test_nothing_of_ours_is_installed_outside_the_namespace() -> None:
    # what setuptools packages (pyproject's packages.find) is scalesweep* only: a user's
    # environment gets no top-level orchestrator, trainables or dashboards
    assert not any((ROOT / layer).exists() for layer in LAYERS)
    assert 'include = ["scalesweep*"]' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_no_import_cycle() -> None:
    graph = _graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if d.startswith(m + ".") or m.startswith(d + "."):
                continue  # a package and its own submodules (an __init__ re-exporting them)
            if state.get(d) == 1:
                cycles.append([*stack[stack.index(d):], d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert cycles == []


#: orchestrator's stages, top to bottom (docs/design.md §3.1): a stage imports only stages below it.
#: The use cases sit below the CLI's commands, which are argparse and formatting over them
STAGES = ("cli", "commands", "usecases", "launch", "cluster", "tracking", "plan", "spec")


def _stage(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != [TOP, "orchestrator"] or len(parts) < 3:
        return None
    return STAGES.index(parts[2]) if parts[2] in STAGES else None


def test_the_api_stands_on_the_use_cases_not_on_the_cli() -> None:
    # the CLI's commands are a client of the use cases, as the API is: neither imports the other
    graph = _graph()
    faces = {m: deps for m, deps in graph.items() if _layer(m) == API}
    assert faces and [(m, d) for m, deps in faces.items() for d in deps
                      if d.startswith(f"{TOP}.orchestrator.commands") or d == f"{TOP}.orchestrator.cli"] == []
    usecases = [m for m in graph if m.startswith(f"{TOP}.orchestrator.usecases.")]
    assert {f"{TOP}.orchestrator.usecases.{u}" for u in ("study", "run", "results", "predict",
                                                          "advise", "solve")} <= set(usecases)


def test_orchestrator_stages_import_only_downwards() -> None:
    graph = _graph()
    up = [(m, d) for m, deps in graph.items() for d in deps
          if (sm := _stage(m)) is not None and (sd := _stage(d)) is not None and sd < sm]
    assert up == []


def test_every_orchestrator_module_belongs_to_a_stage() -> None:
    # a new file dropped at the top of scalesweep/orchestrator/ would bring the flat folder back
    orchestrator = [m for m in _graph() if m.startswith(f"{TOP}.orchestrator.")]
    loose = [m for m in orchestrator if _stage(m) is None]
    assert len(orchestrator) > 25 and loose == []


def test_stage_packages_import_nothing() -> None:
    # importing one module of a stage runs its package's __init__.py first: an import there
    # would load, say, the launcher and MLflow for a caller that wanted only the spec
    for stage in STAGES[1:]:
        tree = ast.parse((ROOT / TOP / "orchestrator" / stage / "__init__.py").read_text(encoding="utf-8"))
        assert [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)] == [], stage


#: the only orchestrator modules that may import dashboards: the use cases and the CLI's
#: commands (docs/design.md §3.2: the driver runs without the report's code; `run`/`resume`
#: make the report at the end, `results`/`advise`/`predict` read a study, `solve` its noise
#: scale, and the commands format what they return with the dashboards' text), each lazily,
#: inside the function
USECASES = f"{TOP}.orchestrator.usecases."
COMMANDS = f"{TOP}.orchestrator.commands."


def _reaching_into_dashboards(graph: dict[str, set[str]]) -> set[str]:
    return {m for m, deps in graph.items() if m.startswith(f"{TOP}.orchestrator.")
            and any(d.startswith(f"{TOP}.dashboards") for d in deps)}


def test_only_the_use_cases_and_commands_reach_into_dashboards() -> None:
    reaching = _reaching_into_dashboards(_graph())
    assert [m for m in reaching if not m.startswith((USECASES, COMMANDS))] == []
    # the modules that do, named: one more is a decision, seen in review
    assert reaching == {*(f"{USECASES}{u}" for u in ("run", "results", "predict", "advise",
                                                    "recommend", "solve")),
                        *(f"{COMMANDS}{c}" for c in ("advise", "predict", "report", "_common",
                                                    "recommend"))}


def test_a_reach_into_dashboards_outside_the_commands_is_caught() -> None:
    graph = _graph()
    graph[f"{TOP}.orchestrator.tracking.predictions"].add(f"{TOP}.dashboards.prediction")
    graph[f"{TOP}.orchestrator.cli"].add(f"{TOP}.dashboards.report")
    outside = {m for m in _reaching_into_dashboards(graph) if not m.startswith((USECASES, COMMANDS))}
    assert outside == {f"{TOP}.orchestrator.tracking.predictions", f"{TOP}.orchestrator.cli"}


def test_a_plan_on_a_cpu_machine_imports_no_torch() -> None:
    # `plan` makes the sweep's workload to count its samples; the built-in mlp_regression
    # (and the shared batching helpers, and the GPU count on a machine without GPU devices)
    # import torch only where a batch or a model is made, so a plan answers without it
    probe = ("import contextlib, io, sys; from scalesweep.orchestrator.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             "    rc = main(['plan', 'sweeps/smoke.yaml'])\n"
             "print(rc, sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'ray'}))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    assert out.stdout.split("\n")[-2:] == ["0 []", ""], out.stdout + out.stderr


#: a package past this many modules holds more than one feature: split it so that a newcomer
#: finds one from the folder listing (as science.prediction left science.stats)
MAX_MODULES = 15


def test_no_package_holds_more_than_fifteen_modules() -> None:
    crowded = {}
    for package in (ROOT / TOP).rglob("__init__.py"):
        modules = [p for p in package.parent.glob("*.py") if p.name != "__init__.py"]
        if len(modules) > MAX_MODULES:
            crowded[_module(package)] = len(modules)
    assert crowded == {}, f"packages of more than {MAX_MODULES} modules: {crowded}"
