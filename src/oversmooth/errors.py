"""Exceptions the command line reports as one line, in a module that imports nothing heavy
(the command line names them before any command has imported torch)."""

from __future__ import annotations

__all__ = ["DatasetUnavailableError"]


class DatasetUnavailableError(RuntimeError):
    """A benchmark's files are absent and could not be downloaded."""

    clean_message = True  # the CLI prints the message alone, without a type name
