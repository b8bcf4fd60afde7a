"""The command bounds OpenMP's spinning before torch loads, and never overrides the user's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """
import os, sys
from oversmooth.cli.main import main
assert "torch" not in sys.modules
sys.argv = ["oversmooth", "models"]
try:
    main()
except SystemExit:
    pass
print("SPIN=" + os.environ.get("GOMP_SPINCOUNT", "") + ";", "TORCH=" + str("torch" in sys.modules))
"""


@pytest.mark.parametrize(
    ("given", "expected"),
    [({}, "3000"), ({"GOMP_SPINCOUNT": "100000"}, "100000"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "")],
)
def test_openmp_spin_count_is_set_before_torch_loads(given, expected):
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env.update(given)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert f"SPIN={expected};" in out
    assert "TORCH=True" in out  # the command loaded torch after the setting
