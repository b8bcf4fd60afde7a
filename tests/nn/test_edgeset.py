"""Edge-set attention (conv="esa"): the line graph against a dense reference, the model's
states and outputs, and energies measured on the line graph."""

from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.data import Batch, Data

from oversmooth import GraphOperator, Probe, build_model, laplacian_energy
from oversmooth.analysis import probe_run
from oversmooth.nn import ModelConfig, SANScorer
from oversmooth.nn.edgeset import (
    EdgeSetModel,
    edge_to_node_mean,
    line_graph,
    line_graph_size,
)

from tests.conftest import undirected

GRAPHS = {
    "path": (undirected([(0, 1), (1, 2)]), 3),
    "triangle+isolated": (undirected([(0, 1), (1, 2), (2, 0)]), 4),
    "directed star": (torch.tensor([[0, 0, 0, 3], [1, 2, 3, 1]]), 4),
    "self loop + multi-edge": (torch.tensor([[0, 1, 1, 1, 2], [1, 1, 2, 2, 0]]), 3),
    "two components": (undirected([(0, 1), (1, 2), (2, 3), (3, 0), (0, 2), (4, 5)]), 6),
}


def dense_line_graph(edge_index: torch.Tensor) -> torch.Tensor:
    """A[a, b] = 1 when edges a != b share an endpoint, straight from the definition."""
    num_edges = edge_index.size(1)
    adj = torch.zeros(num_edges, num_edges, dtype=torch.long)
    for a in range(num_edges):
        for b in range(num_edges):
            ends_a = {int(edge_index[0, a]), int(edge_index[1, a])}
            ends_b = {int(edge_index[0, b]), int(edge_index[1, b])}
            adj[a, b] = int(a != b and bool(ends_a & ends_b))
    return adj


@pytest.mark.parametrize("name", list(GRAPHS))
def test_line_graph_matches_dense_reference(name):
    ei, n = GRAPHS[name]
    lg = line_graph(ei, n)
    num_edges = ei.size(1)
    got = torch.zeros(num_edges, num_edges, dtype=torch.long)
    got[lg[0], lg[1]] += 1  # += : a pair listed twice would show as 2
    assert torch.equal(got, dense_line_graph(ei))
    assert lg.size(1) == int(got.sum())  # each pair once, no self pair
    count = torch.zeros(n, dtype=torch.long)  # incident stored edges (a self loop once)
    for e in range(num_edges):
        for v in {int(ei[0, e]), int(ei[1, e])}:
            count[v] += 1
    assert line_graph_size(ei, n) == int((count**2).sum())


def test_line_graph_budget_is_one_clear_error():
    ei = undirected([(0, k) for k in range(1, 6)])  # star: c_0 = 10
    assert line_graph_size(ei) == 100 + 5 * 4
    with pytest.raises(ValueError, match=r"line graph: expected at most 50 ordered edge pairs"):
        line_graph(ei, max_pairs=50)


@pytest.mark.parametrize("name", list(GRAPHS))
def test_edge_to_node_mean(name):
    ei, n = GRAPHS[name]
    states = torch.randn(ei.size(1), 3, dtype=torch.float64)
    want = torch.zeros(n, 3, dtype=torch.float64)
    for v in range(n):
        incident = [e for e in range(ei.size(1)) if v in (int(ei[0, e]), int(ei[1, e]))]
        if incident:
            want[v] = states[incident].mean(0)
    assert torch.allclose(edge_to_node_mean(states, ei, n), want)


def _model(name: str = "preln", pattern: str = "MMSM", depth: int = 4, **kw) -> EdgeSetModel:
    model = build_model(
        name,
        conv="esa",
        depth=depth,
        in_channels=5,
        out_channels=3,
        hidden=8,
        heads=2,
        pattern=pattern,
        dtype="float64",
        **kw,
    )
    assert isinstance(model, EdgeSetModel)
    return model


@pytest.mark.parametrize("name", ["preln", "postln"])
def test_forward_shapes_and_edge_states(name):
    ei, n = GRAPHS["two components"]
    model = _model(name)
    x = torch.randn(n, 5, dtype=torch.float64)
    states = []
    handles = [b.register_forward_hook(lambda m, a, o: states.append(o)) for b in model.blocks]
    out = model(x, ei)
    for h in handles:
        h.remove()
    assert out.shape == (n, 3)
    assert [s.shape for s in states] == [(ei.size(1), 8)] * 4
    assert [b.mp.global_attention for b in model.blocks] == [False, False, True, False]
    assert isinstance(model.blocks[0].mp.scorer, SANScorer)  # esa scores as san
    # the readout: the decoder on each node's mean incident edge state
    assert torch.allclose(out, model.decoder(edge_to_node_mean(states[-1], ei, n)))


def test_initial_edge_state_and_edge_attr():
    ei, n = GRAPHS["path"]
    model = _model(edge_channels=2)
    x = torch.randn(n, 5, dtype=torch.float64)
    attr = torch.randn(ei.size(1), 2, dtype=torch.float64)
    h = model.encoder.nodes(x)
    lift = model.encoder.lift
    want = torch.stack(
        [
            torch.cat([h[ei[0, e]], h[ei[1, e]], attr[e]]) @ lift.weight.T + lift.bias
            for e in range(ei.size(1))
        ]
    )
    assert torch.allclose(model.encoder(x, ei, attr), want)
    assert model(x, ei, edge_attr=attr).shape == (n, 3)
    with pytest.raises(ValueError, match=r"edge_attr: expected \[4, 2\]"):
        model(x, ei)
    with pytest.raises(ValueError, match="edge_attr: expected shape"):
        model(x, ei, edge_attr=attr[:, :1])
    with pytest.raises(ValueError, match="edge_attr: the model was built with edge_channels=0"):
        _model()(x, ei, edge_attr=attr)


def test_masked_block_is_dense_masked_attention_over_edges():
    """One M block's message passing = softmax(QK^T/sqrt(d) + mask) V W over edge states,
    the mask allowing pairs of edges sharing a node, and each edge itself."""
    ei, n = GRAPHS["two components"]
    model = _model(depth=1, pattern="M")
    mp = model.blocks[0].mp
    num_edges, hd = ei.size(1), mp.head_dim
    h = torch.randn(num_edges, 8, dtype=torch.float64)
    allowed = dense_line_graph(ei).bool() | torch.eye(num_edges, dtype=torch.bool)
    q = (h @ mp.scorer.query.weight.T).view(num_edges, 2, hd)
    k = (h @ mp.scorer.key.weight.T).view(num_edges, 2, hd)
    v = (h @ mp.value.weight.T).view(num_edges, 2, hd)
    heads = []
    for head in range(2):
        scores = q[:, head] @ k[:, head].T / math.sqrt(hd)
        probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
        heads.append(probs @ v[:, head])
    want = torch.cat(heads, dim=1) @ mp.out.weight.T
    got = mp(h, model.context(ei, n))
    assert torch.allclose(got, want)


def test_batch_of_graphs_equals_each_graph_alone():
    """S blocks attend within each graph's edges only: a batch gives each graph's outputs."""
    graphs = [
        Data(x=torch.randn(3, 5, dtype=torch.float64), edge_index=GRAPHS["path"][0]),
        Data(x=torch.randn(4, 5, dtype=torch.float64), edge_index=GRAPHS["directed star"][0]),
    ]
    batch = Batch.from_data_list(graphs)
    for norm in ("node", "graph"):
        model = _model(pattern="SM", norm=norm)
        together = model(batch.x, batch.edge_index, batch.batch)
        alone = torch.cat(
            [model(g.x, g.edge_index, torch.zeros(g.num_nodes, dtype=torch.long)) for g in graphs]
        )
        assert torch.allclose(together, alone)


def test_probe_measures_edge_states_on_the_line_graph():
    ei, n = GRAPHS["two components"]
    model = _model()
    x = torch.randn(n, 5, dtype=torch.float64)
    states = [model.encoder(x, ei)]
    for block in model.blocks:
        states.append(block(states[-1], model.context(ei, n)))
    node_graph = GraphOperator(ei, num_nodes=n)
    lg = model.state_graph(node_graph)
    assert lg.num_nodes == ei.size(1) and torch.equal(lg.edge_index, line_graph(ei, n))
    want = torch.stack([laplacian_energy(s, line_graph(ei, n)) for s in states])
    with torch.no_grad(), Probe(model, lg, metrics=["laplacian_energy"]) as probe:
        model(x, ei)
    got = torch.tensor(probe.to_frame()["laplacian_energy"].to_numpy())
    assert torch.allclose(got, want.detach(), rtol=1e-12)
    # the analysis path measures on model.state_graph(input graph) itself, float floor too
    frame = probe_run(model, Data(x=x, edge_index=ei, num_nodes=n), ["laplacian_energy"])
    assert torch.allclose(torch.tensor(frame["laplacian_energy"].to_numpy()), got, rtol=1e-12)
    assert frame["float_floor"].notna().all()


def test_float32_shadow_floor_runs_on_edge_states():
    ei, n = GRAPHS["two components"]
    model = _model().float()
    frame = probe_run(
        model, Data(x=torch.randn(n, 5), edge_index=ei, num_nodes=n), ["laplacian_energy"]
    )
    assert len(frame) == 5 and frame["float_floor"].notna().all()
    assert (frame["float64_energy"] > 0).all()


def test_refusals():
    ei, n = GRAPHS["path"]
    model = _model()
    x = torch.randn(n, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="edge_weight: conv='esa'"):
        model(x, ei, edge_weight=torch.ones(ei.size(1), dtype=torch.float64))
    with pytest.raises(ValueError, match="edge_index: conv='esa' needs at least one edge"):
        model(x, ei[:, :0])
    with pytest.raises(ValueError, match="edge_channels: only conv='esa'"):
        ModelConfig(name="preln", conv="san", edge_channels=2)


def test_probe_takes_the_input_graph_of_an_edge_set_model():
    """Given the input graph (an edge_index or a Batch), the probe measures on its line
    graph; per graph of a batch, each graph's own line-graph energy."""
    ei, n = GRAPHS["two components"]
    model = _model()
    x = torch.randn(n, 5, dtype=torch.float64)
    frames = []
    for graph in (ei, GraphOperator(line_graph(ei, n), num_nodes=ei.size(1))):
        with torch.no_grad(), Probe(model, graph, metrics=["laplacian_energy"]) as probe:
            model(x, ei)
        frames.append(probe.to_frame()["laplacian_energy"].to_numpy())
    assert (frames[0] == frames[1]).all()

    graphs = [
        Data(x=torch.randn(3, 5, dtype=torch.float64), edge_index=GRAPHS["path"][0]),
        Data(x=torch.randn(6, 5, dtype=torch.float64), edge_index=ei),
    ]
    batch = Batch.from_data_list(graphs)
    states = []
    hook = model.blocks[-1].register_forward_hook(lambda m, a, o: states.append(o))
    with torch.no_grad(), Probe(model, batch, ["laplacian_energy"], reduce="none") as probe:
        model(batch.x, batch.edge_index, batch.batch)
    hook.remove()
    last = probe.to_frame().query("layer == 4")["laplacian_energy"].to_numpy()
    split = GRAPHS["path"][0].size(1)
    want = [
        laplacian_energy(states[0][:split], line_graph(GRAPHS["path"][0])),
        laplacian_energy(states[0][split:], line_graph(ei)),
    ]
    assert torch.allclose(torch.tensor(last), torch.stack(want), rtol=1e-12)


def test_analysis_refuses_pruning_an_edge_set_model():
    from oversmooth.analysis import AnalysisConfig

    with pytest.raises(ValueError, match="prune: expected a node-level conv"):
        AnalysisConfig(model=ModelConfig("preln", conv="esa", depth=4, dtype="float64"), prune=(2,))
