"""Every metric and every Probe column against an extended-precision reference.

The oversmoothed regime is the hard case for floating point: node states share a common
offset and differ by a tiny spread (1e-4 ... 1e-10 of it), or are constant on each connected
component (Cora is disconnected).  The references in :mod:`tests.reference` work in
np.longdouble over the edge list, forming differences first; every value must agree to
<= 1e-10 relative, and exactly constant states must give exactly 0.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch

import oversmooth.metrics as M
from oversmooth.metrics import kernels
from oversmooth import Probe
from oversmooth.graph import GraphOperator

from tests import reference as ref
from tests.conftest import tiny_graphs

RTOL = 1e-10
OFFSETS = (1.0, 3.0, 10.0, 1e3)
NOISES = (1e-4, 1e-7, 1e-10)
PROBE_METRICS = [
    "laplacian_energy",
    "laplacian_energy_degree",
    "dirichlet_energy",
    "relative_energy",
    "mean_cosine_similarity",
    "feature_norm",
    "rayleigh_energy",
    "rusch_dirichlet_energy",
    "mean_average_distance",
    "mean_average_distance_global",
    "effective_rank",
    "energy_1",
    "energy_2",
    "energy_3",
    "energy_4",
]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These tests are many small kernels: on a shared 2-core machine one intra-op thread is
    several times faster than two (no oversubscription).  Restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def assert_close(value, expected, what: str) -> None:
    value, expected = float(value), float(expected)
    if expected == 0.0:
        assert value == 0.0, f"{what}: expected exactly 0, received {value!r}"
    else:
        err = abs(value - expected) / abs(expected)
        assert err <= RTOL, f"{what}: relative error {err:.2e} ({value!r} vs {expected!r})"


def near_constant(n: int, d: int, offset: float, noise: float, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    row = offset * (1.0 + torch.rand(d, generator=gen, dtype=torch.float64))  # entries in [c, 2c)
    return row + noise * torch.randn(n, d, generator=gen, dtype=torch.float64)


def references(x: torch.Tensor, y: torch.Tensor, g: ref.LDGraph, pairs: bool) -> dict[str, float]:
    """Reference value of every metric on state x (y: the other state for cosines)."""
    a, b = ref.ld(x), ref.ld(y)
    out = {f"energy_{m}": ref.ld_energy(a, g, m) for m in (1, 2, 3, 4)}
    out["energy_2_counting"] = ref.ld_energy(a, g, 2, "counting")
    out["dirichlet_energy"] = out["energy_1"]
    out["laplacian_energy"] = out["energy_2_counting"]
    out["laplacian_energy_degree"] = out["energy_2"]
    out["rusch_dirichlet_energy"] = ref.ld_rusch(a, g)
    out["mean_average_distance"] = ref.ld_mad_neighbors(a, g)
    out["mean_average_distance_global"] = (
        ref.ld_mad_global_pairs(a) if pairs else ref.ld_mad_global_centred(a)
    )
    out["effective_rank"] = ref.ld_effective_rank(a)
    out["feature_norm"] = ref.ld_feature_norm(a)
    norm_sq = out["feature_norm"] ** 2
    out["rayleigh_energy"] = out["energy_2_counting"] / norm_sq if norm_sq else 0.0
    out["cosine"] = ref.ld_cosine_mean(a, b)
    return out


def metric_values(x: torch.Tensor, y: torch.Tensor, ei, w, n: int) -> dict[str, torch.Tensor]:
    op = GraphOperator(ei, w, num_nodes=n)
    out = {f"energy_{m}": M.energy(x, op, m) for m in (1, 2, 3, 4)}
    out["energy_2_counting"] = M.energy(x, op, 2, measure="counting")
    out["dirichlet_energy"] = M.dirichlet_energy(x, ei, w)
    out["laplacian_energy"] = M.laplacian_energy(x, op)
    out["laplacian_energy_degree"] = M.laplacian_energy_degree(x, op)
    if w is None:
        out["rusch_dirichlet_energy"] = M.rusch_dirichlet_energy(x, op)
    out["mean_average_distance"] = M.mean_average_distance(x, op)
    out["mean_average_distance_global"] = M.mean_average_distance_global(x)
    out["effective_rank"] = M.effective_rank(x)
    out["feature_norm"] = M.feature_norm(x)
    out["rayleigh_energy"] = M.rayleigh_energy(x, ei, w)
    out["cosine"] = M.mean_cosine_similarity(x, y)
    out["layer_similarity"] = M.layer_similarity([x, y])[0, 1]
    return out


def check_metrics(x, y, ei, w, n, label: str, pairs: bool = True) -> None:
    g = ref.LDGraph(ei, w, n)
    expected = references(x, y, g, pairs)
    expected["layer_similarity"] = expected["cosine"]
    for name, value in metric_values(x, y, ei, w, n).items():
        assert_close(value, expected[name], f"{label} {name}")


def check_probe(states: list[torch.Tensor], ei, w, n, label: str, pairs: bool = True) -> None:
    op = GraphOperator(ei, w, num_nodes=n)
    probe = Probe(None, op, metrics=PROBE_METRICS)
    for k, state in enumerate(states):
        probe.record(k, state)
    frame = probe.to_frame()
    g = ref.LDGraph(ei, w, n)
    refs = [references(s, states[k - 1] if k else s, g, pairs) for k, s in enumerate(states)]
    for k in range(len(states)):
        for name in PROBE_METRICS:
            value = frame[name].iloc[k]
            if name == "relative_energy" or (name == "mean_cosine_similarity" and k == 0):
                continue
            if name == "rusch_dirichlet_energy" and w is not None:
                continue  # unweighted by definition; covered by the metric test
            expected = refs[k]["cosine" if name == "mean_cosine_similarity" else name]
            assert_close(value, expected, f"{label} probe layer {k} {name}")
        if k:
            prev, cur = refs[k - 1]["laplacian_energy"], refs[k]["laplacian_energy"]
            if prev != 0:
                expected = (cur - prev) / prev
                assert_close(frame["relative_energy"].iloc[k], expected, f"{label} R layer {k}")


# -- the references themselves ----------------------------------------------------------------


def test_longdouble_cosine_distance_matches_50_digit_arithmetic():
    mpmath.mp.dps = 50
    for offset, noise in [(3.0, 1e-10), (1e3, 1e-8), (1.0, 1e-4)]:
        x = near_constant(2, 6, offset, noise, seed=int(offset))
        a, b = x.tolist()
        dot = mpmath.fsum(mpmath.mpf(p) * mpmath.mpf(q) for p, q in zip(a, b, strict=True))
        na = mpmath.sqrt(mpmath.fsum(mpmath.mpf(p) ** 2 for p in a))
        nb = mpmath.sqrt(mpmath.fsum(mpmath.mpf(q) ** 2 for q in b))
        exact = 1 - dot / (na * nb)
        got = ref.ld_cos_distance(ref.ld(x[:1]), ref.ld(x[1:]))[0]
        assert abs(mpmath.mpf(float(got)) - exact) / exact < 1e-12
        mad = M.mean_average_distance_global(x)
        assert_close(mad, float(exact), "mad_global 2 rows")


def test_longdouble_global_mad_identity_matches_all_pairs():
    x = near_constant(30, 5, 3.0, 1e-9, seed=1)
    x[4] = 0.0  # a zero row: distance 1 to everything
    a = ref.ld(x)
    assert abs(ref.ld_mad_global_centred(a) / ref.ld_mad_global_pairs(a) - 1) < 1e-15


# -- every metric -----------------------------------------------------------------------------


@pytest.mark.parametrize("graph", ["path", "cycle", "weighted", "isolated", "directed"])
@pytest.mark.parametrize("offset", OFFSETS)
def test_metrics_exact_on_near_constant_states_tiny_graphs(graph, offset):
    ei, w, n = tiny_graphs()[graph]
    for i, noise in enumerate(NOISES):
        x = near_constant(n, 6, offset, noise, seed=i)
        y = near_constant(n, 6, offset, noise, seed=i + 10)
        check_metrics(x, y, ei, w, n, f"{graph} c={offset} noise={noise}")


@pytest.fixture(scope="module")
def cora_graph():
    from oversmooth.data import load

    data = load("cora")
    return data.edge_index, data.num_nodes


@pytest.mark.parametrize("offset", OFFSETS)
def test_metrics_exact_on_near_constant_states_cora(cora_graph, offset):
    ei, n = cora_graph
    for i, noise in enumerate(NOISES):
        x = near_constant(n, 8, offset, noise, seed=i)
        y = near_constant(n, 8, offset, noise, seed=i + 10)
        check_metrics(x, y, ei, None, n, f"cora c={offset} noise={noise}", pairs=False)


def components(ei: torch.Tensor, n: int) -> torch.Tensor:
    import scipy.sparse
    from scipy.sparse.csgraph import connected_components

    entries = (np.ones(ei.size(1)), (ei[0].numpy(), ei[1].numpy()))
    adj = scipy.sparse.coo_matrix(entries, shape=(n, n))
    return torch.from_numpy(connected_components(adj, directed=False)[1])


def piecewise_constant(ei, n: int, d: int, offset: float, noise: float, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    comp = components(ei, n)
    rows = offset * (1.0 + torch.rand(int(comp.max()) + 1, d, generator=gen, dtype=torch.float64))
    return rows[comp] + noise * torch.randn(n, d, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("noise", [1e-6, 1e-10])
def test_metrics_exact_on_piecewise_constant_states_cora(cora_graph, noise):
    ei, n = cora_graph
    assert int(components(ei, n).max()) > 0  # Cora is disconnected: the point of this test
    x = piecewise_constant(ei, n, 8, 3.0, noise, seed=0)
    y = x + noise * torch.randn(n, 8, dtype=torch.float64)
    check_metrics(x, y, ei, None, n, f"cora piecewise noise={noise}", pairs=False)


def test_exactly_constant_states_give_exactly_zero(cora_graph):
    ei, n = cora_graph
    cases = {name: tiny_graphs()[name] for name in ("path", "weighted", "isolated", "directed")}
    cases["cora"] = (ei, None, n)
    for name, (edges, w, size) in cases.items():
        for offset in OFFSETS + (0.1, 7.3e5):
            x = near_constant(size, 5, offset, 0.0, seed=2)  # one row repeated
            values = metric_values(x, x, edges, w, size)
            for metric in ("cosine", "layer_similarity", "feature_norm"):
                values.pop(metric)
            for metric, value in values.items():
                assert float(value) == 0.0, f"{name} c={offset} {metric}: {float(value)!r} != 0"
    # piecewise constant on Cora's components: every energy and MAD(neighbours) is exactly 0
    x = piecewise_constant(ei, n, 5, 3.0, 0.0, seed=1)
    op = GraphOperator(ei, num_nodes=n)
    for m in (1, 2, 3, 4):
        assert float(M.energy(x, op, m)) == 0.0
    assert float(M.laplacian_energy(x, op)) == 0.0
    assert float(M.mean_average_distance(x, op)) == 0.0
    assert float(M.mean_average_distance_global(x)) > 0.0


# -- every Probe column -----------------------------------------------------------------------


@pytest.mark.parametrize("graph", ["path", "weighted", "isolated", "directed"])
def test_probe_columns_exact_tiny_graphs(graph):
    ei, w, n = tiny_graphs()[graph]
    for offset in OFFSETS:
        states = [near_constant(n, 6, offset, noise, seed=i) for i, noise in enumerate(NOISES)]
        states.append(near_constant(n, 6, offset, 0.0, seed=9))  # constant: energies exactly 0
        check_probe(states, ei, w, n, f"{graph} c={offset}")


def test_probe_columns_exact_cora(cora_graph):
    ei, n = cora_graph
    states = [near_constant(n, 8, 3.0, noise, seed=i) for i, noise in enumerate(NOISES)]
    states.append(near_constant(n, 8, 1e3, 1e-9, seed=5))
    states.append(piecewise_constant(ei, n, 8, 10.0, 1e-9, seed=3))
    states.append(near_constant(n, 8, 10.0, 0.0, seed=4))
    check_probe(states, ei, None, n, "cora", pairs=False)


def test_head_energies_kernel_exact():
    """The Probe's head_energy_<h> kernel: (1/n)||P_h X - X||^2 from attention weights."""
    ei, _, n = tiny_graphs()["cycle"]
    loops = torch.arange(n)
    src, dst = torch.cat([ei[0], loops]), torch.cat([ei[1], loops])
    gen = torch.Generator().manual_seed(0)
    raw = torch.rand(src.numel(), 3, generator=gen, dtype=torch.float64)
    total = torch.zeros(n, 3, dtype=torch.float64).index_add_(0, dst, raw)
    alpha = raw / total[dst]  # rows of each P_h sum to 1
    for offset in OFFSETS:
        x = near_constant(n, 4, offset, 1e-9, seed=1)
        got = kernels.head_energies(x, src, dst, alpha)
        a = ref.ld(x)
        for h in range(3):
            g = ref.LDGraph(torch.stack([src, dst]), None, n)
            g.p = ref.ld(alpha[:, h])
            expected = np.sum(g.laplacian(a) ** 2) / n
            assert_close(got[h], expected, f"head {h} c={offset}")
        constant = near_constant(n, 4, offset, 0.0, seed=1)
        zero = torch.zeros(3, dtype=torch.float64)
        assert torch.equal(kernels.head_energies(constant, src, dst, alpha), zero)


def test_cosine_near_one_and_rows_near_1e160():
    x = near_constant(50, 6, 1e160, 1e150, seed=0)
    y = x * 1.5
    assert_close(M.mean_cosine_similarity(x, y), 1.0, "cos 1e160")
    assert_close(M.layer_similarity([x, y])[0, 1], 1.0, "sim 1e160")
    a = ref.ld(x)
    mad = M.mean_average_distance_global(x)
    assert_close(mad, ref.ld_mad_global_pairs(a), "mad_g 1e160")
    ei, _, n = tiny_graphs()["cycle"]
    g = ref.LDGraph(ei, None, n)
    assert_close(M.mean_average_distance(x[:n], ei), ref.ld_mad_neighbors(a[:n], g), "mad 1e160")
    assert_close(M.feature_norm(x), ref.ld_feature_norm(a), "feature_norm 1e160")
    assert math.isfinite(float(M.effective_rank(x)))
    assert_close(M.effective_rank(x), ref.ld_effective_rank(a), "erank 1e160")


def test_cosine_metrics_of_rows_of_very_different_sizes():
    """u - v rebuilt from d = a - b cancels down to the smaller row when the two differ in
    size, losing their ratio in digits: a row 1e20 times its neighbours' size gave a mean
    average distance of 9e7 (it lies in [0, 2]) and an angle of 0.5 (orthogonal) for rows at
    0.149 (a batched-metrics audit).  Checked against a 60-digit reference."""
    import mpmath as mp

    import oversmooth as O

    mp.mp.dps = 60
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, generator=g, dtype=torch.float64)
    y = x + 0.3 * torch.randn(4, 3, generator=g, dtype=torch.float64)
    ei = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    neighbours = {0: [1], 1: [0, 2], 2: [1, 3], 3: [2]}

    def cos(a, b):
        a, b = [mp.mpf(float(t)) for t in a], [mp.mpf(float(t)) for t in b]
        dot = mp.fsum(p * q for p, q in zip(a, b, strict=True))
        return dot / mp.sqrt(mp.fsum(p * p for p in a) * mp.fsum(q * q for q in b))

    angle = float(mp.acos(mp.fsum(cos(x[i], y[i]) for i in range(4)) / 4) / mp.pi)
    for s in (1e-8, 1e-16, 1e-20, 1e-150):
        assert float(O.angular_distance(x * s, y)) == pytest.approx(angle, rel=1e-12)
    for s in (1e6, 1e12, 1e20):
        z = y.clone()
        z[0] *= s
        mad = (
            mp.fsum(
                mp.fsum(1 - cos(z[i], z[j]) for j in neighbours[i]) / len(neighbours[i])
                for i in range(4)
            )
            / 4
        )
        pairs = mp.fsum(1 - cos(z[i], z[j]) for i in range(4) for j in range(4) if i != j) / 12
        assert float(O.mean_average_distance(z, ei)) == pytest.approx(float(mad), rel=1e-12)
        assert float(O.mean_average_distance_global(z)) == pytest.approx(float(pairs), rel=1e-12)


@pytest.mark.parametrize("scale", [1e-170, 1e-160, 1e160, 1e300])
def test_scale_free_and_linear_energies_at_extreme_magnitudes(scale):
    """rayleigh_energy (scale-free) and rusch_dirichlet_energy (linear in the scale) took
    squares unscaled: inf at 1e160, 0 at 1e-170, digits lost at 1e-160 (a batched-metrics
    audit).  Both are measured on the state scaled to order 1 now, batched or not."""
    import oversmooth as O

    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 3, generator=g, dtype=torch.float64)
    ei = torch.tensor([[0, 1, 1, 2, 3, 4, 4, 5], [1, 0, 2, 1, 4, 3, 5, 4]])
    batch = torch.tensor([0, 0, 0, 1, 1, 1])
    rayleigh, rusch = O.rayleigh_energy(x, ei), O.rusch_dirichlet_energy(x, ei)
    per_graph = O.rusch_dirichlet_energy(x, ei, batch=batch, reduce="none")
    assert float(O.rayleigh_energy(x * scale, ei)) == pytest.approx(float(rayleigh), rel=1e-13)
    assert float(O.rusch_dirichlet_energy(x * scale, ei)) == pytest.approx(
        float(rusch) * scale, rel=1e-13
    )
    scaled = O.rusch_dirichlet_energy(x * scale, ei, batch=batch, reduce="none")
    assert torch.allclose(scaled / scale, per_graph, rtol=1e-13, atol=0)
