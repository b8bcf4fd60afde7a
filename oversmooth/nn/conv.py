"""Multi-head message passing of the seed paper (Guan & He 2025, §3.1 and §4.1).

.. math::

    \\mathrm{MP}(X) = (P_1 X V_1 \\| \\dots \\| P_h X V_h)\\, W, \\qquad
    (P_h)_{ij} = \\operatorname{softmax}_{j \\in N(i) \\cup \\{i\\}} e^h_{ij}

with scores ``e`` set by the convolution type:

- ``gcn``: :math:`e_{ij} = 1` (the mean over the neighbourhood with self loop),
- ``gat``: :math:`e_{ij} = \\mathrm{LeakyReLU}(a^\\top [V X_i \\| V X_j])` (slope 0.2),
- ``san``: :math:`e_{ij} = (Q X_i) \\cdot (K X_j) / \\sqrt{d_k}` (scaled dot product).

Nonlocal message passing scales every head by its own Laplacian energy,
:math:`\\frac1n \\|P_h X - X\\|_F^2`; it adds no parameter and ``O(n d)`` work.
``global_attention=True`` (the ``S`` blocks of ESA-style interleaving) replaces
the neighbourhood by all nodes of the graph and always uses scaled dot-product
scores, through :func:`torch.nn.functional.scaled_dot_product_attention`.

Everything is sparse over the edge list: ``O(|E| h + n d)`` memory per block, no ``n x n``
attention matrix for neighbourhood attention.  The kernel (:class:`GraphContext` keeps the
edges sorted by target once per graph, CSR order) runs every head at once on one sparse
matrix of ``n h`` rows (the heads' graphs interleaved): scores by a sampled dense-dense
product (:func:`torch.sparse.sampled_addmm`, SAN) or two ``[h E]`` gathers (GAT), an
un-normalised softmax ``exp(e - max)`` with the per-row maximum taken by a scatter, then one
sparse-dense product ``exp(e) @ [V | 1]`` whose last column is the softmax denominator.  No
``[E, h, d]`` tensor is materialised, and nothing in a block's forward synchronises with the
host.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oversmooth.registry import CONVS  # re-exported: the one registry of conv names


def resolve_conv(conv: str) -> str:
    return CONVS.resolve(conv)


@dataclass
class GraphContext:
    r"""Per-forward graph data shared by every block (built once per forward pass).

    ``src``/``dst`` is the edge list with every self loop present exactly once
    (the neighbourhood ``N(i) ∪ {i}``), ``inv_count`` is ``1 / |N(i) ∪ {i}|``.

    Edge weights ``w_ij >= 0`` (optional; self loops get weight 1, a user's own self
    loops are replaced by it) enter every convolution through one mechanism: the
    attention becomes :math:`\alpha_{ij} \propto w_{ij} \exp(e_{ij})`, i.e. ``log w`` is
    added to the scores before the softmax (``log_weight``).  With GCN's constant score
    that is the weighted mean :math:`w_{ij} / \sum_{k \in N(i) \cup \{i\}} w_{ik}`
    (``gcn_weight``, precomputed).  Global-attention blocks ignore edge weights.

    The kernel reads the same edges sorted by target (then source), CSR order:
    ``rowptr`` ``[n + 1]``, ``csr_src``/``csr_dst``, ``csr_log_weight`` and ``csr_mean``
    (GCN's weights, the mean or the weighted mean), ``csr_index`` (where each edge of
    ``src``/``dst`` went).  Repeated edges ``j -> i`` are merged into one of weight
    :math:`\sum w` (``csr_share`` splits its attention back), which is exact:
    :math:`\sum_c w_c e^{s} = (\sum_c w_c) e^{s}`.  :meth:`build` fills them once per graph
    (one host sync, to count the distinct edges).
    """

    src: Tensor  # [num_edges + num_nodes]
    dst: Tensor  # [num_edges + num_nodes]
    inv_count: Tensor  # [num_nodes]
    num_nodes: int
    batch: Tensor | None = None
    num_graphs: int | None = None
    log_weight: Tensor | None = None  # [num_edges + num_nodes] log w (weighted graphs only)
    gcn_weight: Tensor | None = None  # [num_edges + num_nodes] w_ij / sum_k w_ik
    rowptr: Tensor | None = None  # [num_nodes + 1] CSR row pointers over targets
    csr_src: Tensor | None = None  # [E] sources, sorted by (target, source)
    csr_dst: Tensor | None = None  # [E] targets, sorted
    csr_log_weight: Tensor | None = None  # [E'] log w in CSR order (weighted/multi-edges only)
    csr_mean: Tensor | None = None  # [E'] GCN's weights in CSR order
    csr_index: Tensor | None = None  # [E] position in the CSR order of each edge of src/dst
    csr_share: Tensor | None = None  # [E] w_e / (sum of w over its copies); None: no copies
    _heads: dict[int, _HeadLayout] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def build(
        cls,
        edge_index: Tensor,
        num_nodes: int,
        batch: Tensor | None = None,
        dtype: torch.dtype = torch.float32,
        edge_weight: Tensor | None = None,
    ) -> "GraphContext":
        keep = edge_index[0] != edge_index[1]
        loop = torch.arange(num_nodes, device=edge_index.device)
        src = torch.cat([edge_index[0][keep], loop])
        dst = torch.cat([edge_index[1][keep], loop])
        count = torch.zeros(num_nodes, dtype=dtype, device=edge_index.device).index_add_(
            0, dst, torch.ones_like(dst, dtype=dtype)
        )
        num_graphs = None
        if batch is not None:
            num_graphs = int(batch.max()) + 1 if batch.numel() else 0
        log_weight = gcn_weight = None
        if edge_weight is not None:
            w = edge_weight.to(device=src.device, dtype=dtype)[keep]
            w = torch.cat([w, w.new_ones(num_nodes)])  # self loops: weight 1
            total = torch.zeros(num_nodes, dtype=dtype, device=src.device).index_add_(0, dst, w)
            gcn_weight, log_weight = w / total[dst], w.log()  # total >= 1 (self loop)
        inv_count = 1.0 / count
        mean = inv_count[dst] if gcn_weight is None else gcn_weight
        csr = _sorted_edges(src, dst, num_nodes, log_weight, mean)
        return cls(src, dst, inv_count, num_nodes, batch, num_graphs, log_weight, gcn_weight, *csr)

    def head_layout(self, heads: int) -> "_HeadLayout":
        """The block-diagonal layout of ``heads`` copies of the graph (cached per ``heads``)."""
        layout = self._heads.get(heads)
        if layout is None:
            if self.rowptr is None or self.csr_src is None:
                raise ValueError(
                    "ctx: expected a GraphContext made by GraphContext.build (it has no CSR "
                    "order); build it with GraphContext.build(edge_index, num_nodes)"
                )
            layout = _HeadLayout.build(self.rowptr, self.csr_src, heads)
            self._heads[heads] = layout
        return layout


def _sorted_edges(
    src: Tensor, dst: Tensor, num_nodes: int, log_weight: Tensor | None, mean: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor, Tensor, Tensor | None]:
    """The CSR fields of :class:`GraphContext` (in its field order) from its edge list."""
    key = dst * max(num_nodes, 1) + src
    order = torch.argsort(key, stable=True)
    unique, inverse, copies = torch.unique_consecutive(
        key[order], return_inverse=True, return_counts=True
    )
    rowptr = torch.zeros(num_nodes + 1, dtype=torch.long, device=src.device)
    torch.cumsum(
        torch.bincount(unique // max(num_nodes, 1), minlength=num_nodes), 0, out=rowptr[1:]
    )
    index = torch.empty_like(order).index_copy_(0, order, inverse)  # edge -> CSR position
    if unique.numel() == key.numel():  # no repeated edge: a permutation
        csr_log = None if log_weight is None else log_weight[order]
        return rowptr, src[order], dst[order], csr_log, mean[order], index, None
    w = mean.new_ones(key.numel()) if log_weight is None else log_weight.exp()
    total = w.new_zeros(unique.numel()).index_add_(0, index, w)  # sum of w over the copies
    merged_mean = mean.new_zeros(unique.numel()).index_add_(0, index, mean)
    csr_src, csr_dst = unique % max(num_nodes, 1), unique // max(num_nodes, 1)
    return rowptr, csr_src, csr_dst, total.log(), merged_mean, index, w / total[index]


_CSR_WARNING_SEEN = False


def _csr_matrix(rowptr: Tensor, col: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    global _CSR_WARNING_SEEN
    if _CSR_WARNING_SEEN:
        return torch.sparse_csr_tensor(rowptr, col, values, shape, check_invariants=False)
    with warnings.catch_warnings():  # PyTorch warns once per process that CSR is "beta"
        warnings.simplefilter("ignore", UserWarning)
        _CSR_WARNING_SEEN = True
        return torch.sparse_csr_tensor(rowptr, col, values, shape, check_invariants=False)


@dataclass
class _HeadLayout:
    """``h`` copies of the CSR graph, one per head, interleaved in an ``[n h, n h]`` sparse matrix.

    Row ``i h + c`` is node ``i`` in head ``c``; its nonzeros are the CSR edges ``j -> i`` at
    columns ``j h + c``, so ``[n, h, c]`` tensors enter and leave as ``[n h, c]`` views (no
    transpose).  ``edge`` names each nonzero's CSR edge, ``edge_head`` its place in ``[E, h]``.
    """

    heads: int
    num_nodes: int
    rowptr: Tensor  # [n h + 1]
    row: Tensor  # [h E] i h + c
    col: Tensor  # [h E] j h + c
    shared_col: Tensor  # [h E] j: column into one [n, d] operand shared by every head
    edge: Tensor  # [h E] CSR edge of each nonzero
    edge_head: Tensor  # [h E] edge h + c

    @classmethod
    def build(cls, rowptr: Tensor, src: Tensor, heads: int) -> "_HeadLayout":
        n, e, h = rowptr.numel() - 1, src.numel(), heads
        degree = rowptr.diff()  # [n], >= 1: every node has its self loop
        head = torch.arange(h, device=src.device)
        start = (h * rowptr[:-1, None] + head * degree[:, None]).reshape(-1)  # [n h]
        row = torch.repeat_interleave(
            torch.arange(n * h, device=src.device), degree.repeat_interleave(h), output_size=h * e
        )
        c = row % h
        edge = rowptr[row // h] + torch.arange(h * e, device=src.device) - start[row]
        j = src[edge]
        return cls(
            h,
            n,
            torch.cat([start, start.new_full((1,), h * e)]),
            row,
            j * h + c,
            j,
            edge,
            edge * h + c,
        )

    def matrix(self, values: Tensor, shared: bool) -> Tensor:
        """The ``[n h, n h]`` (``shared``: ``[n h, n]``) sparse CSR matrix with ``values``."""
        n, h = self.num_nodes, self.heads
        col = self.shared_col if shared else self.col
        shape = (n * h, n if shared else n * h)
        return _csr_matrix(self.rowptr, col, values, shape)

    def per_edge(self, values: Tensor) -> Tensor:
        """Nonzero values ``[h E]`` as ``[E, h]`` over the CSR edges."""
        out = torch.empty_like(values).index_copy_(0, self.edge_head, values)
        return out.view(-1, self.heads)


def _softmax_propagate(
    scores: Tensor, layout: _HeadLayout, dense: Tensor, shared: bool
) -> tuple[Tensor, Tensor]:
    """Softmax over each row of the interleaved scores, times ``dense``.

    ``scores`` ``[h E]`` (the layout's nonzero order); ``dense`` ``[n h, c]`` (or ``[n, c]``, the
    same operand for every head, when ``shared``).  Returns ``(out, exp)``: ``out`` ``[n h, c]``
    is ``softmax(scores) @ dense`` per head, ``exp`` the un-normalised weights.  The row maximum
    is subtracted for range and left out of autograd (softmax does not depend on it).
    """
    weight = _exp_scores(scores, layout)
    ones = dense.new_ones(dense.size(0), 1)
    both = layout.matrix(weight, shared) @ torch.cat([dense, ones], dim=1)  # [n h, c + 1]
    return both[:, :-1] / both[:, -1:], weight


def _exp_scores(scores: Tensor, layout: _HeadLayout) -> Tensor:
    """``exp(e - max)`` per row of the layout (scatter, not segment_reduce: that one checks its
    lengths on the host)."""
    peak = scores.new_full((layout.rowptr.numel() - 1,), float("-inf"))
    peak = peak.scatter_reduce(0, layout.row, scores.detach(), "amax")  # [n h]
    return (scores - peak.index_select(0, layout.row)).exp()  # [h E], the row max gives 1


def _normalise(weight: Tensor, layout: _HeadLayout) -> Tensor:
    """Each row of the layout's ``weight`` ``[h E]`` divided by its sum."""
    total = weight.new_zeros(layout.rowptr.numel() - 1).index_add_(0, layout.row, weight)
    return weight / total.index_select(0, layout.row)


def edge_softmax(scores: Tensor, index: Tensor, num_nodes: int) -> Tensor:
    """Softmax of ``scores`` ``[E, h]`` over the edges that share a target ``index``."""
    expanded = index.view(-1, *([1] * (scores.dim() - 1))).expand_as(scores)
    peak = scores.new_full((num_nodes,) + scores.shape[1:], float("-inf"))
    peak = peak.scatter_reduce(0, expanded, scores.detach(), "amax")  # softmax ignores the shift
    weight = (scores - peak.index_select(0, index)).exp()
    return weight / aggregate(weight, index, num_nodes).index_select(0, index)


def aggregate(messages: Tensor, index: Tensor, num_nodes: int) -> Tensor:
    """Sum ``messages`` ``[E, ...]`` into their target rows: ``[num_nodes, ...]``."""
    out = messages.new_zeros((num_nodes,) + messages.shape[1:])
    return out.index_add_(0, index, messages)


def propagate_heads(x: Tensor, alpha: Tensor, src: Tensor, dst: Tensor) -> Tensor:
    """``P_h X`` for every head: ``x`` ``[n, d]``, ``alpha`` ``[E, h]`` -> ``[n, h, d]``."""
    return aggregate(x.index_select(0, src).unsqueeze(1) * alpha.unsqueeze(-1), dst, x.size(0))


def head_energy(px: Tensor, x: Tensor) -> Tensor:
    """Each head's Laplacian energy :math:`\\frac1n \\|P_h X - X\\|_F^2` from ``px = P_h X``:
    ``[h]``."""
    return (px - x.unsqueeze(1)).pow(2).sum(dim=(0, 2)) / x.size(0)


class MultiHeadMessagePassing(nn.Module):
    """One multi-head message-passing operator (see the module docstring).

    Args:
        channels: feature size ``d`` (input and output).
        heads: number of heads ``h``; ``d`` must be divisible by ``h``.
        conv: ``"san"``, ``"gcn"`` or ``"gat"``.
        nonlocal_: scale each head by :math:`\\frac1n\\|P_h X - X\\|^2`.
        global_attention: attend over all nodes of the graph (an ``S`` block).

    Set ``keep_attention = True`` to keep the last attention weights
    (``last_attention``, ``[E, h]`` over ``last_edges``) for probes; neighbourhood
    attention only.
    """

    def __init__(
        self,
        channels: int,
        heads: int,
        conv: str = "san",
        *,
        nonlocal_: bool = False,
        global_attention: bool = False,
    ) -> None:
        super().__init__()
        if channels % heads:
            raise ValueError(f"hidden: expected a multiple of heads={heads}, received {channels}")
        self.channels, self.heads, self.head_dim = channels, heads, channels // heads
        self.conv = resolve_conv(conv)
        self.nonlocal_ = nonlocal_
        self.global_attention = global_attention
        self.value = nn.Linear(channels, channels, bias=False)  # V_1 .. V_h stacked
        self.out = nn.Linear(channels, channels, bias=False)  # W
        if global_attention or conv == "san":
            self.query = nn.Linear(channels, channels, bias=False)
            self.key = nn.Linear(channels, channels, bias=False)
        if conv == "gat" and not global_attention:
            self.att_dst = nn.Parameter(torch.empty(heads, self.head_dim))
            self.att_src = nn.Parameter(torch.empty(heads, self.head_dim))
            bound = math.sqrt(6.0 / (1 + self.head_dim))  # glorot over [1, head_dim]
            nn.init.uniform_(self.att_dst, -bound, bound)
            nn.init.uniform_(self.att_src, -bound, bound)
        # Xavier-uniform projections, as torch.nn.MultiheadAttention and PyG's attention
        # convolutions initialise theirs (PyTorch's Linear default would shrink the
        # message-passing branch by ~1/3 in variance per projection).
        for lin in (self.value, self.out, getattr(self, "query", None), getattr(self, "key", None)):
            if lin is not None:
                nn.init.xavier_uniform_(lin.weight)
        self.keep_attention = False
        self.last_attention: Tensor | None = None  # [E, h]
        self.last_edges: tuple[Tensor, Tensor] | None = None  # (src, dst) of last_attention
        self.last_energy: Tensor | None = None  # [h] nonlocal factors of the last forward

    # -- attention weights P_h -------------------------------------------------------------
    def attention(self, x: Tensor, ctx: GraphContext, values: Tensor | None = None) -> Tensor:
        """``[E, h]`` attention weights over ``ctx``'s edges (with self loops), in the order of
        ``ctx.src``/``ctx.dst``.

        ``values`` (``V X`` as ``[n, h, hd]``) saves GAT recomputing it when the caller has it.
        """
        h = self.heads
        if self.conv == "gcn":
            mean = ctx.inv_count[ctx.dst] if ctx.gcn_weight is None else ctx.gcn_weight
            return mean.to(x.dtype).unsqueeze(1).expand(-1, h)
        layout = ctx.head_layout(h)
        weight = self._scores(x, ctx, layout, values)
        alpha = layout.per_edge(_normalise(_exp_scores(weight, layout), layout))  # [E, h]
        assert ctx.csr_index is not None  # build fills it with the layout's fields
        alpha = alpha.index_select(0, ctx.csr_index)  # [E, h] in the order of src/dst
        return alpha if ctx.csr_share is None else alpha * ctx.csr_share.to(alpha.dtype)[:, None]

    def _scores(
        self, x: Tensor, ctx: GraphContext, layout: _HeadLayout, values: Tensor | None
    ) -> Tensor:
        """Scores ``e`` of SAN or GAT over the layout's nonzeros: ``[h E]``."""
        n, h, hd = x.size(0), self.heads, self.head_dim
        if self.conv == "san":
            q = self.query(x).view(n * h, hd)
            k = self.key(x).view(n * h, hd)
            pattern = layout.matrix(q.new_zeros(layout.col.numel()), shared=False)
            dots = torch.sparse.sampled_addmm(pattern, q, k.t(), beta=0.0).values()
            scores = dots / math.sqrt(hd)
        else:  # gat
            v = self.value(x).view(n, h, hd) if values is None else values
            at_dst = (v * self.att_dst).sum(-1).view(-1)  # [n h]
            at_src = (v * self.att_src).sum(-1).view(-1)
            scores = F.leaky_relu(
                at_dst.index_select(0, layout.row) + at_src.index_select(0, layout.col), 0.2
            )
        if ctx.csr_log_weight is not None:  # alpha ~ w exp(e)
            scores = scores + ctx.csr_log_weight.to(scores.dtype).index_select(0, layout.edge)
        return scores

    def _value_weight(self) -> Tensor:
        return self.value.weight.view(self.heads, self.head_dim, self.channels)  # [h, hd, d]

    def forward(self, x: Tensor, ctx: GraphContext) -> Tensor:
        n, h, hd = x.size(0), self.heads, self.head_dim
        if self.global_attention:
            heads_out = self._global(x, ctx)  # [n, h, hd]
        else:
            heads_out = self._neighbourhood(x, ctx)  # [n, h, hd]
        return self.out(heads_out.reshape(n, h * hd))

    def _neighbourhood(self, x: Tensor, ctx: GraphContext) -> Tensor:
        """``P_h X V_h`` (nonlocal: scaled by each head's energy) over the graph: ``[n, h, hd]``."""
        n, h, hd = x.size(0), self.heads, self.head_dim
        # V X is needed by the plain path and by GAT's scores: computed once
        xv = self.value(x).view(n, h, hd) if (self.conv == "gat" or not self.nonlocal_) else None
        if self.conv == "gcn":  # one propagation matrix for every head
            assert ctx.rowptr is not None and ctx.csr_src is not None and ctx.csr_mean is not None
            mean = ctx.csr_mean.to(x.dtype)
            p = _csr_matrix(ctx.rowptr, ctx.csr_src, mean, (n, n))
            if self.keep_attention:
                self._keep(mean.unsqueeze(1).expand(-1, h), ctx)
            if self.nonlocal_:
                return self._nonlocal_values((p @ x).unsqueeze(1).expand(n, h, x.size(1)), x)
            assert xv is not None
            return (p @ xv.reshape(n, h * hd)).view(n, h, hd)
        layout = ctx.head_layout(h)
        scores = self._scores(x, ctx, layout, xv)  # [h E]
        if self.nonlocal_:  # P_h X: every head reads the same X
            px, weight = _softmax_propagate(scores, layout, x, shared=True)  # [n h, d]
            heads_out = self._nonlocal_values(px.view(n, h, -1), x)
        else:
            assert xv is not None  # computed above for the plain path
            out, weight = _softmax_propagate(scores, layout, xv.view(n * h, hd), shared=False)
            heads_out = out.view(n, h, hd)
        if self.keep_attention:
            self._keep(layout.per_edge(_normalise(weight.detach(), layout)), ctx)
        return heads_out

    def _keep(self, alpha: Tensor, ctx: GraphContext) -> None:
        assert ctx.csr_src is not None and ctx.csr_dst is not None
        self.last_attention = alpha.detach()  # [E, h] over the CSR edges
        self.last_edges = (ctx.csr_src, ctx.csr_dst)

    def _nonlocal_values(self, px: Tensor, x: Tensor) -> Tensor:
        """``(1/n)||P_h X - X||^2 * P_h X V_h`` for each head, from ``px = P_h X`` ``[n, h, d]``."""
        factor = head_energy(px, x)  # [h]
        if self.keep_attention:
            self.last_energy = factor.detach()
        values = torch.einsum("nhd,hed->nhe", px, self._value_weight())  # [n, h, hd]
        return values * factor.view(1, -1, 1)

    def _global(self, x: Tensor, ctx: GraphContext) -> Tensor:
        """Scaled dot-product attention over all nodes of each graph: ``[n, h, hd]``."""
        n, h, hd = x.size(0), self.heads, self.head_dim
        q = self.query(x).view(n, h, hd)
        k = self.key(x).view(n, h, hd)
        if self.nonlocal_:
            vals = x.unsqueeze(1).expand(n, h, self.channels)  # attend with X itself: P_h X
        else:
            vals = self.value(x).view(n, h, hd)
        if ctx.batch is None:
            out = F.scaled_dot_product_attention(
                q.transpose(0, 1)[None], k.transpose(0, 1)[None], vals.transpose(0, 1)[None]
            )
            out = out[0].transpose(0, 1)  # [n, h, c]
        else:
            from torch_geometric.utils import to_dense_batch

            qd, mask = to_dense_batch(q.reshape(n, -1), ctx.batch, batch_size=ctx.num_graphs)
            kd, _ = to_dense_batch(k.reshape(n, -1), ctx.batch, batch_size=ctx.num_graphs)
            vd, _ = to_dense_batch(vals.reshape(n, -1), ctx.batch, batch_size=ctx.num_graphs)
            b, m = mask.shape
            split = lambda t: t.view(b, m, h, -1).transpose(1, 2)  # noqa: E731  [B, h, m, c]
            out = F.scaled_dot_product_attention(
                split(qd), split(kd), split(vd), attn_mask=mask[:, None, None, :]
            )
            out = out.transpose(1, 2)[mask]  # [n, h, c]
        if self.nonlocal_:
            return self._nonlocal_values(out, x)
        return out

    def extra_repr(self) -> str:
        kind = "global" if self.global_attention else self.conv
        return f"{self.channels}, heads={self.heads}, conv={kind!r}, nonlocal={self.nonlocal_}"
