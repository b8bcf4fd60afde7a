"""Multi-head message passing of the seed paper (Guan & He 2025, §3.1 and §4.1).

.. math::

    \\mathrm{MP}(X) = (P_1 X V_1 \\| \\dots \\| P_h X V_h)\\, W, \\qquad
    (P_h)_{ij} = \\operatorname{softmax}_{j \\in N(i) \\cup \\{i\\}} e^h_{ij}

with scores ``e`` set by the convolution type, each computed by its scorer
(:mod:`oversmooth.nn.scorers`: ``san`` scaled dot products, ``gat`` LeakyReLU of two
projections, ``gcn`` a constant, i.e. the neighbourhood mean).  One aggregation core,
:class:`MultiHeadMessagePassing`, runs any scorer on the ``edge`` or the ``csr`` back-end
(:data:`KERNELS`), plain or nonlocal; attention weights and nonlocal factors reach observers
through hook points (:mod:`oversmooth.nn.hooks`), never through attributes.

Nonlocal message passing scales every head by its own Laplacian energy,
:math:`\\frac1n \\|P_h X - X\\|_F^2`; it adds no parameter and ``O(n d)`` work.
``global_attention=True`` (the ``S`` blocks of ESA-style interleaving) replaces
the neighbourhood by all nodes of the graph and always uses scaled dot-product
scores, through :func:`torch.nn.functional.scaled_dot_product_attention`.

Everything is sparse over the edge list: ``O(|E| d)`` per block, no ``n x n``
attention matrix for neighbourhood attention.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oversmooth.nn.hooks import AttentionWeights, HookPoint
from oversmooth.nn.kernel import (
    ROW_BLOCK,
    CsrPlan,
    index_dtype,
    records,
    softmax_numerators_,
    sparse_matmul,
)
from oversmooth.nn.scorers import SANScorer, make_scorer
from oversmooth.registry import CONVS  # re-exported: the one registry of conv names
from oversmooth.resources import BY_HEAD_VALUES


def resolve_conv(conv: str) -> str:
    return CONVS.resolve(conv)


#: Message-passing kernels. ``"edge"`` is the edge-list implementation (gathers into
#: ``[E, h, d]`` tensors and ``index_add_``); it is the reference every other kernel is
#: tested against and the one benchmarks compare with (the implementation of commit 340f7a9,
#: its PyG softmax replaced by the same max-subtracted formula in torch, :func:`edge_softmax`).
#: ``"csr"`` sorts the edges by target once per forward and runs sparse products with a
#: sparse backward (:mod:`oversmooth.nn.kernel`).
KERNELS = ("edge", "csr")
DEFAULT_KERNEL = "csr"

#: Above :data:`BY_HEAD_VALUES` attention values (heads times edges with self loops) the
#: ``"csr"`` kernel runs head by head when autograd records nothing
#: (:meth:`MultiHeadMessagePassing._by_head`): at 4 heads about 10^6 edges; Cora's 4 heads hold
#: 5 * 10^4.  The constant lives in :mod:`oversmooth.resources`, whose memory estimate splits
#: there too.


def set_kernel(model: nn.Module, kernel: str) -> nn.Module:
    """Switch every :class:`MultiHeadMessagePassing` in ``model`` to ``kernel``; returns
    ``model``. Outputs agree to float tolerance whichever kernel runs."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel: expected one of {', '.join(KERNELS)}, received {kernel!r}")
    for module in model.modules():
        if isinstance(module, MultiHeadMessagePassing):
            module.kernel = kernel
    return model


@dataclass
class GraphContext:
    r"""Per-forward graph data shared by every block (built once per forward pass).

    ``src``/``dst`` is the edge list with every self loop present exactly once
    (the neighbourhood ``N(i) ∪ {i}``), int32 where the node ids fit (half the memory of the
    int64 ``edge_index``: 84 MiB less at 10^6 nodes of degree 10), ``inv_count`` is
    ``1 / |N(i) ∪ {i}|``.

    Edge weights ``w_ij >= 0`` (optional; self loops get weight 1, a user's own self
    loops are replaced by it) enter every convolution through one mechanism: the
    attention becomes :math:`\alpha_{ij} \propto w_{ij} \exp(e_{ij})`, i.e. ``log w`` is
    added to the scores before the softmax (``log_weight``).  With GCN's constant score
    that is the weighted mean :math:`w_{ij} / \sum_{k \in N(i) \cup \{i\}} w_{ik}`
    (``gcn_weight``, precomputed).  Global-attention blocks ignore edge weights.
    """

    src: Tensor  # [num_edges + num_nodes]
    dst: Tensor  # [num_edges + num_nodes]
    inv_count: Tensor  # [num_nodes]
    num_nodes: int
    batch: Tensor | None = None
    num_graphs: int | None = None
    log_weight: Tensor | None = None  # [num_edges + num_nodes] log w (weighted graphs only)
    gcn_weight: Tensor | None = None  # [num_edges + num_nodes] w_ij / sum_k w_ik
    dense_index: Tensor | None = None  # [num_nodes] graph * max_nodes + position (batches)
    max_nodes: int = 0  # the largest graph of the batch
    graph_sizes: Tensor | None = None  # [num_graphs] nodes per graph (batches)
    _plans: dict[int, CsrPlan] = field(default_factory=dict, repr=False, compare=False)
    _spread: dict[tuple[str, int], Tensor] = field(default_factory=dict, repr=False, compare=False)
    _wide: tuple[Tensor, Tensor] | None = field(default=None, repr=False, compare=False)

    def edges(self) -> tuple[Tensor, Tensor]:
        """``src`` and ``dst`` as int64, for the ``"edge"`` back-end and the hooks: built by
        the first block that asks, then shared by every block of this forward.  On the CPU
        (torch 2.13) gathers over int32 indices took about 2x as long and ``index_add_`` 4x,
        which made the edge back-end's forward 1.4-1.8x slower; the ``"csr"`` back-end reads
        the int32 lists through its plans."""
        if self._wide is None:
            self._wide = (self.src.long(), self.dst.long())
        return self._wide

    def mean(self) -> Tensor:
        """GCN's constant attention ``[num_edges + num_nodes]``: the (weighted) mean."""
        if self.gcn_weight is not None:
            return self.gcn_weight
        return self.inv_count.index_select(0, self.dst)  # the fast gather for int32 indices

    def plan(self, heads: int) -> CsrPlan:
        """The ``"csr"`` kernel's sparse structures for ``heads`` heads; built by the first
        block that asks, then shared by every block of this forward."""
        if heads not in self._plans:
            self._plans[heads] = CsrPlan(self.src, self.dst, self.num_nodes, heads)
        return self._plans[heads]

    def plan_values(self, name: Literal["mean", "log_weight"], heads: int) -> Tensor | None:
        """``"mean"`` (:meth:`mean`) or ``"log_weight"`` laid out as the values of
        :meth:`plan` (``[h E]``; ``None`` for the log weights of an unweighted graph); built
        on first use, then shared like the plan."""
        key = (name, heads)
        if key not in self._spread:
            values = self.mean() if name == "mean" else self.log_weight
            if values is None:
                return None
            self._spread[key] = self.plan(heads).spread(values)
        return self._spread[key]

    @classmethod
    def build(
        cls,
        edge_index: Tensor,
        num_nodes: int,
        batch: Tensor | None = None,
        dtype: torch.dtype = torch.float32,
        edge_weight: Tensor | None = None,
        self_loops: bool = True,
    ) -> GraphContext:
        """``self_loops=False`` (an ablation) attends over ``N(i)`` only; a node without
        in-neighbours (or, with ``edge_weight``, whose in-edges all weigh 0) then keeps its
        self loop, so that no row of ``P`` is empty."""
        keep = edge_index[0] != edge_index[1]
        loop = torch.arange(num_nodes, device=edge_index.device)
        if not self_loops:
            counted = keep if edge_weight is None else keep & (edge_weight.to(keep.device) > 0)
            indegree = torch.zeros(num_nodes, dtype=torch.long, device=edge_index.device)
            targets = edge_index[1][counted]
            indegree.index_add_(0, targets, torch.ones_like(targets))
            loop = loop[indegree == 0]  # one host sync per forward, none per layer
        index = index_dtype(num_nodes)
        src = torch.cat([edge_index[0][keep].to(index), loop.to(index)])
        dst = torch.cat([edge_index[1][keep].to(index), loop.to(index)])
        count = torch.zeros(num_nodes, dtype=dtype, device=edge_index.device).index_add_(
            0, dst, torch.ones_like(dst, dtype=dtype)
        )
        num_graphs = size = None
        dense_index, max_nodes = None, 0
        if batch is not None:
            num_graphs = int(batch.max()) + 1 if batch.numel() else 0
            size = torch.zeros(num_graphs, dtype=torch.long, device=batch.device)
            size.index_add_(0, batch, torch.ones_like(batch))
            max_nodes = int(size.max()) if num_graphs else 0
            # each element's place among its graph's elements, in their order, whatever the
            # order of the graph ids (an edge-set batch maps edges to graphs by their source:
            # not grouped by graph unless the edge list is)
            order = torch.argsort(batch, stable=True)
            start = torch.cumsum(size, 0) - size
            position = torch.empty_like(batch)
            position[order] = torch.arange(num_nodes, device=batch.device) - start[batch[order]]
            dense_index = batch * max_nodes + position
        log_weight = gcn_weight = None
        if edge_weight is not None:
            w = edge_weight.to(device=src.device, dtype=dtype)[keep]
            w = torch.cat([w, w.new_ones(loop.numel())])  # self loops: weight 1
            total = torch.zeros(num_nodes, dtype=dtype, device=src.device).index_add_(0, dst, w)
            gcn_weight, log_weight = w / total[dst], w.log()  # total >= 1 (self loop)
        return cls(
            src,
            dst,
            1.0 / count,
            num_nodes,
            batch,
            num_graphs,
            log_weight,
            gcn_weight,
            dense_index,
            max_nodes,
            size,
        )


def edge_softmax(scores: Tensor, index: Tensor, num_nodes: int) -> Tensor:
    """Softmax of ``scores`` ``[E, h]`` over the edges that share a target ``index``.

    The operations of ``torch_geometric.utils.softmax`` on the CPU, in the same order (so the
    same numbers, bit for bit): subtract each target's (detached) maximum, exponentiate,
    divide by each target's sum plus ``1e-16``.
    """
    spread = index.view(-1, 1).expand_as(scores)
    size = (num_nodes,) + scores.shape[1:]
    top = scores.new_zeros(size).scatter_reduce_(
        0, spread, scores.detach(), reduce="amax", include_self=False
    )
    out = (scores - top.index_select(0, index)).exp()
    total = scores.new_zeros(size).scatter_add_(0, spread, out) + 1e-16
    return out / total.index_select(0, index)


def to_dense_batch(values: Tensor, ctx: GraphContext) -> tuple[Tensor, Tensor]:
    """``values`` ``[n, c]`` of a batch of graphs as ``[B, m, c]`` (zero padded) and the mask
    ``[B, m]`` of real nodes, ``m`` the largest graph (``torch_geometric.utils.to_dense_batch``
    in torch)."""
    assert ctx.dense_index is not None and ctx.num_graphs is not None
    b, m = ctx.num_graphs, ctx.max_nodes
    out = values.new_zeros(b * m, values.size(1)).index_copy_(0, ctx.dense_index, values)
    mask = torch.zeros(b * m, dtype=torch.bool, device=values.device)
    mask[ctx.dense_index] = True
    return out.view(b, m, -1), mask.view(b, m)


def aggregate(messages: Tensor, index: Tensor, num_nodes: int) -> Tensor:
    """Sum ``messages`` ``[E, ...]`` into their target rows: ``[num_nodes, ...]``."""
    out = messages.new_zeros((num_nodes,) + messages.shape[1:])
    return out.index_add_(0, index, messages)


def propagate_heads(x: Tensor, alpha: Tensor, src: Tensor, dst: Tensor) -> Tensor:
    """``P_h X`` for every head: ``x`` ``[n, d]``, ``alpha`` ``[E, h]`` -> ``[n, h, d]``."""
    return aggregate(x[src].unsqueeze(1) * alpha.unsqueeze(-1), dst, x.size(0))


def head_energy(px: Tensor, x: Tensor, ctx: GraphContext | None = None) -> Tensor:
    """Each head's Laplacian energy :math:`\\frac1n \\|P_h X - X\\|_F^2` from ``px = P_h X``:
    ``[h]``; for a batch of graphs (``ctx.batch``), each graph's own, over its own ``n``
    nodes: ``[B, h]``."""
    if ctx is None or ctx.batch is None:
        return (px - x.unsqueeze(1)).square_().sum(dim=(0, 2)) / x.size(0)
    assert ctx.num_graphs is not None and ctx.graph_sizes is not None
    per_node = (px - x.unsqueeze(1)).square_().sum(dim=2)  # [n, h]
    total = per_node.new_zeros(ctx.num_graphs, per_node.size(1))
    total.index_add_(0, ctx.batch, per_node)
    return total / ctx.graph_sizes.clamp_min(1).to(total.dtype).unsqueeze(1)


def per_node(factor: Tensor, ctx: GraphContext) -> Tensor:
    """Per-head factors ``[h]`` as they multiply ``[n, h, ...]`` values (``[1, h]``), or per
    graph ``[B, h]`` spread to the nodes of each graph (``[n, h]``)."""
    if factor.dim() == 1:
        return factor.unsqueeze(0)
    assert ctx.batch is not None
    return factor.index_select(0, ctx.batch)


class MultiHeadMessagePassing(nn.Module):
    """The aggregation core of multi-head message passing (see the module docstring): runs a
    convolution's :class:`~oversmooth.nn.scorers.Scorer` on the ``edge`` or ``csr``
    back-end, or over all nodes of each graph (``global_attention``).

    Args:
        channels: feature size ``d`` (input and output).
        heads: number of heads ``h``; ``d`` must be divisible by ``h``.
        conv: a name of :data:`CONVS` (``"san"``, ``"gcn"``, ``"gat"``; ``"esa"`` scores as
            ``"san"``): picks the scorer (:func:`~oversmooth.nn.scorers.make_scorer`).
        nonlocal_: scale each head by :math:`\\frac1n\\|P_h X - X\\|^2`.
        global_attention: attend over all nodes of the graph (an ``S`` block; scaled
            dot-product scores whatever ``conv`` says).
        score_scale: divide dot-product scores by :math:`\\sqrt{d_k}` (default ``True``;
            ``False`` is an ablation of this unstated choice).
        nonlocal_norm: ``"mean"`` (default, the paper's :math:`\\frac1n`) or ``"sum"``
            (the nonlocal factor without the :math:`\\frac1n`, an ablation).

    The core owns ``value`` (``V_1 .. V_h`` stacked) and ``out`` (``W``); the scorer
    (``scorer``) owns the parameters of the scores.  Two hook points expose what a forward
    computes, only while a hook is registered on them (:mod:`oversmooth.nn.hooks`):
    ``hook_attention`` receives the :class:`~oversmooth.nn.hooks.AttentionWeights` of
    neighbourhood attention (``[E, h]``; global blocks emit none) and ``hook_factor`` the
    nonlocal factors ``[h]``.

    The ``"csr"`` back-end reads the projections' weights to fold them (``W V`` for GCN, the
    value projection with its columns of ones, GAT's scores).  When a projection is not a
    bare :class:`torch.nn.Linear` (a wrapper or adapter put in its place, a hook on it), the
    operator runs the ``"edge"`` back-end, which calls the projections as modules, so that
    what was put there is not silently skipped (:attr:`backend` says which runs).
    """

    def __init__(
        self,
        channels: int,
        heads: int,
        conv: str = "san",
        *,
        nonlocal_: bool = False,
        global_attention: bool = False,
        score_scale: bool = True,
        nonlocal_norm: str = "mean",
    ) -> None:
        super().__init__()
        if nonlocal_norm not in ("mean", "sum"):
            raise ValueError(
                f"nonlocal_norm: expected one of mean, sum, received {nonlocal_norm!r}"
            )
        if channels % heads:
            raise ValueError(f"hidden: expected a multiple of heads={heads}, received {channels}")
        self.channels, self.heads, self.head_dim = channels, heads, channels // heads
        self.conv = resolve_conv(conv)
        self.nonlocal_ = nonlocal_
        self.global_attention = global_attention
        self.score_scale, self.nonlocal_norm = score_scale, nonlocal_norm
        self.value = nn.Linear(channels, channels, bias=False)  # V_1 .. V_h stacked
        self.out = nn.Linear(channels, channels, bias=False)  # W
        scores = "san" if global_attention else self.conv
        self.scorer = make_scorer(scores, channels, heads, score_scale=score_scale)
        # Xavier-uniform projections, as torch.nn.MultiheadAttention and PyG's attention
        # convolutions initialise theirs (PyTorch's Linear default would shrink the
        # message-passing branch by ~1/3 in variance per projection).
        for lin in (self.value, self.out, *self.scorer.projections()):
            nn.init.xavier_uniform_(lin.weight)
        self.hook_attention = HookPoint()  # AttentionWeights of neighbourhood attention
        self.hook_factor = HookPoint()  # [h] nonlocal factors
        self.kernel = DEFAULT_KERNEL

    @property
    def backend(self) -> str:
        """What the next forward runs: ``"global"`` (an ``S`` block), ``"csr"`` (the kernel
        is ``"csr"`` and every projection is a bare ``nn.Linear`` without hooks) or
        ``"edge"``."""
        if self.global_attention:
            return "global"
        bare = all(
            type(m) is nn.Linear and not (m._forward_hooks or m._forward_pre_hooks)
            for m in (self.value, self.out, *self.scorer.projections())
        )
        return "csr" if self.kernel == "csr" and bare else "edge"

    # -- attention weights P_h -------------------------------------------------------------
    def attention(self, x: Tensor, ctx: GraphContext, values: Tensor | None = None) -> Tensor:
        """``[E, h]`` attention weights over ``ctx``'s edges (with self loops), by the edge
        back-end.

        ``values`` (``V X`` as ``[n, h, hd]``) saves recomputing it for scores that read it.
        """
        n, h, hd = x.size(0), self.heads, self.head_dim
        if self.scorer.uniform:
            return ctx.mean().to(x.dtype).unsqueeze(1).expand(-1, h)
        if self.scorer.reads_values and values is None:
            values = self.value(x).view(n, h, hd)
        src, dst = ctx.edges()
        scores = self.scorer.edge_scores(x, values, src, dst)  # [E, h]
        if ctx.log_weight is not None:
            scores = scores + ctx.log_weight.to(scores.dtype).unsqueeze(1)  # alpha ~ w exp(e)
        return edge_softmax(scores, dst, n)

    def forward(self, x: Tensor, ctx: GraphContext) -> Tensor:
        backend = self.backend
        if backend == "global":
            n = x.size(0)
            return self.out(self._global(x, ctx).reshape(n, self.channels))
        if backend == "csr":
            return self._csr_uniform(x, ctx) if self.scorer.uniform else self._csr(x, ctx)
        return self._edge(x, ctx)

    def _emit_attention(self, alpha: Tensor, ctx: GraphContext) -> None:
        self.hook_attention.emit(AttentionWeights(alpha, *ctx.edges()))

    def _edge(self, x: Tensor, ctx: GraphContext) -> Tensor:
        """The operator's output ``[n, d]`` by the ``"edge"`` back-end: ``[E, h, ...]``
        gathers and ``index_add_``."""
        n, h, hd = x.size(0), self.heads, self.head_dim
        # V X is needed by the plain operator and by scores that read it: computed once
        needs_values = self.scorer.reads_values or not self.nonlocal_
        xv = self.value(x).view(n, h, hd) if needs_values else None
        alpha = self.attention(x, ctx, xv)  # [E, h]
        if self.hook_attention.active:
            self._emit_attention(alpha.detach(), ctx)
        src, dst = ctx.edges()
        if self.nonlocal_:
            px = propagate_heads(x, alpha, src, dst)  # [n, h, d] = P_h X
            heads_out = self._nonlocal_values(px, x, ctx)
        else:
            assert xv is not None  # computed above for the plain operator
            heads_out = aggregate(xv[src] * alpha.unsqueeze(-1), dst, n)  # P_h X V_h
        return self.out(heads_out.reshape(n, h * hd))

    def _csr(self, x: Tensor, ctx: GraphContext) -> Tensor:
        """The operator's output ``[n, d]`` by the ``"csr"`` back-end, for scored attention
        (SAN, GAT).

        The softmax is normalised after the aggregation: the product runs with the
        unnormalised weights ``exp(e_ij - max_k e_ik)`` over an operand with one more column
        of ones, whose product is each row's sum of weights; dividing by it gives ``P_h``'s
        product.  That spares a pass over the ``h E`` values (a scatter of the sums and a
        gather to divide), and the operand's column of ones costs nothing: it is the bias of
        the value projection, or one padded column of ``X``.
        """
        n, h, hd = x.size(0), self.heads, self.head_dim
        if self._by_head(x, ctx):
            return self._csr_by_head(x, ctx)
        plan = ctx.plan(h)
        # V X (with its columns of ones): first whenever autograd records (x's gradient then
        # sums its parts in the order of the edge back-end); otherwise after the softmax, so
        # that it is not alive beside the scores (memory at 10^6 nodes, issue 16)
        early = torch.is_grad_enabled() and not self.nonlocal_
        xv = self._values_and_ones(x) if early else None  # [n, h, hd + 1]
        scores = self.scorer.csr_scores(x, self.value.weight, plan)  # [h E]
        log_weight = ctx.plan_values("log_weight", h)
        if log_weight is not None:
            scores.add_(log_weight.to(scores.dtype))  # alpha ~ w exp(e)
        weights = softmax_numerators_(scores, plan.row, plan.offsets)
        if self.nonlocal_:
            operand, layout = F.pad(x, (0, 1), value=1.0), plan.rect  # [X | 1]
        else:
            if xv is None:
                xv = self._values_and_ones(x)
            operand, layout = xv.view(n * h, hd + 1), plan.blocks
        summed = sparse_matmul(weights, operand, layout)  # [n h, c + 1]
        total = summed[:, -1:]  # every row's sum of weights (> 0, see softmax_numerators_)
        if self.hook_attention.active:
            alpha = weights.detach() / total.detach().view(-1).index_select(0, plan.row)
            self._emit_attention(plan.per_edge(alpha), ctx)  # [E, h]
        # the h E weights and the values are freed before the division and the projection
        # (autograd keeps what it needs): at 10^6 nodes, 4 heads and float64 they were 0.9 GiB
        # alive through both
        del scores, weights, xv, operand
        out = (summed[:, :-1] / total).view(n, h, -1)
        del summed, total
        if self.nonlocal_:
            return self._nonlocal_output(out, x, ctx)
        return self.out(out.view(n, h * hd))

    def _by_head(self, x: Tensor, ctx: GraphContext) -> bool:
        """Whether :meth:`_csr` runs head by head (:meth:`_csr_by_head`): on a graph of more
        than :data:`BY_HEAD_VALUES` values ``h E``, when autograd records nothing and no
        hook asks for the attention weights."""
        if self.heads == 1 or self.heads * ctx.src.numel() <= BY_HEAD_VALUES:
            return False
        if self.hook_attention.active:
            return False
        return not records(x, *self.parameters())

    def _csr_by_head(self, x: Tensor, ctx: GraphContext) -> Tensor:
        """:meth:`_csr` one head at a time, over the one-head plan (``E`` values): the same
        operations on each head's part, so the same output to rounding, with ``[E]`` and
        ``[n, hd + 1]`` temporaries where :meth:`_csr` holds ``[h E]`` and ``[n h, hd + 1]``
        ones, and a plan of ``E`` rows and columns in place of ``h E`` (at 10^6 nodes of degree
        10, 4 heads and float64: about 1 GB less at the forward's peak).  The plain operator
        also forms its queries and products a block of rows at a time
        (:data:`~oversmooth.nn.kernel.ROW_BLOCK`).  Without autograd only."""
        n, h, hd = x.size(0), self.heads, self.head_dim
        plan = ctx.plan(1)
        log_weight = ctx.plan_values("log_weight", 1)
        if self.nonlocal_:
            operand = F.pad(x, (0, 1), value=1.0)  # [X | 1], shared by the heads
            out = x.new_zeros(n, self.channels)
            factors = []
            out_weight = self.out.weight.view(-1, h, hd).transpose(0, 1)  # [h, d, hd]
            value = self._value_weight()  # [h, hd, d]
        else:
            out = x.new_empty(n, h, hd)
        for t in range(h):
            scores = self.scorer.csr_scores(x, self.value.weight, plan, head=t)  # [E]
            if log_weight is not None:
                scores.add_(log_weight.to(scores.dtype))
            weights = softmax_numerators_(scores, plan.row, plan.offsets)
            del scores  # the same array as weights: gone with it, before the next head's
            if not self.nonlocal_:
                values = self._values_and_ones(x, head=t).view(n, hd + 1)
                self._product_by_rows(weights, values, plan, out[:, t])
                del weights, values
                continue
            summed = sparse_matmul(weights, operand, plan.blocks)  # [n, d + 1]
            del weights
            px = summed[:, :-1].div_(summed[:, -1:])  # P_t X, [n, d]
            factor = self._head_factor(px, x, ctx)  # [1], or [B, 1] per graph
            factors.append(factor)
            if factor.dim() == 1:
                out.addmm_(px, (out_weight[t] @ value[t]).t() * factor)
            else:
                out.addmm_(px.mul_(per_node(factor, ctx)), (out_weight[t] @ value[t]).t())
            del summed, px
        if self.nonlocal_:
            if self.hook_factor.active:
                self.hook_factor.emit(torch.cat(factors, dim=-1))
            return out
        # W's projection written over the heads' outputs a block of rows at a time (the same
        # numbers to rounding): no second [n, d] array
        flat = out.view(n, h * hd)
        for first, stop, _, _ in plan.row_blocks(ROW_BLOCK):
            part = flat[first:stop]
            part.copy_(self.out(part))
        return flat

    @staticmethod
    def _product_by_rows(weights: Tensor, operand: Tensor, plan: CsrPlan, out: Tensor) -> None:
        """``P_t V_t X`` into ``out`` ``[n, hd]`` from the softmax numerators ``weights`` and
        the operand ``[V_t X | 1]``: one CSR product and division per block of
        :data:`~oversmooth.nn.kernel.ROW_BLOCK` rows (no ``[n, hd + 1]`` product whole)."""
        for first, stop, start, end in plan.row_blocks(ROW_BLOCK):
            layout = plan.blocks.rows(first, stop, start, end)
            summed = sparse_matmul(weights[start:end], operand, layout)
            torch.div(summed[:, :-1], summed[:, -1:], out=out[first:stop])

    def _head_factor(self, px: Tensor, x: Tensor, ctx: GraphContext) -> Tensor:
        """One head's nonlocal factor ``[1]`` (per graph of a batch: ``[B, 1]``) from its
        ``P_t X`` ``[n, d]`` (see :meth:`_nonlocal_factor`, which emits them)."""
        return self._sum_norm(head_energy(px.unsqueeze(1), x, ctx), x, ctx)

    def _sum_norm(self, factor: Tensor, x: Tensor, ctx: GraphContext) -> Tensor:
        """``factor`` (a mean over each graph's nodes) as the ``"sum"`` norm asks: times the
        graph's node count."""
        if self.nonlocal_norm != "sum":
            return factor
        if factor.dim() == 1:
            return factor * x.size(0)
        assert ctx.graph_sizes is not None
        return factor * ctx.graph_sizes.to(factor.dtype).unsqueeze(1)

    def _value_weight(self) -> Tensor:
        return self.value.weight.view(self.heads, self.head_dim, self.channels)  # [h, hd, d]

    def _values_and_ones(self, x: Tensor, head: int | None = None) -> Tensor:
        """``V X`` with a column of ones after each head's values: ``[n, h, hd + 1]``, by one
        projection whose weight has a zero row and whose bias a one per head; with ``head``,
        that head's only (``[n, 1, hd + 1]``)."""
        h, hd = self.heads, self.head_dim
        value = self._value_weight()
        if head is not None:
            value, h = value[head : head + 1], 1
        weight = F.pad(value, (0, 0, 0, 1))  # [h, hd + 1, d]
        bias = F.pad(x.new_zeros(h, hd), (0, 1), value=1.0)  # [h, hd + 1]
        return F.linear(x, weight.view(h * (hd + 1), -1), bias.view(-1)).view(-1, h, hd + 1)

    def _csr_uniform(self, x: Tensor, ctx: GraphContext) -> Tensor:
        """A uniform scorer (GCN) by the ``"csr"`` back-end: the operator's output ``[n, d]``.

        Every head attends with the same ``P`` (the neighbourhood mean), so
        ``(P X V_1 || ... || P X V_h) W = P X V W``: one product with the ``[n, n]``
        structure (``E`` values, not ``h E``) and one projection by ``W V`` (``d x d``,
        formed per forward; gradients reach ``V`` and ``W`` through it).  Nonlocal: every
        head's factor is the one Laplacian energy of ``P X``.
        """
        plan = ctx.plan(1)
        mean = ctx.plan_values("mean", 1)
        assert mean is not None
        mean = mean.to(x.dtype)
        if self.hook_attention.active:
            self._emit_attention(self.attention(x, ctx).detach(), ctx)  # [E, h]
        weight = self.out.weight @ self.value.weight  # x -> x V^T W^T in one
        if not self.nonlocal_:
            return sparse_matmul(mean, F.linear(x, weight), plan.blocks)
        px = sparse_matmul(mean, x.contiguous(), plan.blocks)  # P X, [n, d]
        factor = self._nonlocal_factor(px.unsqueeze(1), x, ctx, heads=self.heads)  # [1] / [B, 1]
        return F.linear(px, weight) * per_node(factor, ctx)

    def _nonlocal_factor(
        self, px: Tensor, x: Tensor, ctx: GraphContext, heads: int | None = None
    ) -> Tensor:
        """Every head's factor :math:`\\frac1n\\|P_h X - X\\|^2` (``"sum"``: without the
        ``1/n``) from ``px = P_h X`` ``[n, h, d]``: ``[h]``, or for a batch each graph's own
        over its own nodes, ``[B, h]`` (a graph's output does not depend on the others of its
        batch); emitted to ``hook_factor`` repeated to ``heads`` entries when given (heads
        sharing one ``P``)."""
        factor = self._sum_norm(head_energy(px, x, ctx), x, ctx)  # [h] or [B, h]
        if self.hook_factor.active:
            kept = factor.detach()
            if heads is not None:
                kept = kept.expand(*kept.shape[:-1], heads)
            self.hook_factor.emit(kept)
        return factor

    def _nonlocal_values(self, px: Tensor, x: Tensor, ctx: GraphContext) -> Tensor:
        """``(1/n)||P_h X - X||^2 * P_h X V_h`` for each head, from ``px = P_h X`` ``[n, h, d]``."""
        factor = self._nonlocal_factor(px, x, ctx)
        values = torch.einsum("nhd,hed->nhe", px, self._value_weight())  # [n, h, hd]
        return values * per_node(factor, ctx).unsqueeze(-1)

    def _nonlocal_output(self, px: Tensor, x: Tensor, ctx: GraphContext) -> Tensor:
        """The nonlocal operator's output ``[n, d]`` from ``px = P_h X`` ``[n, h, d]``, with
        the value and output projections folded: :math:`\\sum_h f_h (P_h X) V_h^\\top
        W_h^\\top` is one projection of ``[P_1 X | ... | P_h X]`` (``[n, h d]``, contiguous)
        by the stacked ``f_h W_h V_h`` (``W_h`` the columns of ``W`` that read head ``h``)."""
        n, h, hd = x.size(0), self.heads, self.head_dim
        factor = self._nonlocal_factor(px, x, ctx)
        out_weight = self.out.weight.view(-1, h, hd).transpose(0, 1)  # [h, d, hd]
        stacked = torch.bmm(out_weight, self._value_weight())
        if factor.dim() == 1:  # one factor per head: folded into the projection
            stacked = stacked * factor.view(h, 1, 1)
        else:  # per graph: on the rows of each graph
            px = px * per_node(factor, ctx).unsqueeze(-1)
        return F.linear(px.reshape(n, -1), stacked.transpose(0, 1).reshape(stacked.size(1), -1))

    def _global(self, x: Tensor, ctx: GraphContext) -> Tensor:
        """Scaled dot-product attention over all nodes of each graph: ``[n, h, hd]``."""
        n, h = x.size(0), self.heads
        scorer = self.scorer
        assert isinstance(scorer, SANScorer)  # global blocks always score by dot products
        q, k = scorer.queries_keys(x)
        if self.nonlocal_:
            vals = x.unsqueeze(1).expand(n, h, self.channels)  # attend with X itself: P_h X
        else:
            vals = self.value(x).view(n, h, self.head_dim)
        if ctx.batch is None:
            out = F.scaled_dot_product_attention(
                q.transpose(0, 1)[None],
                k.transpose(0, 1)[None],
                vals.transpose(0, 1)[None],
                scale=scorer.scale,
            )
            out = out[0].transpose(0, 1)  # [n, h, c]
        else:
            qd, mask = to_dense_batch(q.reshape(n, -1), ctx)
            kd, _ = to_dense_batch(k.reshape(n, -1), ctx)
            vd, _ = to_dense_batch(vals.reshape(n, -1), ctx)
            b, m = mask.shape
            split = lambda t: t.view(b, m, h, -1).transpose(1, 2)  # noqa: E731  [B, h, m, c]
            out = F.scaled_dot_product_attention(
                split(qd),
                split(kd),
                split(vd),
                attn_mask=mask[:, None, None, :],
                scale=scorer.scale,
            )
            # back in the order of the input's rows (not grouped by graph: an edge-set batch)
            assert ctx.dense_index is not None
            out = out.transpose(1, 2).reshape(b * m, h, -1).index_select(0, ctx.dense_index)
        if self.nonlocal_:
            return self._nonlocal_values(out, x, ctx)
        return out

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any) -> None:
        # checkpoints written before the scorers (oversmooth <= 5200c49) keep the scores'
        # parameters on the operator itself: ``mp.query.weight`` is ``mp.scorer.query.weight``
        for name in self.scorer.state_dict():
            old, new = prefix + name, prefix + "scorer." + name
            if old in state_dict and new not in state_dict:
                state_dict[new] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def extra_repr(self) -> str:
        kind = "global" if self.global_attention else self.conv
        return f"{self.channels}, heads={self.heads}, conv={kind!r}, nonlocal={self.nonlocal_}"
