"""LayerState: one node pass and one edge pass per state, the same numbers on every path."""

from __future__ import annotations

import math

import pytest
import torch

from oversmooth.graph import GraphOperator
from oversmooth.metrics import kernels
from oversmooth.metrics.state import LayerState, Workspace
from tests.conftest import undirected


def _state(x: torch.Tensor, op: GraphOperator | None = None) -> LayerState:
    return LayerState(x.to(torch.float64), op, x.dtype in kernels.NARROW)


@pytest.mark.parametrize("scale", [1.0, 1e-150, 1e150])
def test_node_pass_fast_path_gives_the_scaled_numbers_bit_for_bit(monkeypatch, scale):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(50, 6, dtype=torch.float64, generator=gen) * scale
    fast = _state(x)
    values = (fast.feature_norm, fast.poison)
    assert fast.fast == (scale == 1.0)  # squares of 1e+-150 leave [2**-800, 2**800]
    monkeypatch.setattr(kernels, "host_reads_free", lambda x: False)  # a GPU's path
    scaled = _state(x)
    assert not scaled.fast
    assert torch.equal(values[0], scaled.feature_norm)
    assert torch.equal(values[1], scaled.poison) and values[1].item() == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_node_pass_poison_on_every_path(monkeypatch, dtype, bad):
    x = torch.ones(5, 3, dtype=dtype)
    x[4, 1] = bad  # node 4 has no edge: only the poison can carry it
    op = GraphOperator(undirected([(0, 1), (1, 2), (2, 3)]), num_nodes=5)
    for host in (True, False):
        monkeypatch.setattr(kernels, "host_reads_free", lambda x, host=host: host)
        s = _state(x, op)
        assert math.isnan(s.poison.item())
        assert math.isnan(s.edge_sum.item())
        norm = s.feature_norm.item()
        assert math.isnan(norm) if math.isnan(bad) else norm == math.inf


def test_edge_pass_is_done_once_and_its_laplacian_can_be_dropped():
    op = GraphOperator(undirected([(0, 1), (1, 2), (2, 0), (2, 3)]), num_nodes=4)
    s = _state(torch.randn(4, 2, dtype=torch.float64))
    s = LayerState(s.x, op)
    lap, total = s.laplacian, s.edge_sum
    assert s.laplacian is lap and s.edge_sum is total  # cached
    s.drop_laplacian()
    assert s.edge_sum is total and torch.equal(s.laplacian, lap)  # recomputed the same


def test_workspace_alternates_two_buffers_so_the_previous_state_survives():
    ws = Workspace()
    x = torch.zeros(4, 3)
    a, b, c = ws.state(x), ws.state(x), ws.state(x)
    assert a.data_ptr() != b.data_ptr() and a.data_ptr() == c.data_ptr()
    assert a.dtype == torch.float64 and tuple(a.shape) == (4, 3)
    assert ws.laplacian(x) is not None and ws.laplacian(torch.zeros(5, 3)) is None
    y = torch.zeros(5, 3)  # another shape: new buffers
    assert tuple(ws.state(y).shape) == (5, 3)


def test_a_state_known_finite_on_the_host_adds_no_poison(monkeypatch):
    """A wide CPU state whose sum of squares was read (the fast path) is known finite: its
    values are returned as they are; a narrow state (never read) and a GPU's path add the
    poison, which changes nothing but NaN/Inf."""
    x = torch.randn(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    value = torch.tensor(0.25, dtype=torch.float64)
    s = _state(x)
    assert s.clean and s.poisoned(value) is value
    narrow = _state(x.float())
    assert not narrow.clean and torch.equal(narrow.poisoned(value), value)
    x[5, 2] = float("inf")
    assert not _state(x).clean and math.isnan(_state(x).poisoned(value).item())
    monkeypatch.setattr(kernels, "host_reads_free", lambda x: False)  # a GPU's path
    s = _state(x[:5])
    assert not s.clean and torch.equal(s.poisoned(value), value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])  # narrow: norms' path
def test_cosine_gradient_at_a_zero_row_does_not_grow_with_the_other_row(dtype):
    """The row norms come from vector_norm without autograd; with it, from the square root of
    the sums of squares, whose gradient at a zero row is NaN.  vector_norm's gradient there is
    0, and the narrow path's 0 / 1 then gave a zero row of float32 x the gradient y_i / n:
    1500 for ||y_i|| = 5000, 1.5 for ||y_i|| = 5 (an audit)."""
    from oversmooth.metrics import mean_cosine_similarity

    grads = []
    for scale in (1.0, 1000.0):
        x = torch.tensor([[0.0, 0.0], [1.0, 2.0]], dtype=dtype, requires_grad=True)
        y = torch.tensor([[3.0, 4.0], [2.0, -1.0]], dtype=dtype) * scale
        mean_cosine_similarity(x, y).backward()
        assert x.grad is not None
        row = x.grad[0]
        assert not (torch.isfinite(row).all() and row.abs().max() > 1.0)  # no y_i / n
        grads.append(x.grad[1].clone())  # the other row: cos' own derivative, scale-free
    assert torch.allclose(grads[0], grads[1], rtol=1e-5)
    with torch.no_grad():  # no autograd: vector_norm, the same value
        x = torch.tensor([[0.0, 0.0], [1.0, 2.0]], dtype=dtype)
        assert float(mean_cosine_similarity(x, y)) == pytest.approx(0.0, abs=1e-7)
