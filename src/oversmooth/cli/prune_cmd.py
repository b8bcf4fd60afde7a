"""``oversmooth prune``: layer-pruning sensitivity, at initialisation (the change of the logits)
or of a trained checkpoint (the test-accuracy drop: seed paper Table 8)."""

from __future__ import annotations

from oversmooth import config as C
from oversmooth.cli import options as O
from oversmooth.cli._common import (
    analyze_and_report,
    handle_errors,
    load_run_modules,
    output_formats,
)
from oversmooth.run_configs import AnalysisConfig

#: this command's own defaults: Table 8 prunes Pre-LN models, and a pruning run needs no
#: similarity matrix
DEFAULTS = C.PRUNE_DEFAULTS


@O.config_command(
    AnalysisConfig,
    defaults=DEFAULTS,
    also="or the checkpoint's",
    also_for=AnalysisConfig.fixed_by_checkpoint,
    why={"model.name": "Pre-LN by default: the seed paper's Table 8 prunes Pre-LN models."},
    required=("prune",),
)
@handle_errors
def prune(
    given: O.Given,
    out: O.Out = None,
    overwrite: O.Overwrite = False,
    figure_format: O.FigureFormat = None,
    table_format: O.TableFormat = None,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
) -> None:
    """Replace each chosen layer by the identity, alone, and measure how much the output changes.

    Reports the relative change of the logits and of the final Laplacian energy
    (the whole analyze report is written too, without the similarity matrix). With
    --checkpoint the trained model is pruned and the test-accuracy drop reported
    (the seed paper's Table 8); the model, dataset and seed then come from it.
    --prune-layers is required; pruning runs on the first seed.

    Example: oversmooth prune --model preln --depth 256 --prune-layers 2,32,64,96,128,160,192,224
    """
    formats = output_formats(figure_format, table_format)
    load_run_modules()  # before the options are built: building them imports torch
    config = O.build(AnalysisConfig, given, **DEFAULTS)
    if not config.prune:
        raise ValueError("--prune-layers: expected the layers to prune, e.g. --prune-layers 2,32")
    analyze_and_report(config, "prune", out, overwrite, as_json, quiet, formats=formats)
