"""The measures the field uses: normalised Dirichlet energy, rank-one distance, angular
distance, relative update and stream variance.  Dense / exact references, closed forms,
offsets, batches, the Probe and the CLI listing."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import torch
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.utils import to_undirected
from typer.testing import CliRunner

import oversmooth.metrics as M
from oversmooth.cli.main import app
from oversmooth.graph import GraphOperator
from oversmooth.probe import DEFAULT_METRICS, Probe, check_metrics

from tests import reference as ref
from tests.conftest import undirected

NEW = [
    "normalized_dirichlet_energy",
    "rank_one_distance",
    "stream_variance",
    "angular_distance",
    "relative_update",
]


def _features(n: int, d: int = 3, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64)


# -- dense / exact references (n x n on purpose) ------------------------------------------------


def _ref_normalized(x: torch.Tensor, w: np.ndarray) -> float:
    """(1/2n) sum_ij W[i, j] ||x_i s_i - x_j s_j||^2, W[i, j] the weight of j -> i, s = d^-1/2
    (0 where d = 0), in mpmath at 50 digits (no cancellation can survive that)."""
    mpmath.mp.dps = 50
    xs = x.tolist()
    n = len(xs)
    deg = [mpmath.fsum(mpmath.mpf(float(v)) for v in w[i]) for i in range(n)]
    s = [1 / mpmath.sqrt(d) if d > 0 else mpmath.mpf(0) for d in deg]
    total = mpmath.mpf(0)
    for i in range(n):
        for j in range(n):
            if w[i, j]:
                total += mpmath.mpf(float(w[i, j])) * mpmath.fsum(
                    (mpmath.mpf(a) * s[i] - mpmath.mpf(b) * s[j]) ** 2
                    for a, b in zip(xs[i], xs[j], strict=True)
                )
    return float(total / (2 * n))


def _ref_trace(x: np.ndarray, w: np.ndarray) -> float:
    """(1/n) tr(X^T (I - D^-1/2 W D^-1/2) X), dense (undirected, no isolated nodes)."""
    s = 1.0 / np.sqrt(w.sum(1))
    lsym = np.eye(len(w)) - s[:, None] * w * s[None, :]
    return float(np.trace(x.T @ lsym @ x)) / len(w)


def _exact_centred_sq(x: torch.Tensor) -> Fraction:
    """||X - 1 xbar^T||_F^2 exactly (rationals of the float64 entries)."""
    rows = [[Fraction(v) for v in r] for r in x.tolist()]
    n = len(rows)
    total = Fraction(0)
    for k in range(len(rows[0])):
        mean = sum(r[k] for r in rows) / n
        total += sum((r[k] - mean) ** 2 for r in rows)
    return total


def _exact_sq(x: torch.Tensor) -> Fraction:
    return sum((Fraction(v) ** 2 for r in x.tolist() for v in r), Fraction(0))


def _sqrt_ratio(a: Fraction, b: Fraction) -> float:
    mpmath.mp.dps = 50
    return float(
        mpmath.sqrt(mpmath.mpf(a.numerator) / a.denominator)
        / mpmath.sqrt(mpmath.mpf(b.numerator) / b.denominator)
    )


def _ref_angular(a: torch.Tensor, b: torch.Tensor) -> float:
    """arccos(mean over rows of cos)/pi in mpmath at 50 digits (zero rows: cosine 0)."""
    mpmath.mp.dps = 50
    out = []
    for ra, rb in zip(a.tolist(), b.tolist(), strict=True):
        ra, rb = [mpmath.mpf(v) for v in ra], [mpmath.mpf(v) for v in rb]
        na = mpmath.sqrt(mpmath.fsum(v * v for v in ra))
        nb = mpmath.sqrt(mpmath.fsum(v * v for v in rb))
        if na == 0 or nb == 0:
            out.append(mpmath.mpf(0))
            continue
        out.append(mpmath.fsum(u * v for u, v in zip(ra, rb, strict=True)) / (na * nb))
    mean = mpmath.fsum(out) / len(out)
    return float(mpmath.acos(max(min(mean, 1), -1)) / mpmath.pi)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


# -- normalised Dirichlet energy ------------------------------------------------------------------


def test_normalized_energy_matches_dense_reference(tiny_graph):
    name, ei, ew, n = tiny_graph
    x = _features(n)
    w = ref.dense_weights(ei, ew, n)
    op = GraphOperator(ei, ew, num_nodes=n)
    got = M.normalized_dirichlet_energy(x, op).item()
    assert got == pytest.approx(_ref_normalized(x, w), rel=1e-13)
    assert M.normalized_dirichlet_energy(x, ei, edge_weight=ew).item() == pytest.approx(
        got, rel=1e-15
    )
    if name not in ("directed", "isolated"):  # the trace form: undirected, no isolated node
        assert got == pytest.approx(_ref_trace(ref.to_np(x), w), rel=1e-12)
    # Cai & Wang's A + I
    w_loops = ref.dense_weights(ei, ew, n, self_loops=True)
    loops = M.normalized_dirichlet_energy(x, op, self_loops=True).item()
    assert loops == pytest.approx(_ref_normalized(x, w_loops), rel=1e-13)
    if name != "directed":
        assert loops == pytest.approx(_ref_trace(ref.to_np(x), w_loops), rel=1e-12)


def test_normalized_energy_isolated_node_contributes_zero():
    ei = undirected([(0, 1), (1, 2)])  # node 3 isolated
    x = _features(4)
    with_isolated = M.normalized_dirichlet_energy(x, ei, batch=None)
    moved = x.clone()
    moved[3] += 1e3  # the isolated node's row does not enter; only 1/n counts it
    assert M.normalized_dirichlet_energy(moved, GraphOperator(ei, num_nodes=4)).item() == (
        pytest.approx(M.normalized_dirichlet_energy(x, GraphOperator(ei, num_nodes=4)).item())
    )
    alone = M.normalized_dirichlet_energy(x[:3], ei).item()
    assert M.normalized_dirichlet_energy(x, GraphOperator(ei, num_nodes=4)).item() == (
        pytest.approx(alone * 3 / 4, rel=1e-14)
    )
    assert torch.isfinite(with_isolated)


def test_normalized_energy_eigenvector_closed_form():
    ei = undirected([(0, 1), (1, 2), (2, 3), (3, 4), (1, 3), (0, 4), (2, 5)])
    n = 6
    w = ref.dense_weights(ei, None, n)
    s = 1.0 / np.sqrt(w.sum(1))
    lam, vecs = np.linalg.eigh(np.eye(n) - s[:, None] * w * s[None, :])
    for k in range(n):
        v = torch.from_numpy(vecs[:, k : k + 1].copy()) * 3.0
        expected = lam[k] * float((v**2).sum()) / n
        got = M.normalized_dirichlet_energy(v, ei).item()
        assert got == pytest.approx(expected, rel=1e-10, abs=1e-14), k
    # the D^{1/2} 1 eigenvector (eigenvalue 0): zero, although the features are not constant
    root = torch.from_numpy(np.sqrt(w.sum(1))).unsqueeze(1)
    assert M.normalized_dirichlet_energy(root, ei).item() == pytest.approx(0.0, abs=1e-15)


def test_normalized_energy_regular_graph_is_dirichlet_over_degree():
    cycle = undirected([(i, (i + 1) % 7) for i in range(7)])  # 2-regular
    complete = undirected([(i, j) for i in range(5) for j in range(i + 1, 5)])  # 4-regular
    for ei, n, d in [(cycle, 7, 2), (complete, 5, 4)]:
        x = _features(n, 4, seed=d)
        assert M.normalized_dirichlet_energy(x, ei).item() == pytest.approx(
            M.dirichlet_energy(x, ei).item() / d, rel=1e-14
        )


def test_normalized_energy_of_constant_features_depends_on_degrees():
    star = undirected([(0, i) for i in range(1, 6)])  # centre degree 5, leaves degree 1
    x = torch.full((6, 2), 3.0, dtype=torch.float64)
    expected = 5 * (1 - 1 / math.sqrt(5)) ** 2 * 9 * 2 / 6  # 5 pairs, ||c||^2 = 18
    assert M.normalized_dirichlet_energy(x, star).item() == pytest.approx(expected, rel=1e-14)
    assert M.dirichlet_energy(x, star).item() == 0.0
    # with A + I: degrees 6 and 2
    loops = 5 * (1 / math.sqrt(2) - 1 / math.sqrt(6)) ** 2 * 18 / 6
    got = M.normalized_dirichlet_energy(x, star, self_loops=True).item()
    assert got == pytest.approx(loops, rel=1e-14)
    cycle = undirected([(i, (i + 1) % 5) for i in range(5)])
    assert M.normalized_dirichlet_energy(torch.full((5, 2), 3.0), cycle).item() == 0.0


def test_normalized_energy_exact_under_a_large_offset():
    ei = undirected([(0, 1), (1, 2), (2, 3), (3, 4), (1, 3)])
    spread = _features(5, 3, seed=4) * 1e-3
    x = 1e8 + spread
    w = ref.dense_weights(ei, None, 5)
    expected = _ref_normalized(x, w)
    assert _rel(M.normalized_dirichlet_energy(x, ei).item(), expected) < 1e-12
    # on a regular graph the offset cancels exactly and only the spread is left
    cycle = undirected([(i, (i + 1) % 5) for i in range(5)])
    wc = ref.dense_weights(cycle, None, 5)
    expected = _ref_normalized(x, wc)
    got = M.normalized_dirichlet_energy(x, cycle).item()
    assert _rel(got, expected) < 1e-13
    s = 1.0 / np.sqrt(wc.sum(1))  # the naive form x_i/sqrt(d_i) - x_j/sqrt(d_j) loses it
    xs = ref.to_np(x) * s[:, None]
    naive = sum(wc[i, j] * np.sum((xs[i] - xs[j]) ** 2) for i in range(5) for j in range(5))
    assert _rel(naive / 10, expected) > 1e-6


def test_normalized_energy_refuses_bad_input():
    ei = undirected([(0, 1)])
    with pytest.raises(ValueError, match="self_loops"):
        M.normalized_dirichlet_energy(torch.ones(2, 1), ei, self_loops="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reduce"):
        M.normalized_dirichlet_energy(torch.ones(2, 1), ei, reduce="sum")  # type: ignore[arg-type]
    x = torch.ones(2, 1)
    x[0, 0] = float("nan")
    assert math.isnan(M.normalized_dirichlet_energy(x, ei).item())


# -- rank-one distance and stream variance ------------------------------------------------------


def test_rank_one_distance_and_variance_against_exact_rationals():
    for x in [_features(6, 3), 1e8 + _features(7, 4, seed=2) * 1e-2, -3.0 + _features(5, 2)]:
        centred, total = _exact_centred_sq(x), _exact_sq(x)
        assert _rel(M.rank_one_distance(x).item(), _sqrt_ratio(centred, total)) < 1e-13
        n, d = x.shape
        variance = float(centred / (n * d))
        assert _rel(M.stream_variance(x).item(), variance) < 1e-13
    # with the offset, float64 ||X||^2 - n ||xbar||^2 keeps nothing of the spread
    x = 1e8 + _features(7, 4, seed=2) * 1e-2
    x64 = ref.to_np(x)
    naive = np.sum(x64**2) - 7 * np.sum(x64.mean(0) ** 2)
    assert _rel(naive, float(_exact_centred_sq(x))) > 1e-2


def test_rank_one_distance_closed_forms():
    u = torch.tensor([[1.5, -2.0, 7.0]], dtype=torch.float64)
    assert M.rank_one_distance(u.expand(5, 3)).item() == 0.0  # 1 u^T: collapsed
    assert M.stream_variance(u.expand(5, 3)).item() == 0.0
    x = _features(6, 3)
    centred = x - x.mean(0)
    assert M.rank_one_distance(centred).item() == pytest.approx(1.0, rel=1e-14)  # zero mean
    assert M.rank_one_distance(1e-200 * x).item() == pytest.approx(
        M.rank_one_distance(x).item(), rel=1e-14
    )  # scale-invariant, no underflow
    assert M.rank_one_distance(1e200 * x).item() == pytest.approx(
        M.rank_one_distance(x).item(), rel=1e-14
    )  # no overflow
    assert math.isnan(M.rank_one_distance(torch.zeros(4, 2)).item())
    # v u^T with v not constant is rank one, but far from 1 u^T
    v = torch.tensor([[1.0], [-1.0], [2.0], [0.0]], dtype=torch.float64)
    assert M.rank_one_distance(v @ u).item() > 0.5
    assert M.stream_variance(x).item() == pytest.approx(
        float(x.var(0, unbiased=False).mean()), rel=1e-13
    )


# -- between layers -----------------------------------------------------------------------------


def test_angular_distance_against_mpmath_and_closed_forms():
    a, b = _features(8, 3, seed=1), _features(8, 3, seed=2)
    assert _rel(M.angular_distance(a, b).item(), _ref_angular(a, b)) < 1e-13
    assert M.angular_distance(a, a).item() == 0.0
    assert M.angular_distance(a, -a).item() == pytest.approx(1.0, rel=1e-15)
    # direction only; rows parallel but of different lengths resolve to ~1e-16 absolute
    assert M.angular_distance(a, 3.0 * a).item() == pytest.approx(0.0, abs=1e-15)
    e = torch.eye(2, dtype=torch.float64)
    assert M.angular_distance(e, e.flip(0)).item() == pytest.approx(0.5, rel=1e-15)
    z = a.clone()
    z[0] = 0.0  # a zero row: cosine 0, so the mean cosine is 7/8
    expected = math.acos(7 / 8) / math.pi
    assert M.angular_distance(z, z).item() == pytest.approx(expected, rel=1e-14)
    # the angle of the mean cosine (mean_cosine_similarity), not the mean of per-node angles
    c = M.mean_cosine_similarity(a, b).item()
    assert M.angular_distance(a, b).item() == pytest.approx(math.acos(c) / math.pi, rel=1e-12)


def test_angular_distance_exact_for_nearly_coinciding_rows():
    a = 1e3 + _features(6, 4, seed=3)
    b = a * (1 + 1e-12 * _features(6, 4, seed=5))  # angles ~1e-12
    expected = _ref_angular(a, b)
    assert expected > 0
    assert _rel(M.angular_distance(a, b).item(), expected) < 1e-12
    # arccos of the float64 mean cosine gets this wrong by orders of magnitude
    cos = (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))
    naive = float(torch.arccos(cos.mean().clamp(-1, 1)) / math.pi)
    assert _rel(naive, expected) > 1e-2


def test_relative_update_of_float32_states_one_ulp_apart():
    prev = (1.0 + _features(9, 5, seed=6) * 0.1).float()
    step = torch.zeros_like(prev)
    step[::2, ::3] = 1.0
    x = torch.nextafter(prev, prev + step)  # one float32 ulp (~1e-7 relative) on some entries
    assert bool((x != prev).any())
    diff = sum(
        (Fraction(float(u)) - Fraction(float(v))) ** 2
        for u, v in zip(x.flatten().tolist(), prev.flatten().tolist(), strict=True)
    )
    expected = _sqrt_ratio(Fraction(diff), _exact_sq(prev.double()))
    assert 1e-9 < expected < 1e-6
    assert _rel(M.relative_update(prev, x).item(), expected) < 1e-13
    assert M.relative_update(prev, prev).item() == 0.0
    assert M.relative_update(prev, 2 * prev).item() == pytest.approx(1.0, rel=1e-15)
    assert math.isinf(M.relative_update(torch.zeros(2, 2), torch.ones(2, 2)).item())
    assert math.isnan(M.relative_update(torch.zeros(2, 2), torch.zeros(2, 2)).item())


def test_between_layer_measures_refuse_shape_mismatch():
    for fn in (M.angular_distance, M.relative_update):
        with pytest.raises(ValueError, match=r"^x: expected the shape of x_prev"):
            fn(torch.ones(3, 2), torch.ones(3, 3))


# -- batches ------------------------------------------------------------------------------------


def _graphs(seed: int = 0) -> list[Data]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for n, offset in [(5, 0.0), (7, 3.0), (4, 0.0), (9, 1e8)]:
        src = torch.randint(0, n - 1, (2 * n,), generator=gen)
        dst = torch.randint(0, n - 1, (2 * n,), generator=gen)  # node n-1 stays isolated
        keep = src != dst
        ei = to_undirected(torch.stack([src[keep], dst[keep]]), num_nodes=n)
        x = offset + torch.randn(n, 3, generator=gen, dtype=torch.float64) * (
            1e-3 if offset > 10 else 1.0
        )
        out.append(Data(x=x, edge_index=ei, num_nodes=n))
    return out


PER_GRAPH = {
    "normalized": lambda x, g, b, **kw: M.normalized_dirichlet_energy(x, g, batch=b, **kw),
    "normalized_loops": lambda x, g, b, **kw: M.normalized_dirichlet_energy(
        x, g, batch=b, self_loops=True, **kw
    ),
    "rank_one": lambda x, g, b, **kw: M.rank_one_distance(x, batch=b, **kw),
    "variance": lambda x, g, b, **kw: M.stream_variance(x, batch=b, **kw),
    "angular": lambda x, g, b, **kw: M.angular_distance(x, x.roll(1, dims=1) * 2, batch=b, **kw),
    "update": lambda x, g, b, **kw: M.relative_update(x, _roll_within(x, b), batch=b, **kw),
}


def _roll_within(x: torch.Tensor, batch: torch.Tensor | None) -> torch.Tensor:
    """``x.roll(1, dims=0)`` inside each graph of a (sorted) batch vector."""
    if batch is None:
        return x.roll(1, dims=0)
    sizes = torch.bincount(batch).tolist()
    return torch.cat([part.roll(1, dims=0) for part in x.split(sizes)])


@pytest.mark.parametrize("name", list(PER_GRAPH))
def test_per_graph_values_equal_each_graph_alone(name):
    fn = PER_GRAPH[name]
    graphs = _graphs()
    batch = Batch.from_data_list(graphs)
    alone = [fn(d.x, d.edge_index, None).item() for d in graphs]
    per_graph = fn(batch.x, batch.edge_index, batch.batch, reduce="none")
    assert per_graph.shape == (4,)
    for got, want in zip(per_graph.tolist(), alone, strict=True):
        assert _rel(got, want) <= 1e-12, (got, want)
    assert fn(batch.x, batch.edge_index, batch.batch).item() == pytest.approx(
        np.mean(alone), rel=1e-12
    )
    single = fn(graphs[0].x, graphs[0].edge_index, None, reduce="none")
    assert single.shape == (1,)


def test_non_finite_input_poisons_only_its_graph():
    b = torch.tensor([0, 0, 0, 1, 1])
    ei = torch.tensor([[0, 1, 3], [1, 0, 4]])
    x = _features(5, 2)
    for bad in (float("nan"), float("inf")):
        y = x.clone()
        y[1, 0] = bad
        for fn in (
            lambda v: M.normalized_dirichlet_energy(v, ei, batch=b, reduce="none"),
            lambda v: M.rank_one_distance(v, batch=b, reduce="none"),
            lambda v: M.stream_variance(v, batch=b, reduce="none"),
            lambda v: M.relative_update(x, v, batch=b, reduce="none"),
            lambda v: M.angular_distance(v, x, batch=b, reduce="none"),
        ):
            out = fn(y)
            assert not torch.isfinite(out[0]) and torch.equal(out[1], fn(x)[1])


def test_batch_object_carries_the_batch():
    batch = Batch.from_data_list(_graphs())
    assert torch.equal(
        M.normalized_dirichlet_energy(batch.x, batch, reduce="none"),
        M.normalized_dirichlet_energy(batch.x, batch.edge_index, batch=batch.batch, reduce="none"),
    )
    assert torch.equal(
        M.rank_one_distance(batch.x, batch=batch, reduce="none"),
        M.rank_one_distance(batch.x, batch=batch.batch, reduce="none"),
    )


# -- Probe and CLI ------------------------------------------------------------------------------


class _Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList(nn.Linear(3, 3) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def test_probe_records_the_new_columns_with_nan_at_each_first_layer():
    ei = undirected([(0, 1), (1, 2), (2, 3), (3, 4), (0, 2)])
    model = _Stack()
    gen = torch.Generator().manual_seed(1)
    inputs = [torch.randn(5, 3, generator=gen) for _ in range(3)]  # three steps
    with Probe(model, ei, metrics=NEW) as probe, torch.no_grad():
        for x in inputs:
            model(x)
    frame = probe.to_frame()
    assert list(frame.columns) == ["layer", *NEW, "step"]
    for step, x in enumerate(inputs):
        states = [x]
        with torch.no_grad():
            for layer in model.layers:
                states.append(layer(states[-1]))
        rows = frame[frame.step == step].set_index("layer")
        assert math.isnan(rows.loc[0, "angular_distance"])
        assert math.isnan(rows.loc[0, "relative_update"])
        for k in range(4):  # layer k is the output of layers[k-1], states[k] above
            assert rows.loc[k, "normalized_dirichlet_energy"] == pytest.approx(
                M.normalized_dirichlet_energy(states[k], ei).item(), rel=1e-12
            )
            assert rows.loc[k, "rank_one_distance"] == pytest.approx(
                M.rank_one_distance(states[k]).item(), rel=1e-12
            )
            assert rows.loc[k, "stream_variance"] == pytest.approx(
                M.stream_variance(states[k]).item(), rel=1e-12
            )
            if k:
                assert rows.loc[k, "angular_distance"] == pytest.approx(
                    M.angular_distance(states[k - 1], states[k]).item(), rel=1e-12
                )
                assert rows.loc[k, "relative_update"] == pytest.approx(
                    M.relative_update(states[k - 1], states[k]).item(), rel=1e-12
                )


def test_probe_per_graph_between_layers():
    graphs = _graphs()
    batch = Batch.from_data_list(graphs)
    probe = Probe(None, batch, metrics=NEW, reduce="none")
    y = batch.x * torch.linspace(0.5, 2.0, 3, dtype=torch.float64) + 0.25
    probe.record(0, batch.x)
    probe.record(1, y)
    frame = probe.to_frame()
    assert frame[frame.layer == 0]["relative_update"].isna().all()
    at1 = frame[frame.layer == 1].sort_values("graph")
    for g, data in enumerate(graphs):
        ya = data.x * torch.linspace(0.5, 2.0, 3, dtype=torch.float64) + 0.25
        assert at1["relative_update"].iloc[g] == pytest.approx(
            M.relative_update(data.x, ya).item(), rel=1e-12
        )
        assert at1["angular_distance"].iloc[g] == pytest.approx(
            M.angular_distance(data.x, ya).item(), rel=1e-12
        )
        assert at1["normalized_dirichlet_energy"].iloc[g] == pytest.approx(
            M.normalized_dirichlet_energy(ya, data.edge_index).item(), rel=1e-12
        )


def test_new_metrics_are_listed_accepted_and_not_default():
    runner = CliRunner()
    listed = runner.invoke(app, ["metrics", "--names"]).output.split()
    full = runner.invoke(app, ["metrics"]).output
    described = {
        m["name"]: m
        for m in json.loads(runner.invoke(app, ["metrics", "--json"]).output)["per_layer"]
    }
    assert check_metrics(NEW) == NEW
    for name in NEW:
        assert name in listed and name in full and name not in DEFAULT_METRICS
        assert described[name]["default"] is False
