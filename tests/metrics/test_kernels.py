"""The difference kernel (target-sorted runs, chunked, CSR products) and the fast paths of the
sums of squares: the same numbers however the work is cut, and no host read where one would
stall a GPU."""

from __future__ import annotations

import itertools
import math

import mpmath
import pytest
import pandas as pd
import torch
from torch import nn

import oversmooth.graph as G
import oversmooth.metrics as M
from oversmooth.metrics import kernels
from oversmooth.nn import kernel as nn_kernel
from oversmooth import Probe
from oversmooth.graph import GraphOperator


def hub_graph(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, int]:
    """30 nodes: random edges with repeats and self loops, a hub with 45 in-edges (more than
    one block in the small chunking below), isolated nodes 26..29, weights in [0.05, 3)."""
    gen = torch.Generator().manual_seed(seed)
    n = 30
    rand = torch.randint(0, 26, (2, 80), generator=gen)
    hub = torch.stack([torch.randint(0, 26, (45,), generator=gen), torch.full((45,), 7)])
    ei = torch.cat([rand, hub, torch.tensor([[3, 3, 5], [3, 3, 9]])], dim=1)  # repeats
    weight = torch.rand(ei.size(1), generator=gen, dtype=torch.float64) * 3 + 0.05
    return ei, weight, n


def reference(x: torch.Tensor, ei: torch.Tensor, w: torch.Tensor, n: int):
    """Delta x and sum_e w_e ||x_src - x_dst||^2 edge by edge, in Python floats."""
    deg = [0.0] * n
    for (_, t), we in zip(ei.t().tolist(), w.tolist(), strict=True):
        deg[t] += we
    rows = x.tolist()
    lap = [[0.0] * x.size(1) for _ in range(n)]
    total = 0.0
    for (s, t), we in zip(ei.t().tolist(), w.tolist(), strict=True):
        diff = [a - b for a, b in zip(rows[s], rows[t], strict=True)]
        total += we * sum(v * v for v in diff)
        for k, v in enumerate(diff):
            lap[t][k] += we / deg[t] * v
    return torch.tensor(lap, dtype=torch.float64), total


CHUNKINGS = {
    "whole": {},  # the defaults: one chunk
    "chunks": {"BLOCK_EDGES": 4, "CHUNK_VALUES": 24, "WHOLE_VALUES": 0},  # 8-edge chunks
    "blocks": {"BLOCK_EDGES": 4, "CHUNK_VALUES": 1, "WHOLE_VALUES": 0},  # one block per chunk
}


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_laplacian_and_edge_sum_agree_with_the_edge_list_however_chunked(
    monkeypatch, chunking, weighted
):
    for name, value in CHUNKINGS[chunking].items():
        monkeypatch.setattr(G, name, value)
    ei, w, n = hub_graph()
    w = w if weighted else torch.ones_like(w)
    op = GraphOperator(ei, w if weighted else None, num_nodes=n)
    assert op.runs.unit is False  # repeated edges merge: weight 2 on (3, 3)
    x = torch.randn(n, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    lap, total = reference(x, ei, w, n)
    assert torch.allclose(op.laplacian(x), lap, rtol=1e-13, atol=1e-14)
    assert op.laplacian(x)[26:].eq(0).all()  # isolated nodes: 0, not -x
    assert M.dirichlet_energy(x, op).item() == pytest.approx(0.5 * total / n, rel=1e-13)
    assert M.laplacian_energy(x, op).item() == pytest.approx(float((lap**2).sum()) / n, rel=1e-13)
    # the Probe's workspace path (its own scratch, Delta x accumulated in its buffer)
    probe = Probe(None, op, metrics=["laplacian_energy", "dirichlet_energy"])
    probe.record(0, x)
    row = probe.to_frame().iloc[0]
    assert row["laplacian_energy"] == pytest.approx(float((lap**2).sum()) / n, rel=1e-13)
    assert row["dirichlet_energy"] == pytest.approx(0.5 * total / n, rel=1e-13)


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_a_batch_is_measured_graph_by_graph_however_chunked(monkeypatch, chunking):
    for name, value in CHUNKINGS[chunking].items():
        monkeypatch.setattr(G, name, value)
    ei, w, n = hub_graph(2)
    both = torch.cat([ei, ei + n], dim=1)
    batch = torch.arange(2).repeat_interleave(n)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2 * n, 4, dtype=torch.float64, generator=gen)
    op = GraphOperator(both, torch.cat([w, w]), num_nodes=2 * n, batch=batch)
    per_graph = M.dirichlet_energy(x, op, reduce="none")
    for g in range(2):
        alone = M.dirichlet_energy(x[g * n : (g + 1) * n], GraphOperator(ei, w, num_nodes=n))
        assert per_graph[g].item() == pytest.approx(alone.item(), rel=1e-13)


def test_unit_weights_without_repeats_take_the_unweighted_sum():
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    assert GraphOperator(ei).runs.unit
    assert not GraphOperator(ei, torch.ones(4)).runs.unit  # given weights are always used
    x = torch.tensor([[0.0], [1.0], [3.0]], dtype=torch.float64)
    assert M.dirichlet_energy(x, ei).item() == pytest.approx(5 / 3, rel=1e-15)


def test_constant_states_give_exactly_zero_in_every_chunking(monkeypatch):
    monkeypatch.setattr(G, "BLOCK_EDGES", 4)
    monkeypatch.setattr(G, "WHOLE_VALUES", 0)
    monkeypatch.setattr(G, "CHUNK_VALUES", 24)
    ei, w, n = hub_graph()
    x = torch.full((n, 3), 1e8 + 0.1, dtype=torch.float64)
    assert M.laplacian_energy(x, ei, edge_weight=w).item() == 0.0
    assert M.dirichlet_energy(x, ei, edge_weight=w).item() == 0.0


# -- fast paths of the sums of squares ---------------------------------------------------------


def scaled_only(monkeypatch) -> None:
    """Take the paths a GPU takes: no value read to the host (the metrics', and the csr
    kernel's softmax, which keeps its row maxima)."""
    monkeypatch.setattr(kernels, "host_reads_free", lambda x: False)
    monkeypatch.setattr(nn_kernel, "host_reads_free", lambda x: False)


@pytest.mark.parametrize("scale", [1.0, 1e-30, 1e30])
def test_fast_paths_give_the_scaled_numbers_bit_for_bit(monkeypatch, scale):
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(300, 16, dtype=torch.float64, generator=gen) * scale
    y = x + 1e-9 * scale * torch.randn(300, 16, dtype=torch.float64, generator=gen)
    fast = (M.feature_norm(x), kernels.unit_rows(x))
    cos = M.mean_cosine_similarity(x, y)  # <x, y> / (|x| |y|), not through unit rows
    scaled_only(monkeypatch)
    slow = (M.feature_norm(x), kernels.unit_rows(x))
    for a, b in zip(fast, slow, strict=True):
        assert torch.equal(a, b)
    assert cos.item() == pytest.approx(M.mean_cosine_similarity(x, y).item(), rel=1e-15)
    # float32 values (narrow): no check needed, same numbers as the scaled path
    x32 = x.float()
    narrow = kernels.unit_rows(x32.double(), narrow=True)
    assert torch.equal(narrow, kernels.unit_rows(x32.double()))


def test_rows_far_outside_the_safe_range_fall_back_to_scaling():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(8, 4, dtype=torch.float64, generator=gen)
    y = x.clone()
    x[2] *= 1e-200  # its squares underflow: a direct norm would be 0 and its cosine lost
    y[2] = x[2] * 3
    x[5] *= 1e200  # its squares overflow
    y[5] = -x[5]
    cos = M.mean_cosine_similarity(x, y).item()
    assert cos == pytest.approx((6 + 1 - 1) / 8, rel=1e-14)
    with mpmath.workdps(40):  # the squares of row 5 exceed the float64 range
        exact = mpmath.sqrt(mpmath.fsum(mpmath.mpf(v) ** 2 for v in x.flatten().tolist()) / 8)
    assert M.feature_norm(x).item() == pytest.approx(float(exact), rel=1e-14)
    x[0, 0] = float("inf")  # the norm is infinite, on every path
    assert M.feature_norm(x).item() == math.inf == M.feature_norm(x.float()).item()
    x[0, 0] = float("nan")
    assert math.isnan(M.feature_norm(x).item()) and math.isnan(M.feature_norm(x.float()).item())


def test_zero_rows_keep_cosine_zero_on_every_path(monkeypatch):
    x = torch.randn(5, 3, dtype=torch.float64)
    x[1] = 0.0
    expected = (4 + 0) / 5
    assert M.mean_cosine_similarity(x, 2 * x).item() == pytest.approx(expected, rel=1e-14)
    assert M.mean_cosine_similarity(x.float(), 2 * x.float()).item() == pytest.approx(
        expected, rel=1e-7
    )
    scaled_only(monkeypatch)
    assert M.mean_cosine_similarity(x, 2 * x).item() == pytest.approx(expected, rel=1e-14)


class Stack(nn.Module):
    """Four residual layers on a fixed graph: a model the Probe hooks like any PyG model."""

    def __init__(self, width: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width, dtype=dtype) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + torch.tanh(layer(x))
        return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_no_host_read_while_the_probe_measures_a_layer(monkeypatch, dtype):
    """Once the graph operator exists, measuring a layer reads nothing back to the host (on a
    GPU each read would stall the pipeline once per layer).  float64 states are measured as a
    GPU measures them (no free host reads); float32 states need no check at all.  The first
    forward's checks of the layer list read what they copied at its end (not counted: the
    layers have run), and a later forward reads nothing at all."""
    ei, w, n = hub_graph()
    op = GraphOperator(ei, w, num_nodes=n)
    model = Stack(8, dtype)
    x = torch.randn(n, 8, dtype=dtype)
    if dtype == torch.float64:
        scaled_only(monkeypatch)
    probe = Probe(model, op, similarity=True)
    assert counted_reads(monkeypatch, probe, model, x, end=False) == []
    probe.reset()  # the first forward's checks are done
    assert counted_reads(monkeypatch, probe, model, x) == []
    frame = probe.to_frame()
    assert len(frame) == 5 and frame["laplacian_energy"].notna().all()


def counted_reads(
    monkeypatch, probe: Probe, model: nn.Module, x: torch.Tensor, end: bool = True
) -> list[str]:
    """The host reads (by method) of one probed forward of ``model(x)``; without ``end``, those
    before the probe's hook at the forward's end only."""
    calls: list[str] = []
    ended = [False]
    original_end = probe._on_forward_end

    def on_end(*args):
        ended[0] = not end
        return original_end(*args)

    monkeypatch.setattr(probe, "_on_forward_end", on_end)
    methods = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__")
    originals = {name: getattr(torch.Tensor, name) for name in methods}
    for name, original in originals.items():

        def counting(self, *args, _name=name, _original=original, **kwargs):
            if not ended[0]:
                calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    try:
        with torch.no_grad(), probe:
            model(x)
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
    return calls


@pytest.mark.parametrize(("dtype", "floor"), [(torch.float32, "shadow"), (torch.float64, "twin")])
def test_host_reads_of_a_probed_analysis_do_not_grow_with_depth(monkeypatch, dtype, floor):
    """The whole probed forward of `oversmooth analyze` (model, Probe, float-floor tracker)
    reads to the host a fixed number of times per forward, whatever the depth: none per layer.
    (Reads are counted as a GPU would make them: no free host reads.)"""
    from oversmooth.analysis import probe_run
    from oversmooth.data import csbm
    from oversmooth.nn import build_model

    scaled_only(monkeypatch)
    data = csbm(n=60, degree=4, classes=2, features=6, seed=0)
    graph = GraphOperator(data.edge_index, num_nodes=data.num_nodes)
    methods = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__")
    counts = []
    for depth in (2, 6):
        name = str(dtype).removeprefix("torch.")
        model = build_model("postln", depth=depth, in_channels=6, out_channels=2, dtype=name)
        probe_run(model, data, graph=graph, floor=floor)  # warm: lazily built parts
        calls: list[str] = []
        originals = {name: getattr(torch.Tensor, name) for name in methods}
        for name, original in originals.items():

            def counting(self, *args, _name=name, _original=original, _calls=calls, **kwargs):
                _calls.append(_name)
                return _original(self, *args, **kwargs)

            monkeypatch.setattr(torch.Tensor, name, counting)
        try:
            with torch.no_grad():
                model_only = model(data.x.to(dtype), data.edge_index)  # noqa: F841
            base = len(calls)
            probe_run(model, data, graph=graph, floor=floor)
        finally:
            for name, original in originals.items():
                setattr(torch.Tensor, name, original)
        counts.append(len(calls) - base)
    assert counts[0] == counts[1], counts


def test_energies_stay_differentiable_for_use_as_a_loss_term():
    """A state that autograd records (a Dirichlet-energy regulariser, say) gets the gradient
    of the plain edge-list expressions."""
    ei, w, n = hub_graph()
    op = GraphOperator(ei, w, num_nodes=n)
    x = torch.randn(n, 3, dtype=torch.float64, requires_grad=True)
    (M.dirichlet_energy(x, op) + M.laplacian_energy(x, op)).backward()
    got = x.grad.clone()
    x.grad = None
    s, t = ei
    deg = torch.zeros(n, dtype=torch.float64).index_add(0, t, w)
    diff = x[s] - x[t]
    dirichlet = 0.5 * (w * (diff**2).sum(1)).sum() / n
    lap = torch.zeros(n, 3, dtype=torch.float64).index_add(0, t, diff * (w / deg[t])[:, None])
    (dirichlet + (lap**2).sum() / n).backward()
    assert torch.allclose(got, x.grad, rtol=1e-12, atol=1e-14)


def test_a_large_state_is_measured_in_fresh_buffers_with_the_same_numbers(monkeypatch):
    """Above the Probe's buffer limit (large graphs) each layer gets fresh float64 buffers,
    freed after it, and the edge pass streams each row's sum of squares; the columns are the
    same numbers but for the order of that sum (on an AVX-512 CPU the Laplacian energy moved
    by one unit in the last place)."""
    import oversmooth.metrics.state as S

    for name, value in CHUNKINGS["chunks"].items():
        monkeypatch.setattr(G, name, value)
    ei, w, n = hub_graph()
    op = GraphOperator(ei, w, num_nodes=n)
    gen = torch.Generator().manual_seed(7)
    states = [torch.randn(n, 3, dtype=torch.float64, generator=gen) for _ in range(3)]

    def frame():
        probe = Probe(None, op)
        for k, x in enumerate(states):
            probe.record(k, x)
        return probe.to_frame()

    kept = frame()
    monkeypatch.setattr(S, "KEEP_VALUES", 0)
    fresh = frame()
    pd.testing.assert_frame_equal(kept, fresh, check_exact=False, rtol=8e-16, atol=0.0)


# -- pairs: an undirected graph's edge pass ------------------------------------------------------


def symmetric_hub(seed: int = 0, same_weights: bool = True):
    """hub_graph with every edge also reversed (weights symmetric or not), so every merged edge
    has its reverse; repeats, self loops and isolated nodes stay."""
    ei, w, n = hub_graph(seed)
    back = torch.rand(w.numel(), generator=torch.Generator().manual_seed(seed + 1)) + 0.5
    w_back = w if same_weights else back.to(torch.float64)
    return torch.cat([ei, ei.flip(0)], 1), torch.cat([w, w_back]), n


@pytest.mark.parametrize("same_weights", [True, False])
def test_pairs_give_the_edge_lists_laplacian_and_edge_sum(same_weights):
    ei, w, n = symmetric_hub(same_weights=same_weights)
    op = GraphOperator(ei, w, num_nodes=n)
    pairs = kernels.edge_pairs(op)
    assert pairs is not None and pairs.pairs < op.runs.nnz // 2 + 1
    x = torch.randn(n, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    lap, total = kernels.edge_pass(x, op)
    want_lap, want_total = reference(x, ei, w, n)
    assert torch.allclose(lap, want_lap, rtol=1e-12, atol=1e-14)
    assert total.item() == pytest.approx(want_total, rel=1e-13)
    # the pass over every edge gives the same numbers up to the order of the sums
    all_lap, all_total = op.runs.differences(x)
    assert torch.allclose(lap, all_lap, rtol=1e-13, atol=1e-15)
    assert total.item() == pytest.approx(all_total.item(), rel=1e-14)


@pytest.mark.parametrize("same_weights", [True, False])
def test_pairs_write_the_laplacian_into_out_with_the_sparse_products_numbers(same_weights):
    """The pass by pairs writes ``Delta x`` into a given buffer (a probe's, reused from layer
    to layer) and gives the signed matrix's sparse product, bit for bit."""
    ei, w, n = symmetric_hub(same_weights=same_weights)
    op = GraphOperator(ei, w, num_nodes=n)
    pairs = kernels.edge_pairs(op)
    assert pairs is not None
    gen = torch.Generator().manual_seed(4)
    for width in (1, 5, 32):
        x = 3.0 + 1e-6 * torch.randn(n, width, dtype=torch.float64, generator=gen)
        out = torch.full_like(x, float("nan"))  # beta = 0: what the buffer held is ignored
        lap, total = kernels.edge_pass(x, op, out=out)
        assert lap is out
        diff = x[pairs.src] - x[pairs.dst]
        assert torch.equal(lap, torch.sparse.mm(pairs.signed, diff))
        fresh, again = kernels.edge_pass(x, op)
        assert torch.equal(fresh, lap) and torch.equal(again, total)


def test_pairs_differences_from_the_incidence_product_are_the_gathered_ones_bit_for_bit():
    """The pairs' differences come from one CSR product of the +1/-1 incidence matrix: one
    rounding per entry, the subtraction's, on every value a state can hold (subnormals, the
    largest finite, infinities, NaN; only the sign of a zero difference may differ)."""
    ei, w, n = symmetric_hub()
    pairs = kernels.edge_pairs(GraphOperator(ei, w, num_nodes=n))
    assert pairs is not None
    gen = torch.Generator().manual_seed(5)
    special = torch.tensor(
        [0.0, -0.0, 5e-324, -2.2e-308, 1.7976931348623157e308, float("inf"), float("nan")],
        dtype=torch.float64,
    )
    for width, value in itertools.product((1, 3, 33), special):
        x = torch.randn(n, width, dtype=torch.float64, generator=gen) * 10.0 ** torch.randint(
            -300, 300, (n, width), generator=gen
        ).to(torch.float64)
        x[torch.rand(n, width, generator=gen) < 0.2] = value
        got = torch.sparse.mm(pairs.incidence, x)
        want = x[pairs.src] - x[pairs.dst]
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.nan_to_num(0.0), want.nan_to_num(0.0))  # (-0 == 0)


def test_pairs_of_unit_weights_and_constant_states():
    ei = torch.tensor([[0, 1, 1, 2, 2, 0, 2, 3], [1, 0, 2, 1, 0, 2, 3, 2]])
    op = GraphOperator(ei, num_nodes=5)  # node 4 isolated
    assert kernels.edge_pairs(op) is not None
    x = torch.full((5, 3), 1e8 + 0.1, dtype=torch.float64)
    lap, total = kernels.edge_pass(x, op)
    assert total.item() == 0.0 and not lap.any()
    x = torch.randn(5, 3, dtype=torch.float64)
    _, total = kernels.edge_pass(x, op)
    _, want = reference(x, ei, torch.ones(8, dtype=torch.float64), 5)
    assert total.item() == pytest.approx(want, rel=1e-14)


def test_directed_and_batched_graphs_take_the_pass_over_every_edge():
    ei, w, n = hub_graph()  # random directions: some edge has no reverse
    assert kernels.edge_pairs(GraphOperator(ei, w, num_nodes=n)) is None
    sym, ws, _ = symmetric_hub()
    batched = GraphOperator(sym, ws, num_nodes=n, batch=torch.zeros(n, dtype=torch.long))
    assert kernels.edge_pairs(batched) is None
    x = torch.randn(n, 2, dtype=torch.float64)
    lap, total = kernels.edge_pass(x, batched)
    want_lap, want_total = reference(x, sym, ws, n)
    assert torch.allclose(lap, want_lap, rtol=1e-12, atol=1e-14)
    assert total.item() == pytest.approx(want_total, rel=1e-13)


def test_an_undirected_graph_too_large_for_pairs_takes_the_chunked_pass(monkeypatch):
    ei, w, n = symmetric_hub(same_weights=False)
    op = GraphOperator(ei, w, num_nodes=n)
    x = torch.randn(n, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    lap, total = kernels.edge_pass(x, op)  # by pairs
    monkeypatch.setattr(kernels, "PAIRS_VALUES", 0)
    for name, value in CHUNKINGS["chunks"].items():
        monkeypatch.setattr(G, name, value)
    chunked_lap, chunked_total = kernels.edge_pass(x, op)
    assert torch.allclose(lap, chunked_lap, rtol=1e-13, atol=1e-15)
    assert total.item() == pytest.approx(chunked_total.item(), rel=1e-14)


def test_pairs_are_not_built_for_a_graph_with_more_pairs_than_ever_measured(monkeypatch):
    # more pairs than PAIRS_VALUES: no width is measured by pairs, so none are built (at 10^6
    # nodes they were 0.3 GiB kept for nothing) and the pass over every edge runs, unchanged
    ei, w, n = symmetric_hub(same_weights=False)
    op = GraphOperator(ei, w, num_nodes=n)
    monkeypatch.setattr(kernels, "PAIRS_VALUES", (op.runs.nnz - n) // 2 - 1)
    assert kernels.edge_pairs(op) is None
    x = torch.randn(n, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    lap, total = kernels.edge_pass(x, op)
    want_lap, want_total = op.runs.differences(x)
    assert torch.equal(lap, want_lap) and torch.equal(total, want_total)
    monkeypatch.setattr(kernels, "PAIRS_VALUES", op.runs.nnz)  # a bound it fits: built
    assert kernels.edge_pairs(GraphOperator(ei, w, num_nodes=n)) is not None
