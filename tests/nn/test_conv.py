"""No host synchronisation per block: on a GPU every .item()/.tolist()/.cpu() of a tensor in
the block forward would stall the pipeline once per layer (issue 16's contract)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from oversmooth.nn import kernel as nn_kernel
from oversmooth.nn.conv import KERNELS, set_kernel
from oversmooth.nn.model import build_model


def random_graph(n: int, m: int, seed: int) -> tuple[Tensor, Tensor]:
    """A random directed graph on ``n`` nodes with ``m`` edges, a few self loops, duplicate
    edges possible, and isolated nodes (the last fifth of the nodes has no edge)."""
    gen = torch.Generator().manual_seed(seed)
    active = n - n // 5
    ei = torch.randint(0, active, (2, m), generator=gen)
    ei[:, :3] = torch.arange(3).repeat(2, 1)  # user self loops, replaced by ours
    weight = torch.rand(m, generator=gen, dtype=torch.float64) * 3 + 0.05
    weight[5] = 0.0  # an edge of weight 0 is in the graph and gets no attention
    ei[:, 10] = ei[:, 11]  # a repeated edge
    return ei, weight


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("conv", ["san", "gat", "gcn"])
@pytest.mark.parametrize("name", ["postln", "nonlocal"])
def test_no_host_sync_in_the_block_forward(monkeypatch, name, conv, kernel):
    """No .item()/.tolist()/.cpu()/bool() of a tensor once the graph context exists: on a GPU
    each would stall the pipeline once per block."""
    n = 50
    ei, w = random_graph(n, 200, seed=6)
    model = build_model(name, conv=conv, depth=4, in_channels=6, out_channels=2, pattern="MMMS")
    set_kernel(model, kernel)
    x = torch.randn(n, 6)
    # the csr softmax's CPU shortcut reads one value a block, free on a CPU only: the GPU path
    monkeypatch.setattr(nn_kernel, "host_reads_free", lambda x: False)
    ctx = model.context(ei, n, edge_weight=w.float())
    h = model.encoder(x)
    calls: list[str] = []
    for method in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__"):
        original = getattr(torch.Tensor, method)

        def counting(self, *args, _name=method, _original=original, **kwargs):
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, method, counting)
    with torch.no_grad():
        out = model.run_blocks(h, ctx)
    monkeypatch.undo()
    assert calls == []
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("kernel", ["edge", "csr"])
@pytest.mark.parametrize("conv", ["san", "gcn", "gat"])
def test_without_self_loops_a_node_whose_in_edges_weigh_zero_keeps_its_own(conv, kernel):
    """``self_loops=False``: a node whose only in-edge weighs 0 has no neighbour to average,
    so it keeps its self loop like a node without in-edges (before, its row of P was 0/0 and
    the NaN spread to every node it reaches)."""
    ei = torch.tensor([[0, 1, 2, 1, 3], [1, 2, 3, 0, 0]])
    w = torch.tensor([0.0, 1.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    model = build_model(
        "preln",
        conv=conv,
        depth=2,
        in_channels=3,
        out_channels=2,
        dtype="float64",
        self_loops=False,
    )
    set_kernel(model, kernel)
    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(x, ei, edge_weight=w)
        # the same as the edge left out: node 1 then has no in-edge and keeps its loop
        alone = model(x, ei[:, 1:], edge_weight=w[1:])
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, alone, rtol=1e-12, atol=1e-14)


def test_edge_attributes_given_to_a_node_model_are_refused_in_one_line():
    model = build_model("postln", conv="san", depth=2, in_channels=3, out_channels=2)
    ei = torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="only the edge-set models read them"):
        model(torch.randn(2, 3), ei, edge_attr=torch.randn(2, 4))
