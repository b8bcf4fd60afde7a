"""Per-layer measures of oversmoothing and of the curse of depth.

Every function here is pure: ``(x, graph, ...) -> 0-d float64 tensor`` on
``x``'s device.  ``graph`` is either an ``edge_index`` tensor or a prebuilt
:class:`~oversmooth.graph.GraphOperator`.  With an operator nothing inside
synchronises with the host (except the SVD of :func:`effective_rank` on CUDA);
from an ``edge_index`` the operator is built and validated first, which reads
the index range once -- build it once and reuse it when you measure many
tensors on the same graph, as :class:`~oversmooth.probe.Probe` does.  Conventions (see :mod:`oversmooth.graph`): messages flow
``edge_index[0] -> edge_index[1]``, node ``i``'s neighbours ``N_i`` are the
sources of the edges that enter it, :math:`d_i = \\sum_j \\omega_{ij}`.

All arithmetic is done in float64, whatever ``x``'s dtype: energies of
``1e-14`` are real results at depth 256 and float32 accumulation destroys them.
Nothing builds an ``n x n`` matrix: neighbourhood sums go over the edge list in
chunks, ``O(|E| d)`` time and ``O(n d)`` memory.

Non-finite input: NaN or Inf anywhere in ``x`` propagates, and the result is
NaN (or Inf).  Nothing is dropped silently; check ``torch.isfinite`` on the
result.
"""

from __future__ import annotations

from typing import Literal, Sequence, Union

import torch
from torch import Tensor

from oversmooth.graph import GraphLike, GraphOperator, as_operator, validate_features
from oversmooth.resources import check_energy_order

__all__ = [
    "dirichlet_energy",
    "laplacian_energy",
    "energy",
    "rusch_dirichlet_energy",
    "mean_average_distance",
    "effective_rank",
    "feature_norm",
    "mean_cosine_similarity",
    "relative_energy",
    "layer_similarity",
]

# Edges per chunk are chosen so that one chunk of gathered rows holds at most
# this many float64 values (2 MiB): small enough to stay in cache, large enough
# that the Python loop over chunks costs nothing (measured 5x faster than 32 MiB
# chunks on a 200k-edge graph).
_CHUNK_VALUES = 1 << 18


def _prepare(x: Tensor, graph: GraphLike, edge_weight: Tensor | None = None) -> tuple[Tensor, GraphOperator]:
    validate_features(x)
    if edge_weight is not None:
        if isinstance(graph, GraphOperator):
            raise ValueError(
                "edge_weight: pass the weights when building the GraphOperator, not with an operator"
            )
        graph = GraphOperator(graph.to(x.device), edge_weight, num_nodes=x.size(0))
    op = as_operator(graph, num_nodes=x.size(0), device=x.device)
    return x.to(torch.float64), op


def _edge_chunks(op: GraphOperator, channels: int):
    step = max(1, _CHUNK_VALUES // max(channels, 1))
    src, dst = op.edge_index
    for start in range(0, op.num_edges, step):
        stop = start + step
        yield src[start:stop], dst[start:stop], op.edge_weight[start:stop]


def _half_edge_sum(x64: Tensor, op: GraphOperator, weighted: bool = True) -> Tensor:
    """sum over edges of w_e * ||x_src - x_dst||^2 (float64)."""
    total = x64.new_zeros(())
    for src, dst, w in _edge_chunks(op, x64.size(1)):
        sq = (x64[src] - x64[dst]).pow(2).sum(dim=1)  # [chunk]
        total = total + ((w * sq).sum() if weighted else sq.sum())
    return total


def _unit_rows(x: Tensor, eps: float = 1e-300) -> Tensor:
    """Rows scaled to unit norm; all-zero rows stay zero (their cosine with anything is 0)."""
    norm = x.norm(dim=1, keepdim=True)
    return x / norm.clamp_min(eps)


def dirichlet_energy(x: Tensor, graph: GraphLike, edge_weight: Tensor | None = None) -> Tensor:
    """First-order (Dirichlet) energy.

    .. math::

        E_1(X) = \\frac{1}{n} \\cdot \\frac12 \\sum_i \\sum_{j} \\omega_{ij} \\|X_j - X_i\\|^2
               = \\frac{1}{n} \\int_G |\\nabla_\\mu X|^2 \\, d\\mu

    The double sum runs over the edge list as given: an undirected graph stored
    with both directions (PyG's convention) counts every pair twice, and the
    ``1/2`` turns that into one count per pair.

    Args:
        x: ``[num_nodes, channels]`` node features.
        graph: ``edge_index`` ``[2, num_edges]`` or a :class:`GraphOperator`.
        edge_weight: optional ``[num_edges]`` weights (only with an ``edge_index``).

    Returns:
        0-d float64 tensor on ``x.device``.

    Example:
        >>> ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])  # path 0-1-2
        >>> dirichlet_energy(torch.tensor([[0.0], [1.0], [3.0]]), ei)  # (1 + 4) / 3
        tensor(1.6667, dtype=torch.float64)
    """
    x64, op = _prepare(x, graph, edge_weight)
    return 0.5 * _half_edge_sum(x64, op) / max(op.num_nodes, 1)


def _squared_rows(y: Tensor) -> Tensor:
    return y.pow(2).sum(dim=1)  # [num_nodes]


def _measure_sum(sq: Tensor, op: GraphOperator, measure: str) -> Tensor:
    if measure == "counting":
        return sq.sum() / max(op.num_nodes, 1)
    if measure == "degree":
        return (op.degree * sq).sum() / max(op.num_nodes, 1)
    raise ValueError(f"measure: expected one of 'counting', 'degree', received {measure!r}")


def laplacian_energy(
    x: Tensor,
    graph: GraphLike,
    measure: Literal["counting", "degree"] = "counting",
    edge_weight: Tensor | None = None,
) -> Tensor:
    """Laplacian energy, the default "energy" of the toolkit.

    .. math::

        E_2(X) = \\frac{1}{n} \\|PX - X\\|_F^2 \\quad (\\text{measure}=\\text{"counting"}), \\qquad
        \\frac{1}{n} \\sum_i d_i \\|(PX - X)_i\\|^2 \\quad (\\text{measure}=\\text{"degree"}).

    The counting form is exactly the factor that scales each head of nonlocal
    message passing; the degree form is :math:`\\frac1n \\int_G |\\Delta_\\mu X|^2 d\\mu`.
    Isolated nodes contribute 0 (see :mod:`oversmooth.graph`).

    Example:
        >>> ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])  # path 0-1-2
        >>> laplacian_energy(torch.tensor([[0.0], [1.0], [3.0]]), ei)  # (1 + 0.25 + 4) / 3
        tensor(1.7500, dtype=torch.float64)
    """
    x64, op = _prepare(x, graph, edge_weight)
    return _measure_sum(_squared_rows(op.laplacian(x64)), op, measure)


def energy(
    x: Tensor,
    graph: GraphLike,
    order: int = 2,
    measure: Literal["counting", "degree"] = "degree",
    edge_weight: Tensor | None = None,
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
    x64, op = _prepare(x, graph, edge_weight)
    y = x64
    for _ in range(order // 2):
        y = op.laplacian(y)
    if order % 2:
        return 0.5 * _half_edge_sum(y, op) / max(op.num_nodes, 1)
    return _measure_sum(_squared_rows(y), op, measure)


def rusch_dirichlet_energy(x: Tensor, graph: GraphLike) -> Tensor:
    """Dirichlet energy in the convention of Rusch et al. (2023), "A survey on
    oversmoothing in graph neural networks":

    .. math::

        \\sqrt{ \\frac1n \\sum_i \\sum_{j \\in N_i} \\|X_i - X_j\\|^2 }

    Unweighted, as in the survey: edge weights are ignored and every edge of the
    list counts once.  On an unweighted graph it equals ``sqrt(2 * dirichlet_energy)``.
    """
    x64, op = _prepare(x, graph)
    return (_half_edge_sum(x64, op, weighted=False) / max(op.num_nodes, 1)).sqrt()


def mean_average_distance(
    x: Tensor,
    graph: GraphLike | None = None,
    variant: Literal["neighbors", "global"] = "neighbors",
) -> Tensor:
    """Mean average (cosine) distance, MAD (Chen et al. 2020).

    ``variant="neighbors"``:

    .. math::

        \\mathrm{MAD} = \\frac{1}{n'} \\sum_{i: N_i \\neq \\emptyset}
            \\frac{1}{|N_i|} \\sum_{j \\in N_i} \\bigl(1 - \\cos(X_i, X_j)\\bigr)

    where :math:`n'` counts the nodes that have neighbours (``n' = n`` without
    isolated nodes); neighbours are counted without weights, as in the paper.
    ``variant="global"`` averages over all ordered pairs ``i != j`` instead, in
    ``O(n d)`` through :math:`\\sum_{j \\neq i} \\cos(X_i, X_j) = u_i \\cdot S - \\|u_i\\|^2`
    with :math:`u_i = X_i / \\|X_i\\|` and :math:`S = \\sum_j u_j`; it needs no graph.
    An all-zero row has cosine 0 with every row (distance 1).
    """
    validate_features(x)
    x64 = x.to(torch.float64)
    u = _unit_rows(x64)
    if variant == "global":
        n = x.size(0)
        if n < 2:
            return x64.new_zeros(())
        s = u.sum(dim=0)
        pair_cos = s.dot(s) - _squared_rows(u).sum()  # sum over ordered pairs i != j
        return 1.0 - pair_cos / (n * (n - 1))
    if variant != "neighbors":
        raise ValueError(f"variant: expected one of 'neighbors', 'global', received {variant!r}")
    if graph is None:
        raise ValueError("graph: the 'neighbors' variant needs an edge_index or GraphOperator")
    _, op = _prepare(x, graph)
    dist = x64.new_zeros(op.num_nodes)
    count = x64.new_zeros(op.num_nodes)
    for src, dst, _w in _edge_chunks(op, x64.size(1)):
        cos = (u[src] * u[dst]).sum(dim=1)  # [chunk]
        dist.index_add_(0, dst, 1.0 - cos)
        count.index_add_(0, dst, torch.ones_like(cos))
    has = count > 0
    per_node = torch.where(has, dist / count.clamp_min(1.0), 0.0)
    return per_node.sum() / has.sum().clamp_min(1)


def effective_rank(x: Tensor) -> Tensor:
    """Effective rank (Roy & Vetterli 2007) of the centred features.

    .. math::

        \\mathrm{erank}(X) = \\exp\\Bigl(-\\sum_k p_k \\log p_k\\Bigr), \\qquad
        p_k = \\sigma_k / \\sum_l \\sigma_l

    with :math:`\\sigma_k` the singular values of ``X - mean(X, dim=0)``.  Ranges
    from 1 (rank collapse) to ``min(n, channels)``; an exactly constant ``X``
    gives 0.  Cost ``O(n d^2)`` (one SVD, which on CUDA synchronises inside the
    solver).  Graph-free: no ``graph`` argument.
    """
    validate_features(x)
    x64 = x.to(torch.float64)
    sv = torch.linalg.svdvals(x64 - x64.mean(dim=0, keepdim=True))
    total = sv.sum()
    p = sv / total.clamp_min(1e-300)
    entropy = -(p * p.clamp_min(1e-300).log()).sum()
    return torch.where(total > 0, entropy.exp(), torch.zeros_like(entropy))


def feature_norm(x: Tensor) -> Tensor:
    """Root-mean-square node norm :math:`\\sqrt{\\frac1n \\|X\\|_F^2}` (float64)."""
    validate_features(x)
    return (x.to(torch.float64).pow(2).sum() / max(x.size(0), 1)).sqrt()


def mean_cosine_similarity(x: Tensor, y: Tensor) -> Tensor:
    """:math:`\\mathrm{sim}(X, Y) = \\frac1n \\sum_i \\cos(X_i, Y_i)` for two states of the same nodes.

    Zero rows have cosine 0.  ``x`` and ``y`` must have the same shape.
    """
    validate_features(x)
    validate_features(y, "y")
    if x.shape != y.shape:
        raise ValueError(f"y: expected the shape of x {list(x.shape)}, received {list(y.shape)}")
    return (_unit_rows(x.to(torch.float64)) * _unit_rows(y.to(torch.float64))).sum() / max(x.size(0), 1)


def relative_energy(energies: Union[Tensor, Sequence[float]]) -> Tensor:
    """Relative energy change :math:`R(X^k) = (E(X^k) - E(X^{k-1})) / E(X^{k-1})`.

    Definition 2.1 of Guan & He (2025), the curse-of-depth indicator: a Pre-LN
    stack has ``R -> 0`` with depth (deep layers stop changing anything).

    Args:
        energies: ``[L]`` per-layer energies ``E(X^0), ..., E(X^{L-1})``.

    Returns:
        ``[L]`` float64 tensor; entry 0 is NaN (no previous layer).  Where the
        previous energy is 0 the ratio is Inf (or NaN when both are 0), as IEEE
        division gives; nothing is clipped.
    """
    e = torch.as_tensor(energies, dtype=torch.float64)  # python floats must not pass through float32
    if e.dim() != 1:
        raise ValueError(f"energies: expected a 1-D sequence of per-layer energies, received shape {list(e.shape)}")
    out = torch.full_like(e, float("nan"))
    out[1:] = (e[1:] - e[:-1]) / e[:-1]
    return out


def layer_similarity(states: Union[Tensor, Sequence[Tensor]]) -> Tensor:
    """The ``L x L`` matrix of inter-layer similarities :math:`\\mathrm{sim}(X^s, X^t)`.

    Args:
        states: ``L`` tensors ``[num_nodes, channels]`` of one shape, or one
            ``[L, num_nodes, channels]`` tensor.

    Returns:
        ``[L, L]`` float64 tensor, symmetric, with ones on the diagonal (zeros
        for an all-zero state).  Memory ``O(L n d)``: the states must be held.
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
    flat = u.reshape(u.size(0), -1)  # [L, n*d]
    return flat @ flat.T / max(n, 1)
