"""Entry point of the ``oversmooth`` command."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from oversmooth import __version__
from oversmooth.cli import _common

app = typer.Typer(
    name="oversmooth",
    help=(
        "Diagnose oversmoothing and the curse of depth in deep graph neural networks "
        "and graph transformers."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"oversmooth {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks instead of one-line errors.")] = False,
    version: Annotated[
        Optional[bool],
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = None,
) -> None:
    """oversmooth: per-layer energies, similarities, pruning and fitted laws for deep GNNs."""
    _common.DEBUG["on"] = debug


def _register() -> None:
    from oversmooth.cli import commands  # noqa: F401  (each module adds its command)

    commands.register(app)


_register()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
