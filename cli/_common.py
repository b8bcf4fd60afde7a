"""What every command shares: error handling, exit codes, output helpers.

Exit codes: 0 success, 2 user error (bad option, unknown name, missing file),
1 runtime failure.  Errors are one line on stderr; ``--debug`` (a global
option) re-raises them with the traceback.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable, Iterable, TypeVar

import typer

F = TypeVar("F", bound=Callable)

DEBUG = {"on": False}

USER_ERRORS = (ValueError, TypeError, FileNotFoundError, KeyError, FileExistsError, PermissionError)


def fail(message: str, code: int = 2) -> "typer.Exit":
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
            raise typer.Exit(130)
        except USER_ERRORS as exc:
            if DEBUG["on"]:
                raise
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            raise fail(str(message).splitlines()[0] if str(message) else type(exc).__name__, 2)
        except Exception as exc:  # noqa: BLE001 - the CLI boundary
            if DEBUG["on"]:
                raise
            if getattr(exc, "clean_message", False):
                raise fail(str(exc), 1)
            text = str(exc).splitlines()[0] if str(exc) else ""
            raise fail(f"{type(exc).__name__}: {text} (rerun with --debug for the traceback)", 1)

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
        raise ValueError(f"{option}: expected comma-separated integers like 2,32,64, received {text!r}") from None
    if not values:
        raise ValueError(f"{option}: expected at least one integer, received {text!r}")
    bad = [v for v in values if v < minimum]
    if bad:
        raise ValueError(f"{option}: expected integers >= {minimum}, received {bad[0]}")
    return values


def parse_names(option: str, text: str, valid: "Iterable[str] | None" = None) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(p.strip() for p in str(text).split(",") if p.strip()))
    if not names:
        raise ValueError(f"{option}: expected comma-separated names, received {text!r}")
    if valid is not None:
        valid = list(valid)
        for name in names:
            if name not in valid:
                raise ValueError(f"{option}: unknown name {name!r}; expected any of {', '.join(valid)}")
    return names


class progress_bar:
    """A rich progress bar on stderr, or nothing when disabled or stderr is not a terminal.

    Used as ``with progress_bar(enabled) as update: update(description, done, total)``.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and is_tty()
        self._progress = None

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TimeRemainingColumn(), console=Console(stderr=True), transient=True,
        )
        self._progress.__enter__()
        task = self._progress.add_task("starting", total=None)

        def update(description: str, done: int, total: int) -> None:
            self._progress.update(task, description=description, completed=done, total=total)

        return update

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)


def echo_json(obj) -> None:
    """Print ``obj`` as strict JSON (NaN/Inf as null) on stdout."""
    from oversmooth.report.render import to_json

    typer.echo(to_json(obj))
