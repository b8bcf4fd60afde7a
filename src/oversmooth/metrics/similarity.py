"""Similarity of node rows: cosine between two states of the same nodes, their angle, the
inter-layer similarity matrix, and the mean average (cosine) distance of Chen et al. (2020).

:data:`PER_LAYER` maps the per-layer columns to their kernels on a
:class:`~oversmooth.metrics.state.LayerState`; :data:`BETWEEN_LAYERS` those measured between
the previous layer's state and this one (NaN at a step's first layer).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from oversmooth.graph import GraphOperator, _edge_chunks, validate_features
from oversmooth.metrics import kernels as K
from oversmooth.metrics.kernels import Reduce
from oversmooth.metrics.state import LayerState

__all__ = [
    "mean_cosine_similarity",
    "angular_distance",
    "layer_similarity",
    "mean_average_distance",
    "mean_average_distance_global",
    "PER_LAYER",
    "BETWEEN_LAYERS",
    "check_pair",
]


# -- kernels -------------------------------------------------------------------------------------


def _cosine(prev: LayerState, cur: LayerState) -> Tensor:
    """``(1/n) sum_i cos(prev_i, cur_i)`` (per graph); zero rows have cosine 0.

    Without unit rows where no norm can overflow or underflow: both states narrow (zero rows
    aside), or every row norm of both read on the CPU to lie in ``[2**-400, 2**400]``; the
    row norms then come from the node pass.  Otherwise from the unit rows.  Held to
    ``[-1, 1]``: parallel rows gave 1 + 2.2e-16 (an audit)."""
    if not cur.batched and cur.x.numel():
        both_narrow = prev.narrow and cur.narrow
        if both_narrow or (prev.rows_safe and cur.rows_safe):
            both = prev.norms * cur.norms  # [n]
            if both_narrow:  # checked norms are >= 2**-400: only here can a row be zero
                both = torch.where(both == 0, 1.0, both)  # a zero row gives 0 / 1
            mean = K.row_dots(prev.x, cur.x).div_(both).sum() / cur.x.size(0)
            return mean.clamp(-1.0, 1.0)
    return K.mean_unit_cosine(prev.unit, cur.unit, cur.op).clamp(-1.0, 1.0)


def _angular(prev: LayerState, cur: LayerState) -> Tensor:
    """``arccos(mean_i cos(prev_i, x_i)) / pi`` (per graph), as ``2 atan2(sqrt(mean ||u - v||^2),
    sqrt(mean ||u + v||^2)) / pi`` over the unit rows ``u, v``: for unit rows
    ``||u -+ v||^2 = 2 -+ 2 cos``, so the two means are ``2 (1 -+ mean cos)`` and the angle is
    exact where the mean cosine is near 1 or -1 (``arccos`` of a rounded cosine loses half the
    digits there).  Both chords are built from ``prev_i -+ x_i`` (:func:`~K.unit_gap`); a zero
    row counts as cosine 0."""
    prev64, x64, op = prev.x, cur.x, cur.op
    ea, eb = K.row_exponents(prev64), K.row_exponents(x64)
    minus, zero = K.unit_gap(*K.scaled_pair(prev64, ea, x64, eb))  # u - v
    plus, _ = K.unit_gap(*K.scaled_pair(prev64, ea, -x64, eb))  # u + v
    two = minus.new_full((minus.size(0),), 2.0)  # (minus[:, 0] failed without channels)
    gap = torch.where(zero, two, minus.pow(2).sum(dim=1))  # 2 - 2 cos (2 for a zero row)
    span = torch.where(zero, two, plus.pow(2).sum(dim=1))  # 2 + 2 cos
    theta = 2.0 * torch.atan2(K.segment_sum(gap, op).sqrt(), K.segment_sum(span, op).sqrt())
    return theta / torch.pi + prev.poison + cur.poison


def _mad_neighbors(s: LayerState) -> Tensor:
    """Over each node's neighbours as a set: the operator's merged edges (a repeated edge
    once), those of positive weight (a zero-weight edge is no neighbour, as for the degree),
    so an edge list, a dense or a sparse adjacency of one graph give one value."""
    x64, op = s.x, s.graph
    exponent = K.row_exponents(x64)
    dist = x64.new_zeros(op.num_nodes)
    count = x64.new_zeros(op.num_nodes)
    runs = op.runs  # merged edges: target row, source col, summed weight
    src, dst, present = runs.col, runs.row, (runs.weight > 0).to(x64.dtype)
    for part in _edge_chunks(runs.nnz, x64.size(1)):
        a, b, on = src[part], dst[part], present[part]
        gap = K.cosine_distance(x64[b], exponent[b], x64[a], exponent[a])  # [chunk]
        dist.index_add_(0, b, gap * on)
        count.index_add_(0, b, on)
    has = count > 0
    per_node = torch.where(has, dist / count.clamp_min(1.0), 0.0)
    # no node with a neighbour: 0/0, NaN (it read 0, complete oversmoothing: an audit)
    if op.batch is None:
        return per_node.sum() / has.sum() + s.poison
    return K.segment_sum(per_node, op) / K.segment_sum(has.double(), op) + s.poison


def _measured(value: Tensor, s: LayerState) -> Tensor | None:
    """Per graph of a batch, whether MAD had something to measure (a node with a neighbour; for
    the global MAD, two nodes): its value is not NaN, or is NaN from a non-finite state, which
    the mean keeps (a one-node graph holding a NaN was left out of it: a review)."""
    if not s.batched:
        return None
    return ~torch.isnan(value) | torch.isnan(s.poison)


def _mad_global(s: LayerState) -> Tensor:
    r"""Mean of ``1 - cos`` over ordered pairs ``i != j`` in ``O(n d)`` (per graph with a
    batched operator).

    Over the ``m`` non-zero rows, :math:`\sum_{i \ne j} \tfrac12 \|u_i - u_j\|^2 =
    m \sum_i \|u_i - \bar u\|^2`; that sum is shift-invariant, so it is taken of
    ``w_i = u_i - u_r`` (``r`` the first non-zero row, ``w_i`` from :func:`~K.unit_gap`)
    and never cancels.  Pairs with a zero row count distance 1.
    """
    if s.batched:
        return _mad_global_batched(s.x, s.graph) + s.poison
    x64 = s.x
    n = x64.size(0)
    if n < 2:  # no pair: NaN (it read 0: an audit); a non-finite state poisons it alike
        return x64.new_full((), math.nan) + s.poison
    exponent = K.row_exponents(x64)
    nonzero = (x64 != 0).any(dim=1)  # [n]
    ref = torch.argmax(nonzero.to(torch.int8))  # first non-zero row (0 when there is none)
    a, b = K.scaled_pair(x64, exponent, x64[ref].expand_as(x64), exponent[ref].expand(n))
    w, _ = K.unit_gap(a, b)  # [n, d] u_i - u_ref
    w = w * nonzero.unsqueeze(1)
    m = nonzero.sum().to(torch.float64)
    centred = (w - w.sum(dim=0) / m.clamp_min(1.0)) * nonzero.unsqueeze(1)
    pair_sum = m * centred.pow(2).sum() + (n * (n - 1) - m * (m - 1))
    return pair_sum / (n * (n - 1)) + s.poison


def _mad_global_batched(x64: Tensor, op: GraphOperator) -> Tensor:
    """:func:`_mad_global` of every graph of a batch at once (segment sums over ``batch``)."""
    assert op.batch is not None and op.graph_nodes is not None
    batch, size = op.batch, op.graph_nodes
    n = x64.size(0)
    if n == 0:
        return x64.new_full((op.num_graphs,), math.nan)
    exponent = K.row_exponents(x64)
    nonzero = (x64 != 0).any(dim=1)  # [n]
    ref = K.first_rows(op, nonzero).clamp_max(n - 1)[batch]  # [n] reference row of i's graph
    a, b = K.scaled_pair(x64, exponent, x64[ref], exponent[ref])
    w, _ = K.unit_gap(a, b)  # [n, d] u_i - u_ref(i)
    w = w * nonzero.unsqueeze(1)
    m = K.segment_sum(nonzero.to(torch.float64), op)  # [B]
    mean = x64.new_zeros(op.num_graphs, x64.size(1)).index_add_(0, batch, w)
    mean = mean / m.clamp_min(1.0).unsqueeze(1)
    centred = (w - mean[batch]) * nonzero.unsqueeze(1)
    pair_sum = m * K.segment_sum(centred.pow(2).sum(dim=1), op) + (size * (size - 1) - m * (m - 1))
    return torch.where(size >= 2, pair_sum / (size * (size - 1)).clamp_min(1.0), math.nan)


#: Column name (= function name) -> its kernel on a LayerState.
PER_LAYER: dict[str, Callable[[LayerState], Tensor]] = {
    "mean_average_distance": _mad_neighbors,
    "mean_average_distance_global": _mad_global,
}
#: Column name (= function name) -> its kernel on (previous layer's state, this state).
BETWEEN_LAYERS: dict[str, Callable[[LayerState, LayerState], Tensor]] = {
    "mean_cosine_similarity": _cosine,
    "angular_distance": _angular,
}


# -- public functions ----------------------------------------------------------------------------


def check_pair(
    x_prev: Tensor, x: Tensor, batch: object = None, names: tuple[str, str] = ("x_prev", "x")
) -> tuple[LayerState, LayerState]:
    """Two validated states of the same nodes (``ValueError`` naming the argument whose shape
    differs), as graph-free :class:`LayerState` s (per graph with ``batch``)."""
    validate_features(x_prev, names[0])
    validate_features(x, names[1])
    if x.shape != x_prev.shape:
        raise ValueError(
            f"{names[1]}: expected the shape of {names[0]} {list(x_prev.shape)}, "
            f"received {list(x.shape)}"
        )
    bop = K.batch_operator(batch, x)
    return (
        LayerState(x_prev.to(torch.float64), bop, x_prev.dtype in K.NARROW),
        LayerState(x.to(torch.float64), bop, x.dtype in K.NARROW),
    )


def mean_cosine_similarity(
    x: Tensor, y: Tensor, *, batch: object = None, reduce: Reduce = "mean"
) -> Tensor:
    """:math:`\\mathrm{sim}(X, Y) = \\frac1n \\sum_i \\cos(X_i, Y_i)` for two states of the
    same nodes; the column of the Probe compares each layer with the previous one.

    Zero rows have cosine 0.  ``x`` and ``y`` must have the same shape.  Per graph with
    ``batch`` (a ``[num_nodes]`` vector or a ``Batch``).
    """
    sx, sy = check_pair(x, y, batch, ("x", "y"))
    return K.finish(_cosine(sx, sy), sy.op, reduce)


def angular_distance(
    x_prev: Tensor, x: Tensor, *, batch: object = None, reduce: Reduce = "mean"
) -> Tensor:
    """Angular distance between two states of the same nodes (Gromov et al. 2024, "The
    Unreasonable Ineffectiveness of the Deeper Layers"): the angle of the mean cosine.

    .. math::

        \\theta(X^{k-1}, X^k) = \\frac1\\pi \\arccos\\Big(\\frac1n \\sum_i
            \\cos(X^{k-1}_i, X^k_i)\\Big)

    i.e. ``arccos(mean_cosine_similarity) / pi``.  Gromov et al. average the per-token angle
    over their samples instead; the two agree when the cosines are alike across nodes, and for
    positive cosines the mean of per-node angles is smaller otherwise (arccos is concave on
    ``[0, 1]``).  In ``[0, 1]``: 0 when every row keeps its direction, 1/2 for orthogonal rows
    (a zero row counts as orthogonal), 1 for reversed ones.  Computed as
    ``2 atan2(sqrt(mean ||u - v||^2), sqrt(mean ||u + v||^2))`` over the unit rows, with
    ``u -+ v`` built from ``X^{k-1}_i -+ X^k_i``: exact where the mean cosine is near 1 or -1,
    where ``arccos`` of a rounded cosine loses half the digits.  Per graph with ``batch``.
    """
    prev, cur = check_pair(x_prev, x, batch)
    return K.finish(_angular(prev, cur), cur.op, reduce)


def mean_average_distance(
    x: Tensor, graph: object, *, batch: Tensor | None = None, reduce: Reduce = "mean"
) -> Tensor:
    """Mean average (cosine) distance, MAD (Chen et al. 2020), over each node's neighbours.

    .. math::

        \\mathrm{MAD} = \\frac{1}{n'} \\sum_{i: N_i \\neq \\emptyset}
            \\frac{1}{|N_i|} \\sum_{j \\in N_i} \\bigl(1 - \\cos(X_i, X_j)\\bigr)

    where :math:`n'` counts the nodes that have neighbours (``n' = n`` without
    isolated nodes; NaN when no node has one); neighbours are counted without weights, as in
    the paper.  The average
    over all pairs of nodes is :func:`mean_average_distance_global`.  An all-zero row has
    cosine 0 with every row (distance 1).

    ``1 - cos`` is evaluated as :math:`\\tfrac12 \\|u_i - u_j\\|^2` with :math:`u_i - u_j`
    formed from :math:`X_i - X_j` (no cancellation), so MAD is exact (<= 1e-10 relative)
    on near-constant states.  ``graph``, ``batch`` and ``reduce`` as in
    :func:`~oversmooth.metrics.dirichlet_energy`.
    """
    if graph is None:
        raise ValueError(
            "graph: mean_average_distance needs an edge_index or GraphOperator (the average "
            "over all pairs of nodes, which needs none, is mean_average_distance_global)"
        )
    s = LayerState.measure(x, graph, batch=batch)
    value = _mad_neighbors(s)
    return K.finish(value, s.op, reduce, _measured(value, s))


def mean_average_distance_global(
    x: Tensor,
    graph: object | None = None,
    *,
    batch: Tensor | None = None,
    reduce: Reduce = "mean",
) -> Tensor:
    """MAD over all ordered pairs of nodes ``i != j``: the mean of ``1 - cos(X_i, X_j)`` (NaN
    for fewer than two nodes).

    Computed in ``O(n d)``, without an ``n x n`` matrix, through
    :math:`\\sum_{i \\ne j} (1 - \\cos) = m \\sum_i \\|u_i - \\bar u\\|^2` over the ``m``
    non-zero rows, :math:`u_i = X_i / \\|X_i\\|`.  It needs no graph: ``graph`` (optional) or
    ``batch`` (a ``[num_nodes]`` vector or a ``Batch``) only say which graph each node is in.
    An all-zero row has cosine 0 with every row (distance 1).  Limit: rows nearly parallel but
    of different lengths (``X_j ~ c X_i``, ``c != 1``) are resolved to ~1e-16 absolute only,
    as in :func:`mean_average_distance` and :func:`angular_distance`.
    """
    if graph is not None:  # the graph only brings the batch
        s = LayerState.measure(x, graph, batch=batch)
    else:
        validate_features(x)
        s = LayerState(x.to(torch.float64), K.batch_operator(batch, x), x.dtype in K.NARROW)
    value = _mad_global(s)
    return K.finish(value, s.op, reduce, _measured(value, s))


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
    u = K.unit_rows(stack.to(torch.float64).flatten(0, 1)).view(stack.shape)  # [L, n, d]
    bop = K.batch_operator(batch, stack[0])
    if bop is None or bop.batch is None:
        flat = u.reshape(u.size(0), -1)  # [L, n*d]
        return K.finish((flat @ flat.T / K.count(n)).clamp(-1.0, 1.0), None, reduce)
    padded = K.pad_graphs(u.transpose(0, 1), bop)  # [B, max_n, L, d], zero rows add nothing
    flat = padded.transpose(1, 2).reshape(bop.num_graphs, u.size(0), -1)  # [B, L, max_n*d]
    sizes = K.node_counts(bop, n)
    assert isinstance(sizes, Tensor)
    return K.finish(
        (flat @ flat.transpose(1, 2) / sizes.view(-1, 1, 1)).clamp(-1.0, 1.0), bop, reduce
    )
