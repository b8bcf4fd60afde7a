"""``oversmooth reproduce``: regenerate the paper-reproduction report."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from oversmooth.cli import options as O
from oversmooth.cli._common import echo_json, handle_errors, output_formats, stage_lines
from oversmooth.experiments.reproduce import ReproduceConfig


@O.config_command(ReproduceConfig)
@handle_errors
def reproduce(
    given: O.Given,
    out: Annotated[
        str,
        typer.Option("--out", "-o", help="Report folder."),
    ] = "reports/paper-reproduction",
    overwrite: O.Overwrite = False,
    quiet: O.Quiet = False,
    figure_format: O.FigureFormat = None,
    table_format: O.TableFormat = None,
    as_json: O.Json = False,
) -> None:
    """Reproduce the seed paper's Tables 2/4/6, Figure 1, Figure 2 and Table 8 in kind, side by
    side with its numbers.

    Cora and CiteSeer always; PubMed, Coauthor CS and Physics too when their files are
    under --data-root.  --quick takes about 8 minutes on 2 CPU cores, ablations
    included (reports/paper-reproduction records the time).

    Example: oversmooth reproduce --quick --overwrite
    """
    from oversmooth.experiments.reproduce import run_reproduction
    from oversmooth.outputs import claim_folder

    formats = output_formats(figure_format, table_format)
    config = ReproduceConfig.preset(**given.values())
    say = stage_lines("reproduce", not quiet)
    with claim_folder(out, overwrite):  # held through the final write; a second run fails at once
        folder = run_reproduction(config, out, overwrite=overwrite, progress=say, **formats)
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
