"""The exact float64 reductions every metric is built from (and the Probe, through
:class:`~oversmooth.metrics.state.LayerState`).

They take float64 tensors that are already validated and, on a GPU, never synchronise with the
host.  The rules that make them exact on near-constant states (the oversmoothed regime):

* differences are formed first, from the float64 inputs (``x_j - x_i`` is exact by Sterbenz's
  lemma when the two values are within a factor 2), and only then scaled, squared, summed;
* ``1 - cos`` is ``0.5 ||u - v||^2``, with ``u - v`` built from ``x - y`` (never from rounded
  unit rows);
* norms are taken of rows scaled by a power of two (exact), so they cannot overflow;
* NaN/Inf anywhere in ``x`` poisons the result, also on nodes no edge touches.

Fast paths: a sum of squares in float64 is the same number with or without the power-of-two
scaling (scaling by ``2**k`` is exact) unless a square overflows or underflows.  Two cases rule
that out without the scaling pass: values that came from a narrower float (:data:`NARROW`:
squares lie in ``[1e-90, 1e77]``), and, on the CPU, where reading a value to the host costs
nothing, a result checked to lie in ``[2**-800, 2**800]``.  Anything else (and every float64
state on a GPU, where a host read would stall the pipeline) takes the scaled path.
"""

from __future__ import annotations

import math

import threading
import weakref
from typing import Literal

import torch
from torch import Tensor

from oversmooth.graph import (
    GraphOperator,
    TargetRuns,
    _edge_chunks,
    as_graph,
    csr_matrix,
    dense_to_rows,
    host_reads_free,
    squared_sum,
    thread_buffers,
    validate_features,
)

__all__ = [
    "Reduce",
    "NARROW",
    "SQUARES_SAFE",
    "NORMS_SAFE",
    "prepare",
    "batch_operator",
    "finish",
    "graphs_present",
    "poison",
    "host_reads_free",
    "within",
    "norms_safe",
    "segment_sum",
    "count",
    "node_counts",
    "pow2",
    "row_exponents",
    "scale_rows",
    "scaled_pair",
    "unit_gap",
    "cosine_distance",
    "unit_rows",
    "mean_unit_cosine",
    "rms_norm",
    "PAIRS_VALUES",
    "EdgePairs",
    "edge_pairs",
    "edge_pass",
    "laplacian",
    "unweighted_edge_sum",
    "head_energies",
    "first_rows",
    "pad_graphs",
    "centred",
]

Reduce = Literal["mean", "none"]

#: Dtypes whose squares, and sums of up to 2**60 of them, neither overflow nor underflow in
#: float64.
NARROW = (torch.float32, torch.float16, torch.bfloat16)
#: A float64 sum of squares inside these bounds had no square overflow or underflow.
SQUARES_SAFE = (2.0**-800, 2.0**800)
#: Row norms inside these bounds can be divided by directly.
NORMS_SAFE = (2.0**-400, 2.0**400)


# -- inputs and outputs of the public functions --------------------------------------------------


def prepare(
    x: Tensor, graph: object, edge_weight: Tensor | None = None, batch: Tensor | None = None
) -> tuple[Tensor, GraphOperator]:
    """``x`` as float64 node rows and the measuring operator on its device (via
    :func:`~oversmooth.graph.as_graph`); a dense ``[B, N, F]`` state is flattened to rows."""
    if isinstance(x, Tensor) and x.dim() == 3:
        op = as_graph(graph, edge_weight=edge_weight, batch=batch, device=x.device)
        x = dense_to_rows(x, op)
        validate_features(x)
        op = as_graph(op, num_nodes=x.size(0))
    else:
        validate_features(x)
        op = as_graph(
            graph, num_nodes=x.size(0), edge_weight=edge_weight, batch=batch, device=x.device
        )
    return x.to(torch.float64), op


def batch_operator(batch: object, x: Tensor) -> GraphOperator | None:
    """For the graph-free metrics: a ``batch`` vector (or a ``Batch`` holding one) as an
    edgeless operator carrying the validated batch, or None."""
    if batch is not None and not isinstance(batch, Tensor):
        batch = getattr(batch, "batch", None)
    if batch is None:
        return None
    empty = torch.empty(2, 0, dtype=torch.long, device=x.device)
    return GraphOperator(empty, num_nodes=x.size(0), batch=batch)


def finish(
    value: Tensor, op: GraphOperator | None, reduce: str, measured: Tensor | None = None
) -> Tensor:
    """Apply ``reduce`` to a per-graph value: ``"mean"`` averages the graphs of a batch (a
    single graph is returned as is, 0-d); ``"none"`` keeps one value per graph ``[B]``.

    A graph id without a node (a gap in the batch vector's ids; in an edge-set model's
    line graph, a graph without edges) has nothing to measure: its value is NaN and the mean
    is over the other graphs (a NaN of a graph that has nodes still makes the mean NaN).
    ``measured`` (``[B]``, optional): the graphs the metric has something to measure in (a
    neighbour for MAD, two nodes for the global MAD); the others are NaN and left out of the
    mean too."""
    if reduce not in ("mean", "none"):
        raise ValueError(f"reduce: expected one of 'mean', 'none', received {reduce!r}")
    if op is None or op.batch is None:
        return value if reduce == "mean" else value.unsqueeze(0)
    present = graphs_present(op)
    if measured is not None:
        present = present & measured
    present = present.view(-1, *([1] * (value.dim() - 1)))
    if reduce == "none":
        return torch.where(present, value, math.nan)
    return torch.where(present, value, 0.0).sum(dim=0) / present.sum(dim=0)


def graphs_present(op: GraphOperator) -> Tensor:
    """``[B]`` True for each graph id of a batched ``op`` that has at least one node."""
    assert op.graph_nodes is not None
    return op.graph_nodes > 0


# -- poison, host reads, segments ----------------------------------------------------------------


def poison(x64: Tensor, op: GraphOperator | None = None) -> Tensor:
    """0-d: 0.0 when every entry of ``x64`` is finite, NaN otherwise (no host sync); with a
    batched ``op``, one such value per graph ``[B]``."""
    if op is not None and op.batch is not None:
        if x64.size(1) == 0:
            return x64.new_zeros(op.num_graphs)
        rows = x64.amax(dim=1) * 0.0 + x64.amin(dim=1) * 0.0  # [n]
        return segment_sum(rows, op)
    if x64.numel() == 0:
        return x64.new_zeros(())
    # NaN propagates through the min and max, +-Inf * 0 = NaN; one pass, no n x d temporary
    low, high = torch.aminmax(x64)
    return low * 0.0 + high * 0.0


def within(value: Tensor, bounds: tuple[float, float]) -> bool:
    """``bounds[0] <= value <= bounds[1]`` (False for NaN); reads ``value`` to the host."""
    return bounds[0] <= float(value.detach()) <= bounds[1]


def norms_safe(norm: Tensor, bounds: tuple[float, float] = NORMS_SAFE) -> bool:
    """Every entry of ``norm`` in ``bounds`` (``[2**-400, 2**400]``: no zero row): read to the
    host."""
    low, high = torch.aminmax(norm)
    return within(low, bounds) and within(high, bounds)


def segment_sum(values: Tensor, op: GraphOperator | None, edges: bool = False) -> Tensor:
    """Sum of per-node (or per-edge) ``values`` ``[m]``: 0-d for one graph, ``[B]`` per graph
    for a batched ``op`` (one ``index_add_``, no loop over graphs)."""
    if op is None or op.batch is None:
        return values.sum()
    index = op.edge_graph if edges else op.batch
    assert index is not None
    return values.new_zeros(op.num_graphs).index_add_(0, index, values)


def count(n: int) -> float:
    """``n`` as the divisor of a mean over ``n`` items: NaN for none (0/0; a mean over an
    empty graph read 0, a value that means something: an audit)."""
    return float(n) if n > 0 else math.nan


def node_counts(op: GraphOperator | None, n: int) -> Tensor | float:
    """Node count per graph (at least 1 in a batch, whose empty graph ids :func:`finish`
    leaves out), the ``1/n`` of every per-node mean; NaN for a single graph without nodes,
    whose means are 0/0 (they read 0, a value that means something: an audit)."""
    if op is None or op.graph_nodes is None:
        return count(n)
    return op.graph_nodes.clamp_min(1.0)


# -- power-of-two scaling, unit rows, 1 - cos ---------------------------------------------------


def pow2(exponent: Tensor) -> Tensor:
    """``2 ** exponent`` (float64, exact) for integer exponents in ``[-1074, 1023]``."""
    return torch.pow(2.0, exponent.to(torch.float64))


def row_exponents(x64: Tensor) -> Tensor:
    """Per row, ``e`` with ``max_k |x_ik| / 2**e`` in ``[0.5, 1)`` (0 for zero rows): ``[n]``."""
    if not x64.size(1):
        return torch.zeros(len(x64), dtype=torch.int64, device=x64.device)
    top = torch.maximum(x64.amax(dim=1).abs(), x64.amin(dim=1).abs())  # max |x_ik|, [n]
    _, exponent = torch.frexp(top)
    return exponent.to(torch.int64)


def scale_rows(x64: Tensor, exponent: Tensor) -> Tensor:
    """``x_i / 2**e_i`` exactly (one power-of-two factor per row).  Exponents below -1000
    (rows of subnormal size) are scaled by ``2**1000`` only, which already keeps their
    squares clear of underflow; the factor itself never overflows."""
    return x64 * pow2(-exponent.clamp_min(-1000)).unsqueeze(1)


def scaled_pair(a: Tensor, ea: Tensor, b: Tensor, eb: Tensor) -> tuple[Tensor, Tensor]:
    """Rows ``a_i``, ``b_i`` scaled by one common power of two (their larger one), so that their
    difference is still the exact difference; rows more than 2**512 apart in size are scaled
    separately (their cosine is far from 1 or they are parallel, and nothing cancels)."""
    common = torch.maximum(ea, eb)
    apart = (ea - eb).abs() > 512
    return (
        scale_rows(a, torch.where(apart, ea, common)),
        scale_rows(b, torch.where(apart, eb, common)),
    )


def unit_gap(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    r"""``u - v`` for ``u = a/|a|``, ``v = b/|b|`` without cancellation, and the zero-row mask.

    ``u - v = (d + v (|b| - |a|)) / |a|`` with ``d = a - b`` and
    ``|b| - |a| = -(d . (a + b)) / (|a| + |b|)``: every term is formed from ``d``, so rows
    that agree to 10 digits still give ``u - v`` to full relative precision.  That holds for
    rows of like size; for rows whose norms differ by more than a factor 2, ``d`` is about
    the larger row and ``d + v (|b| - |a|)`` cancels down to the smaller one, losing the
    ratio of the two in digits (a row 1e20 times its neighbour's size gave a mean average
    distance of 9e7, which lies in [0, 2]: an audit).  There ``u - v`` is formed directly,
    as ``a/|a| - b/|b|``: no near-equal rows to resolve (the difference is at least half the
    smaller row).  Rows must be scaled (:func:`scaled_pair`) so that their norms cannot
    overflow.
    """
    na = torch.linalg.vector_norm(a, dim=1)
    nb = torch.linalg.vector_norm(b, dim=1)
    zero = (na == 0) | (nb == 0)
    na_safe = torch.where(zero, 1.0, na)
    nb_safe = torch.where(zero, 1.0, nb)
    d = a - b
    gap = -(d * (a + b)).sum(dim=1) / (na_safe + nb_safe)  # |b| - |a|
    diff = (d + b * (gap / nb_safe).unsqueeze(1)) / na_safe.unsqueeze(1)
    unlike = (na_safe > 2 * nb_safe) | (nb_safe > 2 * na_safe)
    if not host_reads_free(a):  # no host read: every row both ways, chosen on the device
        direct = a / na_safe.unsqueeze(1) - b / nb_safe.unsqueeze(1)
        return torch.where(unlike.unsqueeze(1), direct, diff), zero
    rows = unlike.nonzero().flatten()
    if rows.numel():  # those rows alone (a fifth more time for the MAD of a 10^5-node CSBM)
        diff[rows] = a[rows] / na_safe[rows].unsqueeze(1) - b[rows] / nb_safe[rows].unsqueeze(1)
    return diff, zero


def cosine_distance(a: Tensor, ea: Tensor, b: Tensor, eb: Tensor) -> Tensor:
    """``1 - cos(a_i, b_i) = 0.5 ||u_i - v_i||^2`` per row pair; 1 where a row is zero: ``[m]``."""
    diff, zero = unit_gap(*scaled_pair(a, ea, b, eb))
    return torch.where(zero, 1.0, 0.5 * diff.pow(2).sum(dim=1))


def row_dots(x: Tensor, y: Tensor) -> Tensor:
    """``[n]`` the dot products of the rows of two ``[n, d]`` arrays.

    On the CPU a batched product of ``[n, 1, d]`` by ``[n, d, 1]``: it forms no ``[n, d]``
    product (``torch.linalg.vecdot`` multiplies first, then sums: 256 MiB at 10^6 nodes and 32
    float64 channels) and sums each row in one pass, 1.1x to 3.7x faster than ``vecdot``
    from 2,708 x 32 to 10^6 x 32 float64 values on 2 cores (10^6 x 32: 24 ms against 89 ms).
    Elsewhere (no batched product of that shape is known to be fast on a GPU) and for inputs
    recorded by autograd, ``vecdot``.  Both round each row's sum differently (a few units in
    the last place), never beyond the metrics' tolerance."""
    if x.device.type != "cpu" or (torch.is_grad_enabled() and (x.requires_grad or y.requires_grad)):
        return torch.linalg.vecdot(x, y)
    return torch.bmm(x.unsqueeze(1), y.unsqueeze(2)).view(-1)


#: Up to this many values :func:`squared_total` is one dot product of the flattened state:
#: its rounding error is below ``(n - 1)`` units in the last place of the sum whatever the
#: order of the dot product's partial sums (6e-11 relative at this size).
DOT_VALUES = 1 << 19


def squared_total(x: Tensor) -> Tensor:
    """``sum_ij x_ij^2`` (0-d): a state of at most :data:`DOT_VALUES` values as one dot product
    of its flattened values (8 us against 41 us for the rows' sums of squares of a 2,708 x 32
    float64 state; a strided state is copied first, at most 4 MiB), a larger one as its rows'
    sums of squares (:func:`row_dots`), summed.  The same summation whatever the layout, so
    :func:`rms_norm`'s scaled path gives its fast path's numbers bit for bit."""
    if x.numel() <= DOT_VALUES:
        flat = x.reshape(-1)
        return torch.dot(flat, flat)
    return row_dots(x, x).sum()


def unit_rows(x64: Tensor, narrow: bool = False) -> Tensor:
    """Rows scaled to unit norm without overflow; all-zero rows stay zero (cosine 0).

    ``narrow``: ``x64`` holds values of a :data:`NARROW` dtype.  Then, or when every row
    norm is checked (on the CPU) to lie in ``[2**-400, 2**400]``, the rows are divided by
    their norms directly: the same numbers as the scaled path, bit for bit, in two passes.
    """
    if narrow or host_reads_free(x64):
        norm = torch.linalg.vector_norm(x64, dim=1, keepdim=True)
        if narrow:
            return x64 / torch.where(norm == 0, 1.0, norm)
        if norm.numel() and norms_safe(norm):
            return x64 / norm
    scaled = scale_rows(x64, row_exponents(x64))
    norm = torch.linalg.vector_norm(scaled, dim=1, keepdim=True)
    return scaled / torch.where(norm == 0, 1.0, norm)


def mean_unit_cosine(ux: Tensor, uy: Tensor, op: GraphOperator | None = None) -> Tensor:
    """``(1/n) sum_i u_i . v_i`` from unit rows (:func:`unit_rows`), per graph with a batched
    ``op``; cos near 1 is exact to ~1e-16 relative this way (only ``1 - cos`` needs
    :func:`unit_gap`)."""
    if op is None or op.batch is None:
        return torch.dot(ux.reshape(-1), uy.reshape(-1)) / count(ux.size(0))
    return segment_sum((ux * uy).sum(dim=1), op) / node_counts(op, ux.size(0))


def graph_exponents(x64: Tensor, op: GraphOperator | None = None) -> Tensor:
    """Per graph (``[B]``; 0-d for one graph), ``e`` with the graph's largest ``|x_ik| / 2**e``
    in ``[0.5, 1)``, within ``[-1000, 1000]`` (0 for a graph with no non-zero entry): dividing
    each graph's rows by ``2**e`` keeps their squares clear of overflow and underflow."""
    rows = row_exponents(x64)  # [n], also without channels
    rows = torch.where((x64 != 0).any(dim=1), rows, -(1 << 20))  # a zero row has no say
    if op is not None and op.batch is not None:
        top = torch.full((op.num_graphs,), -(1 << 20), dtype=torch.long, device=x64.device)
        top = top.scatter_reduce(0, op.batch, rows, "amax")
    else:
        top = rows.max() if rows.numel() else torch.tensor(-(1 << 20), device=x64.device)
    return torch.where(top == -(1 << 20), 0, top).clamp(-1000, 1000)


def graph_scaled(x64: Tensor, op: GraphOperator | None = None) -> tuple[Tensor, Tensor]:
    """``x64`` with each graph's rows divided by ``2**e`` (:func:`graph_exponents`: exact, the
    graph's largest entry brought to ``[0.5, 1)``), and those exponents (``[B]``; 0-d for one
    graph)."""
    exponent = graph_exponents(x64, op)
    factor = pow2(-exponent)
    if exponent.dim():
        assert op is not None and op.batch is not None
        factor = factor[op.batch]
    return x64 * factor.reshape(-1, 1), exponent


def rms_norm(x64: Tensor, op: GraphOperator | None = None, narrow: bool = False) -> Tensor:
    """``sqrt((1/n) ||x||^2)`` per graph (Inf with an infinite entry, NaN with a NaN), from
    power-of-two-scaled values unless a fast path (module docstring) applies; ``narrow``: see
    :func:`unit_rows`."""
    if op is not None and op.batch is not None:
        # one power-of-two scale per graph (the graph's largest entry), as if measured alone
        scaled, exponent = graph_scaled(x64, op)  # exponent: [B]
        sq = segment_sum(scaled.pow(2).sum(dim=1), op)
        return (sq / node_counts(op, x64.size(0))).sqrt() * pow2(exponent)
    if x64.numel() == 0:  # no node: NaN (0/0); nodes without columns: 0
        return x64.new_full((), math.nan if x64.size(0) == 0 else 0.0)
    n = count(x64.size(0))
    if narrow or host_reads_free(x64):
        # the scaled path's sum, bit for bit, when nothing over/underflows (the same sum of
        # values scaled by a power of two)
        total = squared_total(x64)
        if narrow or within(total, SQUARES_SAFE):  # (False for Inf and NaN)
            return total.div(n).sqrt()
    _, exponent = torch.frexp(torch.maximum(x64.amax().abs(), x64.amin().abs()))
    exponent = exponent.to(torch.int64).clamp(-1000, 1000)
    scaled = x64 * pow2(-exponent)  # exact power-of-two scaling: no overflow
    return squared_total(scaled).div(n).sqrt() * pow2(exponent)


# -- the pass over the edges ---------------------------------------------------------------------

#: Up to this many gathered values (8 MiB of float64) an undirected graph's edges are measured
#: in one chunk of pairs (:class:`EdgePairs`); larger graphs take TargetRuns's chunked pass.
PAIRS_VALUES = 1 << 20


class EdgePairs:
    r"""The merged edges of an operator whose every edge has its reverse, as pairs ``{i, j}``.

    Each pair's difference ``d = x_j - x_i`` (``j < i``) is formed once and serves both
    directions: ``(\Delta x)_i`` gets ``+p_{ij} d`` and ``(\Delta x)_j`` gets ``-p_{ji} d`` (one
    CSR product of the signed ``[n, pairs]`` matrix :attr:`signed`), and the edge sum gets
    ``(w_{ij} + w_{ji}) ||d||^2``.  The terms are those of :meth:`TargetRuns.differences` bit
    for bit (``fl(a - b) = -fl(b - a)``); only the order of the sums differs.  Half the
    differences and half the squares of the pass over every directed edge.

    The differences themselves are one CSR product of the ``[pairs, n]`` incidence matrix
    :attr:`incidence` (+1 at ``j``, -1 at ``i`` on each pair's row) with ``x``: each row sums
    ``x_j`` and ``-x_i``, one rounding, so ``fl(x_j - x_i)`` bit for bit as gathering both rows
    and subtracting, but the sign of a zero (``-0 - 0`` is ``-0``, the product's ``0 + -0 +
    -0`` is ``+0``; its square is the same), in 26 us against 59 us on Cora's 5,278 pairs and 32
    float64 channels on 2 cores (the two gathers wrote 2 x 1.3 MiB that the subtraction read
    back).
    """

    def __init__(
        self, src: Tensor, dst: Tensor, signed: Tensor, weight: Tensor, unit: bool
    ) -> None:
        self.src, self.dst = src, dst  # [pairs] the smaller and the larger node of each pair
        count = src.numel()
        ones = torch.ones(count, dtype=signed.dtype, device=src.device)
        self.incidence = csr_matrix(  # [pairs, n]: +1 at src (the smaller column), -1 at dst
            torch.arange(0, 2 * count + 1, 2, device=src.device),
            torch.stack([src, dst], dim=1).reshape(-1),
            torch.stack([ones, -ones], dim=1).reshape(-1),
            (count, signed.size(0)),
        )
        self.signed = signed  # [n, pairs] CSR: +p_ij at row i, -p_ji at row j
        self.weight = weight  # [pairs] w_ij + w_ji
        self.unit = unit  # every weight is 1: weight is 2 everywhere
        self.pairs = count
        self._local = threading.local()

    def scratch(self, x: Tensor) -> Tensor:
        """This thread's ``[pairs, d]`` buffer for ``x``'s differences."""
        return thread_buffers(self._local, (self.pairs, x.size(1)), x, count=1)[0]

    def differences(
        self, x: Tensor, laplacian: bool, edge_sum: bool, out: Tensor | None = None
    ) -> tuple[Tensor | None, Tensor | None]:
        """``Delta x`` (into ``out`` when given) and ``sum_e w_e ||x_src - x_dst||^2`` from one
        set of the pairs' differences (the incidence product)."""
        first = self.scratch(x)
        d = torch.addmm(first, self.incidence, x, beta=0, out=first)  # x_j - x_i, j < i
        total = None
        if edge_sum:
            if self.unit:
                total = 2.0 * squared_sum(d)
            else:
                total = torch.dot(torch.linalg.vecdot(d, d), self.weight)
        lap = None
        if laplacian:  # [n, d]; addmm with beta=0 is torch.sparse.mm's product, bit for bit
            out = x.new_empty(x.shape) if out is None else out
            lap = torch.addmm(out, self.signed, d, beta=0, out=out)
        return lap, total


_PAIRS: weakref.WeakKeyDictionary[TargetRuns, EdgePairs | None] = weakref.WeakKeyDictionary()


def edge_pairs(op: GraphOperator) -> EdgePairs | None:
    """The :class:`EdgePairs` of ``op`` (built once per operator), or None when some edge has
    no reverse, ``op`` is batched or it has more pairs than :data:`PAIRS_VALUES` (never
    measured by pairs: :func:`edge_pass` takes the chunked pass)."""
    runs = op.runs
    if runs in _PAIRS:
        return _PAIRS[runs]
    if (runs.nnz - op.num_nodes) // 2 > PAIRS_VALUES:
        # at least this many pairs (every edge but a self loop is half of one): more values
        # than edge_pass ever measures by pairs, whatever the width, so building them (at 10^6
        # nodes 0.3 GiB kept, a 1 GiB transient and seconds of sorting) would buy nothing
        return None
    pairs = None if op.batch is not None else _build_pairs(runs, op.num_nodes)
    _PAIRS[runs] = pairs
    return pairs


def _build_pairs(runs: TargetRuns, n: int) -> EdgePairs | None:
    """One search of the sorted ``(target, source)`` keys for every edge's reverse."""
    if runs.nnz == 0:
        return None
    key = runs.row * n + runs.col  # sorted: CSR order
    reverse = runs.col * n + runs.row
    at = torch.searchsorted(key, reverse).clamp_max(runs.nnz - 1)
    if not bool((key[at] == reverse).all()):
        return None  # a directed graph: TargetRuns's pass over every edge
    lower = runs.col < runs.row  # each pair once, as the edge j -> i with j < i
    src, dst = runs.col[lower], runs.row[lower]
    count = src.numel()
    pair = torch.arange(count, device=src.device)
    rows = torch.cat([dst, src])
    cols = torch.cat([pair, pair])
    values = torch.cat([runs.prob[lower], -runs.prob[at[lower]]])
    order = torch.argsort(rows * max(count, 1) + cols)
    rows, cols, values = rows[order], cols[order], values[order]
    crow = torch.searchsorted(rows, torch.arange(n + 1, device=rows.device))
    signed = csr_matrix(crow, cols, values, (n, count))
    weight = runs.weight[lower] + runs.weight[at[lower]]
    return EdgePairs(src, dst, signed, weight, runs.unit)


def edge_pass(
    x64: Tensor,
    op: GraphOperator,
    laplacian: bool = True,
    edge_sum: bool = True,
    out: Tensor | None = None,
    squares: bool = False,
) -> tuple[Tensor | None, Tensor | None]:
    """From one pass over the edge differences: ``Delta x`` ``[n, d]`` (with ``laplacian``;
    into ``out`` when given) and ``sum_e w_e ||x_src - x_dst||^2``
    (with ``edge_sum``; 0-d, or ``[B]`` for a batched ``op``).  Not poisoned (see
    :func:`poison`).  ``squares`` (one graph): ``||Delta x||_F^2`` (0-d) in place of
    ``Delta x``, which a large graph then never holds whole
    (:meth:`~oversmooth.graph.TargetRuns.differences`).

    An undirected graph that fits :data:`PAIRS_VALUES` is measured by its pairs
    (:class:`EdgePairs`); any other by :meth:`TargetRuns.differences` over every edge.
    """
    differentiable = x64.requires_grad and torch.is_grad_enabled()
    if not differentiable and op.batch is None:
        pairs = edge_pairs(op)
        if pairs is not None and pairs.pairs * x64.size(1) <= PAIRS_VALUES:
            lap, total = pairs.differences(x64, laplacian, edge_sum, out)
            return (squared_sum(lap) if lap is not None and squares else lap), total
    return op.runs.differences(x64, laplacian, edge_sum, op.num_graphs, out, squares=squares)


def laplacian(x64: Tensor, op: GraphOperator, out: Tensor | None = None) -> Tensor:
    """``Delta x`` on ``op``'s graph (exact: :func:`edge_pass`)."""
    lap, _ = edge_pass(x64, op, edge_sum=False, out=out)
    assert lap is not None
    return lap


def unweighted_edge_sum(x64: Tensor, op: GraphOperator) -> Tensor:
    """``sum over the graph's edges of ||x_src - x_dst||^2``, each pair once whatever its
    weight: the operator's merged edges of nonzero weight, a neighbour set as in the dense
    ``A[i, j] != 0``, so an edge list with repeated edges and its adjacency give one value (the
    list counted a repeat twice, its coalesced adjacency once: an audit); not poisoned."""
    runs = op.runs
    total = x64.new_zeros(()) if runs.graph is None else x64.new_zeros(op.num_graphs)
    src, dst = runs.col, runs.row
    present = None if runs.unit else runs.weight != 0  # every weight 1: every edge present
    for part in _edge_chunks(runs.nnz, x64.size(1)):
        sq = (x64[src[part]] - x64[dst[part]]).pow(2).sum(dim=1)  # [chunk]
        if present is not None:
            sq = torch.where(present[part], sq, 0.0)
        if runs.graph is None:
            total = total + sq.sum()
        else:
            total.index_add_(0, runs.graph[part], sq)
    return total


def head_energies(x64: Tensor, src: Tensor, dst: Tensor, alpha: Tensor) -> Tensor:
    """Each head's Laplacian energy ``(1/n) ||P_h x - x||^2`` from its edge weights ``alpha``
    ``[E, h]`` (rows summing to 1), by edge differences: ``[h]``."""
    from oversmooth.graph import _edge_laplacian

    lap = _edge_laplacian(x64, src, dst, alpha)  # [n, h, d]
    return lap.pow(2).sum(dim=(0, 2)) / count(x64.size(0)) + poison(x64)


# -- per-graph helpers ---------------------------------------------------------------------------


def first_rows(op: GraphOperator, candidate: Tensor) -> Tensor:
    """Per graph, the smallest node index where ``candidate`` holds (else the graph's first
    node): ``[B]`` long (``n`` for a graph without nodes)."""
    assert op.batch is not None
    n = op.num_nodes
    index = torch.arange(n, device=op.device)
    first = torch.full((op.num_graphs,), n, dtype=torch.long, device=op.device)
    first = first.scatter_reduce(0, op.batch, index, "amin")
    hit = torch.full((op.num_graphs,), n, dtype=torch.long, device=op.device)
    hit = hit.scatter_reduce(0, op.batch, torch.where(candidate, index, n), "amin")
    return torch.where(hit < n, hit, first)


def pad_graphs(values: Tensor, op: GraphOperator) -> Tensor:
    """Rows ``[n, ...]`` of a batch as one zero-padded ``[B, max_nodes, ...]`` tensor (graph
    ``b``'s rows first, in node order); one host read of the largest graph size."""
    assert op.batch is not None and op.graph_nodes is not None
    counts = op.graph_nodes.to(torch.long)
    longest = int(counts.max()) if op.num_graphs else 0
    order = torch.argsort(op.batch, stable=True)
    start = torch.cumsum(counts, 0) - counts  # [B] first position of each graph in `order`
    graph_of = op.batch[order]
    slot = torch.arange(order.numel(), device=values.device) - start[graph_of]
    out = values.new_zeros((op.num_graphs, longest) + tuple(values.shape[1:]))
    out[graph_of, slot] = values[order]
    return out


def centred(x64: Tensor, op: GraphOperator | None = None) -> Tensor:
    """``X - 1 xbar^T`` (per graph with a batched ``op``) in two passes: one reference row of
    the graph is subtracted first (exact for near-constant states, Sterbenz), then the mean of
    what is left, so a common offset never enters a sum.  NaN/Inf stay in their graph."""
    if x64.size(0) == 0:
        return x64
    if op is None or op.batch is None:
        shifted = x64 - x64[:1]
        return shifted - shifted.mean(dim=0, keepdim=True)
    first = first_rows(op, torch.zeros_like(op.batch, dtype=torch.bool))
    shifted = x64 - x64[first.clamp_max(x64.size(0) - 1)[op.batch]]
    mean = x64.new_zeros(op.num_graphs, x64.size(1)).index_add_(0, op.batch, shifted)
    sizes = node_counts(op, x64.size(0))
    assert isinstance(sizes, Tensor)
    return shifted - (mean / sizes.unsqueeze(1))[op.batch]
