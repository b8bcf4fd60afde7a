"""What every command shares: error handling, exit codes, output helpers.

Exit codes: 0 success; 2 user error, exactly the validation errors the library
raises for bad input (``ValueError`` and its subclasses such as
``ResourceError`` and ``CheckpointError``, ``FileNotFoundError``,
``FileExistsError``/``FolderBusyError``, ``PermissionError``, a folder given
where a file is expected, ``DatasetUnavailableError``); 1 anything else (a
runtime failure or an internal bug: ``KeyError``, ``TypeError``, ...), whose
line ends with a hint to rerun with ``--debug``.  Errors are one line on
stderr; ``--debug`` (a global option) shows the traceback too: a user error
still exits 2, anything else is re-raised.
"""

from __future__ import annotations

import errno
import functools
import re
import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from collections.abc import Callable, Iterable

import typer

from oversmooth.outputs import STOPS, shown_path, stop_signal

if TYPE_CHECKING:
    from oversmooth.analysis import AnalysisResult
    from oversmooth.run_configs import AnalysisConfig

F = TypeVar("F", bound=Callable)

DEBUG = {"on": False}
# set by a command whose last output is written: the process may then end at once
# (cli.main.main), without the interpreter's teardown of everything it imported
FINISHED = {"exit_now": False, "stop_said": False}
#: the command line the CLI was given (set by its entry point; read by swallowed_option)
COMMAND_ARGS: list[str] = []


def load_run_modules() -> None:
    """Import what an analysis run uses (torch, pandas, the analysis, the report and the
    matplotlib that draws its figures) with the garbage collector paused, then move every
    object the imports made into the collector's permanent generation (idempotent: a second
    call only re-freezes).

    Imports make almost no garbage, but hundreds of thousands of long-lived objects, over
    which the collector's automatic passes are pure cost (measured on 2 cores: 0.3 s of the
    2.2 s the imports take).  Once frozen, the collections the run itself triggers (building
    depth-256 models makes hundreds of thousands of objects) do not traverse them again
    either (9 full collections cost 0.4-0.6 s of `oversmooth analyze`)."""
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        import matplotlib.figure  # noqa: F401
        import pandas  # noqa: F401
        import torch  # noqa: F401

        import oversmooth.analysis  # noqa: F401
        import oversmooth.outputs  # noqa: F401
        import oversmooth.report.render  # noqa: F401
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _user_errors() -> tuple[type[BaseException], ...]:
    from oversmooth.errors import DatasetUnavailableError

    return (
        ValueError,
        FileNotFoundError,
        FileExistsError,
        PermissionError,
        IsADirectoryError,
        NotADirectoryError,
        DatasetUnavailableError,
    )


USER_ERRORS = _user_errors()


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the command's main thread like Ctrl-C (so every cleanup runs: the
    half-written folder removed, the claim on --out released); the exit code is 143."""


def raise_interrupted(signum: int, frame: object) -> None:
    """The CLI's Ctrl-C handler: ``KeyboardInterrupt``, recorded
    (:func:`oversmooth.outputs.stop_signal`) so that one swallowed on its way up still stops
    the run before its output replaces anything."""
    stop_signal(KeyboardInterrupt)


def raise_terminated(signum: int, frame: object) -> None:
    """The CLI's SIGTERM handler (:class:`Terminated`, recorded like Ctrl-C)."""
    stop_signal(Terminated)


def stopped(exc: KeyboardInterrupt) -> typer.Exit:
    """One line for Ctrl-C (exit 130) or SIGTERM (exit 143): 128 + the signal's number."""
    terminated = isinstance(exc, Terminated)
    said = "terminated" if terminated else "interrupted"
    written = getattr(exc, "written", None)  # the stop came once the output was in place
    if written:
        said += f" after the output was complete: {written} holds it"
    elif getattr(exc, "resume", None):  # what the command keeps, and how to go on
        said += f"; {exc.resume}"
    typer.echo(said, err=True)
    FINISHED["stop_said"] = True
    return typer.Exit(143 if terminated else 130)


_FIELD = re.compile(r"^([a-z][a-z0-9_]*): ")
# a check's own name for a field's values, and run arguments that are no config field
_FIELD_FLAGS = {"layers": "--prune-layers", "checkpoint_every": "--checkpoint-every"}


def as_flag(text: str) -> str:
    """An error that starts with a config field's name (``block_dropout: ...``, as the
    configs, usable from Python, say it) names the command-line option instead."""
    found = _FIELD.match(text)
    if found is None:
        return text
    name = found.group(1)
    flag = _FIELD_FLAGS.get(name) or _flag_of(name)
    return text if flag is None else _command_flag(flag) + text[len(name) :]


def _command_flag(flag: str) -> str:
    """``flag`` as the running command spells it: compare and sweep take grid axes,
    ``--convs`` and ``--datasets``, where the error said ``--conv`` (an option they do not
    have: an audit)."""
    command = next((a for a in map(str, COMMAND_ARGS) if not a.startswith("-")), None)
    if command in GRID_COMMANDS and flag in GRID_FLAGS:
        return f"{flag}s"
    if command == "datasets" and flag == "--dataset":  # it names the graph with --stats
        return "--stats"
    return flag


#: commands whose model, conv, depth and dataset options are grid axes (plural flags)
GRID_COMMANDS = ("compare", "sweep")
GRID_FLAGS = ("--model", "--conv", "--depth", "--dataset")


def _flag_of(name: str) -> str | None:
    """The long flag of the option that sets the field ``name`` (or ``model.name``)."""
    from oversmooth.config import option

    for field in (name, f"model.{name}"):
        try:
            return option(field).flag
        except KeyError:
            continue
    return None


def swallowed_option(ctx: Any) -> str | None:
    """A usage error's plain cause when an option that takes a value was given none and took
    the next option as its value: ``compare --models --out x`` said "Got unexpected extra
    argument(s) (x)", naming the path, and ``analyze --depth --seeds 1`` "unable to parse
    string as an integer", and ``analyze --out --overwrite`` wrote into a folder named
    ``--overwrite``.  Read from :data:`COMMAND_ARGS`; None where no option of the command
    did so."""
    command = getattr(ctx, "command", None)
    if command is None:
        return None
    names: set[str] = set()
    takes_value: set[str] = set()
    for param in command.params:
        opts = [*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())]
        names.update(opts)
        if getattr(param, "param_type_name", "") == "option" and not getattr(
            param, "is_flag", False
        ):
            takes_value.update(getattr(param, "opts", ()))
    names.update(("--help", "-h"))
    args = COMMAND_ARGS
    for option, value in zip(args, args[1:], strict=False):
        if option in takes_value and value in names:
            return (
                f"{option} took {value!r}, the option after it, as its value; "
                f"expected a value after {option}"
            )
    return None


#: Options outside the config table whose value is a comma-separated list.
_OWN_LIST_OPTIONS = ("--figure-format", "--table-format")


def repeated_list_option(ctx: Any) -> str | None:
    """A list option (a comma-separated value: ``--seeds 0,1``) given more than once, where
    click keeps the last: ``--seeds 0 --seeds 1`` ran seed 1 alone and ``--figure-format svg
    --figure-format pdf`` wrote no SVG, unsaid.  Read from :data:`COMMAND_ARGS`; None where
    every list option was given at most once.  A one-value option given twice keeps its last,
    as click does (a shell alias then a value of one's own)."""
    from oversmooth.config import OPTIONS

    command = getattr(ctx, "command", None)
    if command is None:
        return None
    # this command's list options, each spelling to its long flag (a short flag is a list in
    # one command and one value in another: -m is compare's --models and analyze's --model);
    # an old spelling beside the new one is refused by the options themselves (options.py)
    lists = {entry.name for entry in OPTIONS if entry.kind in ("ints", "names", "extra")}
    canonical = {
        flag: opts[0]
        for param in command.params
        for opts in [list(getattr(param, "opts", ()))]
        if opts and (param.name in lists or opts[0] in _OWN_LIST_OPTIONS)
        for flag in opts
    }
    given: dict[str, list[str]] = {}
    args = [str(arg) for arg in COMMAND_ARGS]  # a test runner's Path objects too
    for i, arg in enumerate(args):
        if arg == "--":
            break
        flag, eq, value = arg.partition("=")
        if flag not in canonical:
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        given.setdefault(canonical[flag], []).append(value)
    for flag, values in given.items():
        if len(values) > 1:
            times = "twice" if len(values) == 2 else f"{len(values)} times"
            return (
                f"{flag} was given {times} ({' and '.join(values)}) and only the last would "
                f"count; expected one comma-separated list: {flag} {','.join(values)}"
            )
    return None


def handle_errors(fn: F) -> F:
    """Turn library exceptions into one line on stderr and an exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt as exc:
            raise stopped(exc) from None
        except BrokenPipeError as exc:
            if not _stdout_gone():  # another pipe (a subprocess, a socket): an error
                raise fail(
                    f"BrokenPipeError: {exc} (rerun with --debug for the traceback)", 1
                ) from None
            # the reader went away (`oversmooth metrics | head`): no error line, and stdout
            # pointed at /dev/null so that the interpreter's last flush cannot fail again;
            # 141 as a process killed by SIGPIPE (128 + 13)
            quiet = os.open(os.devnull, os.O_WRONLY)
            os.dup2(quiet, sys.stdout.fileno())
            raise typer.Exit(141) from None
        except USER_ERRORS as exc:
            if DEBUG["on"]:
                traceback.print_exc()
            if STOPS:  # a stop swallowed into another error on its way up: the stop
                raise stopped(STOPS[-1]()) from None
            full = _disk_full(exc)
            if full:
                raise fail(full, 1) from None
            # a path is said as it is: a file named "depth" read as the option --depth
            raise fail(_os_error_text(exc) or as_flag(_first_line(exc)), 2) from None
        except Exception as exc:  # noqa: BLE001 - the CLI boundary
            if STOPS:
                # a Ctrl-C inside an extension's import (matplotlib's, at the first figure)
                # comes up as "ImportError: initialization failed", exit 1 (an audit); with
                # --debug the error that carried it is shown first
                if DEBUG["on"]:
                    traceback.print_exc()
                raise stopped(STOPS[-1]()) from None
            if DEBUG["on"]:
                raise
            full, os_text = _disk_full(exc), _os_error_text(exc)
            if full:
                raise fail(full, 1) from None
            if os_text:  # EIO and the like, of a hidden temporary path too
                said = f"{type(exc).__name__}: {os_text}"
                raise fail(f"{said} (rerun with --debug for the traceback)", 1) from None
            if getattr(exc, "clean_message", False):
                raise fail(str(exc), 1) from None
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            if not text and isinstance(exc, MemoryError):
                text = "out of memory; try a smaller --depth, graph or --hidden"
            said = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
            raise fail(f"{said} (rerun with --debug for the traceback)", 1) from None

    return wrapper  # type: ignore[return-value]


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__


def _os_error_text(exc: BaseException) -> str:
    """An OS error raised as the system words it (``[Errno 1] Operation not permitted:
    '/x/.cells.tmp-8304'``, a hidden temporary path the user never named: an audit) as
    ``PATH: what happened``, the path as the user knows it; "" for any other error."""
    if not isinstance(exc, OSError) or not str(exc).startswith("[Errno"):
        return ""
    if not _a_path(exc.filename):
        return ""  # none, or a file descriptor: the system's words are all there is
    what, first = exc.strerror or "failed", shown_path(exc.filename)
    second = shown_path(exc.filename2) if _a_path(exc.filename2) else first
    return f"{first}: {what}" if second == first else f"{first} -> {second}: {what}"


def _a_path(filename: object) -> bool:
    """Whether an OS error's ``filename`` is a path (not None, empty or a file descriptor)."""
    return isinstance(filename, (str, bytes, os.PathLike)) and bool(filename)


def _disk_full(exc: BaseException) -> str:
    """The line for a write that found the disk full ("" for any other error):
    "OSError: [Errno 28] No space left on device" named no file (an audit)."""
    if not isinstance(exc, OSError) or exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return ""
    if getattr(exc, "clean_message", False):  # said already, as its writer knows it
        return ""
    where = f" writing {shown_path(exc.filename)}" if _a_path(exc.filename) else ""
    return (
        f"no space left on the device{where}; free some space and rerun (a result folder is "
        "swapped in only once whole: none was half-written)"
    )


def _stdout_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it (``poll`` reports an error
    on it); True where that cannot be asked (no ``poll``, no file descriptor)."""
    import select

    if not hasattr(select, "poll"):
        return True
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))


def is_tty() -> bool:
    return sys.stderr.isatty()


def stage_lines(command: str, enabled: bool) -> Callable[[int, int, str], None] | None:
    """A progress callback that prints ``command: [k/N] message`` on stderr as each of a long
    run's N stages starts (no bar: a bar's refresh thread would disturb what the bench times),
    or None when disabled or stderr is not a terminal."""
    if not enabled or not is_tty():
        return None

    def say(done: int, total: int, message: str) -> None:
        typer.echo(f"{command}: [{done + 1}/{total}] {message}", err=True)

    return say


class progress_bar:
    """A rich progress bar on stderr with an ETA, or nothing when disabled or stderr is not a
    terminal.

    Used as ``with progress_bar(enabled) as update: update(done, total, what)``: the one
    progress signature of the library (:data:`oversmooth.analysis.Progress`), in layers,
    runs x layers, cells or epochs.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and is_tty()
        self.quiet = not enabled  # --quiet: torch_geometric's download lines too
        self._progress = None
        self._messages = None

    def __enter__(self):
        if self.quiet:
            from oversmooth.data import pyg_messages

            self._messages = pyg_messages(False)
            self._messages.__enter__()
        if not self.enabled:
            return None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._progress.__enter__()
        task = self._progress.add_task("starting", total=None)

        def update(done: int, total: int, what: str) -> None:
            self._progress.update(task, description=what, completed=done, total=total)

        return update

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
        if self._messages is not None:
            self._messages.__exit__(*exc)


def output_formats(figure_format: str | None, table_format: str | None) -> dict:
    """``--figure-format`` and ``--table-format`` checked (Parquet without pyarrow refused
    here, before any work) as the ``figure_formats`` / ``table_formats`` keywords of the
    writers."""
    from oversmooth.report.formats import figure_formats, table_formats

    return {
        "figure_formats": figure_formats(figure_format),
        "table_formats": table_formats(table_format),
    }


def analyze_and_report(
    config: AnalysisConfig,
    command: str,
    out: str | None,
    overwrite: bool,
    as_json: bool,
    quiet: bool,
    announce: bool = False,
    formats: dict | None = None,
) -> None:
    """Run one analysis (analyze, prune), write its report and print its summary; ``formats``:
    :func:`output_formats` (default PNG and CSV only)."""
    load_run_modules()  # done already by analyze and prune: then a no-op
    from oversmooth.analysis import run_analysis
    from oversmooth.outputs import claim_folder
    from oversmooth.report.render import default_out, write_analysis

    if announce and not (quiet or as_json):
        typer.echo(_announcement(config), err=True)
    # the claim is held from this check to the final rename: a second run into the same
    # folder fails here at once, before any work
    target = out if out is not None else default_out(command, config.model.name)
    reads = (config.checkpoint, config.dataset, config.data_root)  # kept: refused if in target
    with claim_folder(target, overwrite, reads=reads, writer=command) as target:
        with progress_bar(not quiet) as update:
            result = run_analysis(config, progress=update)
        result.config["command"] = command
        folder = write_analysis(result, target, overwrite=overwrite, **(formats or {}))
    FINISHED["exit_now"] = True  # every file is written: what is left is printing
    if as_json:
        echo_json(_analysis_summary(result, folder))
        return
    typer.echo(_verdict_line(result))
    if result.prune is not None:
        from oversmooth.report.render import accuracy_in_percent

        shown = accuracy_in_percent(result.prune)  # the reports' convention (prune.csv: fractions)
        seeds = result.config.get("seeds") or [0]
        # one model is pruned: its final energy is not the verdict's mean over the seeds just
        # above it (an audit read the two side by side as a contradiction); a checkpoint's
        # weights are the checkpoint's whatever the seed (a review)
        several = f", not the {len(seeds)} seeds' mean above" if len(seeds) > 1 else ""
        which = (
            "the checkpoint's model"
            if result.config.get("checkpoint")
            else f"the model of seed {seeds[0]} (the run's first{several})"
        )
        typer.echo(f"pruning, {which}:")
        typer.echo(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        from oversmooth.report.prose import pruning_baseline

        baseline = pruning_baseline(result.prune)
        if baseline is not None:
            typer.echo(baseline)
    typer.echo(f"report: {folder / 'report.html'}")


def _verdict_line(result: AnalysisResult) -> str:
    """The verdict in one line, as the report and fits.json say it."""
    from oversmooth.report.prose import analysis_title, verdict_text

    return verdict_text(result.verdict, analysis_title(result.config))


def _analysis_summary(result: AnalysisResult, folder: Path) -> dict:
    """What ``--json`` prints for an analysis."""
    mean = result.fits["mean_over_seeds"]
    payload = {
        "out": str(folder),
        "verdict": _verdict_line(result),
        "classification": result.label,
        "curse_of_depth": mean["curse_of_depth"],
        "final_energy": mean["final_energy"],
        "float_floor": mean["float_floor"],
        "final_at_floor": mean["final_at_floor"],
        "float64_final_energy": mean["float64_final_energy"],
        "dtype": result.config["model"]["dtype"],
        "floor_method": result.config["floor_method"],
        "timings": result.timings,
    }
    if result.prune is not None:
        payload["prune"] = result.prune.to_dict(orient="records")
    return payload


# measured (torch 2.13, float64, five seeds, the twin only where needed): a bare
# `oversmooth analyze` took 11.0 s wall on 2 CPU cores of an AMD EPYC (reports/benchmarks, end
# to end; checked against it by tests/test_reports_fresh.py, as analyze --help's "about 9 s"
# is)
_BARE_SECONDS = 10


def _announcement(config: AnalysisConfig) -> str:
    """One line for a bare run: what it computes and roughly how long it takes."""
    from oversmooth.registry import display_name

    seeds, model = ",".join(map(str, config.seeds)), config.model
    return (
        f"analyze: {display_name(model.name)} {model.conv.upper()}, "
        f"{model.depth} layers on {config.dataset}, "
        f"seed{'s' if len(config.seeds) > 1 else ''} {seeds}, {model.dtype} "
        f"(about {_BARE_SECONDS} s on 2 idle CPU cores); --help for options"
    )


def echo_listing(rows: Iterable[tuple[str, str]], indent: int = 0, name_width: int = 0) -> None:
    """Print ``name  description`` rows, each description wrapped to the terminal's width
    (``COLUMNS``, else the terminal's, at most 100 and at least 60) under itself: ``models`` and
    ``datasets`` printed lines of up to 137 characters in an 80-column terminal (an audit)."""
    import shutil
    import textwrap

    rows = list(rows)
    width = name_width or max((len(name) for name, _ in rows), default=0)
    columns = min(max(shutil.get_terminal_size((80, 24)).columns, 60), 100)
    hang = " " * (indent + width + 2)
    for name, text in rows:
        first = f"{' ' * indent}{name:<{width}}  "
        typer.echo(
            textwrap.fill(
                text, columns, initial_indent=first, subsequent_indent=hang, break_on_hyphens=False
            )
        )


def echo_json(obj: object) -> None:
    """Print ``obj`` as strict JSON (NaN/Inf as null) on stdout."""
    from oversmooth.report.render import to_json

    typer.echo(to_json(obj))
