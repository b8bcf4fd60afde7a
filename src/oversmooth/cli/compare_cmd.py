"""``oversmooth compare``: several architectures over depths, datasets and seeds (Tables 2/4/6)."""

from __future__ import annotations

import typer

from oversmooth.cli import options as O
from oversmooth.cli._common import echo_json, handle_errors, output_formats, progress_bar
from oversmooth.run_configs import ComparisonConfig


@O.config_command(ComparisonConfig)
@handle_errors
def compare(
    given: O.Given,
    out: O.Out = None,
    overwrite: O.Overwrite = False,
    figure_format: O.FigureFormat = None,
    table_format: O.TableFormat = None,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
) -> None:
    """Final-layer Laplacian energy at initialisation for every model x depth x dataset x seed.

    Writes summary.csv, a table shaped like the seed paper's Tables 2/4/6 (mean ± std
    over seeds), the per-layer log-log plot at the deepest depth and a report. With several
    --convs every model runs with each of them.

    Example: oversmooth compare --models preln,postln,nonlocal --depths 2,32,64,128,256
    """
    from oversmooth.analysis import run_comparison
    from oversmooth.data import check_distinct, check_spec
    from oversmooth.outputs import claim_folder
    from oversmooth.report.prose import comparison_verdicts, summary_table
    from oversmooth.report.render import default_out, write_comparison

    formats = output_formats(figure_format, table_format)
    config = O.build(ComparisonConfig, given)
    for dataset in config.datasets:  # every dataset is valid before the first cell runs
        check_spec(dataset)
    check_distinct(config.datasets, "--datasets")
    # held from this check to the final rename: a second run into the same folder fails at once
    target = out if out is not None else default_out("compare", "-".join(config.models))
    reads = (*config.datasets, config.data_root)  # replacing a folder that holds them: refused
    with claim_folder(target, overwrite, reads=reads, writer="compare") as target:
        with progress_bar(not quiet) as update:
            result = run_comparison(config, progress=update)
        folder = write_comparison(result, target, overwrite=overwrite, **formats)
    lines = comparison_verdicts(result.fits, result.config)
    if as_json:
        echo_json(
            {
                "out": str(folder),
                "verdicts": lines,
                "summary": result.summary.to_dict(orient="records"),
                "timings": result.timings,
            }
        )
        return
    typer.echo(summary_table(result.summary, len(result.config["seeds"])).to_string())
    for line in lines:
        typer.echo(line)
    typer.echo(f"report: {folder / 'report.html'}")
