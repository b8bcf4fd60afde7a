"""``oversmooth analyze``: probe one architecture at initialisation, fit the laws, write a report."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from oversmooth.cli import options as O
from oversmooth.cli._common import echo_json, handle_errors, parse_ints, progress_bar


def analyze(
    model: O.Model = O.ModelName.postln,
    depth: O.Depth = 256,
    conv: O.ConvOpt = O.Conv.san,
    dataset: O.Dataset = "cora",
    hidden: O.Hidden = 32,
    heads: O.Heads = 4,
    seed: O.Seed = 0,
    seeds: O.Seeds = None,
    device: O.Device = "auto",
    similarity: Annotated[bool, typer.Option("--similarity/--no-similarity", help="Record the L x L inter-layer similarity matrix (memory grows with depth).")] = True,
    prune: Annotated[Optional[str], typer.Option("--prune", help="Layers to prune one at a time, e.g. 2,32,64.")] = None,
    metrics: Annotated[Optional[str], typer.Option("--metrics", help="Extra per-layer metrics, e.g. effective_rank,mad,energy_3 (see `oversmooth metrics`).")] = None,
    norm: O.NormOpt = O.Norm.node,
    pattern: O.Pattern = "M",
    data_root: O.DataRoot = None,
    out: O.Out = None,
    overwrite: O.Overwrite = False,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
) -> None:
    """Probe a freshly initialised model layer by layer and say how its energy behaves with depth.

    Writes metrics.csv, similarity.csv, fits.json, config.json, figures, report.md
    and report.html to --out, and prints a one-line verdict.

    Example: oversmooth analyze --model postln --depth 256
    """
    handle_errors(_run)(**locals())


def _run(model, depth, conv, dataset, hidden, heads, seed, seeds, device, similarity, prune, metrics, norm, pattern,
         data_root, out, overwrite, as_json, quiet, command: str = "analyze", prune_option: str = "--prune") -> None:
    from oversmooth.analysis import AnalysisConfig, run_analysis
    from oversmooth.probe import DEFAULT_METRICS
    from oversmooth.report.render import check_out, default_out, write_analysis

    extra = tuple(m.strip() for m in metrics.split(",") if m.strip()) if metrics else ()
    config = AnalysisConfig(
        model=model.value, depth=depth, conv=conv.value, dataset=dataset, hidden=hidden, heads=heads,
        seeds=parse_ints("--seeds", seeds) if seeds else (seed,), device=device, similarity=similarity,
        prune=parse_ints(prune_option, prune, minimum=1) if prune else (), metrics=tuple(dict.fromkeys(DEFAULT_METRICS + extra)),
        norm=norm.value, pattern=pattern, data_root=str(data_root) if data_root else None,
    )
    target = check_out(out if out is not None else default_out(command, config.model), overwrite)
    with progress_bar(not quiet) as update:
        result = run_analysis(config, progress=update)
    result.config["command"] = command
    folder = write_analysis(result, target, overwrite=overwrite)
    mean = result.fits["mean_over_seeds"]
    if as_json:
        payload = {"out": str(folder), "verdict": result.verdict, "classification": result.label,
                   "curse_of_depth": mean["curse_of_depth"], "final_energy": mean["final_energy"],
                   "float_floor": mean["float_floor"], "timings": result.timings}
        if result.prune is not None:
            payload["prune"] = result.prune.to_dict(orient="records")
        echo_json(payload)
        return
    typer.echo(result.verdict)
    if result.prune is not None:
        typer.echo(result.prune.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    typer.echo(f"report: {folder / 'report.html'}")
