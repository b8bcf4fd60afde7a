"""What a run's start-up does for speed: its imports pause the garbage collector and end frozen."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import gc, sys
from oversmooth.cli._common import load_run_modules
collections = []
gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(info))
assert "torch" not in sys.modules
load_run_modules()
loaded = all(m in sys.modules for m in ("torch", "pandas", "matplotlib.figure"))
print(len(collections), gc.isenabled(), gc.get_freeze_count(), loaded)
gc.disable()
load_run_modules()  # a second call: no-op, and leaves a disabled collector disabled
print(gc.isenabled())
"""


def test_run_modules_load_without_collections_and_end_frozen():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    collections, enabled, frozen, loaded = first.split()
    assert collections == "0"  # without the pause: hundreds during these imports
    assert enabled == "True" and loaded == "True"
    assert int(frozen) > 100_000
    assert second == "False"
