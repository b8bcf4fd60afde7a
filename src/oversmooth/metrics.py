"""Per-layer measures of oversmoothing and of the curse of depth.

Every function here is pure: ``(x, graph, ...) -> 0-d float64 tensor`` on
``x``'s device.  ``graph`` is either an ``edge_index`` tensor or a prebuilt
:class:`~oversmooth.graph.GraphOperator`.  With an operator nothing inside
synchronises with the host (except the SVD of :func:`effective_rank` on CUDA);
from an ``edge_index`` the operator is built and validated first, which reads
the index range once -- build it once and reuse it when you measure many
tensors on the same graph, as :class:`~oversmooth.probe.Probe` does.  Conventions (see
:mod:`oversmooth.graph`): messages flow
``edge_index[0] -> edge_index[1]``, node ``i``'s neighbours ``N_i`` are the
sources of the edges that enter it, :math:`d_i = \\sum_j \\omega_{ij}`.

All arithmetic is done in float64, whatever ``x``'s dtype: energies of
``1e-14`` are real results at depth 256 and float32 accumulation destroys them.
Nothing builds an ``n x n`` matrix: neighbourhood sums go over the edge list in
chunks, ``O(|E| d)`` time and ``O(n d)`` memory.

Exactness: every metric agrees with an extended-precision reference to 1e-10
relative on float64 states, also on near-constant ones (a common offset with a
spread down to 1e-10 of it: the oversmoothed regime), and constant input gives
exactly 0.  Differences are formed before squares and products (the Laplacian is
summed from edge differences, ``1 - cos`` is ``0.5 ||u - v||^2`` with ``u - v``
built from ``x - y``), and norms are taken of rows scaled by a power of two, so
finite rows never overflow them.  :class:`~oversmooth.probe.Probe` calls the same
kernels (the ``_``-prefixed functions below).

Non-finite input: NaN or Inf anywhere in ``x`` (also on an isolated node that no
edge reads) makes the result NaN (or Inf); :func:`effective_rank` returns NaN
instead of raising.  Nothing is dropped silently; check ``torch.isfinite`` on the
result.  Complex ``x`` is refused.
"""

from __future__ import annotations

from typing import Literal
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from oversmooth.graph import (
    GraphOperator,
    _edge_chunks,
    _edge_laplacian,
    as_graph,
    dense_to_rows,
    validate_features,
)
from oversmooth.resources import check_energy_order

__all__ = [
    "dirichlet_energy",
    "laplacian_energy",
    "rayleigh_energy",
    "energy",
    "rusch_dirichlet_energy",
    "mean_average_distance",
    "effective_rank",
    "feature_norm",
    "mean_cosine_similarity",
    "relative_energy",
    "layer_similarity",
    "normalized_dirichlet_energy",
    "rank_one_distance",
    "stream_variance",
    "angular_distance",
    "relative_update",
]


Reduce = Literal["mean", "none"]


def _prepare(
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


def _batch_operator(batch: object, x: Tensor) -> GraphOperator | None:
    """For the graph-free metrics: a ``batch`` vector (or a ``Batch`` holding one) as an
    edgeless operator carrying the validated batch, or None."""
    if batch is not None and not isinstance(batch, Tensor):
        batch = getattr(batch, "batch", None)
        if batch is None:
            return None
    if batch is None:
        return None
    empty = torch.empty(2, 0, dtype=torch.long, device=x.device)
    return GraphOperator(empty, num_nodes=x.size(0), batch=batch)


def _finish(value: Tensor, op: GraphOperator | None, reduce: str) -> Tensor:
    """Apply ``reduce`` to a per-graph value: ``"mean"`` averages the graphs of a batch (a
    single graph is returned as is, 0-d); ``"none"`` keeps one value per graph ``[B]``."""
    if reduce not in ("mean", "none"):
        raise ValueError(f"reduce: expected one of 'mean', 'none', received {reduce!r}")
    batched = op is not None and op.batch is not None
    if reduce == "none":
        return value if batched else value.unsqueeze(0)
    return value.mean(dim=0) if batched else value


# -- exact kernels ----------------------------------------------------------------------------
# Shared by the functions below and by the Probe (one implementation per metric).  They take
# float64 tensors that are already validated and never synchronise with the host.  The rules
# that make them exact on near-constant states (the oversmoothed regime):
#   * differences are formed first, from the float64 inputs (x_j - x_i is exact by Sterbenz's
#     lemma when the two values are within a factor 2), and only then scaled, squared, summed;
#   * 1 - cos is 0.5 ||u - v||^2, with u - v built from x - y (never from rounded unit rows);
#   * norms are taken of rows scaled by a power of two (exact), so they cannot overflow;
#   * NaN/Inf anywhere in x poisons the result, also on nodes no edge touches.


def _poison(x64: Tensor, op: GraphOperator | None = None) -> Tensor:
    """0-d: 0.0 when every entry of ``x64`` is finite, NaN otherwise (no host sync); with a
    batched ``op``, one such value per graph ``[B]``."""
    if op is not None and op.batch is not None:
        if x64.size(1) == 0:
            return x64.new_zeros(op.num_graphs)
        rows = x64.amax(dim=1) * 0.0 + x64.amin(dim=1) * 0.0  # [n]
        return _segment(rows, op)
    if x64.numel() == 0:
        return x64.new_zeros(())
    # NaN propagates through the min and max, +-Inf * 0 = NaN; one pass, no n x d temporary
    low, high = torch.aminmax(x64)
    return low * 0.0 + high * 0.0


# -- fast paths -------------------------------------------------------------------------------
# A sum of squares in float64 is the same number with or without the power-of-two scaling
# above (scaling by 2**k is exact) unless a square overflows or underflows.  Two cases rule
# that out without the scaling pass: values that came from a narrower float (float32 and
# below: squares lie in [1e-90, 1e77]), and, on the CPU, where reading a value to the host
# costs nothing, a result checked to lie in [2**-800, 2**800].  Anything else (and every
# float64 state on a GPU, where a host read would stall the pipeline) takes the scaled path.

#: Dtypes whose squares, and sums of up to 2**60 of them, neither overflow nor underflow in
#: float64.
NARROW = (torch.float32, torch.float16, torch.bfloat16)
_SQUARES_SAFE = (2.0**-800, 2.0**800)
_NORMS_SAFE = (2.0**-400, 2.0**400)


def _host_reads_free(x: Tensor) -> bool:
    """Whether reading a value of ``x`` to the host costs nothing (a CPU tensor)."""
    return x.device.type == "cpu"


def _within(value: Tensor, bounds: tuple[float, float]) -> bool:
    """``bounds[0] <= value <= bounds[1]`` (False for NaN); reads ``value`` to the host."""
    return bounds[0] <= float(value) <= bounds[1]


def _norms_safe(norm: Tensor) -> bool:
    """Every row norm in ``[2**-400, 2**400]`` (no zero row): read to the host."""
    low, high = torch.aminmax(norm)
    return _within(low, _NORMS_SAFE) and _within(high, _NORMS_SAFE)


def _segment(values: Tensor, op: GraphOperator | None, edges: bool = False) -> Tensor:
    """Sum of per-node (or per-edge) ``values`` ``[m]``: 0-d for one graph, ``[B]`` per graph
    for a batched ``op`` (one ``index_add_``, no loop over graphs)."""
    if op is None or op.batch is None:
        return values.sum()
    index = op.edge_graph if edges else op.batch
    assert index is not None
    return values.new_zeros(op.num_graphs).index_add_(0, index, values)


def _sizes(op: GraphOperator | None, n: int) -> Tensor | float:
    """Node count per graph (at least 1), the ``1/n`` of every per-node mean."""
    if op is None or op.graph_nodes is None:
        return float(max(n, 1))
    return op.graph_nodes.clamp_min(1.0)


def _pow2(exponent: Tensor) -> Tensor:
    """``2 ** exponent`` (float64, exact) for integer exponents in ``[-1074, 1023]``."""
    return torch.pow(2.0, exponent.to(torch.float64))


def _row_exponents(x64: Tensor) -> Tensor:
    """Per row, ``e`` with ``max_k |x_ik| / 2**e`` in ``[0.5, 1)`` (0 for zero rows): ``[n]``."""
    if not x64.size(1):
        return torch.zeros(len(x64), dtype=torch.int64, device=x64.device)
    top = torch.maximum(x64.amax(dim=1).abs(), x64.amin(dim=1).abs())  # max |x_ik|, [n]
    _, exponent = torch.frexp(top)
    return exponent.to(torch.int64)


def _scale_rows(x64: Tensor, exponent: Tensor) -> Tensor:
    """``x_i / 2**e_i`` exactly (one power-of-two factor per row).  Exponents below -1000
    (rows of subnormal size) are scaled by ``2**1000`` only, which already keeps their
    squares clear of underflow; the factor itself never overflows."""
    return x64 * _pow2(-exponent.clamp_min(-1000)).unsqueeze(1)


def _scaled_pair(a: Tensor, ea: Tensor, b: Tensor, eb: Tensor) -> tuple[Tensor, Tensor]:
    """Rows ``a_i``, ``b_i`` scaled by one common power of two (their larger one), so that their
    difference is still the exact difference; rows more than 2**512 apart in size are scaled
    separately (their cosine is far from 1 or they are parallel, and nothing cancels)."""
    common = torch.maximum(ea, eb)
    apart = (ea - eb).abs() > 512
    return (
        _scale_rows(a, torch.where(apart, ea, common)),
        _scale_rows(b, torch.where(apart, eb, common)),
    )


def _unit_gap(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    r"""``u - v`` for ``u = a/|a|``, ``v = b/|b|`` without cancellation, and the zero-row mask.

    ``u - v = (d + v (|b| - |a|)) / |a|`` with ``d = a - b`` and
    ``|b| - |a| = -(d . (a + b)) / (|a| + |b|)``: every term is formed from ``d``, so rows
    that agree to 10 digits still give ``u - v`` to full relative precision.  Rows must be
    scaled (:func:`_scaled_pair`) so that their norms cannot overflow.
    """
    na = torch.linalg.vector_norm(a, dim=1)
    nb = torch.linalg.vector_norm(b, dim=1)
    zero = (na == 0) | (nb == 0)
    na_safe = torch.where(zero, 1.0, na)
    nb_safe = torch.where(zero, 1.0, nb)
    d = a - b
    gap = -(d * (a + b)).sum(dim=1) / (na_safe + nb_safe)  # |b| - |a|
    diff = (d + b * (gap / nb_safe).unsqueeze(1)) / na_safe.unsqueeze(1)
    return diff, zero


def _cosine_distance(a: Tensor, ea: Tensor, b: Tensor, eb: Tensor) -> Tensor:
    """``1 - cos(a_i, b_i) = 0.5 ||u_i - v_i||^2`` per row pair; 1 where a row is zero: ``[m]``."""
    diff, zero = _unit_gap(*_scaled_pair(a, ea, b, eb))
    return torch.where(zero, 1.0, 0.5 * diff.pow(2).sum(dim=1))


def _unit_rows(x64: Tensor, narrow: bool = False) -> Tensor:
    """Rows scaled to unit norm without overflow; all-zero rows stay zero (cosine 0).

    ``narrow``: ``x64`` holds values of a :data:`NARROW` dtype.  Then, or when every row
    norm is checked (on the CPU) to lie in ``[2**-400, 2**400]``, the rows are divided by
    their norms directly: the same numbers as the scaled path, bit for bit, in two passes.
    """
    if narrow or _host_reads_free(x64):
        norm = torch.linalg.vector_norm(x64, dim=1, keepdim=True)
        if narrow:
            return x64 / torch.where(norm == 0, 1.0, norm)
        if norm.numel() and _norms_safe(norm):
            return x64 / norm
    scaled = _scale_rows(x64, _row_exponents(x64))
    norm = torch.linalg.vector_norm(scaled, dim=1, keepdim=True)
    return scaled / torch.where(norm == 0, 1.0, norm)


def _half_edge_sum(x64: Tensor, op: GraphOperator, weighted: bool = True) -> Tensor:
    """sum over edges of w_e * ||x_src - x_dst||^2 (float64; differences first); with
    ``weighted=False`` every edge of the list counts 1 whatever its weight."""
    if weighted:
        _, total = op.runs.differences(x64, laplacian=False, num_graphs=op.num_graphs)
        assert total is not None
        return total + _poison(x64, op)
    total = x64.new_zeros(()) if op.batch is None else x64.new_zeros(op.num_graphs)
    src, dst = op.edge_index
    for part in _edge_chunks(op.num_edges, x64.size(1)):
        sq = (x64[src[part]] - x64[dst[part]]).pow(2).sum(dim=1)  # [chunk]
        if op.edge_graph is None:
            total = total + sq.sum()
        else:
            total.index_add_(0, op.edge_graph[part], sq)
    return total + _poison(x64, op)


def _laplacian_and_edge_sum(
    x64: Tensor,
    op: GraphOperator,
    out: Tensor | None = None,
    scratch: tuple[Tensor, Tensor] | None = None,
    poison: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``Delta x`` (into ``out`` when given and needed) and ``sum_e w_e ||x_src - x_dst||^2``
    from one pass over the edge differences (the Probe's per-layer work; see
    :meth:`TargetRuns.differences`).
    ``scratch``: two float64 buffers of ``[op.runs.scratch_rows(d), d]`` reused across calls
    (fresh buffers of that size cost page faults on every call); the arithmetic is the same
    either way.  ``poison``: the :func:`_poison` of ``x64`` when the caller has it already."""
    lap, total = op.runs.differences(x64, True, True, op.num_graphs, out, scratch)
    assert lap is not None and total is not None
    return lap, total + (_poison(x64, op) if poison is None else poison)


def _laplacian(x64: Tensor, op: GraphOperator, out: Tensor | None = None) -> Tensor:
    """``Delta x`` on ``op``'s graph (exact kernel: :meth:`TargetRuns.differences`)."""
    lap, _ = op.runs.differences(x64, edge_sum=False, out=out)
    assert lap is not None
    return lap


def _squared_rows(y: Tensor) -> Tensor:
    return y.pow(2).sum(dim=1)  # [num_nodes]


def _measure_sum(sq: Tensor, op: GraphOperator, measure: str) -> Tensor:
    if measure == "counting":
        return _segment(sq, op) / _sizes(op, op.num_nodes)
    if measure == "degree":
        return _segment(op.degree * sq, op) / _sizes(op, op.num_nodes)
    raise ValueError(f"measure: expected one of 'counting', 'degree', received {measure!r}")


def _energy_kernel(
    x64: Tensor,
    op: GraphOperator,
    order: int,
    measure: str,
    lap: Tensor | None = None,
    edge_sum: Tensor | None = None,
    poison: Tensor | None = None,
) -> Tensor:
    """E_m from ``x64``; the Probe passes what it has cached: ``lap`` (``Delta x``),
    ``edge_sum`` (``sum_e w_e ||x_src - x_dst||^2``, poisoned like :func:`_half_edge_sum`) and
    ``poison`` (:func:`_poison` of ``x64``)."""
    nan_if_any = _poison(x64, op) if poison is None else poison
    y = x64
    for k in range(order // 2):
        y = lap if (k == 0 and lap is not None) else _laplacian(y, op)
    if order % 2:
        total = edge_sum if (order == 1 and edge_sum is not None) else _half_edge_sum(y, op)
        return 0.5 * total / _sizes(op, op.num_nodes) + nan_if_any
    if measure == "counting" and op.batch is None:
        flat = y.reshape(-1)
        return torch.dot(flat, flat) / max(op.num_nodes, 1) + nan_if_any
    return _measure_sum(_squared_rows(y), op, measure) + nan_if_any


def _mad_neighbors(x64: Tensor, op: GraphOperator) -> Tensor:
    exponent = _row_exponents(x64)
    dist = x64.new_zeros(op.num_nodes)
    count = x64.new_zeros(op.num_nodes)
    src, dst = op.edge_index
    for part in _edge_chunks(op.num_edges, x64.size(1)):
        s, t = src[part], dst[part]
        gap = _cosine_distance(x64[t], exponent[t], x64[s], exponent[s])  # [chunk]
        dist.index_add_(0, t, gap)
        count.index_add_(0, t, torch.ones_like(gap))
    has = count > 0
    per_node = torch.where(has, dist / count.clamp_min(1.0), 0.0)
    if op.batch is None:
        return per_node.sum() / has.sum().clamp_min(1) + _poison(x64)
    return _segment(per_node, op) / _segment(has.double(), op).clamp_min(1) + _poison(x64, op)


def _mad_global(x64: Tensor, op: GraphOperator | None = None) -> Tensor:
    r"""Mean of ``1 - cos`` over ordered pairs ``i != j`` in ``O(n d)`` (per graph with a
    batched ``op``).

    Over the ``m`` non-zero rows, :math:`\sum_{i \ne j} \tfrac12 \|u_i - u_j\|^2 =
    m \sum_i \|u_i - \bar u\|^2`; that sum is shift-invariant, so it is taken of
    ``w_i = u_i - u_r`` (``r`` the first non-zero row, ``w_i`` from :func:`_unit_gap`)
    and never cancels.  Pairs with a zero row count distance 1.
    """
    if op is not None and op.batch is not None:
        return _mad_global_batched(x64, op)
    n = x64.size(0)
    if n < 2:
        return x64.new_zeros(()) + _poison(x64)
    exponent = _row_exponents(x64)
    nonzero = (x64 != 0).any(dim=1)  # [n]
    ref = torch.argmax(nonzero.to(torch.int8))  # first non-zero row (0 when there is none)
    a, b = _scaled_pair(x64, exponent, x64[ref].expand_as(x64), exponent[ref].expand(n))
    w, _ = _unit_gap(a, b)  # [n, d] u_i - u_ref
    w = w * nonzero.unsqueeze(1)
    m = nonzero.sum().to(torch.float64)
    centred = (w - w.sum(dim=0) / m.clamp_min(1.0)) * nonzero.unsqueeze(1)
    pair_sum = m * centred.pow(2).sum() + (n * (n - 1) - m * (m - 1))
    return pair_sum / (n * (n - 1)) + _poison(x64)


def _first_rows(op: GraphOperator, candidate: Tensor) -> Tensor:
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


def _mad_global_batched(x64: Tensor, op: GraphOperator) -> Tensor:
    """:func:`_mad_global` of every graph of a batch at once (segment sums over ``batch``)."""
    assert op.batch is not None and op.graph_nodes is not None
    batch, size = op.batch, op.graph_nodes
    n = x64.size(0)
    if n == 0:
        return x64.new_zeros(op.num_graphs)
    exponent = _row_exponents(x64)
    nonzero = (x64 != 0).any(dim=1)  # [n]
    ref = _first_rows(op, nonzero).clamp_max(n - 1)[batch]  # [n] reference row of i's graph
    a, b = _scaled_pair(x64, exponent, x64[ref], exponent[ref])
    w, _ = _unit_gap(a, b)  # [n, d] u_i - u_ref(i)
    w = w * nonzero.unsqueeze(1)
    m = _segment(nonzero.to(torch.float64), op)  # [B]
    mean = x64.new_zeros(op.num_graphs, x64.size(1)).index_add_(0, batch, w)
    mean = mean / m.clamp_min(1.0).unsqueeze(1)
    centred = (w - mean[batch]) * nonzero.unsqueeze(1)
    pair_sum = m * _segment(centred.pow(2).sum(dim=1), op) + (size * (size - 1) - m * (m - 1))
    value = torch.where(size >= 2, pair_sum / (size * (size - 1)).clamp_min(1.0), 0.0)
    return value + _poison(x64, op)


def _mean_unit_cosine(ux: Tensor, uy: Tensor, op: GraphOperator | None = None) -> Tensor:
    """``(1/n) sum_i u_i . v_i`` from unit rows (:func:`_unit_rows`), per graph with a batched
    ``op``; cos near 1 is exact to ~1e-16 relative this way (only ``1 - cos`` needs
    :func:`_unit_gap`)."""
    if op is None or op.batch is None:
        return torch.dot(ux.reshape(-1), uy.reshape(-1)) / max(ux.size(0), 1)
    return _segment((ux * uy).sum(dim=1), op) / _sizes(op, ux.size(0))


def _head_energies(x64: Tensor, src: Tensor, dst: Tensor, alpha: Tensor) -> Tensor:
    """Each head's Laplacian energy ``(1/n) ||P_h x - x||^2`` from its edge weights
    ``alpha`` ``[E, h]`` (rows summing to 1), by edge differences: ``[h]``."""
    lap = _edge_laplacian(x64, src, dst, alpha)  # [n, h, d]
    return lap.pow(2).sum(dim=(0, 2)) / max(x64.size(0), 1) + _poison(x64)


def _feature_norm(x64: Tensor, op: GraphOperator | None = None, narrow: bool = False) -> Tensor:
    """``sqrt((1/n) ||x||^2)`` (Inf with an infinite entry, NaN with a NaN); ``narrow``: see
    :func:`_unit_rows`."""
    if op is not None and op.batch is not None:
        # one power-of-two scale per graph (the graph's largest entry), as if measured alone
        rows = _row_exponents(x64) if x64.numel() else x64.new_zeros(0, dtype=torch.long)
        top = torch.full((op.num_graphs,), -(1 << 20), dtype=torch.long, device=x64.device)
        has = (x64 != 0).any(dim=1) if x64.size(1) else x64.new_zeros(0, dtype=torch.bool)
        rows = torch.where(has, rows, -(1 << 20))
        top = top.scatter_reduce(0, op.batch, rows, "amax")
        exponent = torch.where(top == -(1 << 20), 0, top).clamp(-1000, 1000)  # [B]
        scaled = x64 * _pow2(-exponent)[op.batch].unsqueeze(1)
        sq = _segment(scaled.pow(2).sum(dim=1), op)
        return (sq / _sizes(op, x64.size(0))).sqrt() * _pow2(exponent)
    if x64.numel() == 0:
        return x64.new_zeros(())
    n = max(x64.size(0), 1)
    if narrow or _host_reads_free(x64):
        flat = x64.reshape(-1)
        total = torch.dot(flat, flat)  # the scaled path's sum when nothing over/underflows
        if narrow or _within(total, _SQUARES_SAFE):  # (False for Inf and NaN)
            return total.div(n).sqrt()
    _, exponent = torch.frexp(torch.maximum(x64.amax().abs(), x64.amin().abs()))
    exponent = exponent.to(torch.int64).clamp(-1000, 1000)
    flat = (x64 * _pow2(-exponent)).reshape(-1)  # exact power-of-two scaling: no overflow
    return torch.dot(flat, flat).div(n).sqrt() * _pow2(exponent)


def _inv_sqrt_degree(op: GraphOperator) -> Tensor:
    """``d_i^{-1/2}`` per node, 0 where ``d_i = 0`` (the pseudo-inverse convention): ``[n]``."""
    has = op.degree > 0
    return torch.where(has, op.degree.clamp_min(1e-300).rsqrt(), 0.0)


def _normalized_edge_sum(x64: Tensor, op: GraphOperator) -> Tensor:
    """``sum_e w_e ||x_src / sqrt(d_src) - x_dst / sqrt(d_dst)||^2`` (float64), with
    ``1/sqrt(0) := 0``, poisoned like :func:`_half_edge_sum`.

    The difference is formed as ``(x_s - x_t) s_s + x_t (s_s - s_t)`` with ``s = d^{-1/2}``
    and ``s_s - s_t = (d_t - d_s) s_s s_t / (sqrt(d_s) + sqrt(d_t))``: a common offset of the
    rows cancels in ``x_s - x_t`` before any rounding, and equal degrees give exactly 0 in the
    second term, so near-constant states keep their spread."""
    inv = _inv_sqrt_degree(op)
    root = op.degree.sqrt()
    src, dst = op.edge_index
    inv_s, inv_t = inv[src], inv[dst]  # [E] per-edge scalars, O(|E|)
    gap = torch.where(
        (inv_s > 0) & (inv_t > 0),
        (op.degree[dst] - op.degree[src])
        * inv_s
        * inv_t
        / (root[src] + root[dst]).clamp_min(1e-300),
        inv_s - inv_t,
    )  # [E] s_src - s_dst without cancellation
    total = x64.new_zeros(()) if op.edge_graph is None else x64.new_zeros(op.num_graphs)
    for part in _edge_chunks(op.num_edges, x64.size(1)):
        xs = torch.index_select(x64, 0, src[part])
        xt = torch.index_select(x64, 0, dst[part])
        diff = xs.sub_(xt).mul_(inv_s[part].unsqueeze(1)).addcmul_(xt, gap[part].unsqueeze(1))
        sq = diff.mul_(diff).sum(dim=1)  # [chunk]
        if op.edge_graph is None:
            total = total + torch.dot(op.edge_weight[part], sq)
        else:
            total.index_add_(0, op.edge_graph[part], op.edge_weight[part] * sq)
    return total + _poison(x64, op)


def _centred(x64: Tensor, op: GraphOperator | None = None) -> Tensor:
    """``X - 1 xbar^T`` (per graph with a batched ``op``) in two passes: one reference row of
    the graph is subtracted first (exact for near-constant states, Sterbenz), then the mean of
    what is left, so a common offset never enters a sum.  NaN/Inf stay in their graph."""
    if x64.size(0) == 0:
        return x64
    if op is None or op.batch is None:
        centred = x64 - x64[:1]
        return centred - centred.mean(dim=0, keepdim=True)
    first = _first_rows(op, torch.zeros_like(op.batch, dtype=torch.bool))
    centred = x64 - x64[first.clamp_max(x64.size(0) - 1)[op.batch]]
    mean = x64.new_zeros(op.num_graphs, x64.size(1)).index_add_(0, op.batch, centred)
    sizes = _sizes(op, x64.size(0))
    assert isinstance(sizes, Tensor)
    return centred - (mean / sizes.unsqueeze(1))[op.batch]


def _rank_one_distance(x64: Tensor, op: GraphOperator | None = None) -> Tensor:
    """``||X - 1 xbar^T||_F / ||X||_F`` from two power-of-two-scaled norms (the ``1/n`` of
    both cancels); 0/0 = NaN for a zero (or empty) state."""
    return _feature_norm(_centred(x64, op), op) / _feature_norm(x64, op)


def _stream_variance(x64: Tensor, op: GraphOperator | None = None) -> Tensor:
    """``(1/(n d)) ||X - 1 xbar^T||_F^2``: the mean over channels of the (population)
    variance over nodes; NaN without channels."""
    rms = _feature_norm(_centred(x64, op), op)
    return rms.pow(2) / x64.size(1) if x64.size(1) else rms * float("nan")


def _relative_update(prev64: Tensor, x64: Tensor, op: GraphOperator | None = None) -> Tensor:
    """``||X - X_prev||_F / ||X_prev||_F`` (per graph); the difference is taken of the float64
    states, so it is exact for float32 states however close they are."""
    return _feature_norm(x64 - prev64, op) / _feature_norm(prev64, op)


def _angular_distance(prev64: Tensor, x64: Tensor, op: GraphOperator | None = None) -> Tensor:
    """``arccos(mean_i cos(prev_i, x_i)) / pi`` (per graph), as ``2 atan2(sqrt(mean ||u - v||^2),
    sqrt(mean ||u + v||^2)) / pi`` over the unit rows ``u, v``: for unit rows
    ``||u -+ v||^2 = 2 -+ 2 cos``, so the two means are ``2 (1 -+ mean cos)`` and the angle is
    exact where the mean cosine is near 1 or -1 (``arccos`` of a rounded cosine loses half the
    digits there).  Both chords are built from ``prev_i -+ x_i`` (:func:`_unit_gap`); a zero row
    counts as cosine 0."""
    ea, eb = _row_exponents(prev64), _row_exponents(x64)
    minus, zero = _unit_gap(*_scaled_pair(prev64, ea, x64, eb))  # u - v
    plus, _ = _unit_gap(*_scaled_pair(prev64, ea, -x64, eb))  # u + v
    two = torch.full_like(minus[:, 0], 2.0)
    gap = torch.where(zero, two, minus.pow(2).sum(dim=1))  # 2 - 2 cos (2 for a zero row)
    span = torch.where(zero, two, plus.pow(2).sum(dim=1))  # 2 + 2 cos
    theta = 2.0 * torch.atan2(_segment(gap, op).sqrt(), _segment(span, op).sqrt())
    return theta / torch.pi + _poison(prev64, op) + _poison(x64, op)


def _pad_graphs(values: Tensor, op: GraphOperator) -> Tensor:
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


def _entropy_rank(sv: Tensor) -> Tensor:
    """``exp(entropy(sv / sum sv))`` over the last dim (0 where every value is 0)."""
    total = sv.sum(dim=-1, keepdim=True)
    p = sv / total.clamp_min(1e-300)
    entropy = -(p * p.clamp_min(1e-300).log()).sum(dim=-1)
    return torch.where(total.squeeze(-1) > 0, entropy.exp(), torch.zeros_like(entropy))


def _effective_rank(x64: Tensor, op: GraphOperator | None = None) -> Tensor:
    clean = torch.where(torch.isfinite(x64), x64, 0.0)
    if op is not None and op.batch is not None:
        finite = _segment((~torch.isfinite(x64)).any(dim=1).to(torch.float64), op) == 0
        if x64.size(0) == 0:
            return x64.new_zeros(op.num_graphs)
        first = _first_rows(op, torch.zeros_like(op.batch, dtype=torch.bool))
        centred = clean - clean[first.clamp_max(x64.size(0) - 1)[op.batch]]
        mean = x64.new_zeros(op.num_graphs, x64.size(1)).index_add_(0, op.batch, centred)
        centred = centred - (mean / _sizes(op, 0).unsqueeze(1))[op.batch]  # type: ignore[union-attr]
        if centred.numel():  # one power-of-two scale per graph, as if measured alone
            top = x64.new_zeros(op.num_graphs).scatter_reduce(
                0, op.batch, centred.abs().amax(dim=1), "amax"
            )
            _, exponent = torch.frexp(top)
            centred = centred / _pow2(exponent.to(torch.int64).clamp(-537, 537))[
                op.batch
            ].unsqueeze(1)
        sv = torch.linalg.svdvals(_pad_graphs(centred, op))  # [B, k]; padding adds zero values
        return torch.where(finite, _entropy_rank(sv), float("nan"))
    finite = torch.isfinite(x64).all()
    # subtract one row first (exact for near-constant states), then the mean of what is left
    centred = clean - clean[:1]
    centred = centred - centred.mean(dim=0, keepdim=True)
    if centred.numel():  # a power-of-two scale keeps the SVD clear of over/underflow
        _, exponent = torch.frexp(centred.abs().amax())
        centred = centred / _pow2(exponent.to(torch.int64).clamp(-537, 537))
    sv = torch.linalg.svdvals(centred)
    return torch.where(finite, _entropy_rank(sv), float("nan"))


def _rayleigh(energy2: Tensor, x64: Tensor, op: GraphOperator | None) -> Tensor:
    """``E_2 / ((1/n) ||X||_F^2)`` from the counting Laplacian energy; 0 for a zero state."""
    norm = _feature_norm(x64, op)
    ratio = (energy2.sqrt() / norm.clamp_min(1e-300)).pow(2)  # ratio of roots: no overflow
    return torch.where(norm > 0, ratio, energy2 * 0.0)


def dirichlet_energy(
    x: Tensor,
    graph: object,
    edge_weight: Tensor | None = None,
    *,
    batch: Tensor | None = None,
    reduce: Reduce = "mean",
) -> Tensor:
    """First-order (Dirichlet) energy.

    .. math::

        E_1(X) = \\frac{1}{n} \\cdot \\frac12 \\sum_i \\sum_{j} \\omega_{ij} \\|X_j - X_i\\|^2
               = \\frac{1}{n} \\int_G |\\nabla_\\mu X|^2 \\, d\\mu

    The double sum runs over the edge list as given: an undirected graph stored
    with both directions (PyG's convention) counts every pair twice, and the
    ``1/2`` turns that into one count per pair.

    Args:
        x: ``[num_nodes, channels]`` node features (or a dense ``[B, N, channels]`` state
            with a graph built by ``as_graph(adj, mask=mask)``).
        graph: anything :func:`~oversmooth.graph.as_graph` accepts: ``edge_index``
            ``[2, num_edges]``, a PyG ``Data``/``Batch``, a sparse or dense adjacency, or a
            :class:`GraphOperator`.
        edge_weight: optional ``[num_edges]`` weights (only with an ``edge_index``).
        batch: optional ``[num_nodes]`` graph id of each node (a ``Batch`` brings its own):
            the metric is then computed per graph, each graph with its own ``1/n_g``.
        reduce: with several graphs, ``"mean"`` (default) averages the per-graph values,
            ``"none"`` returns them, ``[num_graphs]`` (``[1]`` for one graph).

    Returns:
        0-d float64 tensor on ``x.device`` (``[num_graphs]`` with ``reduce="none"``).

    Example:
        >>> ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])  # path 0-1-2
        >>> dirichlet_energy(torch.tensor([[0.0], [1.0], [3.0]]), ei)  # (1 + 4) / 3
        tensor(1.6667, dtype=torch.float64)
    """
    x64, op = _prepare(x, graph, edge_weight, batch)
    return _finish(0.5 * _half_edge_sum(x64, op) / _sizes(op, op.num_nodes), op, reduce)


def laplacian_energy(
    x: Tensor,
    graph: object,
    measure: Literal["counting", "degree"] = "counting",
    edge_weight: Tensor | None = None,
    *,
    batch: Tensor | None = None,
    reduce: Reduce = "mean",
) -> Tensor:
    """Laplacian energy, the default "energy" of the toolkit.

    .. math::

        E_2(X) = \\frac{1}{n} \\|PX - X\\|_F^2 \\quad (\\text{measure}=\\text{"counting"}), \\qquad
        \\frac{1}{n} \\sum_i d_i \\|(PX - X)_i\\|^2 \\quad (\\text{measure}=\\text{"degree"}).

    The counting form is exactly the factor that scales each head of nonlocal
    message passing; the degree form is :math:`\\frac1n \\int_G |\\Delta_\\mu X|^2 d\\mu`.
    Isolated nodes contribute 0 (see :mod:`oversmooth.graph`).  ``graph``, ``batch``
    and ``reduce`` as in :func:`dirichlet_energy`.

    Example:
        >>> ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])  # path 0-1-2
        >>> laplacian_energy(torch.tensor([[0.0], [1.0], [3.0]]), ei)  # (1 + 0.25 + 4) / 3
        tensor(1.7500, dtype=torch.float64)
    """
    x64, op = _prepare(x, graph, edge_weight, batch)
    if measure not in ("counting", "degree"):
        raise ValueError(f"measure: expected one of 'counting', 'degree', received {measure!r}")
    return _finish(_energy_kernel(x64, op, 2, measure), op, reduce)


def rayleigh_energy(
    x: Tensor,
    graph: object,
    edge_weight: Tensor | None = None,
    *,
    batch: Tensor | None = None,
    reduce: Reduce = "mean",
) -> Tensor:
    """Scale-invariant (Rayleigh-quotient) Laplacian energy.

    .. math::

        \\tilde E_2(X) = \\frac{E_2(X)}{\\frac1n \\|X\\|_F^2}
                      = \\frac{\\|PX - X\\|_F^2}{\\|X\\|_F^2}

    the Laplacian energy (counting measure, :func:`laplacian_energy`) divided by the mean
    squared node norm (``feature_norm(x) ** 2``): invariant to ``X -> cX``, so a stack whose
    features grow (GIN reaches norms of 1e5) is compared on the same footing as a normalised
    one.  It is the Rayleigh quotient of ``(P - I)^T (P - I)`` summed over the channels.  An
    all-zero ``X`` gives 0.  ``graph``, ``batch`` and ``reduce`` as in
    :func:`dirichlet_energy`; per graph, both norms are taken over that graph's nodes.

    Example:
        >>> ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])  # path 0-1-2
        >>> rayleigh_energy(torch.tensor([[0.0], [1.0], [3.0]]), ei)  # 5.25 / 10
        tensor(0.5250, dtype=torch.float64)
    """
    x64, op = _prepare(x, graph, edge_weight, batch)
    return _finish(_rayleigh(_energy_kernel(x64, op, 2, "counting"), x64, op), op, reduce)


def energy(
    x: Tensor,
    graph: object,
    order: int = 2,
    measure: Literal["counting", "degree"] = "degree",
    edge_weight: Tensor | None = None,
    *,
    batch: Tensor | None = None,
    reduce: Reduce = "mean",
) -> Tensor:
    """Higher-order energies :math:`E_m` (Guan & Shi 2025).

    .. math::

        E_{2k}(X) = \\frac1n \\int_G |\\Delta_\\mu^k X|^2 \\, d\\mu, \\qquad
        E_{2k+1}(X) = \\frac1n \\int_G |\\nabla_\\mu \\Delta_\\mu^k X|^2 \\, d\\mu .

    With the default ``measure="degree"`` the integral carries the degree
    measure, so ``energy(x, g, 1) == dirichlet_energy(x, g)`` and
    ``energy(x, g, 2) == laplacian_energy(x, g, measure="degree")``.
    ``measure="counting"`` replaces :math:`d\\mu` by the counting measure in the
    even orders (``energy(x, g, 2, "counting") == laplacian_energy(x, g)``); odd
    orders are gradient integrals and do not depend on it.

    Args:
        order: ``m >= 1``; orders above ``resources.MAX_ENERGY_ORDER`` (1000) are refused.
    """
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"order: expected an integer m >= 1, received {order!r}")
    check_energy_order(order)
    x64, op = _prepare(x, graph, edge_weight, batch)
    if measure not in ("counting", "degree"):
        raise ValueError(f"measure: expected one of 'counting', 'degree', received {measure!r}")
    return _finish(_energy_kernel(x64, op, order, measure), op, reduce)


def rusch_dirichlet_energy(
    x: Tensor, graph: object, *, batch: Tensor | None = None, reduce: Reduce = "mean"
) -> Tensor:
    """Dirichlet energy in the convention of Rusch et al. (2023), "A survey on
    oversmoothing in graph neural networks":

    .. math::

        \\sqrt{ \\frac1n \\sum_i \\sum_{j \\in N_i} \\|X_i - X_j\\|^2 }

    Unweighted, as in the survey: edge weights are ignored and every edge of the
    list counts once.  On an unweighted graph it equals ``sqrt(2 * dirichlet_energy)``.
    """
    x64, op = _prepare(x, graph, batch=batch)
    value = (_half_edge_sum(x64, op, weighted=False) / _sizes(op, op.num_nodes)).sqrt()
    return _finish(value, op, reduce)


def mean_average_distance(
    x: Tensor,
    graph: object | None = None,
    variant: Literal["neighbors", "global"] = "neighbors",
    *,
    batch: Tensor | None = None,
    reduce: Reduce = "mean",
) -> Tensor:
    """Mean average (cosine) distance, MAD (Chen et al. 2020).

    ``variant="neighbors"``:

    .. math::

        \\mathrm{MAD} = \\frac{1}{n'} \\sum_{i: N_i \\neq \\emptyset}
            \\frac{1}{|N_i|} \\sum_{j \\in N_i} \\bigl(1 - \\cos(X_i, X_j)\\bigr)

    where :math:`n'` counts the nodes that have neighbours (``n' = n`` without
    isolated nodes); neighbours are counted without weights, as in the paper.
    ``variant="global"`` averages over all ordered pairs ``i != j`` instead, in
    ``O(n d)`` through :math:`\\sum_{i \\ne j} (1 - \\cos) = m \\sum_i \\|u_i - \\bar u\\|^2`
    over the ``m`` non-zero rows, :math:`u_i = X_i / \\|X_i\\|`; it needs no graph.
    An all-zero row has cosine 0 with every row (distance 1).

    ``1 - cos`` is evaluated as :math:`\\tfrac12 \\|u_i - u_j\\|^2` with :math:`u_i - u_j`
    formed from :math:`X_i - X_j` (no cancellation), so MAD is exact (<= 1e-10 relative)
    on near-constant states.  Limit of the global variant: rows nearly parallel but of
    different lengths (``X_j ~ c X_i``, ``c != 1``) are resolved to ~1e-16 absolute only.
    """
    if variant not in ("neighbors", "global"):
        raise ValueError(f"variant: expected one of 'neighbors', 'global', received {variant!r}")
    if variant == "global":
        if graph is not None:  # the graph only brings the batch
            x64, op = _prepare(x, graph, batch=batch)
            return _finish(_mad_global(x64, op), op, reduce)
        validate_features(x)
        bop = _batch_operator(batch, x)
        return _finish(_mad_global(x.to(torch.float64), bop), bop, reduce)
    if graph is None:
        raise ValueError("graph: the 'neighbors' variant needs an edge_index or GraphOperator")
    x64, op = _prepare(x, graph, batch=batch)
    return _finish(_mad_neighbors(x64, op), op, reduce)


def effective_rank(x: Tensor, *, batch: object = None, reduce: Reduce = "mean") -> Tensor:
    """Effective rank (Roy & Vetterli 2007) of the centred features.

    .. math::

        \\mathrm{erank}(X) = \\exp\\Bigl(-\\sum_k p_k \\log p_k\\Bigr), \\qquad
        p_k = \\sigma_k / \\sum_l \\sigma_l

    with :math:`\\sigma_k` the singular values of ``X - mean(X, dim=0)``.  Ranges
    from 1 (rank collapse) to ``min(n, channels)``; an exactly constant ``X``
    gives 0; NaN or Inf in ``X`` gives NaN.  The centring subtracts one row first, so
    near-constant states keep their spread exactly.  Cost ``O(n d^2)`` (one SVD, which on
    CUDA synchronises inside the solver).  Graph-free: no ``graph`` argument; ``batch``
    (a ``[num_nodes]`` vector or a ``Batch``) gives one rank per graph (one batched SVD of
    the zero-padded graphs: zero rows add no singular value).
    """
    validate_features(x)
    bop = _batch_operator(batch, x)
    return _finish(_effective_rank(x.to(torch.float64), bop), bop, reduce)


def feature_norm(x: Tensor, *, batch: object = None, reduce: Reduce = "mean") -> Tensor:
    """Root-mean-square node norm :math:`\\sqrt{\\frac1n \\|X\\|_F^2}` (float64); per graph
    with ``batch`` (a ``[num_nodes]`` vector or a ``Batch``)."""
    validate_features(x)
    bop = _batch_operator(batch, x)
    return _finish(_feature_norm(x.to(torch.float64), bop, x.dtype in NARROW), bop, reduce)


def mean_cosine_similarity(
    x: Tensor, y: Tensor, *, batch: object = None, reduce: Reduce = "mean"
) -> Tensor:
    """:math:`\\mathrm{sim}(X, Y) = \\frac1n \\sum_i \\cos(X_i, Y_i)` for two states of the
    same nodes.

    Zero rows have cosine 0.  ``x`` and ``y`` must have the same shape.  Per graph with
    ``batch`` (a ``[num_nodes]`` vector or a ``Batch``).
    """
    validate_features(x)
    validate_features(y, "y")
    if x.shape != y.shape:
        raise ValueError(f"y: expected the shape of x {list(x.shape)}, received {list(y.shape)}")
    bop = _batch_operator(batch, x)
    x64, y64 = x.to(torch.float64), y.to(torch.float64)
    if bop is None:
        direct = _mean_cosine_direct(x64, y64, x.dtype in NARROW and y.dtype in NARROW)
        if direct is not None:
            return _finish(direct, bop, reduce)
    ux = _unit_rows(x64, x.dtype in NARROW)
    value = _mean_unit_cosine(ux, _unit_rows(y64, y.dtype in NARROW), bop)
    return _finish(value, bop, reduce)


def _mean_cosine_direct(x64: Tensor, y64: Tensor, narrow: bool) -> Tensor | None:
    """``(1/n) sum_i <x_i, y_i> / (|x_i| |y_i|)`` without forming unit rows, when no norm can
    overflow or underflow (``narrow`` values, or every norm checked on the CPU to lie in
    ``[2**-400, 2**400]``); None otherwise.  Zero rows have cosine 0."""
    if not (narrow or _host_reads_free(x64)) or not x64.numel():
        return None
    nx = torch.linalg.vector_norm(x64, dim=1)
    ny = torch.linalg.vector_norm(y64, dim=1)
    if not (narrow or (_norms_safe(nx) and _norms_safe(ny))):
        return None
    both = nx.mul_(ny)
    if narrow:  # checked norms are >= 2**-400: only here can a row be zero
        both = torch.where(both == 0, 1.0, both)  # a zero row gives 0 / 1
    return torch.linalg.vecdot(x64, y64).div_(both).sum() / x64.size(0)


def relative_energy(energies: Tensor | Sequence[float]) -> Tensor:
    """Relative energy change :math:`R(X^k) = (E(X^k) - E(X^{k-1})) / E(X^{k-1})`.

    Definition 2.1 of Guan & He (2025), the curse-of-depth indicator: a Pre-LN
    stack has ``R -> 0`` with depth (deep layers stop changing anything).

    Args:
        energies: ``[L]`` per-layer energies ``E(X^0), ..., E(X^{L-1})``, or
            ``[L, num_graphs]`` (one column per graph of a batch).

    Returns:
        float64 tensor of the same shape; entry 0 is NaN (no previous layer).  Where the
        previous energy is 0 the ratio is Inf (or NaN when both are 0), as IEEE
        division gives; nothing is clipped.
    """
    e = energies
    if type(e) is not Tensor or e.dtype is not torch.float64:
        e = torch.as_tensor(e, dtype=torch.float64)  # python floats must not pass float32
    if e.is_cpu and e.dim() == 1 and e.size(0) and not e.requires_grad:
        # the common case (a few hundred layers): numpy's ufuncs cost a fraction of torch's
        # per-call overhead and round the same IEEE subtraction and division
        a = e.numpy()
        out = np.empty_like(a)
        out[0] = np.nan
        change = out[1:]
        with np.errstate(divide="ignore", invalid="ignore"):  # x/0 is Inf or NaN, as in torch
            np.divide(np.subtract(a[1:], a[:-1], out=change), a[:-1], out=change)
        return torch.from_numpy(out)
    if e.dim() not in (1, 2):
        raise ValueError(
            "energies: expected a 1-D sequence of per-layer energies (or [L, num_graphs]), "
            f"received shape {list(e.shape)}"
        )
    result = torch.full_like(e, float("nan"))  # NaN at layer 0: no previous layer
    result[1:] = (e[1:] - e[:-1]) / e[:-1]
    return result


def layer_similarity(
    states: Tensor | Sequence[Tensor], *, batch: object = None, reduce: Reduce = "mean"
) -> Tensor:
    """The ``L x L`` matrix of inter-layer similarities :math:`\\mathrm{sim}(X^s, X^t)`.

    Args:
        states: ``L`` tensors ``[num_nodes, channels]`` of one shape, or one
            ``[L, num_nodes, channels]`` tensor.

    Returns:
        ``[L, L]`` float64 tensor, symmetric, with ones on the diagonal (zeros
        for an all-zero state).  Memory ``O(L n d)``: the states must be held.  With
        ``batch`` (a ``[num_nodes]`` vector or a ``Batch``) each graph has its own matrix:
        their mean, or ``[num_graphs, L, L]`` with ``reduce="none"``.
    """
    if isinstance(states, Tensor):
        if states.dim() != 3:
            raise ValueError(
                f"states: expected [L, num_nodes, channels] or a list of [num_nodes, channels], "
                f"received shape {list(states.shape)}"
            )
        stack = states
    else:
        states = list(states)
        if not states:
            raise ValueError("states: expected at least one layer state, received none")
        for k, s in enumerate(states):
            validate_features(s, f"states[{k}]")
            if s.shape != states[0].shape:
                raise ValueError(
                    f"states[{k}]: expected shape {list(states[0].shape)} like states[0], "
                    f"received {list(s.shape)}"
                )
        stack = torch.stack(states)
    n = stack.size(1)
    u = _unit_rows(stack.to(torch.float64).flatten(0, 1)).view(stack.shape)  # [L, n, d]
    bop = _batch_operator(batch, stack[0])
    if bop is None or bop.batch is None:
        flat = u.reshape(u.size(0), -1)  # [L, n*d]
        return _finish(flat @ flat.T / max(n, 1), None, reduce)
    padded = _pad_graphs(u.transpose(0, 1), bop)  # [B, max_n, L, d], zero rows add nothing
    flat = padded.transpose(1, 2).reshape(bop.num_graphs, u.size(0), -1)  # [B, L, max_n*d]
    sizes = _sizes(bop, n)
    assert isinstance(sizes, Tensor)
    return _finish(flat @ flat.transpose(1, 2) / sizes.view(-1, 1, 1), bop, reduce)


def normalized_dirichlet_energy(
    x: Tensor,
    graph: object,
    edge_weight: Tensor | None = None,
    *,
    self_loops: bool = False,
    batch: Tensor | None = None,
    reduce: Reduce = "mean",
) -> Tensor:
    """Symmetric-normalised Dirichlet energy (Cai & Wang 2020, "A note on over-smoothing for
    graph neural networks").

    .. math::

        E_{\\mathrm{norm}}(X) = \\frac{1}{n} \\cdot \\frac12 \\sum_i \\sum_j \\omega_{ij}
            \\Bigl\\| \\frac{X_i}{\\sqrt{d_i}} - \\frac{X_j}{\\sqrt{d_j}} \\Bigr\\|^2
          = \\frac1n \\mathrm{tr}\\bigl(X^\\top (I - D^{-1/2} W D^{-1/2}) X\\bigr)

    on the graph as given (edge weights honoured, ``d_i`` the weight entering ``i``); the trace
    form holds for an undirected graph without isolated nodes.  ``self_loops=True`` measures on
    ``A + I`` (Cai & Wang's augmented ``Ã``; an operator that has self loops already keeps
    them once).  Isolated nodes (``d_i = 0``) contribute 0, not the ``||X_i||^2`` of the
    ``I`` in the trace form: ``1/sqrt(0)`` is taken as 0, and on a directed graph an edge out
    of a node without in-edges counts ``w ||X_j / sqrt(d_j)||^2``.  ``1/n`` counts every node.

    Unlike :func:`dirichlet_energy` it does not vanish on constant features unless the degrees
    are equal (a constant ``c`` gives ``(1/2n) sum w_ij (1/sqrt(d_i) - 1/sqrt(d_j))^2 ||c||^2``),
    so it does not satisfy the node-similarity axioms of Rusch et al. (2023); see Bison &
    Sperduti, arXiv:2512.09890.  On a ``d``-regular graph it is ``dirichlet_energy / d``.
    Exact on near-constant states (the difference is formed before the degree scaling).
    ``graph``, ``edge_weight``, ``batch`` and ``reduce`` as in :func:`dirichlet_energy`.

    Example:
        >>> ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])  # path 0-1-2, degrees 1, 2, 1
        >>> normalized_dirichlet_energy(torch.ones(3, 1), ei)  # 2 (1 - 1/sqrt 2)^2 / 3
        tensor(0.0572, dtype=torch.float64)
    """
    x64, op = _prepare(x, graph, edge_weight, batch)
    if not isinstance(self_loops, bool):
        raise ValueError(f"self_loops: expected True or False, received {self_loops!r}")
    if self_loops:
        op = as_graph(op, self_loops=True)
    return _finish(0.5 * _normalized_edge_sum(x64, op) / _sizes(op, op.num_nodes), op, reduce)


def rank_one_distance(x: Tensor, *, batch: object = None, reduce: Reduce = "mean") -> Tensor:
    """Relative distance of ``X`` to the constant-row matrices (rank collapse to ``1 u^T``).

    .. math::

        \\mathrm{rod}(X) = \\min_u \\frac{\\|X - \\mathbf 1 u^\\top\\|_F}{\\|X\\|_F}
                        = \\frac{\\|X - \\mathbf 1 \\bar x^\\top\\|_F}{\\|X\\|_F}, \\qquad
        \\bar x = \\frac1n \\sum_i X_i

    (the minimiser is the column mean).  In ``[0, 1]``: 0 when every node has the same row
    (the rank-one collapse of oversmoothing, Roth & Liebig 2023), 1 when the column means are
    0.  This is the distance to the set ``{1 u^T}`` only, not to the nearest rank-one matrix
    (the SVD's ``sigma_2..sigma_r`` energy), which also contains ``v u^T`` for any ``v``.
    Scale-invariant.  A zero (or empty) ``X`` gives NaN (0/0).  The centred norm is computed
    in two passes (one row subtracted, then the mean), so a common offset of ``1e8`` over a
    spread of 1 keeps full precision, where ``||X||^2 - n ||xbar||^2`` would keep none.
    Graph-free; ``batch`` (a ``[num_nodes]`` vector or a ``Batch``) gives one value per graph.
    """
    validate_features(x)
    bop = _batch_operator(batch, x)
    return _finish(_rank_one_distance(x.to(torch.float64), bop), bop, reduce)


def stream_variance(x: Tensor, *, batch: object = None, reduce: Reduce = "mean") -> Tensor:
    """Variance of the (residual) stream: the mean over channels of the population variance
    over nodes.

    .. math::

        \\mathrm{var}(X) = \\frac{1}{n d} \\|X - \\mathbf 1 \\bar x^\\top\\|_F^2

    Recorded per layer, its growth with depth is the variance growth of Sun et al. (2025), "The
    Curse of Depth in Large Language Models" (Pre-LN streams grow with depth).  The column mean
    is excluded: the mean squared entry is ``feature_norm(x) ** 2 / d``, recorded already, and
    ``stream_variance = feature_norm ** 2 / d`` times ``rank_one_distance ** 2``.  Centred in
    two passes (exact under a common offset); NaN without channels.  Graph-free; per graph
    with ``batch``.
    """
    validate_features(x)
    bop = _batch_operator(batch, x)
    return _finish(_stream_variance(x.to(torch.float64), bop), bop, reduce)


def _check_pair(x_prev: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    validate_features(x_prev, "x_prev")
    validate_features(x)
    if x.shape != x_prev.shape:
        raise ValueError(
            f"x: expected the shape of x_prev {list(x_prev.shape)}, received {list(x.shape)}"
        )
    return x_prev.to(torch.float64), x.to(torch.float64)


def angular_distance(
    x_prev: Tensor, x: Tensor, *, batch: object = None, reduce: Reduce = "mean"
) -> Tensor:
    """Angular distance between two states of the same nodes (Gromov et al. 2024, "The
    Unreasonable Ineffectiveness of the Deeper Layers"): the angle of the mean cosine.

    .. math::

        \\theta(X^{k-1}, X^k) = \\frac1\\pi \\arccos\\Big(\\frac1n \\sum_i
            \\cos(X^{k-1}_i, X^k_i)\\Big)

    i.e. ``arccos(cosine_prev) / pi``.  Gromov et al. average the per-token angle over their
    samples instead; the two agree when the cosines are alike across nodes, and for positive
    cosines the mean of per-node angles is smaller otherwise (arccos is concave on ``[0, 1]``).
    In ``[0, 1]``: 0 when every
    row keeps its direction, 1/2 for orthogonal rows (a zero row counts as orthogonal), 1 for
    reversed ones.  Computed as ``2 atan2(sqrt(mean ||u - v||^2), sqrt(mean ||u + v||^2))``
    over the unit rows, with ``u -+ v`` built from ``X^{k-1}_i -+ X^k_i``: exact where the mean
    cosine is near 1 or -1, where ``arccos`` of a rounded cosine loses half the digits.  Per
    graph with ``batch``.
    """
    prev64, x64 = _check_pair(x_prev, x)
    bop = _batch_operator(batch, x)
    return _finish(_angular_distance(prev64, x64, bop), bop, reduce)


def relative_update(
    x_prev: Tensor, x: Tensor, *, batch: object = None, reduce: Reduce = "mean"
) -> Tensor:
    """Relative size of a layer's update (Csordás et al. 2025, "Do Language Models Use Their
    Depth Efficiently?").

    .. math::

        u(X^{k-1}, X^k) = \\frac{\\|X^k - X^{k-1}\\|_F}{\\|X^{k-1}\\|_F}

    The difference is taken in float64 of the two states, so float32 states that differ by
    ``1e-7`` of their size (one float32 ulp) still give the exact ratio.  A zero ``X^{k-1}``
    gives Inf (NaN when both are zero), as IEEE division does.  Per graph with ``batch``.
    """
    prev64, x64 = _check_pair(x_prev, x)
    bop = _batch_operator(batch, x)
    return _finish(_relative_update(prev64, x64, bop), bop, reduce)
