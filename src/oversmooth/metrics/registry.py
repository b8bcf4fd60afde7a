"""The one registry of metric names: a column of the per-layer table is the name of the public
function that computes it (``laplacian_energy`` is :func:`oversmooth.metrics.laplacian_energy`).

The :class:`~oversmooth.probe.Probe`, ``--metrics`` and ``oversmooth metrics`` read it.  Output
folders written before the names agreed keep loading: :data:`RENAMED` maps each old column name
to its metric, and :func:`oversmooth.registry.upgrade_columns` applies it when a table is read
(:func:`oversmooth.outputs.read_table`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from torch import Tensor

from oversmooth.metrics import energies, similarity, spread
from oversmooth.metrics.state import LayerState
from oversmooth.registry import RENAMED_COLUMNS, Registry
from oversmooth.resources import check_energy_order

__all__ = [
    "Metric",
    "METRICS",
    "DEFAULT_METRICS",
    "NOT_PER_LAYER",
    "RENAMED",
    "available_metrics",
    "check_metrics",
    "layer_kernel",
    "between_kernel",
]


@dataclass(frozen=True)
class Metric:
    """One per-layer measure: the column a Probe records (and ``--metrics`` names), computed by
    the public function of the same name.

    ``kind``: ``layer`` (``fn(state)`` gives the 0-d float64 value of one
    :class:`LayerState`), ``between`` (``fn(previous, state)``: measured against the previous
    layer, NaN at a step's first layer), ``derived`` (from the column of other layers;
    ``fn`` is None) or ``pattern`` (a family of names, ``energy_<m>``).  ``default``: recorded
    when no list is given.
    """

    name: str
    help: str
    kind: str = "layer"
    fn: Callable[..., Tensor] | None = None
    default: bool = False


_LAYER = {**energies.PER_LAYER, **similarity.PER_LAYER, **spread.PER_LAYER}
_BETWEEN = {**similarity.BETWEEN_LAYERS, **spread.BETWEEN_LAYERS}


def _layer(name: str, help: str, default: bool = False) -> Metric:
    return Metric(name, help, "layer", _LAYER[name], default)


def _between(name: str, help: str, default: bool = False) -> Metric:
    return Metric(name, help, "between", _BETWEEN[name], default)


# The defaults come first, in the column order of a Probe's table.
METRICS: Registry[Metric] = Registry(
    "metrics",
    {
        m.name: m
        for m in (
            _layer(
                "laplacian_energy",
                "E2 = (1/n) ||PX - X||_F^2, P = D^-1 W (counting measure; 0 at an isolated node)",
                default=True,
            ),
            _layer(
                "dirichlet_energy", "E1 = (1/n) * 1/2 sum_ij w_ij ||X_j - X_i||^2", default=True
            ),
            Metric(
                "relative_energy",
                "R(X^k) = (E(X^k) - E(X^k-1)) / E(X^k-1) of laplacian_energy; -> 0 is the "
                "curse of depth",
                kind="derived",
                default=True,
            ),
            _between(
                "mean_cosine_similarity",
                "sim(X^k-1, X^k) = (1/n) sum_i cos(X^k-1_i, X^k_i), against the previous layer",
                default=True,
            ),
            _layer("feature_norm", "sqrt((1/n) ||X||_F^2)", default=True),
            _layer(
                "rayleigh_energy",
                "E2 / ((1/n) ||X||_F^2) = ||PX - X||_F^2 / ||X||_F^2: scale-invariant "
                "Laplacian energy",
            ),
            _layer(
                "laplacian_energy_degree",
                "(1/n) sum_i d_i ||(PX - X)_i||^2: E2 with node i weighted by its degree d_i",
            ),
            Metric(
                "energy_<m>",
                "E_m for an order 1 <= m <= 1000 (energy(x, graph, m)), e.g. energy_3: E_2k = "
                "(1/n) int |Delta^k X|^2 dmu, E_2k+1 = (1/n) int |grad Delta^k X|^2 dmu",
                kind="pattern",
            ),
            _layer(
                "rusch_dirichlet_energy",
                "sqrt((1/n) sum_i sum_{j in N_i} ||X_i - X_j||^2) (Rusch et al. 2023)",
            ),
            _layer(
                "mean_average_distance",
                "MAD: (1/n') sum_i mean_{j in N_i} (1 - cos(X_i, X_j)) (Chen et al. 2020)",
            ),
            _layer(
                "mean_average_distance_global", "MAD over all pairs i != j of 1 - cos(X_i, X_j)"
            ),
            _layer("effective_rank", "exp(entropy of normalised singular values of X - mean)"),
            _layer(
                "normalized_dirichlet_energy",
                "(1/n) * 1/2 sum_ij w_ij ||X_i/sqrt(d_i) - X_j/sqrt(d_j)||^2 = (1/n) tr(X^T (I - "
                "D^-1/2 W D^-1/2) X) (Cai & Wang 2020); not 0 on constant X unless degrees are "
                "equal",
            ),
            _layer(
                "rank_one_distance",
                "||X - 1 mean(X)^T||_F / ||X||_F = min_u ||X - 1u^T||_F / ||X||_F: 0 is rank "
                "collapse to one row (Roth & Liebig 2023); NaN for X = 0",
            ),
            _layer(
                "stream_variance",
                "(1/(n d)) ||X - 1 mean(X)^T||_F^2, mean over channels of the variance over "
                "nodes; its growth with depth (Sun et al. 2025)",
            ),
            _between(
                "angular_distance",
                "arccos(sim(X^k-1, X^k)) / pi, the angle of the mean cosine (Gromov et al. 2024)",
            ),
            _between("relative_update", "||X^k - X^k-1||_F / ||X^k-1||_F (Csordas et al. 2025)"),
        )
    },
)
#: Measures that are not per-layer columns (not accepted by --metrics), listed beside them.
NOT_PER_LAYER: dict[str, str] = {
    "layer_similarity": "square matrix of sim(X^s, X^t) over all pairs of the states given "
    "(layers 0..L: (L+1) x (L+1)): "
    "Probe(similarity=True); `oversmooth analyze` writes similarity.csv",
}
DEFAULT_METRICS = tuple(name for name, m in METRICS.items() if m.default)
#: Old column name -> its metric's name (columns of folders written before the names agreed).
RENAMED: dict[str, str] = dict(RENAMED_COLUMNS)
_ENERGY_M = re.compile(r"^energy_([1-9][0-9]*)$")


def available_metrics() -> list[str]:
    """Every metric name a probe accepts (``energy_<m>`` for any order ``1 <= m <= 1000``)."""
    return list(METRICS)


def _unknown(name: object) -> ValueError:
    hint = f" (renamed {RENAMED[name]})" if isinstance(name, str) and name in RENAMED else ""
    return ValueError(  # the registries' wording (oversmooth.registry.Registry.resolve)
        f"metrics: expected one of {', '.join(available_metrics())} (energy_<m> for any order "
        f"m >= 1), received {name!r}{hint}"
    )


def layer_kernel(name: str) -> Callable[[LayerState], Tensor] | None:
    """The kernel of a ``layer`` metric or of ``energy_<m>`` (None for the other kinds);
    ``ValueError`` for an unknown name."""
    metric = METRICS.get(name)
    if metric is not None and metric.kind != "pattern":
        return metric.fn if metric.kind == "layer" else None
    match = _ENERGY_M.match(name) if isinstance(name, str) else None
    if match:
        order = int(match.group(1))
        check_energy_order(order)
        return energies.energy_kernel(order)
    raise _unknown(name)


def between_kernel(name: str) -> Callable[[LayerState, LayerState], Tensor] | None:
    """The kernel of a ``between`` metric (None for the other kinds)."""
    metric = METRICS.get(name)
    return metric.fn if metric is not None and metric.kind == "between" else None


def check_metrics(names: Iterable[str]) -> list[str]:
    """Validate metric names (``ValueError`` listing the valid ones) and return them as a list."""
    names = list(names)
    for name in names:
        layer_kernel(name)
    return names
