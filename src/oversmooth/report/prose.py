"""Verdict prose built from the numbers in ``fits.json``, at render time.

``fits.json`` records, per curve, the verdict label and its numeric evidence
(:meth:`oversmooth.verdict.Verdict.to_dict` under ``"evidence"``).  :func:`verdict_prose`
turns those numbers into the sentence the report shows, so re-rendering a folder
(``oversmooth report DIR``) rebuilds the text from the data.  A record written before the
numbers were stored falls back to its frozen ``"verdict"`` string.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any
from collections.abc import Mapping, Sequence

from oversmooth.registry import DISPLAY
from oversmooth.verdict import sentence

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "PRETTY",
    "comparison_key",
    "curve_title",
    "energy_table",
    "reference_prose",
    "verdict_prose",
    "verdict_record",
]

PRETTY = DISPLAY  # model name -> display name (``Post-LN``), read from the model registry


def conv_label(model: str, conv: str) -> str:
    """What propagates in ``model``: ``SAN`` for the zoo, ``P = GCN mean`` for the
    ``diffusion`` model (which ignores ``conv``)."""
    from oversmooth.registry import MODELS

    if model in MODELS and MODELS[model].placement == "diffusion":
        return "(P = GCN mean)"
    return conv.upper()


def curve_title(model: str, conv: str, depth: int, dataset: str, trained: bool = False) -> str:
    """The prefix of a verdict line: ``Post-LN SAN, 256 layers on cora`` (+ `` (trained)``)."""
    title = f"{PRETTY.get(model, model)} {conv_label(model, conv)}, {depth} layers on {dataset}"
    return title + (" (trained)" if trained else "")


def verdict_record(record: Mapping[str, Any] | None) -> dict | None:
    """The numeric verdict (``Verdict.to_dict()``) inside a fits.json record, or None."""
    if not record:
        return None
    found = record.get("evidence")
    if isinstance(found, dict) and isinstance(found.get("label"), str):
        return found
    return None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _interval(pair: Any, fmt: str) -> str | None:
    if not isinstance(pair, (list, tuple)) or len(pair) != 2:
        return None
    lo, hi = _num(pair[0]), _num(pair[1])
    if lo is None or hi is None:
        return None
    if fmt == ".2f":
        return f"{lo:.2f} to {hi:.2f}"
    return f"{format(lo, fmt)}-{format(hi, fmt)}"


def _body(found: Mapping[str, Any]) -> str | None:
    """The verdict's sentence from its numbers (:func:`oversmooth.verdict.sentence`, the one
    function the verdict's own summary comes from); None for a record whose numbers are not
    those of this version (the frozen text is used instead)."""
    try:
        return sentence(found)
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def verdict_prose(record: Mapping[str, Any] | None, title: str | None = None) -> str:
    """The verdict sentence of one fits.json record, built from its numbers.

    ``record`` is a fits.json entry (``mean_over_seeds`` of analyze, ``DATASET/MODEL`` of
    compare); ``title`` prefixes the sentence.  Without numeric evidence (a folder written by an
    older version) the record's stored ``"verdict"`` text is returned as it is.
    """
    record = record or {}
    found = verdict_record(record)
    body = _body(found) if found else None
    if found is None or body is None:
        frozen = record.get("verdict")
        if isinstance(frozen, str) and frozen:
            return frozen
        return f"{title}: no verdict recorded" if title else "no verdict recorded"
    pieces = [body]
    final = _num(found.get("final_energy"))
    dtype = record.get("dtype") or "float32"
    if found.get("final_at_floor") and final is not None:
        f64 = _num(record.get("float64_final_energy"))
        tail = (
            f"float64 gives {f64:.2g}"
            if f64 is not None
            else "rerun with --dtype float64"
            if dtype != "float64"
            else "the curve is below what float64 resolves"
        )
        pieces.append(
            f"final energy {final:.2g} is at the {dtype} floor (those layers are left out of the "
            f"fit); {tail}"
        )
    elif final is not None:
        pieces.append(f"final energy {final:.2g}")
    return (f"{title}: " if title else "") + "; ".join(pieces)


def _diffusion_sentence(ref: Mapping[str, Any], name: str, graph: bool = True) -> str | None:
    operator = "X ← P̃X, P̃ = D̃⁻¹Ã the GCN mean with self loops"
    if not ref.get("computed"):
        reason = ref.get("reason")
        if not reason or not graph:
            return None
        return (
            f"The spectral prediction of linear diffusion ({operator}) was not computed: {reason}."
        )
    ratio, steps = _num(ref.get("energy_ratio")), _num(ref.get("halving_steps"))
    if ratio is None:
        return None
    parts = int(ref.get("num_components") or 1)
    where = (
        f"the slowest of its {parts} components, {ref.get('slowest_nodes')} nodes"
        if parts > 1
        else "its one component"
    )
    decays = ratio < 1.0 and steps is not None
    if not decays:
        head = (
            f"Linear diffusion on this graph ({operator}) does not drive the energy to zero "
            f"(per-step ratio {ratio:.4g}, {where})"
        )
    else:
        head = (
            f"Linear diffusion on this graph ({operator}) halves the energy every {steps:.3g} "
            f"steps (per-step ratio {ratio:.6g} = SLEM², {where})"
        )
    measured = ref.get("measured") or {}
    halving = _num(measured.get("halving_layers"))
    span = measured.get("span") or []
    late = measured.get("source") == "late"
    kind = "late rate, slope of log E" if late else "tail-window exponential fit"
    where_fit = f"{kind}, layers {span[0]}-{span[1]}" if len(span) == 2 else kind
    if measured.get("decays") is False:
        tail = f"the measured {name} curve does not decay ({where_fit})"
    elif halving is not None:
        pair = measured.get("interval")
        if isinstance(pair, list):  # JSON stores an open end (inf) as null
            pair = sorted(math.inf if p is None else p for p in pair)
        interval = _interval(pair, ".3g")
        tail = f"the measured {name} curve halves every {halving:.3g} layers ({where_fit}" + (
            f", 95% interval {interval})" if interval else ")"
        )
        if decays and steps is not None:
            tail += f", {halving / steps:.3g}× the diffusion length"
            settled = measured.get("asymptotic")
            if settled is False or (settled is None and halving < 0.9 * steps):
                tail += (
                    " -- not yet asymptotic: the local halving length is still moving, and the "
                    "spectral length holds only once the slowest eigenvector dominates"
                )
    else:
        tail = f"no exponential was fitted to the measured {name} curve"
    if not graph:
        return tail[0].upper() + tail[1:] + "."
    return f"{head}; {tail}."


def _algebraic_sentence(ref: Mapping[str, Any], name: str) -> str | None:
    slope = _num(ref.get("slope"))
    if slope is None:
        return None
    measured = ref.get("measured") or {}
    alpha, diff = _num(measured.get("alpha")), _num(ref.get("difference"))
    head = (
        f"Algebraic reference ({ref.get('source')}): the energy of the continuous nonlocal flow "
        f"falls no faster than k^{slope:g} -- a bound, slope {slope:g} on the log-log plot"
    )
    if alpha is None or diff is None:
        return f"{head}; no power law was fitted to the measured {name} curve."
    interval = _interval(measured.get("interval"), ".2f")
    span = measured.get("span") or []
    kind = (
        "asymptotic exponent of the fitted (k + k0)^alpha"
        if measured.get("source") == "verdict"
        else "tail-window power-law fit"
    )
    where = f"{kind}, layers {span[0]}-{span[1]}" if len(span) == 2 else kind
    how = "steeper than" if diff < 0 else "shallower than" if diff > 0 else "equal to"
    return (
        f"{head}; the measured {name} slope is {alpha:.3g} ({where}"
        + (f", 95% interval {interval}" if interval else "")
        + f"), {abs(diff):.3g} {how} the bound's."
    )


def reference_prose(record: Mapping[str, Any] | None, model: str, graph: bool = True) -> list[str]:
    """The theory sentences beside a curve's fits, built from its fits.json ``"reference"``
    numbers (:func:`oversmooth.analysis.theory_reference`): the graph's linear-diffusion
    halving length against the measured one, and for nonlocal models the algebraic reference
    slope against the measured slope.  ``graph=False`` leaves out the graph's prediction (said
    once for several curves on one graph) and keeps the measured part.  Empty for a record
    written before these numbers were stored."""
    ref = (record or {}).get("reference")
    if not isinstance(ref, Mapping):
        return []
    name = PRETTY.get(model, model)
    out = []
    diffusion, algebraic = ref.get("diffusion"), ref.get("algebraic")
    if isinstance(diffusion, Mapping):
        sentence = _diffusion_sentence(diffusion, name, graph)
        if sentence:
            out.append(sentence)
    if isinstance(algebraic, Mapping):
        sentence = _algebraic_sentence(algebraic, name)
        if sentence:
            out.append(sentence)
    return out


def comparison_key(dataset: str, model: str, conv: str, convs: Sequence[str]) -> str:
    """The fits.json key of one curve of a comparison: ``dataset/model``, then ``/conv`` when
    the comparison has several message-passing types (``convs``)."""
    return f"{dataset}/{model}" if len(convs) == 1 else f"{dataset}/{model}/{conv}"


def energy_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Final-layer energy per (model, dataset) and depth -- per (model, conv, dataset) when the
    summary has a ``conv`` column: ``mean ± std [geometric mean]`` over seeds (the paper's
    arithmetic mean ± std, then the average that suits values spread over decades), the value
    alone when there is one seed, a dash where a cell has no value."""
    import numpy as np

    from oversmooth.report.document import MISSING

    keys = ["model", "conv", "dataset"] if "conv" in summary else ["model", "dataset"]
    grouped = summary.groupby([*keys, "depth"], sort=False)["final_energy"]
    stats = grouped.agg(["mean", "std", "count"]).reset_index()
    logs = grouped.apply(
        lambda v: float(np.exp(np.log(v).mean())) if (v > 0).all() else float("nan")
    )
    stats["geo"] = logs.to_numpy()

    def cell(row: pd.Series) -> str:
        if not np.isfinite(row["mean"]):
            return MISSING
        if row["count"] < 2 or not np.isfinite(row["std"]):
            return f"{row['mean']:.3g}"
        geo = f" [{row['geo']:.3g}]" if np.isfinite(row["geo"]) else ""
        return f"{row['mean']:.3g} ± {row['std']:.2g}{geo}"

    stats["cell"] = stats.apply(cell, axis=1)
    table = stats.pivot(index=keys, columns="depth", values="cell")
    models = list(dict.fromkeys(summary["model"]))  # as run; convs too, datasets by name
    convs = list(dict.fromkeys(summary["conv"])) if "conv" in summary else []
    table = table.reindex(
        sorted(
            table.index,
            key=lambda k: (models.index(k[0]), *((convs.index(k[1]),) if convs else ()), k[-1]),
        )
    )
    table.columns = [f"{d} layers" for d in table.columns]
    return table.reset_index().fillna(MISSING)
