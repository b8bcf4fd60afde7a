"""``oversmooth bench``: speed, memory and scaling benchmarks, written to reports/benchmarks/."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from oversmooth.cli import options as O
from oversmooth.cli._common import echo_json, handle_errors, output_formats, stage_lines


@handle_errors
def bench(
    quick: Annotated[
        bool,
        typer.Option(
            "--quick", help="Tiny sizes and few repeats: a smoke test of every measurement."
        ),
    ] = False,
    out: Annotated[
        str,
        typer.Option("--out", "-o", help="Output folder (see --overwrite)."),
    ] = "reports/benchmarks",
    overwrite: O.Overwrite = False,
    device: O.Device = "auto",
    figure_format: O.FigureFormat = None,
    table_format: O.TableFormat = None,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
) -> None:
    """Measure every speed and memory target and mark each met or missed: the main command
    against `import torch`, the default kernel against the edge kernel, probe overhead,
    float64 cost, scaling in graph size and its memory, metric kernels against one-liners,
    sweep workers. Writes report.md/html (the targets table first), results.json, CSVs and
    plots to --out.
    """
    from oversmooth.experiments.bench import run_bench
    from oversmooth.outputs import claim_folder

    formats = output_formats(figure_format, table_format)
    say = stage_lines("bench", not quiet)
    with claim_folder(out, overwrite):  # refused at once if out exists or another run holds it
        results = run_bench(
            out, quick=quick, progress=say, overwrite=overwrite, device=device, **formats
        )
    rows = results["targets"]
    met = [t for t in rows if t["status"] == "met"]
    summary = {
        "out": str(out),
        "quick": quick,
        "targets_met": len(met),
        "targets": len(rows),
        "missed": [t["key"] for t in rows if t["status"] != "met"],
        "seconds": results["seconds"],
    }
    if as_json:
        echo_json(summary)
        return
    for t in rows:
        if t["status"] != "met":
            typer.echo(f"{t['status']}: {t['key']}: {t['measured']} (target {t['target']})")
    note = " (quick: tiny sizes, statuses say nothing about speed)" if quick else ""
    typer.echo(f"{len(met)} of {len(rows)} targets met{note}; report: {Path(out) / 'report.md'}")
