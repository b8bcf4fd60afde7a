"""``oversmooth prune``: layer-pruning sensitivity (seed paper Table 8) at initialisation."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from oversmooth.cli import options as O
from oversmooth.cli._common import handle_errors
from oversmooth.cli.analyze_cmd import CkptHeads, CkptHidden, CkptNorm, CkptPattern, CkptSeed


def prune(
    layers: Annotated[
        str,
        typer.Option(
            "--layers", help="Layers to prune one at a time, e.g. 2,32,64,96,128,160,192,224."
        ),
    ],
    model: Annotated[
        Optional[O.ModelName],
        typer.Option("--model", "-m", help="Architecture. [default: preln, or the checkpoint's]"),
    ] = None,
    depth: Annotated[
        Optional[int],
        typer.Option("--depth", "-L", help="Number of blocks. [default: 256, or the checkpoint's]"),
    ] = None,
    conv: Annotated[
        Optional[O.Conv],
        typer.Option(
            "--conv", help="Message passing: san, gcn, gat. [default: san, or the checkpoint's]"
        ),
    ] = None,
    dataset: Annotated[
        Optional[str],
        typer.Option("--dataset", "-d", help="Dataset. [default: cora, or the checkpoint's]"),
    ] = None,
    hidden: CkptHidden = None,
    heads: CkptHeads = None,
    seed: CkptSeed = None,
    device: O.Device = "auto",
    norm: CkptNorm = None,
    pattern: CkptPattern = None,
    data_root: O.DataRoot = None,
    checkpoint: O.Checkpoint = None,
    dtype: O.DtypeOpt = O.Dtype.float64,
    floor: O.FloorOpt = O.FloorMethod.auto,
    out: O.Out = None,
    overwrite: O.Overwrite = False,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
) -> None:
    """Replace each chosen layer by the identity, alone, and measure how much the output changes.

    Reports the relative change of the logits and of the final Laplacian energy
    (the whole analyze report is written too, without the similarity matrix). With
    --checkpoint the trained model is pruned and the test-accuracy drop reported
    (the seed paper's Table 8); --model, --depth and --conv then come from it.

    Example: oversmooth prune --model preln --depth 256 --layers 2,32,64,96,128,160,192,224
    """
    from oversmooth.cli.analyze_cmd import _run

    if checkpoint is None and model is None:
        model = O.ModelName.preln
    handle_errors(_run)(
        model=model,
        depth=depth,
        conv=conv,
        dataset=dataset,
        hidden=hidden,
        heads=heads,
        seed=seed,
        seeds=None,
        device=device,
        similarity=False,
        prune=layers,
        metrics=None,
        norm=norm,
        pattern=pattern,
        data_root=data_root,
        checkpoint=checkpoint,
        out=out,
        overwrite=overwrite,
        as_json=as_json,
        quiet=quiet,
        command="prune",
        prune_option="--layers",
        dtype=dtype,
        floor=floor,
    )
