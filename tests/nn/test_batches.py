"""A graph's output does not depend on the other graphs of its mini-batch, nor on how the
batch lays them out: the nonlocal factor is each graph's own (1/n over its own nodes), and
global attention (``S`` blocks) keeps every graph to itself when the elements are not grouped
by graph (an edge-set batch maps edges to graphs by their source, in the edge list's order).
Every kernel: ``csr``, ``edge``, head by head."""

from __future__ import annotations

import pytest
import torch

from oversmooth.nn import conv as C
from oversmooth.nn.model import build_model

SIZES = (4, 6, 3)


def _graph(n: int, seed: int) -> torch.Tensor:
    """A connected undirected graph on ``n`` nodes (a path plus random chords), both directions."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.cat([torch.arange(n - 1), torch.randint(0, n, (n,), generator=gen)])
    dst = torch.cat([torch.arange(1, n), torch.randint(0, n, (n,), generator=gen)])
    keep = src != dst
    ei = torch.stack([src[keep], dst[keep]])
    return torch.cat([ei, ei.flip(0)], dim=1)


def _batch(sizes=SIZES):
    """The graphs alone, and as one batch ``(x, edge_index, batch)``."""
    gen = torch.Generator().manual_seed(0)
    alone, offset = [], 0
    for i, n in enumerate(sizes):
        alone.append((torch.randn(n, 5, generator=gen, dtype=torch.float64), _graph(n, i)))
    x = torch.cat([a[0] for a in alone])
    edges = []
    for (_, ea), n in zip(alone, sizes, strict=True):
        edges.append(ea + offset)
        offset += n
    batch = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    return alone, x, torch.cat(edges, dim=1), batch


def _model(name, conv, **options):
    return build_model(
        name, conv=conv, depth=3, in_channels=5, out_channels=2, dtype="float64", **options
    )


def _run(model, x, ei, batch=None):
    with torch.no_grad():
        return model(x, ei, batch)


def _assert_each_graph_as_alone(model, sizes=SIZES, order=None):
    alone, x, ei, batch = _batch(sizes)
    if order is not None:  # the same batch, its edge list in another order
        ei = ei[:, order(ei.size(1))]
    out = _run(model, x, ei, batch)
    rows = 0
    for xa, ea in alone:
        expected = _run(model, xa, ea)
        torch.testing.assert_close(out[rows : rows + xa.size(0)], expected, rtol=1e-12, atol=1e-13)
        rows += xa.size(0)


@pytest.mark.parametrize("kernel", ["csr", "edge", "by-head"])
@pytest.mark.parametrize("norm", ["mean", "sum"])
@pytest.mark.parametrize("conv", ["san", "gat", "gcn", "esa"])
@pytest.mark.parametrize("name", ["nonlocal", "nonlocal-preln"])
def test_a_graphs_nonlocal_factor_is_its_own_in_a_batch(monkeypatch, name, conv, norm, kernel):
    """Before, the factor was (1/N) over all N nodes of the batch: a graph's logits moved by up
    to 0.6 with the company it was batched with."""
    model = _model(name, conv, nonlocal_norm=norm)
    if kernel == "by-head":
        monkeypatch.setattr(C, "BY_HEAD_VALUES", 1)
    else:
        C.set_kernel(model, kernel)
    _assert_each_graph_as_alone(model)


def test_the_factor_hook_gives_one_factor_per_graph_and_head():
    alone, x, ei, batch = _batch()
    model = _model("nonlocal", "san")
    mp = model.blocks[0].mp
    seen: list[torch.Tensor] = []
    mp.hook_factor.register_forward_hook(lambda m, a, out: seen.append(out.clone()))
    _run(model, x, ei, batch)
    for xa, ea in alone:
        _run(model, xa, ea)
    assert seen[0].shape == (len(SIZES), mp.heads)
    torch.testing.assert_close(seen[0], torch.stack(seen[1:]), rtol=1e-12, atol=0)


def _reversed_halves(m: int) -> torch.Tensor:
    """The edge list's second half (the reverse directions) first: edges no longer grouped by
    graph."""
    return torch.cat([torch.arange(m // 2, m), torch.arange(m // 2)])


def _shuffled(m: int) -> torch.Tensor:
    return torch.randperm(m, generator=torch.Generator().manual_seed(5))


@pytest.mark.parametrize(
    "order", [None, _reversed_halves, _shuffled], ids=["grouped", "halves", "shuffled"]
)
@pytest.mark.parametrize("name", ["postln", "nonlocal"])
@pytest.mark.parametrize("pattern", ["S", "MS"])
def test_global_attention_keeps_each_graph_to_itself_in_any_edge_order(name, pattern, order):
    """An edge-set model's S blocks attend over each graph's edges: before, with the edges not
    grouped by graph, attention mixed graphs silently (logits off by 0.18) or failed on a
    reshape."""
    _assert_each_graph_as_alone(_model(name, "esa", pattern=pattern), order=order)


@pytest.mark.parametrize("name", ["postln", "nonlocal"])
def test_global_attention_over_nodes_whose_graph_ids_are_not_sorted(name):
    """Nodes of two graphs interleaved (batch [1, 0, 0, 1, ...]): each node attends over its
    own graph's nodes, and the output rows stay in the input's order."""
    model = _model(name, "san", pattern="MS")
    alone, x, ei, batch = _batch((4, 5))
    order = torch.tensor([4, 0, 1, 5, 2, 6, 3, 7, 8])  # new row r is old row order[r]
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel())
    out = _run(model, x[order], inverse[ei], batch[order])
    torch.testing.assert_close(out, _run(model, x, ei, batch)[order], rtol=1e-12, atol=1e-13)
