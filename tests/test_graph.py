"""GraphOperator's construction: the same operator whatever the edge order, and what it
keeps in memory."""

from __future__ import annotations

import pytest
import torch

from oversmooth import data as D
from oversmooth.graph import GraphOperator
from oversmooth.metrics import dirichlet_energy, laplacian_energy


def _shuffled(edge_index: torch.Tensor, weight: torch.Tensor | None, seed: int = 0):
    perm = torch.randperm(edge_index.size(1), generator=torch.Generator().manual_seed(seed))
    return edge_index[:, perm], None if weight is None else weight[perm]


def _dense(op: GraphOperator) -> torch.Tensor:
    """P as a dense matrix (its CSR product with the identity: every entry exact)."""
    return op.propagate(torch.eye(op.num_nodes, dtype=torch.float64))


def _same_operator(a: GraphOperator, b: GraphOperator) -> None:
    assert torch.equal(_dense(a), _dense(b))  # bit for bit
    assert torch.equal(a.degree, b.degree)
    assert torch.equal(a.runs.weight.contiguous(), b.runs.weight.contiguous())


def test_sorted_and_shuffled_edge_lists_give_the_same_operator():
    g = D.csbm(n=500, degree=6, seed=1)  # sorted by (target, source), no repeats
    n = g.num_nodes
    sorted_op = GraphOperator(g.edge_index, num_nodes=n)
    shuffled_op = GraphOperator(_shuffled(g.edge_index, None)[0], num_nodes=n)
    _same_operator(sorted_op, shuffled_op)  # unit weights: degrees are exact counts
    x = torch.randn(n, 8, dtype=torch.float64)
    for metric in (laplacian_energy, dirichlet_energy):
        assert torch.equal(metric(x, sorted_op), metric(x, shuffled_op))


def test_weighted_sorted_edges_are_the_coalesced_operator():
    g = D.csbm(n=400, degree=6, seed=4)
    n = g.num_nodes
    weight = torch.rand(g.num_edges, dtype=torch.float64) + 0.5
    op = GraphOperator(g.edge_index, weight, num_nodes=n)
    src, dst = g.edge_index
    inv = 1.0 / op.degree
    reference = torch.zeros(n, n, dtype=torch.float64)
    reference[dst, src] = weight * inv[dst]  # no repeated edge: each entry set once
    assert torch.equal(_dense(op), reference)
    assert torch.equal(op.runs.weight, weight)
    shuffled = GraphOperator(*_shuffled(g.edge_index, weight), num_nodes=n)  # other sum order
    x = torch.randn(n, 8, dtype=torch.float64)
    for metric in (laplacian_energy, dirichlet_energy):
        assert torch.allclose(metric(x, op), metric(x, shuffled), rtol=1e-13, atol=0)


def test_repeated_edges_merge_whatever_the_order():
    ei = torch.tensor([[1, 1, 2, 0, 2], [0, 0, 0, 1, 1]])  # 1 -> 0 twice
    op = GraphOperator(ei, num_nodes=3)
    assert op.runs.weight.tolist() == [2.0, 1.0, 1.0, 1.0]  # merged: W's entry is 2
    assert op.degree.tolist() == [3.0, 2.0, 0.0]
    assert _dense(op)[0].tolist() == [0.0, 2 / 3, 1 / 3]
    assert not op.runs.unit


def test_an_unweighted_sorted_graph_keeps_no_copy_of_its_edges():
    g = D.csbm(n=300, degree=6, seed=2)
    op = GraphOperator(g.edge_index, num_nodes=g.num_nodes)
    # the CSR columns and rows are the edge list's own rows; unit weights a broadcast 1
    assert op.runs.col.data_ptr() == op.edge_index[0].data_ptr()
    assert op.runs.row.data_ptr() == op.edge_index[1].data_ptr()
    assert op.edge_weight.stride() == (0,) and torch.equal(
        op.edge_weight, torch.ones(g.num_edges, dtype=torch.float64)
    )
    with pytest.raises(RuntimeError):
        op.edge_weight.add_(1.0)  # a broadcast cannot be written into by mistake
    expected = 1.0 / op.degree[op.edge_index[1]]
    assert torch.equal(op.edge_prob, expected)
    moved = op.to("meta")
    assert moved.edge_weight.stride() == (0,) and moved.edge_weight.shape == op.edge_weight.shape


def test_self_loops_and_weights_still_add_up():
    ei = torch.tensor([[0, 1], [1, 0]])
    op = GraphOperator(ei, torch.tensor([2.0, 3.0]), num_nodes=3, self_loops=True)
    assert op.degree.tolist() == [4.0, 3.0, 1.0]  # 3 + loop, 2 + loop, loop
    assert torch.allclose(op.edge_prob, torch.tensor([2 / 3, 3 / 4, 1 / 4, 1 / 3, 1.0]).double())


def test_small_weights_give_the_operator_of_their_ratios_and_subnormal_ones_are_refused():
    """Degrees were clamped at 1e-300: uniform weights of 1e-305 gave P rows summing to 1e-5
    and a Laplacian energy 1e-40 of the truth; weights of 1e-320 (subnormal) have lost their
    digits."""
    from oversmooth import laplacian_energy, normalized_dirichlet_energy

    ei = torch.tensor([[0, 1, 1, 2, 2, 0], [1, 0, 2, 1, 0, 2]])
    x = torch.tensor([[0.0], [1.0], [3.0]], dtype=torch.float64)
    plain = GraphOperator(ei)
    for w in (1e-301, 1e-305, 3e-308):
        g = GraphOperator(ei, edge_weight=torch.full((6,), w, dtype=torch.float64))
        assert float(laplacian_energy(x, g)) == pytest.approx(float(laplacian_energy(x, plain)))
        ratio = float(normalized_dirichlet_energy(x, g)) / float(
            normalized_dirichlet_energy(x, plain)
        )
        assert ratio == pytest.approx(1.0)
    with pytest.raises(
        ValueError, match="weights as small as 9.99989e-321, below the smallest normal"
    ):
        GraphOperator(ei, edge_weight=torch.full((6,), 1e-320, dtype=torch.float64))
