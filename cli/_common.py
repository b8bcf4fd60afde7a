"""What every command shares: error handling, exit codes, output helpers.

Exit codes: 0 success, 2 user error (bad option, unknown name, missing file),
1 runtime failure.  Errors are one line on stderr; ``--debug`` (a global
option) re-raises them with the traceback.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable, TypeVar

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
