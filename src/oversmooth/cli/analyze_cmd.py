"""``oversmooth analyze``: probe one architecture at initialisation, fit the laws, write a
report."""

from __future__ import annotations

import inspect
from typing import Annotated

import typer

from oversmooth.analysis import AnalysisConfig
from oversmooth.cli import options as O
from oversmooth.cli._common import (
    analyze_and_report,
    deprecated_alias,
    handle_errors,
    parse_ints,
)

# None means "not given": the AnalysisConfig default, or the checkpoint's value
A = O.ConfigOptions(AnalysisConfig, also="or the checkpoint's")
PruneLayers = Annotated[
    str | None, typer.Option("--prune-layers", help=O.PRUNE_HELP, show_default=False)
]
OldPrune = Annotated[
    str | None, typer.Option("--prune", hidden=True, help="Deprecated: --prune-layers.")
]
Run = O.ConfigOptions(AnalysisConfig)  # options a checkpoint does not fix
Seed = O.option(
    int,
    "--seed",
    help="One initialisation seed instead of the default seeds (ignored when --seeds is given).",
    has_default=False,
)
Metrics = Annotated[str | None, typer.Option("--metrics", help=O.METRICS_HELP)]


def analyze(
    model: A.model = None,
    depth: A.depth = None,
    conv: A.conv = None,
    dataset: A.dataset = None,
    hidden: A.hidden = None,
    heads: A.heads = None,
    seed: Seed = None,
    seeds: O.Seeds = None,
    device: Run.device = None,
    similarity: Annotated[
        bool | None,
        typer.Option(
            "--similarity/--no-similarity",
            help="Record the L x L inter-layer similarity matrix (memory grows with depth). "
            + O.bracket("on" if O.default_of(AnalysisConfig, "similarity") else "off"),
            show_default=False,
        ),
    ] = None,
    prune_layers: PruneLayers = None,
    metrics: Metrics = None,
    norm: A.norm = None,
    pattern: A.pattern = None,
    data_root: O.DataRoot = None,
    checkpoint: O.Checkpoint = None,
    dtype: Run.dtype = None,
    floor: Run.floor = None,
    out: O.Out = None,
    overwrite: O.Overwrite = False,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
    prune: OldPrune = None,
) -> None:
    """Probe a freshly initialised model layer by layer and say how its energy behaves with depth.

    Writes metrics.csv, similarity.csv, fits.json, config.json, figures, report.md
    and report.html to --out, and prints a one-line verdict.

    With --checkpoint (from `oversmooth train`) the trained model is analysed instead,
    and --prune-layers reports the test-accuracy drop of each pruned layer (Table 8).

    Without options: Post-LN SAN, depth 256, Cora, seeds 0-4, float64 (about 13 s on 2 idle CPU
    cores).

    Example: oversmooth analyze --model postln --depth 256
    """
    given = dict(locals())
    defaults = inspect.signature(analyze).parameters.items()
    bare = all(given[name] == p.default for name, p in defaults)  # every option at its default
    handle_errors(_analyze)(**given, announce=bare)


def _analyze(
    *,
    seed,
    seeds,
    prune_layers,
    prune,
    metrics,
    data_root,
    checkpoint,
    out,
    overwrite,
    as_json,
    quiet,
    announce,
    **model_fields,
) -> None:
    layers = deprecated_alias("--prune", "--prune-layers", prune, prune_layers)
    extra = tuple(m.strip() for m in metrics.split(",") if m.strip()) if metrics else ()
    fields = O.given(
        **model_fields,
        prune=parse_ints("--prune-layers", layers, minimum=1) if layers is not None else None,
        metrics=tuple(dict.fromkeys(O.default_of(AnalysisConfig, "metrics") + extra))
        if extra
        else None,
        data_root=str(data_root) if data_root else None,
    )
    chosen = (
        parse_ints("--seeds", seeds)
        if seeds is not None  # --seeds "" is refused, not read as "not given"
        else (seed,)
        if seed is not None
        else None
    )
    analyze_and_report(
        fields,
        seeds=chosen,
        checkpoint=checkpoint,
        out=out,
        overwrite=overwrite,
        as_json=as_json,
        quiet=quiet,
        command="analyze",
        announce=announce,
    )
