"""Every example in the package's docstrings runs and prints what it shows (a user copies
them: four of them named variables they never defined, and one expected a tensor printed
with other spacing).  Run in a fresh interpreter: importing every module here would leave
modules loaded (pyplot) that other tests check are not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import oversmooth

SOURCE = Path(oversmooth.__file__).parent

RUN = """
import doctest, importlib, sys
failed = []
for name in sys.argv[1:]:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder().find(importlib.import_module(name)):
        runner.run(test, out=lambda text: None)
    result = runner.summarize(verbose=False)
    if result.failed:
        failed.append(f"{name}: {result.failed} of {result.attempted}")
print("FAILED " + "; ".join(failed) if failed else "OK")
"""


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted(SOURCE.rglob("*.py")):
        if ">>> " not in path.read_text(encoding="utf-8"):
            continue
        parts = path.relative_to(SOURCE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_docstring_examples_run():
    names = _modules_with_examples()
    assert {"oversmooth.graph", "oversmooth.probe", "oversmooth.nn.hooks"} <= set(names)
    out = subprocess.run(
        [sys.executable, "-c", RUN, *names], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "OK", out.stdout
