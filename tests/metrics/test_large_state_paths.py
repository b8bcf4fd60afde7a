"""The metric paths of a large state (issue 30): row dot products and the similarity's unit rows
in blocks of rows, and the Laplacian energy summed row by row as the edge pass finishes each
chunk, without forming ``Delta x`` whole.  Each test lowers the size threshold so that a small
input takes the large-input path, and compares with the whole-array path."""

from __future__ import annotations

import math

import pytest
import torch

from oversmooth import graph as G
from oversmooth import probe as P
from oversmooth.graph import GraphOperator
from oversmooth.metrics import kernels as K
from oversmooth.metrics import state as S
from oversmooth.metrics.energies import laplacian_energy


@pytest.mark.parametrize("shape", [(1001, 32), (777, 5), (40, 300), (3, 1), (0, 8), (6, 0)])
def test_row_dots_are_each_rows_dot_product(shape):
    """Each row's dot product to a few units in the last place of an exact sum (math.fsum of
    the exact float64 products' halves), on contiguous and strided inputs of any shape."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    y = torch.randn(shape, generator=gen, dtype=torch.float64)
    strided = torch.randn(shape[::-1], generator=gen, dtype=torch.float64).t()
    for a, b in [(x, y), (x, x), (strided, y)]:
        got = K.row_dots(a, b)
        assert got.shape == (shape[0],) and got.dtype == torch.float64
        for i in range(shape[0]):
            exact = math.fsum(float(p) for p in (a[i].double() * b[i].double()))
            scale = math.fsum(abs(float(p)) for p in (a[i] * b[i]))
            assert abs(float(got[i]) - exact) <= 4 * shape[1] * 2**-53 * scale


@pytest.mark.parametrize("narrow", [False, True])
def test_kept_unit_rows_in_blocks_equal_the_whole(monkeypatch, narrow):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(500, 8, generator=gen, dtype=torch.float64)
    x[3] = 0.0  # a zero row stays zero
    if not narrow:
        x[7] *= 1e-300  # rows whose norms under- or overflow: the scaled path
        x[9] *= 1e300
    else:
        x = x.float().double()
    whole = K.unit_rows(x, narrow).to(torch.float32)
    monkeypatch.setattr(P, "UNIT_BLOCK_VALUES", 5 * 8)
    blocks = P.unit_rows_as(x, narrow, torch.float32)
    assert torch.equal(blocks, whole)


def _hub_graph(n: int, seed: int) -> torch.Tensor:
    """Random edges and one node with many in-edges, whose run is cut by several chunks."""
    gen = torch.Generator().manual_seed(seed)
    edges = torch.randint(0, n, (2, 8 * n), generator=gen)
    hub = torch.stack([torch.randint(0, n, (3 * n,), generator=gen), torch.full((3 * n,), 5)])
    return torch.cat([edges, hub], 1)


@pytest.mark.parametrize("weighted", [False, True])
def test_streamed_laplacian_energy_equals_the_whole_laplacian(monkeypatch, weighted):
    n = 3000
    ei = _hub_graph(n, seed=2)
    gen = torch.Generator().manual_seed(3)
    w = torch.rand(ei.size(1), generator=gen, dtype=torch.float64) + 0.1 if weighted else None
    op = GraphOperator(ei, w, num_nodes=n)
    x = 5.0 + 1e-6 * torch.randn(n, 16, generator=gen, dtype=torch.float64)  # near-constant
    monkeypatch.setattr(G, "WHOLE_VALUES", 0)  # several chunks
    monkeypatch.setattr(G, "CHUNK_VALUES", 2048)
    monkeypatch.setattr(S, "KEEP_VALUES", 0)  # every state streams
    monkeypatch.setattr(K, "PAIRS_VALUES", 0)  # by target runs, not by pairs
    assert len(list(op.runs.chunks(16))) > 10
    lap, total = K.edge_pass(x, op)  # Delta x whole, by the same chunks
    whole = torch.dot(lap.reshape(-1), lap.reshape(-1)) / n
    state = S.LayerState(x, op)
    assert state.streams
    streamed = laplacian_energy(x, op)
    torch.testing.assert_close(streamed, whole, rtol=1e-13, atol=0)
    assert state.laplacian_squares / n == pytest.approx(float(whole), rel=1e-13)
    assert torch.equal(state.edge_sum, total)
    assert state._lap is None  # Delta x was never formed
    torch.testing.assert_close(state.laplacian, lap, rtol=0, atol=0)  # asked for: formed


@pytest.mark.parametrize("shape", [(2708, 32), (50, 7), (1, 1), (0, 4)])
def test_squared_total_is_the_exact_sum_and_commutes_with_powers_of_two(monkeypatch, shape):
    """One dot product below K.DOT_VALUES, the rows' sums above it (and for strided states):
    each within (n - 1) units in the last place of math.fsum of the exact squares, and scaling
    the state by 2^k scales the total by exactly 4^k (the scaled path of feature_norm gives
    the fast path's numbers)."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    exact = math.fsum(v * v for v in x.reshape(-1).tolist())
    bound = max(x.numel(), 1) * 2**-53 * exact
    dot = K.squared_total(x)
    assert abs(float(dot) - exact) <= bound
    assert torch.equal(K.squared_total(x * 2.0**-300), dot * 2.0**-600)
    strided = x.t().contiguous().t()
    assert abs(float(K.squared_total(strided)) - exact) <= bound
    monkeypatch.setattr(K, "DOT_VALUES", 0)  # the rows' sums
    assert abs(float(K.squared_total(x)) - exact) <= bound
