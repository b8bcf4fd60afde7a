"""Entry point of the ``oversmooth`` command."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import os
import re
import signal
import sys
import textwrap
import warnings

import typer
from typer.core import TyperGroup

from oversmooth.allocator import keep_freed_memory
from oversmooth.outputs import STOPS
from oversmooth.version import __version__
from oversmooth.cli import _common, commands

if TYPE_CHECKING:
    import click


def wrap_whole(
    text: str, width: int, indent: str = "", first: str | None = None, paragraphs: bool = False
) -> str:
    """``text`` wrapped to ``width`` columns at spaces only: a flag (``--prune-layers``), a name
    (``nonlocal-preln``) or a path (``reports/paper-reproduction``) is never split, at its hyphen
    or anywhere else (one longer than a line stands alone on its line), nor a number from its
    unit (``14 s``).  ``first`` replaces
    ``indent`` on the first line; with ``paragraphs``, blank lines separate paragraphs, each
    wrapped on its own and keeping its own first line's indentation."""
    text = _UNIT.sub("\\1\0\\2", text)  # "14 s" stays on one line
    wrapper = textwrap.TextWrapper(
        width,
        break_on_hyphens=False,
        break_long_words=False,
        replace_whitespace=False,
    )
    if not paragraphs:
        wrapper.initial_indent = indent if first is None else first
        wrapper.subsequent_indent = indent
        return wrapper.fill(text).replace("\0", " ")
    out = []
    for block in re.split(r"\n\s*\n", text.expandtabs()):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        extra = " " * (len(lines[0]) - len(lines[0].lstrip()))
        wrapper.initial_indent = (indent if first is None or out else first) + extra
        wrapper.subsequent_indent = indent + extra
        out.append(wrapper.fill(" ".join(line.strip() for line in lines)))
    return "\n\n".join(out).replace("\0", " ")


_UNIT = re.compile(r"(\d) (s|ms|min|MiB|GiB|x|%)(?![\w-])")
_Context = TyperGroup.context_class  # click's, or the copy of click that typer carries


class WholeNamesFormatter(_Context.formatter_class):
    """Click's help layout with lines broken at spaces only (:func:`wrap_whole`): click's own
    wrapping splits ``nonlocal-preln`` or ``--data-root`` at the hyphen, and a user copying a
    flag from a help page must find it whole."""

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        start = f"{'Usage: ' if prefix is None else prefix:>{self.current_indent}}{prog} "
        if not args:
            self.write(start.rstrip() + "\n")
            return
        text_width = self.width - self.current_indent
        if text_width >= len(start) + 20:  # the arguments fit to the right of the prefix
            self.write(wrap_whole(args, text_width, " " * len(start), first=start) + "\n")
            return
        indent = " " * (max(self.current_indent, len(start.split()[0])) + 4)
        self.write(start + "\n" + wrap_whole(args, text_width, indent) + "\n")

    def write_text(self, text: str) -> None:
        indent = " " * self.current_indent
        self.write(wrap_whole(text, self.width, indent, paragraphs=True) + "\n")

    def write_dl(self, rows: Any, col_max: int = 30, col_spacing: int = 2) -> None:
        rows = [tuple(row) + ("",) * (2 - len(row)) for row in rows]
        if any(len(row) != 2 for row in rows):
            raise TypeError("Expected two columns for definition list")
        first_col = min(max((len(r[0]) for r in rows), default=0), col_max) + col_spacing
        hang = " " * (first_col + self.current_indent)
        for term, text in rows:
            self.write(" " * self.current_indent + term)
            if not text:
                self.write("\n")
                continue
            if len(term) <= first_col - col_spacing:
                self.write(" " * (first_col - len(term)))
            else:  # a long term: its help starts on the next line
                self.write("\n" + hang)
            wrapped = wrap_whole(text, max(self.width - first_col - 2, 10), paragraphs=True)
            lines = wrapped.splitlines() or [""]
            self.write(lines[0] + "\n")
            for line in lines[1:]:
                self.write((hang + line if line else "") + "\n")


class HelpContext(_Context):
    """Every command's context: its help is laid out by :class:`WholeNamesFormatter`."""

    formatter_class = WholeNamesFormatter

    def invoke(self, callback: Any, /, *args: Any, **kwargs: Any) -> Any:
        """Refuse, before the command runs, an option that took the next option as its value
        where that parses (``--out --overwrite``: a folder named ``--overwrite``; where it
        does not, the usage error says it, :meth:`OneLineErrors.main`), and a list option
        given twice, whose first list click drops (``--seeds 0 --seeds 1``)."""
        for refused in (_common.swallowed_option(self), _common.repeated_list_option(self)):
            if refused is not None:  # worded as the usage-error line says it
                raise _common.fail(f"{refused} (see '{self.command_path} --help')", 2)
        return super().invoke(callback, *args, **kwargs)


class OneLineErrors(TyperGroup):
    """Usage errors (bad option values, unknown commands) as one line on stderr, exit code 2.

    Click's exceptions are recognised by their interface (``format_message``,
    ``exit_code``), so this works whether typer vendors click or depends on it.  Help pages, of
    the group and of every command it hands out, wrap at spaces only (:class:`HelpContext`).
    """

    context_class = HelpContext

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            command.context_class = HelpContext
        return command

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
        _common.COMMAND_ARGS[:] = sys.argv[1:] if args is None else list(args)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.Abort as exc:
            # click turns a Ctrl-C outside a command body (while parsing) into Abort
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, KeyboardInterrupt):
                interrupted(cause)
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
            # typer checks choices through pydantic, whose messages start "Value error, "
            message = exc.format_message().replace(": Value error, ", ": ")
            swallowed = _common.swallowed_option(ctx)
            if swallowed is not None:
                message = swallowed
            typer.echo(f"error: {message}{hint}", err=True)
            sys.exit(exc.exit_code)
        if code == 130 and not _common.FINISHED["stop_said"]:
            # typer turns a Ctrl-C (or SIGTERM, a KeyboardInterrupt too) outside a command body
            # (loading the command, parsing its options) into exit code 130 without a word
            interrupted((STOPS[-1] if STOPS else KeyboardInterrupt)())
        sys.exit(code if isinstance(code, int) else 0)


def interrupted(exc: KeyboardInterrupt | None = None) -> NoReturn:
    """Ctrl-C or SIGTERM, whenever it comes: one line on stderr and exit code 130 (128 +
    SIGINT) or 143 (128 + SIGTERM); a second signal while this runs is ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(_common.stopped(exc or KeyboardInterrupt()).exit_code)


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


def new_app() -> typer.Typer:
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
        group = new_app()
        commands.register(group)
        globals()["app"] = group
        return group
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: OpenMP settings the command makes unless the environment already has them, read when torch
#: loads its OpenMP runtime (GNU libgomp in the Linux wheels), so before any command imports
#: torch.  A thread that finds no work spins up to GOMP_SPINCOUNT times before it sleeps
#: (300,000 by default).  A deep model on a small graph runs thousands of parallel regions of
#: microseconds each; where the cores are shared (another job, a sweep's other worker) the
#: spinning threads take turns from the ones with work.  Measured on 2 cores, a float64
#: forward of the 256-layer Post-LN model on Cora: alone 0.88 s at 3,000 spins against 0.96 s
#: by default (median of 5 interleaved runs, within the noise); beside one busy process 2.1
#: s against 4.5 s, beside two 2.5 s against 5.5 s.  (OMP_WAIT_POLICY=PASSIVE, which never
#: spins, made the forward alone 1.7 times slower.)
OPENMP_DEFAULTS = {"GOMP_SPINCOUNT": "3000"}


def set_openmp_defaults() -> None:
    """Put :data:`OPENMP_DEFAULTS` in the environment where it has no value of its own (none
    when the user chose a wait policy, ``OMP_WAIT_POLICY``); of effect only before torch is
    first imported."""
    if "OMP_WAIT_POLICY" in os.environ:
        return
    for name, value in OPENMP_DEFAULTS.items():
        os.environ.setdefault(name, value)


def main() -> None:
    """The ``oversmooth`` command: loads the command it runs and lists the others by name, so
    that ``oversmooth --help`` imports no torch.  Shell completion loads every command."""
    set_openmp_defaults()
    keep_freed_memory()  # freed temporaries reused without page faults (oversmooth.allocator)
    hook, show = sys.unraisablehook, warnings.showwarning
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:  # loading a command imports torch: a Ctrl-C then is an interrupt, not a traceback
        # Ctrl-C raises KeyboardInterrupt from here on (cleanups run), also when this process
        # was started with SIGINT ignored (`oversmooth sweep ... &` from a script): a sweep
        # then ran to the end and exited 0 after `kill -INT`
        sys.unraisablehook = _quiet_stops
        signal.signal(signal.SIGINT, _common.raise_interrupted)
        # SIGTERM likewise (the default kills at once: no line, the --out claim's lock file
        # left behind), unless the process was started with it ignored
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
            signal.signal(signal.SIGTERM, _common.raise_terminated)
        group = new_app()
        if "_OVERSMOOTH_COMPLETE" in os.environ:  # completing a command's options needs them all
            commands.register(group)
        else:
            commands.register(group, only=_command_named(sys.argv[1:]) or "")
        _common.FINISHED.update(exit_now=False, stop_said=False)
        try:
            group()
        except SystemExit as done:
            if done.code in (0, None) and _common.FINISHED["exit_now"]:
                _exit_now()
            if done.code in (130, 143) and _common.FINISHED["stop_said"]:
                _exit_now(done.code)
            if done.code in (0, None):
                # done and said so: a Ctrl-C in the interpreter's teardown (about 0.8 s after
                # report or sweep printed its line) exited 130 without a word
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            raise
    except KeyboardInterrupt as exc:
        try:
            interrupted(exc)
        except SystemExit as done:  # the process ends here: no teardown (see _exit_now)
            _exit_now(done.code if isinstance(done.code, int) else 130)
    finally:
        # in a process that goes on (main() called from a notebook or a test, and the command
        # not stopped: a stopped one leaves at once, _exit_now), nothing of the command's
        # stays: a later Ctrl-C recorded by its handler made every write of the Python API
        # raise KeyboardInterrupt at once (an audit)
        STOPS.clear()
        sys.unraisablehook, warnings.showwarning = hook, show
        ours = (_common.raise_interrupted, _common.raise_terminated)
        for sig, handler in handlers.items():
            if signal.getsignal(sig) in ours and handler is not None:
                signal.signal(sig, handler)


def _quiet_stops(unraisable: Any) -> None:
    """Python's report of an exception it could not raise (in a finaliser or a weakref
    callback), except for a stop signal the handler recorded: that one stops the run at its
    next step that writes (:func:`oversmooth.outputs.move_into_place`) with the one line
    ``interrupted``, not a traceback beside it."""
    if not (isinstance(unraisable.exc_value, KeyboardInterrupt) and STOPS):
        sys.__unraisablehook__(unraisable)


def _exit_now(code: int = 0) -> NoReturn:
    """End a command whose outputs are all written: flush the streams and leave without
    the interpreter's teardown (freeing every module and object torch, pandas and
    matplotlib made, about a second of CPU on 2 cores, for nothing).  Also how a stopped
    command ends, once its line is said and its cleanups have run: a Ctrl-C inside an
    extension's import (matplotlib's) left a half-initialised module whose teardown aborted
    the interpreter ("Fatal Python error"), and a late Ctrl-C made the process die of SIGINT
    instead of exiting 130 (an audit)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed or broken stream: nothing more to say
        pass
    os._exit(code)


if __name__ == "__main__":
    main()
