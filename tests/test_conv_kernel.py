"""The CSR message-passing kernel against the edge-list kernel it replaced
(tests/reference_conv.py): same outputs and gradients, and no host sync per block."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor

from oversmooth.nn import GraphContext
from oversmooth.nn.model import DepthModel, build_model
from tests import reference_conv as ref

CASES = [
    (name, conv)
    for name in ("postln", "preln", "nonlocal", "nonlocal-preln")
    for conv in ("san", "gat", "gcn")
]
RTOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def reference_model(model: DepthModel) -> DepthModel:
    """A copy of ``model`` whose message passing is the reference kernel, same weights."""
    old = copy.deepcopy(model)
    for block in old.blocks:
        mp = block.mp
        twin = ref.MultiHeadMessagePassing(
            mp.channels,
            mp.heads,
            mp.conv,
            nonlocal_=mp.nonlocal_,
            global_attention=mp.global_attention,
        ).to(next(mp.parameters()).dtype)
        twin.load_state_dict(mp.state_dict())
        block.mp = twin
    return old


def reference_forward(
    model: DepthModel, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None
) -> Tensor:
    dtype = model.decoder.weight.dtype
    ctx = ref.GraphContext.build(edge_index, x.size(0), dtype=dtype, edge_weight=edge_weight)
    h = model.encoder(x)
    for block in model.blocks:
        h = block(h, ctx)
    return model.decoder(h)


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


@pytest.fixture(scope="module")
def cora():
    from oversmooth.data import load

    return load("cora")


def relative_error(new: Tensor, old: Tensor) -> float:
    new, old = new.detach(), old.detach()
    return float((new - old).abs().max() / old.abs().max().clamp_min(1e-300))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
@pytest.mark.parametrize(("name", "conv"), CASES)
def test_kernel_matches_the_reference(name, conv, weighted, dtype):
    n = 60
    ei, w = random_graph(n, 300, seed=1)
    model = build_model(
        name, conv=conv, depth=3, in_channels=7, out_channels=3, hidden=16, heads=4
    ).to(dtype)
    model.train()  # gradients below; dropout off for a deterministic comparison
    model.encoder[0].p = 0.0
    old = reference_model(model)
    x = torch.randn(n, 7, generator=torch.Generator().manual_seed(2), dtype=dtype)
    weight = w if weighted else None
    new_out = model(x, ei, edge_weight=weight)
    old_out = reference_forward(old, x, ei, weight)
    assert relative_error(new_out, old_out) <= RTOL[dtype]
    # gradients of every parameter, through a loss that weights every output differently
    probe = torch.randn(new_out.shape, generator=torch.Generator().manual_seed(3), dtype=dtype)
    (new_out * probe).sum().backward()
    (old_out * probe).sum().backward()
    for (key, p_new), p_old in zip(model.named_parameters(), old.parameters()):
        assert p_old.grad is not None and p_new.grad is not None, key
        tol = 20 * RTOL[dtype]  # backward sums in another order
        assert relative_error(p_new.grad, p_old.grad) <= tol, key


@pytest.mark.parametrize("conv", ["san", "gat", "gcn"])
def test_attention_and_kept_attention_match_the_reference(conv):
    n = 40
    ei, w = random_graph(n, 150, seed=4)
    model = build_model("nonlocal", conv=conv, depth=1, in_channels=5, out_channels=2)
    model = model.double()
    x = torch.randn(n, 16 if False else 32, dtype=torch.float64)
    mp = model.blocks[0].mp
    old = reference_model(model).blocks[0].mp
    for weight in (None, w):
        ctx = GraphContext.build(ei, n, dtype=torch.float64, edge_weight=weight)
        old_ctx = ref.GraphContext.build(ei, n, dtype=torch.float64, edge_weight=weight)
        with torch.no_grad():
            alpha, old_alpha = mp.attention(x, ctx), old.attention(x, old_ctx)
            assert torch.equal(ctx.src, old_ctx.src) and torch.equal(ctx.dst, old_ctx.dst)
            assert relative_error(alpha, old_alpha) <= 1e-12
            mp.keep_attention = old.keep_attention = True
            mp(x, ctx), old(x, old_ctx)
            mp.keep_attention = old.keep_attention = False

        # the kept weights are over other (sorted) edges: compare them as edge -> weight maps
        def as_dense(alpha: Tensor, edges: tuple[Tensor, Tensor]) -> Tensor:
            src, dst = edges
            out = torch.zeros(n, n, alpha.size(1), dtype=alpha.dtype)
            return out.index_put_((dst, src), alpha, accumulate=True)

        assert mp.last_attention is not None and mp.last_edges is not None
        assert (
            relative_error(
                as_dense(mp.last_attention, mp.last_edges),
                as_dense(old.last_attention, old.last_edges),
            )
            <= 1e-12
        )
        assert relative_error(mp.last_energy, old.last_energy) <= 1e-12


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(
    ("name", "conv"), [("postln", "san"), ("postln", "gat"), ("nonlocal", "san"), ("postln", "gcn")]
)
def test_kernel_matches_the_reference_on_cora(cora, name, conv, dtype):
    model = build_model(name, conv=conv, depth=4, in_channels=cora.num_features, out_channels=7).to(
        dtype
    )
    old = reference_model(model)
    x = cora.x.to(dtype)
    with torch.no_grad():
        new_out = model(x, cora.edge_index)
        old_out = reference_forward(old, x, cora.edge_index)
    assert relative_error(new_out, old_out) <= RTOL[dtype]


def test_global_blocks_and_isolated_nodes_unchanged():
    n = 30
    ei, _ = random_graph(n, 80, seed=5)
    model = build_model("postln", depth=4, in_channels=4, out_channels=2, pattern="MS").double()
    old = reference_model(model)
    x = torch.randn(n, 4, dtype=torch.float64)
    with torch.no_grad():
        new_out, old_out = model(x, ei), reference_forward(old, x, ei)
    assert relative_error(new_out, old_out) <= 1e-12
    assert torch.isfinite(new_out).all()


@pytest.mark.parametrize("conv", ["san", "gat", "gcn"])
@pytest.mark.parametrize("name", ["postln", "nonlocal"])
def test_no_host_sync_in_the_block_forward(monkeypatch, name, conv):
    """No .item()/.tolist()/.cpu()/bool() of a tensor once the graph context exists: on a GPU
    each would stall the pipeline once per block."""
    n = 50
    ei, w = random_graph(n, 200, seed=6)
    model = build_model(name, conv=conv, depth=4, in_channels=6, out_channels=2, pattern="MMMS")
    x = torch.randn(n, 6)
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
