"""Plots and reports for any model's probe frame, from a notebook or a script.

:func:`plot` draws one figure of the ``oversmooth analyze`` report on an ``Axes``;
:func:`write_report` writes the whole report (verdict banner, fits, figures, per-layer table)
for the frame of any :class:`~oversmooth.probe.Probe` (a PyG ``GCN``, your own model).  Both
draw through :mod:`oversmooth.report.plots` and build reports with
:class:`~oversmooth.report.document.Document`, like the commands.

One rule for several passes and several graphs, in :func:`plot` and :func:`write_report` alike
(and in :func:`oversmooth.verdict`): a frame holding more than one forward pass (``step``
column with several values) or more than one graph (``graph`` column, ``reduce="none"``) is
refused, with the message naming ``step=`` / ``graph=`` and the values to choose from; it is
never silently cut to one pass nor averaged.  A ``step`` column with a single value needs no
``step=``.

The precision of the states (which sets the float floor) is read from the frame:
``frame.attrs["dtype"]``, which :meth:`Probe.to_frame <oversmooth.probe.Probe.to_frame>`
writes.  ``dtype=`` is for frames that do not carry it (e.g. read back from a CSV); one that
contradicts the frame is refused.  With neither, float32 is assumed and the report says so.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Iterable

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

    from oversmooth.probe import Probe

__all__ = ["plot", "write_report"]

KINDS = ("energy", "similarity", "relative")


def _one_pass(frame: Any, step: int | None = None, graph: int | None = None) -> pd.DataFrame:
    """The rows of one forward pass of ``frame`` (a probe's ``to_frame()``) and, for a
    per-graph frame, of one graph; ``step`` and ``graph`` dropped."""
    import pandas as pd

    if not isinstance(frame, pd.DataFrame):
        raise ValueError(
            f"frame: expected a pandas DataFrame from Probe.to_frame(), received "
            f"{type(frame).__name__}; call probe.to_frame() first"
        )
    if "graph" in frame:
        graphs = sorted(int(g) for g in frame["graph"].unique())
        if graph is None:
            raise ValueError(
                f"frame: has a 'graph' column (one row per graph of a batch, reduce='none'); "
                f"pick one graph with graph=<one of {graphs[0]}..{graphs[-1]}> or probe with "
                "reduce='mean' for the batch average"
            )
        if graph not in graphs:
            raise ValueError(
                f"graph={graph}: not in the frame; expected one of {graphs[0]}..{graphs[-1]}"
            )
        frame = frame[frame["graph"] == graph].drop(columns="graph")
    elif graph is not None:
        raise ValueError(
            f"graph={graph}: the frame has no 'graph' column (probed with reduce='mean' or one "
            "graph); leave graph unset"
        )
    if "layer" not in frame:
        raise ValueError(
            f"frame: expected a 'layer' column (one row per layer), received columns "
            f"{list(frame.columns)}; pass probe.to_frame()"
        )
    if len(frame) < 1:  # before the step column's values are read (an IndexError there)
        raise ValueError("frame: no rows; run a forward pass inside the probe first")
    if "step" in frame:
        steps = sorted(int(s) for s in frame["step"].unique())
        if step is None and len(steps) > 1:
            raise ValueError(
                f"frame: holds {len(steps)} forward passes (a 'step' column: "
                f"{_listed(steps)}); pick one with step=<one of them> (the last is "
                f"step={steps[-1]}), e.g. frame[frame.step == {steps[-1]}]"
            )
        chosen = steps[0] if step is None else step
        if chosen not in steps:
            raise ValueError(
                f"step={step}: not in the frame; expected one of the recorded steps "
                f"{_listed(steps)}"
            )
        frame = frame[frame["step"] == chosen].drop(columns="step")
    elif step is not None:
        raise ValueError(
            f"step={step}: the frame has no 'step' column (one forward pass); leave step unset"
        )
    if len(frame) < 1:
        raise ValueError("frame: no rows; run a forward pass inside the probe first")
    from oversmooth.tracking import refuse_repeated_layers

    refuse_repeated_layers(frame)
    keys = ["seed", "layer"] if "seed" in frame else ["layer"]
    return frame.sort_values(keys).reset_index(drop=True)


def _listed(values: list[int]) -> str:
    return f"{values[:5]}{' ...' if len(values) > 5 else ''}"


def _describe(frame: pd.DataFrame, metric: str, hidden: int | None, dtype: str) -> dict:
    """Verdict plus full and tail law fits of ``metric`` (see
    :func:`oversmooth.analysis.describe_frame`)."""
    from oversmooth.analysis import describe_frame

    if metric not in frame:
        raise ValueError(
            f"metric={metric!r}: not a column of the frame; expected one of "
            f"{[c for c in frame.columns if c not in ('layer', 'seed')]}"
        )
    if hidden is None and "feature_norm" not in frame and "float_floor" not in frame:
        raise ValueError(
            "frame: has no 'feature_norm' column to estimate the float floor from; "
            "pass hidden=<width of the layer states> or probe with the default metrics"
        )
    if metric != "laplacian_energy":  # the fits and the verdict read this column
        laplacian_only = ["laplacian_energy", "at_floor", "float_floor", "float64_energy"]
        frame = frame.drop(columns=laplacian_only, errors="ignore")
        frame = frame.rename(columns={metric: "laplacian_energy"})
    return describe_frame(frame, hidden=hidden or 1, dtype=dtype)


def _similarity_of(source: Any, similarity: Any) -> tuple[np.ndarray, list[int]] | None:
    if similarity is None and hasattr(source, "similarity_matrix"):
        try:
            similarity = source.similarity_matrix()
        except (RuntimeError, ValueError):
            return None
        layers = list(source.similarity_layers())
        return np.asarray(similarity.detach().cpu(), dtype=float), layers
    if similarity is None:
        return None
    if hasattr(similarity, "detach"):
        similarity = similarity.detach().cpu()
    matrix = np.asarray(similarity, dtype=float)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(
            f"similarity: expected a square L x L matrix (Probe.similarity_matrix()), "
            f"received shape {matrix.shape}"
        )
    return matrix, list(range(matrix.shape[0]))


def _kept_similarity(
    source: Any, frame: Any, similarity: Any, step: int | None, graph: int | None
) -> tuple[tuple[np.ndarray, list[int]] | None, str | None]:
    """The similarity matrix for the pass and graph reported, and why there is none when a
    Probe's own matrix is another's: a Probe keeps the matrix of its last recorded pass only,
    averaged over the graphs of a batch (``frame``: the source's table, to tell which).  A
    matrix given as ``similarity=`` is the caller's."""
    if similarity is not None or not hasattr(source, "similarity_matrix"):
        return _similarity_of(source, similarity), None
    steps = sorted(int(v) for v in frame["step"].unique()) if "step" in frame else []
    if steps and step is not None and step != steps[-1]:
        return None, (
            f"the probe keeps the similarity matrix of its last recorded pass only (step "
            f"{steps[-1]}), not of step {step}"
        )
    if "graph" in frame:
        return None, (
            "the probe's similarity matrix averages the graphs of the batch; probe one graph "
            "for its own matrix"
        )
    return _similarity_of(source, None), None


def _frame_of(source: Any) -> Any:
    return source.to_frame() if hasattr(source, "to_frame") else source


def _relative(frame: pd.DataFrame, metric: str) -> np.ndarray:
    if metric == "laplacian_energy" and "relative_energy" in frame:
        return frame["relative_energy"].to_numpy(dtype=float)
    values = frame[metric].to_numpy(dtype=float)
    rel = np.full(len(values), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel[1:] = (values[1:] - values[:-1]) / values[:-1]
    return rel


def plot(
    frame: pd.DataFrame | Probe,
    metric: str = "laplacian_energy",
    kind: str = "energy",
    ax: Axes | None = None,
    *,
    similarity: Any = None,
    step: int | None = None,
    graph: int | None = None,
    hidden: int | None = None,
    dtype: str | None = None,
) -> Axes:
    """Draw one figure of the ``analyze`` report for a probe's frame and return its ``Axes``.

    Args:
        frame: ``probe.to_frame()`` (or the :class:`~oversmooth.probe.Probe` itself, whose
            similarity matrix is then used when it kept one).
        metric: the column to draw (``kind="energy"`` and ``"relative"``).
        kind: ``"energy"``: log-log ``metric`` against layer with the laws fitted to it and the
            verdict of :func:`oversmooth.verdict` as title; ``"similarity"``: the ``L x L``
            inter-layer similarity heatmap (``similarity=`` or the probe's); ``"relative"``:
            ``|R(X^k)|`` (the ``relative_energy`` column for the Laplacian energy, else
            computed from ``metric``).
        ax: where to draw; default a new pyplot figure (shown inline in Jupyter).
        similarity: an ``L x L`` matrix (``probe.similarity_matrix()``).
        step: which forward pass of a frame holding several (required there: such a
            frame is refused without it, see the module docstring).
        graph: which graph of a per-graph frame (``reduce="none"``; required there).
        hidden: width of the states, for the float floor when the frame has no
            ``feature_norm``.
        dtype: precision the states were computed in (``"float32"`` or ``"float64"``), for
            frames without ``frame.attrs["dtype"]`` (a Probe's frame has it); float32 when
            neither says.
    """
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: expected one of {', '.join(KINDS)}")
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6.0, 4.2), layout="constrained")
    assert ax is not None
    table = _frame_of(frame)  # a Probe's table copied to the host once
    if kind == "similarity":
        if similarity is None and hasattr(frame, "similarity_matrix"):
            _one_pass(table, step, graph)  # several passes or graphs: refused alike
        return _plot_similarity(ax, frame, table, similarity, step, graph)
    one = _one_pass(table, step, graph)
    if kind == "relative":
        return _plot_relative(ax, one, metric)
    from oversmooth.verdict import frame_dtype

    desc = _describe(one, metric, hidden, frame_dtype(table, dtype)[0])
    return _plot_energy(ax, one, metric, desc)


def _plot_similarity(
    ax: Axes, source: Any, table: Any, similarity: Any, step: int | None, graph: int | None
) -> Axes:
    """``kind="similarity"``: the inter-layer similarity heatmap of ``similarity=`` or of the
    probe ``source`` (refused for a pass or graph whose matrix the probe did not keep)."""
    from oversmooth.report import plots

    found, why = _kept_similarity(source, table, similarity, step, graph)
    if why is not None:
        raise ValueError(f"kind='similarity': {why}")
    if found is None:
        raise ValueError(
            "kind='similarity': no similarity matrix; probe with similarity=True and pass "
            "the Probe, or similarity=probe.similarity_matrix()"
        )
    return plots.similarity_heatmap(ax, found[0], found[1])


def _plot_relative(ax: Axes, one: pd.DataFrame, metric: str) -> Axes:
    """``kind="relative"``: ``|R(X^k)|`` of ``metric`` against the layer, one curve per seed."""
    from oversmooth.report import plots

    if metric not in one:
        raise ValueError(f"metric={metric!r}: not a column of the frame")
    curves = [
        {
            "label": f"seed {s}" if "seed" in one else metric,
            "layers": p["layer"],
            "values": _relative(p, metric),
        }
        for s, p in (one.groupby("seed") if "seed" in one else [(0, one)])
    ]
    return plots.relative_energy_curves(ax, curves)


def _plot_energy(ax: Axes, one: pd.DataFrame, metric: str, desc: dict) -> Axes:
    """``kind="energy"``: ``metric`` against the layer with the laws of ``desc``
    (:func:`_describe`), titled with its verdict.  With several seeds, as the report draws
    them: each seed, and their geometric mean carrying the laws (the verdict pools the seeds'
    logarithms; the arithmetic mean drawn before lay up to 2.7x above the law's curve on three
    seeds of a GCN on Cora: an audit)."""
    from oversmooth.report import plots
    from oversmooth.report.render import seed_curves

    if "seed" in one and one["seed"].nunique() > 1:
        curves, _, _ = seed_curves(one, desc, metric)
    else:
        curves = [{"label": metric, "layers": one["layer"], "values": one[metric], "fit": desc}]
    plots.energy_curves(ax, curves, metric_label=metric.replace("_", " "))
    ax.set_title(f"verdict: {desc['classification']}", fontsize=9)
    return ax


def write_report(
    frame: pd.DataFrame | Probe,
    out: str | os.PathLike,
    title: str = "your model",
    similarity: Any = None,
    *,
    step: int | None = None,
    graph: int | None = None,
    hidden: int | None = None,
    dtype: str | None = None,
    overwrite: bool = False,
    figure_formats: Iterable[str] = ("png",),
    table_formats: Iterable[str] = ("csv",),
) -> Path:
    """Write the ``oversmooth analyze`` report of a probe's frame into the folder ``out``.

    ``out`` gets ``report.md``, a self-contained ``report.html``, the figures, ``metrics.csv``
    (the pass reported) and ``fits.json``, plus ``similarity.csv`` when a similarity matrix
    is given (``similarity=`` or a Probe that kept one).  The folder is written atomically; an
    existing one is replaced only with ``overwrite=True``.  Returns ``out``.

    ``title`` names the model in the verdict line; ``step``, ``graph``, ``hidden`` and ``dtype``
    are as in :func:`plot` (a frame of several passes or graphs is refused without ``step=`` /
    ``graph=``).  ``config.json`` records what was measured: the frame's attributes (the
    model's class and dtype, the capture, the seed when known, how the stream was read, the
    layers that did not run like the others) and the pass, graph and precision reported; those
    layer notes are also written into the report.  ``figure_formats`` adds ``svg`` / ``pdf``
    copies of every figure beside the PNGs, ``table_formats`` (``parquet``, needs pyarrow)
    ``.parquet`` copies of the tables beside the CSVs (:mod:`oversmooth.report.formats`).
    """
    from oversmooth.analysis import fits_record
    from oversmooth.outputs import atomic_folder
    from oversmooth.report.document import Document
    from oversmooth.report.formats import figure_formats as check_figures
    from oversmooth.report.formats import table_formats as check_tables
    from oversmooth.report.prose import with_prose
    from oversmooth.report.render import verdict_section
    from oversmooth.verdict import frame_dtype

    figures, tables = check_figures(figure_formats), check_tables(table_formats)
    if Path(out).is_dir() and not overwrite:  # said in Python's words, not the CLI's --out
        raise FileExistsError(
            f"out: {out} already exists; pass overwrite=True to replace it or choose another folder"
        )
    table = _frame_of(frame)  # a Probe's table copied to the host once
    one = _one_pass(table, step, graph)
    _check_energies(one)
    found_sim, no_sim = _kept_similarity(frame, table, similarity, step, graph)
    dtype, assumed = frame_dtype(table, dtype)
    attrs = dict(getattr(table, "attrs", {}))
    record = with_prose(fits_record(_describe(one, "laplacian_energy", hidden, dtype)), title)
    doc = Document(f"oversmooth.write_report: {title}")
    verdict_section(doc, record, title)
    _measured_text(doc, table, step, graph, dtype, assumed)
    if no_sim is not None:
        doc.text(f"No inter-layer similarity matrix: {no_sim}.")
    _report_sections(doc, one, record, title, found_sim)
    with atomic_folder(out, overwrite, kind="notebook") as tmp:
        config = _config_record(attrs, title, _shown_step(table, step), graph, dtype)
        _write_data(tmp, one, record, config, found_sim, tables)
        doc.write(tmp, figures)
    return Path(out)


def _report_sections(
    doc: Any,
    one: pd.DataFrame,
    record: dict,
    title: str,
    found_sim: tuple[np.ndarray, list[int]] | None,
) -> None:
    """The report's sections after the verdict: the energy with its law, the halving profile,
    the Rayleigh energy, the relative change, the similarity heatmap and the per-layer table."""
    from oversmooth.report import plots
    from oversmooth.report.render import (
        halving_profile_section,
        law_table,
        rayleigh_section,
        seed_curves,
    )

    curves, _, pooled = seed_curves(one, record)
    if "seed" not in one:
        curves[0]["label"] = title
    fig = plots.figure()
    plots.energy_curves(fig.add_subplot(), curves)
    doc.heading("Laplacian energy per layer")
    doc.figure(
        fig,
        "Laplacian energy against layer, log-log, with the fit of the verdict's law family "
        f"({pooled})",
        "energy.png",
    )
    doc.table(law_table({f"{title}, {pooled}": record}))
    halving_profile_section(doc, {title: record}, "halving.png")
    rayleigh_section(doc, one)
    if "relative_energy" in one:
        fig = plots.figure()
        plot(one, kind="relative", ax=fig.add_subplot())
        doc.heading("Relative energy change")
        doc.figure(fig, "|R(X^k)|, the curse-of-depth indicator, log-log", "relative_energy.png")
    if found_sim is not None:
        fig = plots.figure(5.6, 4.6)
        plots.similarity_heatmap(fig.add_subplot(), found_sim[0], found_sim[1])
        doc.heading("Inter-layer similarity")
        doc.figure(fig, "sim(X^s, X^t) over all pairs of layers", "similarity.png")
    doc.heading("Per-layer table")
    doc.table(one)


def _write_data(
    folder: Path,
    one: pd.DataFrame,
    record: dict,
    config: dict,
    found_sim: tuple[np.ndarray, list[int]] | None,
    tables: Iterable[str],
) -> None:
    """The data files of :func:`write_report` in ``folder``: ``metrics.csv``, ``fits.json``,
    ``config.json`` and, with a similarity matrix, ``similarity.csv``."""
    import pandas as pd

    from oversmooth.outputs import write_json
    from oversmooth.report.formats import CSV_FLOAT, write_table

    write_table(one, folder / "metrics.csv", tables, float_format=CSV_FLOAT)
    write_json(folder / "fits.json", {"mean_over_seeds": record})
    write_json(folder / "config.json", config)
    if found_sim is not None:
        write_table(
            pd.DataFrame(found_sim[0], index=found_sim[1], columns=found_sim[1]),
            folder / "similarity.csv",
            tables,
            index=True,
            index_label="layer",
            float_format=CSV_FLOAT,
        )


def _check_energies(one: pd.DataFrame) -> None:
    """The report's curve is there, and no energy is negative (energies are sums of squares: a
    negative one is a wrong input, refused naming it)."""
    import pandas as pd

    if "laplacian_energy" not in one:
        raise ValueError(
            "frame: expected a 'laplacian_energy' column (the report's curve); probe with the "
            "default metrics or add 'laplacian_energy' to metrics="
        )

    energy_columns = [c for c in one.columns if c.endswith("_energy") and c != "relative_energy"]
    for column in energy_columns:
        values = pd.to_numeric(one[column], errors="coerce")
        if bool((values < 0).any()):
            layer = one["layer"][values < 0].iloc[0] if "layer" in one else "?"
            raise ValueError(
                f"frame: {column} is negative at layer {layer} ({float(values.min()):g}); "
                "expected energies >= 0 (NaN for a missing value): pass the probe's own frame"
            )


def _layer_notes(doc: Any, attrs: dict) -> None:
    """The probe's notes on the layers (``frame.attrs``): layers that did not run like the
    others, calls beyond the layers, a stream read as norm(h)."""
    gaps, missing = attrs.get("gaps") or [], attrs.get("missing_layers") or []
    if not gaps and not missing:
        return
    doc.heading("What the probe noticed about the layers")
    if missing:
        doc.text(
            f"No row for layer(s) {', '.join(map(str, missing))} of {attrs.get('layers')}: "
            "the table and the fits are not the whole model."
        )
    for note in gaps:
        doc.text(f"- {note}")


def _shown_step(frame: Any, step: int | None) -> int | None:
    """The pass a report shows: ``step``, or the frame's one step when it holds one."""
    if step is not None or "step" not in frame:
        return step
    steps = frame["step"].unique()
    return int(steps[0]) if len(steps) == 1 else None


def _config_record(
    attrs: dict, title: str, step: int | None, graph: int | None, dtype: str
) -> dict:
    """``config.json`` of :func:`write_report`: what the frame says it measured, and what the
    report shows of it."""
    from oversmooth.version import __version__

    probe = {k: v for k, v in attrs.items() if isinstance(v, (str, int, float, list, type(None)))}
    return {
        "title": title,
        "probe": probe,
        "step": step,
        "graph": graph,
        "dtype": dtype,
        "versions": {"oversmooth": __version__},
    }


def _measured_text(
    doc: Any, frame: Any, step: int | None, graph: int | None, dtype: str, assumed: str | None
) -> None:
    """What was measured: the pass and graph reported, the precision, the layer notes."""
    attrs = dict(getattr(frame, "attrs", {}))
    passes = ""
    if "step" in frame:
        steps = sorted(int(s) for s in frame["step"].unique())
        shown = steps[-1] if step is None else step
        trained = attrs.get("global_step")  # an EnergyMonitor frame: its training step
        if len(steps) == 1 and isinstance(trained, int):
            # the probe's own pass counter is 0 there: "step 0" read as the initialisation
            when = (
                "before training"
                if trained == 0
                else f"after {trained} training steps (epoch {attrs.get('epoch')})"
            )
            passes = f" One forward pass, {when} (an EnergyMonitor probe)."
        elif len(steps) == 1:
            passes = f" One forward pass (step {shown})."
        else:
            held = (
                f"steps {steps[0]}-{steps[-1]}"
                if steps == list(range(steps[0], steps[-1] + 1))
                else "steps " + ", ".join(map(str, steps))
            )
            passes = f" Forward pass {shown} of the {len(steps)} recorded ({held})."
    if graph is not None:
        passes += f" Graph {graph} of the batch (one graph of a per-graph frame)."
    doc.text(
        "Measured by `oversmooth.Probe` on your model; Laplacian energy (1/n)·‖PX − X‖²_F "
        "with P = D⁻¹W on the probed graph (0 at an isolated node), accumulated in float64"
        # an assumed precision is not said as a fact ("the model ran in float32" of a float64
        # run's frame read back from a CSV, an audit): the sentence saying it was assumed
        + (f". {assumed}" if assumed else f"; the model ran in {dtype}.")
        + passes
    )
    _layer_notes(doc, attrs)
