"""``oversmooth compare``: several architectures over depths, datasets and seeds (Tables 2/4/6)."""

from __future__ import annotations

import typer

from oversmooth.analysis import ComparisonConfig
from oversmooth.cli import options as O
from oversmooth.cli._common import echo_json, handle_errors, parse_ints, parse_names, progress_bar


C = O.ConfigOptions(ComparisonConfig)


def _list(option: str, field: str, text: str) -> object:
    return O.option(str, option, help=text, default=C.default(field))


def compare(
    models: _list(
        "--models", "models", "Comma-separated architectures (see `oversmooth models`)."
    ) = None,
    depths: _list("--depths", "depths", "Comma-separated depths.") = None,
    conv: C.conv = None,
    datasets: _list("--datasets", "datasets", "Comma-separated datasets.") = None,
    seeds: _list("--seeds", "seeds", "Comma-separated seeds.") = None,
    hidden: C.hidden = None,
    heads: C.heads = None,
    device: C.device = None,
    norm: C.norm = None,
    pattern: C.pattern = None,
    data_root: O.DataRoot = None,
    dtype: C.dtype = None,
    floor: C.floor = None,
    out: O.Out = None,
    overwrite: O.Overwrite = False,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
) -> None:
    """Final-layer Laplacian energy at initialisation for every model x depth x dataset x seed.

    Writes summary.csv, a table shaped like the seed paper's Tables 2/4/6 (mean ± std
    over seeds), the per-layer log-log plot at the deepest depth and a report.

    Example: oversmooth compare --models preln,postln,nonlocal --depths 2,32,64,128,256
    """
    handle_errors(_run)(
        models=models,
        depths=depths,
        conv=conv,
        datasets=datasets,
        seeds=seeds,
        hidden=hidden,
        heads=heads,
        device=device,
        norm=norm,
        pattern=pattern,
        data_root=data_root,
        dtype=dtype,
        floor=floor,
        out=out,
        overwrite=overwrite,
        as_json=as_json,
        quiet=quiet,
    )


def _run(
    models,
    depths,
    conv,
    datasets,
    seeds,
    hidden,
    heads,
    device,
    norm,
    pattern,
    data_root,
    dtype,
    floor,
    out,
    overwrite,
    as_json,
    quiet,
) -> None:
    from oversmooth.analysis import run_comparison
    from oversmooth.outputs import claim_folder
    from oversmooth.report.render import default_out, write_comparison

    config = ComparisonConfig(
        **O.given(
            models=parse_names("--models", models) if models is not None else None,
            depths=parse_ints("--depths", depths, minimum=1) if depths is not None else None,
            conv=conv,
            datasets=parse_names("--datasets", datasets) if datasets is not None else None,
            seeds=parse_ints("--seeds", seeds) if seeds is not None else None,
            hidden=hidden,
            heads=heads,
            device=device,
            norm=norm,
            pattern=pattern,
            data_root=str(data_root) if data_root else None,
            dtype=dtype,
            floor=floor,
        )
    )
    from oversmooth.data import check_spec

    for dataset in config.datasets:  # every dataset is valid before the first cell runs
        check_spec(dataset)
    # held from this check to the final rename: a second run into the same folder fails at once
    target = out if out is not None else default_out("compare", "-".join(config.models))
    with claim_folder(target, overwrite) as target:
        with progress_bar(not quiet) as update:
            result = run_comparison(config, progress=update)
        folder = write_comparison(result, target, overwrite=overwrite)
    if as_json:
        echo_json(
            {
                "out": str(folder),
                "verdicts": result.verdicts,
                "summary": result.summary.to_dict(orient="records"),
                "timings": result.timings,
            }
        )
        return
    typer.echo(result.table.to_string())
    for verdict in result.verdicts:
        typer.echo(verdict)
    typer.echo(f"report: {folder / 'report.html'}")
