"""The ```python blocks of README.md's "Your own model" section run as written."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib
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
def test_readme_block_runs(index, tmp_path, monkeypatch):
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)  # files the block writes land here
    code = section_blocks("Your own model")[index]
    exec(compile(code, f"README.md (Your own model, block {index})", "exec"), {})
    if "write_report" in code:
        assert (tmp_path / "gcn-report" / "report.html").is_file()
        assert (tmp_path / "energy.png").is_file()
