"""Options shared by several commands: one declaration each, used everywhere.

Choices come from the registries (:mod:`oversmooth.registry`, :mod:`oversmooth.precision`),
and defaults from the run config dataclasses: an option whose default the dataclass holds is
declared with ``None`` (meaning "not given", so the command passes only what the user gave) and
its help text shows the dataclass's value, read by :func:`default_of`.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from oversmooth.precision import FLOOR_METHODS
from oversmooth.runtime import DTYPES
from oversmooth.registry import CONVS, MODELS, NORMS


def _enum(name: str, names: Any) -> Any:
    """A ``str`` Enum whose members are ``names`` (typer shows them as the choices)."""
    return Enum(name, {n: n for n in names}, type=str)


ModelName = _enum("ModelName", MODELS)
Conv = _enum("Conv", CONVS)
Norm = _enum("Norm", NORMS)
Dtype = _enum("Dtype", DTYPES)
FloorMethod = _enum("FloorMethod", FLOOR_METHODS)


def value(v: Any) -> Any:
    """An option's plain value: the string of an Enum member, anything else unchanged."""
    return v.value if isinstance(v, Enum) else v


def default_of(config: type, name: str) -> Any:
    """The default of field ``name`` of the dataclass ``config``."""
    for f in dataclasses.fields(config):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            break
    raise KeyError(f"{config.__name__} has no default for {name!r}")


def shown(default: Any) -> str:
    """How a default reads in help text: tuples comma-separated, None as ``none``."""
    if isinstance(default, (tuple, list)):
        return ",".join(map(str, default))
    if default is None:
        return "none"
    return str(value(default))


def bracket(default: Any, also: str | None = None) -> str:
    """``[default: X]`` or ``[default: X, <also>]``."""
    return f"[default: {shown(default)}{', ' + also if also else ''}]"


def given(**options: Any) -> dict[str, Any]:
    """The options the user gave (not None), Enum members as plain strings."""
    return {k: value(v) for k, v in options.items() if v is not None}


# -- help texts (one per option) ----------------------------------------------------------------
MODEL_HELP = "Architecture: " + ", ".join(
    name if entry.display in (name, "plain") else f"{name} ({entry.display})"
    for name, entry in MODELS.items()
)
CONV_HELP = "Message passing: " + ", ".join(CONVS) + " (see `oversmooth models`)"
NORM_HELP = "LayerNorm statistics: node (per node) or graph (per graph)."
DEPTH_HELP = "Number of blocks between encoder and decoder."
DATASET_HELP = "Dataset name (see `oversmooth datasets`), name:params, or a .pt/.csv path."
HIDDEN_HELP = "Hidden width (divisible by --heads)."
HEADS_HELP = "Attention heads."
SEED_HELP = "Initialisation seed."
PATTERN_HELP = (
    "Block pattern over M (masked neighbourhood attention) and S (global self-attention), "
    "repeated to the depth, e.g. MMSS."
)
DEVICE_HELP = "auto (CUDA when available), cpu, cuda or cuda:N."
DTYPE_HELP = (
    "Precision the model runs in. float64 resolves energies down to ~1e-30; "
    "float32 stops at its accumulated rounding floor, ~1e-12 at depth 256 (those layers are "
    "flagged at_floor and left out of fits)."
)
FLOOR_HELP = (
    "How the float floor is estimated: auto (shadow for float32, twin for float64), "
    "shadow (a float64 copy runs in step), twin (a copy on an input perturbed by one ulp), "
    "bound ((eps*norm)^2; free, too low when deep)."
)
METRICS_HELP = (
    "Extra per-layer metrics, e.g. effective_rank,mad,energy_3 (see `oversmooth metrics`)."
)
PRUNE_HELP = "Layers to prune one at a time, e.g. 2,32,64."


def option(
    kind: Any,
    *decls: str,
    help: str,
    default: Any = None,
    has_default: bool = True,
    also: str | None = None,
    hidden: bool = False,
) -> Any:
    """``Annotated[Optional[kind], typer.Option(...)]`` whose help ends with the real default.

    Declare the parameter ``= None``: None means "not given", and the run config's own
    default applies.  ``also`` adds where else the default may come from (a checkpoint).
    """
    text = f"{help} {bracket(default, also)}" if has_default else help
    return Annotated[
        kind | None, typer.Option(*decls, help=text, show_default=False, hidden=hidden)
    ]


# field -> (type, option names, help): every option that sets a run-config field
FIELDS: dict[str, tuple[Any, tuple[str, ...], str]] = {
    "model": (ModelName, ("--model", "-m"), MODEL_HELP + "."),
    "depth": (int, ("--depth", "-L"), DEPTH_HELP),
    "conv": (Conv, ("--conv",), CONV_HELP + "."),
    "dataset": (str, ("--dataset", "-d"), DATASET_HELP),
    "hidden": (int, ("--hidden",), HIDDEN_HELP),
    "heads": (int, ("--heads",), HEADS_HELP),
    "seed": (int, ("--seed",), SEED_HELP),
    "norm": (Norm, ("--norm",), NORM_HELP),
    "pattern": (str, ("--pattern",), PATTERN_HELP),
    "device": (str, ("--device",), DEVICE_HELP),
    "dtype": (Dtype, ("--dtype",), DTYPE_HELP),
    "floor": (FloorMethod, ("--floor",), FLOOR_HELP),
    "dropout": (float, ("--dropout",), "Encoder input dropout."),
    "epochs": (int, ("--epochs",), "Training epochs."),
}


class ConfigOptions:
    """The options of a command that fills the run config ``config`` (a dataclass).

    ``ConfigOptions(AnalysisConfig).hidden`` is the ``--hidden`` declaration: declare the
    parameter ``= None`` and its help shows ``AnalysisConfig``'s default.  ``also`` is where
    else a default may come from (``or the checkpoint's``); ``shown`` replaces the dataclass
    default in the help for the fields where the command supplies its own.
    """

    def __init__(self, config: type, also: str | None = None, **shown: Any) -> None:
        self.config, self.also, self.shown = config, also, shown

    def default(self, name: str) -> Any:
        return self.shown[name] if name in self.shown else default_of(self.config, name)

    def __getattr__(self, name: str) -> Any:
        if name not in FIELDS:
            raise AttributeError(name)
        kind, decls, text = FIELDS[name]
        return option(kind, *decls, help=text, default=self.default(name), also=self.also)


# -- options without a run-config default -------------------------------------------------------
Seeds = Annotated[
    str | None,
    typer.Option(
        "--seeds",
        help="Comma-separated seeds, e.g. 0,1,2 (overrides --seed); each seed is a draw of "
        "the architecture's weights, pooled as replicates.",
    ),
]
Device = Annotated[str, typer.Option("--device", help=DEVICE_HELP)]  # commands without a config
# a string, not a Path: typer turns --out "" into Path("."), the current folder
Out = Annotated[
    str | None,
    typer.Option(
        "--out", "-o", help="Output folder (default reports/<command>-<model>-<timestamp>)."
    ),
]
Overwrite = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Replace --out if it exists: only a folder oversmooth wrote, or an empty one.",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print a machine-readable summary on stdout.")]
Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet", "-q", help="No progress bar (it is also off when stderr is not a terminal)."
    ),
]
DataRoot = Annotated[
    Path | None,
    typer.Option("--data-root", help="Folder of downloaded benchmarks (PubMed, Coauthor, Amazon)."),
]
Checkpoint = Annotated[
    Path | None,
    typer.Option(
        "--checkpoint",
        help=(
            "A best.pt from `oversmooth train`: analyse the trained model "
            "(architecture and dataset come from it)."
        ),
    ),
]
