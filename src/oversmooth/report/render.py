"""Write a run's tables to a folder atomically, and render its report from them.

A report folder holds the data (``metrics.csv``, ``fits.json``,
``config.json``, and ``similarity.csv`` / ``prune.csv`` / ``summary.csv`` /
``table.csv`` where they apply), the figures (150 dpi PNG), ``report.md`` and a
self-contained ``report.html`` (images inlined).  :func:`render_report`
rebuilds figures and reports from the data files alone, so a report can be
re-rendered without recomputing (``oversmooth report DIR``).

Folders are claimed exclusively and written atomically (:mod:`oversmooth.outputs`):
everything goes to a hidden temporary sibling that is renamed into place at the
end.  An existing folder is replaced only with ``overwrite=True``; a failure
leaves the old folder untouched; a second run on the same folder is refused.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from collections.abc import Iterable, Iterator, Mapping

import numpy as np
from numpy.typing import ArrayLike

from oversmooth.config import upgrade_record
from oversmooth.outputs import (
    data_digests,
    atomic_folder,
    atomic_text,
    check_out,
    file_stem,
    json_text,
    read_table,
    write_json,
)
from oversmooth.registry import bound_applies
from oversmooth.report import plots
from oversmooth.report.command import reproduce_command
from oversmooth.report.document import MISSING, Document, format_cell, plus_minus
from oversmooth.report.formats import (
    CSV_FLOAT,
    DEFAULT_FIGURE_FORMATS,
    DEFAULT_TABLE_FORMATS,
    write_beside,
    write_table,
)
from oversmooth.report.prose import (
    analysis_fits,
    analysis_title,
    change_interval,
    comparison_fits,
    comparison_key,
    comparison_title,
    conv_label,
    dropped_text,
    ends_text,
    OPEN_LAW_INTERVAL,
    length_span,
    one_sided,
    unbounded,
    energy_table,
    reason_prose,
    reference_prose,
    summary_table,
    uncertainty_text,
    late_length_span,
    pruning_baseline,
    verdict_prose,
    verdict_record,
)

if TYPE_CHECKING:
    import pandas as pd

    from oversmooth.analysis import AnalysisResult, ComparisonResult

# atomic_folder and check_out are re-exported (their old home)
__all__ = [
    "default_out",
    "to_json",
    "write_analysis",
    "write_comparison",
    "write_matrix_csv",
    "render_report",
    "law_table",
    "halving_profile_section",
    "evidence_table",
    "rayleigh_section",
    "verdict_section",
    "energy_table",
    "accuracy_in_percent",
    "seeds_text",
    "reproduce_sections",
    "atomic_folder",
    "check_out",
]

# ----------------------------------------------------------------------------- folders


def default_out(command: str, name: str, root: str | os.PathLike = "reports") -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"{command}-{name}-{stamp}"


def to_json(obj: Any) -> str:
    """Indented strict JSON with NaN/Inf as null (see :func:`oversmooth.outputs.json_text`)."""
    return json_text(obj, indent=2)


# ----------------------------------------------------------------------------- writers

#: the data files whose SHA-256 config.json records (``oversmooth report`` checks them)
DIGESTED = ("metrics.csv", "summary.csv", "table.csv", "similarity.csv", "prune.csv", "fits.json")


def write_analysis(
    result: AnalysisResult,
    out: Path,
    overwrite: bool = False,
    *,
    figure_formats: Iterable[str] = DEFAULT_FIGURE_FORMATS,
    table_formats: Iterable[str] = DEFAULT_TABLE_FORMATS,
) -> Path:
    """Write an :class:`~oversmooth.analysis.AnalysisResult` and render its report; tables in
    ``table_formats`` and figures in ``figure_formats`` (:mod:`oversmooth.report.formats`)."""
    import pandas as pd

    tables = table_formats
    with atomic_folder(out, overwrite, kind=str(result.config.get("command", "analyze"))) as tmp:
        write_table(result.metrics, tmp / "metrics.csv", tables, float_format=CSV_FLOAT)
        if result.similarity is not None:
            layers = result.similarity_layers or list(range(len(result.similarity)))
            csv = tmp / "similarity.csv"
            write_matrix_csv(csv, result.similarity, layers, "layer")
            similarity = pd.DataFrame(result.similarity, index=layers, columns=layers)
            write_beside(similarity, csv, tables, index=True, index_label="layer")
        if result.prune is not None:
            write_table(result.prune, tmp / "prune.csv", tables, float_format=CSV_FLOAT)
        write_json(tmp / "fits.json", analysis_fits(result.fits, result.config))
        _write_config(tmp, result)
        render_report(tmp, figure_formats=figure_formats)
    return Path(out)


def _write_config(tmp: Path, result: AnalysisResult | ComparisonResult) -> None:
    """``config.json``: the run's config, environment and timings, and the SHA-256 of the data
    files already written (:data:`DIGESTED`), last."""
    write_json(
        tmp / "config.json",
        {
            **result.config,
            "environment": result.environment,
            "timings": result.timings,
            "digests": data_digests(tmp, DIGESTED),
        },
    )


def write_matrix_csv(
    path: Path, matrix: ArrayLike, labels: list[int], index_label: str, spec: str = CSV_FLOAT
) -> None:
    """A square matrix as CSV, rows and columns named by ``labels``: the file pandas'
    ``DataFrame(matrix, index=labels, columns=labels).to_csv(path, index_label=...,
    float_format=spec)`` writes, byte for byte, formatted a row at a time (pandas formats
    every value through a Python call: a tenth of a second for a 257 x 257 matrix)."""
    import pandas as pd

    values = np.asarray(matrix, dtype=np.float64)
    if not np.isfinite(values).all():  # pandas' spelling of NaN and inf: leave it to pandas
        frame = pd.DataFrame(values, index=labels, columns=labels)
        atomic_text(path, frame.to_csv(index_label=index_label, float_format=spec))
        return
    row_format = ",".join([spec] * values.shape[1])
    lines = [",".join([index_label, *map(str, labels)])]
    rows = zip(labels, values.tolist(), strict=True)
    lines += [f"{label}," + row_format % tuple(row) for label, row in rows]
    atomic_text(path, "\n".join(lines) + "\n")


def _every_depth(table: pd.DataFrame, config: Mapping[str, Any]) -> pd.DataFrame:
    """``table`` (:func:`summary_table`) with a column for every depth asked, a dash where no
    run finished: a sweep depth of which every cell failed vanished from table.csv without a
    word there (report.md named it; an audit)."""
    from oversmooth.report.prose import layers_label

    missing = config.get("missing") or []
    depths = {int(d) for d in config.get("depths") or []}
    depths |= {int(m["depth"]) for m in missing if isinstance(m, dict) and "depth" in m}
    columns = [layers_label(d) for d in sorted(depths)]
    if not columns or set(columns) <= set(table.columns):
        return table
    return table.reindex(columns=columns, fill_value=MISSING)


def write_comparison(
    result: ComparisonResult,
    out: Path,
    overwrite: bool = False,
    *,
    figure_formats: Iterable[str] = DEFAULT_FIGURE_FORMATS,
    table_formats: Iterable[str] = DEFAULT_TABLE_FORMATS,
) -> Path:
    """Write a :class:`~oversmooth.analysis.ComparisonResult` and render its report; tables in
    ``table_formats`` and figures in ``figure_formats``."""
    tables = table_formats
    with atomic_folder(out, overwrite, kind="compare") as tmp:
        write_table(result.metrics, tmp / "metrics.csv", tables, float_format=CSV_FLOAT)
        write_table(result.summary, tmp / "summary.csv", tables, float_format=CSV_FLOAT)
        asked = len(result.config["seeds"])
        table = _every_depth(summary_table(result.summary, asked), result.config)
        write_table(table, tmp / "table.csv", tables, index=True)
        write_json(tmp / "fits.json", comparison_fits(result.fits, result.config))
        _write_config(tmp, result)
        render_report(tmp, figure_formats=figure_formats)
    return Path(out)


# ----------------------------------------------------------------------------- rendering


def _rate_cell(rate: dict | None) -> str:
    if not rate:
        return MISSING
    lo, hi = rate["interval"]
    if rate.get("name") in ("halving_length", "doubling_length"):
        if unbounded((lo, hi)):
            return "not bounded"
        if rate.get("kind") == "asymptotic" and one_sided((lo, hi)):
            # the bound alone, as the verdict's line says it: the point of an asymptotic
            # rate bounded on one side is the fit's, not a limit the layers show (an audit)
            return length_span((lo, hi), ".4g")
        return f"{format_cell(rate['value'])} ({length_span((lo, hi), '.4g')})"
    return f"{format_cell(rate['value'])} ({format_cell(lo)} to {format_cell(hi)})"


def law_table(records: Mapping[str, dict | None]) -> pd.DataFrame:
    """One row per curve (``name -> fits.json record``): what was measured, decisive even where
    the law is not -- decades lost or gained, the late halving (doubling) length, the late
    relative change, the adjacent cosine, what the fall is made of -- then the law and its
    asymptotic rate, all from the verdict (the same numbers as its sentence)."""
    import pandas as pd

    rows = []
    for name, record in records.items():
        found = verdict_record(record) or {}
        ev = found.get("evidence") or {}
        change, change_span = ev.get("change_decades"), change_interval(ev)
        slope = ev.get("late_slope")
        late = MISSING
        # no trend established (the change's interval reaches 0): — as the text above the
        # table says (a late halving length beside "cannot tell a stable curve from a trend":
        # an audit)
        if isinstance(slope, (int, float)) and slope != 0 and found.get("trend") is not None:
            word = "halves" if slope < 0 else "doubles"
            late = f"{word} every {math.log(2) / abs(slope):.3g} layers"  # as the verdict line
            span = ev.get("late_slope_interval")
            if isinstance(span, (list, tuple)) and len(span) == 2:
                late += f" (95% {late_length_span(ev, slope < 0)})"
            if ev.get("late_asymptotic") is False:
                late += " (still moving)"
            elif ev.get("late_asymptotic", True) is None:
                late += " (settling not resolved)"
        rate = found.get("rate")
        asym = found.get("asymptotic_rate")
        rows.append(
            {
                "curve": name,
                "decades (fitted change, 99% interval)": MISSING
                if change is None
                else f"{change:+.2f} ({ends_text(*change_span, '+.2f')})"
                if change_span is not None
                else f"{change:+.2f}",
                "late rate": late,
                "late |R|": format_cell(ev.get("curse_r_median")),
                "adjacent cosine": format_cell(ev.get("curse_cosine")),
                "fall is": found.get("collapse") or MISSING,
                "law": found.get("label") or MISSING,
                "rate (95%)": _rate_cell(rate)
                + (f" [{rate['name'].replace('_', ' ')}]" if rate else ""),
                "asymptotic rate (95%)": _rate_cell(asym),
            }
        )
    table = pd.DataFrame(rows)
    # a column that reads — for every curve says nothing and widened the table past the page
    # (the curse-of-depth columns of a decay, the rates of an unnamed law: an audit)
    empty = [c for c in OPTIONAL_LAW_COLUMNS if c in table and (table[c] == MISSING).all()]
    return table.drop(columns=empty)


#: :func:`law_table`'s columns left out where every curve reads — in them
OPTIONAL_LAW_COLUMNS = ("late |R|", "adjacent cosine", "rate (95%)", "asymptotic rate (95%)")


def evidence_table(record: dict | None) -> pd.DataFrame | None:
    """What the verdict rests on (``Verdict.to_dict()``) as an item/value table; None for a
    fits.json written before the verdict existed."""
    import pandas as pd

    if not record:
        return None
    ev = record.get("evidence") or {}
    curse = {True: "yes", False: "no", None: "undecided"}.get(
        record.get("curse_of_depth"), "undecided"
    )
    rows = [
        ("label", record.get("label")),
        ("curse of depth", curse),
        ("seeds pooled (replicates)", record.get("seeds")),
        ("usable layers", record.get("usable_layers")),
    ]
    rows.append(("left out of the fits", dropped_text(record.get("dropped") or {})))
    for key in ("rate", "asymptotic_rate"):
        rate = record.get(key)
        if rate:
            where = rate.get("window")
            name = f"{rate['kind']} {rate['name'].replace('_', ' ')}"
            if where:
                name += f", layers {where[0]}-{where[1]}"
            rows.append((name, _rate_cell(rate) + " (95% interval)"))
    if record.get("collapse"):
        rows.append(("the fall is", record["collapse"]))
    level = ev.get("level")
    span = change_interval(ev)
    if ev.get("change_decades") is not None:
        rows.append(
            (
                f"fitted change, decades ({level:.0%} interval)" if level else "fitted change",
                f"{ev['change_decades']:+.2f}"
                + ("" if span is None else f" ({ends_text(*span, '+.2f')})"),
            )
        )
    for key, name in (
        ("power_term_decades", "power-law term, decades"),
        ("exponential_term_decades", "exponential term, decades"),
    ):
        if ev.get(key) is not None:
            half = ev.get(key.replace("_decades", "_halfwidth"))
            label = f"{name} (± {level:.0%} half-width)" if level else name
            rows.append((label, plus_minus(ev[key], half)))
    for key, name in (
        ("alpha", "fitted alpha"),
        ("k0", "fitted shift k0"),
        ("beta", "fitted beta (per layer)"),
    ):
        if ev.get(key) is not None:
            rows.append((name, format_cell(ev[key])))
    if ev.get("beta_interval"):
        lo, hi = ev["beta_interval"]
        name = f"beta, {level:.0%} interval" if level else "beta interval"
        cell = ends_text(lo, hi, ".3g")
        if record.get("label") == "inconclusive":  # an undecided law's factor, not the curve's
            cell += f" ({OPEN_LAW_INTERVAL})"
        rows.append((name, cell))
    for key, name in (
        ("energy_decades", "energy decades (the fitted change over the window)"),
        ("energy_read_decades", "energy decades read from its curve (the next two added)"),
        ("norm_decades", "squared feature norm decades (read from its curve, as the energy's)"),
        ("scale_free_decades", "scale-free energy decades (read from its curve)"),
    ):
        if ev.get(key) is not None:
            rows.append((name, f"{round(ev[key], 2) + 0.0:+.2f}"))  # + 0.0: never "-0.00"
    uncertainty = uncertainty_text(record)
    if uncertainty:
        rows.append(("intervals from", uncertainty))
    return pd.DataFrame({"item": [r[0] for r in rows], "value": [str(r[1]) for r in rows]})


def seed_curves(
    metrics: pd.DataFrame, record: dict | None, metric: str = "laplacian_energy"
) -> tuple[list[dict], Any, str]:
    """The ``metric`` curves of a per-layer table for :func:`plots.energy_curves`: one per
    seed, and with several seeds their geometric mean, which carries the verdict's fitted law
    (a single seed carries it itself, so no seed's own fit is ever drawn for several).  Returns
    the curves, the geometric-mean series and the words for how the seeds were pooled.  The
    float floor is drawn beside the Laplacian energy only (it is that energy's)."""
    groups = list(metrics.groupby("seed")) if "seed" in metrics else [(0, metrics)]
    several = len(groups) > 1
    curves: list[dict] = [
        {
            "label": f"seed {seed}",
            "layers": part["layer"],
            "values": part[metric],
            "fit": None if several else record,
            "floor": part["float_floor"]
            if "float_floor" in part and metric == "laplacian_energy"
            else None,
        }
        for seed, part in groups
    ]
    mean = metrics.groupby("layer")[metric].apply(_log_mean)
    if several:
        curves.append(
            {
                "label": f"geometric mean of {len(groups)} seeds",
                "layers": mean.index.to_numpy(),
                "values": mean.to_numpy(),
                "fit": record,
                "color": "black",
            }
        )
    return curves, mean, f"all {len(groups)} seeds pooled" if several else "one seed"


def halving_profile_section(doc: Document, records: Mapping[str, dict | None], name: str) -> None:
    """The local halving length along depth with its band, one line per curve that decays."""
    from oversmooth.verdict import local_halving_length

    curves = []
    for label, record in records.items():
        found = verdict_record(record) or {}
        profile = found.get("profile") or {}
        if found.get("trend") == "decay" and profile.get("layer"):
            curves.append({"label": label, **local_halving_length(profile)})
    if not curves:
        return
    fig = plots.figure()
    plots.local_halving(fig.add_subplot(), curves)
    doc.heading("Local halving length")
    doc.figure(
        fig,
        "Local halving length −ln 2 / (d log E/dk) along depth: slopes over sliding windows of "
        "the curve the verdict fits (its seeds together), each with the 95% band of the "
        "verdict's seed-and-bootstrap estimator over that window. The verdict's late interval "
        "is wider than the band where the rate still moves: it adds the drift between the last "
        "two quarters. A flat line is an exponential, a line rising in proportion to k a power "
        "law; a band running off the top has no upper bound (the slope may be zero there), "
        "and the line breaks where the local slope is not a decay at all",
        name,
    )


def seeds_text(seeds: list[int]) -> str:
    """``"with seed 0"`` for one seed, ``"over seeds 0, 1, 2"`` for several."""
    if len(seeds) == 1:
        return f"with seed {seeds[0]}"
    return "over seeds " + ", ".join(str(s) for s in seeds)


def accuracy_in_percent(frame: pd.DataFrame) -> pd.DataFrame:
    """A pruning table for reading: ``accuracy`` (a fraction in prune.csv) as ``accuracy (%)``
    and ``accuracy_drop`` as ``accuracy drop (points)``, the convention of every report."""
    # the baseline, the same on every row, is said in one sentence (prose.pruning_baseline)
    # (the nodes each drop changed, lost and gained, stay in prune.csv: the interval says them)
    shown = frame.drop(
        columns=["unpruned_accuracy", "majority_accuracy", "nodes", "lost", "gained"],
        errors="ignore",
    )
    if {"drop_low", "drop_high"} <= set(shown.columns):
        # one cell for the paired interval, after the drop it belongs to
        where = list(shown.columns).index("accuracy_drop") + 1 if "accuracy_drop" in shown else 0
        cells = [
            f"{100 * lo:+.2f} to {100 * hi:+.2f}"
            for lo, hi in zip(shown["drop_low"], shown["drop_high"], strict=True)
        ]
        shown = shown.drop(columns=["drop_low", "drop_high"])
        shown.insert(where, "95% interval (points)", cells)
    for column, name in (("accuracy", "accuracy (%)"), ("accuracy_drop", "accuracy drop (points)")):
        if column in shown:
            shown[column] = 100 * shown[column]
            shown = shown.rename(columns={column: name})
    return shown


def _log_mean(values: ArrayLike) -> float:
    """Geometric mean over seeds; NaN (not drawn) when any seed is zero, negative or non-finite."""
    v = np.asarray(values, dtype=np.float64)
    return float(np.exp(np.mean(np.log(v)))) if np.all(np.isfinite(v) & (v > 0)) else float("nan")


def reference_lines(
    record: dict | None,
    layers: ArrayLike,
    values: ArrayLike,
    diffusion: bool = True,
    algebraic: bool = True,
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Theory lines for :func:`plots.energy_curves` from a fits.json record's ``"reference"``:
    linear diffusion's ``ratio^(k - k0)`` and the nonlocal bound's ``(k / k0)^slope``, both
    through the measured curve (``layers``, ``values``) at ``k0``, the start of the verdict's late
    window (the first positive layer when it has no value there), drawn over every positive
    layer so that their slopes can be told from the curve's, not only over the late window."""
    ref = (record or {}).get("reference") or {}
    k = np.asarray(layers, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    ok = (k > 0) & np.isfinite(v) & (v > 0)
    if not ok.any():
        return []
    found = verdict_record(record) or {}
    span = (found.get("evidence") or {}).get("late_window") or []
    at = np.flatnonzero(ok & (k == span[0])) if span else np.array([], dtype=int)
    i = int(at[0]) if at.size else int(np.flatnonzero(ok)[0])
    k0, v0, k1, first = k[i], v[i], k[ok].max(), k[ok].min()
    if k1 <= k0:
        return []
    lines = []
    spec = ref.get("diffusion") or {}
    ratio = spec.get("energy_ratio") if spec.get("computed") else None
    if diffusion and isinstance(ratio, (int, float)) and 0.0 < ratio < 1.0:
        grid = np.arange(first, k1 + 1)
        lines.append((f"linear diffusion, ×{ratio:.4g}/step", grid, v0 * ratio ** (grid - k0)))
    bound = ref.get("algebraic") or {}
    slope = bound.get("slope")
    if algebraic and isinstance(slope, (int, float)):
        grid = np.geomspace(first, k1, 100)
        lines.append((f"$k^{{{slope:g}}}$ bound (Thm 4.1)", grid, v0 * (grid / k0) ** slope))
    return lines


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def render_report(
    folder: str | os.PathLike, figure_formats: Iterable[str] = DEFAULT_FIGURE_FORMATS
) -> Path:
    """(Re)build figures (PNG, plus the other ``figure_formats``), ``report.md`` and
    ``report.html`` from the data files in ``folder``.

    The verdict prose is rebuilt from the numbers in fits.json (:mod:`oversmooth.report.prose`).
    """
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(
            f"{folder}: no config.json; expected a folder written by oversmooth analyze/compare"
        )
    config = upgrade_record(_read_json(config_path))  # an older folder's flat record too
    command = config.get("command")
    if command in ("analyze", "prune"):
        doc = _render_analysis(folder, config)
    elif command == "compare":
        doc = _render_comparison(folder, config)
    else:
        raise ValueError(f"{config_path}: unknown command {command!r}; expected analyze or compare")
    reproduce_sections(doc, config)
    doc.write(folder, figure_formats)
    return folder


#: how an energy caption names the theory lines (each with its own dashes: the bound is dotted)
GREY_LINES = "grey lines, each with its own dashes and named in the legend"

#: who rebuilds a folder's report from its files (``oversmooth report``): the version and
#: commit, set for the rebuild by :func:`rebuilding`; empty when a run writes its own report
REBUILT_BY: dict[str, str | None] = {}


@contextmanager
def rebuilding() -> Iterator[None]:
    """Mark the reports written inside as rebuilt from their folders' files by this version:
    :func:`rebuilt_note` then says so where it differs from the version that ran."""
    from oversmooth.version import __version__, commit

    REBUILT_BY.update(oversmooth=__version__, git_commit=commit())
    try:
        yield
    finally:
        REBUILT_BY.clear()


def rebuilt_note(env: Mapping[str, Any]) -> str:
    """A sentence for a report rebuilt (:func:`rebuilding`) by another version or commit than
    the one its run recorded (``env``): the page said only the run's commit, 70 commits before
    the words it showed (an audit); "" otherwise."""
    if not REBUILT_BY:
        return ""
    version, commit = REBUILT_BY.get("oversmooth"), REBUILT_BY.get("git_commit")
    if version == env.get("oversmooth") and commit == env.get("git_commit"):
        return ""
    by = f"oversmooth {version}" + (f" (commit `{commit}`)" if commit else "")
    return (
        f" This page was rebuilt from the folder's files by {by}: the numbers are the run's, "
        "the words and figures this version's."
    )


def reproduce_sections(doc: Document, config: Mapping[str, Any]) -> None:
    """The closing sections of every command's report: *Reproduce* (the version and commit
    that wrote it, and the command line that reruns it, from :func:`reproduce_command`) and
    *Environment* (``config["environment"]``, the versions and machine, and
    ``config["timings"]``, seconds per stage)."""
    import pandas as pd

    env = config.get("environment", {})
    timings = config.get("timings", {})
    doc.heading("Reproduce")
    version = env.get("oversmooth")
    commit = env.get("git_commit")
    where = (
        f"oversmooth {version}" + (f" (commit `{commit}`)" if commit else "")
        if version
        else "oversmooth (version not recorded)"
    )
    if config.get("sweep_mode"):
        doc.text(
            f"Merged from the cells of `oversmooth sweep` ({config['sweep_mode']} mode) with "
            f"{where}; the sweep's grid and options are in `spec.json` in the folder above "
            "this one (rerun the sweep with the same spec to finish or extend it)."
            + rebuilt_note(env)
        )
    else:
        doc.text(f"Written with {where}.{rebuilt_note(env)} This command reruns it:")
        doc.code(reproduce_command(config))
    # a stage that did not run (no pruning: 0.0) is left out; a value not known (the commit
    # outside a git checkout) says so rather than "None"
    ran = {k: v for k, v in timings.items() if v}
    if not env and not ran:
        return
    doc.heading("Environment")
    doc.table(
        pd.DataFrame(
            {
                "item": list(env)
                + [f"time: {k.removesuffix('_s').replace('_', ' ')}" for k in ran],
                "value": ["not recorded" if v is None else str(v) for v in env.values()]
                + [f"{v:.2f} s" for v in ran.values()],
            }
        )
    )


def rayleigh_section(doc: Document, metrics: pd.DataFrame, model: str | None = None) -> bool:
    """Add the scale-invariant (Rayleigh) energy ``E_2(X) / ((1/n)||X||_F^2)`` beside the raw
    one when the raw energy mostly reports scale: for a model without LayerNorm (a ``plain``
    placement in the model registry) or, for any other model, when the feature norm changes by
    more than a factor of 10 across layers.  Computed from the ``laplacian_energy`` and
    ``feature_norm`` columns (``feature_norm`` is the root-mean-square node norm), so old
    folders get it too.  Returns whether the section was added."""
    import numpy as np

    from oversmooth.registry import MODELS

    if "laplacian_energy" not in metrics or "feature_norm" not in metrics:
        return False
    norm = metrics["feature_norm"].to_numpy(dtype=float)
    usable = metrics[np.isfinite(norm) & (norm > 0)]
    no_layernorm = (
        model is not None and model in MODELS and MODELS[model].placement in ("plain", "diffusion")
    )
    # the seeds' geometric-mean norm, max over min along the layers the figure shows
    curve = usable.groupby("layer")["feature_norm"].apply(_log_mean)
    spread = float(curve.max() / curve.min()) if len(curve) else 1.0
    if not (no_layernorm or spread > 10.0):
        return False
    groups = metrics.groupby("seed") if "seed" in metrics else [("", metrics)]
    one_seed = len(groups) == 1
    curves = [
        {
            "label": f"seed {seed}" if seed != "" else "rayleigh energy",
            "layers": part["layer"],
            "values": part["laplacian_energy"] / part["feature_norm"] ** 2,
        }
        for seed, part in groups
    ]
    fig = plots.figure()
    plots.energy_curves(
        fig.add_subplot(), curves, metric_label=r"$E_2(X^k) / (\frac{1}{n}\|X^k\|_F^2)$"
    )
    doc.heading("Scale-invariant energy")
    why = (
        "this model has no LayerNorm"
        if no_layernorm
        else f"the feature norm{'' if one_seed else ', a geometric mean over seeds,'} changes "
        f"{spread:.3g}-fold over "
        f"layers {int(curve.index.min())}-{int(curve.index.max())}"
    )
    doc.text(
        f"The raw energy mixes smoothing with the scale of the features ({why}), so the "
        "Rayleigh energy E₂(X)/((1/n)‖X‖²_F) = ‖PX − X‖²_F/‖X‖²_F (`rayleigh_energy`, invariant "
        "to X → cX) is shown beside it: it falls only when the states really become smooth."
    )
    doc.figure(
        fig,
        "Rayleigh (scale-invariant) Laplacian energy against layer, log-log",
        "rayleigh_energy.png",
    )
    return True


def verdict_section(doc: Document, record: dict, title: str) -> None:
    """*Verdict*: the banner of a fits.json record (its sentence titled ``title``), why, and
    the table of what the verdict rests on."""
    doc.heading("Verdict")
    label = _verdict_banner(doc, record, title)
    reason = reason_prose(record)
    if reason and label != "inconclusive":
        doc.text(f"Why: {reason}.")
    evidence = evidence_table(verdict_record(record))
    if evidence is not None:
        doc.table(evidence)


def _verdict_banner(doc: Document, record: dict, title: str) -> str | None:
    """The verdict banner of one fits.json record; returns the label it shows."""
    found = verdict_record(record) or {}
    label = found.get("label") or record.get("classification")
    doc.verdict(
        verdict_prose(record, title), label, found.get("curse_of_depth"), found.get("collapse")
    )
    return label


def _render_analysis(folder: Path, config: dict) -> Document:
    """The report of an analyze or prune folder, from its metrics.csv and fits.json."""
    metrics = read_table(folder / "metrics.csv")
    fits = _read_json(folder / "fits.json")
    model, conv, depth, dataset = (
        config["model"]["name"],
        config["model"]["conv"],
        config["model"]["depth"],
        config["dataset"],
    )
    command = config.get("command") or "analyze"  # prune writes the same report
    # a trained model says so in the title, not only in the verdict line (an audit)
    trained = "trained " if config.get("checkpoint") else ""
    doc = Document(
        f"oversmooth {command}: {trained}{model} {conv_label(model, conv)}, depth {depth}, "
        f"{dataset}"
    )
    mean_fit = fits.get("mean_over_seeds", {})
    if "verdict" in fits and not verdict_record(mean_fit):
        mean_fit = {**mean_fit, "verdict": fits["verdict"]}  # an old folder: the frozen text
    verdict_section(doc, mean_fit, analysis_title(config))
    state = (
        f"on the trained checkpoint `{config['checkpoint']}`"
        if config.get("checkpoint")
        else "at initialisation " + seeds_text(config["seeds"])
    )
    doc.text(
        f"Measured {state}; energies on the input graph as given (no self loops added; a "
        "self loop the graph has is kept), Laplacian energy "
        "(1/n)·‖PX − X‖²_F with P = D⁻¹W (0 at an isolated node), accumulated in float64."
    )
    _energy_section(doc, metrics, mean_fit, model)
    _measure_sections(doc, folder, metrics, config)
    return doc


def _energy_section(doc: Document, metrics: pd.DataFrame, mean_fit: dict, model: str) -> None:
    """The analyze report's energy per layer with the fitted law and theory lines, the law
    table, the halving profile and the theory sentences."""
    curves, mean, pooled = seed_curves(metrics, mean_fit)
    references = reference_lines(
        mean_fit, mean.index.to_numpy(), mean.to_numpy(), algebraic=bound_applies(model)
    )
    fig = plots.figure()
    plots.energy_curves(fig.add_subplot(), curves, references=references)
    doc.heading("Laplacian energy per layer")
    law = (
        f"log-log, with the fit of the verdict's law family (drawn whether or not it names a "
        f"law; {pooled}; "
        if _fitted(mean_fit)
        else f"log-log ({pooled}; no law was fitted, see the verdict; "
    )
    through = "the seeds' geometric-mean curve" if len(curves) > 1 else "the curve"
    doc.figure(
        fig,
        f"Laplacian energy against layer, {law}"
        "the float floor is drawn where it falls inside the range of the data)"
        + (
            f"; {GREY_LINES}: theory references through {through} {_anchor_words(mean_fit)}"
            if references
            else ""
        ),
        "energy.png",
    )
    doc.text(
        "What was measured, from the verdict: the fitted change in decades and the late halving "
        "(or doubling) length; the late relative change |R| and the adjacent cosine where the "
        "curve is flat or grows (the curse-of-depth test), the law's rates where a law is named "
        "(columns with nothing to show are left out)."
    )
    doc.table(law_table({f"{model}, {pooled}": mean_fit}))
    halving_profile_section(doc, {f"{model} ({pooled})": mean_fit}, "halving.png")
    for sentence in reference_prose(mean_fit, model):
        doc.text(sentence)


def _measure_sections(doc: Document, folder: Path, metrics: pd.DataFrame, config: dict) -> None:
    """The analyze report's sections after the energy: the Rayleigh energy, relative change,
    adjacent cosine, the similarity heatmap, pruning and the per-layer excerpt."""
    rayleigh_section(doc, metrics, config["model"].get("name"))
    if "relative_energy" in metrics:
        fig = plots.figure()
        plots.relative_energy_curves(fig.add_subplot(), _per_seed(metrics, "relative_energy"))
        doc.heading("Relative energy change")
        doc.figure(fig, "|R(X^k)|, the curse-of-depth indicator, log-log", "relative_energy.png")
    if "mean_cosine_similarity" in metrics:
        fig = plots.figure()
        plots.cosine_curves(fig.add_subplot(), _per_seed(metrics, "mean_cosine_similarity"))
        doc.figure(fig, "Adjacent-layer cosine similarity", "cosine.png")
    if (folder / "similarity.csv").is_file():
        _similarity_section(doc, folder / "similarity.csv", config["seeds"][0])
    if (folder / "prune.csv").is_file():
        _pruning_section(doc, folder / "prune.csv", config["seeds"][0])
    _layer_excerpt(doc, metrics[metrics["seed"] == config["seeds"][0]])


def _per_seed(metrics: pd.DataFrame, column: str) -> list[dict]:
    """One curve of ``column`` against the layer per seed, labelled by the seed; with several
    seeds drawn thin and light under their median per layer (in black), which a deep network's
    five crossing curves would otherwise hide."""
    groups = list(metrics.groupby("seed"))
    several = len(groups) > 1
    style = {"lw": 0.8, "alpha": 0.45} if several else {}
    curves = [
        {"label": f"seed {s}", "layers": p["layer"], "values": p[column], **style}
        for s, p in groups
    ]
    if several:
        values = metrics[column].abs() if column == "relative_energy" else metrics[column]
        median = values.groupby(metrics["layer"]).median()  # of |R|: the figure draws |R|
        curves.append(
            {
                "label": f"median of {len(groups)} seeds",
                "layers": median.index,
                "values": median.to_numpy(),
                "color": "black",
                "lw": 1.5,
            }
        )
    return curves


def _similarity_section(doc: Document, path: Path, seed: int) -> None:
    """The inter-layer similarity heatmap of ``similarity.csv`` (measured with ``seed``)."""
    import pandas as pd

    sim = pd.read_csv(path, index_col=0)
    fig = plots.figure(5.6, 4.6)
    plots.similarity_heatmap(
        fig.add_subplot(), sim.to_numpy(), [int(c) for c in sim.columns], f"seed {seed}"
    )
    doc.heading("Inter-layer similarity")
    doc.figure(fig, "sim(X^s, X^t) over all pairs of layers (first seed)", "similarity.png")


# prune.csv's measure of a pruned layer -> (axis label, caption); the accuracy drop when the
# run had a checkpoint (and labels to score), else the change of the logits
_PRUNE_MEASURES = {
    "accuracy_drop": (
        "test accuracy drop (points)",
        "Test-accuracy drop when one layer is replaced by the identity",
    ),
    "logits_change": (
        r"$\|Z_k - Z\|_F / \|Z\|_F$",
        "Relative change of the logits when one layer is replaced by the identity",
    ),
}


def _pruning_section(doc: Document, path: Path, seed: int) -> None:
    """Each pruned layer's effect (``prune.csv``, measured on the model of ``seed``, the run's
    first) as bars, then as a table."""
    import pandas as pd

    prune = pd.read_csv(path)
    column = "accuracy_drop" if "accuracy_drop" in prune else "logits_change"
    label, caption = _PRUNE_MEASURES[column]
    drop = column == "accuracy_drop"  # a fraction, shown in points on a linear axis
    fig = plots.figure(6.0, 3.6)
    paired = drop and {"drop_low", "drop_high"} <= set(prune.columns)
    plots.pruning_bars(
        fig.add_subplot(),
        prune["layer"],
        100 * prune[column] if drop else prune[column],
        label,
        log=not drop,
        interval=(100 * prune["drop_low"], 100 * prune["drop_high"]) if paired else None,
    )
    doc.heading("Layer pruning sensitivity")
    whiskers = ", whiskers the 95% paired interval" if paired else ""
    doc.figure(
        fig, f"{caption} (the model of seed {seed}, the run's first{whiskers})", "pruning.png"
    )
    doc.table(accuracy_in_percent(prune))
    baseline = pruning_baseline(prune)
    if baseline is not None:
        doc.text(baseline)
    said = [
        text
        for name, text in (
            ("logits_change", "`logits_change` is ‖Z_k − Z‖_F / ‖Z‖_F, Z the logits"),
            ("final_energy", "`final_energy` the final layer's Laplacian energy, pruned"),
            ("energy_change", "`energy_change` its relative change, (pruned − whole) / whole"),
            ("accuracy", "`accuracy (%)` the test accuracy with the layer pruned"),
            (
                "accuracy_drop",
                "`accuracy drop (points)` the unpruned accuracy less that, in percentage "
                "points (prune.csv holds both as fractions: `accuracy`, `accuracy_drop`)",
            ),
            (
                "drop_low",
                "`95% interval (points)` the drop's exact paired interval from the nodes the "
                "pruning changed (prune.csv: `lost`, right before and wrong after, `gained`, "
                "the reverse, of `nodes` measured; the interval's ends `drop_low`, "
                "`drop_high`, fractions)",
            ),
        )
        if name in prune
    ]
    if said:
        doc.text(f"Per pruned layer: {'; '.join(said)}.")


def _layer_excerpt(doc: Document, first: pd.DataFrame) -> None:
    """Rows of one seed's per-layer table: layers 0-2, the powers of two and the last."""
    last = first["layer"].max()
    picks = sorted(
        {int(k) for k in [0, 1, 2] + [2**i for i in range(2, 20)] + [int(last)] if k <= last}
    )
    rows = first[first["layer"].isin(picks)]
    constant = [c for c in ("step",) if c in rows and rows[c].nunique() <= 1]
    doc.heading("Per-layer table (excerpt)")
    doc.table(rows.drop(columns=constant))
    whose = f"Seed {first['seed'].iloc[0]}'s rows" if "seed" in first else "The rows"
    doc.text(
        f"{whose} at layers 0-2, the powers of two and the last; the full table is "
        "`metrics.csv` (one row per layer and seed)."
    )


def _fewer_seeds(summary: pd.DataFrame, seeds: int) -> bool:
    """Whether some (model, conv, dataset, depth) of ``summary`` has a finite final energy from
    fewer than ``seeds`` seeds (a failed sweep cell, a run that overflowed)."""
    if not len(summary):
        return False
    keys = [k for k in ("model", "conv", "dataset", "depth") if k in summary]
    finite = summary.assign(_finite=np.isfinite(summary["final_energy"].astype(float)))
    counts = finite.groupby(keys, sort=False)["_finite"].sum()  # an Inf counts out, as NaN
    return bool((counts < seeds).any())


def _comparison_curves(config: dict, fits: dict, dataset: str) -> list[dict]:
    """One entry per (model, conv) curve of ``dataset`` in a compare folder: ``model``,
    ``conv``, ``label`` (the model, plus the conv when there are several) and its fits
    ``record`` (None when missing)."""
    convs = list(config["convs"])
    return [
        {
            "model": model,
            "conv": conv,
            "label": model if len(convs) == 1 else f"{model} {conv}",
            "record": fits.get(comparison_key(dataset, model, conv, convs)),
        }
        for conv in convs
        for model in config["models"]
    ]


def _render_comparison(folder: Path, config: dict) -> Document:
    import pandas as pd

    metrics = read_table(folder / "metrics.csv")
    summary = pd.read_csv(folder / "summary.csv")
    fits = _read_json(folder / "fits.json")
    mode = config.get("sweep_mode")
    what = f"{', '.join(config['models'])} ({', '.join(c.upper() for c in config['convs'])}"
    doc = Document(f"oversmooth sweep: {what}, {mode})" if mode else f"oversmooth compare: {what})")
    seeds = config["seeds"]
    missing = config.get("missing") or []
    if missing:  # a sweep's combinations of which no run finished: said, not left out silently
        named = "; ".join(f"{m['model']} at depth {m['depth']} on {m['dataset']}" for m in missing)
        doc.text(
            f"No run finished for {named}: every seed of {'it' if len(missing) == 1 else 'each'} "
            "failed (the sweep's `failed.csv` "
            "names each run and its error), so the tables, figures and verdicts below leave it "
            "out."
        )
    doc.heading(f"What was measured at depth {max(config['depths'])}")
    doc.text(
        "Each curve's fitted change in decades, its late halving (or doubling) length, the late "
        "relative change |R| and adjacent cosine (the curse-of-depth test of a flat or growing "
        "curve: — for a decay), and whether the fall is the nodes converging (oversmoothing) or "
        "the features shrinking (norm collapse): decisive even where the law cannot be named, "
        "once the change is (its interval excludes 0; where it does not, these three read —). "
        "Then the law and its rates, all from the verdict; a column that reads — for every curve "
        "is left out."
    )
    doc.table(law_table(fits))
    doc.heading(
        "Final-layer Laplacian energy after training"
        if mode == "trained"
        else "Final-layer Laplacian energy at initialisation"
    )
    doc.text(
        (
            f"Arithmetic mean ± std over seeds {', '.join(str(s) for s in seeds)} (as the "
            "paper reports them), then in brackets the geometric mean, the average that suits a "
            "quantity spread over decades"
            if len(seeds) > 1
            else f"One seed ({seeds[0]}): no spread is shown"
        )
        + "; the layout of the seed paper's Tables 2, 4 and 6."
        + (
            " A value marked (k of n seeds) is over the seeds whose final energy is a number: the "
            "other runs of that cell failed (a sweep's `failed.csv` names them; the verdict "
            "pools the runs that finished) or ended in a non-finite energy (an overflow: empty or "
            "inf in `summary.csv`, and the cell's verdict names it)."
            if _fewer_seeds(summary, len(seeds))
            else ""
        )
    )
    doc.table(energy_table(summary, len(seeds)))
    doc.heading("Verdicts at the deepest depth")
    for dataset in config["datasets"]:
        for curve in _comparison_curves(config, fits, dataset):
            record = curve["record"]
            if record is not None:
                title = comparison_title(dataset, curve["model"], curve["conv"], record, config)
                _verdict_banner(doc, record, title)
    if "conv" in summary:  # one line per (model, conv)
        summary = summary.assign(model=summary["model"] + " " + summary["conv"])
    for dataset in config["datasets"]:
        _comparison_dataset_section(doc, config, metrics, summary, fits, dataset)
    return doc


def _comparison_dataset_section(
    doc: Document,
    config: dict,
    metrics: pd.DataFrame,
    summary: pd.DataFrame,
    fits: dict,
    dataset: str,
) -> None:
    """One dataset of a compare report: final energy against depth, the energy curves at the
    deepest depth with their laws and references, the halving profiles."""
    seeds = list(config["seeds"])
    fig = plots.figure()
    plots.final_energy_vs_depth(fig.add_subplot(), summary, dataset)
    doc.heading(f"Figures on {dataset}")
    doc.figure(
        fig,
        f"Final-layer energy against depth on {dataset}"
        + (
            " (arithmetic mean over seeds, as the table above; band: min-max over seeds; the "
            "per-layer figure draws the geometric mean, lower where the seeds spread)"
            if len(seeds) > 1
            else f" (one seed, {seeds[0]})"
        ),
        f"final_energy_{file_stem(dataset)}.png",
    )
    deepest = max(config["depths"])
    part = metrics[(metrics["dataset"] == dataset) & (metrics["depth"] == deepest)]
    found = _comparison_curves(config, fits, dataset)
    anchor = _diffusion_anchor(found)
    curves, references = _deepest_curves(part, found, anchor)
    fig = plots.figure()
    plots.energy_curves(fig.add_subplot(), curves, references=references)
    doc.figure(
        fig,
        f"Per-layer Laplacian energy of the {deepest}-layer networks on {dataset} "
        + (
            "(geometric mean over seeds), log-log, with the fit of each verdict's law family "
            "(named law or not) where one was fitted (seeds pooled)"
            if len(seeds) > 1
            else f"(seed {seeds[0]}), log-log, with the fit of each verdict's law family "
            "(named law or not) where one was fitted"
        )
        + _reference_caption(
            references, anchor, next((c["record"] for c in found if c["label"] == anchor), None)
        ),
        f"energy_{file_stem(dataset)}.png",
    )
    halving_profile_section(
        doc, {c["label"]: c["record"] for c in found}, f"halving_{file_stem(dataset)}.png"
    )
    said = False  # the graph's prediction once, then each model's measured rate
    for curve in found:
        for sentence in reference_prose(curve["record"], curve["model"], graph=not said):
            doc.text(sentence)
        said = said or bool(curve["record"] and curve["record"].get("reference"))


def _fitted(record: dict | None) -> bool:
    """Whether the verdict of a fits.json record drew a law (its ``fit_curve``)."""
    found = verdict_record(record) or {}
    return bool((found.get("evidence") or {}).get("fit_curve"))


def _anchor_words(record: dict | None) -> str:
    """Where :func:`reference_lines` anchors the theory lines, in words."""
    found = verdict_record(record) or {}
    span = (found.get("evidence") or {}).get("late_window") or []
    return f"at the start of the late window (layer {span[0]})" if span else "at its first layer"


def _reference_caption(
    references: list[tuple[str, np.ndarray, np.ndarray]],
    anchor: str | None,
    record: dict | None = None,
) -> str:
    """The caption's words for the theory lines drawn (:func:`reference_lines`), only those."""
    drawn = []
    if any(label.startswith("linear diffusion") for label, _, _ in references):
        drawn.append(f"linear diffusion through the {anchor} curve {_anchor_words(record)}")
    if any("bound" in label for label, _, _ in references):
        # each through its own curve at that curve's own anchor: the anchor curve's layer,
        # said of both, was not the bound's (layer 44 for a bound through layer 49, an audit)
        drawn.append(
            "the nonlocal bound through each nonlocal curve at the start of that curve's own "
            "late window (its first layer where it has none)"
        )
    if not drawn:
        return ""
    return f"; {GREY_LINES}: {'; '.join(drawn)}"


def _deepest_curves(
    part: pd.DataFrame, found: list[dict], anchor: str | None
) -> tuple[list[dict], list[tuple[str, np.ndarray, np.ndarray]]]:
    """The energy curves of the deepest networks (``part`` of metrics.csv), one per
    :func:`_comparison_curves` entry that ran, as the geometric mean over seeds with its fit
    and float floor, and their theory lines (linear diffusion through ``anchor``'s only)."""
    curves, references = [], []
    for curve in found:
        rows = part[part["model"] == curve["model"]]
        if "conv" in rows:
            rows = rows[rows["conv"] == curve["conv"]]
        if rows.empty:
            continue
        mean = rows.groupby("layer")["laplacian_energy"].apply(_log_mean)
        floor = rows.groupby("layer")["float_floor"].max() if "float_floor" in rows else None
        references += reference_lines(
            curve["record"],
            mean.index.to_numpy(),
            mean.to_numpy(),
            diffusion=curve["label"] == anchor,
            algebraic=bound_applies(curve["model"]),
        )
        curves.append(
            {
                "label": curve["label"],
                "layers": mean.index.to_numpy(),
                "values": mean.to_numpy(),
                "fit": curve["record"],
                "floor": None if floor is None else floor.to_numpy(),
            }
        )
    return curves, references


def _diffusion_anchor(curves: list[dict]) -> str | None:
    """The label of the compare curve the diffusion reference line goes through: the
    ``diffusion`` model's own when it ran, else the first curve whose measured energy decays."""
    from oversmooth.registry import MODELS

    for curve in curves:
        if curve["model"] in MODELS and MODELS[curve["model"]].placement == "diffusion":
            return str(curve["label"])
    for curve in curves:
        ref = (curve["record"] or {}).get("reference") or {}
        if ((ref.get("diffusion") or {}).get("measured") or {}).get("decays"):
            return str(curve["label"])
    return None
