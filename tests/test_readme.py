"""The ```python blocks of README.md's "Your own model" section run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def section_blocks(title: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"### {title}\n")
    end = re.compile(r"^#{2,3} ", re.M).search(text, start + 4)
    body = text[start : end.start() if end else len(text)]
    return re.findall(r"```python\n(.*?)```", body, re.S)


def test_the_section_has_code():
    assert len(section_blocks("Your own model")) >= 2


@pytest.mark.parametrize("index", range(len(section_blocks("Your own model"))))
def test_readme_block_runs(index, tmp_path):
    # a fresh interpreter in a tmp dir, as a user pastes it (pyplot stays out of this process)
    code = section_blocks("Your own model")[index]
    (tmp_path / "block.py").write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "block.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "MPLBACKEND": "Agg"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    if "write_report" in code:
        assert (tmp_path / "gcn-report" / "report.html").is_file()
        assert (tmp_path / "energy.png").is_file()
