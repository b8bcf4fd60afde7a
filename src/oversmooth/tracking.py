"""Send a probe's per-layer table to an experiment tracker: TensorBoard, Weights & Biases, a
Lightning logger, or any function that takes a dict of scalars.

This module needs none of them (it only calls what it is handed), so plain training loops use
it without Lightning, and :class:`oversmooth.lightning.EnergyMonitor` logs through it too: one
naming scheme for both.

Names (``prefix`` defaults to ``"energy"``):

- ``{prefix}/{metric}/layer_{k}``: the metric at layer ``k``, zero-padded to at least two
  digits and to the width of the deepest layer (``layer_03``; ``layer_003`` from 100 layers on)
  so that a tracker's alphabetical order is the depth order;
- ``{prefix}/{metric}/final``: the metric at the last layer, a name that does not depend on
  the depth (compare runs of different depths on one chart);
- ``{prefix}/verdict_code``: the index of a verdict's label in
  :data:`oversmooth.verdict.LABELS`, and, where the tracker takes text, ``{prefix}/verdict``:
  the label and its one-line summary (:func:`oversmooth.report.prose.verdict_text`).

Metrics undefined at the first layer (``relative_energy``, ``mean_cosine_similarity``,
``angular_distance``, ``relative_update``, ``head_energy_*``: NaN there by definition) are not
logged at that layer; every other NaN or infinity is logged as it is (it means something).
Values are sent as float64; a tracker may keep less (TensorBoard stores float32, where an
energy below about 1e-38 reads 0: docs/lightning.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from oversmooth.report.prose import verdict_text
from oversmooth.verdict import LABELS

if TYPE_CHECKING:
    import pandas as pd

    from oversmooth.verdict import Verdict

__all__ = ["frame_scalars", "log_frame", "log_verdict", "VERDICT_CODES"]

#: a verdict label's number, for trackers that only take numbers (its index in ``LABELS``)
VERDICT_CODES = {label: code for code, label in enumerate(LABELS)}

# columns of a per-layer table that say where a row is, not what was measured
_ID_COLUMNS = ("layer", "step", "graph", "seed", "epoch", "global_step")
# NaN at the first layer of every step, by definition
_UNDEFINED_AT_FIRST = (
    "relative_energy",
    "mean_cosine_similarity",
    "angular_distance",
    "relative_update",
)


def _metric_columns(frame: pd.DataFrame, metrics: Iterable[str] | None) -> list[str]:
    if metrics is None:
        return [
            c
            for c in frame.columns
            if c not in _ID_COLUMNS
            and frame[c].dtype.kind in "fiu"  # numbers; not the flags (bool) or text
        ]
    # one name is one metric (a string iterated read "metrics: l, a, p, l, ... not in the
    # frame", an audit)
    names = [metrics] if isinstance(metrics, str) else list(metrics)
    missing = [m for m in names if m not in frame.columns]
    if missing:
        raise ValueError(
            f"metrics: {', '.join(missing)} not in the frame (its columns: "
            f"{', '.join(map(str, frame.columns))})"
        )
    return names


def _one_step(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the last recorded step, checked to be one curve (one graph, one seed)."""
    for column, what in (("graph", "graph"), ("seed", "seed")):
        if column in frame.columns and frame[column].nunique() > 1:
            raise ValueError(
                f"frame: holds several values of {column!r} (one curve per {what}); log one of "
                f"them, e.g. frame[frame[{column!r}] == 0]"
            )
    if "step" in frame.columns and frame["step"].nunique() > 1:
        frame = frame[frame["step"] == frame["step"].max()]
    # each name took the value of whichever row sorted last: a curve of layers 1-2 of one
    # epoch and 3-4 of the next (an audit)
    refuse_repeated_layers(frame)
    return frame.sort_values("layer")


def refuse_repeated_layers(frame: pd.DataFrame) -> None:
    """Refuse a frame holding a layer more than once (per seed, where it has seeds): rows of
    several passes put together, such as an EnergyMonitor's frames of several epochs (each is
    step 0).  :func:`frame_scalars`, :func:`oversmooth.plot` and
    :func:`oversmooth.write_report` refuse it alike; plot drew the relative change between the
    same layer at two epochs, |R| 5.16 where the last frame's was 0.91 (an audit)."""
    keys = ["seed", "layer"] if "seed" in frame else ["layer"]
    twice = frame.duplicated(keys)
    if not twice.any():
        return
    extra = [c for c in ("global_step", "epoch") if c in frame]
    pick = f"select one with its '{extra[0]}' column, " if extra else ""
    raise ValueError(
        f"frame: holds layer {int(frame.loc[twice, 'layer'].iloc[0])} "
        f"more than once ({'per seed' if 'seed' in frame else 'with no seed column'}): "
        f"rows of several passes; {pick}e.g. one of an EnergyMonitor's frames "
        "(monitor.frames[global_step]), or tell the passes apart by 'seed' or 'step'"
    )


def frame_scalars(
    frame: pd.DataFrame,
    metrics: Iterable[str] | None = None,
    *,
    prefix: str = "energy",
    per_layer: bool = True,
    final: bool = True,
) -> dict[str, float]:
    """The scalars :func:`log_frame` sends, by name (names in the module docstring).

    Args:
        frame: a per-layer table (``Probe.to_frame()``): ``layer`` and one column per metric.
            With several probe ``step`` values the last step is used; several graphs
            (``reduce="none"``) or seeds, and a layer held twice in one step (frames of
            several passes put together), are refused (select one).
        metrics: the columns to send (default: every numeric column but ``layer``, ``step``,
            ``graph``, ``seed``, ``epoch`` and ``global_step``).
        prefix: first part of every name.
        per_layer: send ``{prefix}/{metric}/layer_{k}`` for every layer.
        final: send ``{prefix}/{metric}/final``, the value at the last layer: not sent when
            the frame says that layer was not recorded (``attrs["missing_layers"]``, e.g.
            ``capture="residual"`` with a head after the last block), where the last row is
            another layer's.
    """
    if "layer" not in frame.columns:
        raise ValueError("frame: expected a per-layer table with a 'layer' column")
    columns = _metric_columns(frame, metrics)
    rows = _one_step(frame)
    if rows.empty:
        return {}
    layers = [int(k) for k in rows["layer"]]
    missing = [int(k) for k in frame.attrs.get("missing_layers") or []]
    final = final and not (missing and max(missing) > layers[-1])
    width = max(2, len(str(max(layers))))
    out: dict[str, float] = {}
    for metric in columns:
        values = [float(v) for v in rows[metric]]
        skip_first = metric in _UNDEFINED_AT_FIRST or metric.startswith("head_energy_")
        if per_layer:
            for i, (k, value) in enumerate(zip(layers, values, strict=True)):
                if not (skip_first and i == 0 and math.isnan(value)):
                    out[f"{prefix}/{metric}/layer_{k:0{width}d}"] = value
        if final:
            out[f"{prefix}/{metric}/final"] = values[-1]
    return out


def _send(sink: object, scalars: dict[str, float], step: int) -> None:
    """``scalars`` to a SummaryWriter, a Lightning logger or a ``fn(dict, step=step)``."""
    add_scalar = getattr(sink, "add_scalar", None)
    log_metrics = getattr(sink, "log_metrics", None)
    if callable(add_scalar):  # torch.utils.tensorboard / tensorboardX SummaryWriter
        for name, value in scalars.items():
            add_scalar(name, value, step)
    elif callable(log_metrics):  # a Lightning logger (CSV, TensorBoard, W&B, MLflow, ...)
        log_metrics(scalars, step=step)
    elif callable(sink):  # wandb.log, mlflow.log_metrics, your own function
        sink(scalars, step=step)
    else:
        raise TypeError(
            "sink: expected a SummaryWriter (add_scalar), a Lightning logger (log_metrics) or "
            f"a function called as fn(scalars, step=step), received {type(sink).__name__}"
        )


def log_frame(
    frame: pd.DataFrame,
    sink: object,
    step: int,
    metrics: Iterable[str] | None = None,
    *,
    prefix: str = "energy",
    per_layer: bool = True,
    final: bool = True,
) -> dict[str, float]:
    """Send the per-layer values of ``frame`` to ``sink`` at ``step``; return what was sent.

    ``sink`` is a ``torch.utils.tensorboard.SummaryWriter`` (one ``add_scalar`` per value), a
    Lightning logger (``log_metrics(scalars, step=step)``) or any function called as
    ``sink(scalars, step=step)``: ``wandb.log``, ``mlflow.log_metrics``, ``history.append``-like
    functions of your own.  The other arguments are those of :func:`frame_scalars`.

    Example (a plain loop)::

        with oversmooth.Probe(model, data) as probe, torch.no_grad():
            model.eval()
            model(data.x, data.edge_index)
        model.train()
        log_frame(probe.to_frame(), writer, step=epoch)   # or wandb.log
    """
    scalars = frame_scalars(frame, metrics, prefix=prefix, per_layer=per_layer, final=final)
    _send(sink, scalars, step)
    return scalars


def _text_writer(sink: object) -> Callable[[str, str, str, int], None] | None:
    """A function ``(name, label, summary, step)`` that logs text to ``sink``, if it takes
    text: a SummaryWriter, Lightning's TensorBoardLogger (its SummaryWriter) or WandbLogger
    (a one-row table)."""
    log_text = getattr(sink, "log_text", None)
    if callable(log_text) and callable(getattr(sink, "log_metrics", None)):  # WandbLogger

        def table(name: str, label: str, summary: str, step: int) -> None:
            log_text(key=name, columns=["label", "summary"], data=[[label, summary]], step=step)

        return table
    if callable(getattr(sink, "log_metrics", None)) and not callable(
        getattr(sink, "add_text", None)
    ):  # another Lightning logger: its experiment may be a SummaryWriter (TensorBoardLogger)
        sink = getattr(sink, "experiment", None)
    add_text = getattr(sink, "add_text", None)
    if not callable(add_text):
        return None

    def text(name: str, label: str, summary: str, step: int) -> None:
        add_text(name, f"{label}: {summary}", step)

    return text


def log_verdict(
    verdict: Verdict,
    sink: object,
    step: int,
    *,
    prefix: str = "energy",
    title: str | None = None,
    epoch: int | None = None,
) -> dict[str, float]:
    """Send a verdict to ``sink`` (as in :func:`log_frame`): its label's number
    ``{prefix}/verdict_code`` (:data:`VERDICT_CODES`) always, and ``{prefix}/verdict`` as text
    (label and summary, :func:`oversmooth.report.prose.verdict_text` prefixed by ``title``)
    where the sink takes text (SummaryWriter, Lightning's TensorBoard and W&B loggers; not the
    CSV logger or a plain function).  ``epoch``, where given, is sent beside the code (as
    Lightning's own ``self.log`` adds it).  Returns the numbers sent."""
    scalars = {f"{prefix}/verdict_code": float(VERDICT_CODES[verdict.label])}
    if epoch is not None:
        scalars["epoch"] = float(epoch)
    _send(sink, scalars, step)
    write_text = _text_writer(sink)
    if write_text is not None:
        write_text(f"{prefix}/verdict", verdict.label, verdict_text(verdict, title), step)
    return scalars
