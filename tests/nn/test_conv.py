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
