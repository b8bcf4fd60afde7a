"""The import graph of the ``oversmooth`` package has no cycle.

Every ``import`` statement counts, including those inside functions (a function-level
import only postpones a cycle to run time, it does not remove it), except those under
``if TYPE_CHECKING:``, which never run.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import oversmooth

PACKAGE = Path(oversmooth.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    """Module name -> source file, for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _targets(node: ast.AST, module: str, is_package: bool, modules: dict) -> list[str]:
    """The package modules an import statement loads (``from a import b`` loads ``a.b`` when
    that is a module, else ``a``)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = module.split(".") if is_package else module.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        names = [
            f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
            for alias in node.names
        ]
    out = []
    for name in names:
        while name and name not in modules:  # `import a.b.c` of a non-module attribute
            name = name.rpartition(".")[0]
        if name and name != module:
            out.append(name)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        type_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and _is_type_checking(node.test)
            for stmt in node.body
            for inner in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[name].update(_targets(node, name, path.name == "__init__.py", modules))
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_find_cycle_finds_a_function_level_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    tree = ast.parse("def f():\n    from oversmooth.train import load_checkpoint\n")
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert _targets(node, "oversmooth.analysis", False, _modules()) == ["oversmooth.train"]


def test_graph_resolves_submodules_and_relative_imports():
    graph = import_graph()
    assert "oversmooth.metrics" in graph["oversmooth.probe"]  # from oversmooth import metrics as M
    assert "oversmooth" not in graph["oversmooth.probe"]
    assert "oversmooth.nn.model" in graph["oversmooth.nn"]


def test_package_import_graph_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


MOVED = {
    "oversmooth.analysis": {"resolve_device", "environment"},
    "oversmooth.train": {"save_checkpoint", "load_checkpoint", "CheckpointError"},
}


def test_moved_names_are_imported_from_their_new_modules():
    from oversmooth import analysis, checkpoint, runtime, train

    # the old names still work (re-exported) ...
    assert analysis.resolve_device is runtime.resolve_device
    assert analysis.environment is runtime.environment
    assert train.load_checkpoint is checkpoint.load_checkpoint
    assert train.save_checkpoint is checkpoint.save_checkpoint
    assert train.CheckpointError is checkpoint.CheckpointError
    # ... but no module of the package imports them from there
    stale = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in MOVED:
                used = {alias.name for alias in node.names} & MOVED[node.module]
                stale += [f"{name}: from {node.module} import {n}" for n in sorted(used)]
    assert not stale


# -- what a command imports ---------------------------------------------------------------------
# Each probe runs in a fresh interpreter (this one has imported everything already) and prints
# which of the heavy libraries are in sys.modules at each stage.

HEAVY = ("torch_geometric", "matplotlib", "matplotlib.pyplot", "pandas", "scipy", "scipy.stats")

_STAGES = r"""
import json, sys
HEAVY = %r
stages = {}
def mark(stage):
    stages[stage] = sorted(m for m in HEAVY if m in sys.modules)
"""


def _probe(body: str, tmp_path: Path) -> dict[str, list[str]]:
    code = _STAGES % (HEAVY,) + body + "\nprint(json.dumps(stages))\n"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def stages(tmp_path_factory) -> dict[str, list[str]]:
    """``oversmooth --help``, then a tiny ``oversmooth analyze`` (load, forward passes, fits,
    report with figures) in the same interpreter (one torch import for both)."""
    tmp = tmp_path_factory.mktemp("analyze")
    (tmp / "w.csv").write_text("0,1,2.5\n1,2,0.5\n2,0,1.0\n")
    return _probe(
        """
import contextlib, io
sys.argv = ["oversmooth", "--help"]
from oversmooth.cli.main import main
with contextlib.redirect_stdout(io.StringIO()) as text:
    try:
        main()
    except SystemExit as exc:
        assert exc.code in (0, None), exc.code
assert "analyze" in text.getvalue()
mark("help")
from pathlib import Path
from oversmooth.data import load
for spec in ("cora", "ring:n=5", "w.csv"):
    load(spec)
mark("load")
from oversmooth.analysis import AnalysisConfig, run_analysis
result = run_analysis(AnalysisConfig(model="postln", depth=2, hidden=8, heads=1, seeds=(0,)))
mark("analysis")
from oversmooth.report.render import write_analysis
write_analysis(result, Path("out"))
assert Path("out/energy.png").stat().st_size > 0
mark("report")
""",
        tmp,
    )


def test_help_imports_no_heavy_library(stages):
    assert stages["help"] == []


def test_loading_shipped_synthetic_and_csv_graphs_needs_no_pyg(stages):
    assert "torch_geometric" not in stages["load"]


def test_analysis_never_imports_pyplot_or_scipy_stats(stages):
    for stage in ("load", "analysis", "report"):
        assert "matplotlib.pyplot" not in stages[stage], stage
        assert "scipy.stats" not in stages[stage], stage
    assert "matplotlib" not in stages["analysis"]  # only once a figure is drawn
    assert "matplotlib" in stages["report"]  # (the probe did draw them)


def test_analysis_forward_path_needs_no_pyg(stages):
    assert "torch_geometric" not in stages["analysis"]
    assert "torch_geometric" not in stages["report"]


def test_the_package_loads_its_public_names_on_first_use():
    """`import oversmooth` imports no torch; every name of __all__ then resolves (to the object
    of its own module, so `from oversmooth import X` is what it always was)."""
    code = (
        "import sys, oversmooth\n"
        "light = 'torch' not in sys.modules\n"
        "import oversmooth.verdict\n"
        "from oversmooth import *  # noqa: F403\n"
        "import oversmooth.metrics as M\n"
        "ok = all(getattr(oversmooth, n) is not None for n in oversmooth.__all__)\n"
        "same = oversmooth.dirichlet_energy is M.dirichlet_energy\n"
        "same = same and callable(oversmooth.verdict)\n"
        "print(light, ok, same)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.split() == ["True", "True", "True"], done.stdout + done.stderr
