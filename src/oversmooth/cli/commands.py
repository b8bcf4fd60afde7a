"""The command table: one module per command, loaded only when that command runs."""

from __future__ import annotations

import importlib
from typing import Any
from collections.abc import Callable

import typer

#: name -> (module, the summary ``oversmooth --help`` lists), in the order they are listed.
#: The summaries repeat each command's first docstring sentence so that listing the commands
#: imports none of them (and no torch); a test checks that they match.
COMMANDS: dict[str, tuple[str, str]] = {
    "analyze": (
        "oversmooth.cli.analyze_cmd",
        "Probe a freshly initialised model layer by layer and say how its energy behaves with "
        "depth.",
    ),
    "compare": (
        "oversmooth.cli.compare_cmd",
        "Final-layer Laplacian energy at initialisation for every model x depth x dataset x seed.",
    ),
    "prune": (
        "oversmooth.cli.prune_cmd",
        "Replace each chosen layer by the identity, alone, and measure how much the output "
        "changes.",
    ),
    "train": (
        "oversmooth.cli.train_cmd",
        "Train with Adam, weight decay 5e-4, and keep the checkpoint with the best validation "
        "accuracy.",
    ),
    "models": (
        "oversmooth.cli.models_cmd",
        "List model names, message-passing types, LayerNorm modes and block-pattern letters "
        "with one-line descriptions.",
    ),
    "datasets": (
        "oversmooth.cli.datasets_cmd",
        "List the built-in datasets, or the statistics of one (--stats NAME).",
    ),
    "metrics": (
        "oversmooth.cli.metrics_cmd",
        "List the per-layer measures and their definitions (all accumulate in float64).",
    ),
    "sweep": (
        "oversmooth.cli.sweep_cmd",
        "Run every cell of a grid in parallel, one file per finished cell, then merge into "
        "tables and reports.",
    ),
    "report": (
        "oversmooth.cli.report_cmd",
        "Rebuild the PNGs, report.md and report.html of FOLDER from its CSV/JSON files, "
        "without recomputing.",
    ),
    "bench": (
        "oversmooth.cli.bench_cmd",
        "Measure every speed and memory target and mark each met or missed: the main command "
        "against `import torch`, the default kernel against the edge kernel, probe overhead, "
        "float64 cost, scaling in graph size and its memory, metric kernels against "
        "one-liners, sweep workers.",
    ),
    "reproduce": (
        "oversmooth.cli.reproduce_cmd",
        "Reproduce the seed paper's Tables 2/4/6, Figure 1, Figure 2 and Table 8 in kind, side "
        "by side with its numbers.",
    ),
    "atlas": (
        "oversmooth.cli.atlas_cmd",
        "Probe PyTorch Geometric's deep-GNN building blocks at initialisation and tabulate how "
        "each behaves with depth.",
    ),
}


def command_function(name: str) -> Callable[..., Any]:
    """The function of command ``name`` (imports its module)."""
    module, _ = COMMANDS[name]
    fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return fn


def _listed_only(name: str) -> Callable[..., Any]:
    def listed_only() -> None:  # pragma: no cover - main() registers the command it runs
        raise RuntimeError(f"the command {name!r} was listed but not loaded")

    return listed_only


def register(app: typer.Typer, only: str | None = None) -> None:
    """Add the commands to ``app``: every one (``only=None``), or ``only`` for real and the
    others by name and summary alone (enough for ``oversmooth --help``; nothing imported)."""
    for name, (_, summary) in COMMANDS.items():
        if only is None or name == only:
            app.command(name)(command_function(name))
        else:
            app.command(name, help=summary, add_help_option=False)(_listed_only(name))
