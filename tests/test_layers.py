"""The package's layers import only downward, type-only imports included.

Layers, lowest first: *base* (errors, registry, resources, allocator, runtime, outputs, config),
*compute* (graph, data, metrics, nn, probe, fit, lawfit, spectral, precision, checkpoint),
*interpret* (verdict, prune, prune_table, run_configs, analysis, train: numbers, codes and
dataclasses, no prose), *write* (report, notebook, and tracking and lightning, which log the
verdict's sentence: the only place that turns numbers into sentences, figures and files) and
*commands* (cli, experiments). A module may import its own layer and the layers below; the
package root ``oversmooth`` (the public facade) sits between *write* and *commands*: it may import
the library, and only the commands import it."""

from __future__ import annotations

import ast
from pathlib import Path

import oversmooth

PACKAGE = Path(oversmooth.__file__).resolve().parent

LAYERS = {
    "base": [
        "errors",
        "registry",
        "resources",
        "allocator",
        "runtime",
        "outputs",
        "config",
        "_data",
        "version",
    ],
    "compute": [
        "graph",
        "data",
        "metrics",
        "nn",
        "probe",
        "fit",
        "lawfit",
        "spectral",
        "precision",
        "checkpoint",
    ],  # fmt: skip
    "interpret": [
        "verdict",
        "prune",
        "prune_table",
        "run_configs",
        "analysis",
        "train",
    ],
    "write": ["report", "notebook", "tracking", "lightning"],
    "commands": ["cli", "experiments", "__main__"],
}
RANK: dict[str, float] = {top: r for r, names in enumerate(LAYERS.values()) for top in names}
FACADE = RANK["cli"] - 0.5  # the package root: above write, below the commands that use it


def modules() -> dict[str, Path]:
    """Module name -> source file, for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(path: Path, module: str, known: dict[str, Path]) -> set[str]:
    """Every package module that ``module`` imports, anywhere in the file (functions and
    ``if TYPE_CHECKING:`` blocks included)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                out.add(name)
    return out


def rank(module: str) -> float:
    parts = module.split(".")
    if len(parts) == 1:
        return FACADE
    assert parts[1] in RANK, f"{module}: not assigned to a layer in tests/test_layers.py"
    return RANK[parts[1]]


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(path, name, known) for name, path in known.items()}


def test_every_module_has_a_layer():
    for name in modules():
        rank(name)


def test_no_module_imports_a_higher_layer():
    names = {**{float(r): name for r, name in enumerate(LAYERS)}, FACADE: "facade"}
    upward = sorted(
        f"{src} ({names[rank(src)]}) imports {dst} ({names[rank(dst)]})"
        for src, targets in graph().items()
        for dst in targets
        if rank(dst) > rank(src)
    )
    assert upward == [], "upward imports:\n" + "\n".join(upward)


def cycle_in(g: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(g.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(g):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_cycle_finder_finds_a_cycle():
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_type_only_imports_included():
    # a package's __init__ importing its own submodules is not a cycle with them
    g = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph().items()}
    found = cycle_in(g)
    assert found is None, "import cycle: " + " -> ".join(found)
