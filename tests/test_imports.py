"""The import graph of the ``oversmooth`` package has no cycle.

Every ``import`` statement counts, including those inside functions (a function-level
import only postpones a cycle to run time, it does not remove it), except those under
``if TYPE_CHECKING:``, which never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

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
