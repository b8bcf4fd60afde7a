"""``oversmooth analyze``: probe one architecture at initialisation, fit the laws, write a
report."""

from __future__ import annotations

from oversmooth.cli import options as O
from oversmooth.cli._common import (
    analyze_and_report,
    handle_errors,
    load_run_modules,
    output_formats,
)
from oversmooth.run_configs import AnalysisConfig


@O.config_command(
    AnalysisConfig,
    also="or the checkpoint's",
    also_for=AnalysisConfig.fixed_by_checkpoint,
    why={"model.name": "Post-LN by default: the seed paper's oversmoothing case."},
)
@handle_errors
def analyze(
    given: O.Given,
    out: O.Out = None,
    overwrite: O.Overwrite = False,
    figure_format: O.FigureFormat = None,
    table_format: O.TableFormat = None,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
) -> None:
    """Probe a freshly initialised model layer by layer and say how its energy behaves with depth.

    Writes metrics.csv, similarity.csv, fits.json, config.json, figures, report.md
    and report.html to --out, and prints a one-line verdict.

    With --checkpoint (from `oversmooth train`) the trained model is analysed instead,
    and --prune-layers reports the test-accuracy drop of each pruned layer (Table 8).

    Without options: Post-LN SAN, depth 256, Cora, seeds 0,1,2,3,4, float64 (about 10 s on 2
    idle CPU cores).

    Example: oversmooth analyze --model postln --depth 256
    """
    formats = output_formats(figure_format, table_format)
    load_run_modules()  # before the options are built: building them imports torch
    config = O.build(AnalysisConfig, given)
    # every option at its default
    bare = not (given or out or overwrite or as_json or quiet or figure_format or table_format)
    analyze_and_report(
        config, "analyze", out, overwrite, as_json, quiet, announce=bare, formats=formats
    )
