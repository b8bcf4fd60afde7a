"""The metric registry: a column's name is the name of the public function that computes it,
the Probe's column and that function are one computation, and old column names map to
registered metrics."""

from __future__ import annotations

import pytest
import torch

import oversmooth
import oversmooth.metrics as M
from oversmooth import Probe
from oversmooth.graph import GraphOperator
from oversmooth.metrics.registry import METRICS, RENAMED, check_metrics
from oversmooth.registry import RENAMED_COLUMNS
from tests.conftest import undirected

PAIRS = {"mean_cosine_similarity", "angular_distance", "relative_update"}


def test_every_column_is_the_name_of_a_public_function():
    for name, metric in METRICS.items():
        function = "energy" if name == "energy_<m>" else name
        assert callable(getattr(M, function, None)), name
        assert getattr(oversmooth, function) is getattr(M, function)  # exported by the package
        assert function in M.__all__
        assert (metric.kind == "between") == (name in PAIRS), name


def test_old_names_map_to_registered_metrics_and_are_refused_with_the_new_name():
    assert RENAMED == RENAMED_COLUMNS
    for old, new in RENAMED.items():
        assert new in METRICS and old not in METRICS
        with pytest.raises(ValueError, match=f"received '{old}' \\(renamed {new}\\)"):
            check_metrics([old])
    with pytest.raises(ValueError, match="received 'madd'$"):
        check_metrics(["madd"])


def _graph() -> GraphOperator:
    ei = undirected([(0, 1), (1, 2), (2, 3), (3, 0), (0, 2), (3, 4)])
    return GraphOperator(ei, num_nodes=6)  # node 5 is isolated


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_probe_column_is_its_function_bit_for_bit(dtype):
    op = _graph()
    gen = torch.Generator().manual_seed(0)
    prev = torch.randn(6, 4, generator=gen).to(dtype)
    x = (prev + 0.1 * torch.randn(6, 4, generator=gen)).to(dtype)
    names = [m for m in METRICS if METRICS[m].kind in ("layer", "between")] + ["energy_3"]
    probe = Probe(None, op, metrics=names)
    probe.record(0, prev)
    probe.record(1, x)
    row = probe.to_frame().iloc[1]
    for name in names:
        if name == "energy_3":
            expected = M.energy(x, op, 3)
        elif name in PAIRS:
            expected = getattr(M, name)(prev, x)
        else:
            expected = getattr(M, name)(x, op) if _needs_graph(name) else getattr(M, name)(x)
        assert row[name] == expected.item(), name


def _needs_graph(name: str) -> bool:
    return name not in ("feature_norm", "effective_rank", "rank_one_distance", "stream_variance")
