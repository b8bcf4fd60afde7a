"""PyG-native inputs: Data/Batch/sparse/dense graphs, per-graph metrics, steps, residual
streams, hetero refusal."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch_geometric.data import Batch, Data, HeteroData
from torch_geometric.nn import GCN, GCNConv
from torch_geometric.utils import (
    to_dense_adj,
    to_dense_batch,
    to_torch_coo_tensor,
    to_undirected,
)

import oversmooth.metrics as M
from oversmooth import Probe, as_graph, prune_sensitivity
from oversmooth.config import ModelConfig

# every public metric, as a function of (x, graph-like, **kw) -> value
GRAPH_METRICS = {
    "dirichlet": lambda x, g, **kw: M.dirichlet_energy(x, g, **kw),
    "laplacian": lambda x, g, **kw: M.laplacian_energy(x, g, **kw),
    "laplacian_degree": lambda x, g, **kw: M.laplacian_energy_degree(x, g, **kw),
    "rayleigh": lambda x, g, **kw: M.rayleigh_energy(x, g, **kw),
    "energy_3": lambda x, g, **kw: M.energy(x, g, 3, **kw),
    "energy_4": lambda x, g, **kw: M.energy(x, g, 4, **kw),
    "rusch": lambda x, g, **kw: M.rusch_dirichlet_energy(x, g, **kw),
    "mean_average_distance": lambda x, g, **kw: M.mean_average_distance(x, g, **kw),
    "mean_average_distance_global": lambda x, g, **kw: M.mean_average_distance_global(x, g, **kw),
}
FREE_METRICS = {
    "effective_rank": lambda x, b, **kw: M.effective_rank(x, batch=b, **kw),
    "feature_norm": lambda x, b, **kw: M.feature_norm(x, batch=b, **kw),
    "cosine": lambda x, b, **kw: M.mean_cosine_similarity(x, x.flip(1), batch=b, **kw),
    "mad_global_free": lambda x, b, **kw: M.mean_average_distance_global(x, batch=b, **kw),
}


def _graphs(seed: int = 0) -> list[Data]:
    """Four small graphs of different sizes, one with an isolated node, features near an
    offset (the oversmoothed regime) for two of them."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for n, offset in [(5, 0.0), (7, 3.0), (4, 0.0), (9, 100.0)]:
        src = torch.randint(0, n - 1, (2 * n,), generator=gen)
        dst = torch.randint(0, n - 1, (2 * n,), generator=gen)  # node n-1 stays isolated
        keep = src != dst
        ei = to_undirected(torch.stack([src[keep], dst[keep]]), num_nodes=n)  # no multi-edges
        x = offset + torch.randn(n, 3, generator=gen, dtype=torch.float64) * (
            1e-6 if offset > 10 else 1.0
        )
        out.append(Data(x=x, edge_index=ei, num_nodes=n))
    return out


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


@pytest.mark.parametrize("name", list(GRAPH_METRICS))
def test_per_graph_metrics_of_a_batch_equal_each_graph_alone(name):
    graphs = _graphs()
    batch = Batch.from_data_list(graphs)
    fn = GRAPH_METRICS[name]
    per_graph = fn(batch.x, batch, reduce="none")
    alone = [fn(g.x, g.edge_index).item() for g in graphs]
    assert per_graph.shape == (4,)
    for got, want in zip(per_graph.tolist(), alone, strict=True):
        assert _rel(got, want) <= 1e-12, (got, want)
    assert fn(batch.x, batch).item() == pytest.approx(np.mean(alone), rel=1e-12)
    # the same with an explicit batch vector next to the edge_index
    explicit = fn(batch.x, batch.edge_index, batch=batch.batch, reduce="none")
    assert torch.equal(explicit, per_graph)


@pytest.mark.parametrize("name", list(FREE_METRICS))
def test_graph_free_metrics_per_graph(name):
    graphs = _graphs(1)
    batch = Batch.from_data_list(graphs)
    fn = FREE_METRICS[name]
    per_graph = fn(batch.x, batch.batch, reduce="none")
    for got, g in zip(per_graph.tolist(), graphs, strict=True):
        assert _rel(got, fn(g.x, None).item()) <= 1e-12
    assert torch.equal(fn(batch.x, batch, reduce="none"), per_graph)  # a Batch works too


def test_layer_similarity_per_graph():
    graphs = _graphs(2)
    batch = Batch.from_data_list(graphs)
    states = [batch.x, batch.x.roll(1, dims=1), batch.x * torch.tensor([1.0, -1.0, 2.0])]
    per_graph = M.layer_similarity(states, batch=batch.batch, reduce="none")
    assert per_graph.shape == (4, 3, 3)
    offsets = np.cumsum([0] + [g.num_nodes for g in graphs])
    for b in range(4):
        alone = M.layer_similarity([s[offsets[b] : offsets[b + 1]] for s in states])
        assert torch.allclose(per_graph[b], alone, rtol=1e-12, atol=1e-15)


def test_relative_energy_takes_one_column_per_graph():
    e = torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=torch.float64)
    r = M.relative_energy(e)
    assert r[1].tolist() == [1.0, -0.5] and torch.isnan(r[0]).all()


def test_probe_on_a_batch_equals_each_graph_probed_alone():
    torch.manual_seed(0)
    graphs = _graphs(3)
    batch = Batch.from_data_list(graphs)
    model = GCN(3, 8, num_layers=4).double().eval()
    names = ["laplacian_energy", "dirichlet_energy", "relative_energy", "mean_cosine_similarity"]
    names += ["feature_norm", "rayleigh_energy", "mean_average_distance"]
    names += ["mean_average_distance_global", "effective_rank"]
    with Probe(model, batch, metrics=names, reduce="none") as probe, torch.no_grad():
        model(batch.x, batch.edge_index)
    frame = probe.to_frame()
    assert frame.columns[0] == "layer" and list(frame.columns[-2:]) == ["step", "graph"]
    assert len(frame) == 5 * 4
    for b, g in enumerate(graphs):
        with Probe(model, g.edge_index, metrics=names) as alone, torch.no_grad():
            model(g.x, g.edge_index)
        want = alone.to_frame()
        got = frame[frame["graph"] == b].reset_index(drop=True)
        for name in names:
            for a, w in zip(got[name], want[name], strict=True):
                assert (math.isnan(a) and math.isnan(w)) or _rel(a, w) <= 1e-12, (name, a, w)
    with Probe(model, batch, metrics=names) as mean, torch.no_grad():
        model(batch.x, batch.edge_index)
    averaged = frame.groupby("layer")[names[1:]].mean()  # the default reduce="mean"
    assert np.allclose(
        mean.to_frame()[names[1:]].to_numpy(), averaged.to_numpy(), rtol=1e-12, equal_nan=True
    )


def _two_graph_batch():
    return Batch.from_data_list(_graphs(4)[:2])


@pytest.mark.parametrize(
    "kind",
    ["dense", "bool", "coo", "csr", "data_adj_t", "dense_batch", "operator", "edge_index_cls"],
)
def test_sparse_and_dense_adjacency_equal_edge_index(kind):
    graphs = _graphs(5)
    g = graphs[1]
    x = g.x
    weight = torch.rand(g.edge_index.size(1), dtype=torch.float64) + 0.5
    ei = g.edge_index
    if kind == "dense_batch":
        batch = Batch.from_data_list(graphs)
        adj = to_dense_adj(batch.edge_index, batch.batch)
        xd, mask = to_dense_batch(batch.x, batch.batch)
        for name, fn in GRAPH_METRICS.items():
            want = fn(batch.x, batch, reduce="none")
            got = fn(xd, as_graph(adj, mask=mask), reduce="none")
            assert torch.allclose(got, want, rtol=1e-12, atol=0), name
        return
    if kind == "bool":
        graph = to_dense_adj(ei, max_num_nodes=g.num_nodes)[0].bool()
        weight = None
    elif kind == "dense":
        graph = to_dense_adj(ei, edge_attr=weight, max_num_nodes=g.num_nodes)[0]
    elif kind in ("coo", "csr"):
        graph = to_torch_coo_tensor(ei, weight, size=g.num_nodes).coalesce()
        graph = graph.to_sparse_csr() if kind == "csr" else graph
    elif kind == "edge_index_cls":  # PyG's own sparse index class, sorted by target
        from torch_geometric import EdgeIndex

        graph, perm = EdgeIndex(ei, sparse_size=(g.num_nodes, g.num_nodes)).sort_by("col")
        weight = weight[perm]
        ei = ei[:, perm]
        graph = Data(x=x, edge_index=graph, edge_weight=weight, num_nodes=g.num_nodes)
    elif kind == "data_adj_t":  # PyG's ToSparseTensor layout: adj_t[dst, src]
        adj_t = to_torch_coo_tensor(ei.flip(0), weight, size=g.num_nodes)
        graph = Data(x=x, adj_t=adj_t, num_nodes=g.num_nodes)
    else:
        graph = as_graph(ei, edge_weight=weight, num_nodes=g.num_nodes)
    for name, fn in GRAPH_METRICS.items():
        unweighted = ("rusch", "mean_average_distance")
        want = fn(x, ei, **({} if weight is None or name in unweighted else {}))
        if weight is not None and name not in unweighted:
            want = fn(x, as_graph(ei, edge_weight=weight, num_nodes=g.num_nodes))
        assert fn(x, graph).item() == pytest.approx(want.item(), rel=1e-12), name
    model = GCN(3, 4, num_layers=2).double().eval()
    with Probe(model, graph) as dense, torch.no_grad():
        model(x, ei)
    ref_graph = as_graph(ei, edge_weight=weight, num_nodes=g.num_nodes)
    with Probe(model, ref_graph) as ref, torch.no_grad():
        model(x, ei)
    if kind != "bool":
        assert np.allclose(
            dense.to_frame().to_numpy(), ref.to_frame().to_numpy(), rtol=1e-12, equal_nan=True
        )
        with Probe(model, ei, edge_weight=weight) as plain, torch.no_grad():
            model(x, ei)
        assert np.allclose(
            plain.to_frame().to_numpy(), ref.to_frame().to_numpy(), rtol=1e-12, equal_nan=True
        )


class DenseLayers(nn.Module):
    """Dense layers run on ``(x [B, N, F], adj [B, N, N])``."""

    def __init__(self, *convs: nn.Module) -> None:
        super().__init__()
        self.layers = nn.ModuleList(convs)

    def forward(self, x, adj):
        for conv in self.layers:
            x = conv(x, adj)
        return x


def test_dense_layer_outputs_are_accepted():
    from torch_geometric.nn import DenseGCNConv

    g = _graphs(6)[1]
    adj = to_dense_adj(g.edge_index, max_num_nodes=g.num_nodes).double()  # [1, N, N]
    conv = DenseGCNConv(3, 3).double()
    model = DenseLayers(conv)
    probe = Probe(model, adj[0], layers=[conv])
    with probe, torch.no_grad():
        out = model(g.x.unsqueeze(0), adj)  # [1, N, F]: recorded as layer 1 by the hook
    assert probe.to_frame()["laplacian_energy"].iloc[-1] == pytest.approx(
        M.laplacian_energy(out[0], g.edge_index).item(), rel=1e-12
    )


def test_pyg_gcn_training_loop_records_steps_with_flat_memory():
    torch.manual_seed(0)
    g = _graphs(7)[3]
    data = Data(x=g.x.float(), edge_index=g.edge_index, y=torch.arange(9) % 2, num_nodes=9)
    model = GCN(3, 16, num_layers=16, out_channels=2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sizes = []
    with Probe(model, data, every=10) as probe:
        for _epoch in range(50):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(data.x, data.edge_index), data.y)
            loss.backward()
            opt.step()
            sizes.append(_held_tensor_bytes(probe))
    frame = probe.to_frame()
    assert probe.recorded_steps == [0, 10, 20, 30, 40]
    assert len(frame) == 5 * 17
    assert frame.groupby("step")["layer"].apply(list).tolist() == [list(range(17))] * 5
    first = frame[frame["layer"] == 0]
    assert first["mean_cosine_similarity"].isna().all()
    # layers 1 and 16 change the width (3 -> 16 -> 2): no cosine with the previous layer
    assert frame[frame["layer"].isin([1, 16])]["mean_cosine_similarity"].isna().all()
    assert frame[frame["layer"].between(2, 15)]["mean_cosine_similarity"].notna().all()
    # no state is kept between passes: only the 0-d rows grow, 8 bytes each
    assert sizes[10] == sizes[49] and sizes[0] == sizes[9]
    assert _held_scalars(probe) == 5 * 17 * 4  # steps x layers x measured (relative: derived)


def _walk_tensors(obj, seen=None):
    """Every tensor reachable from a probe's attributes (not through modules)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, nn.Module):
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _walk_tensors(v, seen)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _walk_tensors(v, seen)
    elif hasattr(obj, "__dict__"):
        for v in vars(obj).values():
            yield from _walk_tensors(v, seen)


def _held_tensor_bytes(probe) -> int:
    """Bytes held by the probe in tensors other than the 0-d result scalars."""
    return sum(t.numel() * t.element_size() for t in _walk_tensors(probe) if t.dim() > 0)


def _held_scalars(probe) -> int:
    return sum(1 for t in _walk_tensors(probe) if t.dim() == 0)


def test_two_passes_are_two_steps_with_their_own_first_layer():
    g = _graphs(8)[1]
    model = GCN(3, 4, num_layers=3).double().eval()
    with Probe(model, g) as probe, torch.no_grad():
        model(g.x, g.edge_index)
        model(g.x * 2, g.edge_index)
    frame = probe.to_frame()
    assert frame["step"].tolist() == [0] * 4 + [1] * 4
    cosine = frame.groupby("step")["mean_cosine_similarity"]
    assert cosine.apply(lambda c: math.isnan(c.iloc[0])).all()
    a, b = (frame[frame["step"] == s].reset_index(drop=True) for s in (0, 1))
    assert np.allclose(b["laplacian_energy"], 4 * a["laplacian_energy"], rtol=1e-12)


class SkipModel(nn.Module):
    """x <- x + relu(conv(x)) per block, blocks as modules (capture finds them)."""

    class Block(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.conv = GCNConv(width, width)

        def forward(self, x, edge_index):
            return x + torch.relu(self.conv(x, edge_index))

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([self.Block(width) for _ in range(depth)])

    def forward(self, x, edge_index):
        for block in self.blocks:
            x = block(x, edge_index)
        return x


class InlineSkipModel(nn.Module):
    """The skip connections live in forward: only the convolutions are modules."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList([GCNConv(width, width) for _ in range(depth)])

    def forward(self, x, edge_index):
        for conv in self.convs:
            x = x + torch.relu(conv(x, edge_index))
        return x


@pytest.mark.parametrize("cls", [SkipModel, InlineSkipModel])
def test_residual_capture_equals_the_block_outputs(cls):
    torch.manual_seed(0)
    g = _graphs(9)[3]
    model = cls(3, 4).double().eval()
    stream = [g.x]
    with torch.no_grad():
        x = g.x
        for k in range(4):
            conv = model.blocks[k].conv if cls is SkipModel else model.convs[k]
            x = x + torch.relu(conv(x, g.edge_index))
            stream.append(x)
    with Probe(model, g, capture="residual") as probe, torch.no_grad():
        model(g.x, g.edge_index)
    frame = probe.to_frame()
    assert frame["layer"].tolist() == list(range(5))
    for k, state in enumerate(stream):
        assert frame["laplacian_energy"][k] == pytest.approx(
            M.laplacian_energy(state, g.edge_index).item(), rel=1e-12
        )
    if cls is InlineSkipModel:  # the default capture sees the conv branch instead
        with Probe(model, g) as branch, torch.no_grad():
            model(g.x, g.edge_index)
        assert branch.to_frame()["laplacian_energy"][2] != frame["laplacian_energy"][2]


def test_residual_capture_of_a_model_with_a_head_warns_and_skips_the_last_layer():
    g = _graphs(9)[3]
    model = GCN(3, 8, num_layers=3, out_channels=2).double().eval()
    with pytest.warns(UserWarning, match="another width than the stream entering the last layer"):
        with Probe(model, g, capture="residual") as probe, torch.no_grad():
            model(g.x, g.edge_index)
    assert probe.to_frame()["layer"].tolist() == [0, 1, 2]


def test_hetero_inputs_are_refused_at_construction():
    data = HeteroData()
    data["paper"].x = torch.randn(4, 3)
    data["paper", "cites", "paper"].edge_index = torch.tensor([[0, 1], [1, 2]])
    model = GCN(3, 4, num_layers=2)
    with pytest.raises(ValueError, match=r"Probe\(model, data\[\('paper', 'cites', 'paper'\)\]"):
        Probe(model, data)
    with pytest.raises(ValueError, match="pass one edge type"):
        Probe(model, data.edge_index_dict)
    with pytest.raises(ValueError, match="homogeneous"):
        M.laplacian_energy(torch.randn(4, 3), data)
    from torch_geometric.nn import to_hetero

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = GCNConv(-1, 4, add_self_loops=False)

        def forward(self, x, edge_index):
            return self.conv(x, edge_index)

    hetero = to_hetero(Net(), data.metadata())
    with pytest.raises(ValueError, match="to_hetero model"):
        Probe(hetero, data["paper", "cites", "paper"].edge_index)
    # with its HeteroData the model is named first: the graph's hint (one edge type) would be
    # refused again for this model (an audit)
    with pytest.raises(ValueError, match="to_hetero model"):
        Probe(hetero, data)


def test_bad_batch_and_graph_inputs():
    x = torch.randn(4, 2)
    ei = torch.tensor([[0, 1, 2], [1, 2, 3]])
    with pytest.raises(ValueError, match="edges join nodes of different graphs"):
        M.dirichlet_energy(x, ei, batch=torch.tensor([0, 0, 1, 1]))
    with pytest.raises(ValueError, match=r"batch: expected shape \[4\]"):
        M.dirichlet_energy(x, ei, batch=torch.tensor([0, 0, 1]))
    with pytest.raises(ValueError, match="reduce"):
        M.dirichlet_energy(x, ei, reduce="sum")
    with pytest.raises(ValueError, match="every"):
        Probe(GCN(2, 2, num_layers=1), ei, every=0)
    with pytest.raises(ValueError, match="capture"):
        Probe(GCN(2, 2, num_layers=1), ei, capture="stream")
    with pytest.raises(ValueError, match="square adjacency"):
        M.dirichlet_energy(x, torch.zeros(4, 5).to_sparse())
    with pytest.raises(TypeError, match="graph: expected an edge_index"):
        M.dirichlet_energy(x, "cora")
    from oversmooth import build_model

    model = build_model("postln", depth=2, in_channels=3, out_channels=2)
    with pytest.raises(ValueError, match="head_energies: not available per graph"):
        Probe(model, _two_graph_batch(), head_energies=True)


def test_prune_sensitivity_on_pyg_gcn_and_a_custom_residual_model():
    torch.manual_seed(0)
    g = _graphs(10)[1]
    data = Data(x=g.x, edge_index=g.edge_index, num_nodes=g.num_nodes)
    gcn = GCN(3, 16, num_layers=4).double()
    frame = prune_sensitivity(gcn, data, layers=[2, 3])
    assert frame["layer"].tolist() == [2, 3]
    assert (frame["logits_change"] > 0).all()
    # by hand: layer 2 (convs[1]) replaced by its input
    handle = gcn.convs[1].register_forward_hook(lambda m, a, o: a[0])
    with torch.no_grad():
        gcn.eval()
        pruned = gcn(data.x, data.edge_index)
        handle.remove()
        base = gcn(data.x, data.edge_index)
    assert frame["logits_change"][0] == pytest.approx(
        ((pruned - base).norm() / base.norm()).item(), rel=1e-12
    )
    assert frame.attrs["baseline"]["final_energy"] == pytest.approx(
        M.laplacian_energy(base, data.edge_index).item(), rel=1e-12
    )
    model = SkipModel(3, 3).double()
    with torch.no_grad():  # a block with a zero branch changes nothing when pruned
        model.blocks[1].conv.lin.weight.zero_()
        model.blocks[1].conv.bias.fill_(-1.0)  # relu(-1) = 0
    frame = prune_sensitivity(model, data)
    assert frame["layer"].tolist() == [1, 2, 3]
    assert frame["logits_change"][1] == 0.0 and frame["logits_change"][0] > 0


def test_prune_refuses_a_layer_that_changes_the_width():
    g = _graphs(10)[3]
    data = Data(x=g.x, edge_index=g.edge_index, num_nodes=g.num_nodes)
    gcn = GCN(3, 8, num_layers=3, out_channels=2).double()
    with pytest.raises(ValueError, match=r"layer 1 .*\[9, 3\].*\[9, 8\]"):
        prune_sensitivity(gcn, data, layers=[1])
    with pytest.raises(ValueError, match="cannot find the layers"):
        prune_sensitivity(nn.Linear(3, 3), data)


class DenseStack(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        from torch_geometric.nn import DenseGCNConv

        self.layers = nn.ModuleList([DenseGCNConv(width, width) for _ in range(depth)])

    def forward(self, x, adj, mask):
        for conv in self.layers:
            x = torch.tanh(conv(x, adj, mask))
        return x


def test_dense_batch_states_with_a_mask_are_probed_per_graph():
    torch.manual_seed(0)
    graphs = _graphs(11)
    batch = Batch.from_data_list(graphs)
    xd, mask = to_dense_batch(batch.x, batch.batch)  # [4, 9, 3], [4, 9]
    adj = to_dense_adj(batch.edge_index, batch.batch).double()
    model = DenseStack(3, 2).double().eval()
    states = []
    hooks = [c.register_forward_hook(lambda m, a, o: states.append(o)) for c in model.layers]
    with Probe(model, as_graph(adj, mask=mask), reduce="none") as probe, torch.no_grad():
        model(xd, adj, mask)
    for h in hooks:
        h.remove()
    frame = probe.to_frame()
    assert len(frame) == 3 * 4 and frame["graph"].tolist() == [0, 1, 2, 3] * 3
    for k, state in enumerate([xd, *states]):
        want = M.laplacian_energy(state[mask], batch, reduce="none")
        got = frame[frame["layer"] == k]["laplacian_energy"].to_numpy()
        assert np.allclose(got, want.numpy(), rtol=1e-12, atol=0)


def test_probe_takes_the_dense_mask_itself():
    torch.manual_seed(0)
    batch = Batch.from_data_list(_graphs(11))
    xd, mask = to_dense_batch(batch.x, batch.batch)
    adj = to_dense_adj(batch.edge_index, batch.batch).double()
    model = DenseStack(3, 2).double().eval()
    frames = []
    for graph, kwargs in ((as_graph(adj, mask=mask), {}), (adj, {"mask": mask})):
        with Probe(model, graph, reduce="none", **kwargs) as probe, torch.no_grad():
            model(xd, adj, mask)
        frames.append(probe.to_frame())
    assert len(frames[1]) == 3 * 4
    assert np.array_equal(
        frames[0]["laplacian_energy"].to_numpy(), frames[1]["laplacian_energy"].to_numpy()
    )
    with pytest.raises(ValueError, match="mask: only with a dense adjacency"):
        Probe(model, batch.edge_index, mask=mask)


def test_similarity_keeps_the_layer_states_of_the_last_step_only():
    g = _graphs(12)[3]
    model = GCN(3, 4, num_layers=3).double().eval()
    with Probe(model, g, similarity=True, every=2) as probe, torch.no_grad():
        for scale in (1.0, 5.0, -1.0):  # passes 0 and 2 are recorded
            model(g.x * scale, g.edge_index)
    assert probe.recorded_steps == [0, 2]
    assert probe.recorded_layers == [0, 1, 2, 3]  # the input and the 3 convolutions
    with torch.no_grad():
        states = [g.x * -1.0]
        hooks = [c.register_forward_hook(lambda m, a, o: states.append(o)) for c in model.convs]
        model(g.x * -1.0, g.edge_index)
        for h in hooks:
            h.remove()
    assert torch.allclose(probe.similarity_matrix()[1:, 1:], M.layer_similarity(states[1:]), 1e-6)


class _SparseTensorLike:
    """The interface of torch_sparse.SparseTensor that as_graph reads (coo, sparse_sizes);
    torch_sparse itself is not installed here."""

    def __init__(self, row, col, value, n):
        self._coo, self._n = (row, col, value), n

    def coo(self):
        return self._coo

    def sparse_sizes(self):
        return (self._n, self._n)


def test_sparse_tensor_interface_equals_edge_index():
    g = _graphs(13)[1]
    weight = torch.rand(g.edge_index.size(1), dtype=torch.float64) + 0.5
    adj = _SparseTensorLike(g.edge_index[0], g.edge_index[1], weight, g.num_nodes)
    want = M.dirichlet_energy(g.x, g.edge_index, weight)
    assert M.dirichlet_energy(g.x, adj).item() == pytest.approx(want.item(), rel=1e-14)
    # adj_t (ToSparseTensor's layout) is read transposed: check on directed edges 0 -> 2, 1 -> 2
    ei = torch.tensor([[0, 1], [2, 2]])
    x = torch.tensor([[0.0], [1.0], [3.0]], dtype=torch.float64)
    adj_t = _SparseTensorLike(ei[1], ei[0], None, 3)
    data = Data(x=x, adj_t=adj_t, num_nodes=3)
    want = M.laplacian_energy(x, ei)
    assert M.laplacian_energy(x, data).item() == pytest.approx(want.item(), rel=1e-15)
    assert M.laplacian_energy(x, ei.flip(0)).item() != pytest.approx(want.item())


def test_analysis_of_a_batched_dataset_averages_per_graph_energies():
    """`oversmooth analyze --dataset csbm-batch:...` probes a mini-batch: every metric per graph
    (as if each graph ran alone through the same model), then averaged."""
    from oversmooth.analysis import AnalysisConfig, run_analysis
    from oversmooth.data import csbm, load
    from oversmooth.nn import build_model

    spec = "csbm-batch:graphs=3,n=30,degree=4,features=8,seed=1"
    data = load(spec)
    assert data.batch.tolist() == [0] * 30 + [1] * 30 + [2] * 30
    result = run_analysis(
        AnalysisConfig(
            model=ModelConfig("postln", depth=3, dtype="float64"), dataset=spec, seeds=(0,)
        )
    )
    model = build_model("postln", depth=3, in_channels=8, out_channels=2, seed=0, dtype="float64")
    per_graph = []
    for g in range(3):
        one = csbm(30, 2, 4, features=8, seed=1 * 100_003 + g)
        with torch.no_grad():
            ctx = model.context(one.edge_index, one.num_nodes)
            last = model.run_blocks(model.encoder(one.x.double()), ctx)
        per_graph.append(M.laplacian_energy(last, one.edge_index).item())
    final = result.metrics[result.metrics["layer"] == 3]["laplacian_energy"].item()
    assert final == pytest.approx(sum(per_graph) / 3, rel=1e-10)


# ----------------------------------------------------------------------------- inputs unsaid


class _Convs(nn.Module):
    """Two GCN layers, called as the test's forward says (``call(conv, x, inputs)``)."""

    def __init__(self, call, width: int = 4):
        super().__init__()
        self.convs = nn.ModuleList([GCNConv(width, width), GCNConv(width, width)])
        self.call = call

    def forward(self, x, *inputs):
        for conv in self.convs:
            x = torch.tanh(self.call(conv, x, *inputs))
        return x


def _directed_graph(n: int = 12) -> torch.Tensor:
    torch.manual_seed(3)
    src = torch.randint(0, n, (40,))
    dst = torch.randint(0, n, (40,))
    keep = src < dst  # one direction only
    return torch.stack([src[keep], dst[keep]])


def _gaps(model, graph, *inputs, **kw):
    with pytest.warns(UserWarning) as caught, Probe(model, graph, **kw) as probe, torch.no_grad():
        model(*inputs)
    assert probe.to_frame().attrs["gaps"]
    return " ".join(str(w.message) for w in caught)


def test_a_neighbor_loader_sample_is_said_to_be_one():
    """A NeighborLoader batch (n_id, batch_size) was measured as if it were the whole graph (an
    audit: Cora's input features read 4.4 on a 64-seed sample against 21.1 on the graph)."""
    ei = _directed_graph()
    sample = Data(x=torch.randn(12, 4), edge_index=ei, n_id=torch.arange(12), batch_size=3)
    model = _Convs(lambda conv, x, data: conv(x, data.edge_index)).eval()
    said = _gaps(model, sample, sample.x, sample)
    assert "NeighborLoader sample (3 seed nodes of 12)" in said
    # the Probe given the edge_index alone: the forward's Data says it
    assert "NeighborLoader sample" in _gaps(model, ei, sample.x, sample)
    with pytest.warns(UserWarning, match="NeighborLoader sample"):  # recorded by hand too
        with Probe(None, sample) as probe:
            probe.record(0, sample.x)
    whole = Data(x=sample.x, edge_index=ei)  # no n_id: a graph of its own, nothing said
    with Probe(model, whole) as probe, torch.no_grad():
        model(whole.x, whole)
    assert not probe.to_frame().attrs["gaps"]


def test_weights_inside_the_data_the_forward_takes_are_noted():
    ei = to_undirected(_directed_graph())
    data = Data(x=torch.randn(12, 4), edge_index=ei, edge_weight=torch.rand(ei.size(1)) + 0.1)
    model = _Convs(lambda conv, x, d: conv(x, d.edge_index, d.edge_weight)).eval()
    assert "the energies are of the unweighted graph" in _gaps(model, ei, data.x, data)
    with Probe(model, data) as probe, torch.no_grad():  # the weighted graph: nothing to say
        model(data.x, data)
    assert not probe.to_frame().attrs["gaps"]


def test_a_batch_vector_the_probe_was_not_given_is_noted():
    graphs = [
        Data(x=torch.randn(n, 4), edge_index=to_undirected(_directed_graph(n))) for n in (5, 7, 9)
    ]
    b = Batch.from_data_list(graphs)
    model = _Convs(lambda conv, x, ei, batch: conv(x, ei)).eval()
    said = _gaps(model, b.edge_index, b.x, b.edge_index, b.batch)
    assert "batch vector of 3 graphs (0, 0, ..., 2 over the nodes), which the Probe was" in said
    for given in ({"batch": b.batch}, {}):  # the batch given, or the Batch itself: per graph
        graph = b.edge_index if given else b
        with Probe(model, graph, **given) as probe, torch.no_grad():
            model(b.x, b.edge_index, b.batch)
        assert not probe.to_frame().attrs["gaps"]
    # no batch vector: a sorted node index (no repeat), a sorted edge_type of RGCN (one entry
    # per edge, not per node: a review), a vector on the meta device (not read)
    edge_type = torch.arange(b.num_edges) * 3 // b.num_edges
    for other in (torch.arange(b.num_nodes), edge_type, b.batch.to("meta")):
        with Probe(model, b.edge_index) as probe, torch.no_grad():
            model(b.x, b.edge_index, other)
        assert not probe.to_frame().attrs["gaps"]


def test_a_directed_dense_adjacency_the_model_takes_is_noted():
    """PyG's dense layers compute adj @ x: on a directed graph they propagate over the reverse
    of the A[src, dst] the Probe reads (an audit: DenseGCNConv 0.161 measured against 0.076)."""
    from torch_geometric.nn import DenseGCNConv

    class Dense(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList([DenseGCNConv(4, 4), DenseGCNConv(4, 4)])

        def forward(self, x, adj):
            for conv in self.convs:
                x = torch.tanh(conv(x, adj)).squeeze(0)
            return x

    model, x = Dense().eval(), torch.randn(12, 4)
    adj = to_dense_adj(_directed_graph(), max_num_nodes=12)[0]
    assert "adj.transpose(-2, -1)" in _gaps(model, adj, x, adj)
    symmetric = adj + adj.T
    with Probe(model, symmetric) as probe, torch.no_grad():
        model(x, symmetric)
    assert not probe.to_frame().attrs["gaps"]


def test_a_dense_copy_of_the_directed_sparse_matrix_the_model_takes_is_refused():
    ei = _directed_graph()
    adj_t = to_torch_coo_tensor(ei, size=12).t().coalesce().to_sparse_csr()
    model = _Convs(lambda conv, x, a: conv(x, a)).eval()
    x = torch.randn(12, 4)
    with pytest.raises(ValueError, match="a dense copy of the sparse matrix the model takes"):
        with Probe(model, adj_t.to_dense()), torch.no_grad():
            model(x, adj_t)


def test_rusch_energy_counts_a_repeated_edge_once_as_its_adjacency_does():
    """N_i is a set: an edge list with repeats gave 6.062 where its coalesced adjacency gave
    5.544 on Cora (an audit); MAD and the Dirichlet energy agreed already."""
    ei = to_undirected(_directed_graph())
    repeated = torch.cat([ei, ei[:, :5]], dim=1)
    x = torch.randn(12, 4, dtype=torch.float64)
    adjacency = torch.sparse_coo_tensor(repeated, torch.ones(repeated.size(1)), (12, 12))
    got = M.rusch_dirichlet_energy(x, repeated)
    assert torch.equal(got, M.rusch_dirichlet_energy(x, adjacency.coalesce()))
    assert torch.allclose(got, M.rusch_dirichlet_energy(x, ei), rtol=1e-15, atol=0)
    dense = to_dense_adj(repeated, max_num_nodes=12)[0]  # entries 2 where repeated: one edge
    assert torch.allclose(got, M.rusch_dirichlet_energy(x, dense), rtol=1e-15, atol=0)
