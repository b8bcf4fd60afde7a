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

import functools
import sys
import traceback
from typing import TypeVar
from collections.abc import Callable, Iterable

import typer

F = TypeVar("F", bound=Callable)

DEBUG = {"on": False}


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


def handle_errors(fn: F) -> F:
    """Turn library exceptions into one line on stderr and an exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None
        except USER_ERRORS as exc:
            if DEBUG["on"]:
                traceback.print_exc()
            text = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise fail(text, 2) from None
        except Exception as exc:  # noqa: BLE001 - the CLI boundary
            if DEBUG["on"]:
                raise
            if getattr(exc, "clean_message", False):
                raise fail(str(exc), 1) from None
            text = str(exc).splitlines()[0] if str(exc) else ""
            raise fail(
                f"{type(exc).__name__}: {text} (rerun with --debug for the traceback)", 1
            ) from None

    return wrapper  # type: ignore[return-value]


def is_tty() -> bool:
    return sys.stderr.isatty()


def parse_ints(option: str, text: str | None, *, minimum: int = 0) -> tuple[int, ...]:
    """``"2,32,64"`` -> ``(2, 32, 64)`` with a clear error naming the option."""
    if text is None:
        return ()
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise ValueError(
            f"{option}: expected comma-separated integers like 2,32,64, received {text!r}"
        ) from None
    if not values:
        raise ValueError(f"{option}: expected at least one integer, received {text!r}")
    bad = [v for v in values if v < minimum]
    if bad:
        raise ValueError(f"{option}: expected integers >= {minimum}, received {bad[0]}")
    return values


def parse_names(option: str, text: str, valid: Iterable[str] | None = None) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(p.strip() for p in str(text).split(",") if p.strip()))
    if not names:
        raise ValueError(f"{option}: expected comma-separated names, received {text!r}")
    if valid is not None:
        valid = list(valid)
        for name in names:
            if name not in valid:
                raise ValueError(
                    f"{option}: unknown name {name!r}; expected any of {', '.join(valid)}"
                )
    return names


class progress_bar:
    """A rich progress bar on stderr with an ETA, or nothing when disabled or stderr is not a
    terminal.

    Used as ``with progress_bar(enabled) as update: update(done, total, what)``: the one
    progress signature of the library (:data:`oversmooth.analysis.Progress`), in layers,
    runs x layers, cells or epochs.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and is_tty()
        self._progress = None

    def __enter__(self):
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


def deprecated_alias(old: str, new: str, old_value, new_value):
    """The value of an option given under its old, hidden spelling (with a ``note:`` line), or
    under the new one; both given is an error."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise ValueError(f"{old}: the old spelling of {new}; give only {new}")
    typer.echo(f"note: {old} is deprecated; use {new}", err=True)
    return old_value


def analyze_and_report(
    fields: dict,
    *,
    seeds: tuple[int, ...] | None,
    checkpoint,
    out,
    overwrite: bool,
    as_json: bool,
    quiet: bool,
    command: str,
    announce: bool = False,
) -> None:
    """Run one analysis from the options the user gave and write its report (analyze, prune).

    ``fields`` holds only given options (AnalysisConfig field names, plain values): the
    config's own defaults apply to the rest, or the checkpoint's values with ``checkpoint``.
    """
    from oversmooth.analysis import AnalysisConfig, run_analysis
    from oversmooth.outputs import claim_folder
    from oversmooth.report.render import default_out, write_analysis

    if seeds is not None:
        fields = {**fields, "seeds": seeds}
    if checkpoint is not None:
        config = AnalysisConfig.from_checkpoint(str(checkpoint), **fields)
    else:
        config = AnalysisConfig(**fields)
    if announce and not (quiet or as_json):
        typer.echo(_announcement(config), err=True)
    # the claim is held from this check to the final rename: a second run into the same
    # folder fails here at once, before any work
    target = out if out is not None else default_out(command, config.model)
    with claim_folder(target, overwrite) as target:
        with progress_bar(not quiet) as update:
            result = run_analysis(config, progress=update)
        result.config["command"] = command
        folder = write_analysis(result, target, overwrite=overwrite)
    mean = result.fits["mean_over_seeds"]
    if as_json:
        payload = {
            "out": str(folder),
            "verdict": result.verdict,
            "classification": result.label,
            "curse_of_depth": mean["curse_of_depth"],
            "final_energy": mean["final_energy"],
            "float_floor": mean["float_floor"],
            "final_at_floor": mean["final_at_floor"],
            "float64_final_energy": mean["float64_final_energy"],
            "dtype": result.config["dtype"],
            "floor_method": result.config["floor_method"],
            "timings": result.timings,
        }
        if result.prune is not None:
            payload["prune"] = result.prune.to_dict(orient="records")
        echo_json(payload)
        return
    typer.echo(result.verdict)
    if result.prune is not None:
        typer.echo(result.prune.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    typer.echo(f"report: {folder / 'report.html'}")


# measured (torch 2.13, float64, five seeds, the twin only where needed): a bare
# `oversmooth analyze` took 13.4 s wall on 2 CPU cores (reports/benchmarks)
_BARE_SECONDS = 14


def _announcement(config) -> str:
    """One line for a bare run: what it computes and roughly how long it takes."""
    from oversmooth.registry import display_name

    seeds = ",".join(map(str, config.seeds))
    return (
        f"analyze: {display_name(config.model)} {config.conv.upper()}, "
        f"{config.depth} layers on {config.dataset}, "
        f"seed{'s' if len(config.seeds) > 1 else ''} {seeds}, {config.dtype} "
        f"(about {_BARE_SECONDS} s on 2 idle CPU cores); --help for options"
    )


def echo_json(obj) -> None:
    """Print ``obj`` as strict JSON (NaN/Inf as null) on stdout."""
    from oversmooth.report.render import to_json

    typer.echo(to_json(obj))
