"""The command sets OpenMP's passive wait before torch loads, and never overrides the user's."""

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
print("POLICY=" + os.environ.get("OMP_WAIT_POLICY", ""), "TORCH=" + str("torch" in sys.modules))
"""


@pytest.mark.parametrize(("given", "expected"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_openmp_wait_policy_is_set_before_torch_loads(given, expected):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert f"POLICY={expected}" in out
    assert "TORCH=True" in out  # the command loaded torch after the policy was set
