"""Per-convolution scorers: the scores :math:`e^h_{ij}` of multi-head attention.

A scorer holds the parameters of one convolution's scores and nothing else; the one
aggregation core, :class:`~oversmooth.nn.conv.MultiHeadMessagePassing`, owns the value and
output projections ``V`` and ``W``, turns the scores into
:math:`P_h = \\operatorname{softmax}_{j \\in N(i) \\cup \\{i\\}} e^h_{ij}` and aggregates.  Each
scorer computes its scores for both back-ends of the core:

- ``edge``: one score per edge of the list ``src -> dst``: ``[E, h]``;
- ``csr``: the scores as the values of a :class:`~oversmooth.nn.kernel.CsrPlan`'s
  block-diagonal structure (row ``i * h + t``, column ``j * h + t``): ``[h E]``; or, for one
  head ``t`` (``head=t``), as the values of the one-head plan: ``[E]``.

========  ====================  ===========================================================
conv      scorer                :math:`e^h_{ij}`
========  ====================  ===========================================================
``san``   :class:`SANScorer`    :math:`(Q_h X_i) \\cdot (K_h X_j) / \\sqrt{d_k}`
``gat``   :class:`GATScorer`    :math:`\\mathrm{LeakyReLU}_{0.2}(a_{h,dst} \\cdot V_h X_i +
                                a_{h,src} \\cdot V_h X_j)`
``gcn``   :class:`GCNScorer`    :math:`1`: :math:`P` is the (weighted) neighbourhood mean
``esa``   :class:`SANScorer`    ``san`` scores between edges sharing a node (on the line
                                graph, :mod:`oversmooth.nn.edgeset`)
========  ====================  ===========================================================

Global attention (the ``S`` blocks) always scores by :class:`SANScorer`'s scaled dot product.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oversmooth.nn.kernel import ROW_BLOCK, CsrPlan, records, sampled_dot
from oversmooth.registry import CONVS

__all__ = ["GATScorer", "GCNScorer", "SANScorer", "SCORERS", "Scorer", "make_scorer"]


class Scorer(nn.Module):
    """The scores of one convolution's multi-head attention (see the module docstring).

    Args:
        channels: feature size ``d``.
        heads: number of heads ``h`` (``d`` divisible by ``h``; ``head_dim = d / h``).

    Class attributes tell the core what the scores need and allow:

    - ``reads_values``: the scores read ``V X`` (GAT): the core hands over ``V X`` on the edge
      back-end and ``V``'s weight on the csr back-end.
    - ``uniform``: the scores are one constant, so every head attends with the same
      parameter-free :math:`P`, the neighbourhood mean (GCN); the core then uses the graph's
      precomputed mean (:meth:`~oversmooth.nn.conv.GraphContext.mean`) in place of a softmax.
    """

    reads_values: ClassVar[bool] = False
    uniform: ClassVar[bool] = False

    def __init__(self, channels: int, heads: int) -> None:
        super().__init__()
        self.channels, self.heads, self.head_dim = channels, heads, channels // heads

    def projections(self) -> list[nn.Linear]:
        """The scores' linear projections: Xavier-initialised by the core, and checked by it to
        be bare ``nn.Linear`` modules before the csr back-end folds weights."""
        return []

    def edge_scores(self, x: Tensor, values: Tensor | None, src: Tensor, dst: Tensor) -> Tensor:
        """Scores ``[E, h]`` of the edges ``src -> dst`` (``[E]`` each) from the states ``x``
        ``[n, d]`` (and ``values = V X`` ``[n, h, head_dim]`` when :attr:`reads_values`)."""
        raise NotImplementedError

    def csr_scores(
        self, x: Tensor, value_weight: Tensor, plan: CsrPlan, head: int | None = None
    ) -> Tensor:
        """Scores ``[h E]`` in the order of ``plan``'s values (``value_weight``: ``V``'s
        ``[d, d]`` weight, read when :attr:`reads_values`); with ``head``, that head's
        scores ``[E]`` in the order of the one-head ``plan``'s values (the same numbers)."""
        raise NotImplementedError


class SANScorer(Scorer):
    """Scaled dot-product scores :math:`(Q_h X_i) \\cdot (K_h X_j) / \\sqrt{d_k}`.

    Args:
        score_scale: divide by :math:`\\sqrt{d_k}` (default ``True``; ``False`` is an
            ablation of this unstated choice).
    """

    def __init__(self, channels: int, heads: int, *, score_scale: bool = True) -> None:
        super().__init__(channels, heads)
        self.score_scale = score_scale
        self.query = nn.Linear(channels, channels, bias=False)
        self.key = nn.Linear(channels, channels, bias=False)

    @property
    def scale(self) -> float:
        """The factor on the dot products: ``1 / sqrt(d_k)``, or 1 without score scaling."""
        return 1.0 / math.sqrt(self.head_dim) if self.score_scale else 1.0

    def projections(self) -> list[nn.Linear]:
        return [self.query, self.key]

    def queries_keys(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``Q X`` and ``K X`` as ``[n, h, head_dim]`` each."""
        n, h, hd = x.size(0), self.heads, self.head_dim
        return self.query(x).view(n, h, hd), self.key(x).view(n, h, hd)

    def edge_scores(self, x: Tensor, values: Tensor | None, src: Tensor, dst: Tensor) -> Tensor:
        q, k = self.queries_keys(x)
        return (q[dst] * k[src]).sum(-1) * self.scale  # [E, h]

    def csr_scores(
        self, x: Tensor, value_weight: Tensor, plan: CsrPlan, head: int | None = None
    ) -> Tensor:
        n, h, hd = x.size(0), self.heads, self.head_dim
        if head is not None:  # K_t X [n, hd]; Q_t X a block of rows at a time
            rows = slice(head * hd, (head + 1) * hd)
            wq, wk = self.query.weight[rows], self.key.weight[rows]
            k = F.linear(x, wk)
            if records(x, wq, wk):  # differentiable: whole
                return sampled_dot(F.linear(x, wq), k, plan.blocks, self.scale)
            scores = x.new_empty(plan.blocks.nnz)
            for first, stop, start, end in plan.row_blocks(ROW_BLOCK):
                layout = plan.blocks.rows(first, stop, start, end)
                layout.sampled(F.linear(x[first:stop], wq), k, self.scale, out=scores[start:end])
            return scores
        q, k = self.queries_keys(x)  # freed on return when autograd does not keep them
        return sampled_dot(q.view(n * h, -1), k.view(n * h, -1), plan.blocks, self.scale)

    def extra_repr(self) -> str:
        return f"heads={self.heads}, score_scale={self.score_scale}"


class GATScorer(Scorer):
    """GAT's scores :math:`\\mathrm{LeakyReLU}_{0.2}(a_{h,dst} \\cdot V_h X_i + a_{h,src} \\cdot
    V_h X_j)`, with ``a`` two ``[h, head_dim]`` parameters (Glorot-uniform) and ``V`` the core's
    value projection."""

    reads_values = True

    def __init__(self, channels: int, heads: int) -> None:
        super().__init__(channels, heads)
        self.att_dst = nn.Parameter(torch.empty(heads, self.head_dim))
        self.att_src = nn.Parameter(torch.empty(heads, self.head_dim))
        bound = math.sqrt(6.0 / (1 + self.head_dim))  # glorot over [1, head_dim]
        nn.init.uniform_(self.att_dst, -bound, bound)
        nn.init.uniform_(self.att_src, -bound, bound)

    def edge_scores(self, x: Tensor, values: Tensor | None, src: Tensor, dst: Tensor) -> Tensor:
        assert values is not None  # reads_values: the core hands V X over
        a_dst = (values * self.att_dst).sum(-1)  # [n, h]
        a_src = (values * self.att_src).sum(-1)
        return F.leaky_relu(a_dst[dst] + a_src[src], 0.2)

    def csr_scores(
        self, x: Tensor, value_weight: Tensor, plan: CsrPlan, head: int | None = None
    ) -> Tensor:
        # a_t . V_t x = (V_t^T a_t) . x: each side is one [d, h] projection of x
        n, h = x.size(0), self.heads
        value = value_weight.view(h, self.head_dim, -1)  # [h, hd, d]
        att_dst: Tensor = self.att_dst
        att_src: Tensor = self.att_src
        if head is not None:  # one head: [d, 1] projections, [n] per side
            value = value[head : head + 1]
            att_dst, att_src = att_dst[head : head + 1], att_src[head : head + 1]
            h = 1
        a_dst = F.linear(x, (value * att_dst.unsqueeze(-1)).sum(1)).view(n * h)
        a_src = F.linear(x, (value * att_src.unsqueeze(-1)).sum(1)).view(n * h)
        scores = a_dst.index_select(0, plan.row)
        return F.leaky_relu(scores.add_(a_src.index_select(0, plan.blocks.col)), 0.2)

    def extra_repr(self) -> str:
        return f"heads={self.heads}"


class GCNScorer(Scorer):
    """GCN's constant score :math:`e_{ij} = 1`: every head's :math:`P` is the neighbourhood
    mean with self loop (weighted: :math:`w_{ij} / \\sum_k w_{ik}`).  No parameter.

    The scores are given for completeness (zeros: a softmax of them is the mean); the core
    reads the mean the graph context precomputes instead (:attr:`Scorer.uniform`).
    """

    uniform = True

    def edge_scores(self, x: Tensor, values: Tensor | None, src: Tensor, dst: Tensor) -> Tensor:
        return x.new_zeros(src.numel(), self.heads)

    def csr_scores(
        self, x: Tensor, value_weight: Tensor, plan: CsrPlan, head: int | None = None
    ) -> Tensor:
        return x.new_zeros(plan.blocks.nnz)

    def extra_repr(self) -> str:
        return f"heads={self.heads}"


#: The scorer class of each convolution that scores by itself (``esa`` borrows ``san``'s:
#: ``CONVS["esa"].scores``).
SCORERS: dict[str, type[Scorer]] = {"san": SANScorer, "gat": GATScorer, "gcn": GCNScorer}


def make_scorer(conv: str, channels: int, heads: int, *, score_scale: bool = True) -> Scorer:
    """The scorer of the convolution ``conv`` (any name of :data:`~oversmooth.registry.CONVS`;
    ``score_scale`` reaches dot-product scores only)."""
    name = CONVS[CONVS.resolve(conv)].scores or conv
    if SCORERS[name] is SANScorer:
        return SANScorer(channels, heads, score_scale=score_scale)
    return SCORERS[name](channels, heads)
