"""Registers one module per command on the app."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add every command to ``app`` (kept here so main.py stays an entry point)."""
    from oversmooth.cli.datasets_cmd import datasets
    from oversmooth.cli.metrics_cmd import metrics

    app.command("datasets")(datasets)
    app.command("metrics")(metrics)
