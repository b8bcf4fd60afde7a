"""Every metric against a dense reference on tiny graphs, closed forms and bad input."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.linalg
import torch

import oversmooth.metrics as M
from oversmooth.graph import GraphOperator

from tests import reference as ref
from tests.conftest import undirected


def _features(n: int, d: int = 3, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64)


def test_every_metric_matches_dense_reference(tiny_graph):
    name, ei, ew, n = tiny_graph
    x = _features(n)
    w = ref.dense_weights(ei, ew, n)
    xn = ref.to_np(x)
    op = GraphOperator(ei, ew, num_nodes=n)
    rtol = 1e-12
    assert M.dirichlet_energy(x, op).item() == pytest.approx(ref.dirichlet(xn, w), rel=rtol)
    assert M.laplacian_energy(x, op).item() == pytest.approx(ref.laplacian_energy(xn, w), rel=rtol)
    assert M.laplacian_energy_degree(x, op).item() == pytest.approx(
        ref.laplacian_energy(xn, w, "degree"), rel=rtol
    )
    assert M.mean_average_distance(x, op).item() == pytest.approx(
        ref.mad_neighbors(xn, w), rel=rtol
    )
    assert M.mean_average_distance_global(x).item() == pytest.approx(ref.mad_global(xn), rel=rtol)
    assert M.effective_rank(x).item() == pytest.approx(ref.effective_rank(xn), rel=1e-10)
    rayleigh = ref.laplacian_energy(xn, w) / (np.sum(xn**2) / n)  # scale-invariant E2
    assert M.rayleigh_energy(x, op).item() == pytest.approx(rayleigh, rel=rtol)
    assert M.rayleigh_energy(1e5 * x, op).item() == pytest.approx(rayleigh, rel=rtol)
    if ew is None:  # the survey convention ignores weights; the reference counts each edge once
        assert M.rusch_dirichlet_energy(x, op).item() == pytest.approx(ref.rusch(xn, w), rel=rtol)
    # an edge_index with weights gives the same as the prebuilt operator
    assert M.dirichlet_energy(x, ei, edge_weight=ew).item() == pytest.approx(
        M.dirichlet_energy(x, op).item(), rel=1e-15
    )


def test_higher_order_energies_match_dense_powers(tiny_graph):
    name, ei, ew, n = tiny_graph
    x = _features(n, 2, seed=1)
    w = ref.dense_weights(ei, ew, n)
    lap = ref.dense_laplacian(w)
    d = w.sum(1)
    xn = ref.to_np(x)
    for m in range(1, 6):
        y = np.linalg.matrix_power(lap, m // 2) @ xn
        if m % 2:
            expected = ref.dirichlet(y, w)
        else:
            expected = float((d * np.sum(y**2, 1)).sum() / n)
        assert M.energy(x, ei, order=m, edge_weight=ew).item() == pytest.approx(
            expected, rel=1e-11, abs=1e-300
        )
    assert M.energy(x, ei, 1, edge_weight=ew).item() == pytest.approx(
        M.dirichlet_energy(x, ei, ew).item()
    )
    assert M.energy(x, ei, 2, "counting", edge_weight=ew).item() == pytest.approx(
        M.laplacian_energy(x, ei, edge_weight=ew).item()
    )


def test_return_type_is_0d_float64_on_input_device():
    ei = undirected([(0, 1), (1, 2)])
    x = torch.randn(3, 4)  # float32 in, float64 out
    for value in (
        M.dirichlet_energy(x, ei),
        M.laplacian_energy(x, ei),
        M.energy(x, ei, 3),
        M.rusch_dirichlet_energy(x, ei),
        M.mean_average_distance(x, ei),
        M.mean_average_distance_global(x),
        M.effective_rank(x),
        M.feature_norm(x),
        M.mean_cosine_similarity(x, x),
    ):
        assert value.dim() == 0 and value.dtype == torch.float64 and value.device == x.device


def test_constant_features_have_zero_energy(tiny_graph):
    name, ei, ew, n = tiny_graph
    x = torch.full((n, 4), 3.25)
    op = GraphOperator(ei, ew, num_nodes=n)
    assert M.dirichlet_energy(x, op).item() == 0.0
    assert M.laplacian_energy(x, op).item() == 0.0
    assert M.laplacian_energy_degree(x, op).item() == 0.0
    for m in (1, 2, 3, 4):
        assert M.energy(x, op, m).item() == 0.0
    assert M.mean_average_distance(x, op).item() == pytest.approx(0.0, abs=1e-15)
    assert M.effective_rank(x).item() == 0.0


@pytest.mark.parametrize("name", ["path", "cycle", "complete", "star", "weighted", "isolated"])
def test_integration_by_parts(name):
    """E1 = (1/n) <-Delta X, X>_mu on symmetric graphs."""
    from tests.conftest import tiny_graphs

    ei, ew, n = tiny_graphs()[name]
    x = _features(n, 3, seed=2)
    op = GraphOperator(ei, ew, num_nodes=n)
    inner = -(op.degree.unsqueeze(1) * op.laplacian(x) * x).sum() / n
    assert M.dirichlet_energy(x, op).item() == pytest.approx(inner.item(), rel=1e-12)


def test_repeated_propagation_decays_at_the_spectral_gap():
    """On a connected non-bipartite graph E2(P^{k+1}X) / E2(P^k X) -> (1 - lambda)^2."""
    # a barbell (two K5 joined by a 3-node path) with self loops: connected,
    # not bipartite, small spectral gap that dominates the decay.
    pairs = [(i, j) for i in range(5) for j in range(i + 1, 5)]
    pairs += [(i + 8, j + 8) for i in range(5) for j in range(i + 1, 5)]
    pairs += [(4, 5), (5, 6), (6, 7), (7, 8)]
    ei = undirected(pairs)
    n = 13
    op = GraphOperator(ei, num_nodes=n, self_loops=True)
    w = ref.dense_weights(ei, None, n, self_loops=True)
    p = w / w.sum(1, keepdims=True)
    # eigenvalues of I - P are real (P is similar to a symmetric matrix)
    lam = np.sort(np.real(scipy.linalg.eigvals(np.eye(n) - p)))
    nonzero = lam[lam > 1e-10]
    gap = nonzero.min()
    assert abs(1 - gap) > np.abs(1 - nonzero).max() - 1e-12  # the gap mode is the slowest one
    x = _features(n, 2, seed=3)
    energies = []
    for _ in range(120):
        energies.append(M.laplacian_energy(x, op).item())
        x = op.propagate(x)
    ratio = energies[-1] / energies[-2]
    assert ratio == pytest.approx((1 - gap) ** 2, rel=1e-6)


def test_nearly_constant_signal_is_resolved_in_float64():
    ei = undirected([(i, (i + 1) % 50) for i in range(50)] + [(0, 25)])
    z = _features(50, 8, seed=4)
    eps = 1e-7
    op = GraphOperator(ei, num_nodes=50)
    expected = eps**2 * M.laplacian_energy(z, op).item()
    assert 1e-16 < expected < 1e-12
    x = 1.0 + eps * z  # float64 input: 1 + 1e-7 z is representable
    assert M.laplacian_energy(x, op).item() == pytest.approx(expected, rel=1e-6)
    assert M.dirichlet_energy(x, op).item() == pytest.approx(
        eps**2 * M.dirichlet_energy(z, op).item(), rel=1e-6
    )
    # float32 input of the same tiny scale: accumulation in float64 keeps it
    small = (eps * z).float()
    assert M.laplacian_energy(small, op).item() == pytest.approx(
        M.laplacian_energy(small.double(), op).item(), rel=1e-12
    )


def test_relative_energy():
    r = M.relative_energy([1.0, 2.0, 1.0, 0.0, 0.0])
    assert math.isnan(r[0].item())
    assert r[1:3].tolist() == [1.0, -0.5]
    assert r[3].item() == -1.0
    assert math.isnan(r[4].item())  # 0 / 0
    assert M.relative_energy(torch.tensor([0.0, 1.0]))[1].item() == math.inf
    # python floats keep float64 precision (no detour through float32)
    assert M.relative_energy([1.0, 1.0 + 1e-12])[1].item() == pytest.approx(1e-12, rel=1e-3)
    with pytest.raises(ValueError, match="energies"):
        M.relative_energy(torch.ones(2, 2, 2))


def test_relative_energy_paths_agree_bit_for_bit_without_warnings():
    """The 1-D CPU path (numpy ufuncs) against the general torch path (one column), on values
    with zeros, infinities and NaNs; no numpy warning escapes, the input is not written, and
    a tensor that requires grad keeps its graph."""
    g = torch.Generator().manual_seed(11)
    e = torch.rand(300, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-30, 30, (300,))
    e[[5, 6, 40, 41, 42]] = 0.0
    e[[70, 71]] = math.inf
    e[100] = math.nan
    e[120] = -2.0
    before = e.clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fast = M.relative_energy(e)
    general = M.relative_energy(e[:, None])[:, 0]
    unchanged = dict(rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(e, before, **unchanged)
    assert fast.dtype == torch.float64 and fast.shape == e.shape
    same = (fast == general) | (fast.isnan() & general.isnan())
    assert bool(same.all())
    fast[1] = 123.0
    torch.testing.assert_close(e, before, **unchanged)  # the result owns its memory
    leaf = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64, requires_grad=True)
    r = M.relative_energy(leaf)
    r[1:].sum().backward()
    assert leaf.grad is not None and r[1:].tolist() == [1.0, 1.0]


def test_layer_similarity_and_cosine():
    g = torch.Generator().manual_seed(5)
    states = [torch.randn(7, 4, generator=g) for _ in range(5)]
    sim = M.layer_similarity(states)
    assert sim.shape == (5, 5) and sim.dtype == torch.float64
    assert torch.allclose(sim, sim.T, atol=1e-14)
    assert torch.allclose(sim.diagonal(), torch.ones(5, dtype=torch.float64))
    for s in range(5):
        for t in range(5):
            expected = np.mean(
                [ref.cos(ref.to_np(states[s][i]), ref.to_np(states[t][i])) for i in range(7)]
            )
            assert sim[s, t].item() == pytest.approx(expected, rel=1e-10, abs=1e-14)
    assert M.mean_cosine_similarity(states[0], states[1]).item() == pytest.approx(
        sim[0, 1].item(), rel=1e-12
    )
    assert torch.allclose(M.layer_similarity(torch.stack(states)), sim)
    with pytest.raises(ValueError, match=r"states\[1\]"):
        M.layer_similarity([torch.randn(3, 2), torch.randn(4, 2)])


def test_feature_norm_and_rusch_closed_forms():
    ei = undirected([(0, 1), (1, 2), (2, 3)])
    x = _features(4, 3, seed=6)
    assert M.feature_norm(x).item() == pytest.approx(math.sqrt((x**2).sum().item() / 4))
    assert M.rusch_dirichlet_energy(x, ei).item() == pytest.approx(
        math.sqrt(2 * M.dirichlet_energy(x, ei).item())
    )


def test_isolated_node_gives_no_nan():
    ei = undirected([(0, 1)])
    x = _features(3, 2)
    op = GraphOperator(ei, num_nodes=3)
    assert op.degree.tolist() == [1.0, 1.0, 0.0]
    assert op.propagate(x)[2].abs().sum().item() == 0.0  # P row of an isolated node is 0
    assert op.laplacian(x)[2].abs().sum().item() == 0.0
    for fn in (M.dirichlet_energy, M.laplacian_energy, M.mean_average_distance):
        assert torch.isfinite(fn(x, op))
    assert torch.isfinite(M.laplacian_energy_degree(x, op))


def test_cora_all_metrics_match_dense_reference(cora_planetoid):
    data = cora_planetoid
    n = data.num_nodes
    g = torch.Generator().manual_seed(7)
    x = torch.randn(n, 32, generator=g)
    op = GraphOperator(data.edge_index, num_nodes=n)
    # dense references with numpy (vectorised; the per-pair loops are too slow at n = 2708)
    src, dst = data.edge_index.numpy()
    w = np.zeros((n, n))
    np.add.at(w, (dst, src), 1.0)
    xn = x.double().numpy()
    d = w.sum(1)
    lap = np.where(d[:, None] > 0, w / np.maximum(d, 1)[:, None], 0) - np.diag(
        (d > 0).astype(float)
    )
    lx = lap @ xn
    sqdist = (xn**2).sum(1)[:, None] + (xn**2).sum(1)[None, :] - 2 * xn @ xn.T
    dir_ref = 0.5 * (w * sqdist).sum() / n
    assert M.dirichlet_energy(x, op).item() == pytest.approx(dir_ref, rel=1e-9)
    assert M.laplacian_energy(x, op).item() == pytest.approx((lx**2).sum() / n, rel=1e-12)
    assert M.laplacian_energy_degree(x, op).item() == pytest.approx(
        (d * (lx**2).sum(1)).sum() / n, rel=1e-12
    )
    assert M.energy(x, op, 3).item() == pytest.approx(
        0.5
        * (w * (((lx**2).sum(1))[:, None] + ((lx**2).sum(1))[None, :] - 2 * lx @ lx.T)).sum()
        / n,
        rel=1e-8,
    )
    u = xn / np.linalg.norm(xn, axis=1, keepdims=True)
    cosm = u @ u.T
    mad_ref = (((w > 0) * (1 - cosm)).sum(1) / (w > 0).sum(1)).mean()
    assert M.mean_average_distance(x, op).item() == pytest.approx(mad_ref, rel=1e-12)
    off = ~np.eye(n, dtype=bool)
    assert M.mean_average_distance_global(x).item() == pytest.approx(
        (1 - cosm)[off].mean(), rel=1e-12
    )
    assert M.rusch_dirichlet_energy(x, op).item() == pytest.approx(
        np.sqrt((w * sqdist).sum() / n), rel=1e-9
    )
    assert M.effective_rank(x).item() == pytest.approx(ref.effective_rank(xn), rel=1e-10)


# ----------------------------------------------------------------------------- bad input


def test_bad_x():
    ei = undirected([(0, 1)])
    with pytest.raises(ValueError, match="x: expected a 2-D tensor"):
        M.laplacian_energy(torch.ones(2), ei)
    with pytest.raises(ValueError, match="x: expected a floating-point"):
        M.laplacian_energy(torch.ones(2, 2, dtype=torch.long), ei)
    op = GraphOperator(ei, num_nodes=2)
    with pytest.raises(ValueError, match="x: expected 2 rows .* received 3"):
        M.dirichlet_energy(torch.ones(3, 2), op)
    with pytest.raises(TypeError, match="x: expected a torch.Tensor"):
        M.dirichlet_energy([[1.0]], op)


def test_bad_edge_index_and_weights():
    x = torch.ones(3, 2)
    with pytest.raises(
        ValueError, match=r"edge_index: node indices must lie in \[0, 2\].*\[0, 5\]"
    ):
        M.dirichlet_energy(x, torch.tensor([[0, 5], [1, 0]]))
    with pytest.raises(
        ValueError, match=r"edge_index: expected shape \[2, num_edges\], received \[3, 2\]"
    ):
        M.dirichlet_energy(x, torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="edge_index: expected an integer"):
        M.dirichlet_energy(x, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="read as a dense adjacency"):
        M.dirichlet_energy(x, torch.zeros(2, 2))
    with pytest.raises(ValueError, match="edge_index: node indices"):
        GraphOperator(torch.tensor([[-1], [0]]), num_nodes=2)
    with pytest.raises(
        ValueError, match="edge_weight: expected non-negative weights, received a minimum of -1"
    ):
        GraphOperator(torch.tensor([[0], [1]]), torch.tensor([-1.0]))
    with pytest.raises(ValueError, match=r"edge_weight: expected shape \[1\]"):
        GraphOperator(torch.tensor([[0], [1]]), torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="measure"):
        M.energy(x, torch.tensor([[0], [1]]), 2, measure="volume")
    with pytest.raises(ValueError, match="use laplacian_energy_degree"):  # the old 3rd argument
        M.laplacian_energy(x, torch.tensor([[0], [1]]), "degree")
    with pytest.raises(ValueError, match="order"):
        M.energy(x, torch.tensor([[0], [1]]), order=0)
    with pytest.raises(ValueError, match="mean_average_distance_global"):
        M.mean_average_distance(x, None)


def test_non_finite_input_propagates_to_nan():
    """Documented behaviour: NaN/Inf in x give a non-finite result, never a silent number."""
    ei = undirected([(0, 1), (1, 2)])
    x = torch.ones(3, 2)
    x[1, 0] = float("nan")
    for fn in (M.dirichlet_energy, M.laplacian_energy, M.rusch_dirichlet_energy):
        assert torch.isnan(fn(x, ei))
    x[1, 0] = float("inf")
    assert not torch.isfinite(M.laplacian_energy(x, ei))


def test_empty_graph_and_operator_repr():
    op = GraphOperator(torch.empty(2, 0, dtype=torch.long), num_nodes=3)
    x = _features(3)
    assert M.dirichlet_energy(x, op).item() == 0.0
    assert M.laplacian_energy(x, op).item() == 0.0
    assert "num_nodes=3" in repr(op)


# -- values that used to be silently wrong (issue 13, item 8) ---------------------------------


def _isolated_nan(value: float) -> torch.Tensor:
    ei = undirected([(0, 1), (1, 2)])  # node 3 is isolated
    x = torch.ones(4, 3, dtype=torch.float64)
    x[1, 0] = 2.0
    x[3, 1] = value
    return x, ei


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_on_an_isolated_node_propagates(bad):
    x, ei = _isolated_nan(bad)
    op = GraphOperator(ei, num_nodes=4)
    values = {
        "dirichlet": M.dirichlet_energy(x, op),
        "laplacian": M.laplacian_energy(x, op),
        "laplacian_degree": M.laplacian_energy_degree(x, op),
        **{f"energy_{m}": M.energy(x, op, m) for m in (1, 2, 3, 4)},
        "rusch": M.rusch_dirichlet_energy(x, op),
        "mean_average_distance": M.mean_average_distance(x, op),
        "mean_average_distance_global": M.mean_average_distance_global(x),
        "effective_rank": M.effective_rank(x),
    }
    for name, value in values.items():
        assert not math.isfinite(float(value)), f"{name} dropped a non-finite isolated node"


def test_effective_rank_returns_nan_instead_of_raising():
    x = torch.randn(20, 4, dtype=torch.float64)
    x[3, 2] = float("nan")
    assert math.isnan(float(M.effective_rank(x)))
    x[3, 2] = float("inf")
    assert math.isnan(float(M.effective_rank(x)))


def test_rows_near_1e160_keep_their_cosines():
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(6, 5, generator=gen, dtype=torch.float64)
    ei = undirected([(i, (i + 1) % 6) for i in range(6)])
    for scale in (1e160, 1e300, 1e-300):
        x = base * scale
        assert M.mean_cosine_similarity(x, 2 * x).item() == pytest.approx(1.0, rel=1e-14)
        assert M.layer_similarity([x, base]).numpy() == pytest.approx(np.ones((2, 2)), rel=1e-14)
        assert M.mean_average_distance(x, ei).item() == pytest.approx(
            M.mean_average_distance(base, ei).item(), rel=1e-13
        )
        assert M.mean_average_distance_global(x).item() == pytest.approx(
            M.mean_average_distance_global(base).item(), rel=1e-13
        )
        expected = M.feature_norm(base).item() * scale
        assert M.feature_norm(x).item() == pytest.approx(expected, rel=1e-14)
        assert M.effective_rank(x).item() == pytest.approx(M.effective_rank(base).item(), rel=1e-12)


def test_complex_features_are_refused():
    ei = undirected([(0, 1)])
    x = torch.ones(2, 3, dtype=torch.complex128)
    for fn in (
        lambda: M.dirichlet_energy(x, ei),
        lambda: M.laplacian_energy(x, ei),
        lambda: M.mean_average_distance_global(x),
        lambda: M.effective_rank(x),
        lambda: M.feature_norm(x),
        lambda: M.mean_cosine_similarity(x, x),
    ):
        message = "x: expected a real floating-point tensor, received dtype torch.complex128"
        with pytest.raises(ValueError, match=message):
            fn()
    with pytest.raises(ValueError, match="real non-negative weights"):
        GraphOperator(ei, torch.ones(2, dtype=torch.complex64))


def test_edge_weights_change_every_weighted_metric():
    ei = undirected([(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)])
    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    w = torch.linspace(0.5, 4.0, ei.size(1), dtype=torch.float64)
    plain, weighted = GraphOperator(ei, num_nodes=4), GraphOperator(ei, w, num_nodes=4)
    dense = ref.dense_weights(ei.numpy(), w.numpy(), 4)
    xn = ref.to_np(x)
    expected = (ref.dirichlet(xn, dense), ref.laplacian_energy(xn, dense))
    assert M.dirichlet_energy(x, weighted).item() == pytest.approx(expected[0], rel=1e-13)
    assert M.laplacian_energy(x, weighted).item() == pytest.approx(expected[1], rel=1e-13)
    for fn in (M.dirichlet_energy, M.laplacian_energy):
        assert fn(x, plain).item() != pytest.approx(fn(x, weighted).item(), rel=1e-3)
    for bad, what in ((-1.0, "non-negative"), (float("nan"), "finite"), (float("inf"), "finite")):
        w_bad = w.clone()
        w_bad[2] = bad
        with pytest.raises(ValueError, match=what):
            GraphOperator(ei, w_bad, num_nodes=4)


def test_rayleigh_energy_closed_forms():
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])  # path 0-1-2
    x = torch.tensor([[0.0], [1.0], [3.0]])
    assert M.rayleigh_energy(x, ei).item() == pytest.approx(0.525, rel=1e-15)
    assert M.rayleigh_energy(torch.zeros(3, 2), ei).item() == 0.0  # zero state: 0, not NaN
    assert M.rayleigh_energy(torch.full((3, 2), 7.0), ei).item() == 0.0
    assert math.isnan(M.rayleigh_energy(torch.tensor([[0.0], [math.nan], [1.0]]), ei).item())


def test_mad_counts_each_neighbour_once_whatever_the_graphs_form():
    """MAD averages over each node's neighbours as a set: a repeated edge counts once and a
    zero-weight edge is no neighbour, so an edge list, its dense adjacency and its sparse one
    give one value (the edge list counted the repeat twice: 0.640 for 0.412)."""
    from oversmooth import GraphOperator

    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.2], [0.0, 1.0]], dtype=torch.float64)
    ei = torch.tensor([[0, 0, 1, 0], [2, 2, 2, 3]])  # 0 -> 2 twice; 0 -> 3 of weight 0 below
    w = torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    dense = torch.zeros(4, 4, dtype=torch.float64)
    dense[0, 2], dense[1, 2] = 2.0, 1.0
    expected = M.mean_average_distance(x, ei[:, [0, 2]])  # node 2's neighbours {0, 1} only
    for graph in (GraphOperator(ei, w, num_nodes=4), dense, dense.to_sparse()):
        assert M.mean_average_distance(x, graph).item() == pytest.approx(expected.item(), rel=1e-15)
    # unweighted, the repeat still counts once: the same as the edge list without it
    assert M.mean_average_distance(x, ei).item() == pytest.approx(
        M.mean_average_distance(x, ei[:, [0, 2, 3]]).item(), rel=1e-15
    )
