"""``oversmooth sweep``: a resumable grid over models, convs, depths, datasets, seeds and modes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from oversmooth.cli import options as O
from oversmooth.cli._common import echo_json, handle_errors, parse_ints, parse_names, progress_bar


def sweep(
    spec: Annotated[
        Optional[Path],
        typer.Argument(
            metavar="SPEC",
            help="A TOML spec ([grid] and [options]); the list options below override it.",
        ),
    ] = None,
    models: Annotated[
        Optional[str], typer.Option("--models", help="Comma-separated architectures.")
    ] = None,
    convs: Annotated[
        Optional[str], typer.Option("--convs", help="Comma-separated message passing types.")
    ] = None,
    depths: Annotated[
        Optional[str], typer.Option("--depths", help="Comma-separated depths.")
    ] = None,
    datasets: Annotated[
        Optional[str], typer.Option("--datasets", help="Comma-separated datasets.")
    ] = None,
    seeds: Annotated[Optional[str], typer.Option("--seeds", help="Comma-separated seeds.")] = None,
    modes: Annotated[Optional[str], typer.Option("--modes", help="init and/or trained.")] = None,
    epochs: Annotated[
        Optional[int], typer.Option("--epochs", help="Training epochs for trained cells.")
    ] = None,
    backend: Annotated[
        Optional[str], typer.Option("--backend", help="local (process pool, default) or ray.")
    ] = None,
    workers: Annotated[
        Optional[int], typer.Option("--workers", help="Parallel cells (default: all cores).")
    ] = None,
    ray_address: Annotated[
        Optional[str],
        typer.Option("--ray-address", help="Ray cluster to join (default: start a local one)."),
    ] = None,
    device: Annotated[
        Optional[str],
        typer.Option(
            "--device",
            help=f"{O.DEVICE_HELP[:-1]}, for every cell. Changed: the default was cpu; "
            "pass --device cpu for that (a sweep folder begun on cpu is refused when auto resolves "
            "to cuda). [default: auto, or the spec's]",
        ),
    ] = None,
    dtype: Annotated[
        Optional[O.Dtype],
        typer.Option(
            "--dtype",
            help="Precision of every cell's model: float32 or float64. "
            "[default: float64, or the spec's]",
        ),
    ] = None,
    out: Annotated[
        Optional[Path],
        typer.Option("--out", "-o", help="Sweep folder; rerunning into it skips finished cells."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a machine-readable summary on stdout.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Run every cell of a grid in parallel, one file per finished cell, then merge into tables
    and reports.

    Rerun the same command to finish an interrupted sweep: finished cells are skipped,
    failed ones retried; a folder whose cells were computed with other options is
    refused.  Example:
    oversmooth sweep --models preln,postln,nonlocal --depths 2,32,64 --seeds 0,1,2
    --out reports/sweep
    """
    handle_errors(_run)(**locals())


def _run(
    spec,
    models,
    convs,
    depths,
    datasets,
    seeds,
    modes,
    epochs,
    backend,
    workers,
    ray_address,
    device,
    dtype,
    out,
    as_json,
    quiet,
) -> None:
    from oversmooth.sweep import SweepSpec, load_spec, run_sweep

    overrides = {
        "models": parse_names("--models", models) if models else None,
        "convs": parse_names("--convs", convs) if convs else None,
        "depths": parse_ints("--depths", depths, minimum=1) if depths else None,
        "datasets": parse_names("--datasets", datasets) if datasets else None,
        "seeds": parse_ints("--seeds", seeds) if seeds else None,
        "modes": parse_names("--modes", modes) if modes else None,
        "epochs": epochs,
        "backend": backend,
        "workers": workers,
        "ray_address": ray_address,
        "device": device,
        "dtype": dtype.value if dtype else None,
        "out": str(out) if out else None,
    }
    if spec is not None:
        config = load_spec(spec, **overrides)
    else:
        config = SweepSpec(**{k: v for k, v in overrides.items() if v is not None})
    with progress_bar(not quiet) as update:
        result = run_sweep(
            config, progress=(lambda done, total, msg: update(msg, done, total)) if update else None
        )
    summary = {
        "out": str(result.out),
        "cells": result.total,
        "skipped": result.skipped,
        "ran": result.ran,
        "failed": [{"id": r["id"], "error": r.get("error")} for r in result.failed],
        "seconds": result.seconds,
    }
    if as_json:
        echo_json(summary)
    else:
        typer.echo(
            f"{result.total} cells: {result.skipped} already done, {result.ran} run, "
            f"{len(result.failed)} failed; "
            f"tables and reports in {result.out}"
        )
        for r in result.failed:
            typer.echo(f"failed {r['id']}: {r.get('error')}", err=True)
    if result.failed:
        raise typer.Exit(1)
