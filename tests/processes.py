"""Run Python code in a fresh process (a state no test in this one can leave behind)."""

from __future__ import annotations

import subprocess
import sys


def python_words(code: str) -> list[str]:
    """The words ``code`` prints, run by this interpreter in a new process that must exit 0."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()
