"""The graph operator shared by the metrics and the models.

Conventions (PyTorch Geometric): ``edge_index[0]`` holds the source and
``edge_index[1]`` the target of each edge, and messages flow from source to
target.  Node ``i`` therefore aggregates over its *in*-neighbours ``j`` (edges
``j -> i``) with weights :math:`\\omega_{ij}` (default 1).

.. math::

    \\mu_i = d_i = \\sum_j \\omega_{ij}, \\qquad
    (PX)_i = \\sum_j \\frac{\\omega_{ij}}{d_i} X_j, \\qquad
    (\\Delta X)_i = \\sum_j \\frac{\\omega_{ij}}{d_i} (X_j - X_i).

``P = D^{-1} W`` is row-stochastic.  An isolated node (``d_i = 0``) has a zero
row in ``P`` and, since the sum defining :math:`\\Delta` is empty, a zero
Laplacian: :math:`(\\Delta X)_i = 0` (not :math:`-X_i`).  On every other node
:math:`\\Delta X = PX - X`.  No division by zero happens anywhere and no
``n x n`` matrix is ever built: ``P`` is stored as a CSR sparse matrix.

Many graphs at once: an operator built with a ``batch`` vector (PyG's ``Batch``,
``batch[i]`` = the graph of node ``i``) is the disjoint union of its graphs, and
every metric computed on it is computed *per graph* (segment sums over
``batch``), exactly as if each graph were measured alone.

:func:`as_graph` is the one entry point that turns what a PyG user holds (a
``Data``/``Batch``, an ``edge_index``, a sparse or dense adjacency) into an operator.
"""

from __future__ import annotations

import math

import threading
import warnings
from collections.abc import Callable, Iterator

import torch
from torch import Tensor

__all__ = [
    "GraphOperator",
    "as_graph",
    "thread_buffers",
    "validate_features",
    "check_edge_index",
    "check_edge_weight",
]


def check_edge_index(edge_index: Tensor, num_nodes: int | None) -> int:
    """Validate an ``edge_index`` ``[2, E]`` against ``num_nodes``; return ``num_nodes``."""
    if not isinstance(edge_index, Tensor):
        raise TypeError(
            f"edge_index: expected a torch.Tensor of shape [2, num_edges], "
            f"received {type(edge_index).__name__}"
        )
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(
            f"edge_index: expected shape [2, num_edges], received {list(edge_index.shape)}; "
            "transpose an [num_edges, 2] list with edge_index.t()"
        )
    if edge_index.dtype.is_floating_point or edge_index.dtype == torch.bool:
        raise ValueError(
            f"edge_index: expected an integer tensor, received dtype {edge_index.dtype}"
        )
    num_edges = edge_index.size(1)
    lo = int(edge_index.min()) if num_edges else 0
    hi = int(edge_index.max()) if num_edges else -1
    if num_nodes is None:
        num_nodes = hi + 1
    if num_nodes < 0:
        raise ValueError(f"num_nodes: expected a non-negative integer, received {num_nodes}")
    if lo < 0 or hi >= num_nodes:
        raise ValueError(
            f"edge_index: node indices must lie in [0, {num_nodes - 1}] for num_nodes={num_nodes}, "
            f"received values in [{lo}, {hi}]; pass the right num_nodes or fix the edge list"
        )
    return num_nodes


#: The smallest normal float64: positive edge weights (so degrees) are at least this.
TINY = torch.finfo(torch.float64).tiny


def check_edge_weight(edge_weight: Tensor | None, num_edges: int) -> None:
    """Validate optional edge weights: ``[num_edges]``, real, finite, non-negative."""
    if edge_weight is None:
        return
    if not isinstance(edge_weight, Tensor):
        raise TypeError(
            f"edge_weight: expected a torch.Tensor of shape [{num_edges}], "
            f"received {type(edge_weight).__name__}"
        )
    if edge_weight.dim() != 1 or edge_weight.numel() != num_edges:
        raise ValueError(
            f"edge_weight: expected shape [{num_edges}] (one weight per edge), "
            f"received {list(edge_weight.shape)}"
        )
    if edge_weight.dtype.is_complex or edge_weight.dtype == torch.bool:
        raise ValueError(
            f"edge_weight: expected real non-negative weights, received dtype {edge_weight.dtype}"
        )
    if num_edges and not bool(torch.isfinite(edge_weight).all()):
        raise ValueError("edge_weight: expected finite weights, received NaN or Inf")
    if num_edges and bool((edge_weight < 0).any()):
        raise ValueError(
            f"edge_weight: expected non-negative weights, received a minimum of "
            f"{float(edge_weight.min()):g}"
        )
    w64 = edge_weight.to(torch.float64)
    small = w64[(w64 > 0) & (w64 < TINY)]
    if small.numel():
        raise ValueError(
            f"edge_weight: positive weights as small as {float(small.min()):g}, below the "
            f"smallest normal float64 ({TINY:.3g}), where they have lost their digits; expected "
            "weights of at least that: rescale them (P = D^-1 W depends only on their ratios), "
            "e.g. divide them by their maximum"
        )
    if num_edges and not math.isfinite(float(w64.sum())):
        # a degree (a sum of weights) would overflow to inf, and P = D^-1 W to 0 ("no edges")
        raise ValueError(
            f"edge_weight: the weights (largest {float(edge_weight.max()):g}) sum past the "
            "float64 range, so degrees would be infinite; expected weights whose sum is finite: "
            "rescale them (P = D^-1 W depends only on their ratios)"
        )


class GraphOperator:
    """Random-walk operator ``P = D^{-1} W`` and Laplacian ``Delta`` of one graph.

    Built once per graph (validation and index work happen here, never in the
    metrics) and shared by every metric and probe.  Application is a sparse
    CSR product: ``O(|E| d)`` time, ``O(n d)`` memory.

    Args:
        edge_index: ``[2, num_edges]`` integer tensor, source row then target row.
        edge_weight: optional ``[num_edges]`` non-negative weights (default 1).
        num_nodes: number of nodes ``n`` (default: the length of ``batch`` when given, else
            ``edge_index.max() + 1``).
        self_loops: add a self loop of weight 1 to every node first.

    Example:
        >>> g = GraphOperator(torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]))  # path 0-1-2
        >>> g.degree
        tensor([1., 2., 1.], dtype=torch.float64)
        >>> g.laplacian(torch.tensor([[0.0], [1.0], [2.0]], dtype=torch.float64)).flatten()
        tensor([ 1.,  0., -1.], dtype=torch.float64)
    """

    def __init__(
        self,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        num_nodes: int | None = None,
        *,
        self_loops: bool = False,
        batch: Tensor | None = None,
    ) -> None:
        if num_nodes is None and isinstance(batch, Tensor) and batch.dim() == 1:
            num_nodes = batch.numel()  # one graph id per node: isolated last nodes count too
        num_nodes = check_edge_index(edge_index, num_nodes)
        check_edge_weight(edge_weight, edge_index.size(1))
        from oversmooth.resources import check_allocation, operator_bytes

        check_allocation(
            f"graph operator ({num_nodes} nodes, {edge_index.size(1)} edges)",
            operator_bytes(num_nodes, edge_index.size(1)),
            edge_index.device,
        )
        edge_index, weight = _plain_edges(edge_index, edge_weight, num_nodes, self_loops)
        self.num_nodes: int = num_nodes
        self.self_loops: bool = self_loops
        self._weighted = edge_weight is not None
        self.edge_index: Tensor = edge_index  # [2, num_edges]
        self.edge_weight: Tensor = weight  # [num_edges], float64
        self.degree: Tensor = _in_degree(
            edge_index[1], weight if self._weighted else None, num_nodes
        )
        self.has_neighbors: Tensor = self.degree > 0  # [num_nodes] bool
        self.num_isolated: int = int((~self.has_neighbors).sum())  # one sync, at build time
        # the clamp only keeps 1/0 out of the masked entries: every positive degree is at least
        # the smallest normal float64 (check_edge_weight); a clamp at 1e-300 made uniform
        # weights of 1e-305 give P's rows sums of 1e-5 instead of 1 (an audit)
        self._inv_degree = torch.where(self.has_neighbors, 1.0 / self.degree.clamp_min(TINY), 0.0)
        self._set_matrix(weight)
        self._set_batch(batch)
        self.dense_mask: Tensor | None = None  # [B, N] bool, set by as_graph for dense inputs

    def _set_matrix(self, weight: Tensor) -> None:
        """Store ``P`` (CSR, float64) and its merged edges (``runs``, a :class:`TargetRuns`),
        given the weight of every edge ``[num_edges]``."""
        # P[i, j] = w_ij / d_i with i the target: rows are targets, columns sources, merged
        # over repeated edges and sorted by row.  An edge list already sorted by (target,
        # source) without repeats (what oversmooth's loaders produce) is that structure as
        # is: its rows and columns are views of edge_index, its values each edge's P entry.
        n = self.num_nodes
        src, dst = self.edge_index
        if _strictly_sorted(dst, src):
            rows, cols = dst, src.contiguous()
            prob, merged_weight = self._edge_values(dst, weight), weight
        else:
            rows, cols, prob, merged_weight = self._coalesced(src, dst, weight)
        crow = torch.searchsorted(rows, torch.arange(n + 1, device=self.device))
        self._csr = {torch.float64: csr_matrix(crow, cols, prob, (n, n))}
        unit = not self._weighted and cols.numel() == self.num_edges  # no repeated edge
        self.runs: TargetRuns = TargetRuns(crow, cols, rows, prob, merged_weight, unit)

    @property
    def edge_prob(self) -> Tensor:
        """``[num_edges]`` P's entry ``w_e / d_target`` of every edge, in ``edge_index``'s
        order (formed on each call, not kept)."""
        return self._edge_values(self.edge_index[1], self.edge_weight)

    def _edge_values(self, dst: Tensor, weight: Tensor) -> Tensor:
        values = self._inv_degree[dst]
        return weight * values if self._weighted else values  # 1 * v = v: the same values

    def _coalesced(
        self, src: Tensor, dst: Tensor, weight: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Rows, columns, ``P`` values and summed weights of the edges merged (repeated edges
        add up) and sorted by row: one coalesce for ``P`` and ``W``."""
        n = self.num_nodes
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            coo = torch.sparse_coo_tensor(
                torch.stack([dst, src]),
                torch.stack([self._edge_values(dst, weight), weight.expand_as(dst)], dim=1),
                (n, n, 2),
            ).coalesce()
        rows, cols = coo.indices()
        merged = coo.values()
        return rows, cols, merged[:, 0].contiguous(), merged[:, 1].contiguous()

    def _set_batch(self, batch: Tensor | None) -> None:
        """Validate and store the graph of each node (``None``: one graph)."""
        self.batch: Tensor | None = None
        self.num_graphs: int = 1
        self.graph_nodes: Tensor | None = None  # [B] float64 node count of each graph
        self.edge_graph: Tensor | None = None  # [E] graph of each edge
        self.runs.graph = None
        if batch is None:
            return
        if not isinstance(batch, Tensor):
            raise TypeError(
                f"batch: expected a torch.Tensor [num_nodes] of graph ids, "
                f"received {type(batch).__name__}"
            )
        if batch.dim() != 1 or batch.numel() != self.num_nodes:
            raise ValueError(
                f"batch: expected shape [{self.num_nodes}] (one graph id per node), "
                f"received {list(batch.shape)}"
            )
        if batch.dtype.is_floating_point or batch.dtype.is_complex or batch.dtype == torch.bool:
            raise ValueError(f"batch: expected integer graph ids, received dtype {batch.dtype}")
        batch = batch.to(self.device, torch.long)
        if self.num_nodes and int(batch.min()) < 0:
            raise ValueError(
                f"batch: expected graph ids >= 0, received a minimum of {int(batch.min())}"
            )
        self.num_graphs = int(batch.max()) + 1 if self.num_nodes else 0
        src, dst = self.edge_index
        if self.num_edges and bool((batch[src] != batch[dst]).any()):
            raise ValueError(
                "batch: some edges join nodes of different graphs; per-graph metrics need "
                "each edge inside one graph: check the batch vector, or leave it out (batch=None;"
                " a .pt file without its 'batch') to measure the whole as one graph"
            )
        self.batch = batch
        self.graph_nodes = torch.zeros(
            self.num_graphs, dtype=torch.float64, device=self.device
        ).index_add_(0, batch, torch.ones(self.num_nodes, dtype=torch.float64, device=self.device))
        self.edge_graph = batch[dst]
        self.runs.graph = batch[self.runs.row]

    @property
    def device(self) -> torch.device:
        return self.edge_index.device

    @property
    def num_edges(self) -> int:
        return self.edge_index.size(1)

    def to(self, device: str | torch.device) -> GraphOperator:
        """A copy of the operator on ``device`` (``self`` if already there)."""
        device = torch.device(device)
        if device == self.device:
            return self
        other = object.__new__(GraphOperator)
        other.num_nodes = self.num_nodes
        other.self_loops = self.self_loops
        other._weighted = self._weighted
        other.edge_index = self.edge_index.to(device)
        other.edge_weight = _moved(self.edge_weight, device)
        other.degree = self.degree.to(device)
        other._inv_degree = self._inv_degree.to(device)
        other.has_neighbors = self.has_neighbors.to(device)
        other.num_isolated = self.num_isolated
        other._csr = {torch.float64: self._csr[torch.float64].to(device)}
        other.runs = self.runs.to(device)
        other.num_graphs = self.num_graphs
        other.batch = None if self.batch is None else self.batch.to(device)
        other.graph_nodes = None if self.graph_nodes is None else self.graph_nodes.to(device)
        other.edge_graph = None if self.edge_graph is None else self.edge_graph.to(device)
        other.dense_mask = None if self.dense_mask is None else self.dense_mask.to(device)
        return other

    def _matrix(self, dtype: torch.dtype) -> Tensor:
        mat = self._csr.get(dtype)
        if mat is None:
            base = self._csr[torch.float64]
            shape = (base.size(0), base.size(1))
            mat = csr_matrix(
                base.crow_indices(), base.col_indices(), base.values().to(dtype), shape
            )
            self._csr[dtype] = mat
        return mat

    def propagate(self, x: Tensor) -> Tensor:
        """``P x`` for ``x`` of shape ``[num_nodes, channels]``, in ``x``'s dtype."""
        return self._matrix(x.dtype) @ x

    def laplacian(self, x: Tensor) -> Tensor:
        """``Delta x = sum_j p_ij (x_j - x_i)``: ``P x - x`` on nodes with neighbours, 0 on
        isolated nodes.  Summed from edge differences (exact for near-constant ``x``,
        exactly 0 for constant ``x``), in ``x``'s dtype."""
        out, _ = self.runs.differences(x, edge_sum=False)
        assert out is not None
        return out

    def __repr__(self) -> str:
        graphs = f", num_graphs={self.num_graphs}" if self.batch is not None else ""
        return (
            f"GraphOperator(num_nodes={self.num_nodes}, num_edges={self.num_edges}{graphs}, "
            f"self_loops={self.self_loops}, device={self.device})"
        )


def _ones(size: int, device: torch.device) -> Tensor:
    """``[size]`` float64 ones as a broadcast view of one value (no memory per entry; writing
    into it raises)."""
    return torch.ones((), dtype=torch.float64, device=device).expand(size)


def _plain_edges(
    edge_index: Tensor, edge_weight: Tensor | None, num_nodes: int, self_loops: bool
) -> tuple[Tensor, Tensor]:
    """``edge_index`` as a plain ``long`` tensor and the float64 weight of every edge (a
    broadcast 1 without weights), with a unit self loop on every node appended for
    ``self_loops``."""
    device = edge_index.device
    if type(edge_index) is not Tensor:  # e.g. PyG's EdgeIndex: plain index arithmetic here
        unwrap = getattr(edge_index, "as_tensor", None)
        edge_index = unwrap() if callable(unwrap) else edge_index.as_subclass(Tensor)
    edge_index = edge_index.long()
    if self_loops:
        loop = torch.arange(num_nodes, device=device)
        edge_index = torch.cat([edge_index, torch.stack([loop, loop])], dim=1)
    weight = (
        _ones(edge_index.size(1), device)  # a broadcast 1: no memory per edge
        if edge_weight is None
        else edge_weight.to(device=device, dtype=torch.float64)
    )
    if self_loops and edge_weight is not None:
        weight = torch.cat([weight, torch.ones(num_nodes, dtype=torch.float64, device=device)])
    return edge_index, weight


def _in_degree(dst: Tensor, weight: Tensor | None, num_nodes: int) -> Tensor:
    """``d_i``, the sum of the weights of the edges that enter ``i``, float64 (``weight`` None:
    unit weights, a count, exact)."""
    if weight is None:
        return torch.bincount(dst, minlength=num_nodes).to(torch.float64)
    degree = torch.zeros(num_nodes, dtype=torch.float64, device=dst.device)
    return degree.index_add_(0, dst, weight)


def _moved(t: Tensor, device: torch.device) -> Tensor:
    """``t`` on ``device``; a broadcast vector stays a broadcast (one value moved)."""
    if t.dim() == 1 and t.numel() > 1 and t.stride() == (0,):
        return t[:1].to(device).expand(t.shape)
    return t.to(device)


def _strictly_sorted(major: Tensor, minor: Tensor) -> bool:
    """Whether the pairs ``(major[e], minor[e])`` increase strictly with ``e`` (sorted, no
    repeats); one host synchronisation."""
    if major.numel() < 2:
        return True
    up = major[1:] > major[:-1]
    tie = major[1:] == major[:-1]
    tie &= minor[1:] > minor[:-1]
    up |= tie
    return bool(up.all())


# Tuning constants (module attributes, read each time a kernel runs or an operator is
# built; tests lower them to run every chunking on small graphs).
#
# Edges per chunk are chosen so that one chunk of gathered rows holds at most
# this many float64 values (2 MiB): small enough to stay in cache, large enough
# that the Python loop over chunks costs nothing (measured 5x faster than 32 MiB
# chunks on a 200k-edge graph).
CHUNK_VALUES = 1 << 18


def _edge_chunks(num_edges: int, channels: int) -> Iterator[slice]:
    step = max(1, CHUNK_VALUES // max(channels, 1))
    for start in range(0, num_edges, step):
        yield slice(start, start + step)


# torch warns once per process that sparse CSR support is "in beta"; the operations used here
# and by the message-passing kernel (CSR spmm, sampled_addmm) are the stable core of it, so
# the one warning is spent here, at import, and building a matrix needs no warning filter
# (a filter per call would cost time on every layer and is not thread-safe)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.sparse_csr_tensor(
        torch.zeros(1, dtype=torch.long), torch.zeros(0, dtype=torch.long), torch.zeros(0), (0, 0)
    )


def by_rows(fn: Callable[[Tensor], Tensor], x: Tensor, rows: int) -> Tensor:
    """``fn`` over blocks of ``rows`` rows of ``x``, written into one output (shape and dtype
    from the first block's result): ``fn(x)`` to rounding for a row-wise ``fn``, without its
    whole-size temporaries."""
    first = fn(x[:rows])
    out = first.new_empty((x.size(0), *first.shape[1:]))
    out[:rows] = first
    del first
    for start in range(rows, x.size(0), rows):
        out[start : start + rows] = fn(x[start : start + rows])
    return out


def host_reads_free(x: Tensor) -> bool:
    """Whether reading a value of ``x`` to the host costs nothing (a CPU tensor): the metrics'
    and the csr kernel's CPU shortcuts read one value per layer, which on a GPU would stall
    the pipeline once per layer."""
    return x.device.type == "cpu"


def squared_sum(t: Tensor) -> Tensor:
    """``sum(t ** 2)`` over every entry (0-d): one dot product of the flattened array."""
    flat = t.reshape(-1)
    return torch.dot(flat, flat)


def csr_matrix(crow: Tensor, col: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    """The sparse CSR matrix with row pointer ``crow``, columns ``col`` and ``values``
    (invariants not checked: callers build them sorted)."""
    return torch.sparse_csr_tensor(crow, col, values, shape, check_invariants=False)


# The difference kernels run over blocks of this many merged edges (a chunk is one or more
# blocks); block boundaries and the rows they touch are read to the host once, when the
# operator is built, so that running the kernels never synchronises.
BLOCK_EDGES = 512
# Up to this many gathered values (8 MiB of float64) the kernels run in one chunk: on a
# small graph the fixed cost of a chunk outweighs what smaller chunks save in cache misses
# (Cora, 32 channels, 1 thread: 0.49 ms in one chunk, 0.61 ms in two).
WHOLE_VALUES = 1 << 20


class TargetRuns:
    r"""The edges of an operator merged (repeated edges add their weights) and sorted by
    target: the CSR structure of ``P`` with ``W``'s values beside ``P``'s.

    ``row``/``col`` are every merged edge's target and source, ``prob`` its ``P`` entry and
    ``weight`` its ``W`` entry (``[nnz]`` each); ``unit`` says that every ``weight`` is 1
    (no weights given and no repeated edge), so sums of squares need no weighting.
    ``graph`` (set for a batched operator) is each merged edge's graph.

    :meth:`differences` computes :math:`(\Delta x)_i = \sum_j p_{ij} (x_j - x_i)` from edge
    differences formed first (exact for near-constant ``x``, exactly 0 for constant ``x``)
    and, from the same differences, :math:`\sum_e w_e \|x_{src} - x_{dst}\|^2`: each chunk
    gathers its differences once, sums their squares (a dot product), and adds them into
    its target rows with a sparse CSR product (rows are contiguous runs: no scatter).
    """

    def __init__(
        self, crow: Tensor, col: Tensor, row: Tensor, prob: Tensor, weight: Tensor, unit: bool
    ) -> None:
        self.crow, self.col, self.row, self.prob, self.weight = crow, col, row, prob, weight
        self.nnz = col.numel()
        self.unit = unit
        self.graph: Tensor | None = None
        starts = torch.arange(0, self.nnz, BLOCK_EDGES, device=col.device)
        ends = torch.clamp(starts + BLOCK_EDGES, max=self.nnz)
        first = row[starts] if self.nnz else starts
        last = row[ends - 1] + 1 if self.nnz else starts
        # one host transfer, at build time: [value start, first row, row end] of every block
        self._blocks: list[list[int]] = torch.stack([starts, first, last], 1).tolist()
        self._positions = torch.arange(min(self.nnz, 1 << 16), device=col.device)
        self._local = threading.local()  # per-thread scratch buffers (see _scratch)

    def to(self, device: torch.device) -> TargetRuns:
        other = object.__new__(TargetRuns)
        for name in ("crow", "col", "row", "prob", "weight", "_positions"):
            setattr(other, name, _moved(getattr(self, name), device))
        other.nnz, other.unit, other._blocks = self.nnz, self.unit, self._blocks
        other.graph = None if self.graph is None else self.graph.to(device)
        other._local = threading.local()
        return other

    def chunks(self, channels: int) -> Iterator[tuple[int, int, int, int]]:
        """``(value start, value end, first row, row end)`` of every chunk of about
        ``CHUNK_VALUES / channels`` merged edges (whole blocks)."""
        if self.nnz * channels <= WHOLE_VALUES:  # one chunk: no per-chunk overhead
            if self.nnz:
                yield 0, self.nnz, 0, self.crow.numel() - 1
            return
        per = self.scratch_rows(channels) // BLOCK_EDGES
        blocks = self._blocks
        for k in range(0, len(blocks), per):
            group = blocks[k : k + per]
            end = blocks[k + per][0] if k + per < len(blocks) else self.nnz
            yield group[0][0], end, group[0][1], group[-1][2]

    def differences(
        self,
        x: Tensor,
        laplacian: bool = True,
        edge_sum: bool = True,
        num_graphs: int = 1,
        out: Tensor | None = None,
        scratch: tuple[Tensor, Tensor] | None = None,
        squares: bool = False,
    ) -> tuple[Tensor | None, Tensor | None]:
        """From one pass over the edge differences: ``Delta x`` ``[n, d]`` (with
        ``laplacian``) and ``sum_e w_e ||x_src - x_dst||^2`` (with ``edge_sum``; 0-d, or
        ``[num_graphs]`` when :attr:`graph` is set).

        ``squares`` (with ``laplacian``, :attr:`graph` unset): ``||Delta x||_F^2`` (0-d) in
        place of ``Delta x``; on a graph of several chunks each row's square is summed once
        the chunks holding its edges are done, so ``Delta x`` is never formed whole (each row
        the same numbers as in ``Delta x``; the sum over rows in another order).

        ``out`` (``[n, d]``, zeroed here) receives ``Delta x`` when the graph takes several
        chunks; ``scratch``: two buffers of :meth:`scratch_rows` rows ``x.size(1)`` columns
        (default: this operator's own, kept per thread).  Neither changes the arithmetic:
        fresh buffers only cost page faults."""
        total = None
        if edge_sum:
            total = x.new_zeros(()) if self.graph is None else x.new_zeros(num_graphs)
        if x.requires_grad and torch.is_grad_enabled():  # differentiable: fresh tensors
            lap, total = self._differentiable(x, laplacian, total)
            return (squared_sum(lap) if lap is not None and squares else lap), total
        lap = None
        if laplacian:
            prob = self.prob if self.prob.dtype == x.dtype else self.prob.to(x.dtype)
        if scratch is None:
            scratch = self._scratch(x)
        whole = self.nnz * x.size(1) <= WHOLE_VALUES
        if laplacian and squares and not whole and self.graph is None:
            return self._streamed_squares(x, prob, scratch, total)
        if laplacian and not whole:
            lap = x.new_zeros(x.shape) if out is None else out.zero_()
        for start, end, first, stop in self.chunks(x.size(1)):
            diff, total = self._chunk_differences(x, start, end, scratch, total)
            if laplacian:
                block = self._chunk_rows(diff, prob, (start, end, first, stop), whole)
                if whole:
                    lap = block
                else:
                    assert lap is not None
                    lap[first:stop].add_(block)
        if laplacian and lap is None:  # no edge at all
            lap = x.new_zeros(x.shape)
        if laplacian and squares:
            assert lap is not None
            return squared_sum(lap), total
        return lap, total

    def _chunk_differences(
        self, x: Tensor, start: int, end: int, scratch: tuple[Tensor, Tensor], total: Tensor | None
    ) -> tuple[Tensor, Tensor | None]:
        """The differences ``x_src - x_dst`` of the merged edges ``start:end`` (in ``scratch``)
        and ``total`` plus their weighted squares (``total`` None: not summed)."""
        size = end - start
        diff = torch.index_select(x, 0, self.col[start:end], out=scratch[0][:size])
        diff.sub_(torch.index_select(x, 0, self.row[start:end], out=scratch[1][:size]))
        if total is not None:
            total = self._add_squares(total, diff, start, end)
        return diff, total

    def _chunk_rows(
        self, diff: Tensor, prob: Tensor, chunk: tuple[int, int, int, int], whole: bool
    ) -> Tensor:
        """Rows ``first:stop`` of ``Delta x`` from the chunk's differences ``diff`` (one CSR
        product; with several chunks, only the part of each row's edges in this chunk)."""
        start, end, first, stop = chunk
        size = end - start
        rows = self.crow[first : stop + 1]
        rows = rows if whole else rows.clamp(start, end) - start
        if size > self._positions.numel():
            self._positions = torch.arange(size, device=diff.device)
        block = csr_matrix(rows, self._positions[:size], prob[start:end], (stop - first, size))
        return torch.sparse.mm(block, diff)

    def _streamed_squares(
        self, x: Tensor, prob: Tensor, scratch: tuple[Tensor, Tensor], total: Tensor | None
    ) -> tuple[Tensor, Tensor | None]:
        """:meth:`differences` with ``squares`` over several chunks: each chunk's rows of
        ``Delta x`` (a row cut by the chunk's end is carried into the next chunk, where the
        rest of its edges are added: the same sum as in ``Delta x``) and the squares of its
        finished rows."""
        squares = x.new_zeros(())
        carry: Tensor | None = None  # the unfinished last row of the previous chunk
        chunks = list(self.chunks(x.size(1)))
        for k, chunk in enumerate(chunks):
            start, end, first, stop = chunk
            diff, total = self._chunk_differences(x, start, end, scratch, total)
            block = self._chunk_rows(diff, prob, chunk, whole=False)
            if carry is not None:
                block[0].add_(carry)
            cut = k + 1 < len(chunks) and chunks[k + 1][2] == stop - 1
            carry = block[-1].clone() if cut else None
            done = (block[:-1] if cut else block).reshape(-1)
            squares += torch.dot(done, done)
        return squares, total

    def _differentiable(
        self, x: Tensor, laplacian: bool, total: Tensor | None
    ) -> tuple[Tensor | None, Tensor | None]:
        """:meth:`differences` for an ``x`` that autograd records (a metric used as a loss
        term): the same sums, out of place, without scratch buffers."""
        lap = x.new_zeros(x.shape) if laplacian else None
        prob = self.prob.to(x.dtype)
        for start, end, _, _ in self.chunks(x.size(1)):
            s, t = self.col[start:end], self.row[start:end]
            diff = x.index_select(0, s) - x.index_select(0, t)
            if total is not None:
                total = self._add_squares(total, diff, start, end)
            if lap is not None:
                lap = lap.index_add(0, t, diff * prob[start:end].unsqueeze(1))
        return lap, total

    def _add_squares(self, total: Tensor, diff: Tensor, start: int, end: int) -> Tensor:
        """``total`` plus ``sum_e w_e ||diff_e||^2`` over the merged edges ``start:end`` (into
        each edge's graph when batched; one dot product when every weight is 1)."""
        if self.graph is not None:
            sq = (diff * diff).sum(dim=1) * self.weight[start:end]
            return total.index_add_(0, self.graph[start:end], sq)
        if self.unit:
            return total + squared_sum(diff)
        return total + torch.dot((diff * diff).sum(dim=1), self.weight[start:end])

    def _scratch(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """This thread's two difference buffers for ``x``'s width, dtype and device."""
        first, second = thread_buffers(self._local, (self.scratch_rows(x.size(1)), x.size(1)), x)
        return first, second

    def scratch_rows(self, channels: int) -> int:
        """Rows of the scratch buffers :meth:`differences` can use for ``channels``."""
        if self.nnz * channels <= WHOLE_VALUES:
            return self.nnz
        return max(1, (CHUNK_VALUES // max(channels, 1)) // BLOCK_EDGES) * BLOCK_EDGES


def _edge_laplacian(
    x64: Tensor, src: Tensor, dst: Tensor, prob: Tensor, out: Tensor | None = None
) -> Tensor:
    r""":math:`(\Delta x)_i = \sum_{e: j \to i} p_e (x_j - x_i)` over an edge list.

    ``prob`` is ``[E]`` (one operator, result ``[n, d]``) or ``[E, h]`` (``h`` operators,
    e.g. attention heads, result ``[n, h, d]``).  Summing ``p (x_j - x_i)`` instead of
    ``P x - x`` makes the result exact for near-constant ``x`` and exactly 0 for constant
    ``x`` (``P``'s row sums are not exactly 1 in floating point); a node with no
    incoming edge gets 0.  ``out`` (zeroed here) saves the allocation.
    """
    shape = (x64.size(0),) + tuple(prob.shape[1:]) + (x64.size(1),)
    out = x64.new_zeros(shape) if out is None else out.zero_()
    heads = prob.size(1) if prob.dim() == 2 else 1
    for part in _edge_chunks(src.numel(), x64.size(1) * heads):
        s, t = src[part], dst[part]
        diff = x64[s] - x64[t]  # [chunk, d]
        if prob.dim() == 2:
            out.index_add_(0, t, diff.unsqueeze(1) * prob[part].unsqueeze(-1))
        else:
            out.index_add_(0, t, diff * prob[part].unsqueeze(1))
    return out


def validate_features(x: Tensor, name: str = "x") -> None:
    """Check that ``x`` is a 2-D floating tensor ``[num_nodes, channels]`` (no host sync)."""
    if not isinstance(x, Tensor):
        raise TypeError(
            f"{name}: expected a torch.Tensor [num_nodes, channels], received {type(x).__name__}"
        )
    if x.dim() == 3:  # a dense batch, which the graph-free metrics read as node rows only
        raise ValueError(
            f"{name}: expected node rows [num_nodes, channels], received a dense batch of shape "
            f"{list(x.shape)}; pass its real nodes, {name}[mask], with batch= the masked "
            "operator (as_graph(adj, mask=mask))"
        )
    if x.dim() != 2:
        raise ValueError(
            f"{name}: expected a 2-D tensor [num_nodes, channels], received shape {list(x.shape)}; "
            "for a single channel use x.unsqueeze(-1)"
        )
    if x.dtype.is_complex:
        raise ValueError(
            f"{name}: expected a real floating-point tensor, received dtype {x.dtype}; "
            "measure x.real and x.imag separately (or torch.view_as_real) instead"
        )
    if not x.dtype.is_floating_point:
        raise ValueError(f"{name}: expected a floating-point tensor, received dtype {x.dtype}")


def hetero_hint(obj: object) -> str | None:
    """The one-line refusal of a heterogeneous graph (a dict of edge types, a ``HeteroData``)
    saying what to pass instead, or None for anything else.  :func:`as_graph` raises it as a
    ``ValueError``; a caller that must refuse before doing any work (``Probe``) asks first."""
    if isinstance(obj, dict):
        keys = list(obj)[:1]
        example = f"graph[{keys[0]!r}]" if keys else "graph[edge_type]"
        return (
            f"graph: received a dict ({type(obj).__name__}) of edge types; the metrics are "
            f"defined on one homogeneous graph: pass one edge type ({example}) or "
            "HeteroData.to_homogeneous()"
        )
    if hasattr(obj, "edge_index_dict") and hasattr(obj, "node_types"):
        types = list(getattr(obj, "edge_types", []))[:1]
        example = f"data[{types[0]!r}].edge_index" if types else "data[edge_type].edge_index"
        return (
            f"graph: received a {type(obj).__name__}; the metrics are defined on one homogeneous "
            f"graph: probe one edge type, e.g. Probe(model, {example}), or pass "
            "data.to_homogeneous()"
        )
    return None


def _adjacency_edges(adj: Tensor, transposed: bool) -> tuple[Tensor, Tensor, int]:
    """``(edge_index, edge_weight, num_nodes)`` of a square sparse or dense adjacency
    ``A[src, dst]`` (``A[dst, src]`` when ``transposed``)."""
    if adj.dim() != 2 or adj.size(0) != adj.size(1):
        raise ValueError(
            f"graph: expected a square adjacency [num_nodes, num_nodes], received shape "
            f"{list(adj.shape)}; for a batch of dense adjacencies pass [B, N, N] with mask=[B, N]"
        )
    if adj.layout == torch.strided:
        index = adj.nonzero().t()  # [2, E] (row, col)
        values = adj[index[0], index[1]]
    else:
        coo = adj.to_sparse_coo().coalesce()
        index, values = coo.indices(), coo.values()
        keep = values != 0
        index, values = index[:, keep], values[keep]
    if values.dtype.is_complex:
        raise ValueError(f"graph: expected a real adjacency, received dtype {values.dtype}")
    edge_index = index.flip(0) if transposed else index
    return edge_index, values.to(torch.float64), adj.size(0)


def thread_buffers(
    local: threading.local, shape: tuple[int, ...], like: Tensor, count: int = 2
) -> tuple[Tensor, ...]:
    """``count`` ``shape`` buffers of ``like``'s dtype and device, kept in ``local`` (one set
    per thread) and reused while shape, dtype and device stay the same: fresh buffers of a few
    MiB cost page faults on every call."""
    held = getattr(local, "scratch", None)
    if (
        held is None
        or len(held) != count
        or (held[0].shape, held[0].dtype, held[0].device)
        != (torch.Size(shape), like.dtype, like.device)
    ):
        held = tuple(like.new_empty(shape) for _ in range(count))
        local.scratch = held
    return held


def as_graph(
    graph: object,
    num_nodes: int | None = None,
    edge_weight: Tensor | None = None,
    batch: Tensor | None = None,
    *,
    mask: Tensor | None = None,
    self_loops: bool = False,
    device: torch.device | str | None = None,
) -> GraphOperator:
    """Turn any graph a PyG user holds into a :class:`GraphOperator` (one function, used by
    every metric and by :class:`~oversmooth.probe.Probe`).

    Accepted ``graph``:

    - a :class:`GraphOperator` (reused; ``num_nodes`` must match);
    - an integer ``edge_index`` ``[2, E]`` (messages flow ``edge_index[0] -> edge_index[1]``),
      with optional ``edge_weight`` ``[E]``;
    - a PyG ``Data`` or ``Batch``: its ``edge_index`` (or ``adj_t``), ``edge_weight``,
      ``num_nodes`` and, for a ``Batch``, its ``batch`` vector;
    - an adjacency matrix ``A`` with ``A[src, dst] = w`` (the layout of
      ``torch_geometric.utils.to_dense_adj`` and ``to_torch_coo_tensor``): a dense floating or
      bool ``[N, N]`` tensor, a torch sparse COO/CSR/CSC tensor, or a ``SparseTensor``;
      ``Data.adj_t`` (from ``ToSparseTensor``) is read transposed, as PyG stores it;
    - a dense batch ``[B, N, N]`` with ``mask`` ``[B, N]`` (default: all nodes real), as
      PyG's dense layers take it: nodes are the masked entries, flattened graph by graph.

    A ``batch`` vector ``[num_nodes]`` (from the argument or the ``Batch``) makes every
    metric per graph.  ``HeteroData`` and dicts of edge types are refused with the line
    that says what to pass instead.
    """
    hetero = hetero_hint(graph)
    if hetero is not None:
        raise ValueError(hetero)
    if isinstance(graph, GraphOperator):
        return _reuse_operator(graph, num_nodes, edge_weight, batch, mask, self_loops, device)
    edge_index, edge_weight, num_nodes, batch, dense_mask = _edges_of(
        graph, num_nodes, edge_weight, batch, mask
    )
    if device is not None:
        edge_index = edge_index.to(device)
        edge_weight = None if edge_weight is None else edge_weight.to(device)
        batch = None if batch is None else batch.to(device)
    op = GraphOperator(
        edge_index, edge_weight, num_nodes=num_nodes, self_loops=self_loops, batch=batch
    )
    if dense_mask is not None:
        op.dense_mask = dense_mask.to(op.device)
    return op


def _reuse_operator(
    graph: GraphOperator,
    num_nodes: int | None,
    edge_weight: Tensor | None,
    batch: Tensor | None,
    mask: Tensor | None,
    self_loops: bool,
    device: torch.device | str | None,
) -> GraphOperator:
    """A given :class:`GraphOperator`: checked against ``num_nodes``, rebuilt only for a new
    ``batch``, ``mask`` or self loops, moved to ``device``."""
    if edge_weight is not None:
        raise ValueError(
            "edge_weight: pass the weights when building the GraphOperator, not with one"
        )
    if batch is not None or mask is not None or self_loops:
        graph = _rebuild(graph, batch, mask, self_loops)
    if num_nodes is not None and graph.num_nodes != num_nodes:
        raise ValueError(
            f"x: expected {graph.num_nodes} rows (the graph's num_nodes), received {num_nodes}"
        )
    return graph.to(device) if device is not None else graph


def _data_edges(
    data: object, num_nodes: int | None, edge_weight: Tensor | None, batch: Tensor | None
) -> tuple[Tensor, Tensor | None, int | None, Tensor | None]:
    """``edge_index``, ``edge_weight``, ``num_nodes`` and ``batch`` of a PyG ``Data`` or
    ``Batch`` (its ``adj_t`` read transposed when it has no ``edge_index``); arguments given
    explicitly win, a different ``num_nodes`` is refused."""
    edge_index = getattr(data, "edge_index", None)
    adj_t = getattr(data, "adj_t", None)
    if edge_index is None and adj_t is not None:
        edge_index, weight, _ = _sparse_edges(adj_t, transposed=True)
        edge_weight = weight if edge_weight is None else edge_weight
    elif edge_index is None:
        raise ValueError(
            f"graph: the {type(data).__name__} has neither edge_index nor adj_t; "
            "add the graph's edges or pass an edge_index"
        )
    if edge_weight is None:
        edge_weight = getattr(data, "edge_weight", None)
    data_nodes = getattr(data, "num_nodes", None)
    if num_nodes is not None and data_nodes is not None and data_nodes != num_nodes:
        raise ValueError(
            f"x: expected {data_nodes} rows (the {type(data).__name__}'s num_nodes), "
            f"received {num_nodes}"
        )
    num_nodes = data_nodes if data_nodes is not None else num_nodes
    if batch is None:
        batch = getattr(data, "batch", None)
    return edge_index, edge_weight, num_nodes, batch


def _edges_of(
    graph: object,
    num_nodes: int | None,
    edge_weight: Tensor | None,
    batch: Tensor | None,
    mask: Tensor | None,
) -> tuple[Tensor, Tensor | None, int | None, Tensor | None, Tensor | None]:
    """Edges, weights, node count, batch vector and (dense batches) node mask of any accepted
    ``graph`` other than a GraphOperator (see :func:`as_graph`)."""
    dense_mask: Tensor | None = None
    if (
        hasattr(graph, "edge_index")
        and hasattr(graph, "num_nodes")
        and not isinstance(graph, Tensor)
    ):  # a PyG Data / Batch
        edge_index, edge_weight, num_nodes, batch = _data_edges(
            graph, num_nodes, edge_weight, batch
        )
    elif is_sparse_matrix(graph):
        edge_index, weight, n = _sparse_edges(graph, transposed=False)
        edge_weight, num_nodes = _merge_weight(weight, edge_weight), _merge_nodes(n, num_nodes)
    elif (
        isinstance(graph, Tensor)
        and (graph.dtype.is_floating_point or graph.dtype == torch.bool)
        and (graph.dim() == 3 or (graph.dim() == 2 and graph.size(0) == graph.size(1)))
    ):
        if graph.dim() == 3:
            edge_index, weight, batch, dense_mask = _dense_batch_edges(graph, mask)
            num_nodes = _merge_nodes(int(dense_mask.sum()), num_nodes)
        else:
            edge_index, weight, n = _adjacency_edges(graph, transposed=False)
            num_nodes = _merge_nodes(n, num_nodes, dense=True)
        edge_weight = _merge_weight(weight, edge_weight)
    elif isinstance(graph, Tensor):
        if graph.dim() == 2 and graph.size(0) == graph.size(1) and graph.size(0) != 2:
            raise ValueError(
                f"edge_index: expected shape [2, num_edges], received {list(graph.shape)}; "
                "for a dense adjacency pass a floating or bool tensor (e.g. adj.float())"
            )
        edge_index = graph
    else:
        raise TypeError(
            "graph: expected an edge_index tensor, a PyG Data/Batch, a sparse or dense "
            f"adjacency or a GraphOperator, received {type(graph).__name__}"
        )
    return edge_index, edge_weight, num_nodes, batch, dense_mask


def _merge_weight(weight: Tensor, edge_weight: Tensor | None) -> Tensor:
    if edge_weight is not None:
        raise ValueError(
            "edge_weight: an adjacency matrix carries its own weights; pass edge_weight only "
            "with an edge_index"
        )
    return weight


def _merge_nodes(n: int, num_nodes: int | None, dense: bool = False) -> int:
    if num_nodes is not None and num_nodes != n:
        hint = (
            "; a square floating or bool tensor is read as a dense adjacency (an edge_index "
            "must be an integer tensor [2, num_edges])"
            if dense
            else ""
        )
        raise ValueError(
            f"x: expected {n} rows (the adjacency's num_nodes), received {num_nodes}{hint}"
        )
    return n


def is_sparse_matrix(graph: object) -> bool:
    """A torch sparse tensor (COO, CSR, CSC) or a ``torch_sparse.SparseTensor``."""
    if isinstance(graph, Tensor):
        return graph.layout != torch.strided
    return hasattr(graph, "coo") and hasattr(graph, "sparse_sizes")


def _sparse_edges(adj: object, transposed: bool) -> tuple[Tensor, Tensor, int]:
    """Edges of a torch sparse tensor or a ``torch_sparse.SparseTensor``."""
    if isinstance(adj, Tensor):
        return _adjacency_edges(adj, transposed)
    row, col, value = adj.coo()  # type: ignore[attr-defined]
    rows, cols = adj.sparse_sizes()  # type: ignore[attr-defined]
    if rows != cols:
        raise ValueError(
            f"graph: expected a square adjacency, received sparse sizes ({rows}, {cols})"
        )
    index = torch.stack([row, col])
    weight = (
        torch.ones(row.numel(), dtype=torch.float64, device=row.device)
        if value is None
        else value.to(torch.float64)
    )
    return (index.flip(0) if transposed else index), weight, int(rows)


def _dense_batch_edges(
    adj: Tensor, mask: Tensor | None
) -> tuple[Tensor, Tensor, Tensor | None, Tensor]:
    """Flatten ``[B, N, N]`` adjacencies with a ``[B, N]`` node mask into one edge list over the
    masked nodes (graph by graph, node order kept), their weights, a batch vector and the
    mask."""
    num_graphs, size, other = adj.shape
    if size != other:
        raise ValueError(
            f"graph: expected dense adjacencies [B, N, N], received shape {list(adj.shape)}"
        )
    if mask is None:
        mask = torch.ones(num_graphs, size, dtype=torch.bool, device=adj.device)
    if not isinstance(mask, Tensor) or mask.shape != (num_graphs, size) or mask.dtype != torch.bool:
        raise ValueError(
            f"mask: expected a bool tensor [{num_graphs}, {size}] (True for real nodes), "
            f"received {getattr(mask, 'shape', type(mask).__name__)}"
        )
    mask = mask.to(adj.device)
    # new id of each (graph, slot): running count of real nodes
    new_id = torch.cumsum(mask.reshape(-1).long(), 0).reshape(num_graphs, size) - 1
    g, i, j = adj.nonzero(as_tuple=True)
    keep = mask[g, i] & mask[g, j]
    g, i, j = g[keep], i[keep], j[keep]
    weight = adj[g, i, j].to(torch.float64)
    edge_index = torch.stack([new_id[g, i], new_id[g, j]])
    batch = torch.arange(num_graphs, device=adj.device).unsqueeze(1).expand(-1, size)[mask]
    return edge_index, weight, (batch if num_graphs > 1 else None), mask


def _rebuild(
    op: GraphOperator, batch: Tensor | None, mask: Tensor | None, self_loops: bool
) -> GraphOperator:
    """A copy of ``op`` with a new batch vector and/or self loops (the original weights)."""
    if mask is not None:
        raise ValueError("mask: only with a dense adjacency [B, N, N], not with a GraphOperator")
    if op.self_loops and self_loops:
        self_loops = False  # already there
    keep = slice(None) if not op.self_loops else slice(0, op.num_edges - op.num_nodes)
    new = GraphOperator(
        op.edge_index[:, keep],
        op.edge_weight[keep],
        op.num_nodes,
        self_loops=self_loops or op.self_loops,
        batch=op.batch if batch is None else batch,
    )
    new.dense_mask = op.dense_mask
    return new


def dense_to_rows(x: Tensor, op: GraphOperator, name: str = "x") -> Tensor:
    """Node rows ``[num_nodes, F]`` of a dense state ``[B, N, F]`` (masked entries only when
    ``op`` came from a masked dense batch); 2-D states are returned unchanged."""
    if not isinstance(x, Tensor) or x.dim() != 3:
        return x
    if op.dense_mask is not None:
        if tuple(x.shape[:2]) != tuple(op.dense_mask.shape):
            raise ValueError(
                f"{name}: expected a dense state [{op.dense_mask.size(0)}, "
                f"{op.dense_mask.size(1)}, channels] like the mask, received {list(x.shape)}"
            )
        return x[op.dense_mask.to(x.device)]
    if x.size(0) * x.size(1) != op.num_nodes:
        raise ValueError(
            f"{name}: a dense state [B, N, channels] needs B * N = {op.num_nodes} nodes, "
            f"received {list(x.shape)}; build the graph with as_graph(adj, mask=mask)"
        )
    return x.reshape(-1, x.size(2))
