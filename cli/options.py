"""Options shared by several commands (one definition, used everywhere)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer


class ModelName(str, Enum):
    preln = "preln"
    postln = "postln"
    nonlocal_ = "nonlocal"
    nonlocal_preln = "nonlocal-preln"
    plain = "plain"


class Conv(str, Enum):
    san = "san"
    gcn = "gcn"
    gat = "gat"


class Dtype(str, Enum):
    float32 = "float32"
    float64 = "float64"


class FloorMethod(str, Enum):
    auto = "auto"
    shadow = "shadow"
    twin = "twin"
    bound = "bound"


class Norm(str, Enum):
    node = "node"
    graph = "graph"


Model = Annotated[
    ModelName,
    typer.Option(
        "--model",
        "-m",
        help="Architecture: preln, postln, nonlocal (nonlocal Post-LN), nonlocal-preln, plain.",
    ),
]
Depth = Annotated[
    int, typer.Option("--depth", "-L", help="Number of blocks between encoder and decoder.")
]
ConvOpt = Annotated[
    Conv,
    typer.Option(
        "--conv",
        help="Message passing: san (dot-product attention), gcn (neighbourhood mean), gat.",
    ),
]
Dataset = Annotated[
    str,
    typer.Option(
        "--dataset",
        "-d",
        help="Dataset name (see `oversmooth datasets`), name:params, or a .pt/.csv path.",
    ),
]
Hidden = Annotated[int, typer.Option("--hidden", help="Hidden width (divisible by --heads).")]
Heads = Annotated[int, typer.Option("--heads", help="Attention heads.")]
Seed = Annotated[int, typer.Option("--seed", help="Initialisation seed.")]
Seeds = Annotated[
    Optional[str],
    typer.Option("--seeds", help="Comma-separated seeds, e.g. 0,1,2 (overrides --seed)."),
]
DEVICE_HELP = "auto (CUDA when available), cpu, cuda or cuda:N."
Device = Annotated[str, typer.Option("--device", help=DEVICE_HELP)]
Out = Annotated[
    Optional[Path],
    typer.Option(
        "--out", "-o", help="Output folder (default reports/<command>-<model>-<timestamp>)."
    ),
]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace --out if it exists.")]
Json = Annotated[bool, typer.Option("--json", help="Print a machine-readable summary on stdout.")]
Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet", "-q", help="No progress bar (it is also off when stderr is not a terminal)."
    ),
]
NormOpt = Annotated[
    Norm, typer.Option("--norm", help="LayerNorm statistics: node (per node) or graph (per graph).")
]
Pattern = Annotated[
    str,
    typer.Option(
        "--pattern",
        help=(
            "Block pattern over M (masked neighbourhood attention) and S (global self-attention), "
            "repeated to the depth, e.g. MMSS."
        ),
    ),
]
DataRoot = Annotated[
    Optional[Path],
    typer.Option("--data-root", help="Folder of downloaded benchmarks (PubMed, Coauthor, Amazon)."),
]
Checkpoint = Annotated[
    Optional[Path],
    typer.Option(
        "--checkpoint",
        help=(
            "A best.pt from `oversmooth train`: analyse the trained model "
            "(architecture and dataset come from it)."
        ),
    ),
]
DtypeOpt = Annotated[
    Dtype,
    typer.Option(
        "--dtype",
        help="Precision the model runs in. float64 (default) resolves energies down to ~1e-30; "
        "float32 stops at its accumulated rounding floor, ~1e-12 at depth 256 (those layers are "
        "flagged at_floor and left out of fits).",
    ),
]
FloorOpt = Annotated[
    FloorMethod,
    typer.Option(
        "--floor",
        help="How the float floor is estimated: auto (shadow for float32, twin for float64), "
        "shadow (a float64 copy runs in step), twin (a copy on an input perturbed by one ulp), "
        "bound ((eps*norm)^2; free, too low when deep).",
    ),
]
