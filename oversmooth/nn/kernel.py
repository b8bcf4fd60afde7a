"""The ``"csr"`` message-passing kernel: target-sorted (CSR) edges, sparse primitives, and a
sparse backward.

Every head's attention :math:`P_h` is one block of a block-diagonal sparse matrix laid out
node-major: row ``i * h + t`` is node ``i``, head ``t``; column ``j * h + t`` is node ``j``,
head ``t``.  ``V X`` as ``[n, h, hd]`` is then the dense ``[n h, hd]`` matrix it multiplies
and the product is ``[n, h, hd]`` again, with no transpose.  The nonlocal variant's
``P_h X`` uses the rectangular ``[n h, n]`` matrix with the same rows.  Per block:

- scores ``<q_i, k_j>`` by :func:`torch.sparse.sampled_addmm` (no ``[E, h, hd]`` gather),
- softmax over each row's contiguous run of values (max-subtracted),
- aggregation by a CSR ``spmm`` (:func:`torch.sparse.mm`).

The two sparse products are :class:`torch.autograd.Function` s whose backward is sparse too:
for ``Y = A B`` with ``A``'s values ``a``, ``dB = A^T dY`` (a CSR ``spmm`` over the transposed
structure, built once) and ``da_e = <dY_row(e), B_col(e)>`` (a sampled product); for the
scores ``s_e = c <P_row(e), Q_col(e)>``, ``dP = c G Q`` and ``dQ = c G^T P`` with ``G`` the
sparse matrix of score gradients.  Nothing ``n x n`` is formed, forward or backward
(autograd's own backward of a sparse product would form a dense gradient of ``A``).

The structures (:class:`CsrPlan`) depend on the graph and the head count only; a
:class:`~oversmooth.nn.conv.GraphContext` builds them on the first block that asks and keeps
them for the rest of the forward pass.  Building needs no host synchronisation.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

# torch warns once per process that sparse CSR support is "in beta"; the operations used
# here (CSR spmm, sampled_addmm) are the stable core of it, so the one warning is spent here
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.sparse_csr_tensor(
        torch.zeros(1, dtype=torch.long), torch.zeros(0, dtype=torch.long), torch.zeros(0), (0, 0)
    )


class SparseLayout:
    """One CSR structure ``[rows, cols]`` and its transpose.

    The transpose (``crow_t``, ``col_t``, and ``perm_t``, which maps its value positions to
    this structure's: ``values_t = values[perm_t]``) is built by ``transpose`` when first
    needed, i.e. by the first backward pass.
    """

    def __init__(
        self,
        crow: Tensor,
        col: Tensor,
        shape: tuple[int, int],
        transpose: Callable[[], tuple[Tensor, Tensor, Tensor]],
    ) -> None:
        self.crow, self.col, self.shape = crow, col, shape
        self._transpose = transpose
        self._t: tuple[Tensor, Tensor, Tensor] | None = None

    def matrix(self, values: Tensor) -> Tensor:
        """The sparse CSR matrix with this structure and ``values``."""
        return torch.sparse_csr_tensor(
            self.crow, self.col, values, self.shape, check_invariants=False
        )

    def matrix_t(self, values: Tensor) -> Tensor:
        """The transpose of :meth:`matrix` (a CSR matrix of the transposed structure)."""
        if self._t is None:
            self._t = self._transpose()
        crow_t, col_t, perm_t = self._t
        return torch.sparse_csr_tensor(
            crow_t,
            col_t,
            values.index_select(0, perm_t),
            (self.shape[1], self.shape[0]),
            check_invariants=False,
        )


class CsrPlan:
    """The sparse structures of one graph for ``heads`` heads (node-major, see the module
    docstring), for the edge list ``src``/``dst`` with every self loop.

    ``src``/``dst`` are the edges sorted by target (stable), ``order`` their positions in
    the given list.  ``row`` (``[h E]``) is the row ``i * h + t`` of every value,
    ``offsets`` (``[n h + 1]``) the row pointer, ``edge`` (``[h E]``) every value's position
    in the sorted edges; ``row``/``src_heads`` index ``[n h]`` per-node, per-head tensors at
    the target and source of every value; ``position`` (``[h, E]``) maps back from values to
    sorted edges.  ``blocks`` is the block-diagonal ``[n h, n h]`` structure, ``rect`` the
    ``[n h, n]`` one.  The parts only some blocks need are built on first use.
    """

    def __init__(self, src: Tensor, dst: Tensor, num_nodes: int, heads: int) -> None:
        n, h, self.num_edges = num_nodes, heads, src.numel()
        self.num_nodes, self.heads = n, h
        self.order = torch.argsort(dst, stable=True)
        self.src, self.dst = src.index_select(0, self.order), dst.index_select(0, self.order)
        self._values = torch.arange(h * self.num_edges, device=src.device)
        crow, node, self._head, self.edge = self._runs(self.dst)
        self.row = node * h + self._head
        self.src_heads = self.src.index_select(0, self.edge) * h + self._head
        self.offsets = self._pointer(crow)
        self.blocks = SparseLayout(self.offsets, self.src_heads, (n * h, n * h), self._blocks_t)
        self._rect: SparseLayout | None = None
        self._position: Tensor | None = None
        self._by_source: tuple[Tensor, Tensor, Tensor] | None = None

    def _runs(self, rows: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """For sorted row ids ``rows`` (``[E]``), each row holding one run of its edges per
        head: the row pointer ``[n + 1]``, and for every value position the row's node, the
        head and the edge (its position in ``rows``), each ``[h E]``."""
        h = self.heads
        nodes = torch.arange(self.num_nodes + 1, device=rows.device)
        crow = torch.searchsorted(rows, nodes)
        degree = crow[1:] - crow[:-1]  # >= 1: every node has its self loop
        node = torch.repeat_interleave(degree * h, output_size=h * self.num_edges)
        start = crow.index_select(0, node)
        local = self._values - start * h
        length = degree.index_select(0, node)
        head = torch.div(local, length, rounding_mode="floor")
        return crow, node, head, start + local - head * length

    def _pointer(self, crow: Tensor) -> Tensor:
        """The row pointer ``[n h + 1]`` of the rows ``(i, t)`` from the node pointer."""
        h = self.heads
        degree = crow[1:] - crow[:-1]
        head = torch.arange(h, device=crow.device)
        first = (crow[:-1] * h)[:, None] + degree[:, None] * head[None, :]  # [n, h]
        return torch.cat([first.flatten(), crow[-1:] * h])

    @property
    def position(self) -> Tensor:
        """``[h, E]``: the value position of (head ``t``, sorted edge ``p``)."""
        if self._position is None:
            position = torch.empty_like(self._values)
            index = self._head * self.num_edges + self.edge
            self._position = position.index_copy_(0, index, self._values).view(self.heads, -1)
        return self._position

    def _source_runs(self) -> tuple[Tensor, Tensor, Tensor]:
        """The edges sorted by source (stable, so by target within a source): node pointer,
        and every transposed value's head and sorted edge."""
        if self._by_source is None:
            order_t = torch.argsort(self.src, stable=True)
            crow_t, _, head_t, edge_t = self._runs(self.src.index_select(0, order_t))
            self._by_source = (crow_t, head_t, order_t.index_select(0, edge_t))
        return self._by_source

    def _blocks_t(self) -> tuple[Tensor, Tensor, Tensor]:
        crow_t, head_t, edge_t = self._source_runs()
        flat = self.position.view(-1)
        col_t = self.dst.index_select(0, edge_t) * self.heads + head_t
        perm_t = flat.index_select(0, head_t * self.num_edges + edge_t)
        return self._pointer(crow_t), col_t, perm_t

    @property
    def rect(self) -> SparseLayout:
        """The ``[n h, n]`` structure (rows ``(i, t)``, columns ``j``)."""
        if self._rect is None:
            col = self.src.index_select(0, self.edge)
            shape = (self.num_nodes * self.heads, self.num_nodes)
            self._rect = SparseLayout(self.offsets, col, shape, self._rect_t)
        return self._rect

    def _rect_t(self) -> tuple[Tensor, Tensor, Tensor]:
        # transpose row j holds (edge q, head t) at q * h + t: columns i * h + t increase
        h = self.heads
        crow_t, _, _ = self._source_runs()
        order_t = torch.argsort(self.src, stable=True)
        head = self._values.remainder(h)
        edge = order_t.repeat_interleave(h)
        col_t = self.dst.index_select(0, edge) * h + head
        perm_t = self.position.view(-1).index_select(0, head * self.num_edges + edge)
        return crow_t * h, col_t, perm_t


class _SparseMatmul(torch.autograd.Function):
    """``A B`` for the sparse ``A`` with ``layout`` and ``values``; sparse backward."""

    @staticmethod
    def forward(ctx: Any, values: Tensor, dense: Tensor, layout: SparseLayout) -> Tensor:
        ctx.save_for_backward(values, dense)
        ctx.layout = layout
        return torch.sparse.mm(layout.matrix(values), dense)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        values, dense = ctx.saved_tensors
        layout: SparseLayout = ctx.layout
        grad = grad.contiguous()
        d_values = d_dense = None
        if ctx.needs_input_grad[0]:
            mask = layout.matrix(values.new_zeros(values.shape))
            d_values = torch.sparse.sampled_addmm(mask, grad, dense.t(), beta=0.0).values()
        if ctx.needs_input_grad[1]:
            d_dense = torch.sparse.mm(layout.matrix_t(values), grad)
        return d_values, d_dense, None


class _SampledDot(torch.autograd.Function):
    """``scale * <left_row(e), right_col(e)>`` for every value ``e`` of ``layout``."""

    @staticmethod
    def forward(
        ctx: Any, left: Tensor, right: Tensor, layout: SparseLayout, scale: float
    ) -> Tensor:
        ctx.save_for_backward(left, right)
        ctx.layout, ctx.scale = layout, scale
        mask = layout.matrix(left.new_zeros(layout.col.shape))
        return torch.sparse.sampled_addmm(mask, left, right.t(), beta=0.0, alpha=scale).values()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:
        left, right = ctx.saved_tensors
        layout: SparseLayout = ctx.layout
        grad = grad * ctx.scale
        d_left = d_right = None
        if ctx.needs_input_grad[0]:
            d_left = torch.sparse.mm(layout.matrix(grad), right)
        if ctx.needs_input_grad[1]:
            d_right = torch.sparse.mm(layout.matrix_t(grad), left)
        return d_left, d_right, None, None


class _SegmentSoftmax(torch.autograd.Function):
    """Softmax of ``scores`` over each contiguous run ``offsets[r]:offsets[r + 1]``; ``row``
    names every value's run.  Max-subtracted, so no overflow whatever the scores."""

    @staticmethod
    def forward(ctx: Any, scores: Tensor, row: Tensor, offsets: Tensor) -> Tensor:
        top = torch.segment_reduce(scores, "max", offsets=offsets)
        out = (scores - top.index_select(0, row)).exp_()
        total = out.new_zeros(offsets.numel() - 1).index_add_(0, row, out)
        out = out.div_(total.index_select(0, row))
        ctx.save_for_backward(out, row)
        ctx.rows = offsets.numel() - 1
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        alpha, row = ctx.saved_tensors
        weighted = alpha * grad
        inner = weighted.new_zeros(ctx.rows).index_add_(0, row, weighted)  # per-row sums
        return weighted - alpha * inner.index_select(0, row), None, None


def sparse_matmul(values: Tensor, dense: Tensor, layout: SparseLayout) -> Tensor:
    """``A @ dense`` for ``A`` = ``layout`` with ``values``, differentiable in both."""
    out: Tensor = _SparseMatmul.apply(values, dense, layout)
    return out


def sampled_dot(left: Tensor, right: Tensor, layout: SparseLayout, scale: float) -> Tensor:
    """``scale * (left @ right.T)`` at ``layout``'s entries (its values, in CSR order)."""
    out: Tensor = _SampledDot.apply(left, right, layout, scale)
    return out


def segment_softmax(scores: Tensor, row: Tensor, offsets: Tensor) -> Tensor:
    """Softmax over contiguous runs of ``scores`` (see :class:`_SegmentSoftmax`)."""
    out: Tensor = _SegmentSoftmax.apply(scores, row, offsets)
    return out
