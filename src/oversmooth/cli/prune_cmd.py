"""``oversmooth prune``: layer-pruning sensitivity (seed paper Table 8) at initialisation."""

from __future__ import annotations

from typing import Annotated

import typer

from oversmooth.analysis import AnalysisConfig
from oversmooth.cli import options as O
from oversmooth.cli._common import analyze_and_report, deprecated_alias, handle_errors, parse_ints

# Table 8 prunes Pre-LN models: the one default this command sets itself
PRUNE_MODEL = "preln"
P = O.ConfigOptions(AnalysisConfig, also="or the checkpoint's", model=PRUNE_MODEL)
Run = O.ConfigOptions(AnalysisConfig)  # options a checkpoint does not fix
Seed = O.option(
    int,
    "--seed",
    help=O.SEED_HELP,
    default=O.default_of(AnalysisConfig, "seeds")[0],
    also="or the checkpoint's",
)
Layers = Annotated[
    str | None,
    typer.Option(
        "--prune-layers",
        help="Layers to prune one at a time, e.g. 2,32,64,96,128,160,192,224 (required).",
        show_default=False,
    ),
]
OldLayers = Annotated[
    str | None, typer.Option("--layers", hidden=True, help="Deprecated: --prune-layers.")
]


def prune(
    prune_layers: Layers = None,
    model: P.model = None,
    depth: P.depth = None,
    conv: P.conv = None,
    dataset: P.dataset = None,
    hidden: P.hidden = None,
    heads: P.heads = None,
    seed: Seed = None,
    device: Run.device = None,
    norm: P.norm = None,
    pattern: P.pattern = None,
    data_root: O.DataRoot = None,
    checkpoint: O.Checkpoint = None,
    dtype: Run.dtype = None,
    floor: Run.floor = None,
    out: O.Out = None,
    overwrite: O.Overwrite = False,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
    layers: OldLayers = None,
) -> None:
    """Replace each chosen layer by the identity, alone, and measure how much the output changes.

    Reports the relative change of the logits and of the final Laplacian energy
    (the whole analyze report is written too, without the similarity matrix). With
    --checkpoint the trained model is pruned and the test-accuracy drop reported
    (the seed paper's Table 8); --model, --depth and --conv then come from it.

    Example: oversmooth prune --model preln --depth 256 --prune-layers 2,32,64,96,128,160,192,224
    """
    handle_errors(_prune)(
        prune_layers=prune_layers,
        model=model,
        depth=depth,
        conv=conv,
        dataset=dataset,
        hidden=hidden,
        heads=heads,
        seed=seed,
        device=device,
        norm=norm,
        pattern=pattern,
        data_root=data_root,
        checkpoint=checkpoint,
        dtype=dtype,
        floor=floor,
        out=out,
        overwrite=overwrite,
        as_json=as_json,
        quiet=quiet,
        layers=layers,
    )


def _prune(
    *, prune_layers, layers, seed, data_root, checkpoint, out, overwrite, as_json, quiet, **rest
) -> None:
    chosen = deprecated_alias("--layers", "--prune-layers", layers, prune_layers)
    if chosen is None:
        raise ValueError("--prune-layers: expected the layers to prune, e.g. --prune-layers 2,32")
    if checkpoint is None and rest["model"] is None:
        rest["model"] = PRUNE_MODEL
    fields = O.given(
        **rest,
        similarity=False,
        prune=parse_ints("--prune-layers", chosen, minimum=1),
        data_root=str(data_root) if data_root else None,
    )
    analyze_and_report(
        fields,
        seeds=(seed,) if seed is not None else None,
        checkpoint=checkpoint,
        out=out,
        overwrite=overwrite,
        as_json=as_json,
        quiet=quiet,
        command="prune",
    )
