"""One registry per kind of name: models, convolutions, LayerNorm modes.

Every place that lists, checks or describes one of these names reads it here: the
model constructor, the run configs, the CLI choices and ``--help`` text, and
``oversmooth models``.  Adding a model is one :class:`ModelEntry` in :data:`MODELS`.
Metric names live in :data:`oversmooth.metrics.registry.METRICS` (they include the pattern
family ``energy_<m>``, so they are checked by :func:`oversmooth.metrics.check_metrics`); the
column names of older output folders are mapped to them here (:data:`RENAMED_COLUMNS`), so
that every reader of a table (:func:`oversmooth.outputs.read_table`, the verdict) can upgrade
it without importing torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar
from collections.abc import Iterator, Mapping

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Registry",
    "ModelEntry",
    "ConvEntry",
    "NormEntry",
    "MODELS",
    "CONVS",
    "NORMS",
    "DISPLAY",
    "display_name",
    "MetricEntry",
    "METRIC_ENTRIES",
    "DEFAULT_METRICS",
    "MAX_ENERGY_ORDER",
    "known_metric",
    "RENAMED_COLUMNS",
    "upgrade_columns",
]

E = TypeVar("E")


class Registry(Mapping[str, E], Generic[E]):
    """An ordered ``name -> entry`` mapping with one way to check a name.

    ``resolve(name)`` returns ``name`` when registered, else raises ``ValueError`` with
    the same wording for every kind: ``"<kind>: expected one of a, b, c, received 'x'"``.
    """

    def __init__(self, kind: str, entries: Mapping[str, E]) -> None:
        self.kind = kind
        self._entries: dict[str, E] = dict(entries)

    def __getitem__(self, name: str) -> E:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def choices(self) -> str:
        """The registered names, comma-separated, in order."""
        return ", ".join(self._entries)

    def resolve(self, name: object, kind: str | None = None) -> str:
        """``name`` when registered; otherwise one ``ValueError`` listing the choices.

        ``kind`` replaces the registry's kind in the message (e.g. ``models`` for a list).
        """
        if isinstance(name, str) and name in self._entries:
            return name
        raise ValueError(
            f"{kind or self.kind}: expected one of {self.choices()}, received {name!r}"
        )

    def add(self, name: str, entry: E) -> None:
        """Register ``name`` (refused when it already is)."""
        if name in self._entries:
            raise ValueError(f"{self.kind}: {name!r} is already registered")
        self._entries[name] = entry

    def remove(self, name: str) -> E:
        """Unregister ``name`` and return its entry."""
        self.resolve(name)
        return self._entries.pop(name)


@dataclass(frozen=True)
class ModelEntry:
    """One architecture of the zoo.

    ``placement``: ``preln``, ``postln`` or ``plain`` (where the LayerNorm sits, see
    :class:`oversmooth.nn.block.Block`), or ``diffusion`` (parameter-free ``X' = P X`` blocks,
    :class:`oversmooth.nn.model.Diffusion`); ``nonlocal_``: nonlocal message passing;
    ``display``: the name reports print; ``post_ln``: trained with the Post-LN recipe
    (warm-up to a 1e-4 peak learning rate); ``help``: one line for listings.
    """

    placement: str
    nonlocal_: bool
    display: str
    post_ln: bool
    help: str


@dataclass(frozen=True)
class ConvEntry:
    """One message-passing type: its one-line definition.

    ``elements``: what the blocks' states are, ``nodes`` or ``edges`` (edge-set attention,
    :mod:`oversmooth.nn.edgeset`); ``scores``: the conv whose scores an ``edges`` entry
    uses on the line graph.
    """

    help: str
    elements: str = "nodes"
    scores: str | None = None


@dataclass(frozen=True)
class NormEntry:
    """One LayerNorm statistics mode: its one-line definition."""

    help: str


MODELS: Registry[ModelEntry] = Registry(
    "model",
    {
        "preln": ModelEntry(
            "preln",
            False,
            "Pre-LN",
            False,
            "Pre-LN: Y = X + MP(LN(X)), X' = Y + FFN(LN(Y)); avoids collapse, curse of depth",
        ),
        "postln": ModelEntry(
            "postln",
            False,
            "Post-LN",
            True,
            "Post-LN: Y = LN(X + MP(X)), X' = LN(Y + FFN(Y)); exponential oversmoothing",
        ),
        "nonlocal": ModelEntry(
            "postln",
            True,
            "nonlocal Post-LN",
            True,
            "nonlocal Post-LN: each head scaled by (1/n)||P_h X - X||^2; algebraic smoothing",
        ),
        "nonlocal-preln": ModelEntry(
            "preln",
            True,
            "nonlocal Pre-LN",
            False,
            "nonlocal message passing in a Pre-LN block",
        ),
        "plain": ModelEntry(
            "plain",
            False,
            "plain",
            False,
            "classic stack X' = ReLU(MP(X)), no residual, no LN; textbook oversmoothing",
        ),
        "diffusion": ModelEntry(
            "diffusion",
            False,
            "linear diffusion",
            False,
            "reference X' = P X, P = GCN mean (--conv ignored; esa refused); no parameter, no LN",
        ),
    },
)

CONVS: Registry[ConvEntry] = Registry(
    "conv",
    {
        "san": ConvEntry("self-attention: e_ij = (Q X_i)·(K X_j)/sqrt(d_k) over N(i) and i"),
        "gcn": ConvEntry("e_ij = 1: the mean over the neighbourhood with self loop"),
        "gat": ConvEntry("e_ij = LeakyReLU(a^T [V X_i || V X_j]) over N(i) and i"),
        "esa": ConvEntry(
            "edge-set attention: edges are the elements, san scores over edges sharing a node",
            elements="edges",
            scores="san",
        ),
    },
)

NORMS: Registry[NormEntry] = Registry(
    "norm",
    {
        "node": NormEntry("one mean and variance per node, over its channels"),
        "graph": NormEntry("one mean and variance per graph, over its nodes and channels"),
    },
)


class _DisplayNames(Mapping[str, str]):
    """``model name -> display name``, read live from :data:`MODELS`."""

    def __getitem__(self, name: str) -> str:
        return MODELS[name].display

    def __iter__(self) -> Iterator[str]:
        return iter(MODELS)

    def __len__(self) -> int:
        return len(MODELS)


DISPLAY: Mapping[str, str] = _DisplayNames()


def display_name(model: str) -> str:
    """The name reports print for ``model`` (``Post-LN`` for ``postln``)."""
    return DISPLAY.get(model, model)


def bound_applies(model: str) -> bool:
    """Whether the nonlocal paper's Theorem 4.1 bound is set beside ``model``'s curve: the
    nonlocal Post-LN model's, the architecture the paper sets the theorem's flow beside (not
    ``nonlocal-preln``, whose stream adds the nonlocal message of its normalised state to
    itself).  Read where the reference is computed and where a report draws it, so a folder
    written before the rule is rebuilt without it."""
    entry = MODELS.get(model)
    return entry is not None and entry.nonlocal_ and entry.placement == "postln"


# -- metric names --------------------------------------------------------------------------------

#: Energy orders above this are refused: E_m applies Delta (spectral radius <= 2) m // 2 times,
#: so E_m can grow like 4^(m/2) ||X||^2; beyond m = 1000 a float64 result overflows for
#: unit-size features, and each order costs one more sparse product per layer.
MAX_ENERGY_ORDER = 1000

ENERGY_ORDER = re.compile(r"^energy_([1-9][0-9]*)$")


@dataclass(frozen=True)
class MetricEntry:
    """One per-layer measure by name (its kernel is bound in
    :data:`oversmooth.metrics.registry.METRICS`, which imports torch).

    ``kind``: ``layer`` (measured on one state), ``between`` (against the previous layer, NaN at
    a step's first layer), ``derived`` (from the column of other layers) or ``pattern`` (a
    family of names, ``energy_<m>``).  ``default``: recorded when no list is given.
    """

    name: str
    help: str
    kind: str = "layer"
    default: bool = False


def _layer_entry(name: str, help: str, default: bool = False) -> MetricEntry:
    return MetricEntry(name, help, "layer", default)


def _between_entry(name: str, help: str, default: bool = False) -> MetricEntry:
    return MetricEntry(name, help, "between", default)


# The defaults come first, in the column order of a Probe's table.
METRIC_ENTRIES: Registry[MetricEntry] = Registry(
    "metrics",
    {
        m.name: m
        for m in (
            _layer_entry(
                "laplacian_energy",
                "E2 = (1/n) ||PX - X||_F^2, P = D^-1 W (counting measure; 0 at an isolated node)",
                default=True,
            ),
            _layer_entry(
                "dirichlet_energy", "E1 = (1/n) * 1/2 sum_ij w_ij ||X_j - X_i||^2", default=True
            ),
            MetricEntry(
                "relative_energy",
                "R(X^k) = (E(X^k) - E(X^k-1)) / E(X^k-1) of laplacian_energy; -> 0 is the "
                "curse of depth",
                kind="derived",
                default=True,
            ),
            _between_entry(
                "mean_cosine_similarity",
                "sim(X^k-1, X^k) = (1/n) sum_i cos(X^k-1_i, X^k_i), against the previous layer",
                default=True,
            ),
            _layer_entry("feature_norm", "sqrt((1/n) ||X||_F^2)", default=True),
            _layer_entry(
                "rayleigh_energy",
                "E2 / ((1/n) ||X||_F^2) = ||PX - X||_F^2 / ||X||_F^2: scale-invariant "
                "Laplacian energy",
            ),
            _layer_entry(
                "laplacian_energy_degree",
                "(1/n) sum_i d_i ||(PX - X)_i||^2: E2 with node i weighted by its degree d_i",
            ),
            MetricEntry(
                "energy_<m>",
                "E_m for an order 1 <= m <= 1000 (energy(x, graph, m)), e.g. energy_3: E_2k = "
                "(1/n) int |Delta^k X|^2 dmu, E_2k+1 = (1/n) int |grad Delta^k X|^2 dmu",
                kind="pattern",
            ),
            _layer_entry(
                "rusch_dirichlet_energy",
                "sqrt((1/n) sum_i sum_{j in N_i} ||X_i - X_j||^2) (Rusch et al. 2023)",
            ),
            _layer_entry(
                "mean_average_distance",
                "MAD: (1/n') sum_i mean_{j in N_i} (1 - cos(X_i, X_j)) (Chen et al. 2020)",
            ),
            _layer_entry(
                "mean_average_distance_global", "MAD over all pairs i != j of 1 - cos(X_i, X_j)"
            ),
            _layer_entry(
                "effective_rank", "exp(entropy of normalised singular values of X - mean)"
            ),
            _layer_entry(
                "normalized_dirichlet_energy",
                "(1/n) * 1/2 sum_ij w_ij ||X_i/sqrt(d_i) - X_j/sqrt(d_j)||^2 = (1/n) tr(X^T (I - "
                "D^-1/2 W D^-1/2) X) (Cai & Wang 2020); not 0 on constant X unless degrees are "
                "equal",
            ),
            _layer_entry(
                "rank_one_distance",
                "||X - 1 mean(X)^T||_F / ||X||_F = min_u ||X - 1u^T||_F / ||X||_F: 0 is rank "
                "collapse to one row (Roth & Liebig 2023); NaN for X = 0",
            ),
            _layer_entry(
                "stream_variance",
                "(1/(n d)) ||X - 1 mean(X)^T||_F^2, mean over channels of the variance over "
                "nodes; its growth with depth (Sun et al. 2025)",
            ),
            _between_entry(
                "angular_distance",
                "arccos(sim(X^k-1, X^k)) / pi, the angle of the mean cosine (Gromov et al. 2024)",
            ),
            _between_entry(
                "relative_update", "||X^k - X^k-1||_F / ||X^k-1||_F (Csordas et al. 2025)"
            ),
        )
    },
)
DEFAULT_METRICS = tuple(name for name, m in METRIC_ENTRIES.items() if m.default)


def known_metric(name: object) -> bool:
    """Whether ``name`` is a metric a probe accepts: a registered name, or ``energy_<m>`` with
    ``1 <= m <=`` :data:`MAX_ENERGY_ORDER` (what
    :func:`oversmooth.metrics.check_metrics` accepts, without importing torch)."""
    if not isinstance(name, str):
        return False
    entry = METRIC_ENTRIES.get(name)
    if entry is not None:
        return entry.kind != "pattern"
    match = ENERGY_ORDER.match(name)
    return match is not None and int(match.group(1)) <= MAX_ENERGY_ORDER


# -- old column names ----------------------------------------------------------------------------

#: Column names of per-layer tables written before a column was named after the function that
#: computes it (oversmooth.metrics.registry) -> the name now.
RENAMED_COLUMNS: dict[str, str] = {
    "cosine_prev": "mean_cosine_similarity",
    "rusch_dirichlet": "rusch_dirichlet_energy",
    "mad": "mean_average_distance",
    "mad_global": "mean_average_distance_global",
}


def upgrade_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its old column names (:data:`RENAMED_COLUMNS`) renamed to the current
    ones; ``frame`` itself when it has none (a column already under its new name wins)."""
    old = {c: new for c, new in RENAMED_COLUMNS.items() if c in frame and new not in frame}
    return frame.rename(columns=old) if old else frame
