"""``oversmooth reproduce``: regenerate the paper-reproduction report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from oversmooth.cli import options as O
from oversmooth.cli._common import echo_json, handle_errors, is_tty
from oversmooth.experiments.reproduce import ReproduceConfig

R = O.ConfigOptions(ReproduceConfig)


def reproduce(
    quick: Annotated[
        bool,
        typer.Option(
            "--quick/--full",
            help=(
                "--quick: 3 seeds, training at depth 16 for 150 epochs; "
                "--full: 5 seeds, depth 32, 300 epochs."
            ),
        ),
    ] = True,
    out: Annotated[str, typer.Option("--out", "-o", help="Report folder.")] = (
        "reports/paper-reproduction"
    ),
    data_root: O.DataRoot = None,
    device: O.option(
        str,
        "--device",
        help=f"{O.DEVICE_HELP} Changed: the default was cpu; pass --device cpu for that.",
        default=R.default("device"),
    ) = None,
    trained: Annotated[
        list[Path] | None,
        typer.Option(
            "--trained",
            metavar="<run>",
            help=(
                "An `oversmooth train` run folder (with best.pt) to prune at eight layers "
                "spread over its depth, beside the paper's Table 8; repeat for several runs."
            ),
        ),
    ] = None,
    ablations: Annotated[
        bool,
        typer.Option(
            "--ablations/--no-ablations",
            help=(
                "Section 5: change one unstated choice at a time (init, encoder, FFN, norm, "
                "heads, score scaling, energy measure, ...) on Cora at depths 2, 32, 256."
            ),
        ),
    ] = True,
    overwrite: O.Overwrite = False,
    quiet: O.Quiet = False,
    dtype: R.dtype = None,
    as_json: O.Json = False,
) -> None:
    """Reproduce the seed paper's Tables 2/4/6, Figure 1, Figure 2 and Table 8 in kind, side by
    side with its numbers.

    Cora and CiteSeer always; PubMed, Coauthor CS and Physics too when their files are
    under --data-root.  Example: oversmooth reproduce --quick --overwrite
    """
    handle_errors(_run)(
        quick, out, data_root, device, overwrite, quiet, dtype, as_json, trained, ablations
    )


def _run(
    quick,
    out,
    data_root,
    device,
    overwrite,
    quiet,
    dtype,
    as_json: bool = False,
    trained=None,
    ablations: bool = True,
) -> None:
    from oversmooth.experiments.reproduce import run_reproduction

    root = str(data_root) if data_root else None
    runs = tuple(str(p) for p in trained or ())
    config = ReproduceConfig.preset(
        quick, root, trained=runs, ablations=ablations, **O.given(device=device, dtype=dtype)
    )
    say = None if quiet or not is_tty() else (lambda msg: typer.echo(f"reproduce: {msg}", err=True))
    from oversmooth.outputs import claim_folder

    with claim_folder(out, overwrite):  # held through the final write; a second run fails at once
        folder = run_reproduction(config, out, overwrite=overwrite, progress=say)
    if as_json:  # what config.json records, less the environment, plus where the report is
        from oversmooth.runtime import resolve_device

        written = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        echo_json(
            {
                "out": str(folder),
                "report": str(folder / "report.md"),
                "device": str(resolve_device(config.device)),
                "dtype": config.dtype,
                **{k: v for k, v in written.items() if k not in ("command", "environment")},
            }
        )
        return
    typer.echo(f"report: {folder / 'report.md'}")
