"""The package version and the commit it was built from (one place; the package root and
config.json read them).

``__commit__`` is None in the source tree: a built package (``pip install .``, a wheel, an
sdist) carries the commit its build ran from, written into its copy of this file by the build
hooks below (``[tool.setuptools.cmdclass]`` in pyproject.toml), so a run of an installed
package still records where its code came from.  :func:`commit` falls back to asking git
about the source tree (an editable install, a checkout on ``sys.path``).  A commit with
``-dirty`` appended was built from, or runs in, a tree whose package files (this folder's
tracked files) differ from it; reports or docs changed beside them do not count.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path
from typing import Any

__version__ = "0.1.0"
__commit__: str | None = None

_COMMIT_LINE = re.compile(r"^__commit__: str \| None = None$", re.M)


def git_commit(path: str | Path) -> str | None:
    """The commit checked out in the git work tree that tracks the file ``path`` (``-dirty``
    appended when a tracked file of ``path``'s folder, the code, differs from it: reports
    regenerated into the same checkout made every later run of it "dirty"); None when no work
    tree tracks it (an installed copy, even one inside a checkout's ignored ``.venv``) or git
    is missing."""
    path = Path(path)

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["git", *args], cwd=path.parent, capture_output=True, text=True, timeout=10
        )

    try:
        if git("ls-files", "--error-unmatch", "--", path.name).returncode != 0:
            return None
        head = git("rev-parse", "HEAD")
        if head.returncode != 0 or not head.stdout.strip():
            return None
        dirty = git("diff", "--quiet", "HEAD", "--", ".").returncode == 1
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty else "")


def commit() -> str | None:
    """The commit of the running code: the one recorded at build time, else git's answer for
    this file's own work tree (None when neither knows), asked once per process (three git
    calls, 7 ms: a sweep's worker records it in every cell)."""
    return __commit__ or _checkout_commit()


@functools.cache
def _checkout_commit() -> str | None:
    return git_commit(Path(__file__).resolve())


def recorded(source: str, found: str | None) -> str:
    """This file's text (``source``) with ``found`` as ``__commit__``; unchanged when ``found``
    is None or ``source`` already records a commit (a wheel built from an sdist keeps the
    sdist's)."""
    if found is None:
        return source
    return _COMMIT_LINE.sub(f"__commit__: str | None = {found!r}", source, count=1)


def _write_recorded(copy: Path) -> None:
    """Write the built ``copy`` of this file afresh: this file's text (the source being built,
    never a copy left by an earlier build, which setuptools does not overwrite when it is newer)
    with the commit of the tree being built, from the current folder, where setuptools runs.
    The old copy is removed first, never edited: it may be a hard link to the source."""
    text = Path(__file__).read_text(encoding="utf-8")
    copy.unlink(missing_ok=True)
    found = git_commit(Path.cwd() / "src" / "oversmooth" / "version.py")
    copy.write_text(recorded(text, found), encoding="utf-8")


def __getattr__(name: str) -> Any:
    """``BuildPy`` and ``Sdist``, setuptools' commands with the commit recorded, made only when
    a build asks for them (running the package never imports setuptools)."""
    if name == "BuildPy":
        from setuptools.command.build_py import build_py

        class BuildPy(build_py):
            def run(self) -> None:
                super().run()
                copy = Path(self.build_lib) / "oversmooth" / "version.py"
                if not getattr(self, "editable_mode", False) and copy.parent.is_dir():
                    _write_recorded(copy)  # (an editable install asks git at run time)

        return BuildPy
    if name == "Sdist":
        from setuptools.command.sdist import sdist

        class Sdist(sdist):
            def make_release_tree(self, base_dir: str, files: Any) -> None:
                super().make_release_tree(base_dir, files)
                _write_recorded(Path(base_dir) / "src" / "oversmooth" / "version.py")

        return Sdist
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
