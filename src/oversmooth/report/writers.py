"""Reports of ``oversmooth train`` and ``oversmooth bench``, built with
:class:`~oversmooth.report.document.Document` (figures from :mod:`oversmooth.report.plots`).

Each writer takes the numbers its command computed and writes ``report.md``,
``report.html`` and the figures into an existing folder; the commands write their data
files themselves.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterable, Mapping, Sequence

from oversmooth.config import upgrade_record
from oversmooth.report import plots
from oversmooth.report.document import MISSING, Document, counted
from oversmooth.report.formats import DEFAULT_FIGURE_FORMATS, DEFAULT_TABLE_FORMATS, write_beside
from oversmooth.report.prose import conv_label
from oversmooth.report.render import rebuilt_note, reproduce_sections

__all__ = ["write_training_report", "write_bench_report", "training_settings"]


def _pct(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return f"{100 * value:.2f}%"


def write_training_report(
    folder: str | Path,
    history: Sequence[Mapping],
    best_epoch: int,
    summary: Mapping[str, Any],
    dynamics: Sequence[Mapping] | None = None,
    *,
    figure_formats: Iterable[str] = DEFAULT_FIGURE_FORMATS,
    table_formats: Iterable[str] = DEFAULT_TABLE_FORMATS,
) -> Path:
    """``training.png`` (loss and accuracy against the epoch), ``report.md`` and
    ``report.html`` for a finished training run in ``folder`` (its ``config.json`` names the
    model when present).  With ``dynamics`` (rows of ``dynamics.csv``: ``epoch``, ``layer``,
    ``laplacian_energy``) also ``dynamics.png``: log10 energy per layer and epoch, and the
    final layer's energy against the epoch.  ``figure_formats`` adds SVG/PDF copies of the
    figures; ``table_formats`` a ``.parquet`` copy of ``history.csv`` and ``dynamics.csv``
    (which the run itself writes, as CSV)."""
    import pandas as pd

    folder = Path(folder)
    if not history:
        raise ValueError(f"{folder}: no training history to report; train for at least one epoch")
    config = _training_config(folder)
    found = config.get("model")
    model: dict = found if isinstance(found, dict) else {}
    doc = Document(_training_title(config.get("dataset"), model))
    _training_result(doc, history, best_epoch, summary)
    _training_curves(doc, history, best_epoch)
    if dynamics:
        _dynamics_section(doc, dynamics, best_epoch)
    doc.text("Per-epoch numbers: `history.csv`; the result: `summary.json`.")
    if config:
        _training_configuration(doc, config, model, summary)
    write_beside(pd.DataFrame(list(history)), folder / "history.csv", table_formats)
    if dynamics:
        write_beside(pd.DataFrame(list(dynamics)), folder / "dynamics.csv", table_formats)
    return doc.write(folder, figure_formats)


def _training_config(folder: Path) -> dict:
    """The run's ``config.json`` in today's layout (its ``train`` record); empty without one."""
    if not (folder / "config.json").is_file():
        return {}
    loaded = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return upgrade_record(loaded.get("train", loaded)) if isinstance(loaded, dict) else {}


def _training_result(
    doc: Document, history: Sequence[Mapping], best_epoch: int, summary: Mapping[str, Any]
) -> None:
    """How the run ended, and the accuracy of each split at the best epoch."""
    import pandas as pd

    doc.heading("Result")
    ran = summary.get("epochs_run", len(history))
    doc.text(
        f"{summary.get('stopped', 'stopped')} after {counted(ran, 'epoch')}; best validation "
        f"accuracy at epoch {best_epoch}."
    )
    doc.table(
        pd.DataFrame(
            {
                "split": ["train", "validation", "test"],
                "accuracy at the best epoch": [
                    _pct(summary.get(k)) for k in ("train_acc", "val_acc", "test_acc")
                ],
            }
        )
    )


def _training_curves(doc: Document, history: Sequence[Mapping], best_epoch: int) -> None:
    """Loss and accuracy against the epoch (``training.png``)."""
    fig = plots.figure(9.6, 3.8)
    ax_loss, ax_acc = fig.subplots(1, 2)
    plots.training_history(ax_loss, ax_acc, history, best_epoch)
    doc.heading("Training curves")
    doc.figure(
        fig,
        "Cross-entropy (log scale when it spans more than a decade) and accuracy (%) per epoch; "
        "the dashed line marks the epoch with the best validation accuracy (ties: the lower "
        "validation loss), whose weights are `best.pt`",
        "training.png",
    )


def _training_configuration(
    doc: Document, config: Mapping[str, Any], model: Mapping[str, Any], summary: Mapping[str, Any]
) -> None:
    """Every setting of the run, then *Reproduce* and *Environment* (with the run's time)."""
    settings = {k: v for k, v in config.items() if k != "model"}
    settings.update({f"model.{k}": v for k, v in model.items()})  # one row per field
    doc.heading("Configuration")
    doc.text(
        "Every setting as the run used it; *(default)* marks a value the run worked out itself "
        "because the option was not given (one that depends on other settings, such as the "
        "learning rate on the model); other settings not given show their fixed default "
        "unmarked."
    )
    doc.table(training_settings(settings))
    seconds = summary.get("seconds_this_run")
    # a resumed run timed only what ran since it was resumed: said so ("time: training since
    # resumed"), not as the whole training's time (an audit)
    key = "training_since_resumed_s" if summary.get("resumed") else "training_s"
    timings = {key: seconds} if isinstance(seconds, (int, float)) else {}
    reproduce_sections(doc, {**config, "timings": config.get("timings") or timings})


def _training_title(dataset: Any, model: Mapping[str, Any]) -> str:
    if not model.get("name"):
        return "oversmooth train"
    name = str(model["name"])
    what = f"{name} {conv_label(name, str(model.get('conv', 'san')))}"
    if "depth" in model:
        what += f", depth {model['depth']}"
    if dataset:
        what += f", {dataset}"
    return f"oversmooth train: {what}"


# a training setting left to its default (None) -> the config.json key of the value it resolved to
_RESOLVED = {
    "lr": "learning_rate",
    "warmup": "warmup_epochs",
    "probe_every": "probe_interval",
    "model.ffn": "ffn_channels",
    "device": "device_resolved",
}
_NOT_SETTINGS = {"command", "environment", "timings", "digests", *_RESOLVED.values()}


def _setting(key: str, value: Any, config: Mapping[str, Any]) -> str:
    resolved = config.get(_RESOLVED.get(key, ""))
    if key == "patience" and value is None:
        return "off (no early stopping)"
    if key == "probe_every" and (value == 0 or resolved == 0):
        return "0 (off: no dynamics.csv)"
    if key == "device" and resolved is not None and resolved != value:
        return f"{value} ({resolved})"
    if value is None and resolved is not None:
        return f"{resolved:g} (default)" if isinstance(resolved, float) else f"{resolved} (default)"
    if key == "model.ffn" and value is None:
        # a run written before ffn_channels was recorded: its FFN was the default, 2 x hidden
        # ("—" read as no FFN at all: an audit)
        hidden = config.get("model.hidden")
        width = f"{2 * hidden} = " if isinstance(hidden, int) else ""
        return f"{width}2 x hidden (default)"
    if key == "data_root" and value is None:
        return "not given"
    return MISSING if value is None else str(value)


def training_settings(config: Mapping[str, Any]) -> Any:
    """The settings of a training run's ``config.json`` as a setting/value table, each with the
    value the run used: a setting left to its default (``lr``, ``warmup``, ``probe_every``,
    ``ffn``: None in config.json) shows what it resolved to, marked *(default)*, so the table
    never says ``None`` beside the number that was used."""
    import pandas as pd

    keys = [k for k in config if k not in _NOT_SETTINGS]
    return pd.DataFrame({"setting": keys, "value": [_setting(k, config[k], config) for k in keys]})


def _dynamics_section(doc: Document, dynamics: Sequence[Mapping], best_epoch: int) -> None:
    import pandas as pd

    frame = pd.DataFrame(list(dynamics))
    grid = frame.pivot(index="layer", columns="epoch", values="laplacian_energy").sort_index()
    final = grid.iloc[-1]
    fig = plots.figure(10.4, 3.8)
    ax_map, ax_final = fig.subplots(1, 2)
    plots.energy_dynamics_heatmap(ax_map, grid.columns, grid.index, grid.to_numpy())
    plots.energy_against_epoch(ax_final, final.index, final.to_numpy(), f"layer {grid.index[-1]}")
    ax_final.axvline(
        best_epoch, color="grey", ls="--", lw=0.8, label=f"best val (epoch {best_epoch})"
    )
    ax_final.legend(fontsize=8)
    doc.heading("Energy dynamics")
    doc.figure(
        fig,
        "Left: log10 Laplacian energy of every layer at the recorded epochs; right: the final "
        "layer's energy against the epoch. Measured on the eval-mode, no-grad forward that "
        "scores each recorded epoch (no dropout), after that epoch's update",
        "dynamics.png",
    )
    doc.text(
        f"{counted(grid.shape[1], 'recorded epoch')} x {counted(grid.shape[0], 'layer')}; "
        "per-layer numbers: "
        "`dynamics.csv`."
    )


def _cost_cells(row: Mapping[str, Any]) -> dict[str, str]:
    """A scaling row's time and extra peak memory, or the error that stopped it."""
    if "error" in row:
        return {"seconds": f"error: {row['error']}", "extra peak MiB": MISSING}
    return {"seconds": f"{row['seconds']:.3f}", "extra peak MiB": f"{row['peak_mib']:.1f}"}


def _bench_depth_table(rows: Sequence[Mapping]) -> Any:
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "depth": d["depth"],
                "similarity": "on" if d["similarity"] else "off",
                **_cost_cells(d),
            }
            for d in rows
        ]
    )


def _bench_size_table(rows: Sequence[Mapping]) -> Any:
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "nodes": f"{s['nodes']:,}",
                **_cost_cells(s),
                "whole-process peak MiB": _num(s.get("process_peak_mib"), ".0f"),
            }
            for s in rows
        ]
    )


def _num(value: Any, spec: str, unit: str = "") -> str:
    """``value`` formatted with ``spec``; a dash for None (NaN read back from JSON) or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return f"{value:{spec}}{unit}"


def _plain(text: str) -> str:
    """A table cell: the HTML of a table shows text as is, so no Markdown code marks."""
    return text.replace("`", "")


def _bench_targets_table(rows: Sequence[Mapping]) -> Any:
    import pandas as pd

    return pd.DataFrame(
        [
            {
                # the status beside the measure: last, it sat off a phone's screen (an audit)
                "measure": _plain(t["measure"]),
                "status": t["status"],
                "measured": _plain(t["measured"]),
                "target": t["target"],
                "reason": _plain(t["reason"] or ""),
            }
            for t in rows
        ]
    )


def _bench_end_to_end(doc: Document, r: Mapping[str, Any]) -> None:
    """Section 4: the main command in fresh processes, and where its CPU time goes."""
    import pandas as pd

    if "end_to_end" not in r:
        return
    e = r["end_to_end"]
    doc.heading("End to end")
    if "error" in e:
        doc.text(f"`{e['command']}` failed: {e['error']}")
        return
    doc.text(
        f"`{e['command']}` in a fresh process (imports, embedded Cora, probe, fits, "
        f'similarity, figures, report) against `python -c "import torch"`, {e["pairs"]} '
        f"interleaved pairs. CPU time: **{e['cpu_s']:.2f} s** against "
        f"{e['import_torch_cpu_s']:.2f} s, median ratio **{e['ratio']:.2f}x**; wall time: "
        f"{e['seconds']:.2f} s against {e['import_torch_s']:.2f} s ({e['wall_ratio']:.2f}x). "
        f"Peak memory {e['peak_bytes'] / 2**20:.0f} MiB; forward + probe "
        f"{e['forward_s']:.2f} s wall; {e['after_report_s']:.2f} s wall from the report's "
        "last file to the process's end. Where the command's CPU time goes (median pair):"
    )
    split, total, unit = e["split_cpu_s"], e["cpu_s"], "CPU seconds"
    doc.table(
        pd.DataFrame(
            {
                "part": list(split),
                unit: [f"{v:.2f}" for v in split.values()],
                "share": [f"{100 * v / total:.0f}%" for v in split.values()],
            }
        )
    )
    doc.text("It printed:")
    doc.code(e["verdict"])


def _bench_startup(doc: Document, r: Mapping[str, Any]) -> None:
    """Start-up: ``--version``, ``--help`` and every command's ``--help``."""
    import pandas as pd

    if "startup" not in r:
        return
    st = r["startup"]
    doc.heading("Start-up")
    if "error" in st:
        doc.text(f"Not measured: {st['error']}")
        return
    doc.text(
        "Each case in a fresh process (as the `oversmooth` script starts it), all the cases in "
        f"turn {st['repeats']} times; wall seconds, median of each. Help is built without "
        "importing torch."
    )
    seconds = st["seconds"]
    doc.table(
        pd.DataFrame(
            {
                "command": [f"oversmooth {case}" for case in seconds],
                "seconds": [f"{v:.2f}" for v in seconds.values()],
            }
        )
    )


def write_bench_report(
    folder: str | Path,
    r: Mapping[str, Any],
    figure_formats: Iterable[str] = DEFAULT_FIGURE_FORMATS,
) -> Path:
    """``scaling_depth.png``, ``scaling_size.png``, ``report.md`` and ``report.html`` for the
    results of :func:`oversmooth.experiments.bench.run_bench`, opening with the table of
    targets; the figures also in each further format of ``figure_formats``."""
    folder = Path(folder)
    doc = Document(
        "oversmooth bench: speed and memory targets" + (" (quick run)" if r["quick"] else "")
    )
    for section in (
        _bench_intro,
        _bench_overhead,
        _bench_kernels,
        _bench_scaling,
        _bench_precision,
        _bench_sweep,
        _bench_end_to_end,
        _bench_startup,
        _bench_section_times,
    ):
        section(doc, r)
    return doc.write(folder, figure_formats)


def _bench_intro(doc: Document, r: Mapping[str, Any]) -> None:
    """Where and how the run was made, and the table of targets."""
    m = r["machine"]
    doc.text(
        f"Generated by `oversmooth bench{' --quick' if r['quick'] else ''}` in {r['seconds']:.0f} "
        f"s on {m.get('cpu_model') or m.get('processor')} ({m['cpu_count']} cores, "
        f"{m['torch_threads']} torch threads), device {m['device']}, torch {m['torch']}, "
        f"torch_geometric {m['torch_geometric']}, oversmooth {m['oversmooth']} (commit "
        f"`{m.get('git_commit') or 'n/a'}`), results schema {r.get('schema_version', MISSING)}. "
        "Times are medians after a warm-up run; ratios compare runs interleaved in one process "
        "(or, end to end, fresh processes in the same run)." + rebuilt_note(m)
    )
    if "gpu" in r:
        doc.text(
            f"A GPU was present ({m.get('cuda_device', 'CUDA')}); the numbers are from device "
            f"{m['device']}."
            if r["gpu"]
            else "No GPU was lent to this run: GPU numbers are not measured."
        )
    if r["quick"]:
        doc.text(
            "**Quick run**: tiny models and graphs, a smoke test of every measurement; the "
            "statuses below say nothing about the targets, which refer to the full sizes."
        )
    if "targets" in r:
        rows = r["targets"]
        met = sum(t["status"] == "met" for t in rows)
        doc.heading("Targets")
        doc.text(
            f"{met} of {len(rows)} targets met. Each row is measured in this run; a missed row "
            "gives the numbers behind it."
        )
        doc.table(_bench_targets_table(rows))


def _bench_overhead(doc: Document, r: Mapping[str, Any]) -> None:
    """Section 1: the default probe's cost on a bare forward."""
    import pandas as pd

    po = r["probe_overhead"]
    doc.heading("Probe overhead")
    doc.text(
        f"Depth-{po['depth']} Post-LN SAN on Cora, bare forward against forward with the default "
        "probe (Laplacian and Dirichlet energy, relative energy, adjacent cosine, feature norm), "
        f"{po['repeats']} interleaved repeats:"
    )
    doc.table(
        pd.DataFrame(
            [
                {
                    "bare forward": f"{po['bare_s']:.3f} s",
                    "probed forward": f"{po['probed_s']:.3f} s",
                    "ratio": f"{po['ratio']:.2f}x",
                }
            ]
        )
    )


def _kernel_row(k: Mapping[str, Any]) -> dict[str, Any]:
    """One metric on one graph: oversmooth's time against the loop's and the dense code's."""
    dense = not k["dense_note"]  # else the note says why the dense code did not run
    return {
        "graph": k["graph"],
        "nodes": f"{k['nodes']:,}",
        "edges": f"{k['edges']:,}",
        "metric": k["metric"],
        "oversmooth": f"{k['oversmooth_s'] * 1e3:.2f} ms",
        "loop": f"{k['loop_s'] * 1e3:.0f} ms",
        "loop speed-up": f"{k['loop_speedup']:.0f}x",
        "loop rel. diff": f"{k['loop_rel_diff']:.1e}",
        "dense": f"{k['dense_s'] * 1e3:.1f} ms" if dense else k["dense_note"],
        "dense speed-up": f"{k['dense_speedup']:.0f}x" if dense else MISSING,
        "dense rel. diff": f"{k['dense_rel_diff']:.1e}" if dense else MISSING,
    }


def _model_cell(k: Mapping[str, Any]) -> str:
    """A bench row's model, e.g. ``postln SAN, depth 64``."""
    return f"{k['model']} {k['conv'].upper()}, depth {k['depth']}"


def _kernel_ratio_row(k: Mapping[str, Any]) -> dict[str, Any]:
    """One model's bare forward with the default message-passing kernel against ``edge``."""
    return {
        "model": _model_cell(k),
        "dtype": k["dtype"],
        f"default ({k['default_kernel']})": f"{k['default_s']:.3f} s",
        "edge": f"{k['edge_s']:.3f} s",
        "ratio": f"{k['ratio']:.2f}x",
        "no message passing": _num(k.get("projections_s"), ".3f", " s"),
        "max rel. diff": f"{k['max_rel_diff']:.1e}",
        "tolerance": f"{k['tolerance']:.1e}",
    }


def _pyg_row(k: Mapping[str, Any]) -> dict[str, Any]:
    """One zoo model against the same stack built from PyG layers."""
    return {
        "model": _model_cell(k),
        "PyG layer": k["pyg_layer"],
        "zoo": f"{k['zoo_s']:.3f} s",
        "PyG": f"{k['pyg_s']:.3f} s",
        "ratio": f"{k['ratio']:.2f}x",
    }


def _baseline_row(k: Mapping[str, Any]) -> dict[str, Any]:
    """One metric function against the one-line tensor expression a user would write."""
    return {
        "graph": k["graph"],
        "metric": k["metric"],
        "one-liner": k["one_liner"],
        "oversmooth": f"{k['oversmooth_s'] * 1e3:.3f} ms",
        "one-liner time": f"{k['one_liner_s'] * 1e3:.3f} ms",
        "ratio": f"{k['ratio']:.2f}x",
        "rel. diff": f"{k['rel_diff']:.1e}",
    }


# the further tables of section 2, each shown when results.json has its rows: the key, the
# heading, the introduction (filled in from the first row) and the table's row of one result
_KERNEL_TABLES: tuple[tuple[str, str, str, Callable[[Mapping[str, Any]], dict]], ...] = (
    (
        "kernel_ratios",
        "Default kernel against the edge kernel",
        "Bare forward (no probe) on Cora, {repeats} interleaved repeats; the default "
        "message-passing kernel is `{default_kernel}`, the reference is `edge` (the "
        "implementation of commit 340f7a9). Max rel. diff: largest |default - edge| over the "
        "largest |edge| of the outputs. No message passing: the same forward with every "
        "message-passing operator reduced to its projections (W V X), the part of the time no "
        "kernel changes.",
        _kernel_ratio_row,
    ),
    (
        "pyg_ratios",
        "The zoo against PyG layers",
        "Bare forward (no probe, float32) on Cora, {repeats} interleaved repeats: the zoo's "
        "Post-LN model against the same stack built from PyTorch Geometric layers "
        "(TransformerConv or GATConv and the output projection, or GCNConv with cached=True; "
        "LayerNorm and FFN as in the zoo), same depth and sizes.",
        _pyg_row,
    ),
    (
        "metric_baselines",
        "Metric kernels against one-liners",
        "oversmooth's function against the float64 one-line tensor expression a user would "
        "write (`s`, `d`: the edge list; `inv`, `has`: inverse in-degree and its mask, built "
        "once like oversmooth's GraphOperator; `y`: a second state; `e`: 256 energies), "
        "32 channels, {repeats} interleaved repeats.",
        _baseline_row,
    ),
)


def _bench_kernels(doc: Document, r: Mapping[str, Any]) -> None:
    """Section 2: metric kernels against loops, dense code, the edge kernel and one-liners."""
    import pandas as pd

    doc.heading("Metric kernels against the alternatives")
    doc.text(
        "`loop`: a per-node Python loop over adjacency lists (numpy rows), the way public "
        "oversmoothing code computes them; `dense`: an n x n float64 implementation. Relative "
        "differences are against oversmooth's value."
    )
    doc.table(pd.DataFrame([_kernel_row(k) for k in r["kernels"]]))
    for key, heading, introduction, row in _KERNEL_TABLES:
        if r.get(key):
            doc.heading(heading)
            doc.text(introduction.format(**r[key][0]))
            doc.table(pd.DataFrame([row(k) for k in r[key]]))


def _bench_scaling(doc: Document, r: Mapping[str, Any]) -> None:
    """Section 3: time and extra peak memory against depth and graph size."""
    doc.heading("Scaling")
    _depth_scaling(doc, r)
    _size_scaling(doc, r)


def _depth_scaling(doc: Document, r: Mapping[str, Any]) -> None:
    """Time and extra peak memory against depth, with and without the similarity matrix."""
    doc.text(
        "Time per probed forward against depth (Cora, depths >= 32, where the fixed cost of "
        "encoder and decoder no longer dominates): "
        f"fitted exponent **{_num(r['depth_exponent'], '.2f')}**. Extra peak memory of depths "
        ">= 32 with the similarity matrix off varies by a factor "
        f"{_num(r['depth_memory_ratio'], '.2f')} between the smallest and the largest "
        "(1 means independent of depth)."
    )
    doc.table(_bench_depth_table(r["depth"]))
    fig = plots.figure(10, 3.8)
    ax_t, ax_m = fig.subplots(1, 2)
    plots.cost_curves(
        ax_t,
        ax_m,
        [
            (
                "with similarity matrix" if sim else "default metrics",
                [d for d in r["depth"] if d["similarity"] == sim],
            )
            for sim in (False, True)
        ],
        "depth",
        "depth (Post-LN SAN on Cora)",
        base=2,
    )
    doc.figure(fig, "Scaling in depth: time and extra peak memory", "scaling_depth.png")


def _size_scaling(doc: Document, r: Mapping[str, Any]) -> None:
    """Time, extra peak memory and whole-process peak against the graph's size."""
    doc.text(
        "Time per probed forward (depth 4) against graph size "
        "(CSBM, average degree 10, every size measured): fitted exponent "
        f"**{_num(r['size_exponent'], '.2f')}**. Extra peak: the probed forward alone (float32 "
        "model, one seed, no similarity matrix), above what was resident before it; "
        "whole-process peak: the maximum resident set of `oversmooth analyze --dataset "
        "csbm:n=N,degree=10 --depth 4` in a fresh process (float64, five seeds, similarity "
        "matrix, report)."
    )
    doc.table(_bench_size_table(r["size"]))
    fig = plots.figure(10, 3.8)
    ax_t, ax_m = fig.subplots(1, 2)
    plots.cost_curves(
        ax_t, ax_m, [(None, r["size"])], "nodes", "nodes (CSBM, average degree 10, depth 4)"
    )
    doc.figure(fig, "Scaling in graph size: time and extra peak memory", "scaling_size.png")


def _bench_precision(doc: Document, r: Mapping[str, Any]) -> None:
    """float64 against float32: bare forward and the analysis."""
    import pandas as pd

    if "precision" in r:
        p = r["precision"]
        doc.heading("Precision: float64 against float32")
        doc.text(
            f"Depth-{p['depth']} Post-LN SAN on Cora, {p['repeats']} interleaved repeats. "
            "Analysis: probed forward plus the float-floor estimate of `oversmooth analyze` "
            "(float32: a float64 shadow; float64, the default: a float64 twin)."
        )
        doc.table(
            pd.DataFrame(
                [
                    {
                        "": "bare forward",
                        "float32": f"{p['float32_bare_s']:.3f} s",
                        "float64": f"{p['float64_bare_s']:.3f} s",
                        "ratio": f"{p['forward_ratio']:.2f}x",
                    },
                    {
                        "": "analysis (probe + floor)",
                        "float32": f"{p['float32_shadow_s']:.3f} s",
                        "float64": f"{p['float64_twin_s']:.3f} s",
                        "ratio": f"{p['analysis_ratio']:.2f}x",
                    },
                ]
            )
        )


def _bench_sweep(doc: Document, r: Mapping[str, Any]) -> None:
    """Sweep throughput with one and two workers."""
    import pandas as pd

    if "sweep" in r:
        sw = r["sweep"]
        doc.heading("Sweep workers")
        doc.text(
            f"`oversmooth sweep` of {', '.join(sw['models'])} x depths "
            f"{', '.join(map(str, sw['depths']))} x seeds {', '.join(map(str, sw['seeds']))} on "
            f"{sw['dataset']} (init mode), with 1 worker and with 2, each into a fresh folder"
            + (
                f", in {len(sw['ratios'])} interleaved pairs (ratio: the median of "
                + ", ".join(f"{x:.2f}x" for x in sw["ratios"])
                + ")"
                if len(sw.get("ratios", ())) > 1
                else ""
            )
            + ". Cell time: from the sweep's start (workers not yet started) to its last "
            "cell; the merge into tables and reports is timed apart. Workers are forked from "
            "a fork server that has the heavy imports done; it starts once per process, "
            "before both runs here"
            + (
                f" ({sw['server_start_s']:.1f} s; paid by both runs, the ratio would be "
                f"{_num(sw.get('cold_ratio'), '.2f')}x)."
                if "server_start_s" in sw
                else "."
            )
        )
        doc.table(
            pd.DataFrame(
                [
                    {
                        **({"pair": w["pair"] + 1} if "pair" in w else {}),
                        "workers": w["workers"],
                        "cells": w["cells"],
                        "failed": w["failed"],
                        "cell time": _num(w["cells_s"], ".1f", " s"),
                        "cells per second": _num(w["cells_per_s"], ".2f"),
                        "median cell": _num(w.get("cell_median_s", math.nan), ".2f", " s"),
                        "merge": _num(w["merge_s"], ".1f", " s"),
                    }
                    for w in sw["runs"]
                ]
            )
        )
        if "steady_ratio" in sw:
            doc.text(
                "Median cell: a cell's own time in its worker. In the median pair, two cells "
                "side by side run "
                f"{sw['steady_ratio']:.2f}x as many cells per second as one alone; each run "
                f"spends {sw['fixed_s']:.2f} s outside its cells (starting its workers) and "
                f"{sw.get('warmup_s', math.nan):.2f} s more on a worker's first cell."
            )


def _bench_section_times(doc: Document, r: Mapping[str, Any]) -> None:
    """Seconds each section of the bench took."""
    import pandas as pd

    if r.get("section_s"):
        doc.heading("Time per section")
        doc.table(
            pd.DataFrame(
                {
                    "section": list(r["section_s"]),
                    "seconds": [f"{v:.0f}" for v in r["section_s"].values()],
                }
            )
        )
