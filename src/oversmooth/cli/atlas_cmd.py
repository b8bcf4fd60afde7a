"""``oversmooth atlas``: PyTorch Geometric's deep-GNN building blocks probed at initialisation."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from oversmooth.cli import options as O
from oversmooth.cli._common import echo_json, handle_errors, output_formats, progress_bar
from oversmooth.experiments.atlas import QUICK, AtlasConfig

_QUICK_HELP = (
    "Smoke run: depths "
    + ",".join(map(str, QUICK["depths"]))
    + ", one seed, two small graphs ("
    + ", ".join(QUICK["datasets"])
    + ")."
)


@O.config_command(AtlasConfig, also="0 with --quick", also_for=lambda field: field == "seeds")
@handle_errors
def atlas(
    given: O.Given,
    quick: Annotated[bool, typer.Option("--quick", help=_QUICK_HELP)] = False,
    out: Annotated[str, typer.Option("--out", "-o", help="Atlas folder.")] = "reports/atlas",
    overwrite: O.Overwrite = False,
    figure_format: O.FigureFormat = None,
    table_format: O.TableFormat = None,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
) -> None:
    """Probe PyTorch Geometric's deep-GNN building blocks at initialisation and tabulate how
    each behaves with depth.

    GCN, GAT, GATv2, GraphSAGE, GIN, GCN + PairNorm, GCNII, APPNP, DeeperGCN (res+), GPS,
    Pre-LN and Post-LN TransformerConv stacks and the zoo's own Pre-LN, Post-LN and nonlocal
    SAN, built from PyG's classes as its examples do, at depths 2, 8, 32, 64, 128 on Cora and a
    CSBM graph. Writes atlas.csv (one row per architecture: verdict, asymptotic rate, decades
    lost, norm or direction collapse, curse of depth, middle-layer pruning), atlas.png (the
    overlaid log-log curves), curves.csv, report.md and report.html to --out.

    The full atlas takes minutes on 2 quiet CPU cores (reports/atlas records the time; tens of
    minutes on a busy host or with one thread), most of it GPS's global attention over Cora's
    2708 nodes.
    Example: oversmooth atlas --quick --out /tmp/atlas

    Architectures: gcn, gat, gatv2, sage, gin, gcn-pairnorm, gcnii, appnp, deepergcn, gps,
    transformer-preln, transformer-postln, zoo-preln, zoo-postln, zoo-nonlocal.
    """
    from oversmooth.experiments.atlas import display_table, run_atlas, write_atlas
    from oversmooth.outputs import check_out, claim_folder

    formats = output_formats(figure_format, table_format)
    config = AtlasConfig.preset(quick, **given.values())
    check_out(out, overwrite)
    with claim_folder(out, overwrite):  # held through the final write; a second run fails at once
        with progress_bar(not quiet) as update:
            result = run_atlas(config, progress=update)
        folder = write_atlas(result, out, overwrite=overwrite, **formats)
    if as_json:
        echo_json(
            {
                "out": str(folder),
                "report": str(Path(folder) / "report.md"),
                "table": result.table.to_dict(orient="records"),
                "timings": result.timings,
            }
        )
        return
    shown = display_table(result.report())
    # the columns that fit 80 characters (seven were 150 wide: an audit); the report has all
    lost = next(c for c in shown.columns if c.startswith("decades lost"))
    brief = shown[["architecture", "verdict", lost, "fall is", "curse of depth"]]
    brief.columns = ["architecture", "verdict", "decades", "fall is", "curse"]
    typer.echo(brief.to_string(index=False))
    typer.echo(f"report: {Path(folder) / 'report.md'}")
