"""glibc malloc settings (oversmooth.allocator): freed temporaries reused without page faults,
the user's own settings left alone.  Each case runs in a fresh interpreter: the settings are
process-wide."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

glibc = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="mallopt is glibc's",
)

# two live few-MiB temporaries a step, as a layer of a deep forward makes them
_FAULTS = """
import resource, sys, torch
from oversmooth.allocator import keep_freed_memory
print(keep_freed_memory())
x = torch.randn(10_000, 8, dtype=torch.float64)
index = torch.randint(0, 10_000, (60_000,))
def step():
    a, b = x.index_select(0, index), x.index_select(0, index)
    return a.mul_(b).sum(1)
for _ in range(3):
    step()
counts = []
for _ in range(3):  # the fewest of three rounds: the host may reclaim a page now and then
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        step()
    counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(min(counts))
"""


def _run(code: str, **env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_"))}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


@glibc
def test_freed_temporaries_are_reused_without_page_faults():
    applied, faults = _run(_FAULTS)
    assert applied == "True"
    # by default glibc maps and unmaps such blocks: about 1,900 faults in these 50 steps
    # (torch 2.13, glibc 2.36); kept, none
    assert int(faults) < 100, f"{faults} page faults in 50 steps"


@glibc
@pytest.mark.parametrize(
    "env",
    [
        {"MALLOC_MMAP_THRESHOLD_": "1048576"},
        {"MALLOC_TRIM_THRESHOLD_": "1048576"},
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"},
    ],
)
def test_the_users_own_settings_are_kept(env):
    code = "from oversmooth.allocator import keep_freed_memory; print(keep_freed_memory())"
    assert _run(code, **env) == ["False"]


def test_without_glibc_it_does_nothing(monkeypatch):
    import ctypes

    from oversmooth import allocator

    def missing(name: str) -> None:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert allocator.mallopt(1 << 20, 1 << 20) is False


@glibc
def test_the_command_sets_them_before_any_work():
    # the entry point calls it first: a command then runs with the thresholds fixed
    # (a stopped command leaves without the interpreter's teardown: the call is said as it
    # happens, and the stop's exit code, 130, is the process's)
    code = (
        "import sys; from unittest import mock; import oversmooth.cli.main as m\n"
        "called = lambda: print('kept', flush=True)\n"
        "with mock.patch.object(m, 'keep_freed_memory', side_effect=called), "
        "mock.patch.object(m, 'new_app', side_effect=KeyboardInterrupt):\n"
        "    m.main()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (done.returncode, done.stdout.split()) == (130, ["kept"]), done.stderr
