"""Metrics with nothing to measure are NaN, never a value that means something (an audit):
MAD of a graph where no node has a neighbour and the global MAD of a one-node graph read 0,
"complete oversmoothing", and entered a batch's mean; the means over a graph without nodes
read 0."""

from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.data import Batch, Data

import oversmooth as O

ROWS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
NO_EDGES = torch.zeros(2, 0, dtype=torch.long)


def test_mad_without_neighbours_or_pairs_is_nan():
    assert math.isnan(O.mean_average_distance(ROWS, NO_EDGES).item())
    zero = O.as_graph(
        torch.tensor([[0, 1], [1, 0]]), num_nodes=3, edge_weight=torch.zeros(2, dtype=torch.float64)
    )
    assert math.isnan(O.mean_average_distance(ROWS, zero).item())  # a weight-0 edge: none
    assert math.isnan(O.mean_average_distance_global(ROWS[:1]).item())


def test_a_graph_with_nothing_to_measure_is_left_out_of_the_mean():
    pair = Data(x=ROWS[:2], edge_index=torch.tensor([[0, 1], [1, 0]]))  # MAD 1
    batch = Batch.from_data_list([pair, Data(x=ROWS, edge_index=NO_EDGES)])
    per_graph = O.mean_average_distance(batch.x, batch, reduce="none")
    assert per_graph[0].item() == pytest.approx(1.0) and math.isnan(per_graph[1].item())
    assert O.mean_average_distance(batch.x, batch).item() == pytest.approx(1.0)
    single = Batch.from_data_list([pair, Data(x=ROWS[:1], edge_index=NO_EDGES)])
    per_graph = O.mean_average_distance_global(single.x, single, reduce="none")
    assert per_graph[0].item() == pytest.approx(1.0) and math.isnan(per_graph[1].item())
    assert O.mean_average_distance_global(single.x, single).item() == pytest.approx(1.0)
    # a NaN in a graph that has something to measure still makes the mean NaN
    poisoned = batch.x.clone()
    poisoned[0, 0] = math.nan
    assert math.isnan(O.mean_average_distance(poisoned, batch).item())


@pytest.mark.parametrize(
    "metric",
    [
        lambda x: O.laplacian_energy(x, NO_EDGES),
        lambda x: O.dirichlet_energy(x, NO_EDGES),
        lambda x: O.mean_average_distance(x, NO_EDGES),
        O.mean_average_distance_global,
        O.feature_norm,
        O.stream_variance,
        O.effective_rank,
        O.rank_one_distance,
    ],
)
def test_a_graph_without_nodes_is_nan(metric):
    assert math.isnan(metric(torch.zeros(0, 4, dtype=torch.float64)).item())


def test_an_overflowing_normalized_energy_beside_a_weight_0_edge_is_inf():
    """0 * inf made the sum NaN where the energy exceeds the float64 range (an audit)."""
    x = torch.tensor([[1e200], [-1e200], [3e200]], dtype=torch.float64)
    edges = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    weight = torch.tensor([0.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    assert O.normalized_dirichlet_energy(x, edges, weight).item() == math.inf


def test_cosines_stay_within_one():
    """Parallel rows gave 1 + 2.2e-16 (an audit): a cosine outside [-1, 1]."""
    x = torch.randn(50, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert O.mean_cosine_similarity(x, x).item() <= 1.0
    assert O.mean_cosine_similarity(x, 3 * x).item() <= 1.0
    assert O.mean_cosine_similarity(x, -x).item() >= -1.0
    matrix = O.layer_similarity([x, 2 * x, x])
    assert matrix.max().item() <= 1.0
    assert torch.allclose(matrix.diagonal(), torch.ones(3).double(), rtol=0, atol=1e-15)


def test_a_one_node_graph_with_a_nan_still_poisons_the_global_mad_mean():
    """The one-node graph has no pair and is left out of the mean, but not when its state holds
    a NaN: that graph made the mean of every other metric NaN (a review)."""
    pair = Data(x=ROWS[:2].clone(), edge_index=torch.tensor([[0, 1], [1, 0]]))
    lone = Data(x=torch.tensor([[math.nan, 1.0]], dtype=torch.float64), edge_index=NO_EDGES)
    batch = Batch.from_data_list([pair, lone])
    assert math.isnan(O.mean_average_distance_global(batch.x, batch).item())
    assert math.isnan(O.mean_average_distance_global(lone.x).item())
