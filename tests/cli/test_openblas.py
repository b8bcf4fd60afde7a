"""The command runs numpy's and scipy's OpenBLAS on one thread unless told otherwise; importing
the package from Python changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# the thread count numpy's OpenBLAS runs with, read from the library itself
SCRIPT = """
import ctypes, os, sys
sys.argv[0] = sys.argv[1]
import oversmooth, numpy
numpy.linalg.solve(numpy.eye(2), numpy.ones(2))
counts = set()
for line in open("/proc/self/maps"):
    path = line.split()[-1]
    if "openblas" not in os.path.basename(path).lower():
        continue
    lib = ctypes.CDLL(path)
    for name in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
                 "openblas_get_num_threads64_", "openblas_get_num_threads"):
        if hasattr(lib, name):
            counts.add(getattr(lib, name)())
            break
print("ENV=" + os.environ.get("OPENBLAS_NUM_THREADS", "") + ";", "THREADS=" + str(sorted(counts)))
"""


def _run(program: str, **given: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env.update(given)
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, program],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout


needs_proc = pytest.mark.skipif(
    not os.path.exists("/proc/self/maps"), reason="reads the loaded libraries from /proc"
)


@needs_proc
def test_the_command_runs_openblas_on_one_thread():
    out = _run("/usr/local/bin/oversmooth")
    assert "ENV=1;" in out
    if "THREADS=[]" not in out:  # numpy built on another BLAS: only the variable is checked
        assert "THREADS=[1]" in out


@needs_proc
def test_the_users_openblas_setting_is_kept():
    out = _run("oversmooth", OPENBLAS_NUM_THREADS="2")
    assert "ENV=2;" in out
    if "THREADS=[]" not in out and (os.cpu_count() or 1) >= 2:
        assert "THREADS=[2]" in out


def test_importing_the_package_sets_nothing():
    out = _run("python")
    assert "ENV=;" in out
