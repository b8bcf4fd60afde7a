"""The ``"csr"`` message-passing kernel: target-sorted (CSR) edges, sparse primitives, and a
sparse backward.

Every head's attention :math:`P_h` is one block of a block-diagonal sparse matrix laid out
node-major: row ``i * h + t`` is node ``i``, head ``t``; column ``j * h + t`` is node ``j``,
head ``t``.  ``V X`` as ``[n, h, hd]`` is then the dense ``[n h, hd]`` matrix it multiplies
and the product is ``[n, h, hd]`` again, with no transpose.  The nonlocal variant's
``P_h X`` uses the rectangular ``[n h, n]`` matrix with the same rows.  Per block:

- scores ``<q_i, k_j>`` by :func:`torch.sparse.sampled_addmm` (no ``[E, h, hd]`` gather),
  except in float64 on the CPU, where gathering both operands' rows 64k values at a time
  gives the same numbers faster (:meth:`SparseLayout._gathered`),
- the softmax's numerators ``exp(e - max)`` over each row's contiguous run of values, in
  place (float64 on the CPU without autograd: ``exp(e)`` alone when every score is small
  enough for it to be safe, :func:`bounded_scores`, which spares the row maxima: 10% of a
  depth-256 float64 SAN forward on Cora),
- aggregation by a CSR ``spmm`` (:func:`torch.sparse.mm`) over the operand with a column of
  ones, which also sums each row's numerators; one division normalises the product.

The two sparse products are :class:`torch.autograd.Function` s whose backward is sparse too:
for ``Y = A B`` with ``A``'s values ``a``, ``dB = A^T dY`` (a CSR ``spmm`` over the transposed
structure, built once) and ``da_e = <dY_row(e), B_col(e)>`` (a sampled product); for the
scores ``s_e = c <P_row(e), Q_col(e)>``, ``dP = c G Q`` and ``dQ = c G^T P`` with ``G`` the
sparse matrix of score gradients.  Nothing ``n x n`` is formed, forward or backward
(autograd's own backward of a sparse product would form a dense gradient of ``A``).

Measured on Cora (4 heads of 8, 2 CPU cores, one attention of a block, float32): the sampled
product takes about 0.19 ms, the row maxima 0.15 ms, the CSR product 0.1 ms; the normalisation it
replaces (a scatter of the row sums, a gather and a division over the ``h E`` values) took
0.17 ms.  ``torch.compile`` (inductor, CPU) of the same attention written over the edge list
runs in 1.9 ms per call after a 16 s compile, twice this kernel's time, so it is not used.

The structures (:class:`CsrPlan`) depend on the graph and the head count only; a
:class:`~oversmooth.nn.conv.GraphContext` builds them on the first block that asks and keeps
them for the rest of the forward pass.  Building needs no host synchronisation.

Memory (issue 16: a million nodes on one host): with ``E`` edges (self loops included) and
``h`` heads there are ``h E`` values.  A plan keeps the row and the column of every value
(two index tensors of ``h E`` entries) and the row pointer; everything else (where each
edge's values sit, the transposes for the backward, the nonlocal block's rectangular
columns) is built when first asked for.  The rows stay: the softmax and GAT's scores gather
with them, and expanding per-row values without them (``repeat_interleave``) was slower on
Cora.  Indices are ``int32`` while every index fits (``h max(E, n) < 2**31``), ``int64``
beyond.  Building loops over the heads with ``[E]`` pieces, never holding an ``[h E]``
temporary, and without autograd a block holds at most two ``[h E]`` value tensors at once:
its scores (exponentiated in place) and one operand.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

from oversmooth.graph import csr_matrix, host_reads_free, thread_buffers


#: Head-by-head attention (:meth:`~oversmooth.nn.conv.MultiHeadMessagePassing._csr_by_head`)
#: forms queries and products over blocks of this many rows (:meth:`CsrPlan.row_blocks`).
ROW_BLOCK = 1 << 16

#: :meth:`SparseLayout.sampled` in float64 on the CPU gathers this many values' operand rows
#: at a time (two temporaries of ``SAMPLED_VALUES x columns`` floats: 4 MiB each for 8).
SAMPLED_VALUES = 1 << 16

#: Plans whose indices all stay below this bound use int32 indices, larger ones int64.
INT32_LIMIT = 2**31


def index_dtype(bound: int) -> torch.dtype:
    """The index type of a plan whose indices are all at most ``bound``."""
    return torch.int32 if bound < INT32_LIMIT else torch.int64


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
        row: Tensor | None = None,
        row_shift: int = 0,
    ) -> None:
        self.crow, self.col, self.shape = crow, col, shape
        # every value's row (less row_shift), where the owner keeps them (a plan does)
        self.row, self.row_shift = row, row_shift
        self._transpose = transpose
        self._t: tuple[Tensor, Tensor, Tensor] | None = None

    @property
    def nnz(self) -> int:
        return self.col.numel()

    def matrix(self, values: Tensor) -> Tensor:
        """The sparse CSR matrix with this structure and ``values``."""
        return csr_matrix(self.crow, self.col, values, self.shape)

    def matrix_t(self, values: Tensor) -> Tensor:
        """The transpose of :meth:`matrix` (a CSR matrix of the transposed structure)."""
        if self._t is None:
            self._t = self._transpose()
        crow_t, col_t, perm_t = self._t
        return csr_matrix(crow_t, col_t, values.index_select(0, perm_t), self.shape[::-1])

    def rows(self, first: int, stop: int, start: int, end: int) -> SparseLayout:
        """Rows ``first:stop`` of this structure, whose values are ``start:end`` (a
        :meth:`CsrPlan.row_blocks` entry): its own row pointer, a view of the columns, no
        transpose (forward only)."""

        def no_transpose() -> tuple[Tensor, Tensor, Tensor]:
            raise RuntimeError("a block of rows of a sparse layout has no backward")

        if (first, stop, start, end) == (0, self.shape[0], 0, self.nnz):
            return self
        crow = self.crow[first : stop + 1] - start
        row = None if self.row is None else self.row[start:end]
        shape = (stop - first, self.shape[1])
        return SparseLayout(crow, self.col[start:end], shape, no_transpose, row, first)

    def sampled(
        self, left: Tensor, right: Tensor, scale: float = 1.0, out: Tensor | None = None
    ) -> Tensor:
        """``scale * (left @ right.T)`` at this structure's entries: ``[nnz]``, in CSR order
        (into ``out`` when given).

        The only allocation is the result: the mask is a broadcast zero (``beta = 0`` still
        reads it, so it must hold zeros) and the product is written through ``out``, which
        spares the copy of ``crow``/``col`` that :func:`torch.sparse.sampled_addmm` makes
        for a result of its own.  Float64 on the CPU, where the rows are known, takes
        :meth:`_gathered` instead.
        """
        values = left.new_empty(self.nnz) if out is None else out
        if self.row is not None and left.dtype == torch.float64 and left.device.type == "cpu":
            return self._gathered(left, right, scale, values)
        mask = self.matrix(left.new_zeros(()).expand(self.nnz))
        torch.sparse.sampled_addmm(
            mask, left, right.t(), beta=0.0, alpha=scale, out=self.matrix(values)
        )
        return values

    def _gathered(self, left: Tensor, right: Tensor, scale: float, values: Tensor) -> Tensor:
        """:meth:`sampled` by gathering both operands' rows, :data:`SAMPLED_VALUES` values at
        a time: the same numbers (each dot product summed in the same order, then scaled) as
        :func:`torch.sparse.sampled_addmm`, whose float64 CPU kernel is slow: 0.65 ms against
        0.38 ms for the 53,056 values of 4 heads on Cora (0.10 ms in float32, where it
        stays).

        The gathered rows go into two buffers kept per thread (:func:`_gather_buffers`): two
        fresh blocks of a few MiB in every layer cost page faults whenever glibc hands them
        back to the system between layers, which it does unless its thresholds are fixed
        (:mod:`oversmooth.allocator`): 3.9 ms against 0.6 ms per call on Cora."""
        assert self.row is not None
        first, second = _gather_buffers(min(self.nnz, SAMPLED_VALUES), left)
        for start in range(0, self.nnz, SAMPLED_VALUES):
            stop = min(start + SAMPLED_VALUES, self.nnz)
            index = self.row[start:stop]
            rows, other = first[: stop - start], second[: stop - start]
            torch.index_select(
                left, 0, index - self.row_shift if self.row_shift else index, out=rows
            )
            torch.index_select(right, 0, self.col[start:stop], out=other)
            torch.sum(rows.mul_(other), dim=1, out=values[start:stop])
        return values if scale == 1.0 else values.mul_(scale)


_GATHER = threading.local()  # per-thread buffers of SparseLayout._gathered


def _gather_buffers(rows: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """Two ``[rows, like.size(1)]`` buffers of ``like``'s dtype and device for
    :meth:`SparseLayout._gathered`, kept per thread and reused while their shape, dtype and
    device stay the same (at most 2 x :data:`SAMPLED_VALUES` rows: 8 MiB for 8 columns)."""
    first, second = thread_buffers(_GATHER, (rows, like.size(1)), like)
    return first, second


class CsrPlan:
    """The sparse structures of one graph for ``heads`` heads (node-major, see the module
    docstring), for the edge list ``src``/``dst`` (a model's, with every node's self loop).

    The edges are ordered by target (stable), each node's run of values holding one run of
    its edges per head: (head ``t``, edge ``q``) sits at value position
    ``base[q] + t * step[q]`` (``[E]`` each; ``step`` is the in-degree of ``q``'s target).
    ``offsets`` (``[n h + 1]``) is the row pointer, ``row`` (``[h E]``) the row ``i * h + t``
    of every value; ``blocks`` is the block-diagonal ``[n h, n h]`` structure, whose columns
    ``j * h + t`` are ``blocks.col`` (``[h E]``).  ``src``/``dst`` are kept as given (the caller's
    tensors, not copies).  Built on first use: ``base``/``step`` (:attr:`placement`), ``rect``
    (the ``[n h, n]`` structure) and both transposes.
    """

    def __init__(self, src: Tensor, dst: Tensor, num_nodes: int, heads: int) -> None:
        n, h, e = num_nodes, heads, src.numel()
        self.num_nodes, self.heads, self.num_edges = n, h, e
        self.src, self.dst = src, dst
        self.index = index = index_dtype(h * max(e, n))
        crow, base, step = self._layout()
        self.offsets = self._pointer(crow)
        self.row = torch.repeat_interleave(self.offsets.diff(), output_size=h * e)
        col = torch.empty(h * e, dtype=index, device=src.device)
        src_heads = src.to(index) * h
        for t, position in enumerate(self._positions(base, step)):
            col[position] = src_heads + t
        del src_heads, base, step
        self.blocks = SparseLayout(self.offsets, col, (n * h, n * h), self._blocks_t, self.row)
        self._placement: tuple[Tensor, Tensor] | None = None
        self._row_blocks: dict[int, list[tuple[int, int, int, int]]] = {}
        self._rect: SparseLayout | None = None
        self._by_source: tuple[Tensor, Tensor] | None = None

    def _layout(self) -> tuple[Tensor, Tensor, Tensor]:
        """The node pointer ``[n + 1]`` of the edges sorted by target (stable), and every
        edge's ``base`` and ``step`` (see the class docstring)."""
        e, index = self.num_edges, self.index
        device = self.dst.device
        order = torch.argsort(self.dst, stable=True)
        nodes = torch.arange(self.num_nodes + 1, device=device)
        crow = torch.searchsorted(
            self.dst.index_select(0, order), nodes, out_int32=index == torch.int32
        )
        rank = torch.empty(e, dtype=index, device=device)
        rank[order] = torch.arange(e, dtype=index, device=device)  # place in target order
        del order
        return (crow, *self._base_step(crow, self.dst, rank))

    def _base_step(self, crow: Tensor, node: Tensor, rank: Tensor) -> tuple[Tensor, Tensor]:
        """Every edge's ``base`` and ``step`` in a layout whose rows are the nodes ``node``
        (``[E]``; ``crow`` their pointer, ``rank`` each edge's place in row order, overwritten):
        node i's values start at ``crow[i] * h``, head t's run at ``crow[i] * h + t *
        degree(i)``."""
        base = rank.add_(crow.index_select(0, node) * (self.heads - 1))
        step = (crow[1:] - crow[:-1]).index_select(0, node)
        return base, step

    def row_blocks(self, rows: int) -> list[tuple[int, int, int, int]]:
        """The rows of :attr:`blocks` in blocks of ``rows``: ``(first, stop, start, end)``,
        rows ``first:stop`` holding the values ``start:end``.  One block of all when there
        are no more than ``rows`` rows; otherwise one host read of the row pointer per plan and
        block size (a forward's plan: none per layer)."""
        size = self.offsets.numel() - 1
        if size <= rows:
            return [(0, size, 0, self.blocks.nnz)]
        if rows not in self._row_blocks:
            edges = list(range(0, size, rows)) + [size]
            index = torch.tensor(edges, device=self.offsets.device)
            values = self.offsets.index_select(0, index).tolist()
            self._row_blocks[rows] = [
                (edges[k], edges[k + 1], values[k], values[k + 1]) for k in range(len(edges) - 1)
            ]
        return self._row_blocks[rows]

    @property
    def placement(self) -> tuple[Tensor, Tensor]:
        """``base`` and ``step`` (``[E]`` each): not kept by construction, which needs only the
        row and column of every value; rebuilt (one more sort) and kept by the first part
        that needs them (:meth:`spread`, :meth:`per_edge`, the transposes)."""
        if self._placement is None:
            _, base, step = self._layout()
            self._placement = (base, step)
        return self._placement

    def _positions(self, base: Tensor, step: Tensor) -> Iterator[Tensor]:
        """Head by head, the value positions ``base + t * step`` (``[E]``): one buffer,
        advanced in place, so each must be used before the next is asked for."""
        position = base.clone()
        for t in range(self.heads):
            if t:
                position += step
            yield position

    def _pointer(self, crow: Tensor) -> Tensor:
        """The row pointer ``[n h + 1]`` of the rows ``(i, t)`` from the node pointer."""
        h = self.heads
        degree = crow[1:] - crow[:-1]
        head = torch.arange(h, dtype=crow.dtype, device=crow.device)
        first = (crow[:-1] * h)[:, None] + degree[:, None] * head[None, :]  # [n, h]
        return torch.cat([first.flatten(), crow[-1:] * h])

    def per_edge(self, values: Tensor) -> Tensor:
        """``[h E]`` values of this plan per edge (edges as given): ``[E, h]``, the transpose
        of a contiguous ``[h, E]``."""
        out = values.new_empty(self.heads, self.num_edges)
        for t, position in enumerate(self._positions(*self.placement)):
            torch.index_select(values, 0, position, out=out[t])
        return out.t()

    def spread(self, edge_values: Tensor) -> Tensor:
        """``[E]`` per-edge values (edges as given) laid out as this plan's values
        (``[h E]``, the same value for every head)."""
        out = edge_values.new_empty(self.heads * self.num_edges)
        for position in self._positions(*self.placement):
            out[position] = edge_values
        return out

    def _source_runs(self) -> tuple[Tensor, Tensor]:
        """The edges sorted by source (stable, so by target within a source): their ids in
        the given list and the source pointer ``[n + 1]``."""
        if self._by_source is None:
            order = torch.argsort(self.dst, stable=True)
            by_source = torch.argsort(self.src.index_select(0, order), stable=True)
            edge = order.index_select(0, by_source)
            del order, by_source
            nodes = torch.arange(self.num_nodes + 1, device=edge.device)
            crow_t = torch.searchsorted(
                self.src.index_select(0, edge), nodes, out_int32=self.index == torch.int32
            )
            self._by_source = (edge.to(self.index), crow_t)
        return self._by_source

    def _blocks_t(self) -> tuple[Tensor, Tensor, Tensor]:
        h, e, index = self.heads, self.num_edges, self.index
        edge, crow_t = self._source_runs()
        rank = torch.arange(e, dtype=index, device=edge.device)
        base_t, step_t = self._base_step(crow_t, self.src.index_select(0, edge), rank)
        dst_heads = self.dst.index_select(0, edge).to(index) * h
        base, step = (part.index_select(0, edge) for part in self.placement)
        col_t = torch.empty(h * e, dtype=index, device=edge.device)
        perm_t = torch.empty_like(col_t)
        positions = zip(self._positions(base_t, step_t), self._positions(base, step), strict=True)
        for t, (position_t, position) in enumerate(positions):
            col_t[position_t] = dst_heads + t
            perm_t[position_t] = position
        return self._pointer(crow_t), col_t, perm_t

    @property
    def rect(self) -> SparseLayout:
        """The ``[n h, n]`` structure (rows ``(i, t)``, columns ``j``)."""
        if self._rect is None:
            col = torch.div(self.blocks.col, self.heads, rounding_mode="floor")
            shape = (self.num_nodes * self.heads, self.num_nodes)
            self._rect = SparseLayout(self.offsets, col, shape, self._rect_t, self.row)
        return self._rect

    def _rect_t(self) -> tuple[Tensor, Tensor, Tensor]:
        # transpose row j holds (edge q, head t) at q * h + t: columns i * h + t increase
        h = self.heads
        edge, crow_t = self._source_runs()
        head = torch.arange(h, dtype=self.index, device=edge.device)
        col_t = (self.dst.index_select(0, edge).to(self.index) * h)[:, None] + head[None, :]
        base, step = (part.index_select(0, edge) for part in self.placement)
        perm_t = base[:, None] + step[:, None] * head[None, :]  # [E, h]
        return crow_t * h, col_t.flatten(), perm_t.flatten()


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
            d_values = layout.sampled(grad, dense)
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
        return layout.sampled(left, right, scale)

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


def records(*tensors: Tensor) -> bool:
    """Whether autograd would record an operation on ``tensors``.  When it would not, the
    products below call their forward directly: the same numbers, without the ~25 us a
    :class:`torch.autograd.Function` call costs (a tenth of GCN's product on Cora)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def sparse_matmul(values: Tensor, dense: Tensor, layout: SparseLayout) -> Tensor:
    """``A @ dense`` for ``A`` = ``layout`` with ``values``, differentiable in both."""
    if not records(values, dense):
        return torch.sparse.mm(layout.matrix(values), dense)
    out: Tensor = _SparseMatmul.apply(values, dense, layout)
    return out


def sampled_dot(left: Tensor, right: Tensor, layout: SparseLayout, scale: float) -> Tensor:
    """``scale * (left @ right.T)`` at ``layout``'s entries (its values, in CSR order)."""
    if not records(left, right):
        return layout.sampled(left, right, scale)
    out: Tensor = _SampledDot.apply(left, right, layout, scale)
    return out


#: :func:`softmax_numerators_` subtracts the maxima in slices of this many values (4 MiB
#: of float64) when there are more and autograd does not record.
SUBTRACT_VALUES = 1 << 19


def bounded_scores(scores: Tensor) -> bool:
    """Whether ``exp`` of float64 ``scores`` is safe without subtracting the maxima: on the
    CPU (where reading a value to the host costs nothing) every score's modulus at most
    ``log(largest float) / 4`` (177).  Every ``exp(s)`` then lies in ``[M**-0.25, M**0.25]``
    for the largest float ``M``: no term overflows or is subnormal, and a run's sum, or its
    product with values of any sensible size, stays far from ``M``.  One pass over the scores
    (their minimum and maximum) with no temporary, where the maxima (a segment reduction, a
    gather of each value's maximum and a subtraction) took about a tenth of a SAN block's time
    on Cora.

    False on a GPU (the read would stall the pipeline), for NaN scores, and for any other
    dtype: float32 keeps the maxima and its numbers, because a deep float32 stack ends at its
    float floor, where the energies are rounding noise and another rounding gives other noise
    (the numbers docs/precision.md reports); a float64 stack ends some 10^15 times above its
    floor, where the last bits do not show."""
    if not host_reads_free(scores) or scores.dtype != torch.float64 or not scores.numel():
        return False
    limit = math.log(torch.finfo(scores.dtype).max) / 4
    # one pass for both ends (a NaN fails both comparisons); the inf-norm took 8x longer
    low, high = torch.aminmax(scores.detach())
    return -limit <= float(low) and float(high) <= limit


def softmax_numerators_(scores: Tensor, row: Tensor, offsets: Tensor) -> Tensor:
    """``exp(s - m)`` for every value ``s`` of ``scores``, ``m`` the maximum of its run
    ``offsets[r]:offsets[r + 1]`` (``row`` names every value's run), overwriting ``scores``;
    returns ``scores``.  The softmax is these divided by their run's sum, which the caller
    forms after aggregating.  No overflow whatever the scores, and each run's largest term is
    1, so no run's sum underflows.  Without autograd, where :func:`bounded_scores` holds,
    ``m`` is 0 instead: the same softmax (a softmax is the same whatever constant is
    subtracted from a run), rounded differently in the last bits, without the maxima.  (With
    autograd the maxima stay, so training's numbers are those of the maxima path.)
    Differentiable: to autograd the maxima are constants.
    """
    if not scores.requires_grad and bounded_scores(scores):
        return scores.exp_()
    top = torch.segment_reduce(scores.detach(), "max", offsets=offsets)
    if scores.requires_grad or scores.numel() <= SUBTRACT_VALUES:
        return scores.sub_(top.index_select(0, row)).exp_()
    # in slices: each run's maximum is gathered for one slice at a time, not for all h E
    # values at once (352 MiB of float64 at 10^6 nodes and 4 heads); the same operations
    for start in range(0, scores.numel(), SUBTRACT_VALUES):
        part = scores[start : start + SUBTRACT_VALUES]
        part.sub_(top.index_select(0, row[start : start + SUBTRACT_VALUES])).exp_()
    return scores
