"""The package knows its version and the commit it was built from: a wheel records the commit
of the tree it was built in, so a non-editable install (`pip install .`) reports it in every
config.json, and a source checkout asks git."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import oversmooth
from oversmooth import version as version_module
from oversmooth.version import commit, git_commit, recorded

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "src" / "oversmooth" / "version.py"


def _git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def _in_git_checkout() -> bool:
    return shutil.which("git") is not None and git_commit(SOURCE) is not None


def test_recorded_replaces_only_the_unset_commit():
    source = SOURCE.read_text(encoding="utf-8")
    assert "__commit__: str | None = None\n" in source  # the source tree records none
    built = recorded(source, "abc123")
    assert "__commit__: str | None = 'abc123'\n" in built
    assert built.count("abc123") == 1 and recorded(built, "other") == built
    assert recorded(source, None) == source


def test_an_installed_copy_outside_any_work_tree_knows_no_commit_from_git(tmp_path):
    copy = tmp_path / "version.py"
    shutil.copy(SOURCE, copy)
    assert git_commit(copy) is None


@pytest.mark.skipif(not _in_git_checkout(), reason="not a git checkout")
def test_the_running_package_reports_the_checkout_or_its_build_commit():
    head = _git("rev-parse", "HEAD")
    found = commit()
    assert found is not None and found.removesuffix("-dirty") == head
    env = oversmooth.runtime.environment(oversmooth.runtime.resolve_device("cpu"))
    assert env["git_commit"] == found and env["oversmooth"] == oversmooth.__version__
    if version_module.__commit__ is not None:  # a built install (CI: `pip install ".[test]"`)
        assert Path(version_module.__file__).resolve() != SOURCE.resolve()


@pytest.mark.skipif(not _in_git_checkout(), reason="not a git checkout")
def test_a_wheel_records_the_commit_it_was_built_from(tmp_path):
    """Build a wheel from a clean clone of HEAD, in a temporary folder (no build isolation:
    offline, with the setuptools this environment has), and read what its copy records."""
    pytest.importorskip("setuptools")
    head = _git("rev-parse", "HEAD")
    clone = tmp_path / "clone"
    _git("clone", "--quiet", "--depth", "1", REPO.as_uri(), str(clone))
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + [str(clone), "-w", str(wheels)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("oversmooth-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extract("oversmooth/version.py", tmp_path / "installed")
    copy = tmp_path / "installed" / "oversmooth" / "version.py"
    spec = importlib.util.spec_from_file_location("built_version", copy)
    assert spec is not None and spec.loader is not None
    built_version = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(built_version)
    assert built_version.__commit__ == head  # a clean clone: no "-dirty"
    assert built_version.commit() == head and built_version.__version__ == oversmooth.__version__
    assert "__commit__: str | None = None\n" in SOURCE.read_text()  # the source is untouched


def test_the_checkout_commit_is_asked_of_git_once_per_process(monkeypatch):
    """A sweep worker records the commit in every cell: git runs (three calls, 7 ms) only for
    the first."""
    import oversmooth.version as version_module

    calls = []
    monkeypatch.setattr(version_module, "__commit__", None)
    monkeypatch.setattr(version_module, "git_commit", lambda path: calls.append(path) or "abc")
    version_module._checkout_commit.cache_clear()
    try:
        assert version_module.commit() == version_module.commit() == "abc"
        assert len(calls) == 1
    finally:
        version_module._checkout_commit.cache_clear()


def test_dirty_means_the_code_differs_not_another_file_of_the_checkout(tmp_path):
    """A report regenerated into the checkout made every later run "-dirty"; only a change
    under the file's own folder (the package) does."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "reports").mkdir()
    shutil.copy(SOURCE, repo / "pkg" / "version.py")
    (repo / "reports" / "r.md").write_text("one\n")
    for args in (
        ("init", "-q"),
        ("add", "."),
        ("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x"),
    ):
        assert subprocess.run(["git", *args], cwd=repo, capture_output=True).returncode == 0
    clean = git_commit(repo / "pkg" / "version.py")
    assert clean is not None and not clean.endswith("-dirty")
    (repo / "reports" / "r.md").write_text("two\n")
    assert git_commit(repo / "pkg" / "version.py") == clean
    (repo / "pkg" / "version.py").write_text("# changed\n")
    assert git_commit(repo / "pkg" / "version.py") == clean + "-dirty"
