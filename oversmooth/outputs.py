"""Output folders that are claimed exclusively and written atomically.

Every command that writes a folder goes through this module:

- :func:`check_out` fails early (before any work) when the folder exists
  without ``overwrite``, is a file, or its parent cannot be written.  It
  creates nothing: missing parents are made by :func:`claim_folder` and
  removed again when the run ends without writing into them.
- :func:`claim_folder` holds an exclusive claim on the folder for the whole
  run: a lock file ``.NAME.lock`` beside it, created with ``O_CREAT | O_EXCL``
  (one atomic step in the file system), holding the owner's PID.  A second run
  that wants the same folder fails at once with a line naming the folder and
  the owner.  A lock left by a process that no longer exists (killed with
  SIGKILL) is taken over.
- :func:`write_json` is the one JSON writer: strict JSON (``NaN``/``Infinity`` become
  ``null``), written atomically.
- :func:`atomic_folder` writes into a hidden temporary sibling
  ``.NAME.tmp-PID`` and renames it into place when the block succeeds, under
  the claim; a failure leaves the old folder (if any) untouched and no
  temporary sibling behind.  Temporary siblings of dead processes are removed
  the next time anything writes beside them.

Claims are re-entrant within one process: a command that claims its folder
early and writes it later through :func:`atomic_folder` holds one lock.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator

import numpy as np

__all__ = [
    "check_out",
    "claim_folder",
    "atomic_folder",
    "atomic_file",
    "atomic_text",
    "json_text",
    "write_json",
    "move_into_place",
    "clean_stale_siblings",
    "FolderBusyError",
]


class FolderBusyError(FileExistsError):
    """Another live process holds the claim on an output folder."""


_HELD: dict[Path, int] = {}  # absolute folder -> re-entrance count, for this process


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _lock_path(out: Path) -> Path:
    return out.parent / f".{out.name}.lock"


def _read_pid(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return -1


def clean_stale_siblings(out: Path) -> list[Path]:
    """Remove ``.NAME.tmp-PID`` / ``.NAME.old-PID`` siblings of ``out`` left by dead processes."""
    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    pattern = re.compile(rf"^\.{re.escape(out.name)}\.(tmp|old)-(\d+)$")
    for entry in parent.iterdir():
        match = pattern.match(entry.name)
        if match and not _pid_alive(int(match.group(2))):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


def check_out(out: str | os.PathLike, overwrite: bool) -> Path:
    """Fail early (before any work) when ``out`` exists without ``overwrite``, is not a
    folder, or cannot be written; returns ``out`` as a :class:`Path`."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out: {out} exists and is not a folder; choose another path")
    if out.exists() and not overwrite:
        raise FileExistsError(
            f"--out: {out} already exists; pass --overwrite to replace it or choose another folder"
        )
    parent = out.parent if str(out.parent) else Path(".")
    # prove the nearest existing ancestor is a writable folder, before any work is done, without
    # creating anything: missing parents are made by claim_folder and removed again if left empty
    ancestor = parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise FileExistsError(
            f"--out: {ancestor} is a file, so {out} cannot be made; choose another path"
        )
    try:
        if ancestor == parent:
            with tempfile.NamedTemporaryFile(dir=parent, prefix=".oversmooth-write-test-"):
                pass
        elif not os.access(ancestor, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "permission denied")
    except OSError as exc:
        raise PermissionError(
            f"--out: cannot write into {ancestor} ({exc.strerror or exc}); choose another folder"
        ) from None
    return out


def _make_parents(out: Path) -> list[Path]:
    """Create the missing parents of ``out``; return them deepest first (for _drop_empty)."""
    missing = []
    parent = out.parent if str(out.parent) else Path(".")
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            pass
        except OSError as exc:
            _drop_empty(missing)
            raise PermissionError(
                f"--out: cannot write into {folder.parent} to create {folder.name} "
                f"({exc.strerror or exc}); choose another folder"
            ) from None
    return missing


def _drop_empty(folders: list[Path]) -> None:
    """Remove the folders this run created that are still empty (deepest first)."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (something was written), or already gone
            break


def _acquire(lock: Path, out: Path) -> None:
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = _read_pid(lock)
            if owner == os.getpid() or not _pid_alive(owner):
                # stale: its owner died without releasing it (or a PID file we wrote ourselves)
                try:
                    lock.unlink()
                except FileNotFoundError:
                    pass
                continue
            raise FolderBusyError(
                f"--out: {out} is being written by another oversmooth run (pid {owner}); "
                "wait for it to finish or choose another folder"
            ) from None
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
                raise PermissionError(
                    f"--out: cannot write into {lock.parent} "
                    f"({exc.strerror}); choose another folder"
                ) from None
            raise
        with os.fdopen(fd, "w") as handle:
            handle.write(f"{os.getpid()}\n")
        return
    raise FolderBusyError(f"--out: could not claim {out} (its lock kept changing); try again")


@contextmanager
def claim_folder(out: str | os.PathLike, overwrite: bool) -> Iterator[Path]:
    """Hold an exclusive claim on ``out`` for the duration of the block.

    Checks ``out`` like :func:`check_out`, then creates the lock atomically;
    raises :class:`FolderBusyError` (a ``FileExistsError``) when a live process
    holds it.  Re-entrant within one process.
    """
    out = check_out(out, overwrite)
    key = out.resolve()
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield out
        finally:
            _HELD[key] -= 1
        return
    lock = _lock_path(out)
    created = _make_parents(out)
    try:
        _acquire(lock, out)
    except BaseException:
        _drop_empty(created)
        raise
    _HELD[key] = 1
    try:
        clean_stale_siblings(out)
        if out.exists() and not overwrite:  # appeared between the check and the claim
            raise FileExistsError(
                f"--out: {out} already exists; pass --overwrite "
                "to replace it or choose another folder"
            )
        yield out
    finally:
        _HELD.pop(key, None)
        try:
            if _read_pid(lock) == os.getpid():
                lock.unlink()
        except FileNotFoundError:
            pass
        _drop_empty(created)  # a failed run leaves no empty parents behind


@contextmanager
def atomic_folder(out: str | os.PathLike, overwrite: bool) -> Iterator[Path]:
    """Yield a temporary folder that becomes ``out`` only when the block succeeds.

    Runs under :func:`claim_folder` (taken here unless this process already
    holds it), so two runs can never replace each other's output: the second
    one fails with :class:`FolderBusyError` naming the folder.
    """
    with claim_folder(out, overwrite) as out:
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        try:
            yield tmp
            if out.exists() and not overwrite:
                raise FileExistsError(
                    f"--out: {out} appeared while this run was writing; "
                    "pass --overwrite to replace it or choose another folder"
                )
            move_into_place(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def move_into_place(tmp: Path, out: Path) -> None:
    """Rename the finished folder ``tmp`` to ``out``; an existing ``out`` is first renamed
    aside (``.NAME.old-PID``) and removed after, so ``out`` is never half-written."""
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)


def atomic_file(path: str | os.PathLike, write: Callable[[Path], object]) -> None:
    """``write(tmp)`` into a hidden sibling ``.NAME.tmp-PID``, then rename it over ``path``:
    ``path`` is written whole or not at all (the temporary file never outlives a failure)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (see :func:`atomic_file`)."""
    atomic_file(path, lambda tmp: tmp.write_text(text))


def _jsonable(value: Any) -> Any:
    """``value`` with non-finite floats as ``None``, numpy values as Python ones and tuples
    and sets as lists (anything else JSON cannot hold is left to ``default=str``)."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_text(obj: Any, *, indent: int | None = 2, sort_keys: bool = False) -> str:
    """Strict JSON for ``obj``: ``NaN`` and ``+-Infinity`` (not JSON) are written as ``null``,
    numpy scalars and arrays as numbers and lists, other unknown objects as their ``str``.
    A reader maps ``null`` back to NaN where a number is expected."""
    return json.dumps(
        _jsonable(obj), indent=indent, sort_keys=sort_keys, default=str, allow_nan=False
    )


def write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 2) -> None:
    """Write ``obj`` to ``path`` as strict JSON (:func:`json_text`) plus a newline, whole or
    not at all (:func:`atomic_text`): the one way the package writes a JSON file."""
    atomic_text(path, json_text(obj, indent=indent) + "\n")
