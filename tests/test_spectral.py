"""spectral_gap against a dense eigensolver, closed forms, and diffusion itself."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from oversmooth.metrics import laplacian_energy
from oversmooth.spectral import spectral_gap


def _undirected(pairs: list[tuple[int, int]]) -> torch.Tensor:
    src = [a for a, b in pairs] + [b for a, b in pairs]
    dst = [b for a, b in pairs] + [a for a, b in pairs]
    return torch.tensor([src, dst])


def _random_graph(n: int, p: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.random((n, n)) < p, 1)
    for i in range(n - 1):  # a path keeps it connected
        upper[i, i + 1] = True
    a, b = np.nonzero(upper)
    weights = rng.uniform(0.5, 2.0, a.size)
    edge_index = torch.tensor(np.stack([np.r_[a, b], np.r_[b, a]]))
    return edge_index, torch.tensor(np.r_[weights, weights])


def _dense_eigenvalues(edge_index, weight, n, self_loops=False) -> np.ndarray:
    w = np.zeros((n, n))
    np.add.at(w, (edge_index[1].numpy(), edge_index[0].numpy()), weight.numpy())
    if self_loops:
        w += np.eye(n)
    p = w / w.sum(1, keepdims=True)
    return np.sort(np.linalg.eigvals(p).real)


@pytest.mark.parametrize("n", [30, 400])  # dense path and Lanczos path
@pytest.mark.parametrize("self_loops", [False, True])
def test_agrees_with_dense_eigensolver(n, self_loops):
    edge_index, weight = _random_graph(n, 8 / n, seed=n)
    gap = spectral_gap(edge_index, weight, self_loops=self_loops)
    values = _dense_eigenvalues(edge_index, weight, n, self_loops)
    assert gap.lambda2 == pytest.approx(values[-2], abs=1e-8)
    assert gap.lambda_min == pytest.approx(values[0], abs=1e-8)
    assert gap.slem == pytest.approx(max(abs(values[-2]), abs(values[0])), abs=1e-8)
    assert gap.energy_ratio == pytest.approx(gap.slem**2, rel=1e-12)
    assert gap.num_components == 1 and gap.nodes == n and not gap.bipartite


def test_cycle_closed_forms():
    # C_n: eigenvalues cos(2 pi k / n); even n is bipartite (lambda_min = -1), odd n is not
    for n in (5, 6, 301, 302):
        gap = spectral_gap(_undirected([(i, (i + 1) % n) for i in range(n)]))
        assert gap.lambda2 == pytest.approx(math.cos(2 * math.pi / n), abs=1e-9)
        expected_min = -1.0 if n % 2 == 0 else math.cos(2 * math.pi * (n // 2) / n)
        assert gap.lambda_min == pytest.approx(expected_min, abs=1e-9)
        assert gap.bipartite == (n % 2 == 0)
        if n % 2 == 0:
            assert gap.energy_ratio == 1.0 and gap.halving_steps == math.inf
            assert "does not decay" in gap.summary()


def test_complete_graph_closed_form():
    n = 7
    gap = spectral_gap(_undirected([(i, j) for i in range(n) for j in range(i + 1, n)]))
    assert gap.lambda2 == pytest.approx(-1 / (n - 1), abs=1e-12)
    assert gap.lambda_min == pytest.approx(-1 / (n - 1), abs=1e-12)
    assert gap.energy_ratio == pytest.approx(1 / (n - 1) ** 2, rel=1e-10)


def test_a_rank_one_diffusion_takes_the_energy_to_zero_in_one_step():
    """K_n with self loops: P~ = J/n, every eigenvalue but 1 is exactly 0.  The eigensolver's
    1e-16 was read as a rate: "halves the energy every 0.00956 steps (per-step ratio 3.2e-32)"
    (an audit)."""
    from oversmooth.report.prose import reference_prose

    n = 30
    gap = spectral_gap(
        _undirected([(i, j) for i in range(n) for j in range(i + 1, n)]), self_loops=True
    )
    assert gap.slem == 0.0 and gap.energy_ratio == 0.0 and gap.halving_steps == 0.0
    assert "to zero in one step" in gap.summary()
    reference = {"diffusion": {"computed": True, "energy_ratio": 0.0, "halving_steps": 0.0}}
    (sentence,) = reference_prose({"reference": reference}, "diffusion")
    assert "takes the energy to zero in one step" in sentence and "halves" not in sentence


def test_disconnected_reports_largest_component_and_slowest_rate():
    triangle_path = [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 5), (5, 3)]  # 6 nodes
    edge = [(6, 7)]  # a 2-node component: bipartite, never decays
    gap = spectral_gap(_undirected(triangle_path + edge), num_nodes=10)  # 8, 9 isolated
    assert gap.nodes == 6 and gap.num_nodes == 10 and gap.isolated == 2
    assert gap.num_components == 2 and not gap.bipartite and gap.bipartite_components == 1
    assert gap.energy_ratio < 1.0 and gap.graph_energy_ratio == 1.0
    assert "largest connected component (6 of 10 nodes)" in gap.summary()
    assert "bipartite" in gap.summary()
    lazy = spectral_gap(_undirected(triangle_path + edge), num_nodes=10, self_loops=True)
    assert lazy.bipartite_components == 0 and lazy.graph_energy_ratio < 1.0


def test_diffusion_energy_ratio_matches_prediction():
    # a barbell (two K_8 joined by one edge, weighted): lambda_2 is close to 1 and well
    # separated from the rest, so X <- PX settles on its rate within a hundred steps
    pairs = [(i, j) for i in range(8) for j in range(i + 1, 8)]
    pairs += [(i + 8, j + 8) for i, j in pairs] + [(7, 8)]
    edge_index = _undirected(pairs)
    weight = torch.linspace(0.5, 2.0, len(pairs), dtype=torch.float64).repeat(2)
    gap = spectral_gap(edge_index, weight)
    assert 0.9 < gap.energy_ratio < 1.0
    x = torch.randn(16, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    w = torch.zeros(16, 16, dtype=torch.float64)
    w.index_put_((edge_index[1], edge_index[0]), weight, accumulate=True)
    p = w / w.sum(1, keepdim=True)
    energies = []
    for _ in range(150):
        x = p @ x
        energies.append(float(laplacian_energy(x, edge_index, edge_weight=weight)))
    assert energies[-1] > 1e-20
    assert energies[-1] / energies[-2] == pytest.approx(gap.energy_ratio, rel=1e-9)


def test_refuses_directed_and_edgeless_graphs():
    with pytest.raises(ValueError, match="undirected"):
        spectral_gap(torch.tensor([[0, 1], [1, 2]]))
    with pytest.raises(ValueError, match="at least one edge"):
        spectral_gap(torch.zeros(2, 0, dtype=torch.long), num_nodes=3)
    with pytest.raises(ValueError, match="self_loops"):
        spectral_gap(_undirected([(0, 1)]), self_loops=1)  # type: ignore[arg-type]


def test_a_one_way_edge_beside_heavy_edges_is_still_refused():
    """Each edge is checked against its reverse on its own scale: a one-way edge of weight 1
    passed beside a triangle of weight 1e13 (the tolerance was 1e-12 of the heaviest edge),
    and the symmetric solver read it as two-way: a halving length of 24.5 for 37.9."""
    heavy = _undirected([(0, 1), (1, 2), (2, 0)])
    light = torch.cat([_undirected([(4, 5), (5, 6), (6, 3)]), torch.tensor([[3], [4]])], dim=1)
    edge_index = torch.cat([heavy, light], dim=1)  # 3 -> 4 without 4 -> 3
    weight = torch.cat([torch.full((heavy.size(1),), 1e13), torch.ones(light.size(1))])
    with pytest.raises(ValueError, match="undirected"):
        spectral_gap(edge_index, edge_weight=weight.double())
    # rounding between the two directions of an edge is not a direction
    ring = _undirected([(3, 4), (4, 5), (5, 3)])
    both = torch.cat([heavy, ring], dim=1)
    w = torch.cat([torch.full((heavy.size(1),), 1e13), torch.ones(ring.size(1))]).double()
    w[0] *= 1 + 1e-15
    assert spectral_gap(both, edge_weight=w).num_components == 2


def test_accepts_pyg_data():
    from torch_geometric.data import Data

    edge_index = _undirected([(0, 1), (1, 2), (2, 0), (2, 3)])
    data = Data(edge_index=edge_index, num_nodes=5)
    assert spectral_gap(data).to_dict() == spectral_gap(edge_index, num_nodes=5).to_dict()


@pytest.mark.parametrize("self_loops", [False, True])
def test_disconnected_graph_rate_is_the_slowest_component_against_dense(self_loops):
    # three components of different speeds (one above the dense-path size, so Lanczos runs)
    # and two isolated nodes; the whole graph's rate is the largest per-component SLEM^2
    parts, offset, edges, weights = [], 0, [], []
    for n, p, seed in ((12, 0.5, 1), (300, 0.02, 2), (7, 0.0, 3)):
        edge_index, weight = _random_graph(n, p, seed)  # p = 0: a weighted path
        if n == 7:
            edge_index = torch.cat([edge_index, torch.tensor([[0, 2], [2, 0]])], 1)  # odd cycle
            weight = torch.cat([weight, torch.tensor([1.0, 1.0], dtype=weight.dtype)])
        parts.append((n, edge_index, weight))
        edges.append(edge_index + offset)
        weights.append(weight)
        offset += n
    loops = torch.tensor([[3, 20], [3, 20]])  # the graph's own self loops
    edge_index = torch.cat(edges + [loops], 1)
    weight = torch.cat(weights + [torch.tensor([2.5, 0.5], dtype=torch.float64)])
    gap = spectral_gap(edge_index, weight, num_nodes=offset + 2, self_loops=self_loops)
    w = np.zeros((offset + 2, offset + 2))
    np.add.at(w, (edge_index[1].numpy(), edge_index[0].numpy()), weight.numpy())
    if self_loops:  # the zoo's neighbourhood: every self loop becomes weight 1
        np.fill_diagonal(w, 1.0)
    ratios = []
    start = 0
    for n, _, _ in parts:
        block = w[start : start + n, start : start + n]
        moduli = np.sort(np.abs(np.linalg.eigvals(block / block.sum(1, keepdims=True))))
        ratios.append(moduli[-2] ** 2)
        start += n
    assert gap.num_components == 3 and gap.isolated == 2 and gap.nodes == 300
    assert gap.energy_ratio == pytest.approx(ratios[1], abs=1e-8)
    assert gap.graph_energy_ratio == pytest.approx(max(ratios), abs=1e-8)
    assert gap.slowest_nodes == (12, 300, 7)[int(np.argmax(ratios))]
    assert gap.graph_halving_steps == pytest.approx(math.log(2) / -math.log(max(ratios)), rel=1e-8)
    assert gap.graph_energy_ratio > gap.energy_ratio  # here the slow component is not the LCC


def test_repeated_edges_are_named_as_such_not_as_a_directed_graph():
    """Every edge both ways, three of them repeated one way: the weights (repeats add up) are
    not symmetric, and the refusal said "a directed one" (an audit)."""
    ring = _undirected([(i, (i + 1) % 6) for i in range(6)])
    with pytest.raises(ValueError, match=r"appear both ways but with different total weights"):
        spectral_gap(torch.cat([ring, ring[:, :3]], dim=1))
    with pytest.raises(ValueError, match=r"received a directed one"):
        spectral_gap(torch.tensor([[0, 1, 2], [1, 2, 0]]))


@pytest.mark.parametrize("self_loops", [False, True])
def test_small_components_solved_in_batches_match_each_alone(monkeypatch, self_loops):
    """Many small components of a few sizes, their node ids shuffled (no component is a
    contiguous range) and batches forced to split: every component's (lambda_2, lambda_min)
    is that of its own dense matrix, and a bipartite one keeps lambda_min = -1."""
    from oversmooth import spectral as S

    rng = np.random.default_rng(7)
    sizes = [2, 3, 3, 5, 5, 5, 9, 9, 2, 4, 300]  # 300: above the dense path's size
    edges, weights, offset = [], [], 0
    for n in sizes:
        edge_index, weight = _random_graph(n, 0.4 if n < 300 else 0.02, n + offset)
        edges.append(edge_index + offset)
        weights.append(weight)
        offset += n
    perm = torch.tensor(rng.permutation(offset))
    edge_index, weight = perm[torch.cat(edges, 1)], torch.cat(weights)
    monkeypatch.setattr(S, "_BATCH_VALUES", 30)  # at most one 5 x 5 matrix per batch
    w, _ = S._diffusion_weights(edge_index, weight, offset, self_loops)
    labels, counts = S._components(w)
    bipartite = ~S._parity_conflict(w, labels, len(counts))
    s = S._symmetric_normalised(w)
    spectra = S._component_spectra(s, labels, counts, bipartite)
    dense = s.toarray()
    assert sorted(spectra) == list(range(len(sizes)))
    for c, (lam2, lam_min) in spectra.items():
        nodes = np.flatnonzero(labels == c)
        values = np.linalg.eigvalsh(dense[np.ix_(nodes, nodes)])
        assert lam2 == pytest.approx(values[-2], abs=1e-12)
        expected = -1.0 if bipartite[c] else values[0]
        assert lam_min == pytest.approx(expected, abs=1e-12)
    assert bipartite.any() or self_loops  # a 2-node component is bipartite without loops


def _path(n: int) -> torch.Tensor:
    return _undirected([(i, i + 1) for i in range(n - 1)])


def test_a_slowly_mixing_component_is_solved_densely_or_said_not_computed(monkeypatch):
    """A path's lambda_2 sits within 1e-6 of 1: ARPACK took 22 s on 2,000 nodes and never
    converged on a weighted path of 1,000 or a path of 2,900, whose ArpackNoConvergence (a
    RuntimeError) stopped the whole analysis (an audit).  Without convergence within its
    restarts the component is solved densely, to the dense eigensolver's values; beyond the
    dense bound ARPACK gets its own limit again (a 20 x 300 grid converged in 1.9 s, a
    regression audit found it refused once), and only where that fails too the reference
    says it was not computed, and why."""
    import oversmooth.spectral as spectral
    from oversmooth.analysis import _diffusion_reference
    from oversmooth.data import GraphData

    n = 300
    edge_index = _path(n)
    monkeypatch.setattr(spectral, "_ARPACK_RESTARTS", 1)  # what a long path does at 300
    gap = spectral_gap(edge_index, num_nodes=n, self_loops=True)
    w = np.zeros((n, n))
    w[edge_index[0].numpy(), edge_index[1].numpy()] = 1.0
    w += np.eye(n)
    d = w.sum(axis=1)
    values = np.linalg.eigvalsh(w / np.sqrt(np.outer(d, d)))
    assert gap.lambda2 == pytest.approx(values[-2], abs=1e-12)
    assert gap.lambda_min == pytest.approx(values[0], abs=1e-12)
    monkeypatch.setattr(spectral, "_DENSE_FALLBACK_MAX", n - 1)
    again = spectral_gap(edge_index, num_nodes=n, self_loops=True)  # ARPACK's own limit
    assert again.lambda2 == pytest.approx(values[-2], abs=1e-12)
    real = spectral._arpack_spectrum

    def never(s, restarts):
        real(s, 1)  # one restart: a path of 300 does not converge
        raise AssertionError("converged")

    monkeypatch.setattr(spectral, "_arpack_spectrum", never)
    with pytest.raises(ValueError, match="did not converge on a connected component of 300"):
        spectral_gap(edge_index, num_nodes=n, self_loops=True)
    data = GraphData(n, x=torch.ones(n, 1), edge_index=edge_index, name="path")
    reference = _diffusion_reference(data)
    assert not reference["computed"] and "did not converge" in reference["reason"]


def test_a_node_whose_only_edge_is_its_self_loop_is_isolated():
    """It diffuses nothing, and was counted in the components' tally as a component of its
    own ("its one component" said of a ring with such a node, an audit)."""
    ring = _undirected([(i, (i + 1) % 10) for i in range(10)])
    edge_index = torch.cat([ring, torch.tensor([[10], [10]])], dim=1)
    gap = spectral_gap(edge_index, num_nodes=11, self_loops=True)
    assert gap.isolated == 1 and gap.nodes == 10
    from oversmooth.data import GraphData, graph_stats

    data = GraphData(11, x=torch.ones(11, 1), edge_index=edge_index, name="ring")
    assert graph_stats(data)["isolated_nodes"] == 1  # datasets --stats says the same
