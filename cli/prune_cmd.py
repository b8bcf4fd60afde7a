"""``oversmooth prune``: layer-pruning sensitivity (seed paper Table 8) at initialisation."""

from __future__ import annotations

from typing import Annotated

import typer

from oversmooth.cli import options as O
from oversmooth.cli._common import handle_errors


def prune(
    layers: Annotated[str, typer.Option("--layers", help="Layers to prune one at a time, e.g. 2,32,64,96,128,160,192,224.")],
    model: O.Model = O.ModelName.preln,
    depth: O.Depth = 256,
    conv: O.ConvOpt = O.Conv.san,
    dataset: O.Dataset = "cora",
    hidden: O.Hidden = 32,
    heads: O.Heads = 4,
    seed: O.Seed = 0,
    device: O.Device = "auto",
    norm: O.NormOpt = O.Norm.node,
    pattern: O.Pattern = "M",
    data_root: O.DataRoot = None,
    out: O.Out = None,
    overwrite: O.Overwrite = False,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
) -> None:
    """Replace each chosen layer by the identity, alone, and measure how much the output changes.

    Reports the relative change of the logits and of the final Laplacian energy
    (the whole analyze report is written too, without the similarity matrix).

    Example: oversmooth prune --model preln --depth 256 --layers 2,32,64,96,128,160,192,224
    """
    from oversmooth.cli.analyze_cmd import _run

    handle_errors(_run)(
        model=model, depth=depth, conv=conv, dataset=dataset, hidden=hidden, heads=heads, seed=seed, seeds=None,
        device=device, similarity=False, prune=layers, metrics=None, norm=norm, pattern=pattern, data_root=data_root,
        out=out, overwrite=overwrite, as_json=as_json, quiet=quiet, command="prune", prune_option="--layers",
    )
