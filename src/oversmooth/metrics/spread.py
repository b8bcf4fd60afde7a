"""Scale and spread of the node rows, graph-free: feature norm, effective rank, distance to
rank-one collapse, stream variance, and the relative size of a layer's update.

:data:`PER_LAYER` and :data:`BETWEEN_LAYERS` as in :mod:`oversmooth.metrics.similarity`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from oversmooth.graph import validate_features
from oversmooth.metrics import kernels as K
from oversmooth.metrics.kernels import Reduce
from oversmooth.metrics.similarity import check_pair
from oversmooth.metrics.state import LayerState

__all__ = [
    "feature_norm",
    "effective_rank",
    "rank_one_distance",
    "stream_variance",
    "relative_update",
    "PER_LAYER",
    "BETWEEN_LAYERS",
]


# -- kernels -------------------------------------------------------------------------------------


def _feature_norm(s: LayerState) -> Tensor:
    return s.feature_norm


def _rank_one_distance(s: LayerState) -> Tensor:
    """``||X - 1 xbar^T||_F / ||X||_F`` from two power-of-two-scaled norms (the ``1/n`` of
    both cancels); 0/0 = NaN for a zero (or empty) state."""
    return K.rms_norm(K.centred(s.x, s.op), s.op) / s.feature_norm


def _stream_variance(s: LayerState) -> Tensor:
    """``(1/(n d)) ||X - 1 xbar^T||_F^2``: the mean over channels of the (population)
    variance over nodes; NaN without channels."""
    rms = K.rms_norm(K.centred(s.x, s.op), s.op)
    return rms.pow(2) / s.x.size(1) if s.x.size(1) else rms * float("nan")


def _relative_update(prev: LayerState, cur: LayerState) -> Tensor:
    """``||X - X_prev||_F / ||X_prev||_F`` (per graph); the difference is taken of the float64
    states, so it is exact for float32 states however close they are."""
    return K.rms_norm(cur.x - prev.x, cur.op) / prev.feature_norm


def _entropy_rank(sv: Tensor) -> Tensor:
    """``exp(entropy(sv / sum sv))`` over the last dim (0 where every value is 0)."""
    total = sv.sum(dim=-1, keepdim=True)
    p = sv / total.clamp_min(1e-300)
    entropy = -(p * p.clamp_min(1e-300).log()).sum(dim=-1)
    return torch.where(total.squeeze(-1) > 0, entropy.exp(), torch.zeros_like(entropy))


def _effective_rank(s: LayerState) -> Tensor:
    x64, op = s.x, s.op
    clean = torch.where(torch.isfinite(x64), x64, 0.0)
    if op is not None and op.batch is not None:
        return _effective_rank_batched(x64, clean, s)
    if x64.size(0) == 0:  # no node: nothing to measure (it read 0: an audit)
        return x64.new_full((), float("nan"))
    finite = torch.isfinite(x64).all()
    # subtract one row first (exact for near-constant states), then the mean of what is left
    centred = clean - clean[:1]
    centred = centred - centred.mean(dim=0, keepdim=True)
    if centred.numel():  # a power-of-two scale keeps the SVD clear of over/underflow
        _, exponent = torch.frexp(centred.abs().amax())
        centred = centred / K.pow2(exponent.to(torch.int64).clamp(-537, 537))
    sv = torch.linalg.svdvals(centred)
    return torch.where(finite, _entropy_rank(sv), float("nan"))


def _effective_rank_batched(x64: Tensor, clean: Tensor, s: LayerState) -> Tensor:
    """:func:`_effective_rank` of every graph of a batch: one batched SVD of the zero-padded
    graphs (zero rows add no singular value)."""
    op = s.graph
    assert op.batch is not None
    finite = K.segment_sum((~torch.isfinite(x64)).any(dim=1).to(torch.float64), op) == 0
    if x64.size(0) == 0:
        return x64.new_zeros(op.num_graphs)
    centred = K.centred(clean, op)
    if centred.numel():  # one power-of-two scale per graph, as if measured alone
        top = x64.new_zeros(op.num_graphs).scatter_reduce(
            0, op.batch, centred.abs().amax(dim=1), "amax"
        )
        _, exponent = torch.frexp(top)
        scale = K.pow2(exponent.to(torch.int64).clamp(-537, 537))[op.batch]
        centred = centred / scale.unsqueeze(1)
    sv = torch.linalg.svdvals(K.pad_graphs(centred, op))  # [B, k]
    return torch.where(finite, _entropy_rank(sv), float("nan"))


#: Column name (= function name) -> its kernel on a LayerState.
PER_LAYER: dict[str, Callable[[LayerState], Tensor]] = {
    "feature_norm": _feature_norm,
    "effective_rank": _effective_rank,
    "rank_one_distance": _rank_one_distance,
    "stream_variance": _stream_variance,
}
#: Column name (= function name) -> its kernel on (previous layer's state, this state).
BETWEEN_LAYERS: dict[str, Callable[[LayerState, LayerState], Tensor]] = {
    "relative_update": _relative_update,
}


# -- public functions ----------------------------------------------------------------------------


def _graph_free(x: Tensor, batch: object) -> LayerState:
    validate_features(x)
    return LayerState(x.to(torch.float64), K.batch_operator(batch, x), x.dtype in K.NARROW)


def feature_norm(x: Tensor, *, batch: object = None, reduce: Reduce = "mean") -> Tensor:
    """Root-mean-square node norm :math:`\\sqrt{\\frac1n \\|X\\|_F^2}` (float64); per graph
    with ``batch`` (a ``[num_nodes]`` vector or a ``Batch``)."""
    s = _graph_free(x, batch)
    return K.finish(_feature_norm(s), s.op, reduce)


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
    s = _graph_free(x, batch)
    return K.finish(_effective_rank(s), s.op, reduce)


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
    s = _graph_free(x, batch)
    return K.finish(_rank_one_distance(s), s.op, reduce)


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
    s = _graph_free(x, batch)
    return K.finish(_stream_variance(s), s.op, reduce)


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
    prev, cur = check_pair(x_prev, x, batch)
    return K.finish(_relative_update(prev, cur), cur.op, reduce)
