"""The one registry of metric names: a column of the per-layer table is the name of the public
function that computes it (``laplacian_energy`` is :func:`oversmooth.metrics.laplacian_energy`).

The :class:`~oversmooth.probe.Probe`, ``--metrics`` and ``oversmooth metrics`` read it.  Output
folders written before the names agreed keep loading: :data:`RENAMED` maps each old column name
to its metric, and :func:`oversmooth.registry.upgrade_columns` applies it when a table is read
(:func:`oversmooth.outputs.read_table`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from torch import Tensor

from oversmooth.metrics import energies, similarity, spread
from oversmooth.metrics.state import LayerState
from oversmooth.registry import (
    DEFAULT_METRICS,
    ENERGY_ORDER,
    METRIC_ENTRIES,
    RENAMED_COLUMNS,
    MetricEntry,
    Registry,
)
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


def _bound(entry: MetricEntry) -> Metric:
    """``entry`` with its kernel (a ``layer`` or ``between`` metric without one is a
    ``KeyError`` at import)."""
    fn: Callable[..., Tensor] | None = None
    if entry.kind == "layer":
        fn = _LAYER[entry.name]
    elif entry.kind == "between":
        fn = _BETWEEN[entry.name]
    return Metric(entry.name, entry.help, entry.kind, fn, entry.default)


# The defaults come first, in the column order of a Probe's table (that of METRIC_ENTRIES).
METRICS: Registry[Metric] = Registry(
    "metrics", {name: _bound(entry) for name, entry in METRIC_ENTRIES.items()}
)
#: Measures that are not per-layer columns (not accepted by --metrics), listed beside them.
NOT_PER_LAYER: dict[str, str] = {
    "layer_similarity": "square matrix of sim(X^s, X^t) over all pairs of the states given "
    "(layers 0..L: (L+1) x (L+1)): "
    "Probe(similarity=True); `oversmooth analyze` writes similarity.csv",
}
#: Old column name -> its metric's name (columns of folders written before the names agreed).
RENAMED: dict[str, str] = dict(RENAMED_COLUMNS)


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
    match = ENERGY_ORDER.match(name) if isinstance(name, str) else None
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
