"""Output folders that are ours, claimed exclusively and written atomically.

Every command that writes a folder goes through this module:

- :func:`check_out_name` refuses, before anything else, an ``--out`` that is empty, the
  current folder or one of its parents, a dangling symbolic link, or a name the file
  system cannot hold (a component too long for it and its hidden siblings, a path too
  long, not UTF-8, control characters).
- :func:`check_out` fails early (before any work) when the folder exists
  without ``overwrite``, is a file, or its parent cannot be written, and refuses to
  replace a folder that oversmooth did not write (see *ours* below).  It creates
  nothing: missing parents are made by :func:`claim_folder` and removed again when the
  run ends without writing into them.
- :func:`claim_folder` holds an exclusive claim on the folder for the whole
  run: an OS-level lock (``flock``) on a file ``.NAME.lock`` beside it, which
  also holds the owner's PID for the message of a second run.  The kernel
  releases the lock when its owner exits, however it dies, so there is no
  "stale lock" to guess at: a lock file nobody holds is simply taken.  The
  holder removes the file on release; an acquirer that finds the path no
  longer names the file it locked tries again, so at most one process holds a
  folder whatever the timing.
- :func:`read_table` is the one reader of a per-layer table written to disk (``metrics.csv``,
  a sweep cell's rows): it upgrades the column names of folders written by older versions
  (:func:`oversmooth.registry.upgrade_columns`).
- :func:`write_json` is the one JSON writer: strict JSON (``NaN``/``Infinity`` become
  ``null``), written atomically.
- :func:`atomic_folder` writes into a hidden temporary sibling
  ``.NAME.tmp-PID`` and renames it into place when the block succeeds, under
  the claim; a failure leaves the old folder (if any) untouched and no
  temporary sibling behind.  Temporary siblings of dead processes are removed
  the next time anything writes beside them.

*Ours*: every folder oversmooth writes holds a marker file ``.oversmooth.json``
(:data:`MARKER`: kind, version, the command line, the time).  ``overwrite``
replaces only a folder with that marker, or an empty one; a folder written by an
earlier version (no marker) counts as ours when its ``config.json`` /
``spec.json`` / ``results.json`` says which command wrote it and every other
entry is a file or folder kind oversmooth writes (:func:`folder_kind`).  Anything
else is refused, naming what is in it; so is a folder of ours that holds anything of
another kind (a user's ``notes.txt``), which replacing it would delete.

Claims are re-entrant within one process: a command that claims its folder
early and writes it later through :func:`atomic_folder` holds one lock.
"""

from __future__ import annotations

import errno
import glob
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from collections.abc import Callable, Iterable, Iterator

import numpy as np

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "MARKER",
    "check_out",
    "check_out_name",
    "check_path_text",
    "claim_folder",
    "atomic_folder",
    "atomic_file",
    "atomic_text",
    "json_text",
    "write_json",
    "write_marker",
    "folder_kind",
    "file_stem",
    "move_into_place",
    "rebuilt",
    "stop_signal",
    "CSV_FLOAT",
    "clean_stale_siblings",
    "remove_unheld_lock",
    "working_inside",
    "FolderBusyError",
    "read_table",
]

MARKER = ".oversmooth.json"


class FolderBusyError(FileExistsError):
    """Another live process holds the claim on an output folder."""


_HELD: dict[Path, list[int]] = {}  # absolute folder -> [re-entrance count, lock fd]

#: Folders another process holds that this one writes inside on its behalf (a sweep's worker,
#: inside the sweep's folder: :func:`working_inside`); every other held ancestor refuses an
#: ``--out`` (:func:`_check_not_inside_busy`).
_INSIDE: set[Path] = set()

#: The stop signals the command's handlers raised (their exception classes), oldest first;
#: emptied when ``oversmooth.cli.main.main`` returns in a process that goes on (a stopped
#: command's process ends at once).  Python swallows an
#: exception raised where it cannot propagate (a weakref callback, a ``__del__``: matplotlib
#: runs some while drawing, and a Ctrl-C there was printed as "Exception ignored" and the run
#: went on, replaced the old folder and exited 0).  :func:`move_into_place` reads it first.
STOPS: list[type[BaseException]] = []


def stop_signal(kind: type[BaseException]) -> NoReturn:
    """Record the stop ``kind`` (``KeyboardInterrupt`` or a subclass) and raise it: what a
    signal handler of the command calls, so that a stop swallowed on its way up still stops
    the run before it replaces anything."""
    STOPS.append(kind)
    raise kind


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


#: A run's hidden copy beside what it writes: ``.NAME.tmp-PID`` (being written) or
#: ``.NAME.old-PID`` (set aside while replaced); groups: NAME, tmp or old, PID.
HIDDEN_COPY = re.compile(r"^\.(.+)\.(tmp|old)-(\d+)$")


#: The write test's file (:func:`probe_writable`): ``.oversmooth-write-test-PID``.
_WRITE_TEST = re.compile(r"^\.oversmooth-write-test-(\d+)$")


def shown_path(path: str | bytes | os.PathLike) -> Path:
    """``path`` as the user knows it: a component that is a run's hidden copy
    (:data:`HIDDEN_COPY`, ``.NAME.tmp-PID``) named as what it becomes (``NAME``)."""
    parts = Path(os.fsdecode(path)).parts
    return Path(*(m.group(1) if (m := HIDDEN_COPY.match(p)) else p for p in parts))


def clean_stale_siblings(out: Path) -> list[Path]:
    """Remove ``.NAME.tmp-PID`` / ``.NAME.old-PID`` siblings of ``out`` left by dead processes
    (and the write test's ``.oversmooth-write-test-PID``, :func:`probe_writable`); call it
    holding ``out``'s lock.

    Where ``out`` itself is missing and a dead process's ``.NAME.old-PID`` is there, that
    process was killed (SIGKILL, the out-of-memory killer, a power cut) between the two renames
    of :func:`move_into_place`, with ``out``'s previous contents set aside: they are put back
    (with a warning), not removed.  They were removed, and the previous results lost without a
    word, by the next run into ``out`` (an audit)."""
    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    stale: list[Path] = []
    set_aside: dict[Path, int] = {}  # .NAME.old-PID folders -> PID
    for entry in parent.iterdir():
        match = HIDDEN_COPY.match(entry.name)
        if match is not None and match.group(1) == out.name:
            kind, pid = match.group(2), int(match.group(3))
        elif (test := _WRITE_TEST.match(entry.name)) is not None:
            kind, pid = "test", int(test.group(1))
        else:
            continue
        if kind == "old" and entry.is_dir() and not entry.is_symlink():
            # whatever its PID says (PIDs are reused after a restart): under out's lock no run
            # is between its two renames, so a copy set aside with no out is a killed run's
            set_aside[entry] = pid
        elif not _pid_alive(pid):
            stale.append(entry)
    if set_aside and not os.path.lexists(out):
        kept = max(set_aside, key=lambda e: e.stat().st_mtime)
        kept.rename(out)
        del set_aside[kept]
        warnings.warn(
            f"{out}: put back from {kept.name}, where a run killed while replacing it had set "
            "its previous contents aside",
            stacklevel=2,
        )
    if set_aside and not out.is_dir():  # never removed while out is no folder to keep
        warnings.warn(
            f"{out}: is not a folder; left {', '.join(e.name for e in set_aside)} beside it, "
            "the previous contents of a folder of that name a killed run had set aside",
            stacklevel=2,
        )
    else:  # out replaced, then the run killed before it removed the old copy
        stale.extend(e for e, pid in set_aside.items() if not _pid_alive(pid))
    for entry in stale:
        remove_entry(entry)
        removed.append(entry)
    return removed


def remove_entry(entry: Path) -> None:
    """Remove ``entry``: a folder with what it holds, a file or a symbolic link itself."""
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        entry.unlink(missing_ok=True)


def put_back(out: Path, unwritable: str | None = None) -> bool:
    """For a command that reads ``out`` rather than claiming it (``oversmooth report``): where
    ``out`` is missing and a killed run set it aside (``.NAME.old-PID``), put it back under
    ``out``'s lock (:func:`clean_stale_siblings`).  Whether there was one to put back."""
    if os.path.lexists(out) or not any(out.parent.glob(f".{glob.escape(out.name)}.old-*")):
        return False
    with folder_lock(out, unwritable, in_place=True, rebuild=True):
        clean_stale_siblings(out)
    return True


# ----------------------------------------------------------------------------- the --out name

_SIBLING_ROOM = 24  # ".NAME.tmp-PID" / ".NAME.lock" / ".NAME.old-PID" must fit too
_TRY = "choose another --out, e.g. reports/run-1"


def _name_max(path: Path) -> int:
    ancestor = Path(os.path.abspath(path)).parent
    while not os.path.isdir(ancestor) and ancestor != ancestor.parent:  # isdir: no OSError
        ancestor = ancestor.parent
    try:
        return int(os.pathconf(ancestor, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


def check_path_text(path: str | os.PathLike, what: str) -> str:
    """Refuse an input path that cannot name a file, before it is looked up; returns its text.

    Refused (``ValueError`` naming ``what``): a control character (a newline would cut the
    one-line error that names the path), a name longer than the file system allows, or a path
    of ``PATH_MAX`` bytes or more (looking either up raises ``OSError``: ENAMETOOLONG).
    """
    text = os.fspath(path)
    text = os.fsdecode(text) if isinstance(text, bytes) else text
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise ValueError(f"{what}: {text!r} holds a control character; expected a printable path")
    size = len(os.fsencode(os.path.abspath(text))) if text else 0
    if size >= 4096:
        raise ValueError(
            f"{what}: the path {text[:40]}... is {size} bytes long; expected under 4096 "
            "(PATH_MAX); check the path"
        )
    limit = _name_max(Path(text or "."))
    for part in Path(text).parts:
        if len(os.fsencode(part)) > limit:
            raise ValueError(
                f"{what}: the name {part[:40]}... is {len(os.fsencode(part))} bytes long; "
                f"expected at most {limit}, as the file system allows; check the path"
            )
    return text


def check_out_name(out: str | os.PathLike) -> Path:
    """Refuse an ``--out`` no run should write to, before anything else; returns it as a Path.

    Refused (``ValueError``, one line: what was wrong, what was expected, what to try): an
    empty name; the current folder or any folder above it (``.``, ``..``, ``a/..``, or
    their absolute spelling: replacing it would replace the user's work); a symbolic link
    whose target does not exist; a name that is not UTF-8 or holds control characters;
    a component longer than the file system allows (less the room the hidden siblings
    ``.NAME.tmp-PID`` need) or a path longer than ``PATH_MAX``.
    """
    text = os.fspath(out)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(
                f"--out: {text!r} is not UTF-8; expected a UTF-8 folder name; {_TRY}"
            ) from None
    if not text.strip():
        raise ValueError(f"--out: empty ({text!r}); expected a folder path; {_TRY}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape")
        raise ValueError(
            f"--out: {shown!r} is not UTF-8; expected a UTF-8 folder name; {_TRY}"
        ) from None
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise ValueError(
            f"--out: {text!r} holds a control character; expected a printable folder name; {_TRY}"
        )
    path = Path(text)
    if len(os.fsencode(os.path.abspath(text))) >= 4096:
        raise ValueError(
            f"--out: the path is {len(os.fsencode(os.path.abspath(text)))} bytes long; expected "
            f"under 4096 (PATH_MAX); choose a shorter --out"
        )
    limit = _name_max(path) - _SIBLING_ROOM
    for part in path.parts:
        if len(os.fsencode(part)) > limit:
            raise ValueError(
                f"--out: the name {part[:40]}... is {len(os.fsencode(part))} bytes long; expected "
                f"at most {limit} (the file system's {limit + _SIBLING_ROOM}, less room for "
                "hidden sibling files); choose a shorter --out"
            )
    cwd = Path.cwd()
    for mine, here in ((Path(os.path.abspath(text)), cwd), (path.resolve(), cwd.resolve())):
        if mine == here or mine in here.parents:
            what = "the current folder" if mine == here else "a parent of the current folder"
            raise ValueError(
                f"--out: {text} is {what} ({here}); expected a folder of its own for the "
                f"output; {_TRY}"
            )
    if path.is_symlink() and not path.exists():
        raise ValueError(
            f"--out: {text} is a symbolic link to {os.readlink(path)}, which does not exist; "
            f"expected a folder or a new name; {_TRY}"
        )
    return path


_PLAIN_STEM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=,+-]{0,59}$")


def file_stem(text: str) -> str:
    """``text`` (a dataset name, which may be a path such as ``data/plain.pt``) as one safe
    file-name component: kept when it is already plain, else its characters outside
    ``[A-Za-z0-9_.=,+-]`` as ``_`` plus a short hash of the whole, so two names never share
    a file (``a/g.pt`` and ``b/g.pt``)."""
    text = str(text)
    if _PLAIN_STEM.match(text) and ".." not in text:
        return text
    digest = hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    slug = re.sub(r"[^A-Za-z0-9_.=,+-]+", "_", text).strip("._")[-40:]
    return f"{slug or 'dataset'}-{digest}"


# ----------------------------------------------------------------------------- ours or refused

# what the earlier versions (before the marker) wrote into their folders
_OUTPUT_SUFFIXES = frozenset(
    {".csv", ".json", ".png", ".svg", ".pdf", ".parquet", ".md", ".html", ".pt"}
)
_OUTPUT_FOLDERS = re.compile(r"^(cells|runs|training|gpu|report-.+)$")
_LITTER = re.compile(r"^\..+\.(tmp|old)-\d+$|^\..+\.lock$")


def _command_line() -> str:
    argv = list(sys.argv) or ["python"]
    argv[0] = Path(argv[0]).name or argv[0]
    if argv[0] == "__main__.py":  # python -m oversmooth
        argv[0:1] = ["python", "-m", "oversmooth"]
    return shlex.join(argv)


def write_marker(folder: str | os.PathLike, kind: str) -> None:
    """Mark ``folder`` as written by oversmooth (:data:`MARKER`): what wrote it (``kind``,
    e.g. ``analyze``), the package version, the command line and the time."""
    from oversmooth.version import __version__

    write_json(
        Path(folder) / MARKER,
        {
            "written_by": "oversmooth",
            "kind": kind,
            "version": __version__,
            "command": _command_line(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
    )


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _ours_by_name(entry: Path) -> bool:
    if _LITTER.match(entry.name) or entry.name == MARKER:
        return True
    if entry.is_symlink():
        return False
    if entry.is_dir():
        return bool(_OUTPUT_FOLDERS.match(entry.name))
    return entry.is_file() and entry.suffix in _OUTPUT_SUFFIXES


def _legacy_kind(folder: Path) -> str | None:
    """The command an earlier version that wrote ``folder`` ran, from the file it left."""
    if (folder / "spec.json").is_file() and (folder / "cells").is_dir():
        return "sweep" if isinstance(_read_json(folder / "spec.json"), dict) else None
    config = _read_json(folder / "config.json")
    if isinstance(config, dict) and isinstance(config.get("command"), str):
        return config["command"]
    results = _read_json(folder / "results.json")
    if isinstance(results, dict) and "schema_version" in results:
        return "bench"
    return None


def folder_kind(folder: str | os.PathLike) -> str | None:
    """The kind of oversmooth output ``folder`` is (``analyze``, ``train``, ``sweep``, ...), or
    None when oversmooth did not write it (or something else has been put into it since an
    earlier version wrote it).  ``""`` for an empty folder."""
    folder = Path(folder)
    entries = list(folder.iterdir())
    if not entries:
        return ""
    marker = _read_json(folder / MARKER)
    if isinstance(marker, dict) and marker.get("written_by") == "oversmooth":
        return str(marker.get("kind") or "unknown")
    kind = _legacy_kind(folder)
    if kind is not None and all(_ours_by_name(e) for e in entries):
        return kind
    return None


def _not_ours(folder: Path) -> list[Path]:
    """The entries of ``folder`` (by name) that are no kind of file or folder oversmooth writes."""
    return [e for e in sorted(folder.iterdir(), key=lambda p: p.name) if not _ours_by_name(e)]


def _named(entries: list[Path]) -> str:
    """The first three of ``entries`` for a message (folders with a ``/``), and how many more."""
    shown = [e.name + ("/" if e.is_dir() and not e.is_symlink() else "") for e in entries[:3]]
    more = f" and {len(entries) - 3} more" if len(entries) > 3 else ""
    return ", ".join(shown) + more


def _foreign(folder: Path) -> str:
    """What is in ``folder`` that oversmooth would not have written, for a message."""
    entries = sorted(folder.iterdir(), key=lambda p: p.name)
    if _legacy_kind(folder) is not None:
        entries = _not_ours(folder) or entries
    return f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}: {_named(entries)}"


#: the per-layer tables' numbers: 10 significant digits (every CSV of measurements)
CSV_FLOAT = "%.10g"

#: kinds of output that hold what no rerun gives back cheaply (a training run's checkpoints, a
#: sweep's computed cells), with what that is: only a run of the same kind replaces them
KEPT_KINDS = {"train": "its checkpoints", "sweep": "its computed cells"}


def check_ours(
    out: Path, *, kind: str | None = None, action: str = "replace", writer: str | None = None
) -> None:
    """Refuse (``FileExistsError``) an existing, non-empty ``out`` that oversmooth did not write
    (or, with ``kind``, that is not that kind of output), naming what is in it.  Replacing a
    folder of a kind in :data:`KEPT_KINDS` is refused too unless ``writer`` (the kind the run
    writes) is that kind: ``analyze --overwrite`` into a training run deleted its
    checkpoints, into a sweep its cells."""
    if not out.is_dir():
        return
    found = folder_kind(out)
    if found == "":
        return
    if action == "replace" and found in KEPT_KINDS and writer != found:
        # analyze --overwrite into a sweep's folder deleted its cells, silently (an audit)
        raise FileExistsError(
            f"--out: {out} holds an oversmooth {found} run ({KEPT_KINDS[found]}), which "
            f"replacing the folder would delete; --overwrite replaces it only with another "
            f"{found} run: choose another --out (or delete the folder yourself)"
        )
    if found is None:
        raise FileExistsError(
            f"--out: {out} was not written by oversmooth (no {MARKER}; it holds "
            f"{_foreign(out)}), so this run will not {action} it; oversmooth replaces only its "
            "own folders or empty ones: choose another --out"
        )
    if kind is not None and found != kind:
        raise FileExistsError(
            f"--out: {out} holds the output of oversmooth {found}, not of a {kind}, so this run "
            f"will not {action} it: choose another --out"
        )
    if action == "replace":  # the whole folder goes: so would anything put into it since
        _check_no_run_inside(out, found, writer)
        added = _not_ours(out)
        if added:
            raise FileExistsError(
                f"--out: {out} also holds what oversmooth did not write ({_named(added)}), "
                "which replacing the folder would delete: move it out, or choose another --out"
            )


#: the kinds of output a kind writes as folders of its own inside it (a sweep's report-*)
NESTED_KINDS = {"sweep": ("compare",)}


def _check_no_run_inside(out: Path, kind: str | None, writer: str | None) -> None:
    """Refuse replacing ``out`` (of ``kind``, by a run writing ``writer``) while another run
    writes inside it (a held ``.NAME.lock``), when it holds another run's finished output (a
    folder with its own marker, of a kind ``kind`` does not write inside itself), or, for
    another kind of run, training runs under ``runs/`` (a trained sweep's checkpoints):
    ``analyze --out X --overwrite`` deleted ``X/inner`` that another run was writing (which
    then failed with a raw errno), a finished ``X/report-mine`` and a sweep's ``runs/<id>``
    training runs, silently (audits)."""
    if kind != writer and _holds_kept_runs(out):
        raise FileExistsError(
            f"--out: {out} holds oversmooth {kind} output with training runs inside (their "
            "checkpoints, under runs/), which replacing the folder would delete: choose "
            "another --out (or delete the folder yourself)"
        )
    for entry in sorted(out.iterdir(), key=lambda p: p.name):
        lock = re.match(r"^\.(.+)\.lock$", entry.name)
        if lock and entry.is_file() and _held_by_other(entry):
            raise FolderBusyError(
                f"--out: {out} holds {lock.group(1)}, which another oversmooth run (pid "
                f"{_owner(entry)}) is writing; replacing the folder would delete it: wait for "
                "it to finish or choose another --out"
            )
        if entry.is_dir() and not entry.is_symlink() and (entry / MARKER).is_file():
            inner = folder_kind(entry)
            if inner not in NESTED_KINDS.get(str(kind), ()):
                raise FileExistsError(
                    f"--out: {out} holds {entry.name}/, the output of another oversmooth run "
                    f"({inner}), which replacing the folder would delete: move it out, or "
                    "choose another --out"
                )


def file_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, in hex."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def data_digests(folder: Path, names: Iterable[str]) -> dict[str, str]:
    """``name -> SHA-256`` of the data files ``names`` in ``folder`` (those present): what
    ``config.json`` records so that ``oversmooth report`` can tell a file changed since the
    run wrote it (a metrics.csv cut short or edited was drawn beside the run's verdict, computed
    from the other numbers, with no word: an audit)."""
    return {name: file_digest(folder / name) for name in names if (folder / name).is_file()}


@contextmanager
def working_inside(folder: str | os.PathLike) -> Iterator[None]:
    """For the block, this process writes inside ``folder`` for the process that holds it (a
    sweep's worker writing a cell's training run under the sweep's ``runs/``): an ``--out``
    inside it is not refused as inside another run's folder."""
    key = Path(os.path.realpath(folder))
    added = key not in _INSIDE
    _INSIDE.add(key)
    try:
        yield
    finally:
        if added:
            _INSIDE.discard(key)


def _check_not_inside_busy(out: Path) -> None:
    """Refuse an ``out`` inside a folder another oversmooth run is writing and replaces whole
    when it ends (its ``.NAME.lock`` held by another process, without :data:`IN_PLACE`): that
    would delete ``out``, or fail at its last step because of it (``analyze --out Y/inner``
    beside a running ``analyze --out Y --overwrite``; an audit).  A run that writes its folder
    in place (train, a sweep) leaves ``out`` alone: analysing a checkpoint into the training
    folder while it trains is a workflow (the first version refused it; an audit)."""
    for ancestor in Path(os.path.realpath(out)).parents:
        if ancestor == ancestor.parent:
            break
        if ancestor in _INSIDE:
            continue
        lock = _lock_path(ancestor)
        if lock.is_file() and _held_by_other(lock) and not _written_in_place(lock):
            raise FolderBusyError(
                f"--out: {out} lies inside {ancestor}, which another oversmooth run (pid "
                f"{_owner(lock)}) is writing and replaces when it ends: wait for it to finish "
                "or choose another --out"
            )


def _held_by_other(lock: Path) -> bool:
    """Whether another process holds the lock file ``lock`` (taken and let go at once when
    not: the file stays, its holder's claim unchanged)."""
    if Path(os.path.abspath(lock.parent / lock.name[1:-5])) in _HELD:
        return False  # this process's own claim
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return False
    try:
        if not _try_lock(fd):
            return True
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _holds_kept_runs(out: Path) -> bool:
    """Whether a sweep's ``runs/`` inside ``out`` holds a run of a kind in :data:`KEPT_KINDS`
    (two levels down, where the markers of :func:`_check_no_run_inside` do not look)."""
    runs = out / "runs"
    if not runs.is_dir() or runs.is_symlink():
        return False
    return any(folder_kind(run) in KEPT_KINDS for run in runs.iterdir() if run.is_dir())


def check_out(
    out: str | os.PathLike,
    overwrite: bool,
    *,
    reuse: str | None = None,
    reads: Iterable[str | os.PathLike | None] = (),
    writer: str | None = None,
) -> Path:
    """Fail early (before any work) when ``out`` is a bad name (:func:`check_out_name`),
    exists without ``overwrite``, is not a folder, is not ours, or cannot be written;
    returns ``out`` as a :class:`Path`.

    ``reuse``: the kind of output a run continues in place (``"sweep"``, ``"train"``): an
    existing folder is then accepted, without ``overwrite``, when it is empty or that kind
    of oversmooth output.  ``reads``: files the run reads (a checkpoint, a dataset file);
    replacing a folder that holds one is refused (``--checkpoint DIR/best.pt --out DIR
    --overwrite`` deleted the checkpoint it was reading).  ``writer``: the kind of output
    the run writes (:func:`check_ours`).
    """
    out = check_out_name(out)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out: {out} exists and is not a folder; choose another path")
    _check_not_inside_busy(out)
    if out.exists():
        if reuse is not None:
            check_ours(out, kind=reuse, action="write into")
        elif not overwrite:
            raise FileExistsError(
                f"--out: {out} already exists; pass --overwrite to replace it or choose "
                "another folder"
            )
        else:
            check_ours(out, writer=writer)
            _check_not_read(out, reads)
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
            probe_writable(parent)
        elif not os.access(ancestor, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "permission denied")
    except OSError as exc:
        raise PermissionError(
            f"--out: cannot write into {ancestor} ({exc.strerror or exc}); choose another folder"
        ) from None
    return out


def probe_writable(folder: Path) -> None:
    """Create and remove a file in ``folder`` (an ``OSError`` when it cannot take one).  The
    file is named after this process and removed in ``finally``, so a signal that lands while
    it exists (Ctrl-C, SIGTERM) does not leave it behind."""
    path = Path(folder) / f".oversmooth-write-test-{os.getpid()}"
    held = _hold_signals()  # a signal inside the finally left the file behind (an audit)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
        _release_signals(held)


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


def _try_lock(fd: int) -> bool:
    """Take the OS-level exclusive lock on ``fd`` without waiting; False when another open file
    description (another process) holds it."""
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        return True
    import msvcrt  # pragma: no cover - Windows, not exercised by the tests here

    os.lseek(fd, 1 << 20, os.SEEK_SET)  # lock a byte past the PID, which others still read
    try:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError:
        return False
    return True


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not removed and made anew)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


#: The word after the PID in the lock of a run that writes its folder in place (train, a
#: sweep, a report's rebuild) rather than replacing it whole when it ends: an ``--out`` inside
#: such a folder is not refused (:func:`_check_not_inside_busy`).
IN_PLACE = "in-place"


def _write_pid(fd: int, in_place: bool = False) -> None:
    """The owner's PID (and :data:`IN_PLACE` for a run that writes its folder in place) into
    the locked file, in one write: a reader sees the old text or the new PID (then possibly old
    digits after a newline, which it ignores), never a mix."""
    data = f"{os.getpid()}{' ' + IN_PLACE if in_place else ''}\n".encode()
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, data)
    os.ftruncate(fd, len(data))


def _owner(lock: Path) -> str:
    """The PID written in a held lock, for the message (its holder may not have written it yet:
    a few short waits, then "unknown")."""
    for _ in range(20):
        pid = _read_pid(lock)
        if _pid_alive(pid):
            return str(pid)
        time.sleep(0.01)
    return "unknown"


def _written_in_place(lock: Path) -> bool:
    """Whether the held ``lock`` says its run writes its folder in place (:data:`IN_PLACE`);
    False for a lock written by an older version, or not yet written (the safe reading)."""
    try:
        return lock.read_text().split("\n", 1)[0].split()[1:2] == [IN_PLACE]
    except (OSError, UnicodeDecodeError):
        return False


def _acquire(
    lock: Path,
    out: Path,
    unwritable: str | None = None,
    in_place: bool = False,
    rebuild: bool = False,
) -> int:
    """Hold the OS-level lock on ``lock``; returns its file descriptor (closing it releases).
    ``rebuild``: for ``oversmooth report``, which has no ``--out`` to choose again."""
    for _ in range(100):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
                raise PermissionError(
                    unwritable
                    or f"--out: cannot write into {lock.parent} ({exc.strerror}); choose "
                    "another folder"
                ) from None
            raise
        try:
            locked = _try_lock(fd)
            ours = locked and _same_file(fd, lock)
        except BaseException:
            os.close(fd)
            raise
        if ours:
            try:
                _write_pid(fd, in_place)
            except BaseException:
                # ours, and it could not say whose (a full disk): removed, not left behind
                # empty (an audit)
                _release(lock, fd)
                raise
            return fd
        os.close(fd)
        if not locked:
            raise FolderBusyError(
                f"report: {out} is being written by another oversmooth run (pid "
                f"{_owner(lock)}); wait for it to finish, then rebuild its report"
                if rebuild
                else f"--out: {out} is being written by another oversmooth run (pid "
                f"{_owner(lock)}); wait for it to finish or choose another folder"
            )
        # we locked a file its holder had just released and removed: lock the one there now
    raise FolderBusyError(f"--out: could not claim {out} (its lock kept changing); try again")


def _release(lock: Path, fd: int) -> None:
    """Remove the lock file while still holding it, then let go (see :func:`_acquire`)."""
    try:
        if _same_file(fd, lock):
            lock.unlink()
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_unheld_lock(lock: str | os.PathLike) -> bool:
    """Remove the lock file ``lock`` if no process holds it (one its owner left when killed);
    True when removed.  Safe against a concurrent claim: it takes the lock first."""
    lock = Path(lock)
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return False
    try:
        if not (_try_lock(fd) and _same_file(fd, lock)):
            os.close(fd)
            return False
    except BaseException:
        os.close(fd)
        raise
    _release(lock, fd)
    return True


#: what :func:`_hold_signals` returns: the handlers it replaced, and the signals it noted
_HeldSignals = tuple[dict[int, Any], list[int]]


def _hold_signals() -> _HeldSignals | None:
    """Hold Ctrl-C and SIGTERM back through a step that must not be cut in two; returns what
    :func:`_release_signals` restores.  Their handlers are swapped for one that notes the
    signal: a thread mask held them only in this thread, and a Ctrl-C (sent to the process)
    went to another one (OpenBLAS's, torch's), whose delivery ran the handler here at once.
    Only the main thread can set handlers: elsewhere this does nothing; an ignored signal
    stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        return None
    pending: list[int] = []

    def note(signum: int, frame: object) -> None:
        pending.append(signum)

    previous: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if handler not in (signal.SIG_IGN, None):
            previous[sig] = signal.signal(sig, note)
    return previous, pending


def _release_signals(held: _HeldSignals | None, written: Path | None = None) -> None:
    """Put the handlers back and deliver the first signal held back (its handler runs here).
    ``written``: the folder the held step completed; a stop delivered now carries it
    (``exc.written``), so the command can say the output is in place instead of only
    "interrupted"."""
    if held is None:
        return
    previous, pending = held
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    if not pending:
        return
    handler = previous[pending[0]]
    try:
        if callable(handler):
            handler(pending[0], None)
        else:  # the default action (end the process), as the signal would have had
            signal.raise_signal(pending[0])
    except KeyboardInterrupt as stop:
        if written is not None:
            stop.written = str(written)  # type: ignore[attr-defined]
        raise


def _followed(out: Path) -> Path:
    """``out`` with symbolic links followed when it is one or a path through one (else as
    given, relative paths kept for messages); ``.`` and ``..`` by their real names (``report
    .`` from inside the folder put its lock and its rebuilt copy inside the folder itself)."""
    if (
        out.name in ("", ".", "..")
        or out.is_symlink()
        or os.path.realpath(out.parent) != os.path.abspath(out.parent)
    ):
        return Path(os.path.realpath(out))
    return out


@contextmanager
def folder_lock(
    out: str | os.PathLike,
    unwritable: str | None = None,
    in_place: bool = False,
    rebuild: bool = False,
) -> Iterator[Path]:
    """Hold the exclusive lock of the folder ``out`` names (``.NAME.lock`` beside it) for the
    block; the block gets the folder's real path.  A symbolic link, or a path through one, is
    followed: one folder has one lock whatever path names it (the lock of a link's name let
    two runs write one folder, and replacing the folder replaced the link).  Raises
    :class:`FolderBusyError` when another process holds it; re-entrant within one process.
    ``unwritable``: the message when the lock cannot be made (the parent is read-only; default:
    choose another ``--out``).  ``in_place``: the run writes the folder in place rather than
    replacing it whole (said in the lock, :data:`IN_PLACE`)."""
    out = _followed(Path(out))
    key = Path(os.path.abspath(out))
    if key in _HELD:
        _HELD[key][0] += 1
        try:
            yield out
        finally:
            _HELD[key][0] -= 1
        return
    lock = _lock_path(out)
    created = _make_parents(out)
    # a signal between creating the lock file and the ``try`` that releases it would leave
    # the file behind: held back until the claim is recorded, delivered inside the ``try``
    held = _hold_signals()
    try:
        fd = _acquire(lock, out, unwritable, in_place, rebuild)
    except BaseException:
        _release_signals(held)
        _drop_empty(created)
        raise
    _HELD[key] = [1, fd]
    try:
        _release_signals(held)
        yield out
    finally:
        _HELD.pop(key, None)
        _release(lock, fd)
        _drop_empty(created)  # a failed run leaves no empty parents behind


def _check_not_read(out: Path, reads: Iterable[str | os.PathLike | None]) -> None:
    """Refuse replacing ``out`` when one of the files the run reads lies inside it."""
    root = Path(os.path.realpath(out))
    for path in reads:
        if path is None or not str(path) or not Path(path).exists():
            continue
        real = Path(os.path.realpath(path))
        if real == root or root in real.parents:
            raise FileExistsError(
                f"--out: {out} holds {path}, which this run reads; replacing the folder would "
                "delete it: choose another --out"
            )


@contextmanager
def claim_folder(
    out: str | os.PathLike,
    overwrite: bool,
    *,
    reuse: str | None = None,
    reads: Iterable[str | os.PathLike | None] = (),
    writer: str | None = None,
) -> Iterator[Path]:
    """Hold an exclusive claim on ``out`` for the duration of the block.

    Checks ``out`` like :func:`check_out`, then takes its :func:`folder_lock` (the block gets
    the real path); raises :class:`FolderBusyError` (a ``FileExistsError``) when another
    process holds it, and checks ``out`` again once it is ours.  Re-entrant within one
    process.
    """
    out = check_out(out, overwrite, reuse=reuse, reads=reads, writer=writer)
    first = Path(os.path.abspath(_followed(out))) not in _HELD  # folder_lock's key
    # a run that continues its folder (a sweep) or trains into it writes it in place
    in_place = reuse is not None or writer == "train"
    with folder_lock(out, in_place=in_place) as out:
        if first:
            clean_stale_siblings(out)
            # what appeared between check and claim
            check_out(out, overwrite, reuse=reuse, reads=reads, writer=writer)
        yield out


@contextmanager
def atomic_folder(out: str | os.PathLike, overwrite: bool, kind: str = "report") -> Iterator[Path]:
    """Yield a temporary folder that becomes ``out`` only when the block succeeds.

    The folder gets the marker (:func:`write_marker`, with ``kind``) first.  Runs under
    :func:`claim_folder` (taken here unless this process already holds it), so two runs can
    never replace each other's output: the second one fails with :class:`FolderBusyError`
    naming the folder.
    """
    with claim_folder(out, overwrite, writer=kind) as out:
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        try:
            tmp.mkdir()
            write_marker(tmp, kind)
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


@contextmanager
def rebuilt(folder: Path) -> Iterator[Path]:
    """A copy of ``folder`` to rebuild its report in (files hard-linked where the file system
    allows: every write is a new file, :func:`atomic_file`); when the block succeeds, the files
    it wrote are moved into ``folder`` together (Ctrl-C held back meanwhile), else none is.  In
    place, each file was whole but a rebuild that failed part-way left two renders (a report.md
    of the new one beside a report.html of the old; an audit).  The folder itself stays (a
    shell inside it keeps its files; ``report .`` works)."""
    folder = Path(os.path.realpath(folder))
    tmp = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(folder, tmp, symlinks=True, copy_function=_link_or_copy)
        yield tmp
        copied = (
            Path(root, name).relative_to(tmp) for root, _, names in os.walk(tmp) for name in names
        )
        written = [rel for rel in copied if not _same_entry(tmp / rel, folder / rel)]
        held = _hold_signals()
        try:
            for rel in written:
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp / rel, folder / rel)
        finally:
            _release_signals(held, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _same_entry(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file (a hard link the rebuild did not replace)."""
    try:
        return os.path.samestat(os.lstat(a), os.lstat(b))
    except OSError:
        return False


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def move_into_place(tmp: Path, out: Path) -> None:
    """Rename the finished folder ``tmp`` to ``out``; an existing ``out`` is first renamed
    aside (``.NAME.old-PID``) and removed after, so ``out`` is never half-written.  An
    existing ``out`` that is not ours (:func:`check_ours`: something put there while this run
    worked) is refused, never removed.  A stop signal the run received and lost on the way
    (:data:`STOPS`) is raised here instead: nothing is moved."""
    if STOPS:
        raise STOPS[0]
    replaced = out.exists()
    if replaced:
        check_ours(out, writer=folder_kind(tmp))  # tmp's marker: the kind this run writes
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    # never stopped between the two renames (out would be gone), nor before the replaced copy
    # is removed (it was left beside out, and the run said "interrupted" with out replaced)
    held, moved = _hold_signals(), False
    try:
        if replaced:
            out.rename(old)
        try:
            tmp.rename(out)
        except BaseException:
            if replaced:
                old.rename(out)  # the old output back in its place, not left to be swept
            raise
        moved = True
        if replaced:
            _remove_tree(old)
    finally:
        _release_signals(held, out if moved else None)


def _remove_tree(folder: Path) -> None:
    """Remove the replaced folder, read-only parts included (its folders made writable first,
    as the owner may); what still cannot go is said in a warning, never left without a word."""

    def writable_and_again(function: Callable, path: str, _exc: object) -> None:
        parent = os.path.dirname(path)
        for where in (parent, path):
            try:
                os.chmod(where, os.stat(where).st_mode | 0o700)
            except OSError:
                pass
        function(path)

    handler = {"onexc" if sys.version_info >= (3, 12) else "onerror": writable_and_again}
    try:
        shutil.rmtree(folder, **handler)  # type: ignore[arg-type]
    except OSError as exc:
        import warnings

        warnings.warn(
            f"the replaced folder's copy {folder} could not be removed ({exc.strerror or exc}); "
            "delete it by hand",
            stacklevel=2,
        )


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


# -- reading tables back -------------------------------------------------------------------------


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """A table oversmooth wrote (``metrics.csv`` and the like), with current column names."""
    import pandas as pd

    from oversmooth.registry import upgrade_columns

    return upgrade_columns(pd.read_csv(path))
