"""``oversmooth report DIR``: re-render figures and reports from a run's data files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from oversmooth.cli._common import handle_errors


def report(folder: Annotated[Path, typer.Argument(help="A folder written by analyze, prune or compare.")]) -> None:
    """Rebuild the PNGs, report.md and report.html of FOLDER from its CSV/JSON files, without recomputing."""
    handle_errors(_run)(folder)


def _run(folder: Path) -> None:
    from oversmooth.report.render import render_report

    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder")
    render_report(folder)
    typer.echo(f"report: {folder / 'report.html'}")
