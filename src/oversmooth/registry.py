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
