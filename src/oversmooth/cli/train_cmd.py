"""``oversmooth train``: train a zoo model with the seed paper's recipe (Appendix B.1)."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from oversmooth.cli import options as O
from oversmooth.cli._common import (
    FINISHED,
    echo_json,
    handle_errors,
    output_formats,
    progress_bar,
)
from oversmooth.run_configs import TrainConfig

if TYPE_CHECKING:
    from oversmooth.train import TrainResult


@O.config_command(
    TrainConfig, why={"model.name": "Nonlocal by default: the seed paper's method, trained."}
)
@handle_errors
def train(
    given: O.Given,
    out: O.Out = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the run in --out from its last.pt.")
    ] = False,
    checkpoint_every: Annotated[
        float,
        typer.Option(
            "--checkpoint-every",
            help="Seconds between saves of last.pt (0: every epoch); a stop always saves.",
        ),
    ] = 60.0,
    overwrite: O.Overwrite = False,
    figure_format: O.FigureFormat = None,
    table_format: O.TableFormat = None,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
) -> None:
    """Train with Adam, weight decay 5e-4, and keep the checkpoint with the best validation
    accuracy.

    The output folder holds best.pt, last.pt (for --resume), history.csv,
    dynamics.csv (layer energies during training), training.png, dynamics.png,
    config.json and summary.json. Ctrl-C or SIGTERM stops at the end of
    the current epoch and saves it; rerun the same command with --resume to continue
    (on CPU the result equals an uninterrupted run bit for bit). Then analyse the trained
    model with: oversmooth analyze --checkpoint OUT/best.pt --prune-layers 2,32

    Example: oversmooth train --model nonlocal --depth 64 --epochs 5000
    """
    from oversmooth.report.render import default_out
    from oversmooth.report.writers import write_training_report
    from oversmooth.train import train as run_training

    formats = output_formats(figure_format, table_format)
    config = O.build(TrainConfig, given)
    if out is None:
        if resume:
            raise ValueError("--resume: pass --out with the folder of the run to continue")
        out = default_out("train", config.model.name)
    started = time.time()
    try:
        with progress_bar(not quiet) as update:  # per epoch, with the epoch's scores
            result = run_training(
                config,
                out,
                resume=resume,
                overwrite=overwrite,
                progress=update,
                checkpoint_every=checkpoint_every,
                report=partial(write_training_report, **formats),
            )
    except KeyboardInterrupt:  # Ctrl-C after the finished run wrote its summary.json
        _exit_if_complete(Path(out), "interrupted", started)
        raise
    _print_result(result, as_json)
    if result.stopped in ("interrupted", "terminated"):
        _exit_if_complete(result.out, result.stopped, started)
    _exit_if_stopped(result)


#: How far a file's modification time may lag the clock it is compared with: the kernel stamps
#: files from a coarse clock (a tick, up to 10 ms, behind ``time.time()``), so a summary.json
#: written right after the command started read as older than its start (CI: a bare
#: "interrupted" once).  Kept short: a summary written that much before this run started is
#: taken for this run's (an --overwrite rerun stopped before its own summary; a review).
_MTIME_SLACK_S = 0.1


def _exit_if_complete(out: Path, stopped: str, started: float) -> None:
    """A stop that came once this run had finished (its summary.json, written after the
    report, is there): said as such, not as a run to continue with --resume (SIGTERM said "300
    epochs saved; continue ... --resume" of a complete run, Ctrl-C a bare "interrupted": an
    audit)."""
    summary = out / "summary.json"
    try:
        finished = summary.stat().st_mtime >= started - _MTIME_SLACK_S
    except OSError:
        return
    if finished:  # else another run's (an --overwrite not yet swapped in)
        _said_and_stop(stopped, f"{stopped} after the run was complete: {out} holds it")


def _print_result(result: TrainResult, as_json: bool) -> None:
    """What the run did: a JSON summary, or its description, checkpoint and report."""
    from oversmooth.train import describe

    if as_json:
        echo_json(
            {
                "out": str(result.out),
                "stopped": result.stopped,
                "best_epoch": result.best_epoch,
                **result.best,
                "epochs_run": result.epochs_run,
                "seconds": result.seconds,
            }
        )
    else:
        typer.echo(describe(result))
        typer.echo(f"checkpoint: {result.out / 'best.pt'}")
        if (result.out / "report.html").is_file():  # written once the run has finished
            typer.echo(f"report: {result.out / 'report.html'}")


def _exit_if_stopped(result: TrainResult) -> None:
    """A run stopped by Ctrl-C or SIGTERM says how to continue it and exits 130 / 143."""
    if result.stopped in ("interrupted", "terminated"):
        from oversmooth.train import epochs_text  # loaded already: the run came from it

        _said_and_stop(
            result.stopped,
            f"{result.stopped}: {epochs_text(result.epochs_run)} saved; continue with the same "
            f"command plus --resume --out {result.out}",
        )


def _said_and_stop(stopped: str, line: str) -> NoReturn:
    """Say ``line`` and exit 130 (interrupted) or 143 (terminated)."""
    typer.echo(line, err=True)
    FINISHED["stop_said"] = True  # said: the group adds no second "interrupted"
    raise typer.Exit(130 if stopped == "interrupted" else 143)
