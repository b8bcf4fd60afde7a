"""``oversmooth sweep``: a resumable grid over models, convs, depths, datasets, seeds and modes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from oversmooth.cli import options as O
from oversmooth.experiments.sweep import SweepSpec
from oversmooth.cli._common import echo_json, handle_errors, parse_ints, parse_names, progress_bar


S = O.ConfigOptions(SweepSpec, also="or the spec's")


def _list(option: str, field: str, text: str) -> object:
    return O.option(str, option, help=text, default=S.default(field), also="or the spec's")


def sweep(
    spec: Annotated[
        Path | None,
        typer.Argument(
            metavar="SPEC",
            help="A TOML spec ([grid] and [options]); the list options below override it.",
        ),
    ] = None,
    models: _list("--models", "models", "Comma-separated architectures.") = None,
    convs: _list("--convs", "convs", "Comma-separated message passing types.") = None,
    depths: _list("--depths", "depths", "Comma-separated depths.") = None,
    datasets: _list("--datasets", "datasets", "Comma-separated datasets.") = None,
    seeds: _list("--seeds", "seeds", "Comma-separated seeds.") = None,
    modes: _list("--modes", "modes", "init and/or trained.") = None,
    epochs: O.option(
        int,
        "--epochs",
        help="Training epochs for trained cells.",
        default=S.default("epochs"),
        also="or the spec's",
    ) = None,
    backend: O.option(
        str,
        "--backend",
        help="local (a process pool) or ray.",
        default=S.default("backend"),
        also="or the spec's",
    ) = None,
    workers: Annotated[
        int | None, typer.Option("--workers", help="Parallel cells (default: all cores).")
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option("--ray-address", help="Ray cluster to join (default: start a local one)."),
    ] = None,
    device: O.option(
        str,
        "--device",
        help=f"{O.DEVICE_HELP[:-1]}, for every cell. Changed: the default was cpu; "
        "pass --device cpu for that (a sweep folder begun on cpu is refused when auto resolves "
        "to cuda).",
        default=S.default("device"),
        also="or the spec's",
    ) = None,
    dtype: S.dtype = None,
    out: Annotated[
        str | None,
        typer.Option("--out", "-o", help="Sweep folder; rerunning into it skips finished cells."),
    ] = None,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
) -> None:
    """Run every cell of a grid in parallel, one file per finished cell, then merge into tables
    and reports.

    Rerun the same command to finish an interrupted sweep: finished cells are skipped,
    failed ones retried; a folder whose cells were computed with other options is
    refused.  Example:
    oversmooth sweep --models preln,postln,nonlocal --depths 2,32,64 --seeds 0,1,2
    --out reports/sweep
    """
    handle_errors(_run)(
        spec=spec,
        models=models,
        convs=convs,
        depths=depths,
        datasets=datasets,
        seeds=seeds,
        modes=modes,
        epochs=epochs,
        backend=backend,
        workers=workers,
        ray_address=ray_address,
        device=device,
        dtype=dtype,
        out=out,
        as_json=as_json,
        quiet=quiet,
    )


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
    from oversmooth.experiments.sweep import load_spec, run_sweep

    overrides = {
        "models": parse_names("--models", models) if models is not None else None,
        "convs": parse_names("--convs", convs) if convs is not None else None,
        "depths": parse_ints("--depths", depths, minimum=1) if depths is not None else None,
        "datasets": parse_names("--datasets", datasets) if datasets is not None else None,
        "seeds": parse_ints("--seeds", seeds) if seeds is not None else None,
        "modes": parse_names("--modes", modes) if modes is not None else None,
        "epochs": epochs,
        "backend": backend,
        "workers": workers,
        "ray_address": ray_address,
        "device": device,
        "dtype": dtype.value if dtype else None,
        "out": out,
    }
    if spec is not None:
        config = load_spec(spec, **overrides)
    else:
        config = SweepSpec(**{k: v for k, v in overrides.items() if v is not None})
    with progress_bar(not quiet) as update:
        result = run_sweep(config, progress=update)
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
