"""README.md is a newcomer's page: its install, main and test commands are the real ones, its
Python block runs as written, its links resolve, and it stays short (the reference is in docs/,
checked by tests/test_docs.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAIN_COMMAND = "oversmooth analyze --model postln --depth 256"
TEST_COMMAND = 'pip install torch==2.13.0 && pip install ".[test]" && pytest -n 2'


def text() -> str:
    return README.read_text(encoding="utf-8")


def section(title: str) -> str:
    body = text()
    start = body.index(f"## {title}\n")
    end = re.compile(r"^## ", re.M).search(body, start + 3)
    return body[start : end.start() if end else len(body)]


def test_install_main_and_test_commands_are_given():
    assert "pip install ." in section("Install")
    assert f"pip install torch==2.13.0 && pip install . && {MAIN_COMMAND}" in section(
        "Main command"
    )
    assert TEST_COMMAND in section("Tests")


def test_ci_runs_the_test_command_of_the_readme():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install -q torch==2.13.0" in ci
    assert 'pip install -q ".[test]"' in ci
    assert re.search(r"^pytest -n 2$", ci, re.M)  # the README's command, TEST_COMMAND


def test_readme_stays_a_short_entry_page():
    lines = text().count("\n")
    assert lines <= 160, f"README.md has {lines} lines; move reference material into docs/"


def test_readme_links_resolve():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", text())
    local = [t for t in targets if not re.match(r"^[a-z]+:", t)]
    assert local, "the README links to nothing in the repository"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_layout_names_every_module_of_the_package_and_its_experiments():
    layout = section("Layout")
    package = ROOT / "src" / "oversmooth"
    names = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    names -= {"_data"}  # package data, not code
    names |= {p.stem for p in (package / "experiments").glob("*.py") if p.stem != "__init__"}
    missing = sorted(n for n in names if not re.search(rf"\b{re.escape(n)}\b", layout))
    assert not missing, f"the README's layout section does not name {missing}"


def test_python_api_block_runs(tmp_path):
    # a fresh interpreter in a tmp dir, as a user pastes it (pyplot stays out of this process)
    blocks = re.findall(r"```python\n(.*?)```", section("Python API"), re.S)
    assert len(blocks) == 1
    (tmp_path / "block.py").write_text(blocks[0], encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "block.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "MPLBACKEND": "Agg"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip(), "the block prints the verdict's summary"
    assert (tmp_path / "postln-report" / "report.html").is_file()
