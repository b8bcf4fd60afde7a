"""``oversmooth bench``: speed, memory and scaling benchmarks, written to reports/benchmarks/."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from oversmooth.cli import options as O
from oversmooth.cli._common import echo_json, handle_errors, is_tty


def _default(name: str) -> object:
    """A default of :func:`oversmooth.bench.run_bench` (written there only)."""
    import inspect

    from oversmooth.bench import run_bench

    return inspect.signature(run_bench).parameters[name].default


def bench(
    quick: Annotated[
        bool, typer.Option("--quick", help="Smaller sizes and fewer repeats: under a minute.")
    ] = False,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder (see --overwrite).")] = (
        Path("reports/benchmarks")
    ),
    overwrite: O.Overwrite = False,
    device: O.option(str, "--device", help=O.DEVICE_HELP, default=_default("device")) = None,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
) -> None:
    """Probe overhead, metric kernels against loop and dense implementations, scaling in depth
    and graph size, and the main command end to end.  Writes report.md, CSVs and plots to --out.
    """
    handle_errors(_run)(quick, out, overwrite, device, as_json, quiet)


def _run(quick: bool, out: Path, overwrite: bool, device: str, as_json: bool, quiet: bool) -> None:
    from oversmooth.bench import run_bench
    from oversmooth.outputs import claim_folder

    say = None if quiet or not is_tty() else (lambda msg: typer.echo(f"bench: {msg}", err=True))
    with claim_folder(out, overwrite):  # refused at once if out exists or another run holds it
        results = run_bench(
            out, quick=quick, progress=say, overwrite=overwrite, **O.given(device=device)
        )
    po = results["probe_overhead"]
    summary = {
        "out": str(out),
        "probe_overhead": po["ratio"],
        "depth_exponent": results["depth_exponent"],
        "size_exponent": results["size_exponent"],
        "depth_memory_ratio": results["depth_memory_ratio"],
        "seconds": results["seconds"],
    }
    if "end_to_end" in results:
        summary["end_to_end_s"] = results["end_to_end"].get("seconds")
    if as_json:
        echo_json(summary)
        return
    typer.echo(
        f"probe overhead {po['ratio']:.2f}x (target <= 1.3x); "
        f"time ~ depth^{results['depth_exponent']:.2f}, "
        f"~ nodes^{results['size_exponent']:.2f}; report: {out / 'report.md'}"
    )
