"""A PyTorch Lightning callback that probes the per-layer energies of the model being trained.

:class:`EnergyMonitor` runs the LightningModule's forward on a fixed graph every ``n``-th
training epoch (and once at fit start, before training), in eval mode under
``torch.no_grad()`` inside a forked RNG, records it with an :class:`oversmooth.Probe` and
logs the per-layer values through every logger of the trainer (CSV, TensorBoard, Weights &
Biases, ... unchanged), with the names of :mod:`oversmooth.tracking`.  At the end of the fit
it judges the weights the fit returns with :func:`oversmooth.verdict`.  Details:
``docs/lightning.md``.

Lightning is an optional dependency (``pip install "oversmooth[lightning]"``); ``import
oversmooth`` never imports it.  ``lightning.pytorch`` is used when installed, else the older
``pytorch_lightning`` package.
"""

from __future__ import annotations

import copy
import itertools
import random
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from oversmooth.data import GraphData
from oversmooth.probe import Probe, check_metrics, find_layers
from oversmooth.tracking import frame_scalars, log_frame, log_verdict
from oversmooth.verdict import Verdict, verdict

if TYPE_CHECKING:
    import lightning.pytorch as pl
    import pandas as pd
else:
    try:
        import lightning.pytorch as pl
    except ImportError:
        try:
            import pytorch_lightning as pl
        except ImportError:
            raise ImportError(
                "oversmooth.lightning needs PyTorch Lightning, which is not installed: "
                'pip install "oversmooth[lightning]"'
            ) from None

__all__ = ["EnergyMonitor", "default_forward", "log_frame", "frame_scalars", "log_verdict"]

DEFAULT_METRICS = ("laplacian_energy", "feature_norm")


def _log_step(trainer: pl.Trainer) -> int:
    """The step the energies of the weights now in the module are logged at: the batches
    that stepped an optimiser, the step at which Lightning logs a training loss of the same
    weights.  ``global_step`` counts optimiser steps, so with two optimisers stepped per batch
    (manual optimisation) the energies landed at twice the step of the losses beside them (an
    audit).  ``global_step`` where the loop does not say (another Lightning version).

    What Lightning logs at an epoch's end (validation metrics, ``on_epoch`` values) goes one
    step earlier, at the epoch's last batch; an end-of-epoch probe is not moved there, where it
    would share step 0 with the probe before training whenever an epoch is one batch (a
    full-graph training): both carry ``epoch``, the column to join them on (docs/lightning.md).
    """
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    stepped = getattr(loop, "_batches_that_stepped", None)
    return int(stepped) if isinstance(stepped, int) else int(trainer.global_step)


def _caches(module: nn.Module) -> list[tuple[nn.Module, str, Any]]:
    """``(submodule, name, value)`` of every cache a PyG convolution keeps between calls
    (``cached=True``: ``GCNConv``'s ``_cached_edge_index`` and ``_cached_adj_t``,
    ``SGConv``'s ``_cached_x``, ...).  A probe on another graph, or with other edge weights
    than training passes, filled them and training went on with the probe's normalisation
    (its parameters differed with and without the monitor; an audit)."""
    return [
        (m, name, value)
        for m in module.modules()
        for name, value in vars(m).items()
        if name.startswith("_cached")
    ]


def default_forward(module: nn.Module, data: Any) -> object:
    """The forward the monitor probes by default: ``module(data.x, data.edge_index)``."""
    return module(data.x, data.edge_index)


def _moved(data: Any, device: torch.device, dtype: torch.dtype | None) -> Any:
    """A shallow copy of a PyG ``Data``/``Batch`` (or a ``GraphData``) on ``device``, its
    floating tensors in ``dtype`` (the user's object is left as it is)."""

    def move(t: torch.Tensor) -> torch.Tensor:
        if dtype is not None and t.is_floating_point():
            return t.to(device=device, dtype=dtype)
        return t.to(device=device)

    if isinstance(data, GraphData):
        return data._apply(move)
    return copy.copy(data).apply(move)


def _fingerprint(module: nn.Module, on_cpu: bool = False) -> torch.Tensor:
    """Per parameter and buffer of ``module``, its sum and sum of squares in float64.

    What tells the monitor whether the weights changed since its last probe without an
    optimiser step (a callback that swaps in averaged or best weights in its own
    ``on_train_end``): two numbers per tensor instead of a copy of the weights, one tensor
    cast at a time.  A change that keeps both numbers of every tensor (a permutation of a
    tensor's entries) is not seen.  ``on_cpu``: summed on the CPU, so that fingerprints taken
    before and after Lightning moves the module to the CPU at the fit's end compare exactly.
    """
    found: dict[torch.device, list[torch.Tensor]] = {}
    for t in itertools.chain(module.parameters(), module.buffers()):
        t = t.detach()
        if on_cpu:
            t = t.cpu()
        if t.layout != torch.strided:
            t = t.to_dense()
        if t.is_complex():
            t = torch.view_as_real(t)
        d = t.reshape(-1).to(torch.float64)  # no copy for a float64 tensor
        found.setdefault(d.device, []).append(torch.stack((d.sum(), torch.dot(d, d))))
    parts = [torch.stack(pairs).cpu() for pairs in found.values()]  # one transfer per device
    return torch.cat(parts) if parts else torch.zeros(0, 2, dtype=torch.float64)


def _same(a: torch.Tensor | None, b: torch.Tensor) -> bool:
    """Equal fingerprints, NaN equal to NaN (weights gone NaN are still the same weights)."""
    return (
        a is not None
        and a.shape == b.shape
        and torch.allclose(a, b, rtol=0.0, atol=0.0, equal_nan=True)
    )


class EnergyMonitor(pl.Callback):
    """Probe the model's per-layer energies during training and log them.

    When: before training (``at_fit_start``: the weights before training, ``global_step``
    0, after the sanity check; not in a run resumed from a checkpoint), after training epochs
    ``n-1, 2n-1, ...`` (every ``every_n_epochs``-th, counted from 1, after the epoch's last
    optimiser step), and at the fit's end unless the last probe saw the weights the fit
    returns (unchanged fingerprint: see :meth:`on_train_end` and :meth:`on_fit_end`).  Each is
    taken at the first moment after every hook of the callbacks and of the LightningModule has
    run (the first batch's start, the next epoch's start, train end, fit end).  Each probe is
    one forward pass, ``forward_fn(pl_module, data)``, in eval mode (the ``training`` flags set
    and restored directly, no module's ``train()``/``eval()`` called), under
    ``torch.no_grad()`` and a forked RNG, so training is bit-identical with and without the
    monitor.  Only the global-zero process probes.

    What: through every logger of the trainer (``logger.log_metrics``, at the step Lightning's
    ``self.log`` uses),
    ``{prefix}/{metric}/layer_{k}`` for each metric and layer, ``{prefix}/{metric}/final``
    and ``epoch`` (at the end, the epoch of the last training step); at the end (and after
    the fit-start probe) the verdict on ``laplacian_energy`` as ``{prefix}/verdict_code``
    (index in :data:`oversmooth.verdict.LABELS`) and, for TensorBoard and W&B, as text
    ``{prefix}/verdict``.  Kept on the callback, keyed by the logged step: ``frames`` (the
    probe's per-layer table, with ``epoch`` and ``global_step`` columns), ``verdicts``
    (:class:`~oversmooth.verdict.Verdict`) and ``titles`` (what was judged, e.g. ``GNN before
    training``; each fit starts them anew):
    ``oversmooth.verdict_text(monitor.verdicts[s], monitor.titles[s])`` is the logged line.

    Args:
        data: the fixed graph, a PyG ``Data`` or ``Batch`` (or the ``GraphData`` of
            :func:`oversmooth.data.load`); copied to the module's device,
            its floating tensors cast to the dtype of the module's parameters (so a
            ``precision="64-true"`` run is probed in float64).  Energies are measured on it
            (its ``edge_index``/``edge_weight``, no self loops) unless ``graph`` is given.
        every_n_epochs: probe every ``n``-th training epoch; 0 probes only at fit start and
            train end.
        metrics: names from :func:`oversmooth.available_metrics`.
        forward_fn: how the module is called on ``data``; default
            :func:`default_forward`, ``module(data.x, data.edge_index)``.  E.g.
            ``lambda m, d: m(d.x, d.edge_index, d.edge_attr)`` or ``lambda m, d: m(d)``.
        model: the module whose layers are probed: the name of a submodule
            (``"gnn"``, ``"encoder.gnn"``), a function of the LightningModule, or None: the
            LightningModule itself when the probe finds its layers (``convs``/``layers``/
            ``blocks``, a PyG ``BasicGNN``), else its first direct child where it does.
        graph: the graph energies are measured on, anything ``Probe`` accepts (default ``data``).
        at_fit_start: probe (and judge) the weights before training when training starts.
        per_layer: log every layer (else only the ``final`` values).
        judge: judge the last probe at train end with :func:`oversmooth.verdict` (needs
            ``laplacian_energy`` in ``metrics``); a model of fewer than 12 layers is
            judged ``inconclusive`` by design.
        prefix: first part of every logged name.
        probe_options: more keyword arguments of :class:`oversmooth.Probe` (``capture``,
            ``layers``, ``self_loops``, ``stream``, ...).
    """

    def __init__(
        self,
        data: Any,
        every_n_epochs: int = 1,
        metrics: Sequence[str] = DEFAULT_METRICS,
        *,
        forward_fn: Callable[[nn.Module, Any], object] = default_forward,
        model: str | Callable[[nn.Module], nn.Module] | None = None,
        graph: object | None = None,
        at_fit_start: bool = True,
        per_layer: bool = True,
        judge: bool = True,
        prefix: str = "energy",
        probe_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not (isinstance(data, GraphData) or callable(getattr(data, "apply", None))):
            raise TypeError(
                "data: expected a torch_geometric Data or Batch (or oversmooth.data.load's "
                f"GraphData), received {type(data).__name__}"
            )
        if isinstance(every_n_epochs, bool) or not isinstance(every_n_epochs, int):
            raise TypeError(f"every_n_epochs: expected an int, received {every_n_epochs!r}")
        if every_n_epochs < 0:
            raise ValueError(f"every_n_epochs: expected >= 0, received {every_n_epochs}")
        if isinstance(metrics, str):
            metrics = [m.strip() for m in metrics.split(",") if m.strip()]
        self.metrics = check_metrics(metrics)
        if judge and "laplacian_energy" not in self.metrics:
            raise ValueError(
                "judge: the verdict reads laplacian_energy; add it to metrics or set judge=False"
            )
        if not callable(forward_fn):
            raise TypeError(f"forward_fn: expected a function, received {forward_fn!r}")
        self.data = data
        self.every_n_epochs = every_n_epochs
        self.forward_fn = forward_fn
        self.model = model
        self.graph = data if graph is None else graph
        self.at_fit_start = at_fit_start
        self.per_layer = per_layer
        self.judge = judge
        self.prefix = prefix
        self.probe_options = dict(probe_options or {})
        if self.probe_options.get("reduce", "mean") != "mean":
            raise ValueError(
                f"probe_options: reduce={self.probe_options['reduce']!r} gives one row per graph "
                "and the monitor logs one value per layer and metric (the mean over the "
                "graphs of a batch); leave reduce out, or run a Probe yourself for per-graph rows"
            )
        # what the data holds and the default forward, module(data.x, data.edge_index), does
        # not pass: a model that reads it would be probed on another computation than it
        # trains on (edge weights only where the energies are measured on data's own graph)
        unpassed = {
            "batch": (
                "several graphs (a batch vector)",
                "it",
                "the batch (a pooled readout, graph-mode LayerNorm, global attention)",
            ),
            "edge_weight": ("edge weights, on which the energies are measured,", "them", "them"),
        }
        for attr, (held, it, reader) in unpassed.items():
            if attr == "edge_weight" and graph is not None:
                continue
            if forward_fn is default_forward and getattr(data, attr, None) is not None:
                warnings.warn(
                    f"EnergyMonitor: data holds {held} and the default forward, module(data.x, "
                    f"data.edge_index), does not pass {it}: a model that reads {reader} would be "
                    "probed on another computation than it trains on; pass forward_fn=, e.g. "
                    f"lambda m, d: m(d.x, d.edge_index, d.{attr})",
                    stacklevel=2,
                )
        self.frames: dict[int, pd.DataFrame] = {}
        self.verdicts: dict[int, Verdict] = {}
        self.titles: dict[int, str] = {}
        self._probe: Probe | None = None
        self._data_key: tuple[torch.device, torch.dtype | None] | None = None
        self._data_moved: Any = None
        self._frame: pd.DataFrame | None = None  # the last probe's table
        self._frame_step: int | None = None  # the step it is kept and logged at
        self._weights: torch.Tensor | None = None  # the fingerprint of the last probe's weights
        self._due: tuple[str, int, int] | None = None  # a probe to take: kind, epoch, step
        self._final: tuple[pd.DataFrame, bool] | None = None  # train end's table, logged?
        self._end_weights: torch.Tensor | None = None  # their fingerprint, summed on the CPU
        self._epoch = 0  # the epoch of the last training step (current_epoch moves on after it)

    # -- the probe --------------------------------------------------------------------------
    def target(self, pl_module: nn.Module) -> nn.Module:
        """The module whose layers are probed (see ``model``)."""
        if isinstance(self.model, str):
            return pl_module.get_submodule(self.model)
        if self.model is not None:
            return self.model(pl_module)
        if "layers" in self.probe_options:
            return pl_module
        capture = self.probe_options.get("capture", "output")
        for candidate in (pl_module, *pl_module.children()):
            try:
                find_layers(candidate, capture)
            except ValueError:
                continue
            return candidate
        raise ValueError(
            f"model: cannot find the layers of {type(pl_module).__name__} or of its direct "
            "children; pass model='name_of_the_gnn_submodule' or "
            "probe_options={'layers': [...]}"
        )

    def _data_for(self, module: nn.Module) -> Any:
        params = [p for p in module.parameters() if p.is_floating_point()]
        device = params[0].device if params else torch.device("cpu")
        key = (device, params[0].dtype if params else None)
        if key != self._data_key:
            self._data_moved, self._data_key = _moved(self.data, *key), key
        return self._data_moved

    def probe(self, pl_module: nn.Module) -> pd.DataFrame:
        """One probed forward of ``pl_module`` on ``data``; the per-layer table (nothing is
        logged).  The module's modes, its weights and buffers, the RNG and autograd are left
        as they were."""
        target = self.target(pl_module)
        if self._probe is None or self._probe.model is not target:
            self._probe = Probe(target, self.graph, self.metrics, **self.probe_options)
        data = self._data_for(pl_module)
        device = self._data_key[0] if self._data_key is not None else torch.device("cpu")
        modes = [(m, m.training) for m in pl_module.modules()]
        caches = _caches(pl_module)
        # every buffer, restored after the pass: a module that updates its buffers in eval
        # mode (quantisation-aware training's observers) took the probe's forward for its
        # first observation, and training changed with the callback (an audit)
        buffers = [(b, b.detach().clone()) for b in pl_module.buffers()]
        py_rng, np_rng = random.getstate(), np.random.get_state()
        probe = self._probe
        probe.reset()
        try:
            for module, name, _ in caches:  # the probe computes its own (its graph may differ)
                setattr(module, name, None)
            with (
                torch.random.fork_rng(devices=[device] if device.type == "cuda" else []),
                torch.no_grad(),
                probe,
            ):
                # eval mode by the flags alone, as they are restored: a module's own train()
                # or eval() may do more (an adapter that merges its weights into the frozen
                # ones in eval() and takes them out in train()), and calling eval() here but
                # not train() after left them merged for the rest of training (an audit)
                for module, _ in modes:
                    module.training = False
                self.forward_fn(pl_module, data)
        finally:
            for module, mode in modes:
                module.training = mode
            for module, name, value in caches:  # training's, as they were
                setattr(module, name, value)
            with torch.no_grad():
                for buffer, kept in buffers:
                    if buffer.shape == kept.shape:
                        buffer.copy_(kept)
            random.setstate(py_rng)
            np.random.set_state(np_rng)
        return probe.to_frame()

    # -- Lightning hooks ----------------------------------------------------------------------
    def _measure(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, epoch: int, step: int
    ) -> pd.DataFrame:
        """Probe the weights now in ``pl_module``; kept under ``step`` (nothing is logged)."""
        frame = self.probe(pl_module)
        self._weights = _fingerprint(pl_module)
        marks = {"epoch": epoch, "global_step": trainer.global_step}
        kept = frame.assign(**marks)
        kept.attrs = dict(frame.attrs, **marks)
        self.frames[step] = kept
        self._frame, self._frame_step = frame, step
        return frame

    def _log(
        self,
        trainer: pl.Trainer,
        frame: pd.DataFrame,
        epoch: int,
        step: int,
        title: str | None = None,
        values: bool = True,
    ) -> None:
        """Log ``frame``'s values (unless ``values`` is false) at ``step``; with a ``title``,
        its verdict too."""
        scalars = frame_scalars(frame, self.metrics, prefix=self.prefix, per_layer=self.per_layer)
        if scalars and values:
            scalars["epoch"] = float(epoch)  # as Lightning's own self.log adds it
            for logger in trainer.loggers:
                logger.log_metrics(scalars, step=step)
        if title is None or not self.judge:
            return
        found = verdict(frame)
        self.verdicts[step] = found
        self.titles[step] = title
        for logger in trainer.loggers:
            log_verdict(found, logger, step, prefix=self.prefix, title=title, epoch=epoch)

    def _take_due(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Take and log the probe that is due, if one is: the one before training at the
        first batch's start, an epoch's at the next epoch's start, so that it sees the weights
        after every hook of that moment, the LightningModule's own included (Lightning runs the
        callbacks' hooks first: weights the module changed in its ``on_train_start`` or
        ``on_train_epoch_end`` were missed; an audit)."""
        if self._due is None:
            return
        kind, epoch, step = self._due
        self._due = None
        frame = self._measure(trainer, pl_module, epoch, step)
        # the weights before this fit's first step: the initialisation, unless the module was
        # trained before (a second fit, a fine-tuning): nothing here tells
        title = f"{type(pl_module).__name__} before training" if kind == "start" else None
        self._log(trainer, frame, epoch, step, title)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._frame, self._frame_step, self._weights = None, None, None
        self._due, self._final, self._end_weights = None, None, None
        # the data as it is now: a copy moved or cast for an earlier fit, and the Probe's
        # measuring graph built from it, kept the features and edges of before (layer-0
        # energy 9.98 against 88.9 after data.x *= 3 and new edges: an audit)
        self._data_key = self._data_moved = self._probe = None
        # a new fit (a fresh Trainer starts global_step at 0 again): its record starts anew;
        # kept, the last fit's later steps stood beside this one's under the same keys
        self.frames, self.verdicts, self.titles = {}, {}, {}

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch = trainer.current_epoch
        # after a resumed run's restore (global_step > 0): its weights are no initialisation
        if self.at_fit_start and trainer.global_step == 0 and trainer.is_global_zero:
            self._due = ("start", self._epoch, _log_step(trainer))

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._due is not None and self._due[0] == "epoch":  # after all of its end's hooks
            self._take_due(trainer, pl_module)  # (the one before training waits for a batch)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._take_due(trainer, pl_module)  # the one before training

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self._epoch = trainer.current_epoch

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._take_due(trainer, pl_module)  # one before training that no batch took
        n = self.every_n_epochs
        if n and (trainer.current_epoch + 1) % n == 0 and trainer.is_global_zero:
            self._due = ("epoch", trainer.current_epoch, _log_step(trainer))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Probe the weights the fit ends with, unless the last probe saw them already; logged
        and judged at :meth:`on_fit_end`, once every ``on_train_end`` hook has run.

        The last epoch's probe, when due, is this one.  Otherwise the last probe is reused
        only when no step ran since and the weights' fingerprint is unchanged: a callback
        earlier in the list (``StochasticWeightAveraging``, one that loads the best
        checkpoint) may change them in its own ``on_train_end``.  The probe is labelled with
        the epoch of the last training step: ``current_epoch`` has moved past it by now, to an
        epoch that never ran.
        """
        if not trainer.is_global_zero:
            return
        if self._due is not None and self._due[0] == "start":
            self._take_due(trainer, pl_module)  # no batch ran
        step, self._due = _log_step(trainer), None
        if (
            self._frame_step == step
            and self._frame is not None
            and _same(self._weights, _fingerprint(pl_module))
        ):
            self._final = (self._frame, True)  # the last probe saw (and logged) these weights
        else:
            self._final = (self._measure(trainer, pl_module, self._epoch, step), False)
        self._end_weights = _fingerprint(pl_module, on_cpu=True)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        """A fit that fails: the probe that was due (an epoch's, whose next epoch never
        started; the end's, not yet logged) is taken and logged with the weights as they are;
        not on Ctrl-C or SIGTERM, which ask to stop now.  A probe that fails here is warned
        of, so that the fit's own exception is the one raised."""
        final, self._final = self._final, None
        stop = isinstance(exception, KeyboardInterrupt)
        if stop or type(exception).__name__ == "SIGTERMException" or not trainer.is_global_zero:
            self._due = None
            return
        try:
            self._take_due(trainer, pl_module)
            if final is not None:
                self._log_end(trainer, pl_module, *final)
        except Exception as failed:  # noqa: BLE001 - the fit's exception goes on
            warnings.warn(
                f"EnergyMonitor: the probe due when the fit failed was not taken "
                f"({type(failed).__name__}: {failed})",
                stacklevel=2,
            )

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Log and judge the weights the fit returns.

        Lightning runs the callbacks' ``on_train_end`` in their order and then the
        LightningModule's: a callback listed after the monitor (``EMAWeightAveraging``
        returned by ``configure_callbacks``, which Lightning appends to the list) or the
        module's own hook may still swap in other weights (the verdict judged the raw weights
        where the fit returned their average; an audit).  Those are probed here, where the
        strategy may have moved the module to the CPU.
        """
        if not trainer.is_global_zero or self._final is None:
            return
        (frame, logged), self._final = self._final, None
        if not _same(self._end_weights, _fingerprint(pl_module, on_cpu=True)):
            frame = self._measure(trainer, pl_module, self._epoch, _log_step(trainer))
            logged = False
        self._log_end(trainer, pl_module, frame, logged)

    def _log_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, frame: pd.DataFrame, logged: bool
    ) -> None:
        """Log the end's table (unless ``logged``: the last probe saw these weights and its
        values are in the logs) and its verdict, at the last training step."""
        step = _log_step(trainer)
        title = f"{type(pl_module).__name__} after {step} steps"
        self._log(trainer, frame, self._epoch, step, title, values=not logged)
