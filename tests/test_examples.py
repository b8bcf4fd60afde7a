"""examples/ scripts run end to end (as a user would run them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


# the same PyG GCN, probe, report and pruning as docs/python.md's own-model block, which the
# default suite runs (tests/test_docs.py): this whole script is in the slow set
@pytest.mark.slow
def test_own_model_example(tmp_path):
    env = {**os.environ, "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "own_model.py"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "PyG GCN, 32 layers: " in done.stdout and "smoothing" in done.stdout
    assert (tmp_path / "out" / "energy.png").is_file()
    assert (tmp_path / "out" / "report" / "report.html").is_file()
    assert "logits_change" in done.stdout  # the pruning table of layers 2 and 30
