"""Energies of a state on its graph: Dirichlet, Laplacian, higher-order, normalised, and the
relative change along depth.

Each function is ``(x, graph, ...) -> 0-d float64 tensor`` (see :mod:`oversmooth.metrics` for
the conventions); :data:`PER_LAYER` maps each per-layer column to its kernel on a
:class:`~oversmooth.metrics.state.LayerState`, the one computation the function and the
:class:`~oversmooth.probe.Probe` share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from oversmooth.graph import TINY, GraphOperator, _edge_chunks, as_graph, squared_sum
from oversmooth.metrics import kernels as K
from oversmooth.metrics.kernels import Reduce
from oversmooth.metrics.state import LayerState
from oversmooth.resources import check_energy_order

__all__ = [
    "dirichlet_energy",
    "laplacian_energy",
    "laplacian_energy_degree",
    "rayleigh_energy",
    "energy",
    "rusch_dirichlet_energy",
    "normalized_dirichlet_energy",
    "relative_energy",
    "energy_kernel",
    "PER_LAYER",
]

MEASURES = ("counting", "degree")


def _check_measure(measure: object) -> None:
    if measure not in MEASURES:
        raise ValueError(f"measure: expected one of 'counting', 'degree', received {measure!r}")


def _check_weight(edge_weight: object, function: str) -> None:
    """The old third positional argument of ``laplacian_energy`` was the measure."""
    if isinstance(edge_weight, str):
        raise ValueError(
            f"edge_weight: expected a [num_edges] tensor or None, received {edge_weight!r}; "
            f"{function} has no measure argument: use laplacian_energy_degree(x, graph) for the "
            "degree measure (or energy(x, graph, 2, measure))"
        )


# -- kernels on a LayerState ---------------------------------------------------------------------


def _energy(s: LayerState, order: int, measure: str) -> Tensor:
    """E_m of the state: ``Delta`` applied ``m // 2`` times (the first from the state's edge
    pass), then the gradient integral (odd ``m``) or the measure's sum of squares (even)."""
    op = s.graph
    if order == 2 and measure == "counting" and op.batch is None:  # ||Delta x||^2 / n
        return s.poisoned(s.laplacian_squares / s.nodes)
    y = s.x
    for k in range(order // 2):
        y = s.laplacian if k == 0 else K.laplacian(y, op)
    if order % 2:
        total = s.edge_sum if order == 1 else K.edge_pass(y, op, laplacian=False)[1]
        assert total is not None
        return s.poisoned(0.5 * total / s.nodes)
    if measure == "counting" and op.batch is None:
        return s.poisoned(squared_sum(y) / s.nodes)
    sq = K.row_dots(y, y)  # [n]
    if measure == "degree":
        sq = op.degree * sq
    return s.poisoned(K.segment_sum(sq, op) / s.nodes)


def energy_kernel(order: int, measure: str = "degree") -> Callable[[LayerState], Tensor]:
    """The kernel of the column ``energy_<order>`` (the degree measure, as :func:`energy`)."""
    return lambda s: _energy(s, order, measure)


def _dirichlet(s: LayerState) -> Tensor:
    return _energy(s, 1, "degree")


def _laplacian(s: LayerState) -> Tensor:
    return _energy(s, 2, "counting")


def _laplacian_degree(s: LayerState) -> Tensor:
    return _energy(s, 2, "degree")


def _rayleigh(s: LayerState) -> Tensor:
    """``E_2 / ((1/n) ||X||_F^2)`` from the counting Laplacian energy; 0 for a zero state.
    Scale-free, so measured on the state scaled to order 1 (:func:`_scaled`) unless its
    squares are known safe: at 1e160 the energy overflowed (inf), at 1e-170 it underflowed
    (0) where the ratio is 0.84 (an audit)."""
    t = s if s.fast else _scaled(s)[0]
    energy2, norm = _laplacian(t), t.feature_norm
    ratio = (energy2.sqrt() / norm.clamp_min(1e-300)).pow(2)  # ratio of roots: no overflow
    return torch.where(norm > 0, ratio, energy2 * 0.0)


def _rusch(s: LayerState) -> Tensor:
    """``sqrt((1/n) sum_edges ||x_i - x_j||^2)``, on the state scaled to order 1 and scaled
    back unless its squares are known safe (it overflowed at 1e160 and lost digits at 1e-160,
    where the value itself is an ordinary number: an audit)."""
    t, exponent = (s, None) if s.fast else _scaled(s)
    root = ((K.unweighted_edge_sum(t.x, t.graph) + t.poison) / t.nodes).sqrt()
    return root if exponent is None else root * K.pow2(exponent)


def _scaled(s: LayerState) -> tuple[LayerState, Tensor]:
    """``s`` with each graph's rows divided by one power of two, and those exponents
    (:func:`K.graph_scaled`)."""
    scaled, exponent = K.graph_scaled(s.x, s.op)
    return LayerState(scaled, s.op, s.narrow), exponent


def _inv_sqrt_degree(op: GraphOperator) -> Tensor:
    """``d_i^{-1/2}`` per node, 0 where ``d_i = 0`` (the pseudo-inverse convention): ``[n]``."""
    has = op.degree > 0
    return torch.where(has, op.degree.clamp_min(TINY).rsqrt(), 0.0)


def _normalized_edge_sum(x64: Tensor, op: GraphOperator) -> Tensor:
    """``sum_e w_e ||x_src / sqrt(d_src) - x_dst / sqrt(d_dst)||^2`` (float64), with
    ``1/sqrt(0) := 0``; not poisoned.

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
        # a weight-0 edge adds 0, also beside a square that overflowed (0 * inf made the sum
        # NaN where the energy is inf: an audit)
        weight = op.edge_weight[part]
        term = torch.where(weight == 0, 0.0, weight * sq)
        if op.edge_graph is None:
            total = total + term.sum()
        else:
            total.index_add_(0, op.edge_graph[part], term)
    return total


def _normalized(s: LayerState) -> Tensor:
    return 0.5 * (_normalized_edge_sum(s.x, s.graph) + s.poison) / s.nodes


#: Column name (= function name) -> its kernel on a LayerState.
PER_LAYER: dict[str, Callable[[LayerState], Tensor]] = {
    "laplacian_energy": _laplacian,
    "dirichlet_energy": _dirichlet,
    "rayleigh_energy": _rayleigh,
    "laplacian_energy_degree": _laplacian_degree,
    "rusch_dirichlet_energy": _rusch,
    "normalized_dirichlet_energy": _normalized,
}


# -- public functions ----------------------------------------------------------------------------


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
    s = LayerState.measure(x, graph, edge_weight, batch)
    return K.finish(_dirichlet(s), s.op, reduce)


def laplacian_energy(
    x: Tensor,
    graph: object,
    edge_weight: Tensor | None = None,
    *,
    batch: Tensor | None = None,
    reduce: Reduce = "mean",
) -> Tensor:
    """Laplacian energy, the default "energy" of the toolkit (counting measure).

    .. math::

        E_2(X) = \\frac{1}{n} \\|PX - X\\|_F^2

    Exactly the factor that scales each head of nonlocal message passing.  Isolated nodes
    contribute 0 (see :mod:`oversmooth.graph`).  The degree-weighted form is
    :func:`laplacian_energy_degree`.  ``graph``, ``edge_weight``, ``batch`` and ``reduce``
    as in :func:`dirichlet_energy`.

    Example:
        >>> ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])  # path 0-1-2
        >>> laplacian_energy(torch.tensor([[0.0], [1.0], [3.0]]), ei)  # (1 + 0.25 + 4) / 3
        tensor(1.7500, dtype=torch.float64)
    """
    _check_weight(edge_weight, "laplacian_energy")
    s = LayerState.measure(x, graph, edge_weight, batch)
    return K.finish(_laplacian(s), s.op, reduce)


def laplacian_energy_degree(
    x: Tensor,
    graph: object,
    edge_weight: Tensor | None = None,
    *,
    batch: Tensor | None = None,
    reduce: Reduce = "mean",
) -> Tensor:
    """Laplacian energy in the degree measure: node ``i`` weighted by its degree ``d_i``.

    .. math::

        E_2^{\\mu}(X) = \\frac{1}{n} \\sum_i d_i \\|(PX - X)_i\\|^2
                     = \\frac1n \\int_G |\\Delta_\\mu X|^2 d\\mu

    (``energy(x, graph, 2)``).  Arguments as in :func:`dirichlet_energy`.

    Example:
        >>> ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])  # path 0-1-2
        >>> laplacian_energy_degree(torch.tensor([[0.0], [1.0], [3.0]]), ei)  # (1+.5+4)/3
        tensor(1.8333, dtype=torch.float64)
    """
    _check_weight(edge_weight, "laplacian_energy_degree")
    s = LayerState.measure(x, graph, edge_weight, batch)
    return K.finish(_laplacian_degree(s), s.op, reduce)


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
    s = LayerState.measure(x, graph, edge_weight, batch)
    return K.finish(_rayleigh(s), s.op, reduce)


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
    """Higher-order energies :math:`E_m` (Guan & Shi 2025); the columns ``energy_<m>``.

    .. math::

        E_{2k}(X) = \\frac1n \\int_G |\\Delta_\\mu^k X|^2 \\, d\\mu, \\qquad
        E_{2k+1}(X) = \\frac1n \\int_G |\\nabla_\\mu \\Delta_\\mu^k X|^2 \\, d\\mu .

    With the default ``measure="degree"`` the integral carries the degree
    measure, so ``energy(x, g, 1) == dirichlet_energy(x, g)`` and
    ``energy(x, g, 2) == laplacian_energy_degree(x, g)``.
    ``measure="counting"`` replaces :math:`d\\mu` by the counting measure in the
    even orders (``energy(x, g, 2, "counting") == laplacian_energy(x, g)``); odd
    orders are gradient integrals and do not depend on it.

    Args:
        order: ``m >= 1``; orders above ``resources.MAX_ENERGY_ORDER`` (1000) are refused.
    """
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"order: expected an integer m >= 1, received {order!r}")
    check_energy_order(order)
    s = LayerState.measure(x, graph, edge_weight, batch)
    _check_measure(measure)
    return K.finish(_energy(s, order, measure), s.op, reduce)


def rusch_dirichlet_energy(
    x: Tensor, graph: object, *, batch: Tensor | None = None, reduce: Reduce = "mean"
) -> Tensor:
    """Dirichlet energy in the convention of Rusch et al. (2023), "A survey on
    oversmoothing in graph neural networks":

    .. math::

        \\sqrt{ \\frac1n \\sum_i \\sum_{j \\in N_i} \\|X_i - X_j\\|^2 }

    Unweighted, as in the survey: edge weights are ignored and ``N_i`` is a set, so a pair
    listed twice counts once (as in its adjacency; an edge of weight 0 is no edge).  On an
    unweighted graph without repeated edges it equals ``sqrt(2 * dirichlet_energy)``.
    """
    s = LayerState.measure(x, graph, batch=batch)
    return K.finish(_rusch(s), s.op, reduce)


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
    s = LayerState.measure(x, graph, edge_weight, batch)
    if not isinstance(self_loops, bool):
        raise ValueError(f"self_loops: expected True or False, received {self_loops!r}")
    if self_loops:
        s = LayerState(s.x, as_graph(s.graph, self_loops=True), s.narrow)
    return K.finish(_normalized(s), s.op, reduce)


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
