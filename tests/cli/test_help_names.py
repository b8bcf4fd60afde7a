"""Help pages keep names whole: at 80 and 100 columns no line ends inside a hyphenated flag,
model name or path (users copy them from the page)."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from oversmooth.cli.main import app, wrap_whole

runner = CliRunner()
GROUP = typer.main.get_command(app)
PAGES = [None, *sorted(GROUP.commands)]
WIDTHS = (80, 100)
# a line that ends in a word character then a hyphen (or a slash), continued on the next line
# by a word character: a name cut in two, e.g. "nonlocal-" / "preln"
_CUT = re.compile(r"[\w.][-/]$")
_NAME = re.compile(r"(?<![\w-])-*\w[\w.]*(?:[-/][\w.]*\w)+")


def help_of(name: str | None, width: int) -> str:
    result = runner.invoke(
        app, [name, "--help"] if name else ["--help"], env={"COLUMNS": str(width)}
    )
    assert result.exit_code == 0, result.output
    return result.output


def cut_names(text: str) -> list[str]:
    lines = text.splitlines()
    return [
        f"{a.strip()!r} / {b.strip()!r}"
        for a, b in zip(lines, lines[1:], strict=False)
        if _CUT.search(a) and re.match(r"\s*\w", b)
    ]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", PAGES)
def test_no_line_ends_inside_a_name(name, width):
    text = help_of(name, width)
    assert not cut_names(text), cut_names(text)
    assert max(len(line) for line in text.splitlines()) <= width


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", sorted(GROUP.commands))
def test_every_hyphenated_name_in_a_help_is_printed_whole(name, width):
    text = help_of(name, width)
    command = GROUP.commands[name]
    helps = [command.help or ""] + [
        getattr(p, "help", None) or "" for p in command.params if not getattr(p, "hidden", False)
    ]
    names = {m.group(0) for h in helps for m in _NAME.finditer(h)}
    missing = sorted(n for n in names if n not in text)
    assert not missing, missing


def test_the_check_sees_a_cut_name():
    """What click's own wrapping printed at 80 columns before (and what the check must catch)."""
    assert cut_names("  diffusion (linear diffusion), nonlocal-\n  preln (nonlocal Pre-LN)")
    assert cut_names("  default reports/paper-\n  reproduction")
    assert not cut_names("  a dash at the end -\n  then text")


def test_wrap_keeps_names_and_units_whole():
    text = "see --prune-layers and reports/paper-reproduction, about 14 s " * 3
    for width in range(12, 60):
        lines = wrap_whole(text, width).splitlines()
        words = " ".join(lines).split()
        assert words == text.split()
        assert not any(_CUT.search(line) for line in lines)
        assert not any(line.endswith(" 14") or line.strip() == "14" for line in lines)
