"""Each convolution's scorer against a dense reference written from the SPEC formulas, on a
tiny weighted graph (a repeated edge, a user self loop, an isolated node), on both back-ends:
the scores themselves, the attention the core emits at its hook point, and the output."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from oversmooth.nn import (
    KERNELS,
    GATScorer,
    GCNScorer,
    GraphContext,
    MultiHeadMessagePassing,
    SANScorer,
    line_graph,
)

CONVS = ["san", "gat", "gcn", "esa"]
SCORER_OF = {"san": SANScorer, "gat": GATScorer, "gcn": GCNScorer, "esa": SANScorer}


def tiny_case(conv: str) -> tuple[Tensor, Tensor | None, int]:
    """``edge_index``, weights and size of the graph the operator attends over: a 6-node
    graph, or for ``esa`` the line graph of a 4-node one (unweighted: ESA takes none)."""
    if conv == "esa":
        ei = torch.tensor([[0, 1, 1, 2, 3], [1, 0, 2, 3, 3]])  # a self loop is an element too
        return line_graph(ei, 4), None, ei.size(1)
    ei = torch.tensor([[0, 1, 2, 2, 3, 1, 4, 4], [1, 2, 0, 0, 1, 1, 3, 2]])  # node 5 isolated
    weight = torch.tensor([0.5, 2.0, 1.0, 3.0, 0.7, 4.0, 1.5, 0.0], dtype=torch.float64)
    return ei, weight, 6


def dense_weights(ei: Tensor, weight: Tensor | None, n: int) -> Tensor:
    """``W[i, j]``: the weight of the edges ``j -> i`` (repeated edges summed), every user self
    loop replaced by one of weight 1."""
    w = torch.ones(ei.size(1), dtype=torch.float64) if weight is None else weight
    keep = ei[0] != ei[1]
    dense = torch.zeros(n, n, dtype=torch.float64)
    dense.index_put_((ei[1][keep], ei[0][keep]), w[keep], accumulate=True)
    return dense + torch.eye(n, dtype=torch.float64)


def dense_scores(mp: MultiHeadMessagePassing, x: Tensor) -> Tensor:
    """``e[h, i, j]`` for every pair (target ``i``, source ``j``), from the formulas."""
    n, h, hd = x.size(0), mp.heads, mp.head_dim
    scorer = mp.scorer
    if isinstance(scorer, SANScorer):
        q = (x @ scorer.query.weight.T).view(n, h, hd)
        k = (x @ scorer.key.weight.T).view(n, h, hd)
        return torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(hd)
    if isinstance(scorer, GATScorer):
        v = (x @ mp.value.weight.T).view(n, h, hd)
        a_dst = (v * scorer.att_dst).sum(-1).T  # [h, n]
        a_src = (v * scorer.att_src).sum(-1).T
        return F.leaky_relu(a_dst[:, :, None] + a_src[:, None, :], 0.2)
    return torch.zeros(h, n, n, dtype=x.dtype)  # e_ij = 1, any constant: the scorer's zeros


def dense_attention(mp: MultiHeadMessagePassing, x: Tensor, w: Tensor) -> Tensor:
    """``P_h = softmax_j(e_ij + log w_ij)`` over the pairs with ``w_ij > 0``: ``[h, n, n]``."""
    return torch.softmax(dense_scores(mp, x) + w.log(), dim=-1)


def dense_output(mp: MultiHeadMessagePassing, x: Tensor, p: Tensor) -> Tensor:
    n, hd = x.size(0), mp.head_dim
    heads = []
    for head in range(mp.heads):
        out = p[head] @ x @ mp.value.weight[head * hd : (head + 1) * hd].T
        if mp.nonlocal_:
            out = ((p[head] @ x - x).square().sum() / n) * out
        heads.append(out)
    return torch.cat(heads, dim=1) @ mp.out.weight.T


def per_pair(values: Tensor, src: Tensor, dst: Tensor, n: int) -> Tensor:
    """Per-edge values ``[E, h]`` as ``[h, n, n]`` (repeated edges summed)."""
    h = values.size(1)
    dense = torch.zeros(h, n, n, dtype=values.dtype)
    return dense.index_put_((torch.arange(h)[:, None], dst[None], src[None]), values.t(), True)


def operator(conv: str, nonlocal_: bool = False) -> MultiHeadMessagePassing:
    torch.manual_seed(0)
    return MultiHeadMessagePassing(8, 2, conv, nonlocal_=nonlocal_).double()


@pytest.mark.parametrize("conv", CONVS)
def test_conv_names_pick_their_scorer(conv):
    mp = operator(conv)
    assert type(mp.scorer) is SCORER_OF[conv]
    assert mp.conv == conv
    assert type(MultiHeadMessagePassing(8, 2, conv, global_attention=True).scorer) is SANScorer


@pytest.mark.parametrize("conv", CONVS)
def test_scores_equal_the_dense_scores_on_both_back_ends(conv):
    ei, weight, n = tiny_case(conv)
    ctx = GraphContext.build(ei, n, dtype=torch.float64, edge_weight=weight)
    mp = operator(conv)
    x = torch.randn(n, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    want = dense_scores(mp, x)[:, ctx.dst, ctx.src].T  # [E, h]
    values = (x @ mp.value.weight.T).view(n, 2, 4)
    with torch.no_grad():
        edge = mp.scorer.edge_scores(x, values, ctx.src, ctx.dst)
        plan = ctx.plan(2)
        csr = plan.per_edge(mp.scorer.csr_scores(x, mp.value.weight, plan))
    torch.testing.assert_close(edge, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(csr, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("nonlocal_", [False, True], ids=["plain", "nonlocal"])
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("conv", CONVS)
def test_attention_and_output_equal_the_dense_reference(conv, kernel, nonlocal_):
    ei, weight, n = tiny_case(conv)
    ctx = GraphContext.build(ei, n, dtype=torch.float64, edge_weight=weight)
    mp = operator(conv, nonlocal_)
    mp.kernel = kernel
    assert mp.backend == kernel
    x = torch.randn(n, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    seen: list = []
    handle = mp.hook_attention.register_forward_hook(lambda m, a, out: seen.append(out))
    with torch.no_grad():
        out = mp(x, ctx)
    handle.remove()
    p = dense_attention(mp, x, dense_weights(ei, weight, n))
    (attention,) = seen
    got = per_pair(attention.weights, attention.src, attention.dst, n)
    torch.testing.assert_close(got, p, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out, dense_output(mp, x, p), rtol=1e-10, atol=1e-12)


def test_checkpoints_from_before_the_scorers_still_load():
    """State dicts written when the scores' parameters sat on the operator itself
    (``mp.query.weight``, ``mp.att_dst``) load into the scorer."""
    for conv in ("san", "gat"):
        mp = operator(conv)
        old = {
            (k if k.startswith(("value.", "out.")) else k.removeprefix("scorer.")): v.clone()
            for k, v in mp.state_dict().items()
        }
        assert not any(k.startswith("scorer.") for k in old)
        fresh = MultiHeadMessagePassing(8, 2, conv).double()
        fresh.load_state_dict(old)
        for key, value in mp.state_dict().items():
            assert torch.equal(fresh.state_dict()[key], value), key
