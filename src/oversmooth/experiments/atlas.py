"""The atlas of PyTorch Geometric's zoo: every deep-GNN building block, probed at initialisation.

:func:`run_atlas` builds each architecture of :data:`oversmooth.experiments.pyg_zoo.ZOO` at the
deepest of :attr:`AtlasConfig.depths` for every seed, probes one forward pass on each dataset
(the first one, embedded Cora by default, is the main one), judges the per-layer Laplacian
energy with :func:`oversmooth.verdict` (all seeds pooled as replicates) and prunes the middle
layer with :func:`oversmooth.prune_sensitivity`.  The final energy at a shallower depth ``d`` is
layer ``d`` of the deepest run: every builder draws the first ``d`` layers of a deeper stack
exactly as the depth-``d`` stack (tested).  :func:`write_atlas` writes the folder
(``reports/atlas/`` in the repository): one table, one row per architecture, and one overlaid
log-log figure.

Float floor: the zoo's own models use :func:`oversmooth.analysis.probe_run`'s (a float64 twin
where a layer nears the bound); PyG models the single-step bound ``(eps * ||x||)^2`` of float64.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from oversmooth.config import SEED_RANGE, is_seed

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from oversmooth.experiments.pyg_zoo import ZooEntry

    from oversmooth.analysis import Progress
    from oversmooth.precision import TwinEvidence
    from oversmooth.verdict import Verdict

__all__ = [
    "AtlasConfig",
    "AtlasResult",
    "AtlasReport",
    "ARCHITECTURES",
    "QUICK",
    "atlas_table",
    "display_table",
    "read_atlas",
    "render_atlas",
    "run_atlas",
    "write_atlas",
]

#: the architectures of :data:`oversmooth.experiments.pyg_zoo.ZOO`, in its order (named here
#: so that the config and ``oversmooth atlas --help`` import no torch; a test keeps them equal)
ARCHITECTURES = (
    "gcn",
    "gat",
    "gatv2",
    "sage",
    "gin",
    "gcn-pairnorm",
    "gcnii",
    "appnp",
    "deepergcn",
    "gps",
    "transformer-preln",
    "transformer-postln",
    "zoo-preln",
    "zoo-postln",
    "zoo-nonlocal",
)


def _zoo() -> dict[str, ZooEntry]:
    """:data:`oversmooth.experiments.pyg_zoo.ZOO`, imported on first use (it imports torch)."""
    from oversmooth.experiments.pyg_zoo import ZOO

    return ZOO


#: what ``--quick`` changes: a smoke run of every architecture on two small graphs
QUICK: dict[str, Any] = {
    "depths": (2, 4, 16),
    "seeds": (0,),
    "datasets": ("csbm:n=120,degree=6", "karate"),
}


def _ints(name: str, values: Sequence[int], minimum: int) -> tuple[int, ...]:
    out = tuple(values)
    if not out:
        raise ValueError(f"{name}: expected at least one integer")
    for v in out:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise ValueError(f"{name}: expected integers >= {minimum}, received {v!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: expected distinct values, received {list(out)}")
    return out


@dataclass(frozen=True)
class AtlasConfig:
    """What the atlas runs.

    ``architectures``: keys of :data:`~oversmooth.experiments.pyg_zoo.ZOO` (None: all of
    them, :data:`ARCHITECTURES`); ``depths``: the
    depths whose final energy the table gives (the deepest is probed, judged and pruned);
    ``seeds``: draws of each architecture, pooled as replicates by the verdict; ``datasets``:
    the first is the main one (every column), the others add a verdict and decades lost each;
    ``prune_seeds``: how many of the seeds are pruned (one pruned forward of every layer after
    the middle one per seed; GPS's global attention makes each cost minutes on Cora).
    ``quick`` selects the preset (:meth:`preset`), which sets the depths and datasets.
    """

    #: set by the preset (``--quick``), not by options of their own
    PRESET: ClassVar[tuple[str, ...]] = ("quick", "depths", "datasets")

    architectures: tuple[str, ...] | None = None  # None: every one of ARCHITECTURES
    depths: tuple[int, ...] = (2, 8, 32, 64, 128)
    seeds: tuple[int, ...] = (0, 1, 2)
    datasets: tuple[str, ...] = ("cora", "csbm")
    prune_seeds: int = 1
    device: str = "auto"
    quick: bool = False

    def __post_init__(self) -> None:
        if self.architectures is None:
            object.__setattr__(self, "architectures", ARCHITECTURES)
        if not self.architectures:
            raise ValueError("architectures: expected at least one name")
        for key in self.architectures:
            if key not in ARCHITECTURES:
                raise ValueError(
                    f"architectures: unknown name {key!r}; expected any of "
                    f"{', '.join(ARCHITECTURES)}"
                )
        object.__setattr__(self, "depths", tuple(sorted(_ints("depths", self.depths, 1))))
        _ints("seeds", self.seeds, 0)
        if not all(is_seed(s) for s in self.seeds):
            raise ValueError(
                f"seeds: expected integers in {SEED_RANGE}, received {list(self.seeds)}"
            )
        if not self.datasets:
            raise ValueError("datasets: expected at least one dataset")
        if isinstance(self.prune_seeds, bool) or not 0 <= self.prune_seeds <= len(self.seeds):
            raise ValueError(
                f"prune_seeds: expected an integer in [0, {len(self.seeds)}] (the number of "
                f"seeds), received {self.prune_seeds!r}"
            )

    @property
    def names(self) -> tuple[str, ...]:
        """The architectures run, in order (``architectures``, or all of them)."""
        return self.architectures or ARCHITECTURES

    @property
    def depth(self) -> int:
        """The deepest depth: the one probed."""
        return self.depths[-1]

    @property
    def middle(self) -> int:
        """The layer pruned: the middle one of the deepest stack."""
        return max(1, self.depth // 2)

    @classmethod
    def preset(cls, quick: bool, **options: Any) -> AtlasConfig:
        """The full atlas, or with ``quick`` :data:`QUICK`; ``options`` replace either."""
        return cls(**{**(QUICK if quick else {}), "quick": quick, **options})


@dataclass
class AtlasResult:
    """The numbers of one atlas run: ``curves`` (one row per architecture, dataset, seed and
    layer), ``prune`` (one row per pruned architecture and seed), ``verdicts`` (per
    architecture and dataset), ``table`` (:func:`atlas_table`), ``timings`` (seconds per
    architecture and in all), what ``config.json`` records and ``notes``: what the probe and
    the pruning reported per architecture (layers that did not run like the others, a
    pruned layer that is not the identity on the stream)."""

    config: AtlasConfig
    curves: pd.DataFrame
    prune: pd.DataFrame
    verdicts: dict[tuple[str, str], Verdict]
    table: pd.DataFrame
    timings: dict[str, float] = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)  # per architecture

    def report(self) -> AtlasReport:
        """What the report shows (and the folder keeps)."""
        return AtlasReport(
            config=self.config,
            table=self.table,
            curves=self.curves,
            verdicts={f"{key}/{name}": v.to_dict() for (key, name), v in self.verdicts.items()},
            timings=self.timings,
            environment=self.environment,
            notes=self.notes,
        )


@dataclass
class AtlasReport:
    """What an atlas report shows, from a run (:meth:`AtlasResult.report`) or read back from
    its folder (:func:`read_atlas`): the verdicts as ``Verdict.to_dict()`` records keyed
    ``"architecture/dataset"``."""

    config: AtlasConfig
    table: pd.DataFrame
    curves: pd.DataFrame
    verdicts: dict[str, dict]
    timings: dict[str, float]
    environment: dict
    notes: dict[str, list[str]]


# ----------------------------------------------------------------------------- running


def _pyg_data(data: Any, device: torch.device) -> Any:
    """A PyG ``Data`` with float64 features on ``device`` (what prune_sensitivity takes)."""
    import torch

    pyg = data.to_pyg() if hasattr(data, "to_pyg") else data.clone()
    pyg.x = pyg.x.to(torch.float64)
    return pyg.to(device)


def probe_entry(
    entry: ZooEntry, model: torch.nn.Module, data: Any, twin: TwinEvidence | None = None
) -> pd.DataFrame:
    """One probed forward of ``model`` (built by ``entry``) on ``data`` (float64 ``x``, on the
    model's device): the per-layer table with ``float_floor`` and ``at_floor``.  ``twin``: what
    an earlier seed's float64 twin of a native model measured (see
    :func:`~oversmooth.analysis.probe_run`)."""
    from oversmooth.analysis import probe_run

    if entry.native:
        return probe_run(model, data, floor="auto", twin=twin)
    stream = entry.stream(model) if entry.stream is not None else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = _probe_foreign(entry, model, data, stream)
    frame.attrs["warnings"] = list(dict.fromkeys(str(w.message) for w in caught))
    return frame


def _probe_foreign(
    entry: ZooEntry, model: torch.nn.Module, data: Any, stream: list | None
) -> pd.DataFrame:
    import torch

    from oversmooth.precision import add_floor_columns
    from oversmooth.probe import Probe

    if entry.prunable:
        probe = Probe(model, data.edge_index, capture=entry.capture, stream=stream)
        with torch.no_grad(), probe:
            model(data.x, data.edge_index)
    else:  # APPNP: the propagation steps are read by the model's own hooks
        probe = Probe(None, data.edge_index)
        with torch.no_grad(), probe:
            remove = model.record_steps(probe)  # type: ignore[operator]
            try:
                model(data.x, data.edge_index)
            finally:
                remove()
    frame = add_floor_columns(probe.to_frame(), None, "float64")
    frame.attrs["floor_method"] = "bound"
    return frame


def prune_middle(entry: ZooEntry, model: torch.nn.Module, data: Any, layer: int) -> dict:
    """:func:`oversmooth.prune_sensitivity` of ``layer`` alone: the relative change of the
    output, of the final energy, and how the layer was taken out."""
    import torch

    from oversmooth.prune import prune_sensitivity

    stream = entry.stream(model) if entry.stream is not None else None
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # kept as notes of the report
        frame = prune_sensitivity(model, data, layers=[layer], stream=stream)
    row = frame.iloc[0]
    return {
        "warnings": list(dict.fromkeys(str(w.message) for w in caught)),
        "layer": layer,
        "logits_change": float(row["logits_change"]),
        "energy_change": float(row["energy_change"]),
        "pruned_as": frame.attrs["pruned_as"][layer],
        "identity_on_stream": frame.attrs["identity_on_stream"][layer],
    }


def _load(name: str, device: torch.device) -> tuple[Any, int]:
    from oversmooth.data import load

    data = load(name)
    classes = int(data.y.max()) + 1 if getattr(data, "y", None) is not None else 2
    return _pyg_data(data, device), classes


def run_atlas(config: AtlasConfig, progress: Progress | None = None) -> AtlasResult:
    """Probe, judge and prune every architecture of ``config`` (module docstring).

    ``progress(done, total, what)`` is called after each probed forward."""
    import pandas as pd

    from oversmooth.data import check_distinct
    from oversmooth.experiments import pyg_zoo as zoo
    from oversmooth.precision import TwinEvidence
    from oversmooth.runtime import environment, resolve_device

    check_distinct(config.datasets)
    device = resolve_device(config.device)
    started = time.perf_counter()
    graphs = {name: _load(name, device) for name in config.datasets}
    total = len(config.names) * len(config.datasets) * len(config.seeds)
    done = 0
    curves, pruned, timings = [], [], {}
    notes: dict[str, list[str]] = {}
    for key in config.names:
        entry, t0 = _zoo()[key], time.perf_counter()
        said = notes.setdefault(key, [])
        for name, (data, classes) in graphs.items():
            twin = TwinEvidence()  # the first seed's twin, for the others
            for i, seed in enumerate(config.seeds):
                model = zoo.build(key, data.num_features, classes, config.depth, seed)
                model = model.to(device)
                frame = probe_entry(entry, model, data, twin)
                said.extend(n for n in frame.attrs.get("warnings", []) if n not in said)
                curves.append(frame.assign(architecture=key, dataset=name, seed=seed))
                if entry.prunable and name == config.datasets[0] and i < config.prune_seeds:
                    row = prune_middle(entry, model, data, config.middle)
                    said.extend(n for n in row.pop("warnings") if n not in said)
                    pruned.append({"architecture": key, "seed": seed, **row})
                done += 1
                if progress is not None:
                    progress(done, total, f"{entry.name} on {name}, seed {seed}")
        timings[key] = time.perf_counter() - t0
    metrics = pd.concat(curves, ignore_index=True)
    prune = pd.DataFrame(
        pruned,
        columns=["architecture", "seed", "layer", "logits_change", "energy_change", "pruned_as"]
        + ["identity_on_stream"],
    )
    verdicts = _verdicts(metrics, config)
    timings["total"] = time.perf_counter() - started
    return AtlasResult(
        config=config,
        curves=_tidy(metrics),
        prune=prune,
        verdicts=verdicts,
        table=atlas_table(metrics, prune, verdicts, config),
        timings=timings,
        environment=environment(device),
        notes={k: v for k, v in notes.items() if v},
    )


def _tidy(metrics: pd.DataFrame) -> pd.DataFrame:
    """Identifying columns first; ``step`` (always 0: one forward each) dropped."""
    first = ["architecture", "dataset", "seed", "layer"]
    rest = [c for c in metrics.columns if c not in first and c != "step"]
    return metrics[first + rest].reset_index(drop=True)


def _verdicts(metrics: pd.DataFrame, config: AtlasConfig) -> dict[tuple[str, str], Verdict]:
    from oversmooth.verdict import verdict

    out = {}
    for (key, name), frame in metrics.groupby(["architecture", "dataset"], sort=False):
        out[(str(key), str(name))] = verdict(frame, dtype="float64")
    return out


# ----------------------------------------------------------------------------- the table


def _log10(value: float) -> float:
    return math.log10(value) if value > 0 and math.isfinite(value) else math.nan


def _energy_at(frame: pd.DataFrame, layer: int) -> tuple[float, bool]:
    """Geometric mean over seeds of the energy at ``layer``, and whether any seed is at the
    floor there."""
    from oversmooth.fit import geometric_mean

    rows = frame[frame["layer"] == layer]
    return float(geometric_mean(rows["laplacian_energy"])), bool(rows["at_floor"].any())


def decades_lost(
    frame: pd.DataFrame, depth: int, notes: Sequence[Mapping[str, Any]] = ()
) -> tuple[float, bool]:
    """``log10 E(1) - log10 E(depth)`` of the seeds' geometric-mean energy (negative: gained),
    and whether the last layer is at the float floor (then a lower bound).  An end layer the
    verdict left out as off its law (its ``ends`` note, or the ``first-layer`` note of a layer
    that alone decided the law) is left out here too, so that the
    column and the verdict's "decays by X decades over layers a-b" agree in sign: PyG's GCN
    with PairNorm gains 1.6 decades from layer 1 (a convolution's output before the first
    PairNorm, 2.8 decades below the law) and loses 1.6 from layer 2 (the verdict's fitted
    change: 1.8).  Two end points and a fitted law can still differ in sign where the change
    is small (the same model on CSBM: 0.04 lost, +0.18 fitted)."""
    first, last = 1, depth
    off = [k for note in notes if note.get("code") == "ends" for k in note.get("off_layers", [])]
    # and the first layer a verdict left out because it alone decided the law (GAT on Cora:
    # 46.6 decades from layer 1 beside a verdict over layers 2-128, 45.5: an audit)
    off += [int(note["layer"]) for note in notes if note.get("code") == "first-layer"]
    while first in off and first < last:
        first += 1
    while last in off and last > first:
        last -= 1
    start, _ = _energy_at(frame, first)
    end, floor = _energy_at(frame, last)
    return _log10(start) - _log10(end), floor


def decades_columns(
    key: str,
    curves: pd.DataFrame,
    notes_of: Callable[[str], Sequence[Mapping[str, Any]]],
    config: AtlasConfig,
) -> dict[str, Any]:
    """Architecture ``key``'s ``decades_lost`` and ``final_at_floor`` columns, one pair per
    dataset (the main one's unsuffixed, the others' suffixed ``_<dataset>``), from its
    per-layer ``curves`` and each dataset's verdict notes (``notes_of(dataset)``): what the
    table is built with and what a rebuild forms again (:func:`_decades_again`)."""
    out: dict[str, Any] = {}
    for name in config.datasets:
        mine = curves[(curves["architecture"] == key) & (curves["dataset"] == name)]
        lost, floor = decades_lost(mine, config.depth, notes_of(name))
        out[_suffixed("decades_lost", name, config)] = lost
        out[_suffixed("final_at_floor", name, config)] = floor
    return out


def _verdict_notes(
    verdicts: Mapping[tuple[str, str], Verdict], key: str, dataset: str
) -> list[dict[str, Any]]:
    return verdicts[(key, dataset)].notes


def _suffixed(column: str, dataset: str, config: AtlasConfig) -> str:
    """``column`` of ``dataset`` in the atlas table: unsuffixed for the main (first) dataset,
    ``column_<dataset>`` for the others."""
    return column if dataset == config.datasets[0] else f"{column}_{dataset}"


def _rate_record(v: Verdict) -> dict[str, Any]:
    """The asymptotic rate: the verdict's ``asymptotic_rate`` (an exponential's ``beta``, with
    the interval that spans it and the late rate), else its rate (a power law's exponent)."""
    rate = v.asymptotic_rate or v.rate
    if rate is None:
        return {"rate_name": None, "rate": math.nan, "rate_low": math.nan, "rate_high": math.nan}
    return {
        "rate_name": rate.name,
        "rate": rate.value,
        "rate_low": rate.interval[0],
        "rate_high": rate.interval[1],
    }


def atlas_table(
    metrics: pd.DataFrame,
    prune: pd.DataFrame,
    verdicts: dict[tuple[str, str], Verdict],
    config: AtlasConfig,
) -> pd.DataFrame:
    """One row per architecture (numbers; :func:`write_atlas` formats them)."""
    import pandas as pd

    main, others = config.datasets[0], config.datasets[1:]
    rows = []
    for key in config.names:
        v = verdicts[(key, main)]
        frame = metrics[(metrics["architecture"] == key) & (metrics["dataset"] == main)]
        decades = decades_columns(key, metrics, partial(_verdict_notes, verdicts, key), config)
        mine = prune[prune["architecture"] == key]
        row: dict[str, Any] = {
            "architecture": key,
            "name": _zoo()[key].name,
            "verdict": v.label,
            **_rate_record(v),
            "decades_lost": decades["decades_lost"],
            "final_at_floor": decades["final_at_floor"],
            "collapse": v.collapse,
            "curse_of_depth": v.curse_of_depth,
            "prune_logits_change": float(mine["logits_change"].median()) if len(mine) else math.nan,
            "prune_energy_change": float(mine["energy_change"].median()) if len(mine) else math.nan,
            "pruned_as": mine["pruned_as"].iloc[0] if len(mine) else None,
        }
        for depth in config.depths:
            row[f"energy_{depth}"] = _energy_at(frame, depth)[0]
        for name in others:
            w = verdicts[(key, name)]
            row[f"verdict_{name}"] = w.label
            row[f"collapse_{name}"] = w.collapse
            row[f"decades_lost_{name}"] = decades[f"decades_lost_{name}"]
            row[f"final_at_floor_{name}"] = decades[f"final_at_floor_{name}"]
        row["configuration"] = _zoo()[key].configuration
        rows.append(row)
    return pd.DataFrame(rows)


def config_record(config: AtlasConfig) -> dict[str, Any]:
    """``config.json``'s ``atlas`` entry."""
    return {"command": "atlas", **asdict(config)}


# ----------------------------------------------------------------------------- the folder


def _rate_cell(name: str | None, value: float, low: float, high: float) -> str:
    """``halves every 1.07 layers (0.88-1.31)``, ``k^-1.2 (-1.5 to -0.9)`` or a dash."""
    from oversmooth.report.document import MISSING, format_cell

    if name is None or not math.isfinite(value):
        return MISSING
    if name == "alpha":
        return f"k^{format_cell(value)} ({format_cell(low)} to {format_cell(high)})"
    from oversmooth.report.prose import length_span, one_sided, unbounded

    if unbounded((low, high)):
        return "not bounded"
    if one_sided((low, high)):
        # bounded on one side only: the bound, as the verdict's line says it; the point was
        # the fit's (GIN's 0.4453 from a shift at the top of its grid, beside a line saying
        # "not shown to be asymptotic ... up to 0.555": an audit)
        noun = "halving" if name == "halving_length" else "doubling"
        return f"{noun} length {length_span((low, high), '.4g')} layers"
    word = "halves" if name == "halving_length" else "doubles"
    # "layers" said, as in the late-rate column beside it ("doubles every 0.4453 (up to
    # 0.5547)" named no unit: an audit)
    return f"{word} every {format_cell(value)} layers ({length_span((low, high), '.4g')})"


#: a late halving or doubling length above this many layers is shown as flat
FLAT_LENGTH = 1e5


def _late_cell(record: dict) -> str:
    """The late rate (slope of log E over the last quarter) as a halving / doubling length."""
    from oversmooth.report.document import MISSING, format_cell

    slope = (record.get("evidence") or {}).get("late_slope")
    if not isinstance(slope, (int, float)) or not math.isfinite(slope):
        return MISSING
    if record.get("trend") is None:
        # no trend established (the change's interval reaches 0), as in analyze's law table:
        # the zoo's Post-LN SAN read "halves every 30.91 layers" while one of its three seeds
        # rose 1.55 decades over its last half (an audit)
        return MISSING
    length = math.log(2) / abs(slope) if slope else math.inf
    if length > FLAT_LENGTH:
        return f"flat ({slope:+.1e} per layer)"
    word = "halves" if slope < 0 else "doubles"
    return f"{word} every {format_cell(length)} layers"


def _text(value: Any) -> str:
    """A text cell: the value, or a dash for None / NaN."""
    from oversmooth.report.document import MISSING

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return str(value)


def _yes_no(value: Any) -> str:
    """``yes`` / ``no`` for a flag (a Python or NumPy bool, as read back from a CSV), else a
    dash."""
    import numpy as np

    return ("yes" if value else "no") if isinstance(value, (bool, np.bool_)) else _text(None)


def _decades_cell(value: float, floor: bool) -> str:
    from oversmooth.report.document import MISSING

    if not math.isfinite(value):
        return MISSING
    value = round(value, 1) + 0.0  # never "-0.0"
    return f">= {value:.1f} (floor)" if floor else f"{value:.1f}"


def display_table(result: AtlasReport) -> pd.DataFrame:
    """The atlas table as the report shows it (text cells)."""
    import pandas as pd

    from oversmooth.report.document import format_cell

    config, table = result.config, result.table
    main, others = config.datasets[0], config.datasets[1:]
    curves = result.curves[result.curves["dataset"] == main]
    flagged = curves.groupby(["architecture", "layer"])["at_floor"].any()
    # (architecture, layer) -> whether some seed is at the float floor there
    floors = {(str(key), int(layer)): bool(flag) for (key, layer), flag in flagged.items()}
    rows = []
    for row in table.to_dict(orient="records"):
        v = result.verdicts[f"{row['architecture']}/{main}"]
        shown = {
            "architecture": row["name"],
            "verdict": row["verdict"],
            "asymptotic rate (95%)": _rate_cell(
                row["rate_name"], row["rate"], row["rate_low"], row["rate_high"]
            ),
            "late rate (last quarter)": _late_cell(v),
            f"decades lost by depth {config.depth}": _decades_cell(
                row["decades_lost"], row["final_at_floor"]
            ),
            "fall is": _text(row["collapse"]),
            "curse of depth": _yes_no(row["curse_of_depth"]),
            f"prune layer {config.middle}: output change": format_cell(row["prune_logits_change"])
            + (f" [{row['pruned_as']}]" if isinstance(row["pruned_as"], str) else ""),
        }
        for depth in config.depths:
            value = format_cell(row[f"energy_{depth}"])
            at_floor = floors.get((row["architecture"], depth), False)
            shown[f"E at depth {depth}"] = f"{value} (floor)" if at_floor else value
        for name in others:
            lost = row[f"decades_lost_{name}"]
            verdict = _text(row[f"verdict_{name}"])
            floor = bool(row.get(f"final_at_floor_{name}", False))
            shown[f"{name}: verdict (decades lost)"] = (
                f"{verdict} ({_decades_cell(lost, floor)})" if math.isfinite(lost) else verdict
            )
        rows.append(shown)
    return pd.DataFrame(rows)


def _mean_curves(curves: pd.DataFrame, dataset: str, config: AtlasConfig) -> list[dict]:
    """Per architecture, the seeds' geometric-mean energy per layer, layers at the float floor
    (in any seed) left out."""
    from oversmooth.fit import geometric_mean

    out = []
    part = curves[curves["dataset"] == dataset]
    for key in config.names:
        rows = part[(part["architecture"] == key) & ~part["at_floor"].astype(bool)]
        floor_layers = set(part[(part["architecture"] == key) & part["at_floor"]]["layer"])
        rows = rows[~rows["layer"].isin(floor_layers)]
        grouped = rows.groupby("layer")["laplacian_energy"]
        means = grouped.apply(lambda v: geometric_mean(v.to_numpy()))
        out.append({"label": _zoo()[key].name, "layers": means.index, "values": means.to_numpy()})
    return out


#: the lower panels' range of E(k) / E(1): the bounded architectures, which the full range
#: (exploding and collapsing ones) squashes into a line
ZOOM = (1e-4, 1e4)


def _figure(result: AtlasReport) -> Any:
    """Per dataset, the energies over their whole range (top) and relative to layer 1 within
    :data:`ZOOM` (bottom)."""
    from oversmooth.report import plots

    config = result.config
    panels = len(config.datasets)
    fig = plots.figure(5.2 * panels + 2.6, 8.4, layout="constrained")  # the outside legend
    axes = fig.subplots(2, panels, squeeze=False)
    for i, name in enumerate(config.datasets):
        curves = _mean_curves(result.curves, name, config)
        plots.atlas_curves(axes[0][i], curves, title=name)
        relative = [{**c, "values": c["values"] / _first(c)} for c in curves]
        plots.atlas_curves(axes[1][i], relative, title=f"{name}: relative to layer 1, zoomed")
        axes[1][i].set_ylim(*ZOOM)
        axes[1][i].set_ylabel("$E(X^k) / E(X^1)$")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=8)
    return fig


def _first(curve: dict) -> float:
    """The curve's value at its first layer >= 1 (NaN when it has none)."""
    import numpy as np

    layers, values = np.asarray(curve["layers"]), np.asarray(curve["values"], dtype=float)
    kept = values[layers >= 1]
    return float(kept[0]) if len(kept) else float("nan")


def _configuration_table(config: AtlasConfig) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "architecture": _zoo()[key].name,
                "PyG classes": _zoo()[key].classes,
                "configuration": _zoo()[key].configuration,
                "probe": _zoo()[key].capture,
            }
            for key in config.names
        ]
    )


def write_atlas(
    result: AtlasResult,
    out: str | Path,
    *,
    overwrite: bool = False,
    figure_formats: Sequence[str] = ("png",),
    table_formats: Sequence[str] = ("csv",),
) -> Path:
    """Write the atlas folder ``out`` atomically: ``atlas.csv`` (the table, numbers),
    ``curves.csv`` (every layer of every run), ``prune.csv``, ``fits.json`` (each verdict),
    ``config.json``, ``atlas.png`` and ``report.md`` / ``report.html``; figures also in
    ``figure_formats``, tables also in ``table_formats``."""
    from oversmooth.outputs import atomic_folder, data_digests, write_json
    from oversmooth.report.formats import figure_formats as check_figures
    from oversmooth.report.formats import table_formats as check_tables
    from oversmooth.report.formats import write_table

    figures, tables = check_figures(figure_formats), check_tables(table_formats)
    with atomic_folder(Path(out), overwrite, kind="atlas") as tmp:
        write_table(result.table, tmp / "atlas.csv", tables, float_format="%.6g")
        write_table(result.curves, tmp / "curves.csv", tables, float_format="%.10g")
        write_table(result.prune, tmp / "prune.csv", tables, float_format="%.6g")
        report = result.report()
        write_json(tmp / "fits.json", report.verdicts)
        write_json(
            tmp / "config.json",
            {
                **config_record(result.config),
                "environment": result.environment,
                "timings": result.timings,
                "notes": result.notes,
                "digests": data_digests(tmp, DIGESTED),
            },
        )
        _document(report).write(tmp, figures)
    return Path(out)


#: The data files whose SHA-256 ``config.json`` records (``digests``), for ``oversmooth
#: report`` to refuse one changed since (a curve edited by hand was drawn, and its decades lost
#: written back to atlas.csv, beside the verdict of the curve as measured; an audit).
DIGESTED = ("atlas.csv", "curves.csv", "prune.csv", "fits.json")


def read_atlas(folder: str | Path) -> AtlasReport:
    """An atlas folder's report, read back from ``atlas.csv``, ``curves.csv``, ``fits.json``
    and ``config.json`` (nothing is recomputed)."""
    import json

    import pandas as pd

    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{folder}: no config.json; expected a folder of oversmooth atlas")
    saved = json.loads(config_path.read_text(encoding="utf-8"))
    if not isinstance(saved, dict) or saved.get("command") != "atlas":
        raise ValueError(f"{config_path}: not written by oversmooth atlas")
    names = {f.name for f in fields(AtlasConfig)}
    kept: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in saved.items() if k in names
    }
    config = AtlasConfig(**kept)
    curves = pd.read_csv(folder / "curves.csv")
    verdicts = json.loads((folder / "fits.json").read_text(encoding="utf-8"))
    return AtlasReport(
        config=config,
        table=_decades_again(pd.read_csv(folder / "atlas.csv"), curves, verdicts, config),
        curves=curves,
        verdicts=verdicts,
        timings=saved.get("timings", {}),
        environment=saved.get("environment", {}),
        notes=saved.get("notes", {}),
    )


def _decades_again(
    table: pd.DataFrame, curves: pd.DataFrame, verdicts: Mapping[str, Any], config: AtlasConfig
) -> pd.DataFrame:
    """The decades-lost columns of ``table`` formed again from the stored curves and the
    verdicts' notes, by this version's rule (:func:`decades_lost`), as the verdict sentences are
    rebuilt from their numbers: a rule of what to leave out is no measurement."""
    table = table.copy()
    for index, row in table.iterrows():
        key = str(row["architecture"])

        def notes(name: str, key: str = key) -> Sequence[Mapping[str, Any]]:
            record = verdicts.get(f"{key}/{name}")
            found = record.get("notes") if isinstance(record, Mapping) else None
            return found if isinstance(found, list) else []

        fresh = decades_columns(key, curves, notes, config)
        for name in config.datasets:  # a dataset without a verdict keeps its stored columns
            if not isinstance(verdicts.get(f"{key}/{name}"), Mapping):
                continue
            for column in ("decades_lost", "final_at_floor"):
                column = _suffixed(column, name, config)
                if column in table:
                    table.loc[index, column] = fresh[column]
    return table


def render_atlas(folder: str | Path, figure_formats: Sequence[str] = ("png",)) -> Path:
    """Rebuild ``atlas.png``, ``report.md`` and ``report.html`` of an atlas folder from its
    files (:func:`read_atlas`), figures also in ``figure_formats``."""
    from oversmooth.report.formats import figure_formats as check_figures
    from oversmooth.report.formats import write_table

    import json

    from oversmooth.outputs import file_digest, write_json

    folder = Path(folder)
    report = read_atlas(folder)
    # the table as the report shows it: its derived columns by this version's rules
    # (:func:`_decades_again`), so that atlas.csv and the page never disagree
    tables = ("csv", "parquet") if (folder / "atlas.parquet").is_file() else ("csv",)
    write_table(report.table, folder / "atlas.csv", tables, float_format="%.6g")
    saved = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    digests = saved.get("digests")
    if isinstance(digests, dict) and "atlas.csv" in digests:  # the table as now written
        fresh = file_digest(folder / "atlas.csv")
        if digests["atlas.csv"] != fresh:
            write_json(
                folder / "config.json", {**saved, "digests": {**digests, "atlas.csv": fresh}}
            )
    _document(report).write(folder, check_figures(figure_formats))
    return folder


def command_line(config: AtlasConfig) -> str:
    """The ``oversmooth atlas`` command that makes ``config``: ``--quick`` and the options of
    the option table (:func:`oversmooth.config.command_options`) that differ from its preset;
    depths and datasets only the preset sets."""
    import shlex

    from oversmooth.config import command_options

    default = AtlasConfig.preset(config.quick)
    options = command_options(AtlasConfig, config, default)
    return shlex.join(["oversmooth", "atlas", *(["--quick"] if config.quick else []), *options])


def _intro(doc: Any, result: AtlasReport) -> None:
    from oversmooth.report.render import rebuilt_note

    config, env = result.config, result.environment
    minutes = result.timings.get("total", math.nan) / 60
    seeds = ", ".join(map(str, config.seeds))
    pruned = config.seeds[: config.prune_seeds]
    threads = env.get("torch_threads")
    doc.text(
        f"Generated by `{command_line(config)}` in **{minutes:.1f} minutes** wall time on "
        f"{env.get('processor') or 'this machine'} ({threads} torch "
        f"thread{'' if threads == 1 else 's'}, device {env.get('device')}), oversmooth "
        f"{env.get('oversmooth')} (commit `{env.get('git_commit') or 'n/a'}`), torch "
        f"{env.get('torch')}, torch_geometric {env.get('torch_geometric')}." + rebuilt_note(env)
    )
    if config.quick:
        doc.text(
            "**Quick run**: small graphs, shallow stacks, one seed: a smoke test of every "
            "architecture; its verdicts say nothing about the full atlas."
        )
    native = sum(_zoo()[key].native for key in config.names)
    doc.text(
        f"{len(config.names) - native} architectures built from PyTorch Geometric's own "
        "classes as its documentation and examples assemble them (section *How each was "
        f"configured*) and {native} of the zoo's own, each probed at initialisation: "
        f"one forward pass per seed (seeds {seeds}, each a draw of the weights) at depth "
        f"{config.depth}, in float64, in `eval()` mode (dropout off), on "
        f"{' and '.join(f'`{d}`' for d in config.datasets)}. The per-layer Laplacian energy "
        "E(X^k) = (1/n)||PX - X||^2 is judged by `oversmooth.verdict` with the seeds pooled as "
        f"replicates; the middle layer ({config.middle}) is pruned with "
        f"`oversmooth.prune_sensitivity` (seed{'s' if len(pruned) != 1 else ''} "
        f"{', '.join(map(str, pruned)) or 'none'}) on `{config.datasets[0]}`. The energy "
        f"at depth d is layer d of the depth-"
        f"{config.depth} run: every builder draws the first d layers of a deeper stack exactly "
        "as the depth-d stack (tested), so it is the final energy of a depth-d model."
    )


def _reading(doc: Any, config: AtlasConfig) -> None:
    others = config.datasets[1:]
    doc.text(
        f"How to read it. Every column is measured on `{config.datasets[0]}`"
        + (
            f" but the last{'' if len(others) == 1 else f' {len(others)}'}, which name"
            f"{'s' if len(others) == 1 else ''} {' and '.join(f'`{d}`' for d in others)}"
            if others
            else ""
        )
        + ". **verdict**: the label of `oversmooth.verdict` (a law is named only "
        "when the data separate it from the others; `inconclusive` says the decay or growth "
        "was measured but its law not pinned down). **asymptotic rate**: the named law's "
        "limit, with its 95% interval (a dash where no law is named; the bound alone where "
        "the interval is open on one side). **late rate**: the slope of log E over the last "
        "quarter of the fitted layers, as the layers it takes the energy to halve or double "
        "at that slope (a dash where the verdict establishes no trend: the seeds' mean then "
        "has a slope that no seed need follow). **decades "
        f"lost**: log10 E(1) - log10 E({config.depth}) of the seeds' geometric mean "
        "(negative: gained; '>=' when the last layer is at the float64 floor; an end layer "
        "the verdict leaves out as off its law is left out here too, as GCN + PairNorm's "
        "layer 1). **fall is**: "
        "what carries the fall, read from the share of its decades the scale-free energy "
        "E/||X||^2 carries (the nodes converging) against the squared feature norm (the "
        "features shrinking): `oversmoothing` at two thirds or more, `norm-collapse` at one "
        "third or less (the nodes may still converge by less, as GAT's), `both` between, a "
        "dash where the share's 99% interval crosses a third or the curve does not fall; "
        "a fall with a law whose norm moves is also read by the scale-free energy's own law, "
        "which makes it `both` where the late layers say otherwise than the window's share "
        "(the nodes converging exponentially beside a fading norm collapse, or algebraically "
        "beside an exponentially shrinking norm: docs/verdict.md). "
        "**curse of depth**: a growing or "
        "flat curve whose layers barely change the state (relative change < 0.05, adjacent "
        "cosine > 0.9). **prune**: relative change of the model's output when the middle "
        "layer alone is taken out (median over the pruned seeds); in brackets how: `block` "
        "(replaced by the identity), `zero` (its branch zeroed, the skip kept), `input` (its "
        "output replaced by its input)."
    )


def _notes(doc: Any, result: AtlasReport) -> None:
    import pandas as pd

    doc.heading("Notes")
    floor = (
        "Float floor: the zoo's models use the analysis's own estimate (a float64 twin run "
        "where a layer nears the single-step bound), the PyG models the single-step bound "
        "(eps * ||x||)^2 of float64; layers below 12 x the floor are left out of the fits and "
        "of the figure."
    )
    doc.text(floor)
    rows = [
        {"architecture": _zoo()[key].name, "note": note}
        for key, notes in result.notes.items()
        for note in notes
    ]
    if rows:
        doc.text("What the probe and the pruning reported:")
        doc.table(pd.DataFrame(rows))


def _document(result: AtlasReport) -> Any:
    from oversmooth.report.document import Document
    from oversmooth.report.prose import verdict_text

    config = result.config
    doc = Document("oversmooth atlas: PyTorch Geometric's zoo at initialisation")
    _intro(doc, result)
    doc.heading("The atlas")
    doc.table(display_table(result))
    _reading(doc, config)
    doc.heading("Energy against depth")
    doc.figure(
        _figure(result),
        f"Laplacian energy against layer, log-log, depth-{config.depth} stacks, geometric mean "
        "over the seeds; layers at the float64 floor are left out. Top: the whole range; "
        f"bottom: relative to layer 1 between {ZOOM[0]:g} and {ZOOM[1]:g}, where the "
        "bounded architectures part (the others leave that panel)",
        "atlas.png",
    )
    doc.heading("Verdicts")
    doc.text("Each verdict's own summary, seeds pooled:")
    for where, record in result.verdicts.items():
        key, name = where.split("/", 1)
        doc.text(verdict_text(record, f"{_zoo()[key].name}, {config.depth} layers on {name}"))
    doc.heading("How each was configured")
    doc.text(
        "Width 64 between an input map and, where the example has one, a linear head; PyG's "
        "own initialisers (parameters cast to float64); `eval()` mode (dropout off), so a "
        "BatchNorm (GPS) is still the identity at initialisation (running mean 0, variance 1). "
        "Every architecture reads the dataset's features as they are (the GCNII and APPNP "
        "scripts row-normalise Cora's first, with `NormalizeFeatures`). The zoo's models keep "
        "their defaults (width 32, 4 heads)."
    )
    doc.table(_configuration_table(config))
    _notes(doc, result)
    doc.heading("Files")
    doc.text(
        "`atlas.csv`: this table in numbers; `curves.csv`: every layer of every run; "
        "`prune.csv`: the pruned layers; `fits.json`: each verdict in full; `config.json`: "
        "the run's settings, environment and timings (seconds per architecture)."
    )
    _closing_sections(doc, result)
    return doc


def _closing_sections(doc: Any, result: AtlasReport) -> None:
    """*Reproduce* (the version, the commit and the command line) and *Environment* (the
    versions and machine, and the seconds each architecture took), as every report ends."""
    import pandas as pd

    env, timings = result.environment, result.timings
    doc.heading("Reproduce")
    commit = env.get("git_commit")
    doc.text(
        f"Written with oversmooth {env.get('oversmooth', '(version not recorded)')}"
        + (f" (commit `{commit}`)" if commit else "")
        + ". This command reruns it (`oversmooth report DIR` redraws the figure and the "
        "report from the folder's files alone):"
    )
    doc.code(command_line(result.config))
    doc.heading("Environment")
    names = {key: entry.name for key, entry in _zoo().items()}
    doc.table(
        pd.DataFrame(
            {
                "item": list(env) + [f"time: {names.get(k, k)}" for k in timings],
                "value": [str(v) for v in env.values()] + [f"{v:.1f} s" for v in timings.values()],
            }
        )
    )
