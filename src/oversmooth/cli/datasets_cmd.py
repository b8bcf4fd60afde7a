"""``oversmooth datasets``: list the datasets, or print one dataset's statistics."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from oversmooth.cli import options as O
from oversmooth.cli._common import echo_listing, handle_errors


def datasets(
    stats: Annotated[
        str | None,
        typer.Option(
            "--stats",
            metavar="NAME",
            help=(
                "Print nodes, edges, features, classes, homophily and isolated nodes of NAME "
                "(a name, name:params, or a .pt/.csv path)."
            ),
        ),
    ] = None,
    data_root: O.DataRoot = None,
    features: Annotated[
        Path | None,
        typer.Option("--features", help="Features CSV for an edge-list CSV (one row per node)."),
    ] = None,
    labels: Annotated[
        Path | None,
        typer.Option("--labels", help="Labels CSV for an edge-list CSV (one row per node)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")
    ] = False,
) -> None:
    """List the built-in datasets, or the statistics of one (--stats NAME).

    cora and citeseer ship with the package and work offline; pubmed, cs,
    physics, computers and photo are downloaded by torch_geometric into
    --data-root; csbm, csbm-batch, ring, grid, complete and karate are generated
    (e.g. --stats csbm:n=10000,degree=8,homophily=0.7).
    """
    handle_errors(_run)(stats, data_root, features, labels, as_json)


def _run(stats, data_root, features, labels, as_json) -> None:
    from oversmooth import data as D

    if stats is None:
        given = [
            o
            for o, v in (("--data-root", data_root), ("--features", features), ("--labels", labels))
            if v is not None
        ]
        if given:  # they only apply to --stats; listing would silently ignore them
            raise ValueError(
                f"{given[0]}: only used with --stats NAME; add --stats NAME or drop {given[0]}"
            )
        if as_json:
            typer.echo(
                json.dumps(
                    {
                        k: {"kind": v.kind, "description": v.description}
                        for k, v in D.DATASETS.items()
                    },
                    indent=2,
                )
            )
            return
        echo_listing((name, info.description) for name, info in D.DATASETS.items())
        typer.echo(
            "\nAlso: a saved PyG Data (.pt) or an edge-list CSV path;\n"
            "synthetic names take name:key=value,..."
        )
        return
    data = D.load(stats, data_root=data_root, features=features, labels=labels)
    values = D.graph_stats(data)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "dataset": stats,
                    **{
                        k: (None if isinstance(v, float) and math.isnan(v) else v)
                        for k, v in values.items()
                    },
                },
                indent=2,
            )
        )
        return
    typer.echo(f"dataset         {stats}")
    for key, value in values.items():
        shown = f"{value:.4f}" if isinstance(value, float) else f"{value}"
        typer.echo(f"{key.replace('_', ' '):<15} {shown}")
