"""Registers one module per command on the app."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add every command to ``app`` (kept here so main.py stays an entry point)."""
    from oversmooth.cli.analyze_cmd import analyze
    from oversmooth.cli.bench_cmd import bench
    from oversmooth.cli.compare_cmd import compare
    from oversmooth.cli.datasets_cmd import datasets
    from oversmooth.cli.metrics_cmd import metrics
    from oversmooth.cli.models_cmd import models
    from oversmooth.cli.prune_cmd import prune
    from oversmooth.cli.report_cmd import report
    from oversmooth.cli.reproduce_cmd import reproduce
    from oversmooth.cli.sweep_cmd import sweep
    from oversmooth.cli.train_cmd import train

    app.command("analyze")(analyze)
    app.command("compare")(compare)
    app.command("prune")(prune)
    app.command("train")(train)
    app.command("models")(models)
    app.command("datasets")(datasets)
    app.command("metrics")(metrics)
    app.command("sweep")(sweep)
    app.command("report")(report)
    app.command("bench")(bench)
    app.command("reproduce")(reproduce)
