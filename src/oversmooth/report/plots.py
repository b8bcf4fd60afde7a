"""The one place that draws figures.

:func:`figure` makes a matplotlib ``Figure`` (never pyplot); the plot functions take an
``Axes``, draw and return it.  Saving and releasing figures is the report builder's job
(:class:`oversmooth.report.document.Document`).
Curves with zero, negative or non-finite values (a graph without edges, NaN
features) are drawn where they can be: a log axis with nothing positive and
finite on it stays linear and says why, instead of failing the whole report.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any, Literal
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def figure(
    width: float = 6.0,
    height: float = 4.2,
    layout: Literal["tight", "constrained"] = "tight",
) -> Figure:
    """A figure of ``width`` x ``height`` inches (not registered with pyplot, so it is freed
    when dropped), with tight layout unless ``layout`` says otherwise.

    Tight layout fits the axes, their labels and colorbars to the figure from one
    measurement of the drawn text; constrained layout measures it twice over (on the
    default report's five figures it cost about half of their drawing time), but only it
    makes room for a figure legend placed ``outside`` the axes.

    The tight layout measures the figure once: matplotlib's default engine (``rect=(0, 0, 1,
    1)``) measures every axes twice, the second time to fit the margins of the first into
    that rectangle, which for the whole figure gives the same subplot parameters.  Writing
    the default analysis report took 0.92 s instead of 1.01 s (median of 9, interleaved in
    one process), into PNG files identical byte for byte."""
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import TightLayoutEngine

    # rect=None (typed as a tuple, accepted by the engine: its set() keeps None): the figure
    # itself, measured once; tests/report/test_plots.py checks the parameters against the
    # default engine's
    engine = TightLayoutEngine(rect=None) if layout == "tight" else layout  # type: ignore[arg-type]
    return Figure(figsize=(width, height), layout=engine)


EMPTY_LOG = "nothing to draw on a log axis:\nevery value is zero, negative or not finite"


def model_color(name: str) -> str | None:
    """A fixed colour per registered model (its place in the model registry), so one model
    has the same colour in every figure of a report; ``None`` (matplotlib's cycle) for other
    labels such as ``seed 0``."""
    from oversmooth.registry import MODELS

    names = list(MODELS)
    return f"C{names.index(name) % 10}" if name in names else None


#: A log axis spanning more decades than this draws no minor ticks: unlabelled, they merge
#: into a grey comb there, and creating and measuring a hundred of them was a third of the
#: time a report took to draw its figures (a Post-LN energy spans 13 decades).
MINOR_TICK_DECADES = 6.0


_SUPERSCRIPT = str.maketrans(
    "-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079"
)
_MATHTEXT_POWER = re.compile(
    r"\$\\mathdefault\{(?:(?P<mantissa>[0-9.]+)\\times\s*)?(?P<base>[0-9.]+)"
    r"\^\{(?P<exponent>-?[0-9]+)\}\}\$"
)
_MATHTEXT_NUMBER = re.compile(r"\$\\mathdefault\{(?P<number>[0-9.]+)\}\$")


def plain_label(label: str) -> str:
    """A log axis's tick label as matplotlib writes it in mathtext (``$\\mathdefault{10^{-12}}$``,
    ``$\\mathdefault{2\\times10^{-3}}$``) as plain text with Unicode superscripts (``10⁻¹²``,
    ``2×10⁻³``); any other label unchanged.

    Plain text is measured and drawn without mathtext's parser and layout: writing the
    default analysis report (five figures) took 0.95 s instead of 1.17 s (median of 7,
    interleaved in one process)."""
    power = _MATHTEXT_POWER.fullmatch(label)
    if power is not None:
        text = power["base"] + power["exponent"].translate(_SUPERSCRIPT)
        return f"{power['mantissa']}\u00d7{text}" if power["mantissa"] else text
    number = _MATHTEXT_NUMBER.fullmatch(label)
    return number["number"] if number is not None else label


@functools.cache
def _plain_log_formatter_class() -> Any:
    """matplotlib's default log-axis formatter (the one a log scale sets for its major and its
    minor ticks) with :func:`plain_label` labels (the class, made once)."""
    from matplotlib.ticker import LogFormatterSciNotation

    class PlainLogFormatter(LogFormatterSciNotation):
        def __call__(self, x: float, pos: int | None = None) -> str:
            return plain_label(super().__call__(x, pos))

    return PlainLogFormatter


def _plain_log_labels(axis: Any, base: float) -> None:
    """Label the major and minor ticks of ``axis``, on a log scale of ``base``, in plain
    text."""
    formatter = _plain_log_formatter_class()
    axis.set_major_formatter(formatter(base))
    axis.set_minor_formatter(formatter(base))


def log_x(ax: Axes, base: float = 10) -> None:
    """A log x axis of ``base`` labelled in plain text (:func:`plain_label`), as :func:`log_y`
    labels its y axis."""
    ax.set_xscale("log", base=base)
    _plain_log_labels(ax.xaxis, base)


def log_y(ax: Axes) -> None:
    """A log y axis labelled in plain text (:func:`plain_label`) whose minor ticks are dropped
    over more than :data:`MINOR_TICK_DECADES` decades (decided when the figure is drawn, from
    the limits it then has)."""
    import math

    from matplotlib.ticker import LogLocator

    class _SparseMinor(LogLocator):
        def tick_values(self, vmin: float, vmax: float) -> Any:
            if vmin > 0 and vmax > 0 and abs(math.log10(vmax / vmin)) > MINOR_TICK_DECADES:
                return np.array([])
            return super().tick_values(vmin, vmax)

    ax.set_yscale("log")
    ax.yaxis.set_minor_locator(_SparseMinor(base=10.0, subs="auto"))
    _plain_log_labels(ax.yaxis, 10.0)


def _positive(values: ArrayLike) -> np.ndarray:
    v = np.asarray(values, dtype=float).ravel()
    return v[np.isfinite(v) & (v > 0)]


def _log_scales(
    ax: Axes, xs: ArrayLike, ys: ArrayLike, x_log: bool = True, y_log: bool = True, base: float = 10
) -> bool:
    """Log scales when every log axis has something positive and finite to show; else a note.

    Returns whether the scales were set.
    """
    fine = (not x_log or len(_positive(xs))) and (not y_log or len(_positive(ys)))
    if not fine:
        ax.text(
            0.5,
            0.5,
            EMPTY_LOG,
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=8,
            color="grey",
        )
        return False
    if x_log:
        log_x(ax, base)
    if y_log:
        log_y(ax)
    return True


#: a log axis of layers that ends at or below this layer labels every whole layer
SHORT_AXIS_LAYERS = 12


def _layer_ticks(ax: Axes) -> None:
    """A log axis of layers labelled with plain integers at 1, 2 and 5 times the powers of 10
    (unlabelled ticks at the other integers): matplotlib's own labels, ``2×10^0 3×10^0 ...``,
    run into each other on a curve from layer 2 to 13."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_locator(LogLocator(base=10, subs=(3.0, 4.0, 6.0, 7.0, 8.0, 9.0)))

    def short(value: float, _: object) -> str:
        # a short stack labels every layer: a depth-4 axis read "1" and "2" only (an audit)
        return f"{value:g}" if ax.get_xlim()[1] <= SHORT_AXIS_LAYERS else ""

    ax.xaxis.set_minor_formatter(FuncFormatter(short))


def _integer_ticks(*axes: Any) -> None:
    """Ticks only at whole numbers on these axes (layers, epochs): no ``0.25`` epoch or
    ``1.5`` layer on a short run."""
    from matplotlib.ticker import MaxNLocator

    for axis in axes:
        axis.set_major_locator(MaxNLocator(integer=True))


def verdict_fit(record: Mapping | None) -> tuple[np.ndarray, np.ndarray] | None:
    """The verdict's fitted law (layers, energies) inside a fits.json record, or None."""
    found = (record or {}).get("evidence") or {}
    curve = (found.get("evidence") or {}).get("fit_curve") if isinstance(found, Mapping) else None
    if not isinstance(curve, Mapping) or not curve.get("layer"):
        return None
    k = np.asarray(curve["layer"], dtype=float)
    e = np.asarray(curve["energy"], dtype=float)
    ok = (k > 0) & np.isfinite(e) & (e > 0)
    return (k[ok], e[ok]) if ok.any() else None


def local_halving(ax: Axes, curves: Iterable[Mapping]) -> Axes:
    """Local halving length (layers per factor 2 of decay) along depth, with its 95 % band, on
    a log axis.

    Each curve: ``{"label", "layer", "halving_length", "low", "high"}``
    (:func:`oversmooth.verdict.local_halving_length`); ``None`` marks a layer where the curve
    (or the band's end) does not decay.  Lengths beyond ``4 x`` the deepest layer -- a curve
    that has stopped decaying there -- are drawn at that cap, the top of the axes.
    """
    cap = 4.0 * max((max(c["layer"]) for c in curves if len(c["layer"])), default=1)
    for curve in curves:
        k = np.asarray(curve["layer"], dtype=float)

        def arr(values: Sequence, missing: float) -> np.ndarray:
            out = np.array([missing if v is None else v for v in values], dtype=float)
            return np.minimum(out, cap)

        mid = arr(curve["halving_length"], np.nan)
        (line,) = ax.plot(
            k, mid, lw=1.3, label=curve["label"], color=model_color(str(curve["label"]))
        )
        ax.fill_between(
            k,
            arr(curve["low"], cap),
            arr(curve["high"], cap),
            color=line.get_color(),
            alpha=0.18,
            lw=0,
        )
    log_y(ax)
    low, _ = ax.get_ylim()
    ax.set_ylim(max(low, 0.1), cap)
    ax.set_xlabel("layer $k$")
    ax.set_ylabel("local halving length (layers)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return ax


def energy_curves(
    ax: Axes,
    curves: Iterable[Mapping],
    metric_label: str = "Laplacian energy $E(X^k)$",
    references: Sequence[tuple[str, ArrayLike, ArrayLike]] | None = None,
) -> Axes:
    """Log-log energy against layer (the seed paper's Figure 1), with fitted laws.

    Each curve: ``{"label", "layers", "values", "fit" (optional fits.json record), "floor"
    (optional: the estimated float floor, one value per layer, or one value for all)}``.
    Layer 0 cannot sit on a log axis and is left out; non-positive values too.
    ``references``: theory lines ``(label, layers, values)``, drawn dashed in grey; they do
    not set the axis range.
    """
    xs, ys, floors = [], [], []  # the points drawn, and the float floors to draw in range
    for curve in curves:
        x, y, floor = _energy_curve(ax, curve)
        xs.append(x)
        ys.append(y)
        if floor is not None:
            floors.append(floor)
    _reference_lines(ax, references or ())
    data = np.concatenate(ys) if ys else np.array([])
    if _log_scales(ax, np.concatenate(xs) if xs else [], data):
        _layer_ticks(ax)
        # the y range follows the data alone; the float floor is drawn when part of it falls
        # inside that range, clipped to the axis (a floor far below would squash the curves)
        low, high = _positive(data).min() / 3, _positive(data).max() * 3
        _float_floors(ax, floors, low, high)
        ax.set_ylim(low, high)
    ax.set_xlabel("layer $k$")
    ax.set_ylabel(metric_label)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return ax


# a curve's float floor as energy_curves draws it: (layers, floor, colour, label)
_Floor = tuple[np.ndarray, np.ndarray, Any, Any]


def _energy_curve(ax: Axes, curve: Mapping) -> tuple[np.ndarray, np.ndarray, _Floor | None]:
    """Draw one curve of :func:`energy_curves` (its positive layers and values) and its
    verdict's fitted law; returns the points drawn and, when the curve has one, its float
    floor as ``(layers, floor, colour, label)`` for the caller to draw within the axis range."""
    layers = np.asarray(curve["layers"], dtype=float)
    values = np.asarray(curve["values"], dtype=float)
    keep = (layers > 0) & np.isfinite(values) & (values > 0)
    (line,) = ax.plot(
        layers[keep],
        values[keep],
        lw=1.2,
        label=curve["label"],
        color=curve.get("color") or model_color(str(curve["label"])),
        **_lone_points(int(keep.sum())),
    )
    law = verdict_fit(curve.get("fit"))
    if law is not None and keep.any():
        ax.plot(
            law[0],
            law[1],
            "--",
            color=line.get_color(),
            lw=1,
            alpha=0.85,
            label="law-family fit",
        )
    floor = curve.get("floor")
    if floor is None:
        return layers[keep], values[keep], None
    floor = np.broadcast_to(np.asarray(floor, dtype=float), layers.shape)
    return layers[keep], values[keep], (layers, floor, line.get_color(), curve["label"])


def _float_floors(ax: Axes, floors: Sequence[_Floor], low: float, high: float) -> None:
    """Each curve's float floor, dash-dotted in its colour, where part of it lies within
    ``[low, high]`` (the axis clips the rest)."""
    for layers, floor, color, label in floors:
        ok = (layers > 0) & np.isfinite(floor) & (floor > 0)
        if (ok & (floor >= low) & (floor <= high)).any():
            ax.plot(
                layers[ok],
                floor[ok],
                color=color,
                lw=0.8,
                ls="-.",
                alpha=0.7,
                label=f"float floor ({label})",
            )


def _reference_lines(ax: Axes, references: Sequence[tuple[str, ArrayLike, ArrayLike]]) -> None:
    """Theory lines ``(label, layers, values)``, dashed in grey, each with its own dashes."""
    dashes = [(0, (5, 3)), (0, (1.5, 1.5)), (0, (6, 2, 1, 2))]
    for i, (label, ref_x, ref_y) in enumerate(references):
        rx, ry = np.asarray(ref_x, dtype=float), np.asarray(ref_y, dtype=float)
        ok = (rx > 0) & np.isfinite(ry) & (ry > 0)
        ax.plot(rx[ok], ry[ok], ls=dashes[i % len(dashes)], color="0.3", lw=1.2, label=label)


def _lone_points(count: int) -> dict[str, Any]:
    """Markers for a curve of one point, which a line alone does not draw (a depth-1 run's
    figures were empty: an audit)."""
    return {"marker": "o", "ms": 4} if count == 1 else {}


def _curve_line(ax: Axes, curve: Mapping, layers: np.ndarray, values: np.ndarray) -> None:
    """One curve of a per-layer figure, in its colour (its model's, or the cycle's), width and
    opacity (``lw``, ``alpha``: a seed drawn light under the seeds' median)."""
    ax.plot(
        layers,
        values,
        lw=curve.get("lw", 1),
        alpha=curve.get("alpha", 1.0),
        label=curve["label"],
        color=curve.get("color") or model_color(str(curve["label"])),
        **_lone_points(len(layers)),
    )


def relative_energy_curves(ax: Axes, curves: Iterable[Mapping]) -> Axes:
    """``|R(X^k)|`` on log-log axes (curse of depth: it decays towards 0)."""
    xs, ys = [], []
    for curve in curves:
        layers = np.asarray(curve["layers"], dtype=float)
        values = np.abs(np.asarray(curve["values"], dtype=float))
        keep = (layers > 0) & np.isfinite(values) & (values > 0)
        xs.append(layers[keep])
        ys.append(values[keep])
        _curve_line(ax, curve, layers[keep], values[keep])
    if _log_scales(ax, np.concatenate(xs) if xs else [], np.concatenate(ys) if ys else []):
        _layer_ticks(ax)
    ax.set_xlabel("layer $k$")
    ax.set_ylabel(r"$|R(X^k)| = |E(X^k) - E(X^{k-1})| / E(X^{k-1})$")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7)
    return ax


def cosine_curves(ax: Axes, curves: Iterable[Mapping]) -> Axes:
    """Adjacent-layer cosine similarity ``sim(X^{k-1}, X^k)``."""
    xs = []
    for curve in curves:
        layers = np.asarray(curve["layers"], dtype=float)
        values = np.asarray(curve["values"], dtype=float)
        keep = (layers > 0) & np.isfinite(values)
        xs.append(layers[keep])
        _curve_line(ax, curve, layers[keep], values[keep])
    if _log_scales(ax, np.concatenate(xs) if xs else [], [], y_log=False):
        _layer_ticks(ax)
    ax.set_xlabel("layer $k$")
    ax.set_ylabel(r"$\mathrm{sim}(X^{k-1}, X^k)$")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return ax


def similarity_heatmap(
    ax: Axes, matrix: np.ndarray, layers: Iterable[int] | None = None, title: str | None = None
) -> Axes:
    """The ``L x L`` inter-layer cosine similarity (the seed paper's Figure 2), one image with
    a cell per pair of layers (nearest-neighbour, so no cell is blended with its neighbours;
    at 257 layers this also halves the drawing and PNG-encoding time of the antialiased
    resampling, and the file size)."""
    matrix = np.asarray(matrix, dtype=float)
    layers = list(layers) if layers is not None else list(range(matrix.shape[0]))
    finite = matrix[np.isfinite(matrix)]
    low = min(0.0, float(finite.min())) if len(finite) else 0.0  # an all-NaN matrix draws blank
    image = ax.imshow(
        matrix,
        origin="lower",
        cmap="viridis",
        vmin=low,
        vmax=1.0,
        extent=(layers[0] - 0.5, layers[-1] + 0.5, layers[0] - 0.5, layers[-1] + 0.5),
        aspect="equal",
        interpolation="nearest",
    )
    ax.figure.colorbar(image, ax=ax, label=r"$\mathrm{sim}(X^s, X^t)$", fraction=0.046, pad=0.04)
    _integer_ticks(ax.xaxis, ax.yaxis)
    ax.set_xlabel("layer $t$")
    ax.set_ylabel("layer $s$")
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def pruning_bars(
    ax: Axes,
    layers: Iterable[int],
    values: Iterable[float],
    ylabel: str,
    log: bool = True,
    interval: tuple[Iterable[float], Iterable[float]] | None = None,
) -> Axes:
    """Sensitivity of each pruned layer (the seed paper's Table 8 as a chart); ``interval``:
    each bar's low and high ends (a linear axis), drawn as whiskers."""
    labels = [str(k) for k in layers]
    values = np.asarray(list(values), dtype=float)
    errors = None
    if interval is not None and not log:
        low, high = (np.asarray(list(v), dtype=float) for v in interval)
        errors = np.vstack([np.maximum(values - low, 0.0), np.maximum(high - values, 0.0)])
    ax.bar(
        labels,
        np.abs(values) if log else values,
        color="tab:blue",
        yerr=errors,
        capsize=3 if errors is not None else 0,
        ecolor="0.25",
    )
    shown = np.abs(values[np.isfinite(values)])
    # a log axis only when the bars span more than a decade (else its ticks are unreadable)
    if log and len(shown) and np.all(shown > 0) and shown.max() > 10 * shown.min():
        log_y(ax)
    ax.set_xlabel("pruned layer")
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def _depth_axes(ax: Axes, title: str, depths: ArrayLike, values: ArrayLike) -> Axes:
    _log_scales(ax, depths, values, base=2)
    ax.set_xlabel("depth $L$")
    ax.set_ylabel("final-layer Laplacian energy")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return ax


def final_energy_vs_depth(ax: Axes, summary: pd.DataFrame, dataset: str) -> Axes:
    """Final-layer energy (mean over seeds, min-max band) against depth, one line per model."""
    part = summary[summary["dataset"] == dataset]
    for model, rows in part.groupby("model", sort=False):
        stats = rows.groupby("depth")["final_energy"].agg(["mean", "min", "max"])
        depths = stats.index.to_numpy(dtype=float)
        color = model_color(str(model))
        (line,) = ax.plot(depths, stats["mean"], marker="o", lw=1.2, label=model, color=color)
        ax.fill_between(depths, stats["min"], stats["max"], alpha=0.2, color=line.get_color())
    return _depth_axes(ax, dataset, part["depth"], part["final_energy"])


def energy_vs_depth_against_reference(
    ax: Axes, table: pd.DataFrame, models: Iterable[str], title: str
) -> Axes:
    """Our mean final energy (solid) beside published values (dashed), per model.

    ``table`` has columns ``model``, ``depth``, ``ours_mean`` and ``paper``.
    """
    models = list(models)
    for model in models:
        part = table[table["model"] == model]
        (line,) = ax.plot(
            part["depth"],
            part["ours_mean"],
            "o-",
            label=f"{model} (ours)",
            color=model_color(model),
        )
        ax.plot(
            part["depth"], part["paper"], "x--", color=line.get_color(), label=f"{model} (paper)"
        )
    shown = table[table["model"].isin(list(models))]
    return _depth_axes(ax, title, shown["depth"], np.r_[shown["ours_mean"], shown["paper"]])


def accuracy_drop_curves(
    ax: Axes, parts: Mapping[str, pd.DataFrame], layer: str = "layer", drop: str = "drop"
) -> Axes:
    """Accuracy drop (points) against the pruned layer, one line per model (Table 8)."""
    for name, part in parts.items():
        ax.plot(part[layer], part[drop], "o-", label=name)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("pruned layer")
    ax.set_ylabel("test accuracy drop (points)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def training_history(
    ax_loss: Axes, ax_acc: Axes, history: Iterable[Mapping], best_epoch: int
) -> tuple[Axes, Axes]:
    """Train and validation loss (log) and train/val/test accuracy (%) against the epoch."""
    rows = list(history)
    epochs = [r["epoch"] for r in rows]
    ax_loss.plot(epochs, [r["loss"] for r in rows], label="train loss")
    ax_loss.plot(epochs, [r["val_loss"] for r in rows], label="validation loss")
    losses = _positive(np.asarray([[r["loss"], r["val_loss"]] for r in rows], dtype=float))
    if len(losses) and losses.max() > 10 * losses.min():  # log only over more than a decade
        log_y(ax_loss)
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("cross-entropy")
    ax_loss.legend(fontsize=8)
    for split in ("train", "val", "test"):
        ax_acc.plot(epochs, [100 * r[f"{split}_acc"] for r in rows], label=split)
    ax_acc.axvline(
        best_epoch, color="grey", ls="--", lw=0.8, label=f"best val (epoch {best_epoch})"
    )
    _integer_ticks(ax_loss.xaxis, ax_acc.xaxis)
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("accuracy (%)")
    ax_acc.legend(fontsize=8)
    for ax in (ax_loss, ax_acc):
        ax.grid(True, alpha=0.3)
    return ax_loss, ax_acc


def cost_curves(
    ax_time: Axes,
    ax_memory: Axes,
    series: Iterable[tuple[str | None, Iterable[Mapping]]],
    x: str,
    xlabel: str,
    base: float = 10,
) -> tuple[Axes, Axes]:
    """Benchmark scaling: seconds and extra peak memory (MiB) against ``x`` (log-log), one line
    per ``(label, rows)``; rows with an ``error`` are left out."""
    labelled = False
    for label, rows in series:
        good = [r for r in rows if "error" not in r]
        if not good:
            continue
        xs = [r[x] for r in good]
        ax_time.plot(xs, [r["seconds"] for r in good], "o-", label=label)
        ax_memory.plot(xs, [max(r["peak_mib"], 0.1) for r in good], "o-", label=label)
        labelled |= label is not None
    for ax, ylabel in (
        (ax_time, "seconds per probed forward"),
        (ax_memory, "extra peak memory (MiB)"),
    ):
        log_x(ax, base)
        log_y(ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if labelled:
            ax.legend(fontsize=8)
    return ax_time, ax_memory


def energy_dynamics_heatmap(
    ax: Axes, epochs: ArrayLike, layers: ArrayLike, energies: ArrayLike
) -> Axes:
    """log10 of the energy per layer (rows) and recorded epoch (columns) during training.

    ``energies`` is ``[len(layers), len(epochs)]``; zero, negative or non-finite entries are
    left blank.
    """
    epochs = np.asarray(epochs, dtype=float)
    layers = np.asarray(layers, dtype=float)
    values = np.asarray(energies, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(np.isfinite(values) & (values > 0), np.log10(values), np.nan)
    step = float(np.median(np.diff(epochs))) if len(epochs) > 1 else 1.0
    image = ax.imshow(
        logs,
        origin="lower",
        aspect="auto",
        cmap="viridis",
        interpolation="nearest",
        extent=(
            epochs[0] - step / 2,
            epochs[-1] + step / 2,
            layers[0] - 0.5,
            layers[-1] + 0.5,
        ),
    )
    ax.figure.colorbar(image, ax=ax, label=r"$\log_{10} E(X^k)$", fraction=0.046, pad=0.04)
    _integer_ticks(ax.xaxis, ax.yaxis)
    # ticks only where columns were recorded: a column's half-width before the first epoch
    # put a tick at -1, an epoch that never ran (an audit)
    low, high = epochs[0], epochs[-1]
    ax.set_xticks([t for t in ax.get_xticks() if low <= t <= high] or [low])
    ax.set_xlim(low - step / 2, high + step / 2)
    ax.set_xlabel("epoch")
    ax.set_ylabel("layer $k$")
    return ax


def energy_against_epoch(
    ax: Axes, epochs: ArrayLike, values: ArrayLike, label: str = "final layer"
) -> Axes:
    """An energy (e.g. the final layer's) against the epoch, log y when it is all positive."""
    epochs = np.asarray(epochs, dtype=float)
    values = np.asarray(values, dtype=float)
    ax.plot(epochs, values, "o-", ms=3, lw=1.2, label=label)
    _log_scales(ax, epochs, values, x_log=False)
    _integer_ticks(ax.xaxis)
    ax.set_xlabel("epoch")
    ax.set_ylabel("Laplacian energy $E(X^L)$")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def atlas_curves(ax: Axes, curves: Sequence[Mapping], title: str | None = None) -> Axes:
    """Many architectures' energy curves overlaid, log-log (the atlas figure).

    Each curve: ``{"label", "layers", "values"}``; curves are told apart by colour (ten) and
    then line style, and the legend sits outside the axes, right.  Layer 0 and non-positive or
    non-finite values are left out."""
    styles = ("-", "--", ":", "-.")
    xs, ys = [], []
    for i, curve in enumerate(curves):
        layers = np.asarray(curve["layers"], dtype=float)
        values = np.asarray(curve["values"], dtype=float)
        keep = (layers > 0) & np.isfinite(values) & (values > 0)
        xs.append(layers[keep])
        ys.append(values[keep])
        ax.plot(
            layers[keep],
            values[keep],
            lw=1.3,
            color=f"C{i % 10}",
            ls=styles[(i // 10) % len(styles)],
            label=curve["label"],
        )
    _log_scales(ax, np.concatenate(xs) if xs else [], np.concatenate(ys) if ys else [])
    ax.set_xlabel("layer $k$")
    ax.set_ylabel("Laplacian energy $E(X^k)$")
    ax.grid(True, which="major", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    return ax
