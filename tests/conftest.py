"""Shared fixtures: tiny hand-checkable graphs and the Planetoid raw files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# The command's OpenMP setting (oversmooth.cli.main.OPENMP_DEFAULTS), made before torch loads
# its OpenMP runtime in this process: the tests run the commands in-process, after torch is
# loaded, where main() sets it too late.  With two xdist workers of two torch threads each on 2
# cores, idle threads spinning 300,000 times took turns from the working ones: the main
# command's test took 66 s in the suite against 2 s alone, the whole suite 260 s against 137 s.
# Spinning changes no number.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "3000")
# Under pytest-xdist (the README's `pytest -n 2`), one torch thread per worker, and per command
# a test starts: the two workers fill the two cores, where two threads each took turns.  The
# suite measured 312 s with two threads per worker and 275 s with one.  Tests of several threads
# set their own count (torch.set_num_threads, or OMP_NUM_THREADS in a subprocess's env).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared"
PLANETOID_RAW = SHARED / "data" / "planetoid"


def undirected(pairs: list[tuple[int, int]]) -> torch.Tensor:
    """edge_index with both directions of every pair."""
    src = [a for a, b in pairs] + [b for a, b in pairs]
    dst = [b for a, b in pairs] + [a for a, b in pairs]
    return torch.tensor([src, dst], dtype=torch.long)


def tiny_graphs() -> dict[str, tuple[torch.Tensor, torch.Tensor | None, int]]:
    """name -> (edge_index, edge_weight, num_nodes)."""
    path = undirected([(0, 1), (1, 2), (2, 3), (3, 4)])
    cycle = undirected([(i, (i + 1) % 5) for i in range(5)])
    complete = undirected([(i, j) for i in range(4) for j in range(i + 1, 4)])
    star = undirected([(0, i) for i in range(1, 6)])
    weighted_ei = undirected([(0, 1), (1, 2), (2, 0), (2, 3)])
    weights = torch.tensor([0.5, 2.0, 1.0, 3.0] * 2, dtype=torch.float64)
    isolated = undirected([(0, 1), (1, 2)])  # node 3 has no edge
    directed = torch.tensor([[0, 1, 2, 2, 3], [1, 2, 0, 3, 0]])
    return {
        "path": (path, None, 5),
        "cycle": (cycle, None, 5),
        "complete": (complete, None, 4),
        "star": (star, None, 6),
        "weighted": (weighted_ei, weights, 4),
        "isolated": (isolated, None, 4),
        "directed": (directed, None, 4),
    }


@pytest.fixture(params=list(tiny_graphs()))
def tiny_graph(request):
    return request.param, *tiny_graphs()[request.param]


@pytest.fixture(scope="session")
def planetoid_root(tmp_path_factory) -> Path:
    """A writable copy of the shared Planetoid raw files (PyG writes processed/ beside raw/)."""
    if not PLANETOID_RAW.is_dir():
        pytest.skip(f"Planetoid raw files not found at {PLANETOID_RAW}")
    root = tmp_path_factory.mktemp("planetoid")
    for name in ("Cora", "CiteSeer"):
        shutil.copytree(PLANETOID_RAW / name / "raw", root / name / "raw")
    return root


@pytest.fixture(scope="session")
def cora_planetoid(planetoid_root):
    from torch_geometric.datasets import Planetoid

    return Planetoid(root=str(planetoid_root), name="Cora")[0]


class held_folder:
    """A process that holds the claim on ``out`` (``oversmooth.outputs.claim_folder``) until the
    block ends; ``.pid`` is its PID."""

    def __init__(self, out: str | Path) -> None:
        self.out = str(out)

    def __enter__(self) -> held_folder:
        import subprocess
        import sys

        code = (
            "import time\nfrom oversmooth.outputs import claim_folder\n"
            f"with claim_folder({self.out!r}, False):\n"
            "    print('held', flush=True)\n    time.sleep(120)\n"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "held"
        self.pid = self.proc.pid
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()
