"""Per-layer measures of oversmoothing and of the curse of depth.

Every function here is pure: ``(x, graph, ...) -> 0-d float64 tensor`` on ``x``'s device,
and its name is the column a :class:`~oversmooth.probe.Probe` records
(:data:`~oversmooth.metrics.registry.METRICS`).  ``graph`` is anything
:func:`~oversmooth.graph.as_graph` accepts, or a prebuilt
:class:`~oversmooth.graph.GraphOperator`.  With an operator nothing inside synchronises with
the host on a GPU (except the SVD of :func:`effective_rank`); from an ``edge_index`` the
operator is built and validated first, which reads the index range once -- build it once and
reuse it when you measure many tensors on the same graph, as the Probe does.  Conventions
(see :mod:`oversmooth.graph`): messages flow ``edge_index[0] -> edge_index[1]``, node ``i``'s
neighbours ``N_i`` are the sources of the edges that enter it, :math:`d_i = \\sum_j
\\omega_{ij}`.

All arithmetic is done in float64, whatever ``x``'s dtype: energies of ``1e-14`` are real
results at depth 256 and float32 accumulation destroys them.  Nothing builds an ``n x n``
matrix: neighbourhood sums go over the edge list, ``O(|E| d)`` time and ``O(n d)`` memory.

Exactness: every metric agrees with an extended-precision reference to 1e-10 relative on
float64 states, also on near-constant ones (a common offset with a spread down to 1e-10 of
it: the oversmoothed regime), and constant input gives exactly 0.  Differences are formed
before squares and products (the Laplacian is summed from edge differences, ``1 - cos`` is
``0.5 ||u - v||^2`` with ``u - v`` built from ``x - y``), and norms are taken of rows scaled
by a power of two where a square could overflow, so finite rows never overflow them.

Layout: :mod:`~oversmooth.metrics.kernels` (the exact float64 reductions),
:mod:`~oversmooth.metrics.state` (one state's shared node and edge passes),
:mod:`~oversmooth.metrics.energies`, :mod:`~oversmooth.metrics.similarity`,
:mod:`~oversmooth.metrics.spread` (the functions) and :mod:`~oversmooth.metrics.registry`
(the column names).

Non-finite input: NaN or Inf anywhere in ``x`` (also on an isolated node that no edge reads)
makes the result NaN (or Inf); :func:`effective_rank` returns NaN instead of raising.  Nothing
is dropped silently; check ``torch.isfinite`` on the result.  Complex ``x`` is refused.
"""

from __future__ import annotations

from oversmooth.metrics.energies import (
    dirichlet_energy,
    energy,
    laplacian_energy,
    laplacian_energy_degree,
    normalized_dirichlet_energy,
    rayleigh_energy,
    relative_energy,
    rusch_dirichlet_energy,
)
from oversmooth.metrics.registry import (
    DEFAULT_METRICS,
    METRICS,
    NOT_PER_LAYER,
    Metric,
    available_metrics,
    check_metrics,
)
from oversmooth.metrics.similarity import (
    angular_distance,
    layer_similarity,
    mean_average_distance,
    mean_average_distance_global,
    mean_cosine_similarity,
)
from oversmooth.metrics.spread import (
    effective_rank,
    feature_norm,
    rank_one_distance,
    relative_update,
    stream_variance,
)
from oversmooth.metrics.state import LayerState

__all__ = [
    "dirichlet_energy",
    "laplacian_energy",
    "laplacian_energy_degree",
    "rayleigh_energy",
    "energy",
    "rusch_dirichlet_energy",
    "normalized_dirichlet_energy",
    "relative_energy",
    "mean_cosine_similarity",
    "angular_distance",
    "layer_similarity",
    "mean_average_distance",
    "mean_average_distance_global",
    "feature_norm",
    "effective_rank",
    "rank_one_distance",
    "stream_variance",
    "relative_update",
    "LayerState",
    "Metric",
    "METRICS",
    "DEFAULT_METRICS",
    "NOT_PER_LAYER",
    "available_metrics",
    "check_metrics",
]
