"""Entry point of the ``oversmooth`` command."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import os
import signal
import sys
import warnings

import typer
from typer.core import TyperGroup

from oversmooth._version import __version__
from oversmooth.cli import _common, commands

if TYPE_CHECKING:
    import click


class OneLineErrors(TyperGroup):
    """Usage errors (bad option values, unknown commands) as one line on stderr, exit code 2.

    Click's exceptions are recognised by their interface (``format_message``,
    ``exit_code``), so this works whether typer vendors click or depends on it.
    """

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command's first sentence, wrapped rather than cut with "..." to fit the width."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=sys.maxsize)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.Abort as exc:
            # click turns a Ctrl-C outside a command body (while parsing) into Abort
            if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
                interrupted()
            typer.echo("aborted", err=True)
            sys.exit(1)
        except Exception as exc:  # noqa: BLE001 - click's usage errors, by interface
            ctx = getattr(exc, "ctx", None)
            if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
                typer.echo(ctx.get_help())
                sys.exit(0)
            if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
                raise
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            typer.echo(f"error: {exc.format_message()}{hint}", err=True)
            sys.exit(exc.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


def interrupted() -> NoReturn:
    """Ctrl-C, whenever it comes: one line on stderr and exit code 130 (128 + SIGINT); a
    second Ctrl-C while this runs is ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    typer.echo("interrupted", err=True)
    sys.exit(130)


def _note(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings (e.g. features converted to float32) as one ``note:`` line on stderr."""
    text = str(message).splitlines()[0] if str(message) else category.__name__
    typer.echo(f"note: {text}", err=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"oversmooth {__version__}")
        raise typer.Exit()


def root(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show full tracebacks instead of one-line errors.")
    ] = False,
    version: Annotated[
        bool | None,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = None,
) -> None:
    """oversmooth: per-layer energies, similarities, pruning and fitted laws for deep GNNs."""
    _common.DEBUG["on"] = debug
    if not debug:
        warnings.showwarning = _note


def _new_app() -> typer.Typer:
    """The command group with its root options and no command yet."""
    group = typer.Typer(
        cls=OneLineErrors,
        name="oversmooth",
        help=(
            "Diagnose oversmoothing and the curse of depth in deep graph neural networks "
            "and graph transformers."
        ),
        no_args_is_help=True,
        add_completion=True,  # --install-completion, --show-completion
        # Plain click help: it wraps every line to the terminal, where rich's tables cut option
        # help with "…" at 80 columns and read "[...]" in help texts as markup and drop it.
        rich_markup_mode=None,
        context_settings={"max_content_width": 100},
        pretty_exceptions_enable=False,
    )
    group.callback()(root)
    return group


def _command_named(args: list[str]) -> str | None:
    """The command the arguments name: the first that is not a root option (none of them
    takes a value), or None."""
    for arg in args:
        if not arg.startswith("-"):
            return arg if arg in commands.COMMANDS else None
    return None


def __getattr__(name: str) -> typer.Typer:
    """``app``: the group with every command loaded (for tests and ``typer`` tooling)."""
    if name == "app":
        group = _new_app()
        commands.register(group)
        globals()["app"] = group
        return group
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """The ``oversmooth`` command: loads the command it runs and lists the others by name, so
    that ``oversmooth --help`` imports no torch.  Shell completion loads every command."""
    try:  # loading a command imports torch: a Ctrl-C then is an interrupt, not a traceback
        # Ctrl-C raises KeyboardInterrupt from here on (cleanups run), also when this process
        # was started with SIGINT ignored (`oversmooth sweep ... &` from a script): a sweep
        # then ran to the end and exited 0 after `kill -INT`
        signal.signal(signal.SIGINT, signal.default_int_handler)
        group = _new_app()
        if "_OVERSMOOTH_COMPLETE" in os.environ:  # completing a command's options needs them all
            commands.register(group)
        else:
            commands.register(group, only=_command_named(sys.argv[1:]) or "")
        group()
    except KeyboardInterrupt:
        interrupted()


if __name__ == "__main__":
    main()
