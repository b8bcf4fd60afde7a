"""The paths a large graph takes without autograd (issue 30: a 10^6-node analysis in 2 GB)
give the numbers of the whole-array paths: attention head by head, the FFN and LayerNorm over
blocks of rows, residual sums added into the sublayer's own output, features cast by the model.
Each test lowers the size threshold so that a small graph takes the large-graph path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oversmooth.nn import block as B
from oversmooth.nn import conv as C
from oversmooth.nn import scorers as S
from oversmooth.nn import model as M
from oversmooth.nn.model import build_model

from tests.nn.test_conv import random_graph

N = 400


def _forward(model, x, ei, w=None):
    with torch.no_grad():
        return model(x, ei, edge_weight=w)


def _model(name, conv="san", depth=3):
    return build_model(name, conv=conv, depth=depth, in_channels=6, out_channels=3, dtype="float64")


@pytest.mark.parametrize("row_block", [None, 37])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("conv", ["san", "gat"])
@pytest.mark.parametrize("name", ["postln", "preln", "nonlocal", "nonlocal-preln"])
def test_attention_head_by_head_equals_all_heads_at_once(
    monkeypatch, name, conv, weighted, row_block
):
    """Head by head, and (``row_block``) with queries and products a block of rows at a time."""
    ei, w = random_graph(N, 3000, seed=1)
    x = torch.randn(N, 6, dtype=torch.float64)
    model = _model(name, conv)
    weight = w if weighted else None
    whole = _forward(model, x, ei, weight)
    taken = []
    by_head = C.MultiHeadMessagePassing._csr_by_head

    def spy(self, *args):
        taken.append(self.heads)
        return by_head(self, *args)

    monkeypatch.setattr(C, "BY_HEAD_VALUES", 16)
    monkeypatch.setattr(C.MultiHeadMessagePassing, "_csr_by_head", spy)
    if row_block is not None:
        monkeypatch.setattr(C, "ROW_BLOCK", row_block)
        monkeypatch.setattr(S, "ROW_BLOCK", row_block)
    split = _forward(model, x, ei, weight)
    assert taken == [4] * 3  # every block ran head by head
    torch.testing.assert_close(split, whole, rtol=1e-12, atol=1e-12)


def test_head_by_head_emits_every_heads_nonlocal_factor(monkeypatch):
    ei, _ = random_graph(N, 3000, seed=2)
    x = torch.randn(N, 6, dtype=torch.float64)
    model = _model("nonlocal", depth=1)
    mp = model.blocks[0].mp
    seen: list[torch.Tensor] = []
    mp.hook_factor.register_forward_hook(lambda m, a, out: seen.append(out.clone()))
    _forward(model, x, ei)
    monkeypatch.setattr(C, "BY_HEAD_VALUES", 16)
    _forward(model, x, ei)
    assert len(seen) == 2 and seen[1].shape == (4,)
    torch.testing.assert_close(seen[1], seen[0], rtol=1e-12, atol=0)


def test_head_by_head_is_not_taken_under_autograd_or_an_attention_hook(monkeypatch):
    ei, _ = random_graph(N, 3000, seed=3)
    x = torch.randn(N, 6, dtype=torch.float64)
    model = _model("postln", depth=1)
    monkeypatch.setattr(C, "BY_HEAD_VALUES", 16)
    mp = model.blocks[0].mp
    ctx = model.context(ei, N)
    h = model.encoder(x)
    assert mp._by_head(h.detach(), ctx) is False  # parameters require grad, grad enabled
    with torch.no_grad():
        assert mp._by_head(h, ctx) is True
        handle = mp.hook_attention.register_forward_hook(lambda *a: None)
        assert mp._by_head(h, ctx) is False  # the hook reads the [E, h] weights
        handle.remove()
    out = model(x, ei)  # with gradients: the all-heads kernel, and they flow
    out.sum().backward()
    assert mp.scorer.query.weight.grad is not None


@pytest.mark.parametrize("name", ["postln", "preln", "nonlocal"])
def test_ffn_and_norms_over_blocks_of_rows_give_the_same_numbers(monkeypatch, name):
    """The same to rounding: a product over a few rows may take another BLAS kernel than over
    all of them (at the default 65536-row blocks the outputs were equal bit for bit)."""
    ei, _ = random_graph(N, 3000, seed=4)
    x = torch.randn(N, 6, dtype=torch.float64)
    model = _model(name).eval()
    whole = _forward(model, x, ei)
    fused = []
    add_into = B.FFN.add_into_
    monkeypatch.setattr(B.FFN, "add_into_", lambda self, *a: fused.append(1) or add_into(self, *a))
    monkeypatch.setattr(B, "FFN_BLOCK_VALUES", 64 * 7)  # 7 rows of the 64-wide hidden layer
    monkeypatch.setattr(B, "NORM_BLOCK_ROWS", 9)
    blocks = _forward(model, x, ei)
    assert len(fused) == 3
    torch.testing.assert_close(blocks, whole, rtol=1e-13, atol=1e-13)


def test_a_hook_on_a_sublayer_keeps_the_whole_array_paths(monkeypatch):
    """A hook sees what the sublayer returns: the FFN is then called whole, and an output the
    hook hands back (here the sublayer's own input) is never added into in place."""
    ei, _ = random_graph(N, 3000, seed=5)
    x = torch.randn(N, 6, dtype=torch.float64)
    model = _model("postln", depth=2).eval()
    monkeypatch.setattr(B, "FFN_BLOCK_VALUES", 64 * 7)
    monkeypatch.setattr(B, "NORM_BLOCK_ROWS", 9)
    outputs: list[tuple] = []
    ffn = model.blocks[0].ffn
    ffn.register_forward_hook(lambda m, a, out: outputs.append(out.shape))
    # the attention sublayer replaced by the identity through a hook: its input comes back
    model.blocks[1].mp.register_forward_hook(lambda m, args, out: args[0])
    with torch.no_grad():
        h = model.encoder(x)
        ctx = model.context(ei, N)
        h1 = model.blocks[0](h, ctx)
        kept = h1.clone()
        h2 = model.blocks[1](h1, ctx)
    assert outputs == [(N, 32)]  # one call of the whole FFN
    assert torch.equal(h1, kept)  # the block's input was not added into
    assert torch.isfinite(h2).all()


def test_float32_features_into_a_float64_model_equal_the_cast_features():
    ei, _ = random_graph(N, 3000, seed=6)
    x = torch.randn(N, 6)
    model = _model("postln", depth=2)
    torch.testing.assert_close(
        _forward(model, x, ei), _forward(model, x.double(), ei), rtol=0, atol=0
    )


def _spy_encoder_blocks(monkeypatch, model, rows):
    """Lower the encoder's block size to ``rows``; returns the list of row counts that each call
    of the encoder's first Linear received."""
    monkeypatch.setattr(M, "ENCODER_BLOCK_ROWS", rows)
    seen: list[int] = []
    linear = next(m for m in model.encoder if isinstance(m, torch.nn.Linear))
    original = linear.forward
    monkeypatch.setattr(linear, "forward", lambda x: seen.append(x.size(0)) or original(x))
    return seen


@pytest.mark.parametrize("encoder", ["mlp", "linear"])
def test_the_encoder_over_blocks_of_rows_gives_the_same_numbers(monkeypatch, encoder):
    ei, _ = random_graph(N, 3000, seed=7)
    x = torch.randn(N, 6)  # float32 features, cast block by block
    model = build_model(
        "postln", depth=2, in_channels=6, out_channels=3, dtype="float64", encoder=encoder
    )
    whole = _forward(model, x, ei)
    seen = _spy_encoder_blocks(monkeypatch, model, 70)
    split = _forward(model, x, ei)
    assert seen == [70] * 5 + [50]
    torch.testing.assert_close(split, whole, rtol=1e-12, atol=1e-12)


def test_the_encoder_runs_whole_under_autograd_in_training_or_with_a_hook(monkeypatch):
    ei, _ = random_graph(N, 3000, seed=8)
    x = torch.randn(N, 6, dtype=torch.float64)
    model = _model("postln", depth=1)
    seen = _spy_encoder_blocks(monkeypatch, model, 70)
    model(x, ei).sum().backward()  # autograd records
    model.train()
    with torch.no_grad():
        model(x, ei)  # training mode (dropout would draw per block)
    model.eval()
    handle = model.encoder.register_forward_hook(lambda *a: None)
    _forward(model, x, ei)  # a hook reads the encoder's whole output
    handle.remove()
    assert seen == [N, N, N]
    _forward(model, x, ei)
    assert seen[3:] == [70] * 5 + [50]


@pytest.mark.parametrize("name", ["postln", "preln", "nonlocal"])
def test_a_probed_analysis_on_the_large_graph_paths_measures_the_same(monkeypatch, name):
    """Every large-graph path at once (the encoder, attention by head and by blocks of rows, FFN
    and LayerNorm in blocks, row dots, unit rows, the streamed Laplacian energy, heap trimming)
    against the whole-array paths: every column of the probe's table, and the similarity."""
    import oversmooth.analysis as A
    from oversmooth import graph as G
    from oversmooth import probe as P
    from oversmooth.data import csbm
    from oversmooth.metrics import kernels as K
    from oversmooth.metrics import state as MS

    data = csbm(n=600, degree=8, features=6, seed=3)
    model = _model(name, depth=4)

    def run():
        # the bound floor: a twin's floor is the energy of rounding differences, which the
        # large-graph paths change at their own rounding (its own large-graph path:
        # tests/test_precision.py)
        frame = A.probe_run(model, data, similarity=True, floor="bound")
        return frame, frame.attrs["similarity"]

    whole, whole_sim = run()
    for module, name_, value in [
        (C, "BY_HEAD_VALUES", 16),
        (C, "ROW_BLOCK", 50),
        (S, "ROW_BLOCK", 50),
        (B, "FFN_BLOCK_VALUES", 64 * 40),
        (B, "NORM_BLOCK_ROWS", 45),
        (P, "UNIT_BLOCK_VALUES", 32 * 25),
        (MS, "KEEP_VALUES", 0),
        (K, "PAIRS_VALUES", 0),
        (G, "WHOLE_VALUES", 0),
        (G, "CHUNK_VALUES", 4096),
        (A, "TRIM_SIZE", 0),
        (M, "ENCODER_BLOCK_ROWS", 70),
    ]:
        monkeypatch.setattr(module, name_, value)
    large, large_sim = run()
    assert list(large.columns) == list(whole.columns)
    for column in whole.columns:
        a, b = whole[column].to_numpy(), large[column].to_numpy()
        if a.dtype.kind == "f":
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=0, equal_nan=True, err_msg=column)
        else:
            assert (a == b).all(), column
    assert abs(large_sim - whole_sim).max() <= 1e-7  # kept as float32 rows


@pytest.mark.parametrize("kernel", ["csr", "edge"])
@pytest.mark.parametrize("conv", ["san", "gat", "gcn"])
def test_int32_edge_lists_give_the_numbers_of_int64_ones(monkeypatch, conv, kernel):
    """The model's graph context holds its edges as int32 (half the memory of int64 at 10^6
    nodes): outputs and gradients are those of int64 edges bit for bit, and the attention
    handed to hooks still has int64 edges."""
    from oversmooth.nn import set_kernel

    ei, w = random_graph(N, 3000, seed=9)
    x = torch.randn(N, 6, dtype=torch.float64)
    model = set_kernel(_model("postln", conv, depth=2), kernel)
    ctx = model.context(ei, N, None, None)
    assert ctx.src.dtype == ctx.dst.dtype == torch.int32
    seen = []
    model.blocks[0].mp.hook_attention.register_forward_hook(lambda m, a, out: seen.append(out))

    def run():
        model.zero_grad()
        out = model(x, ei, edge_weight=w)
        out.square().sum().backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return out.detach(), grads

    indices = []
    aggregate = C.aggregate
    monkeypatch.setattr(
        C, "aggregate", lambda m, i, n: indices.append(i.dtype) or aggregate(m, i, n)
    )
    narrow = run()
    # the edge back-end gathers and adds with int64 indices (int32 ones took 2-4x as long)
    assert indices == ([torch.int64] * 2 if kernel == "edge" else [])
    monkeypatch.setattr(C, "index_dtype", lambda bound: torch.int64)
    wide = run()
    assert torch.equal(narrow[0], wide[0]) and torch.equal(narrow[1], wide[1])
    assert [(a.src.dtype, a.dst.dtype) for a in seen] == [(torch.int64, torch.int64)] * 2
    torch.testing.assert_close(seen[0].src, seen[1].src, rtol=0, atol=0)
