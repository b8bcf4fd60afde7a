"""Model precision (``float32`` / ``float64``) and the float floor of a run.

A model run in float32 rounds every operation; over hundreds of blocks the
rounding errors accumulate into a *floor*: an energy below which the measured
Laplacian energy is rounding noise, not a property of the network.  The
single-step bound ``(eps * ||x||)^2`` (:func:`oversmooth.fit.float_floor`)
lies 3-6x below the accumulated floor of a depth-256 Post-LN SAN on Cora, and
energies a few times above the floor are already off by more than 2x, so the
floor is estimated from the run itself, layer by layer, by :class:`FloorTracker`:

- ``shadow`` (float32 runs): a float64 copy of the same weights runs in step
  with the model.  The floor of layer ``k`` is the Laplacian energy of the
  difference of the two states, ``E(X32^k - X64^k)``: the actual rounding error of
  the run, seen by the energy.  The float64 energies come for free
  (column ``float64_energy``).  Cost: one float64 forward (about 1.5x a
  float32 forward on CPU).
- ``twin``: a copy in the same precision runs on the input perturbed by one
  unit in the last place (a relative ``±eps`` on every entry).  Rounding then
  differs from the first block on, so the difference of the two runs measures
  the accumulated noise: the floor is ``E(Xa^k - Xb^k) / 2`` (two independent
  noises of equal size).  Cost: one more forward in the model's precision.
  Used for float64 runs, where nothing more precise is at hand.  With the automatic method
  (``auto``) the first seed of a model runs it; a later seed runs it only when a layer comes
  within :data:`TWIN_MARGIN` of the floor that twin measured (:func:`twin_needed`,
  :class:`TwinEvidence`; then the probed forward is repeated with it), so the seeds of a
  float64 run far above its floor cost one forward each, not two.
- ``bound``: the single-step bound with the run's epsilon; costs nothing, and
  underestimates the floor of deep float32 runs (kept for foreign models).

The floor of a layer is never below the single-step bound: a twin of a *linear* stack
(linear diffusion) carries its ``±eps`` perturbation down with the signal, so its difference
decays with the energy and would never see the floor, while every stored state is rounded to
``eps * ||x||`` afresh (measured: diffusion on karate at depth 512 freezes at 4.9e-33 from
about layer 350, the twin's floor there is 5e-36, the bound 1.6e-32; the exact final energy
is 6.2e-54).  A layer is ``at_floor`` when its energy is below :data:`AT_FLOOR_FACTOR` times
the floor (or not finite).  With the factor 12, an energy that is not at the
floor is within a factor 2 of the exact one: ``|sqrt(E) - sqrt(E_exact)| <=
sqrt(E(error)) <= sqrt(E / 12)`` gives ``E_exact / E`` in ``[0.50, 1.67]``.
Rows at the floor are left out of every fit.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, cast
from collections.abc import Callable

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import Tensor, nn

# the floor methods are a config choice (oversmooth.config, torch-free)
from oversmooth.config import FLOOR_METHODS, check_seed, resolve_floor_method

# beside float_floor (torch-free: the verdict's too)
from oversmooth.fit import AT_FLOOR_FACTOR, dtype_eps
from oversmooth.graph import by_rows
from oversmooth.nn.model import ENCODER_BLOCK_ROWS
from oversmooth.resources import release_heap

if TYPE_CHECKING:
    import pandas as pd

    from oversmooth.graph import GraphOperator
    from oversmooth.nn.conv import GraphContext
    from oversmooth.nn.model import DepthModel

__all__ = [
    "FLOOR_METHODS",
    "AT_FLOOR_FACTOR",
    "dtype_eps",
    "resolve_floor_method",
    "FloorTracker",
    "mark_at_floor",
    "bound_floor",
    "add_floor_columns",
    "twin_needed",
    "TwinEvidence",
    "TWIN_MARGIN",
]

# float64 with the automatic floor method: the first seed of a model runs the twin; a later
# seed runs it only when some layer's energy is below TWIN_MARGIN x AT_FLOOR_FACTOR x the floor
# the earlier twin measured there, as a multiple of the bound (TwinEvidence).  Measured at
# depth 256 on Cora (seeds 0-9, float64): the twin's floor is at most 6.5 (Post-LN), 15
# (Pre-LN) and 201 (nonlocal) times the bound, and the lowest energy 1.3e14 times the bound
# or more.  The margin covers the twin being one sample of the noise (it read 10x low at single
# layers of an amplifying stack; an audit) and seed-to-seed spread.
TWIN_MARGIN = 1e6

#: On graphs of more than ``ENCODER_BLOCK_ROWS`` nodes, the floor's energy of a difference of
#: two states is summed over this many channels at a time.
MEASURE_CHANNELS = 8


def bound_floor(feature_norm: ArrayLike, dtype: str) -> np.ndarray:
    """The single-step bound ``(eps * feature_norm)^2`` with the epsilon of ``dtype`` (inf for
    an overflowed norm, without numpy's warning: the verdict names the non-finite rows)."""
    with np.errstate(over="ignore"):
        return (dtype_eps(dtype) * np.asarray(feature_norm, dtype=np.float64)) ** 2


class FloorTracker:
    """Estimate the float floor of every layer of an oversmooth model while it runs.

    Inside a ``with`` block, forward hooks on the encoder and on every block run a
    reference copy of the model in step (see the module docstring for the
    methods); they are removed on exit, also when the forward raises.  Layer
    ``k`` follows the :class:`~oversmooth.probe.Probe` convention: 0 is the
    encoder output, ``k`` the output of ``model.blocks[k - 1]``.  Blocks the
    forward skips are skipped in the reference too.

    Args:
        model: a :class:`~oversmooth.nn.DepthModel` in float32 or float64.
        graph: the measuring operator (the one given to the Probe).
        method: ``shadow`` or ``twin`` (``bound`` needs no tracker).
        perturbation_seed: seed of the twin's input perturbation.
        trim: hand the heap memory the reference's block freed back to the system before the
            model's block runs (:func:`~oversmooth.resources.release_heap`; the analysis
            does so on large graphs, as before every block).

    Example:
        >>> import torch
        >>> from oversmooth import GraphOperator, Probe, build_model
        >>> from oversmooth.data import karate
        >>> data = karate()
        >>> model = build_model("postln", depth=2, in_channels=data.num_features, out_channels=2)
        >>> graph = GraphOperator(data.edge_index, num_nodes=data.num_nodes)
        >>> with Probe(model, graph) as probe, FloorTracker(model, graph, "shadow") as floor:
        ...     with torch.no_grad():
        ...         _ = model(data.x, data.edge_index)
        >>> list(floor.to_frame().columns)
        ['layer', 'float_floor', 'float64_energy']
    """

    def __init__(
        self,
        model: nn.Module,
        graph: GraphOperator,
        method: str,
        perturbation_seed: int = 0,
        trim: bool = False,
    ) -> None:
        if method not in ("shadow", "twin"):
            raise ValueError(f"method: expected shadow or twin, received {method!r}")
        if not isinstance(getattr(model, "blocks", None), nn.ModuleList) or not hasattr(
            model, "encoder"
        ):
            raise TypeError(
                "model: expected an oversmooth DepthModel (encoder and blocks); use the bound floor"
            )
        self.model, self.graph, self.method = model, graph, method
        self.perturbation_seed = check_seed("perturbation_seed", perturbation_seed)
        self.trim = trim
        self.dtype = next(model.parameters()).dtype
        if method == "shadow" and self.dtype != torch.float32:
            raise ValueError("method: 'shadow' needs a float32 model; use twin for float64")
        self._handles: list = []
        self._reference: DepthModel | None = None
        self._state: Tensor | None = None
        self._ctx: tuple[GraphContext, GraphContext] | None = None
        self._graph_args: tuple | None = None
        self._floor: dict[int, Tensor] = {}
        self._energy: dict[int, Tensor] = {}

    def __enter__(self) -> FloorTracker:
        ref_dtype = torch.float64 if self.method == "shadow" else self.dtype
        self._reference = cast("DepthModel", _hookless_copy(self.model).to(ref_dtype).eval())
        self._floor.clear()
        self._energy.clear()
        self._handles.append(
            self.model.register_forward_pre_hook(self._model_pre_hook, with_kwargs=True)
        )
        model = cast("DepthModel", self.model)  # checked in __init__: encoder and blocks
        self._handles.append(model.encoder.register_forward_hook(self._encoder_hook))
        for k, block in enumerate(model.blocks):
            self._handles.append(block.register_forward_pre_hook(self._block_pre_hook(k)))
            self._handles.append(block.register_forward_hook(self._block_hook(k)))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._reference, self._state, self._ctx, self._graph_args = None, None, None, None

    # -- hooks ----------------------------------------------------------------------------------
    def _reference_input(self, x: Tensor, gen: torch.Generator | None = None) -> Tensor:
        """The reference's input: ``x`` in float64 (shadow), or ``x`` with one ulp up or down
        per entry (twin; the signs drawn from ``gen``, else from the perturbation seed)."""
        if self.method == "shadow":
            return x.to(torch.float64)
        if gen is None:
            gen = torch.Generator().manual_seed(self.perturbation_seed)
        # 1 + eps * sign, built in place (the same numbers as out-of-place, without four more
        # temporaries of the input's size)
        factor = torch.randint(0, 2, x.shape, generator=gen).to(x.device, x.dtype)
        factor.mul_(2).sub_(1).mul_(torch.finfo(x.dtype).eps).add_(1)
        return factor.mul_(x)

    def _reference_ctx(self, ctx: GraphContext) -> GraphContext:
        if self.method == "twin":
            return ctx
        if self._ctx is None or self._ctx[0] is not ctx:
            # the graph context rebuilt in float64 from the forward's own graph arguments, so
            # that counts and edge weights are not float32-rounded in the reference
            assert self._reference is not None and self._graph_args is not None
            edge_index, batch, edge_weight, num_nodes = self._graph_args
            reference = self._reference.context(edge_index, num_nodes, batch, edge_weight)
            self._ctx = (ctx, reference)
        return self._ctx[1]

    def _model_pre_hook(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        names = ("x", "edge_index", "batch")
        bound = {**dict(zip(names, args, strict=False)), **kwargs}
        self._graph_args = (
            bound["edge_index"],
            bound.get("batch"),
            bound.get("edge_weight"),
            bound["x"].size(0),  # the input graph's nodes (edge-set blocks run on more rows)
        )

    def _measure(self, k: int, output: Tensor) -> None:
        from oversmooth.metrics import laplacian_energy

        assert self._state is not None
        out, ref = output.detach(), self._state
        pieces = [(out, ref)]
        if out.dim() == 2 and out.size(0) > ENCODER_BLOCK_ROWS:
            # a few channels at a time (the energy is a sum over channels): the difference is
            # not formed whole beside the two states (the peak of a 10^6-node command with a
            # twin, 1.95 GB, was here)
            step = MEASURE_CHANNELS
            columns = [slice(c, c + step) for c in range(0, out.size(1), step)]
            pieces = [(out[:, c], ref[:, c]) for c in columns]
        energy = torch.stack(
            [
                laplacian_energy(a.to(torch.float64) - b.to(torch.float64), self.graph)
                for a, b in pieces
            ]
        ).sum(dim=0)
        self._floor[k] = energy if self.method == "shadow" else energy / 2
        if self.method == "shadow":
            self._energy[k] = laplacian_energy(self._state, self.graph)

    def _encoder_hook(self, module: nn.Module, args: tuple, output: Tensor) -> None:
        assert self._reference is not None
        x, encoder = args[0].detach(), self._reference.encoder
        with torch.no_grad():
            if len(args) > 1 or x.size(0) <= ENCODER_BLOCK_ROWS:
                # further arguments (an edge-set encoder's edge_index) are passed on unchanged
                self._state = encoder(self._reference_input(x), *args[1:])
            else:
                # a block of rows at a time, the signs drawn in turn from one generator: the
                # input's perturbed copy and the encoder's hidden array are not formed whole
                # (at 10^6 nodes they were the whole command's peak with a twin: 2.15 GB,
                # against 1.68 GB without one)
                gen = torch.Generator().manual_seed(self.perturbation_seed)
                self._state = by_rows(
                    lambda part: encoder(self._reference_input(part, gen)), x, ENCODER_BLOCK_ROWS
                )
        self._measure(0, output)

    def _block_pre_hook(self, k: int) -> Callable[[nn.Module, tuple], None]:
        # the reference's block runs before the model's, not after it: the model's output is
        # not held beside the reference's temporaries then
        def hook(module: nn.Module, args: tuple) -> None:
            assert self._reference is not None and self._state is not None
            with torch.no_grad():
                self._state = self._reference.blocks[k](self._state, self._reference_ctx(args[1]))
            if self.trim:
                release_heap()

        return hook

    def _block_hook(self, k: int) -> Callable[[nn.Module, tuple, Tensor], None]:
        def hook(module: nn.Module, args: tuple, output: Tensor) -> None:
            self._measure(k + 1, output)

        return hook

    # -- results --------------------------------------------------------------------------------
    def to_frame(self) -> pd.DataFrame:
        """One row per layer: ``layer``, ``float_floor`` (and ``float64_energy`` for shadow)."""
        import pandas as pd

        layers = sorted(self._floor)
        data: dict = {"layer": layers}
        if layers:
            data["float_floor"] = torch.stack([self._floor[k] for k in layers]).cpu().numpy()
            if self.method == "shadow":
                data["float64_energy"] = (
                    torch.stack([self._energy[k] for k in layers]).cpu().numpy()
                )
        else:
            data["float_floor"] = []
        return pd.DataFrame(data)


def _hookless_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` without the hooks attached to it (a deepcopy would copy a Probe's
    hooks too, and the reference would then record into that Probe)."""
    copy_model = getattr(model, "copy_without_hooks", None)
    if callable(copy_model):  # a DepthModel: rebuilt from its config, in its dtype
        return copy_model()
    reference = copy.deepcopy(model)
    for module in reference.modules():
        module._forward_hooks.clear()
        module._forward_pre_hooks.clear()
    return reference


def mark_at_floor(energy: ArrayLike, floor: ArrayLike) -> np.ndarray:
    """``at_floor``: the energy is not finite or below ``AT_FLOOR_FACTOR * floor``."""
    e = np.asarray(energy, dtype=np.float64)
    f = np.asarray(floor, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return ~np.isfinite(e) | (e < AT_FLOOR_FACTOR * f)


def twin_needed(frame: pd.DataFrame, dtype: str, amplification: np.ndarray | None = None) -> bool:
    """Whether a float64 run's twin can change anything, given ``amplification``: per layer,
    how far above the single-step bound a twin of the same model measured the floor (the
    running maximum over the layers so far of ``float_floor / bound``, :class:`TwinEvidence`).
    Without it the twin is needed: how much a model amplifies its rounding errors is known
    only from a twin (a Post-LN stack with trained-size weights grew them ``10^0.5`` a layer in
    energy, and layers its bound left in were up to 810x off; an audit).  With it, needed
    when some layer's ``laplacian_energy`` is not finite or below ``TWIN_MARGIN *
    AT_FLOOR_FACTOR * amplification`` times the bound (from ``feature_norm``); far above that
    no floor estimate can flag a layer, and the bound, which every floor is at least (see the
    module docstring), is the floor recorded."""
    energy = frame["laplacian_energy"].to_numpy(dtype=np.float64)
    if amplification is None or len(amplification) != len(energy):
        return True
    bound = bound_floor(frame["feature_norm"].to_numpy(dtype=np.float64), dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        reach = TWIN_MARGIN * AT_FLOOR_FACTOR * amplification * bound
        far = np.isfinite(energy) & (energy >= reach)
    return not bool(far.all())


class TwinEvidence:
    """What the twin of one seed measured, for the seeds after it (:func:`twin_needed`): the
    running maximum over the layers of its floor over the single-step bound.  One per model
    configuration (architecture, depth, precision, graph): the seeds are draws of it."""

    def __init__(self) -> None:
        self.amplification: np.ndarray | None = None

    def record(self, frame: pd.DataFrame, dtype: str) -> None:
        """Keep (the layer-wise maximum with what is kept) the amplification of ``frame``, a
        table whose ``float_floor`` a twin measured."""
        bound = bound_floor(frame["feature_norm"].to_numpy(dtype=np.float64), dtype)
        floor = frame["float_floor"].to_numpy(dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(bound > 0, floor / bound, np.inf)
        ratio = np.maximum.accumulate(np.where(np.isfinite(ratio), ratio, np.inf))
        known = self.amplification
        if known is not None and len(known) == len(ratio):
            ratio = np.maximum(ratio, known)
        self.amplification = ratio


def add_floor_columns(frame: pd.DataFrame, floor: pd.DataFrame | None, dtype: str) -> pd.DataFrame:
    """Add ``float_floor`` and ``at_floor`` (and ``float64_energy`` when known) to a Probe table.

    ``floor`` is :meth:`FloorTracker.to_frame` of the same run, or ``None`` for the
    single-step bound of ``dtype`` (from the ``feature_norm`` column).
    """
    frame = frame.copy()
    if floor is not None:
        by_layer = floor.set_index("layer")
        for column in by_layer.columns:
            frame[column] = by_layer[column].reindex(frame["layer"]).to_numpy()
        if "feature_norm" in frame:  # never below what storing the state alone costs
            frame["float_floor"] = np.fmax(
                frame["float_floor"].to_numpy(dtype=np.float64),
                bound_floor(frame["feature_norm"], dtype),
            )
    elif "feature_norm" in frame:
        frame["float_floor"] = bound_floor(frame["feature_norm"], dtype)
    else:
        raise ValueError(
            "frame: the bound floor needs the feature_norm column; add it to the metrics"
        )
    frame["at_floor"] = mark_at_floor(frame["laplacian_energy"], frame["float_floor"])
    return frame
