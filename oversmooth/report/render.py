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

import base64
import html
import json
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from oversmooth.outputs import atomic_folder, check_out, json_text, write_json
from oversmooth.report import plots

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from oversmooth.analysis import AnalysisResult, ComparisonResult

# atomic_folder and check_out are re-exported (their old home)
__all__ = [
    "default_out",
    "to_json",
    "write_analysis",
    "write_comparison",
    "render_report",
    "atomic_folder",
    "check_out",
]

DPI = 150
DELTA_BIC = "ΔBIC = BIC(pow) − BIC(exp)"
DELTA_BIC_NOTE = (
    f"{DELTA_BIC}: positive favours the exponential, negative the power law "
    "(least squares on log E; it ignores the correlation of residuals between "
    "layers, so the verdict does not rest on it)."
)


# ----------------------------------------------------------------------------- folders


def default_out(command: str, name: str, root: str | os.PathLike = "reports") -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"{command}-{name}-{stamp}"


def to_json(obj: Any) -> str:
    """Indented strict JSON with NaN/Inf as null (see :func:`oversmooth.outputs.json_text`)."""
    return json_text(obj, indent=2)


# ----------------------------------------------------------------------------- writers


def write_analysis(result: AnalysisResult, out: Path, overwrite: bool = False) -> Path:
    """Write an :class:`~oversmooth.analysis.AnalysisResult` and render its report."""
    import pandas as pd

    with atomic_folder(out, overwrite) as tmp:
        result.metrics.to_csv(tmp / "metrics.csv", index=False, float_format="%.10g")
        if result.similarity is not None:
            layers = result.similarity_layers or list(range(len(result.similarity)))
            pd.DataFrame(result.similarity, index=layers, columns=layers).to_csv(
                tmp / "similarity.csv", index_label="layer", float_format="%.8g"
            )
        if result.prune is not None:
            result.prune.to_csv(tmp / "prune.csv", index=False, float_format="%.10g")
        write_json(tmp / "fits.json", result.fits)
        write_json(
            tmp / "config.json",
            {**result.config, "environment": result.environment, "timings": result.timings},
        )
        render_report(tmp)
    return Path(out)


def write_comparison(result: ComparisonResult, out: Path, overwrite: bool = False) -> Path:
    """Write a :class:`~oversmooth.analysis.ComparisonResult` and render its report."""
    with atomic_folder(out, overwrite) as tmp:
        result.metrics.to_csv(tmp / "metrics.csv", index=False, float_format="%.10g")
        result.summary.to_csv(tmp / "summary.csv", index=False, float_format="%.10g")
        result.table.to_csv(tmp / "table.csv")
        write_json(tmp / "fits.json", result.fits)
        write_json(
            tmp / "config.json",
            {**result.config, "environment": result.environment, "timings": result.timings},
        )
        render_report(tmp)
    return Path(out)


# ----------------------------------------------------------------------------- rendering


def _figure(width: float = 6.0, height: float = 4.2) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _save(fig: Figure, path: Path) -> str:
    fig.savefig(path, dpi=DPI)
    fig.clf()
    return path.name


class _Doc:
    """Report content kept once, rendered to Markdown and to HTML."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.parts: list[tuple[str, Any]] = []

    def heading(self, text: str, level: int = 2) -> None:
        self.parts.append(("h", (level, text)))

    def text(self, text: str) -> None:
        self.parts.append(("p", text))

    def table(self, frame: pd.DataFrame, index: bool = False) -> None:
        self.parts.append(("t", (frame, index)))

    def image(self, name: str, caption: str) -> None:
        self.parts.append(("img", (name, caption)))

    def markdown(self) -> str:
        out = []
        for kind, payload in self.parts:
            if kind == "h":
                level, text = payload
                out.append("#" * level + " " + text)
            elif kind == "p":
                out.append(payload)
            elif kind == "t":
                frame, index = payload
                out.append(_md_table(frame, index))
            else:
                name, caption = payload
                out.append(f"![{caption}]({name})\n\n*{caption}*")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        body = []
        for kind, payload in self.parts:
            if kind == "h":
                level, text = payload
                body.append(f"<h{level}>{html.escape(text)}</h{level}>")
            elif kind == "p":
                body.append(f"<p>{html.escape(payload)}</p>")
            elif kind == "t":
                frame, index = payload
                body.append(
                    frame.to_html(
                        index=index,
                        border=0,
                        classes="table",
                        na_rep="",
                        float_format=lambda v: f"{v:.4g}",
                    )
                )
            else:
                name, caption = payload
                data = base64.b64encode((self.folder / name).read_bytes()).decode("ascii")
                body.append(
                    f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
                    f"<figcaption>{html.escape(caption)}</figcaption></figure>"
                )
        style = (
            "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem "
            "auto;padding:0 1rem;color:#222}"
            # tables wider than the page scroll sideways instead of overflowing it
            "table{border-collapse:collapse;font-size:.85rem;margin:1rem 0;display:block;"
            "overflow-x:auto;max-width:100%}"
            "td,th{padding:.2rem .6rem;border-bottom:1px solid #ddd;text-align:right}"
            "img{max-width:100%}figcaption{font-size:.85rem;color:#555}code{background:#f4f4f4}"
        )
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
        )


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def _md_table(frame: pd.DataFrame, index: bool = False) -> str:
    frame = frame.reset_index() if index else frame
    cols = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v) for v in row) + " |")
    return "\n".join(lines)


def _fit_table(fits: dict) -> pd.DataFrame:
    import pandas as pd

    rows = []
    for window in ("full", "tail"):
        record = fits.get(window) or {}
        for law in ("power", "exponential"):
            fit = record.get(law)
            if not fit:
                continue
            rows.append(
                {
                    "window": f"{window} (layers {record['span'][0]}-{record['span'][1]})",
                    "law": "C·k^α" if law == "power" else "C·e^(βk)",
                    "exponent": fit["exponent"],
                    "95% CI": f"[{fit['ci'][0]:.3g}, {fit['ci'][1]:.3g}]"
                    if fit["ci"][0] is not None
                    else "",
                    "R²": fit["r2"],
                    DELTA_BIC: record.get("delta_bic"),
                    "points": fit["n"],
                    "dropped": ", ".join(
                        f"{k} {v}" for k, v in record.get("dropped", {}).items() if v
                    )
                    or "none",
                }
            )
    return pd.DataFrame(rows)


def _evidence_table(record: dict | None) -> pd.DataFrame | None:
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
        ("seeds pooled", record.get("seeds")),
        ("usable layers", record.get("usable_layers")),
    ]
    counts = (record.get("dropped") or {}).items()
    dropped = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts if v)
    rows.append(("dropped rows", dropped or "none"))
    rate = record.get("rate")
    if rate:
        lo, hi = rate["interval"]
        value = f"{_fmt(rate['value'])} (95% interval {_fmt(lo)} to {_fmt(hi)})"
        rows.append((rate["name"].replace("_", " "), value))
    level = ev.get("level")
    for key, name in (
        ("change_decades", "fitted change, decades"),
        ("power_term_decades", "power-law term, decades"),
        ("exponential_term_decades", "exponential term, decades"),
    ):
        if ev.get(key) is not None:
            half = ev.get(key.replace("_decades", "_halfwidth"))
            label = f"{name} (± {level:.0%} half-width)" if level else name
            rows.append((label, f"{ev[key]:+.3g} ± {_fmt(half)}"))
    if ev.get("delta_bic") is not None:
        rows.append((DELTA_BIC, f"{ev['delta_bic']:.4g}"))
    if ev.get("uncertainty"):
        rows.append(("intervals from", ev["uncertainty"]))
    return pd.DataFrame({"item": [r[0] for r in rows], "value": [str(r[1]) for r in rows]})


def _log_mean(values: ArrayLike) -> float:
    """Geometric mean over seeds; NaN (not drawn) when any seed is zero, negative or non-finite."""
    v = np.asarray(values, dtype=np.float64)
    return float(np.exp(np.mean(np.log(v)))) if np.all(np.isfinite(v) & (v > 0)) else float("nan")


def render_report(folder: str | os.PathLike) -> Path:
    """(Re)build figures, ``report.md`` and ``report.html`` from the data files in ``folder``."""
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(
            f"{folder}: no config.json; expected a folder written by oversmooth analyze/compare"
        )
    config = json.loads(config_path.read_text())
    command = config.get("command")
    if command in ("analyze", "prune"):
        doc, title = _render_analysis(folder, config)
    elif command == "compare":
        doc, title = _render_comparison(folder, config)
    else:
        raise ValueError(f"{config_path}: unknown command {command!r}; expected analyze or compare")
    _environment_section(doc, config)
    (folder / "report.md").write_text(f"# {title}\n\n" + doc.markdown())
    (folder / "report.html").write_text(
        doc.html(title).replace("<body>\n", f"<body>\n<h1>{html.escape(title)}</h1>\n", 1)
    )
    return folder


def _environment_section(doc: _Doc, config: dict) -> None:
    import pandas as pd

    env = config.get("environment", {})
    timings = config.get("timings", {})
    doc.heading("Reproduce")
    settings = {k: v for k, v in config.items() if k not in ("environment", "timings")}
    doc.text("Configuration: " + json.dumps(settings, default=str))
    doc.heading("Environment")
    doc.table(
        pd.DataFrame(
            {
                "item": list(env) + [f"time: {k}" for k in timings],
                "value": [str(v) for v in env.values()] + [f"{v:.2f}" for v in timings.values()],
            }
        )
    )


def _render_analysis(folder: Path, config: dict) -> tuple[_Doc, str]:
    import pandas as pd

    metrics = pd.read_csv(folder / "metrics.csv")
    fits = json.loads((folder / "fits.json").read_text())
    verdict = fits.get("verdict", "")
    model, conv, depth, dataset = (
        config["model"],
        config["conv"],
        config["depth"],
        config["dataset"],
    )
    title = f"oversmooth analyze: {model} {conv.upper()}, depth {depth}, {dataset}"
    doc = _Doc(folder)
    doc.heading("Verdict")
    doc.text(verdict)
    mean_fit = fits.get("mean_over_seeds", {})
    doc.text(f"Classification: {mean_fit.get('classification')} — {mean_fit.get('reason', '')}.")
    evidence = _evidence_table(mean_fit.get("evidence"))
    if evidence is not None:
        doc.table(evidence)
    state = (
        f"on the trained checkpoint {config['checkpoint']}"
        if config.get("checkpoint")
        else "at initialisation over seeds " + ", ".join(str(s) for s in config["seeds"])
    )
    doc.text(
        f"Measured {state}; energies on the input graph (no self loops), Laplacian energy "
        "(1/n)·‖PX − X‖²_F with P = D⁻¹W, accumulated in float64."
    )

    curves: list[dict] = []
    for seed, part in metrics.groupby("seed"):
        curves.append(
            {
                "label": f"seed {seed}",
                "layers": part["layer"],
                "values": part["laplacian_energy"],
                "fit": fits.get("per_seed", {}).get(str(seed)) if len(curves) == 0 else None,
                "floor": part["float_floor"] if "float_floor" in part else None,
            }
        )
    fig = _figure()
    plots.energy_curves(fig.add_subplot(), curves)
    doc.heading("Laplacian energy per layer")
    doc.image(
        _save(fig, folder / "energy.png"),
        "Laplacian energy against layer, log-log, with the tail-window fits of the first seed",
    )
    fit_rows = _fit_table(fits.get("per_seed", {}).get(str(config["seeds"][0]), {}))
    if len(fit_rows):
        doc.table(fit_rows)
        doc.text(DELTA_BIC_NOTE)
    else:
        doc.text("No law was fitted: fewer than 3 layers have a positive, finite energy.")

    if "relative_energy" in metrics:
        fig = _figure()
        plots.relative_energy_curves(
            fig.add_subplot(),
            [
                {"label": f"seed {s}", "layers": p["layer"], "values": p["relative_energy"]}
                for s, p in metrics.groupby("seed")
            ],
        )
        doc.heading("Relative energy change")
        doc.image(
            _save(fig, folder / "relative_energy.png"),
            "|R(X^k)|, the curse-of-depth indicator, log-log",
        )
    if "cosine_prev" in metrics:
        fig = _figure()
        plots.cosine_curves(
            fig.add_subplot(),
            [
                {"label": f"seed {s}", "layers": p["layer"], "values": p["cosine_prev"]}
                for s, p in metrics.groupby("seed")
            ],
        )
        doc.image(_save(fig, folder / "cosine.png"), "Adjacent-layer cosine similarity")
    if (folder / "similarity.csv").is_file():
        sim = pd.read_csv(folder / "similarity.csv", index_col=0)
        fig = _figure(5.2, 4.6)
        plots.similarity_heatmap(
            fig.add_subplot(),
            sim.to_numpy(),
            [int(c) for c in sim.columns],
            f"seed {config['seeds'][0]}",
        )
        doc.heading("Inter-layer similarity")
        doc.image(
            _save(fig, folder / "similarity.png"),
            "sim(X^s, X^t) over all pairs of layers (first seed)",
        )
    if (folder / "prune.csv").is_file():
        prune = pd.read_csv(folder / "prune.csv")
        fig = _figure(6.0, 3.6)
        column = "accuracy_drop" if "accuracy_drop" in prune else "logits_change"
        plots.pruning_bars(
            fig.add_subplot(),
            prune["layer"],
            prune[column],
            "accuracy drop" if column == "accuracy_drop" else r"$\|Z_k - Z\|_F / \|Z\|_F$",
            log=column != "accuracy_drop",
        )
        doc.heading("Layer pruning sensitivity")
        doc.image(
            _save(fig, folder / "pruning.png"),
            "Test-accuracy drop when one layer is replaced by the identity"
            if column == "accuracy_drop"
            else "Relative change of the logits when one layer is replaced by the identity",
        )
        doc.table(prune)
    doc.heading("Per-layer table (excerpt)")
    first = metrics[metrics["seed"] == config["seeds"][0]]
    picks = sorted(
        {
            int(k)
            for k in [0, 1, 2] + [2**i for i in range(2, 20)] + [int(first["layer"].max())]
            if k <= first["layer"].max()
        }
    )
    doc.table(first[first["layer"].isin(picks)])
    doc.text("The full table is metrics.csv (one row per layer and seed).")
    return doc, title


def _render_comparison(folder: Path, config: dict) -> tuple[_Doc, str]:
    import pandas as pd

    metrics = pd.read_csv(folder / "metrics.csv")
    summary = pd.read_csv(folder / "summary.csv")
    table = pd.read_csv(folder / "table.csv", index_col=[0, 1])
    fits = json.loads((folder / "fits.json").read_text())
    title = f"oversmooth compare: {', '.join(config['models'])} ({config['conv'].upper()})"
    doc = _Doc(folder)
    doc.heading("Final-layer Laplacian energy at initialisation")
    doc.text(
        f"Mean ± std over seeds {', '.join(str(s) for s in config['seeds'])}; "
        "the layout of the seed paper's Tables 2, 4 and 6."
    )
    doc.table(table, index=True)
    doc.heading("Verdicts at the deepest depth")
    for key, record in fits.items():
        doc.text(record.get("verdict", key))
    doc.text(DELTA_BIC_NOTE)
    deepest = max(config["depths"])
    for dataset in config["datasets"]:
        fig = _figure()
        plots.final_energy_vs_depth(fig.add_subplot(), summary, dataset)
        doc.heading(f"{dataset}")
        doc.image(
            _save(fig, folder / f"final_energy_{dataset}.png"),
            f"Final-layer energy against depth on {dataset} (band: min-max over seeds)",
        )
        part = metrics[(metrics["dataset"] == dataset) & (metrics["depth"] == deepest)]
        curves = []
        for model in config["models"]:
            rows = part[part["model"] == model]
            mean = rows.groupby("layer")["laplacian_energy"].apply(_log_mean)
            floor = rows.groupby("layer")["float_floor"].max() if "float_floor" in rows else None
            curves.append(
                {
                    "label": model,
                    "layers": mean.index.to_numpy(),
                    "values": mean.to_numpy(),
                    "fit": fits.get(f"{dataset}/{model}"),
                    "floor": None if floor is None else floor.to_numpy(),
                }
            )
        fig = _figure()
        plots.energy_curves(fig.add_subplot(), curves)
        doc.image(
            _save(fig, folder / f"energy_{dataset}.png"),
            f"Per-layer Laplacian energy of the {deepest}-layer networks on {dataset} "
            "(geometric mean over seeds), log-log, with tail fits",
        )
    return doc, title
