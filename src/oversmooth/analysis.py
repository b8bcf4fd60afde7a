"""The main jobs as library functions: analyse one architecture, compare several.

Record -> data -> render: :func:`run_analysis` and :func:`run_comparison`
compute tidy tables (one row per layer and seed) plus fits; writing and
rendering live in :mod:`oversmooth.report`, which reads only those tables.
"""

from __future__ import annotations

import copy
import gc
import hashlib
import math
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from numpy.typing import ArrayLike

from oversmooth.checkpoint import CheckpointError, load_checkpoint
from oversmooth.fit import geometric_mean
from oversmooth.graph import GraphOperator
from oversmooth.config import MAX_DEPTH, with_data_sizes
from oversmooth.nn.model import DepthModel, seeded_models
from oversmooth.precision import (
    TwinEvidence,
    twin_needed,
    FloorTracker,
    add_floor_columns,
    bound_floor,
    resolve_floor_method,
)
from oversmooth.probe import DEFAULT_METRICS, Probe
from oversmooth.prune import prune_sensitivity
from oversmooth.resources import release_heap
from oversmooth.run_configs import AnalysisConfig, ComparisonConfig  # re-exported
from oversmooth.run_configs import comparison_key
from oversmooth.registry import DISPLAY as PRETTY  # noqa: F401  (re-exported: its old home)
from oversmooth.registry import bound_applies
from oversmooth.runtime import environment, resolve_device, resolve_dtype
from oversmooth.spectral import halving_steps, spectral_gap
from oversmooth.verdict import Verdict
from oversmooth.verdict import verdict as _decide

if TYPE_CHECKING:
    import pandas as pd
    from torch_geometric.data import Data

__all__ = [
    "AnalysisConfig",
    "ComparisonConfig",
    "AnalysisResult",
    "ComparisonResult",
    "run_analysis",
    "run_comparison",
    "probe_run",
    "Progress",
    "MAX_DEPTH",
    "SPECTRAL_MAX_NODES",
    "COLLECT_BYTES",
    "NONLOCAL_REFERENCE",
    "diffusion_reference",
    "theory_reference",
]

# progress(done, total, what): called as work advances, in units of layers (a probed
# forward), runs x layers (compare), cells (sweep) or epochs (train); ``total`` is fixed
Progress = Callable[[int, int, str], None]


#: Largest graph whose spectral prediction a report computes: beyond it the reports say "not
#: computed" rather than stall.  Measured on one loaded core: Cora (2708 nodes) 0.06-0.2 s, a
#: random 20k-node graph 1.5 s, a 100k-node one 17 s, a 200x200 grid (tiny gap) 15 s.
SPECTRAL_MAX_NODES = 50_000

#: The algebraic reference for nonlocal message passing, from the nonlocal paper (Section 4.1,
#: Theorem 4.1, proof in Appendix A.3): the continuous nonlocal flow
#: ``dX/dt = (int |Delta X|^2) Delta X`` obeys ``-C_1 E^2 <= dE/dt ~ -C_2 E^2`` for its
#: Dirichlet energy ``E = int |grad X|^2``, so ``E(t) >= E(0) / (1 + C_1 E(0) t)``: the energy
#: falls no faster than ``t^-1`` (slope -1 on log-log axes).  The reports draw it on the
#: Laplacian energy, within constant factors of the Dirichlet energy on a fixed graph, so the
#: slope carries over and the intercept does not: the line goes through the measured curve.
#: A bound on a continuous flow, not a prediction for a discrete network with learned
#: projections: the report draws it as a reference line.
NONLOCAL_REFERENCE = {
    "slope": -1.0,
    "kind": "bound",
    "source": "nonlocal paper, Theorem 4.1 (proof in Appendix A.3: -C1 E^2 <= dE/dt ~ -C2 E^2)",
}


#: How many graphs' :func:`diffusion_reference` results a process keeps (the latest): a sweep
#: worker runs cell after cell on one graph, and the eigensolver was about a fifth of a Cora
#: cell (0.07 s of 0.33 s).
REFERENCE_CACHE_SIZE = 4
_REFERENCE_CACHE: dict[tuple, dict] = {}


def _graph_key(data: Any) -> tuple | None:
    """What :func:`~oversmooth.spectral.spectral_gap` reads of ``data`` (its node count, edge
    list and edge weights), hashed; None when ``data`` has no tensor ``edge_index``."""
    edge_index = getattr(data, "edge_index", None)
    if not isinstance(edge_index, torch.Tensor):
        return None
    digest = hashlib.blake2b(digest_size=16)
    for t in (edge_index, getattr(data, "edge_weight", None)):
        if isinstance(t, torch.Tensor):
            t = t.detach().cpu().contiguous()
            digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            digest.update(b"-")
    return int(data.num_nodes), digest.hexdigest()


def diffusion_reference(data: Any) -> dict:
    """The spectral prediction for linear diffusion ``X <- P X`` on ``data``'s graph, with the
    ``P = D~^{-1} A~`` of the zoo's GCN mean and of the ``diffusion`` model, for fits.json.

    ``energy_ratio`` / ``halving_steps`` are the whole graph's asymptotic per-step energy
    ratio (the slowest component, :attr:`~oversmooth.spectral.SpectralGap.graph_energy_ratio`)
    and the steps per halving.  ``computed`` is False, with a ``reason``, when the graph has
    more than :data:`SPECTRAL_MAX_NODES` nodes or is refused (directed, no edge).  The result
    for a graph already seen in this process (same nodes, edges and weights) is a copy of the
    one computed then (``seconds`` is that computation's).
    """
    if int(data.num_nodes) > SPECTRAL_MAX_NODES:
        return _diffusion_reference(data)
    key = _graph_key(data)
    if key is not None and key in _REFERENCE_CACHE:
        return copy.deepcopy(_REFERENCE_CACHE[key])
    out = _diffusion_reference(data)
    if key is not None:
        _REFERENCE_CACHE[key] = copy.deepcopy(out)
        while len(_REFERENCE_CACHE) > REFERENCE_CACHE_SIZE:
            del _REFERENCE_CACHE[next(iter(_REFERENCE_CACHE))]  # the oldest
    return out


def _diffusion_reference(data: Any) -> dict:
    num_nodes = int(data.num_nodes)
    out: dict[str, Any] = {
        "operator": "P = D~^-1 A~ (GCN mean, unit self loops, edge weights honoured)",
        "computed": False,
        "reason": None,
        "num_nodes": num_nodes,
    }
    if num_nodes > SPECTRAL_MAX_NODES:
        out["reason"] = (
            f"the graph has {num_nodes} nodes, more than the eigensolver budget of "
            f"{SPECTRAL_MAX_NODES} (oversmooth.analysis.SPECTRAL_MAX_NODES)"
        )
        return out
    started = time.perf_counter()
    try:
        gap = spectral_gap(data, self_loops=True)
    except ValueError as err:
        out["reason"] = str(err)
        return out
    out.update(
        computed=True,
        energy_ratio=gap.graph_energy_ratio,
        halving_steps=gap.graph_halving_steps,
        slowest_nodes=gap.slowest_nodes,
        num_components=gap.num_components,
        isolated=gap.isolated,
        lcc_nodes=gap.nodes,
        lcc_lambda2=gap.lambda2,
        lcc_lambda_min=gap.lambda_min,
        lcc_energy_ratio=gap.energy_ratio,
        seconds=time.perf_counter() - started,
    )
    return out


def _verdict_numbers(desc: dict) -> dict:
    """The verdict's own evidence numbers of a :func:`describe_frame` result (empty when the
    verdict stopped before fitting)."""
    return ((desc.get("evidence") or {}).get("evidence")) or {}


def _measured_halving(desc: dict) -> dict:
    """How fast the measured curve halves: the verdict's late rate (slope of log E over the
    last quarter of its fitted layers, with its interval), the same number its summary prints,
    and whether that rate has settled (``asymptotic``): the spectral prediction is an
    asymptotic rate, and is set beside a late rate only once the late rate has stopped moving."""
    ev = _verdict_numbers(desc)
    if "late_slope_interval" not in ev:
        return {"halving_layers": None, "decays": None, "source": None, "span": []}
    slope = float(ev["late_slope"])
    lo, hi = (float(c) for c in ev["late_slope_interval"])
    ends = sorted(halving_steps(math.exp(c)) if c < 0 else math.inf for c in (lo, hi))
    return {
        "halving_layers": halving_steps(math.exp(slope)) if slope < 0 else math.inf,
        "interval": ends,
        "decays": slope < 0,
        "asymptotic": ev["late_asymptotic"],  # None: the layers do not resolve it
        "source": "late",
        "span": list(ev["late_window"]),
        # the verdict's name for it: "beta" there is the exponential law's own rate
        "late_slope": slope,
    }


def _measured_slope(desc: dict) -> dict:
    """The measured asymptotic log-log slope: the verdict's shifted power law
    ``(k + k0)^alpha`` fitted over its window (the same kind of number as the theorem's)."""
    ev = _verdict_numbers(desc)
    if "alpha_asymptotic" not in ev:
        return {"alpha": None, "interval": None, "source": None, "span": []}
    return {
        "alpha": float(ev["alpha_asymptotic"]),
        "interval": [float(c) for c in ev["alpha_asymptotic_interval"]],
        "shift": float(ev["shift_k0"]),
        "source": "verdict",
        "span": list(ev["window"]),
    }


def theory_reference(model: str, desc: dict, diffusion: dict) -> dict:
    """What theory says beside a curve's fits, for its fits.json record (``"reference"``):
    the graph's ``diffusion`` prediction (:func:`diffusion_reference`) with the measured
    halving length, and for the nonlocal Post-LN model the algebraic reference slope
    (:data:`NONLOCAL_REFERENCE`) with the measured slope and their difference.  Not for
    ``nonlocal-preln``: the theorem's flow is the nonlocal heat flow the paper sets beside its
    Post-LN architecture, while a Pre-LN stream adds the nonlocal message of its normalised
    state to itself (a falling k^-1 line was drawn through a rising curve, an audit)."""
    out: dict[str, Any] = {
        "diffusion": {**diffusion, "measured": _measured_halving(desc)},
    }
    if bound_applies(model):
        measured = _measured_slope(desc)
        alpha = measured["alpha"]
        out["algebraic"] = {
            **NONLOCAL_REFERENCE,
            "measured": measured,
            "difference": None if alpha is None else alpha - NONLOCAL_REFERENCE["slope"],
        }
    return out


@dataclass
class AnalysisResult:
    """What :func:`run_analysis` computed: numbers only.  Its sentences are the write layer's:
    ``oversmooth.report.prose.verdict_text(result.verdict, analysis_title(result.config))``
    is the verdict line the CLI prints, and fits.json gets them as it is written."""

    config: dict
    metrics: pd.DataFrame  # one row per (seed, layer)
    fits: dict
    verdict: Verdict  # the seeds pooled
    label: str
    similarity: np.ndarray | None = None
    similarity_layers: list[int] | None = None
    prune: pd.DataFrame | None = None
    environment: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)


def check_feature_range(what: str, x: torch.Tensor | None, dtype: str) -> None:
    """Refuse (``ValueError``, one line) float features that the model's ``dtype`` cannot hold:
    beyond its largest value every state overflows at the input (float64 features of 1e39 with
    a float32 model: NaN from layer 0, an 'inconclusive' report and exit 0), and below its
    smallest subnormal every feature rounds to 0 (the verdict then blamed an edgeless graph or
    constant features; audits).  From the per-column extremes: no ``[n, f]`` temporary."""
    if x is None or not x.is_floating_point() or x.dim() != 2 or not x.numel():
        return
    info = torch.finfo(resolve_dtype(dtype))
    top = max(float(x.amax(0).abs().max()), float(x.amin(0).abs().max()))
    if top > info.max:
        raise ValueError(
            f"{what}: features reach {top:.3g}, beyond the {dtype} range ({info.max:.3g}) the "
            "model runs in, so every state would overflow at its input; rescale the features "
            "or run the model in float64 (--dtype float64)"
        )
    smallest = info.tiny * info.eps  # the smallest subnormal
    if 0 < top < smallest / 2:
        raise ValueError(
            f"{what}: features are at most {top:.3g} in size, below the smallest {dtype} "
            f"value ({smallest:.3g}), so every feature would round to 0 at the model's input; "
            "rescale the features or run the model in float64 (--dtype float64)"
        )


def _load_data(name: str, data_root: str | None, dtype: str = "float64") -> tuple[Data, int]:
    """The dataset ``name`` and its class count, refused in one line where a model in
    ``dtype`` could measure nothing of it."""
    from oversmooth.data import load

    data = load(name, data_root=data_root)
    if str(name).lower().endswith(".csv"):
        # load gives a CSV without a features file the feature 1 on every node: a model maps
        # equal rows to equal rows, so every energy would be 0 at every layer
        raise ValueError(
            f"dataset {name}: an edge-list CSV has no node features on the command line (every "
            "node would get the feature 1, and every energy would be 0 at every layer); save it "
            "with its features as a .pt and pass that: torch.save(oversmooth.data.load("
            f"'{name}', features='x.csv', labels='y.csv').to_pyg(), 'graph.pt')"
        )
    x = getattr(data, "x", None)
    if x is not None and x.dim() == 2 and x.size(1) == 0:
        raise ValueError(
            f"dataset {name}: x has 0 columns (no node features), so every energy is 0 at "
            "every layer; save the graph with its node features (data.x of shape "
            "[num_nodes, num_features])"
        )
    # every column constant: per-column extremes (no n x f comparison at 10^6 nodes)
    if x is not None and x.dim() == 2 and x.size(0) > 1 and torch.equal(x.amax(0), x.amin(0)):
        # a .pt without x gets the feature 1 on every node too: every energy was 0 and the
        # verdict blamed the float floor (an audit)
        raise ValueError(
            f"dataset {name}: every node has the same features (a saved Data without x gets the "
            "feature 1 on every node), so a message-passing model keeps every row equal and "
            "every energy is 0 at every layer; save the graph with its node features (data.x)"
        )
    check_feature_range(f"dataset {name}", x, dtype)
    if getattr(data, "y", None) is None:
        out_channels = 2
    else:
        out_channels = int(data.y.max()) + 1
    return data, out_channels


def describe_curve(
    layers: ArrayLike,
    energies: ArrayLike,
    feature_norm: ArrayLike,
    relative: ArrayLike | None,
    cosine: ArrayLike | None,
    dtype: str = "float32",
) -> dict:
    """:func:`describe_frame` of one curve given as arrays (``feature_norm`` scalar or per
    layer)."""
    import pandas as pd

    layers = np.asarray(layers)
    norm = np.broadcast_to(np.asarray(feature_norm, dtype=np.float64), layers.shape)
    frame = pd.DataFrame(
        {
            "layer": layers,
            "feature_norm": norm,
            "laplacian_energy": np.asarray(energies, dtype=np.float64),
        }
    )
    for name, values in (("relative_energy", relative), ("mean_cosine_similarity", cosine)):
        if values is not None:
            frame[name] = np.asarray(values, dtype=np.float64)
    return describe_frame(frame, hidden=1, dtype=dtype)


def mean_curve(frame: pd.DataFrame) -> pd.DataFrame:
    """Per-layer summary over seeds: geometric mean of the energy, mean feature norm,
    median relative energy and adjacent cosine, and ``at_floor`` when any seed is at the floor
    (for the columns present).

    Where every layer has as many rows, each geometric mean is formed for all layers at once,
    as the rows of one ``[layers, seeds]`` array (the same sums, in the same order, as
    :func:`~oversmooth.fit.geometric_mean` per layer): called per group, it took 50 ms of a
    257-layer table, six times per analysis of five seeds."""
    import pandas as pd

    rules = {
        "laplacian_energy": geometric_mean,
        "feature_norm": "mean",
        "relative_energy": "median",
        "mean_cosine_similarity": "median",
        "float_floor": "max",
        "at_floor": "any",
        "float64_energy": geometric_mean,
    }
    present = {c: rule for c, rule in rules.items() if c in frame}
    if frame["layer"].isna().any():  # rows without a layer: left out, as groupby leaves them
        frame = frame[frame["layer"].notna()]
    order = np.argsort(frame["layer"].to_numpy(), kind="stable")  # groupby's order in a layer
    layers, counts = np.unique(frame["layer"].to_numpy()[order], return_counts=True)
    even = counts.size > 0 and bool((counts == counts[0]).all())
    columns: dict[str, Any] = {}
    for c, rule in present.items():
        if rule is geometric_mean and even:
            v = frame[c].to_numpy(dtype=np.float64)[order].reshape(layers.size, -1)
            columns[c] = np.exp(np.mean(np.log(np.maximum(v, 1e-300)), axis=1))
    rest = {c: (c, rule) for c, rule in present.items() if c not in columns}
    if rest:
        grouped = frame.groupby("layer", sort=True).agg(**rest)
        columns.update({c: grouped[c].to_numpy() for c in rest})
    return pd.DataFrame({"layer": layers, **{c: columns[c] for c in present}})


def describe_frame(frame: pd.DataFrame, hidden: int, dtype: str = "float32") -> dict:
    """The verdict (:func:`oversmooth.verdict.verdict`, all seeds in ``frame`` pooled) and the
    numbers a report shows beside it: the float floor at the last layer, how many layers sit at
    it, the float64 final energy of a float32 run.  Every rate, fit and interval a report shows
    comes from the verdict (``"evidence"``), so the banner, text, plots and fits.json agree.
    Numbers and codes only (``"reason"`` is the verdict's code): the sentences are built from
    them by :mod:`oversmooth.report.prose`.

    ``dtype`` is the precision the states were computed in; with ``hidden`` it sets the float
    floor (RMS node norm ``sqrt(hidden)``) when the table has neither ``at_floor``,
    ``float_floor`` nor ``feature_norm``.  A ``float64_energy`` column (the float64 shadow of a
    float32 run) gives the float64 final energy when the final layer is at the floor.
    """
    found = _decide(frame, hidden=hidden, dtype=dtype)
    mean = mean_curve(frame.assign(seed=0) if "seed" not in frame else frame)
    if "float_floor" in mean:
        last_floor = float(mean["float_floor"].iloc[-1])
    else:
        last_norm = mean["feature_norm"].iloc[-1] if "feature_norm" in mean else np.sqrt(hidden)
        last_floor = float(bound_floor(last_norm, dtype))
    f64 = float(mean["float64_energy"].iloc[-1]) if "float64_energy" in mean else None
    return {
        "classification": found.label,
        "reason": found.reason,
        "curse_of_depth": found.curse_of_depth,
        "final_energy": found.final_energy,
        "float_floor": last_floor,
        "final_at_floor": found.final_at_floor,
        "layers_at_floor": found.layers_at_floor,
        "float64_final_energy": f64,
        "dtype": dtype,
        "evidence": found.to_dict(),
        "_verdict": found,
    }


def fits_record(desc: dict) -> dict:
    """What fits.json keeps of a :func:`describe_frame` result: the numbers (fits, label and the
    verdict's evidence; the live ``Verdict`` object is left out).  The write layer adds the
    sentences as it writes the file and the reports rebuild them from these numbers
    (:func:`oversmooth.report.prose.with_prose`, :func:`~oversmooth.report.prose.verdict_prose`)."""
    return {k: v for k, v in desc.items() if not k.startswith("_")}


def _trained_model(
    config: AnalysisConfig, data: Data, device: torch.device
) -> tuple[DepthModel, dict]:
    assert config.checkpoint is not None  # only called for a checkpoint run
    model, meta = load_checkpoint(config.checkpoint, map_location=device)
    if meta.get("num_features") not in (None, data.num_features):
        raise CheckpointError(
            f"{config.checkpoint}: trained on {meta.get('num_features')} input features, but "
            f"{config.dataset!r} has {data.num_features}"
        )
    return model, meta


def _floor_tracker(
    model: DepthModel, graph: GraphOperator, method: str, seed: int
) -> FloorTracker | nullcontext[None]:
    """The run's :class:`FloorTracker`, or a context giving ``None`` for the ``bound`` method."""
    return (
        nullcontext(None)
        if method == "bound"
        else FloorTracker(model, graph, method, perturbation_seed=seed, trim=_trims_heap(graph))
    )


def _layer_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules whose forwards are the steps a progress callback counts: the blocks."""
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, torch.nn.ModuleList):
        return list(blocks)
    from oversmooth.probe import find_layers

    return find_layers(model)[0]


def input_graph(data: Data, device: torch.device) -> GraphOperator:
    """The input graph of ``data`` on ``device``: its edges, edge weights and, for a mini-batch
    of graphs, its ``batch`` vector (metrics are then per graph, averaged)."""
    edge_weight = getattr(data, "edge_weight", None)
    batch = getattr(data, "batch", None)
    return GraphOperator(
        data.edge_index.to(device),
        None if edge_weight is None else edge_weight.to(device),
        num_nodes=data.num_nodes,
        batch=None if batch is None else batch.to(device),
    )


#: What the float-floor columns are computed from (:func:`probe_run` measures them always).
FLOOR_METRICS = ("laplacian_energy", "feature_norm")


def probe_run(
    model: torch.nn.Module,
    data: Data,
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    graph: GraphOperator | None = None,
    progress: Progress | None = None,
    similarity: bool = False,
    floor: str = "auto",
    seed: int = 0,
    done: int = 0,
    total: int | None = None,
    what: str = "forward + probe",
    twin: TwinEvidence | None = None,
) -> pd.DataFrame:
    """One probed forward pass of ``model`` on ``data``: the per-layer table.

    Runs ``model(x, edge_index, batch, edge_weight=...)`` (``batch`` from ``data``, for a
    mini-batch of graphs; every metric is then per graph, averaged) without gradients under a
    :class:`Probe`
    (``metrics``) and, unless ``floor`` is ``bound``, a :class:`FloorTracker` (``auto``:
    shadow for float32, twin for float64), then adds the float-floor columns (computed from
    the Laplacian energy and the feature norm, :data:`FLOOR_METRICS`, measured for them when
    ``metrics`` leaves them out, and then not returned).  ``data.x`` is
    cast to the model's parameter dtype and moved to its device.  ``graph`` (default: built
    from ``data``) is the input graph; energies are measured on ``model.state_graph(graph)``
    (the graph itself, or the line graph for an edge-set model).

    With ``similarity`` the ``L x L`` similarity matrix and its layer numbers are returned in
    ``frame.attrs["similarity"]`` (a NumPy array) and ``frame.attrs["similarity_layers"]``.

    ``progress(done + k, total, what)`` is called after block ``k`` (``k = 1 .. depth``) from
    a forward hook: no host synchronisation is added.  ``total`` defaults to ``done + depth``;
    pass the total over several runs to advance one bar across them.

    ``twin``: with ``auto`` in float64, what an earlier seed's twin of the same model measured
    (:class:`~oversmooth.precision.TwinEvidence`, updated here when the twin runs): a seed far
    above that floor skips its twin.  Without it the twin runs.
    """
    param = next(model.parameters())
    dtype_name = str(param.dtype).removeprefix("torch.")
    method = resolve_floor_method(floor, dtype_name)
    # an oversmooth model casts its features itself, on the way into its encoder (float32
    # features then need no float64 copy alive through the forward: 256 MiB at 10^6 nodes)
    own = isinstance(model, DepthModel)
    inputs = _forward_inputs(data, param.device, None if own else param.dtype)
    graph = _state_graph(model, data, graph, param.device)
    # float64 with the automatic method: the twin (a second forward) runs unless an earlier
    # seed's twin (twin=) showed every layer far above the floor (precision.twin_needed); then
    # the bound is the floor.  The floor columns need each layer's Laplacian energy and
    # feature norm, so they are measured when not asked for (cheap beside the forward) and
    # left out of the table again: without the norm a float64 run paid the twin whatever its
    # curve (2.7 s against 1.14 s a seed of the depth-256 model), and without either the floor
    # failed after the forward
    known = twin.amplification if twin is not None and floor == "auto" else None
    lazy = known is not None and method == "twin"
    extra = [name for name in FLOOR_METRICS if name not in metrics]
    measured = [*metrics, *extra]
    measure = partial(_probed_forward, model, graph, inputs, measured, similarity, seed)
    with _progress_hooks(model, progress, done, total, what), _heap_hooks(model, graph):
        probe, tracker = measure("bound" if lazy else method)
    frame = probe.to_frame()
    if lazy and twin_needed(frame, dtype_name, known):
        probe, tracker = measure(method)
        frame = probe.to_frame()
    frame = add_floor_columns(frame, tracker.to_frame() if tracker else None, dtype_name)
    if twin is not None and tracker is not None and method == "twin":
        twin.record(frame, dtype_name)
    frame = frame.drop(columns=extra)
    frame.attrs["floor_method"] = method if tracker or not lazy else "bound"
    if similarity:
        frame.attrs["similarity"] = probe.similarity_matrix().cpu().numpy()
        frame.attrs["similarity_layers"] = probe.similarity_layers()
    probe.reset()  # its states go now: the probe sits in a reference cycle with its hooks
    return frame


def _forward_inputs(data: Data, device: torch.device, dtype: torch.dtype | None) -> tuple:
    """``(x, edge_index, batch, edge_weight)`` of ``data`` on ``device``, ``x`` in ``dtype``
    (as it is with None; ``batch``: a mini-batch of graphs, whose metrics are then per graph,
    averaged)."""
    x = data.x.to(device) if dtype is None else data.x.to(device, dtype)
    edge_index = data.edge_index.to(device)
    edge_weight = getattr(data, "edge_weight", None)
    edge_weight = None if edge_weight is None else edge_weight.to(device)
    batch = getattr(data, "batch", None)
    batch = None if batch is None else batch.to(device)
    return x, edge_index, batch, edge_weight


def _state_graph(
    model: torch.nn.Module, data: Data, graph: GraphOperator | None, device: torch.device
) -> GraphOperator:
    """The graph the model's states live on: ``graph`` (default: ``data``'s input graph), or
    its line graph for an edge-set model."""
    if graph is None:
        graph = input_graph(data, device)
    return model.state_graph(graph) if isinstance(model, DepthModel) else graph


@contextmanager
def _progress_hooks(
    model: torch.nn.Module, progress: Progress | None, done: int, total: int | None, what: str
) -> Iterator[None]:
    """Within the block, ``progress(done + k, total, what)`` after block ``k`` of the forward
    (``total``: ``done + depth`` unless given); no hooks without ``progress``."""
    handles = []
    if progress is not None:
        layers = _layer_modules(model)
        end = done + len(layers) if total is None else total
        for k, module in enumerate(layers, start=1):

            def hook(*_: object, _step: int = done + k) -> None:
                progress(_step, end, what)

            handles.append(module.register_forward_hook(hook))
    with _removed_after(handles):
        yield


@contextmanager
def _removed_after(handles: list) -> Iterator[None]:
    """Within the block, the hooks of ``handles``; removed after it, whatever happens."""
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


#: Graphs of more than this many edges and nodes have the heap trimmed before every layer of
#: a probed forward (:func:`_heap_hooks`).
TRIM_SIZE = 1 << 22


@contextmanager
def _heap_hooks(model: torch.nn.Module, graph: GraphOperator) -> Iterator[None]:
    """Within the block, on a graph above :data:`TRIM_SIZE` (edges and nodes) on the CPU,
    the freed heap memory goes back to the system before every layer module runs
    (:func:`~oversmooth.resources.release_heap`): the holes one layer's temporaries leave
    would otherwise sit resident beside the next layer's peak (at 10^6 nodes the whole
    command's peak fell from 2.02 to 1.85 GB, its time unchanged)."""
    handles = []
    if _trims_heap(graph):
        for module in _layer_modules(model):
            handles.append(module.register_forward_pre_hook(lambda *_: release_heap()))
    with _removed_after(handles):
        yield


def _trims_heap(graph: GraphOperator) -> bool:
    """Whether a forward on ``graph`` hands its freed heap back before every block: a CPU
    graph above :data:`TRIM_SIZE` edges and nodes."""
    return graph.num_edges + graph.num_nodes > TRIM_SIZE and graph.device.type == "cpu"


def _probed_forward(
    model: torch.nn.Module,
    graph: GraphOperator,
    inputs: tuple,
    metrics: Sequence[str],
    similarity: bool,
    seed: int,
    method: str,
) -> tuple[Probe, FloorTracker | None]:
    """One forward of ``model`` on ``inputs`` without gradients, under a new :class:`Probe`
    and the float-floor tracker of ``method`` (None for ``bound``)."""
    x, edge_index, batch, edge_weight = inputs
    probe = Probe(model, graph, metrics=metrics, similarity=similarity)
    with torch.no_grad(), probe, _floor_tracker(model, graph, method, seed) as tracker:  # type: ignore[arg-type]
        model(x, edge_index, batch, edge_weight=edge_weight)
    return probe, tracker


#: Per-forward structures above this many bytes are freed by a collection after the forward
#: (see :func:`_release_forward`).
COLLECT_BYTES = 16 * 2**20


def _release_forward(graph: GraphOperator, heads: int) -> None:
    """Free what the last forward pass left in reference cycles, when it is large.

    The message-passing kernel's per-forward plan (about ``8 h E`` bytes: every value's row
    and column, the edge list with self loops) holds itself through its lazily built
    transposes, so only Python's cyclic collector frees it, at a time of its choosing: on a
    large graph the next seed's forward would otherwise run beside the last one's plan (+0.5
    GB a seed at 10^6 nodes and 4 heads).  A full collection costs tens of milliseconds, so it
    runs only where the plan exceeds :data:`COLLECT_BYTES`."""
    if 8 * max(heads, 1) * (graph.num_edges + graph.num_nodes) > COLLECT_BYTES:
        gc.collect()


def _check_memory(
    config: AnalysisConfig, data: Data, device: torch.device, dtype: torch.dtype
) -> None:
    """Refuse a CPU analysis whose whole-run peak would exceed the memory limit, before the
    operator and the forward are built."""
    if device.type != "cpu":
        return
    from oversmooth.resources import analysis_bytes, check_allocation, similarity_bytes

    need = analysis_bytes(
        data.num_nodes,
        data.edge_index.size(1),
        data.num_features,
        config.model.heads,
        dtype.itemsize,
        hidden=config.model.hidden,
        feature_size=data.x.element_size(),
    )
    check_allocation(
        f"analyze on {config.dataset} ({data.num_nodes} nodes, {data.edge_index.size(1)} edges)",
        need,
        device,
        hint="use a smaller graph, a smaller --hidden, fewer --heads or --dtype float32",
    )
    if config.similarity:
        # the (L+1) x (L+1) similarity matrix: the probe's float64 sums and Gram matrix, the
        # NumPy copy and its CSV text; at -L 65536 some 170 GB, which failed only at the end
        # of the run (an audit)
        size = config.model.depth + 1
        check_allocation(
            f"analyze with the {size} x {size} similarity matrix",
            need + similarity_bytes(config.model.depth),
            device,
            hint="pass --no-similarity, or use a smaller --depth",
        )


def _fits_and_verdict(
    config: AnalysisConfig, metrics: pd.DataFrame, data: Data, timings: dict
) -> tuple[dict, dict]:
    """fits.json's records (each seed's own verdict and the pooled one, with the theory
    references) and the pooled :func:`describe_frame` result; adds the spectral step's time."""
    model = config.model
    fits: dict = {"per_seed": {}}
    # the verdict pools the seeds (shared law, one intercept per seed)
    desc = describe_frame(metrics, model.hidden, dtype=model.dtype)
    groups = metrics.groupby("seed", sort=True)
    for seed, frame in groups:
        fits["per_seed"][str(seed)] = (
            # of one seed, the pooled verdict is the seed's own (the same rows): a copy of it,
            # sharing nothing with the pooled record
            copy.deepcopy(fits_record(desc))
            if groups.ngroups == 1
            else fits_record(describe_frame(frame, model.hidden, dtype=model.dtype))
        )
    t0 = time.perf_counter()
    desc["reference"] = theory_reference(model.name, desc, diffusion_reference(data))
    timings["spectral_s"] = time.perf_counter() - t0
    fits["mean_over_seeds"] = fits_record(desc)
    return fits, desc


def _prune(
    config: AnalysisConfig,
    model: torch.nn.Module,
    data: Data,
    meta: dict,
    progress: Progress | None,
    done: int,
    total: int,
) -> pd.DataFrame:
    """The pruning table of the first seed; a trained model's on the test nodes of its own
    training split (the accuracy drop), an initialised one's as the change of the logits."""
    pruned = [done]

    def tick(layer: int, _done: list[int] = pruned) -> None:
        _done[0] += 1
        if progress:
            progress(_done[0], total, f"pruning layer {layer}")

    mask = None
    if config.checkpoint:
        from oversmooth.data import split_masks

        data.test_mask = split_masks(
            data, meta.get("split", "random"), seed=meta.get("split_seed", 0)
        )["test_mask"]
        mask = "test_mask"
    return prune_sensitivity(model, data, list(config.prune), mask=mask, callback=tick)


def _run_record(
    command: str,
    config: AnalysisConfig | ComparisonConfig,
    device: torch.device,
    floor_method: str,
    used: list[str],
    sizes: list[tuple[int, int]],
) -> dict:
    """What config.json keeps of a run: the command, its configuration (the model's input and
    output sizes those of the data, ``sizes``: see :func:`~oversmooth.config.with_data_sizes`),
    the device and the float-floor methods it resolved to (``used``: with auto in float64, the
    twin runs only where a layer nears the bound)."""
    return {
        "command": command,
        **with_data_sizes(config.to_dict(), sizes),
        "device_resolved": str(device),
        "floor_method": floor_method,
        "floor_methods_used": used,
    }


def run_analysis(config: AnalysisConfig, progress: Progress | None = None) -> AnalysisResult:
    """Build the model for every seed, probe one forward pass at initialisation, fit, classify.

    Returns the per-layer table (columns ``seed``, ``layer`` and the metrics), the
    similarity matrix of the first seed (when ``config.similarity``), the pruning
    table of the first seed (when ``config.prune``), fits and a verdict.
    """
    import pandas as pd

    started = time.perf_counter()
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.model.dtype)
    data, out_channels = _load_data(config.dataset, config.data_root, config.model.dtype)
    _check_memory(config, data, device, dtype)
    # data.x keeps its own precision: the models cast it on the way into their encoders
    graph = input_graph(data, device)
    seeds = _probe_seeds(config, data, graph, device, out_channels, progress)
    metrics = pd.concat(seeds.frames, ignore_index=True)
    # what was measured, as a Probe's frame says it (plot / write_report read the dtype)
    metrics.attrs.update({"dtype": config.model.dtype, "model": seeds.model, "capture": "output"})
    fits, desc = _fits_and_verdict(config, metrics, data, seeds.timings)
    seeds.timings["total_s"] = time.perf_counter() - started
    return AnalysisResult(
        config=_run_record(
            "analyze",
            config,
            device,
            config.floor_method,
            sorted(seeds.methods),
            [(data.num_features, out_channels)],
        ),
        metrics=metrics,
        fits=fits,
        verdict=desc["_verdict"],
        label=desc["classification"],
        similarity=seeds.similarity,
        similarity_layers=seeds.similarity_layers,
        prune=seeds.prune,
        environment=environment(device),
        timings=seeds.timings,
    )


@dataclass
class _SeedRuns:
    """What :func:`run_analysis` measured over its seeds, in seed order."""

    frames: list[pd.DataFrame] = field(default_factory=list)  # per seed, with a seed column
    methods: set[str] = field(default_factory=set)  # the float-floor methods the seeds used
    similarity: np.ndarray | None = None  # the first seed's, with config.similarity
    similarity_layers: list[int] | None = None
    prune: pd.DataFrame | None = None  # the first seed's, with config.prune
    timings: dict = field(default_factory=lambda: {"forward_s": 0.0, "prune_s": 0.0})
    model: str = ""  # the class name of the models

    def add(self, seed: int, frame: pd.DataFrame, floor_method: str, keep_sim: bool) -> None:
        """Keep one seed's frame (its attrs taken off: the floor method, the similarity when
        ``keep_sim``), with its seed as the first column."""
        frame.insert(0, "seed", seed)
        if keep_sim:
            self.similarity = frame.attrs["similarity"]
            self.similarity_layers = frame.attrs["similarity_layers"]
        self.methods.add(str(frame.attrs.get("floor_method", floor_method)))
        frame.attrs.clear()
        self.frames.append(frame)


def _seed_models(
    config: AnalysisConfig, data: Data, device: torch.device, out_channels: int
) -> Iterator[tuple[int, DepthModel, dict]]:
    """Each seed's model and its checkpoint metadata: the checkpoint's model in the run's
    precision, else the model initialised with the seed (no metadata; one model object whose
    weights are re-drawn per seed, :func:`~oversmooth.nn.model.seeded_models`)."""
    if config.checkpoint:
        for seed in config.seeds:
            model, meta = _trained_model(config, data, device)
            yield seed, model.to(resolve_dtype(config.model.dtype)), meta
        return
    first = config.model_for(data.num_features, out_channels, config.seeds[0])
    for seed, model in seeded_models(first, config.seeds, device):
        yield seed, model, {}


def _probe_seeds(
    config: AnalysisConfig,
    data: Data,
    graph: GraphOperator,
    device: torch.device,
    out_channels: int,
    progress: Progress | None,
) -> _SeedRuns:
    """One probed forward per seed (timed; the first seed's model also pruned, and its
    similarity kept), progress counted in layers over the seeds and the pruned layers."""
    runs, twin = _SeedRuns(), TwinEvidence()
    per_seed = config.model.depth
    total = per_seed * len(config.seeds) + len(config.prune)
    for i, (seed, model, meta) in enumerate(_seed_models(config, data, device, out_channels)):
        keep_sim = config.similarity and i == 0
        t0 = time.perf_counter()
        frame = probe_run(
            model,
            data,
            config.metrics,
            graph=graph,
            progress=progress,
            similarity=keep_sim,
            floor=config.floor,
            seed=seed,
            done=i * per_seed,
            total=total,
            what=f"seed {seed}: forward + probe",
            twin=twin,
        )
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        runs.timings["forward_s"] += time.perf_counter() - t0
        _release_forward(graph, config.model.heads)
        runs.add(seed, frame, config.floor_method, keep_sim)
        runs.model = type(model).__name__
        if config.prune and i == 0:
            t0 = time.perf_counter()
            done = per_seed * len(config.seeds)
            runs.prune = _prune(config, model, data, meta, progress, done, total)
            runs.timings["prune_s"] = time.perf_counter() - t0
    return runs


# ----------------------------------------------------------------------------- comparison


@dataclass
class ComparisonResult:
    """What :func:`run_comparison` computed: numbers only (the mean ± std table and the
    verdict lines are the write layer's: :func:`oversmooth.report.prose.summary_table`,
    :func:`~oversmooth.report.prose.comparison_verdicts`)."""

    config: dict
    metrics: pd.DataFrame  # per layer: dataset, model, depth, seed, layer, metrics
    summary: pd.DataFrame  # per run: dataset, model, depth, seed, final_energy
    fits: dict
    verdicts: list[Verdict]  # at the deepest depth, in the order of fits
    environment: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)


def _compare_seeds(
    config: ComparisonConfig,
    run: AnalysisConfig,
    data: Data,
    out_channels: int,
    graph: GraphOperator,
    device: torch.device,
    progress: Progress | None,
    done: int,
    total: int,
) -> list[pd.DataFrame]:
    """The per-layer frames of one (dataset, model, conv, depth), one per seed, with the run's
    coordinates as their first columns (``conv`` only when the comparison has several)."""
    model_cfg, several = run.model, len(config.convs) > 1
    where = f"{model_cfg.name}{' ' + model_cfg.conv if several else ''} depth {model_cfg.depth}"
    frames, twin = [], TwinEvidence()
    first = run.model_for(data.num_features, out_channels, config.seeds[0])
    for seed, model in seeded_models(first, config.seeds, device):
        frame = probe_run(
            model,
            data,
            run.metrics,
            graph=graph,
            progress=progress,
            floor=config.floor,
            seed=seed,
            done=done,
            total=total,
            what=f"{run.dataset} {where} seed {seed}",
            twin=twin,
        )
        _release_forward(graph, model_cfg.heads)
        columns: list[tuple[str, object]] = [("seed", seed), ("depth", model_cfg.depth)]
        columns += [("conv", model_cfg.conv)] if several else []
        for col, value in (*columns, ("model", model_cfg.name), ("dataset", run.dataset)):
            frame.insert(0, col, value)
        frames.append(frame)
        done += model_cfg.depth
    return frames


def _final_row(frame: pd.DataFrame) -> dict:
    """The summary row of one run's per-layer frame."""
    keys = [c for c in ("dataset", "model", "conv", "depth", "seed") if c in frame]
    final = float(frame["laplacian_energy"].iloc[-1])
    return {
        **{k: frame[k].iloc[0] for k in keys},
        "final_energy": final,
        "final_at_floor": final_at_floor(frame),
    }


def final_at_floor(frame: pd.DataFrame) -> bool:
    """Whether a run's last layer is at the float floor: its ``at_floor`` flag, for a finite
    energy only (an overflow, flagged ``at_floor`` by the column's rule, was tallied as
    rounding at the floor in the summary tables: an audit)."""
    final = float(frame["laplacian_energy"].iloc[-1])
    return bool(frame["at_floor"].iloc[-1]) and math.isfinite(final)


def _comparison_curves(models: Sequence[str], convs: Sequence[str]) -> list[tuple[str, str]]:
    """The (model, conv) curves of a comparison, convs outermost: every model under every conv,
    except the diffusion model, which ignores the conv (X' = P X): it runs once, under the
    first (``--models diffusion,postln --convs san,gcn`` wrote two identical diffusion rows,
    one titled for each conv: an audit)."""
    from oversmooth.registry import MODELS

    return [
        (m, c) for c in convs for m in models if c == convs[0] or MODELS[m].placement != "diffusion"
    ]


def run_comparison(config: ComparisonConfig, progress: Progress | None = None) -> ComparisonResult:
    """Every (dataset, model, conv, depth, seed) at initialisation; per-layer rows, final
    energies, fits at the deepest depth."""
    import pandas as pd

    from oversmooth.data import check_distinct

    check_distinct(config.datasets)
    if len(config.datasets) > 1:  # every dataset refused or taken before the first model runs
        for dataset in config.datasets[1:]:  # (the first is loaded by the loop at once)
            _load_data(dataset, config.data_root, config.model.dtype)
    started = time.perf_counter()
    device = resolve_device(config.device)
    floor_method = config.floor_method
    deepest = config.depths[-1]
    curves = _comparison_curves(config.models, config.convs)
    total = sum(config.depths) * len(config.seeds) * len(curves) * len(config.datasets)
    done = 0
    frames, fits, verdicts, sizes = [], {}, [], []
    for dataset in config.datasets:
        data, out_channels = _load_data(dataset, config.data_root, config.model.dtype)
        sizes.append((data.num_features, out_channels))
        graph = input_graph(data, device)
        diffusion = diffusion_reference(data)  # once per graph, shared by every model
        for model_name, conv in curves:
            for depth in config.depths:
                run = config.analysis(model_name, conv, depth, dataset)
                try:
                    frames += _compare_seeds(
                        config, run, data, out_channels, graph, device, progress, done, total
                    )
                except ValueError as exc:
                    # which run of the grid (the line graph of a dense dataset refused esa,
                    # naming neither; an audit)
                    raise ValueError(
                        f"{model_name} {conv} at depth {depth} on {dataset}: {exc}"
                    ) from exc
                done += depth * len(config.seeds)
            desc = describe_frame(
                pd.concat(frames[-len(config.seeds) :]),  # the deepest depth's, sorted last
                config.model.hidden,
                dtype=config.model.dtype,
            )
            desc["reference"] = theory_reference(model_name, desc, diffusion)
            record = {**fits_record(desc), "depth": deepest}
            if len(config.convs) > 1:
                record["conv"] = conv
            fits[comparison_key(dataset, model_name, conv, config.convs)] = record
            verdicts.append(desc["_verdict"])
    used = sorted({str(f.attrs.get("floor_method", floor_method)) for f in frames})
    metrics = pd.concat(frames, ignore_index=True)
    summary = pd.DataFrame([_final_row(f) for f in frames])
    return ComparisonResult(
        config=_run_record("compare", config, device, floor_method, used, sizes),
        metrics=metrics,
        summary=summary,
        fits=fits,
        verdicts=verdicts,
        environment=environment(device),
        timings={"total_s": time.perf_counter() - started},
    )
