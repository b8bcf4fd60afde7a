"""``oversmooth sweep``: a resumable grid over models, convs, depths, datasets, seeds and modes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from oversmooth.cli import options as O
from oversmooth.cli._common import echo_json, handle_errors, output_formats, progress_bar
from oversmooth.experiments.sweep import SweepSpec


@O.config_command(SweepSpec, also="or the spec's")
@handle_errors
def sweep(
    given: O.Given,
    spec: Annotated[
        Path | None,
        typer.Argument(
            metavar="SPEC",
            help="A TOML spec ([grid] and [options]); the options below override it.",
        ),
    ] = None,
    figure_format: O.FigureFormat = None,
    table_format: O.TableFormat = None,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
) -> None:
    """Run every cell of a grid in parallel, one file per finished cell, then merge into tables
    and reports.

    Rerun the same command to finish an interrupted sweep: finished cells are skipped,
    failed ones retried (exit 1 while any is left); cells whose final energy is not
    finite are named as diverged, and kept. A folder whose cells were computed with
    other options (a device included: --device auto picks cuda where there is one) is
    refused.

    Example: oversmooth sweep --models preln,postln,nonlocal --depths 2,32,64 --seeds 0,1,2
    --out reports/sweep
    """
    from oversmooth.experiments.sweep import load_spec, run_sweep

    formats = output_formats(figure_format, table_format)
    config = O.build(SweepSpec, given) if spec is None else load_spec(spec, given.values())
    try:
        with progress_bar(not quiet) as update:
            result = run_sweep(config, progress=update, **formats)
    except KeyboardInterrupt as exc:  # Ctrl-C said only "interrupted" (an audit)
        exc.resume = "rerun the same command to go on from the cells finished so far"
        raise
    summary = {
        "out": str(result.out),
        "cells": result.total,
        "skipped": result.skipped,
        "ran": result.ran,
        "failed": [{"id": r["id"], "error": r.get("error")} for r in result.failed],
        "diverged": result.diverged,
        "seconds": result.seconds,
    }
    if as_json:
        echo_json(summary)
    else:
        diverged = (
            f", {len(result.diverged)} diverged (a final energy that is not finite)"
            if result.diverged
            else ""
        )
        typer.echo(
            f"{result.total} cells: {result.skipped} already done, {result.ran} run, "
            f"{len(result.failed)} failed{diverged}; "
            f"tables and reports in {result.out}"
        )
        for r in result.failed:
            typer.echo(f"failed {r['id']}: {r.get('error')}", err=True)
        for r in result.diverged:
            # a cell's JSON keeps no Inf (null, as NaN): "not finite" covers both
            energy = "not finite" if r["final_energy"] is None else f"{r['final_energy']:g}"
            typer.echo(f"diverged {r['id']}: final energy {energy}", err=True)
    if result.failed:
        raise typer.Exit(1)
