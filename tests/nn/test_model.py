"""Model zoo: blocks against hand-written references of the SPEC equations, and the
paper's phenomena at initialisation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from oversmooth import GraphOperator, build_model, laplacian_energy
from oversmooth.data import load
from oversmooth.nn import GraphContext, LayerNorm, ModelConfig, MultiHeadMessagePassing
from oversmooth.nn.block import Block

from tests.conftest import undirected


def _graph():
    ei = undirected([(0, 1), (1, 2), (2, 3), (3, 0), (0, 2), (4, 5)])  # two components
    return ei, 6


def dense_attention(
    mp: MultiHeadMessagePassing, x: torch.Tensor, ei: torch.Tensor, full: bool = False
) -> torch.Tensor:
    """P_h as dense [h, n, n] matrices, straight from the SPEC formulas."""
    n, h, hd = x.size(0), mp.heads, mp.head_dim
    mask = torch.eye(n, dtype=torch.bool)
    mask[ei[1], ei[0]] = True  # row i attends to j when j -> i
    if full:
        mask[:] = True
    v = (x @ mp.value.weight.T).view(n, h, hd)
    probs = []
    for head in range(h):
        if mp.conv == "gcn" and not full:
            e = torch.zeros(n, n)
        elif mp.conv == "san" or full:
            q = (x @ mp.scorer.query.weight.T).view(n, h, hd)[:, head]
            k = (x @ mp.scorer.key.weight.T).view(n, h, hd)[:, head]
            e = q @ k.T / math.sqrt(hd)
        else:
            e = F.leaky_relu(
                (v[:, head] @ mp.scorer.att_dst[head])[:, None]
                + (v[:, head] @ mp.scorer.att_src[head])[None, :],
                0.2,
            )
        e = e.masked_fill(~mask, float("-inf"))
        probs.append(torch.softmax(e, dim=1))
    return torch.stack(probs)


def dense_mp(
    mp: MultiHeadMessagePassing, x: torch.Tensor, ei: torch.Tensor, full: bool = False
) -> torch.Tensor:
    n, h, hd = x.size(0), mp.heads, mp.head_dim
    p = dense_attention(mp, x, ei, full)
    heads = []
    for head in range(h):
        v_h = mp.value.weight[head * hd : (head + 1) * hd].T  # [d, hd]
        out = p[head] @ x @ v_h
        if mp.nonlocal_:
            out = ((p[head] @ x - x).pow(2).sum() / n) * out
        heads.append(out)
    return torch.cat(heads, dim=1) @ mp.out.weight.T


def dense_block(block: Block, x: torch.Tensor, ei: torch.Tensor) -> torch.Tensor:
    def ln(norm, t):
        return F.layer_norm(t, (t.size(1),), norm.weight, norm.bias, 1e-5)

    def ffn(t):
        lin1, lin2 = block.ffn[0], block.ffn[3]
        return torch.relu(t @ lin1.weight.T + lin1.bias) @ lin2.weight.T + lin2.bias

    mp = lambda t: dense_mp(block.mp, t, ei)  # noqa: E731
    if block.placement == "preln":
        y = x + mp(ln(block.norm1, x))
        return y + ffn(ln(block.norm2, y))
    if block.placement == "postln":
        y = ln(block.norm1, x + mp(x))
        return ln(block.norm2, y + ffn(y))
    return torch.relu(mp(x))


@pytest.mark.parametrize("name", ["preln", "postln", "nonlocal", "nonlocal-preln", "plain"])
@pytest.mark.parametrize("conv", ["san", "gcn", "gat"])
def test_block_equals_dense_reference(name, conv):
    ei, n = _graph()
    model = build_model(
        name, conv=conv, depth=1, in_channels=8, out_channels=3, hidden=8, heads=2, seed=1
    )
    block = model.blocks[0]
    # perturb the LayerNorm affine parameters so they are exercised
    with torch.no_grad():
        for p in block.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(2))
    ctx = GraphContext.build(ei, n)
    with torch.no_grad():
        assert torch.allclose(block(x, ctx), dense_block(block, x, ei), atol=1e-5, rtol=1e-5)


def test_nonlocal_factor_is_the_heads_laplacian_energy():
    ei, n = _graph()
    mp = MultiHeadMessagePassing(8, 2, "san", nonlocal_=True)
    factors = []
    handle = mp.hook_factor.register_forward_hook(lambda m, a, out: factors.append(out))
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        mp(x, GraphContext.build(ei, n))
    handle.remove()
    p = dense_attention(mp, x, ei)
    (factor,) = factors
    for head in range(2):
        expected = ((p[head] @ x - x) ** 2).sum() / n
        assert factor[head].item() == pytest.approx(expected.item(), rel=1e-5)
    # it has no parameters beyond the plain operator's
    plain = MultiHeadMessagePassing(8, 2, "san")
    assert sum(p.numel() for p in mp.parameters()) == sum(p.numel() for p in plain.parameters())


def test_gcn_attention_is_the_neighbourhood_mean_with_self_loop():
    ei, n = _graph()
    mp = MultiHeadMessagePassing(4, 2, "gcn")
    ctx = GraphContext.build(ei, n)
    alpha = mp.attention(torch.randn(n, 4), ctx)
    deg = torch.bincount(ei[1], minlength=n).float()
    assert torch.allclose(alpha[:, 0], 1.0 / (deg[ctx.dst] + 1.0))
    # and the propagation is the random walk of the graph with self loops
    x = torch.randn(n, 4, dtype=torch.float64)
    px = torch.zeros_like(x).index_add_(0, ctx.dst, x[ctx.src] * alpha[:, :1].double())
    assert torch.allclose(px, GraphOperator(ei, num_nodes=n, self_loops=True).propagate(x))


def test_layernorm_modes():
    x = torch.randn(7, 5, generator=torch.Generator().manual_seed(4))
    torch_ln = torch.nn.LayerNorm(5)
    ours = LayerNorm(5, "node")
    assert torch.allclose(ours(x), torch_ln(x), atol=1e-6)
    graph_ln = LayerNorm(5, "graph")
    whole = (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + 1e-5)
    assert torch.allclose(graph_ln(x), whole, atol=1e-6)
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    out = graph_ln(x, batch)
    assert torch.allclose(out[:3], graph_ln(x[:3]), atol=1e-6)
    assert torch.allclose(out[3:], graph_ln(x[3:]), atol=1e-6)
    assert torch.equal(graph_ln.weight, torch.ones(5)) and torch.equal(
        graph_ln.bias, torch.zeros(5)
    )
    with pytest.raises(ValueError, match="norm: expected one of node, graph"):
        LayerNorm(5, "batch")


def test_global_attention_block_and_batches():
    ei, n = _graph()
    mp = MultiHeadMessagePassing(
        8, 2, "gcn", global_attention=True
    )  # S blocks are dot-product whatever the conv
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        out = mp(x, GraphContext.build(ei, n))
        assert torch.allclose(out, dense_mp(mp, x, ei, full=True), atol=1e-5)
        # a batch of two graphs: no attention across graphs
        batch = torch.tensor([0, 0, 0, 0, 1, 1])
        both = mp(x, GraphContext.build(ei, n, batch))
        first = mp(x[:4], GraphContext.build(ei[:, ei[0] < 4], 4))
        assert torch.allclose(both[:4], first, atol=1e-5)
        mp_nl = MultiHeadMessagePassing(8, 2, "san", nonlocal_=True, global_attention=True)
        assert torch.allclose(
            mp_nl(x, GraphContext.build(ei, n)), dense_mp(mp_nl, x, ei, full=True), atol=1e-5
        )


def test_pattern_interleaves_blocks():
    config = ModelConfig(
        "postln", depth=6, in_channels=3, out_channels=2, hidden=8, heads=2, pattern="MMS"
    )
    assert config.block_kinds() == "MMSMMS"
    model = build_model(
        "postln", depth=6, in_channels=3, out_channels=2, hidden=8, heads=2, pattern="MMS"
    )
    assert [b.mp.global_attention for b in model.blocks] == [False, False, True, False, False, True]
    ei, n = _graph()
    assert model(torch.randn(n, 3), ei).shape == (n, 2)


def test_seeded_and_rng_neutral():
    state = torch.random.get_rng_state()
    a = build_model("nonlocal", conv="gat", depth=3, in_channels=5, out_channels=2, seed=7)
    assert torch.equal(torch.random.get_rng_state(), state)
    b = build_model("nonlocal", conv="gat", depth=3, in_channels=5, out_channels=2, seed=7)
    c = build_model("nonlocal", conv="gat", depth=3, in_channels=5, out_channels=2, seed=8)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert any(
        not torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters(), strict=True)
    )
    ei, n = _graph()
    x = torch.randn(n, 5)
    assert torch.equal(a(x, ei), b(x, ei))


@pytest.mark.parametrize(
    "name, conv", [("postln", "san"), ("preln", "gat"), ("nonlocal", "gcn"), ("plain", "gcn")]
)
def test_float64_model_matches_float32_at_small_depth(name, conv):
    ei, n = _graph()
    x = torch.randn(n, 5, generator=torch.Generator().manual_seed(0))
    m32 = build_model(
        name, conv=conv, depth=3, in_channels=5, out_channels=2, hidden=8, heads=2, seed=3
    )
    m64 = build_model(
        name,
        conv=conv,
        depth=3,
        in_channels=5,
        out_channels=2,
        hidden=8,
        heads=2,
        seed=3,
        dtype="float64",
    )
    assert m64.config.dtype == "float64" and all(p.dtype == torch.float64 for p in m64.parameters())
    for p32, p64 in zip(
        m32.parameters(), m64.parameters(), strict=True
    ):  # same seed, same initial weights
        assert torch.equal(p32.double(), p64)
    with torch.no_grad():
        out32, out64 = m32(x, ei), m64(x.double(), ei)
    assert out64.dtype == torch.float64
    torch.testing.assert_close(out32.double(), out64, rtol=1e-5, atol=1e-5)


def test_float64_weights_do_not_depend_on_the_default_dtype():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        a = build_model(
            "postln", depth=2, in_channels=3, out_channels=2, hidden=8, heads=2, dtype="float64"
        )
    finally:
        torch.set_default_dtype(previous)
    b = build_model(
        "postln", depth=2, in_channels=3, out_channels=2, hidden=8, heads=2, dtype="float64"
    )
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_bad_dtype_lists_choices():
    with pytest.raises(
        ValueError, match=r"dtype: expected one of float32, float64, received 'float16'"
    ):
        build_model("postln", depth=2, in_channels=3, out_channels=2, dtype="float16")


def test_skip_replaces_blocks_by_identity():
    ei, n = _graph()
    model = build_model("preln", depth=4, in_channels=3, out_channels=2, hidden=8, heads=2)
    x = torch.randn(n, 3)
    with torch.no_grad():
        ctx = model.context(ei, n)
        h = model.encoder(x)
        for k in (0, 3):
            h = model.blocks[k](h, ctx)
        assert torch.allclose(model(x, ei, skip=[1, 2]), model.decoder(h))
    with pytest.raises(
        ValueError, match=r"skip: block indices must lie in \[0, 3\], received \[4\]"
    ):
        model(x, ei, skip=[4])


def test_depth_1024_runs():
    data = load("karate")
    model = build_model(
        "postln", conv="gcn", depth=1024, in_channels=34, out_channels=2, hidden=8, heads=2
    )
    with torch.no_grad():
        out = model(data.x, data.edge_index)
    assert out.shape == (34, 2) and torch.isfinite(out).all()


def test_bad_configs_list_choices():
    base = dict(depth=2, in_channels=3, out_channels=2)
    with pytest.raises(ValueError, match="hidden: expected a multiple of heads=3, received 32"):
        build_model("postln", heads=3, **base)
    with pytest.raises(ValueError, match="depth: expected an integer >= 1, received 0"):
        build_model("postln", depth=0, in_channels=3, out_channels=2)
    with pytest.raises(
        ValueError,
        match=(
            "model: expected one of preln, postln, nonlocal, nonlocal-preln, plain, diffusion, "
            "received 'pre'"
        ),
    ):
        build_model("pre", **base)
    with pytest.raises(
        ValueError, match="conv: expected one of san, gcn, gat, esa, received 'gin'"
    ):
        build_model("postln", conv="gin", **base)
    with pytest.raises(ValueError, match=r"pattern: expected a non-empty string over \{M, S\}"):
        build_model("postln", pattern="MX", **base)
    with pytest.raises(ValueError, match="build_model: unknown keyword widht; expected one of"):
        build_model("postln", widht=3, **base)
    # the closest keyword named, and the list holds the named arguments too (an audit)
    with pytest.raises(ValueError, match="unknown keyword hiden; did you mean hidden?"):
        build_model("postln", hiden=3, **{k: v for k, v in base.items() if k != "hidden"})
    model = build_model("postln", **base)
    with pytest.raises(ValueError, match=r"x: expected shape \[num_nodes, 3\]"):
        model(torch.randn(4, 5), torch.tensor([[0], [1]]))


@pytest.fixture(scope="module")
def cora():
    return load("cora")


def _final_energy(name, depth, data, conv="san", seed=0):
    model = build_model(
        name, conv=conv, depth=depth, in_channels=data.num_features, out_channels=7, seed=seed
    )
    with torch.no_grad():
        ctx = model.context(data.edge_index, data.num_nodes)
        h = model.encoder(data.x)
        for block in model.blocks:
            h = block(h, ctx)
    return laplacian_energy(h, GraphOperator(data.edge_index, num_nodes=data.num_nodes)).item()


def test_paper_phenomena_at_initialisation_on_cora(cora):
    """Tables 2, 4, 6 of Guan & He in kind: Post-LN collapses, Pre-LN grows, nonlocal decays slowly.

    Measured (seed 0): Post-LN 0.55 -> 2.7e-12 (paper: 0.558 -> 1.32e-12), Pre-LN 0.21 -> 0.92
    (paper: 1.70 -> 23.2), nonlocal 1.09 -> 9.0e-3 (paper: 0.793 -> 8.55e-5).
    """
    post = _final_energy("postln", 2, cora), _final_energy("postln", 256, cora)
    pre = _final_energy("preln", 2, cora), _final_energy("preln", 256, cora)
    nonl = _final_energy("nonlocal", 2, cora), _final_energy("nonlocal", 256, cora)
    assert post[0] / post[1] > 1e4  # many orders of magnitude
    assert pre[1] > 3 * pre[0]  # grows with depth
    assert nonl[1] < nonl[0]  # decays ...
    assert (nonl[0] / nonl[1]) * 100 < post[0] / post[
        1
    ]  # ... by orders of magnitude less than Post-LN


@pytest.mark.slow  # 15 models at depth 256 (15 s); depth 1024 and the paper's phenomena stay
@pytest.mark.parametrize("conv", ["san", "gcn", "gat"])
def test_every_model_runs_on_cora_at_depth_2_and_256(cora, conv):
    for name in ("preln", "postln", "nonlocal", "nonlocal-preln", "plain"):
        for depth in (2, 256):
            model = build_model(
                name, conv=conv, depth=depth, in_channels=cora.num_features, out_channels=7
            )
            with torch.no_grad():
                out = model(cora.x, cora.edge_index)
            assert out.shape == (cora.num_nodes, 7)
            assert not torch.isnan(out).any()
