"""Means over the graphs of a batch: a graph id with nothing to measure (no node; in an
edge-set model's line graph, a graph without edges) is NaN per graph and left out of the mean,
wherever it sits in the batch (before, it counted as a graph whose every metric is 0: the mean
moved with its place); the batch vector gives the node count; the similarity matrix is a mean
over graphs like every other metric."""

from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.data import Data

from oversmooth import Probe, build_model
from oversmooth import metrics as M

# graph 0: nodes 0-1, graph 2: nodes 2-4; graph id 1 has no node
EDGES = torch.tensor([[0, 1, 2, 3, 3, 4], [1, 0, 3, 2, 4, 3]])
BATCH = torch.tensor([0, 0, 2, 2, 2])
GRAPH_FUNCTIONS = {
    "laplacian_energy": lambda x, **k: M.laplacian_energy(x, EDGES, **k),
    "dirichlet_energy": lambda x, **k: M.dirichlet_energy(x, EDGES, **k),
    "feature_norm": M.feature_norm,
    "effective_rank": M.effective_rank,
    "mean_cosine_similarity": lambda x, **k: M.mean_cosine_similarity(x, x.flip(1), **k),
}


@pytest.mark.parametrize("name", list(GRAPH_FUNCTIONS))
def test_a_graph_id_without_nodes_is_nan_and_left_out_of_the_mean(name):
    fn = GRAPH_FUNCTIONS[name]
    x = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    per_graph = fn(x, batch=BATCH, reduce="none")
    own = None if "energy" in name else fn(x[:2]).item()  # graph-free: graph 0 alone
    assert per_graph.shape == (3,) and math.isnan(per_graph[1])
    assert not per_graph[[0, 2]].isnan().any()
    mean = fn(x, batch=BATCH).item()
    assert mean == pytest.approx(per_graph[[0, 2]].mean().item(), rel=1e-15)
    if own is not None:
        assert per_graph[0].item() == pytest.approx(own, rel=1e-14)
    # a NaN in a graph that has nodes still makes the mean NaN
    x[3, 0] = math.nan
    assert math.isnan(fn(x, batch=BATCH).item())


def _edge_set_batch(edgeless_at: int):
    """Three graphs, one of them a single node without edges, at place ``edgeless_at``: the
    node features, the batch as Data, and each graph with edges alone."""
    gen = torch.Generator().manual_seed(3)
    sizes = [4, 1, 5]
    sizes.insert(edgeless_at, sizes.pop(1))
    edges, batch, offset, alone = [], [], 0, []
    for g, n in enumerate(sizes):
        if n > 1:
            ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
            ring = torch.cat([ring, ring.flip(0)], dim=1)
            edges.append(ring + offset)
            alone.append((offset, n, ring))
        batch.append(torch.full((n,), g))
        offset += n
    x = torch.randn(offset, 6, dtype=torch.float64, generator=gen)
    data = Data(x=x, edge_index=torch.cat(edges, dim=1), batch=torch.cat(batch), num_nodes=offset)
    return data, alone


@pytest.mark.parametrize("edgeless_at", [0, 1, 2])
def test_an_edge_set_batch_with_an_edgeless_graph_averages_the_graphs_with_edges(edgeless_at):
    model = build_model(
        "postln", conv="esa", depth=3, in_channels=6, out_channels=2, dtype="float64"
    )
    data, alone = _edge_set_batch(edgeless_at)
    with torch.no_grad(), Probe(model, data) as probe:
        model(data.x, data.edge_index, data.batch)
    frame = probe.to_frame()
    expected = []
    for offset, n, ring in alone:
        with torch.no_grad(), Probe(model, ring) as own:
            model(data.x[offset : offset + n], ring)
        expected.append(own.to_frame())
    for column in ("laplacian_energy", "dirichlet_energy", "feature_norm"):
        mean = (expected[0][column] + expected[1][column]) / 2
        assert frame[column].to_numpy() == pytest.approx(mean.to_numpy(), rel=1e-12)
    with torch.no_grad(), Probe(model, data, reduce="none") as probe:
        model(data.x, data.edge_index, data.batch)
    rows = probe.to_frame()
    if edgeless_at < 2:  # the last id is no id at all: graphs are counted from the edges
        empty = rows[rows["graph"] == edgeless_at]
        assert len(empty) == 4 and empty["laplacian_energy"].isna().all()


def test_a_batch_vector_gives_the_node_count_when_the_last_nodes_have_no_edges():
    """``Probe(model, edge_index, batch=...)`` with an isolated node last: the batch vector
    counts it (the node count came from the edge list, and the batch was refused as too
    long)."""
    from oversmooth import GraphOperator

    ei = torch.tensor([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])
    batch = torch.tensor([0, 0, 0, 1, 1, 2])
    assert GraphOperator(ei, batch=batch).num_nodes == 6
    model = build_model("postln", conv="esa", depth=2, in_channels=3, out_channels=2)
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), Probe(model, ei, batch=batch) as probe:
        model(x, ei, batch)
    assert len(probe.to_frame()) == 3


def test_the_similarity_matrix_of_a_batch_is_the_mean_over_graphs():
    """Graphs of 30, 1, 8 and 60 nodes: each entry is the mean of the graphs' own means (before,
    one mean over all nodes, which let the large graph weigh 60 times the one-node graph),
    and its adjacent-layer entries are the Probe's own cosine column."""
    gen = torch.Generator().manual_seed(4)
    sizes, edges, offset = (30, 1, 8, 60), [], 0
    for n in sizes:
        if n > 1:
            ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n]) + offset
            edges.append(torch.cat([ring, ring.flip(0)], dim=1))
        offset += n
    ei = torch.cat(edges, dim=1)
    batch = torch.cat([torch.full((n,), g) for g, n in enumerate(sizes)])
    x = torch.randn(offset, 5, dtype=torch.float64, generator=gen)
    model = build_model("postln", depth=4, in_channels=5, out_channels=2, dtype="float64")
    states = []
    hooks = [model.blocks[0].register_forward_pre_hook(lambda m, a: states.append(a[0]))]
    hooks += [b.register_forward_hook(lambda m, a, o: states.append(o)) for b in model.blocks]
    probe = Probe(model, ei, batch=batch, similarity=True, similarity_dtype=torch.float64)
    with torch.no_grad(), probe:
        model(x, ei, batch)
    for h in hooks:
        h.remove()
    sim = probe.similarity_matrix()
    expected = M.layer_similarity(states, batch=batch)
    torch.testing.assert_close(sim, expected, rtol=1e-12, atol=1e-14)
    cosine = probe.to_frame()["mean_cosine_similarity"].to_numpy()[1:]
    assert torch.diagonal(sim, 1).numpy() == pytest.approx(cosine, rel=1e-12)
    everywhere = M.layer_similarity(states)  # one mean over all nodes: not what a batch gives
    assert (sim - everywhere).abs().max() > 1e-3


def test_a_graph_poisoned_by_a_nan_is_not_left_out_of_the_relative_energy_mean():
    """np.nanmean dropped a graph whose relative energy was NaN for any reason: a NaN in one
    graph's state made every other column NaN but relative_energy read the other graph's ratio
    (3.0; a batched-metrics audit).  Only a graph with no ratio (energy 0 before) is left out."""
    import oversmooth as O

    ei = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 0, 3, 2, 5, 4]])  # three 2-node graphs
    batch = torch.tensor([0, 0, 1, 1, 2, 2])
    before = torch.tensor([[0.0], [1.0], [0.0], [2.0], [5.0], [5.0]], dtype=torch.float64)
    after = torch.tensor([[0.0], [3.0], [0.0], [4.0], [1.0], [2.0]], dtype=torch.float64)

    def mean_ratio(state):
        probe = O.Probe(
            None, ei, metrics=["laplacian_energy", "relative_energy"], batch=batch, reduce="mean"
        )
        probe.record(0, before)
        probe.record(1, state)
        return float(probe.to_frame()["relative_energy"].iloc[1])

    # graph 2 starts at energy 0: no ratio, left out; graphs 0 and 1 grow 9-fold and 4-fold
    assert mean_ratio(after) == pytest.approx((8.0 + 3.0) / 2)
    poisoned = after.clone()
    poisoned[0, 0] = float("nan")
    assert math.isnan(mean_ratio(poisoned))


def test_states_without_channels_give_the_unbatched_values_per_graph():
    """A [4, 0] state with batch=[0, 0, 1, 1] raised an internal torch error in five metrics,
    and angular_distance an IndexError batched or not (a batched-metrics audit)."""
    import oversmooth as O

    x = torch.zeros(4, 0, dtype=torch.float64)
    ei = torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]])
    batch = torch.tensor([0, 0, 1, 1])
    calls = {
        "feature_norm": lambda **k: O.feature_norm(x, **k),
        "stream_variance": lambda **k: O.stream_variance(x, **k),
        "rank_one_distance": lambda **k: O.rank_one_distance(x, **k),
        "relative_update": lambda **k: O.relative_update(x, x, **k),
        "angular_distance": lambda **k: O.angular_distance(x, x, **k),
        "rayleigh_energy": lambda **k: O.rayleigh_energy(x, ei, **k),
    }
    for name, call in calls.items():
        alone = float(call())
        per_graph = call(batch=batch, reduce="none")
        assert per_graph.shape == (2,), name
        for value in per_graph.tolist():
            assert value == alone or (math.isnan(value) and math.isnan(alone)), name
