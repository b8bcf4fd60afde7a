"""``oversmooth analyze``: probe one architecture at initialisation, fit the laws, write a
report."""

from __future__ import annotations

import inspect
from typing import Annotated, Optional

import typer

from oversmooth.cli import options as O
from oversmooth.cli._common import echo_json, handle_errors, parse_ints, progress_bar

# Options a checkpoint fixes: None means "not given" (the default, or the checkpoint's value)
_OR_CKPT = "or the checkpoint's]"
CkptHidden = Annotated[
    Optional[int],
    typer.Option("--hidden", help=f"Hidden width (divisible by --heads). [default: 32, {_OR_CKPT}"),
]
CkptHeads = Annotated[
    Optional[int], typer.Option("--heads", help=f"Attention heads. [default: 4, {_OR_CKPT}")
]
CkptSeed = Annotated[
    Optional[int], typer.Option("--seed", help=f"Initialisation seed. [default: 0, {_OR_CKPT}")
]
SeedOrSeeds = Annotated[
    Optional[int],
    typer.Option(
        "--seed",
        help=f"Initialisation seed (ignored when --seeds is given). [default: 0, {_OR_CKPT}",
    ),
]
CkptNorm = Annotated[
    Optional[O.Norm],
    typer.Option(
        "--norm",
        help=f"LayerNorm statistics: node (per node) or graph (per graph). [default: node, "
        f"{_OR_CKPT}",
    ),
]
CkptPattern = Annotated[
    Optional[str],
    typer.Option(
        "--pattern",
        help="Block pattern over M (masked neighbourhood attention) and S (global "
        "self-attention), "
        f"repeated to the depth, e.g. MMSS. [default: M, {_OR_CKPT}",
    ),
]


def analyze(
    model: Annotated[
        Optional[O.ModelName],
        typer.Option(
            "--model",
            "-m",
            help=(
                "Architecture: preln, postln, nonlocal (nonlocal Post-LN), nonlocal-preln, plain. "
                "[default: postln, or the checkpoint's]"
            ),
        ),
    ] = None,
    depth: Annotated[
        Optional[int],
        typer.Option("--depth", "-L", help="Number of blocks. [default: 256, or the checkpoint's]"),
    ] = None,
    conv: Annotated[
        Optional[O.Conv],
        typer.Option(
            "--conv", help="Message passing: san, gcn, gat. [default: san, or the checkpoint's]"
        ),
    ] = None,
    dataset: Annotated[
        Optional[str],
        typer.Option(
            "--dataset",
            "-d",
            help=(
                "Dataset name, name:params, or a .pt/.csv path. "
                "[default: cora, or the checkpoint's]"
            ),
        ),
    ] = None,
    hidden: CkptHidden = None,
    heads: CkptHeads = None,
    seed: SeedOrSeeds = None,
    seeds: O.Seeds = None,
    device: O.Device = "auto",
    similarity: Annotated[
        bool,
        typer.Option(
            "--similarity/--no-similarity",
            help="Record the L x L inter-layer similarity matrix (memory grows with depth).",
        ),
    ] = True,
    prune: Annotated[
        Optional[str], typer.Option("--prune", help="Layers to prune one at a time, e.g. 2,32,64.")
    ] = None,
    metrics: Annotated[
        Optional[str],
        typer.Option(
            "--metrics",
            help=(
                "Extra per-layer metrics, e.g. effective_rank,mad,energy_3 "
                "(see `oversmooth metrics`)."
            ),
        ),
    ] = None,
    norm: CkptNorm = None,
    pattern: CkptPattern = None,
    data_root: O.DataRoot = None,
    checkpoint: O.Checkpoint = None,
    dtype: O.DtypeOpt = O.Dtype.float64,
    floor: O.FloorOpt = O.FloorMethod.auto,
    out: O.Out = None,
    overwrite: O.Overwrite = False,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
) -> None:
    """Probe a freshly initialised model layer by layer and say how its energy behaves with depth.

    Writes metrics.csv, similarity.csv, fits.json, config.json, figures, report.md
    and report.html to --out, and prints a one-line verdict.

    With --checkpoint (from `oversmooth train`) the trained model is analysed instead,
    and --prune reports the test-accuracy drop of each pruned layer (Table 8).

    Without options: Post-LN SAN, depth 256, Cora, seed 0, float64 (about 15 s on 2 idle CPU cores).

    Example: oversmooth analyze --model postln --depth 256
    """
    given = dict(locals())
    defaults = inspect.signature(analyze).parameters.items()
    bare = all(given[name] == p.default for name, p in defaults)  # every option at its default
    handle_errors(_run)(**given, announce=bare)


# measured (torch 2.13, float64): a bare `oversmooth analyze` took 13 s wall on 2 idle CPU
# cores (forward 4.9 s); 42-75 s while another test suite shared the two cores
_BARE_SECONDS = 15


def _announcement(config) -> str:
    """One line for a bare run: what it computes and roughly how long it takes."""
    from oversmooth.analysis import PRETTY

    seeds = ",".join(map(str, config.seeds))
    return (
        f"analyze: {PRETTY.get(config.model, config.model)} {config.conv.upper()}, "
        f"{config.depth} layers on {config.dataset}, seed {seeds}, {config.dtype} "
        f"(about {_BARE_SECONDS} s on 2 idle CPU cores); --help for options"
    )


def _run(
    model,
    depth,
    conv,
    dataset,
    hidden,
    heads,
    seed,
    seeds,
    device,
    similarity,
    prune,
    metrics,
    norm,
    pattern,
    data_root,
    checkpoint,
    out,
    overwrite,
    as_json,
    quiet,
    command: str = "analyze",
    prune_option: str = "--prune",
    dtype: O.Dtype = O.Dtype.float64,
    floor: O.FloorMethod = O.FloorMethod.auto,
    announce: bool = False,
) -> None:
    from oversmooth.analysis import AnalysisConfig, run_analysis
    from oversmooth.probe import DEFAULT_METRICS
    from oversmooth.outputs import claim_folder
    from oversmooth.report.render import default_out, write_analysis

    value = lambda v: getattr(v, "value", v)  # noqa: E731  (enum -> str, None stays None)
    extra = tuple(m.strip() for m in metrics.split(",") if m.strip()) if metrics else ()
    common = dict(
        device=device,
        similarity=similarity,
        prune=parse_ints(prune_option, prune, minimum=1) if prune else (),
        metrics=tuple(dict.fromkeys(DEFAULT_METRICS + extra)),
        data_root=str(data_root) if data_root else None,
        dtype=value(dtype),
        floor=value(floor),
    )
    chosen_seeds = parse_ints("--seeds", seeds) if seeds else (seed,) if seed is not None else None
    if checkpoint is not None:
        config = AnalysisConfig.from_checkpoint(
            str(checkpoint),
            model=value(model),
            depth=depth,
            conv=value(conv),
            dataset=dataset,
            hidden=hidden,
            heads=heads,
            seeds=chosen_seeds,
            norm=value(norm),
            pattern=pattern,
            **common,
        )
    else:
        config = AnalysisConfig(
            model=value(model) or "postln",
            depth=256 if depth is None else depth,
            conv=value(conv) or "san",
            dataset=dataset or "cora",
            hidden=32 if hidden is None else hidden,
            heads=4 if heads is None else heads,
            seeds=chosen_seeds or (0,),
            norm=value(norm) or "node",
            pattern="M" if pattern is None else pattern,
            **common,
        )
    if announce and not (quiet or as_json):
        typer.echo(_announcement(config), err=True)
    # the claim is held from this check to the final rename: a second run into the same
    # folder fails here at once, before any work
    target = out if out is not None else default_out(command, config.model)
    with claim_folder(target, overwrite) as target:
        with progress_bar(not quiet) as update:
            result = run_analysis(config, progress=update)
        result.config["command"] = command
        folder = write_analysis(result, target, overwrite=overwrite)
    mean = result.fits["mean_over_seeds"]
    if as_json:
        payload = {
            "out": str(folder),
            "verdict": result.verdict,
            "classification": result.label,
            "curse_of_depth": mean["curse_of_depth"],
            "final_energy": mean["final_energy"],
            "float_floor": mean["float_floor"],
            "final_at_floor": mean["final_at_floor"],
            "float64_final_energy": mean["float64_final_energy"],
            "dtype": result.config["dtype"],
            "floor_method": result.config["floor_method"],
            "timings": result.timings,
        }
        if result.prune is not None:
            payload["prune"] = result.prune.to_dict(orient="records")
        echo_json(payload)
        return
    typer.echo(result.verdict)
    if result.prune is not None:
        typer.echo(result.prune.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    typer.echo(f"report: {folder / 'report.html'}")
