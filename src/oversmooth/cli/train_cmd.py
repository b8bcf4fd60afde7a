"""``oversmooth train``: train a zoo model with the seed paper's recipe (Appendix B.1)."""

from __future__ import annotations

from typing import Annotated

import typer

from oversmooth.cli import options as O
from oversmooth.cli._common import echo_json, handle_errors, progress_bar
from oversmooth.train import TrainConfig


T = O.ConfigOptions(TrainConfig)


def train(
    model: T.model = None,
    depth: T.depth = None,
    conv: T.conv = None,
    dataset: T.dataset = None,
    hidden: T.hidden = None,
    heads: T.heads = None,
    seed: T.seed = None,
    epochs: O.option(
        int, "--epochs", help="Training epochs (the paper: 5000).", default=T.default("epochs")
    ) = None,
    lr: Annotated[
        float | None,
        typer.Option(
            "--lr",
            help="Learning rate. [default: 1e-3 for Pre-LN and plain, 1e-4 peak for Post-LN]",
        ),
    ] = None,
    warmup: Annotated[
        int | None,
        typer.Option(
            "--warmup", help="Linear warm-up epochs. [default: epochs/10 for Post-LN, 0 otherwise]"
        ),
    ] = None,
    weight_decay: O.option(
        float, "--weight-decay", help="Adam L2 weight decay.", default=T.default("weight_decay")
    ) = None,
    split: O.option(
        str,
        "--split",
        help="random (60/20/20, seeded by --seed) or public (Planetoid).",
        default=T.default("split"),
    ) = None,
    patience: Annotated[
        int | None,
        typer.Option(
            "--patience", help="Early stopping: epochs without a better validation accuracy."
        ),
    ] = None,
    dropout: T.dropout = None,
    norm: T.norm = None,
    pattern: T.pattern = None,
    device: T.device = None,
    data_root: O.DataRoot = None,
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
    deterministic: Annotated[
        bool | None,
        typer.Option(
            "--deterministic/--no-deterministic",
            help="Deterministic kernels: a fixed seed repeats bit for bit on CPU. "
            + O.bracket("on" if T.default("deterministic") else "off"),
            show_default=False,
        ),
    ] = None,
    probe_every: Annotated[
        int | None,
        typer.Option(
            "--probe-every",
            help="Record every layer's energies every N epochs into dynamics.csv, on the eval "
            "forward that scores the epoch (0: off). [default: epochs/50, at least 1]",
        ),
    ] = None,
    overwrite: O.Overwrite = False,
    as_json: O.Json = False,
    quiet: O.Quiet = False,
) -> None:
    """Train with Adam, weight decay 5e-4, and keep the checkpoint with the best validation
    accuracy.

    The output folder holds best.pt, last.pt (for --resume), history.csv,
    dynamics.csv (layer energies during training), training.png, dynamics.png,
    config.json and summary.json.  Ctrl-C or SIGTERM stops at the end of
    the current epoch and saves it; rerun the same command with --resume to continue
    (on CPU the result equals an uninterrupted run bit for bit).  Then analyse the trained
    model with: oversmooth analyze --checkpoint OUT/best.pt --prune-layers 2,32

    Example: oversmooth train --model nonlocal --depth 64 --epochs 5000
    """
    handle_errors(_run)(
        model=model,
        depth=depth,
        conv=conv,
        dataset=dataset,
        hidden=hidden,
        heads=heads,
        seed=seed,
        epochs=epochs,
        lr=lr,
        warmup=warmup,
        weight_decay=weight_decay,
        split=split,
        patience=patience,
        dropout=dropout,
        norm=norm,
        pattern=pattern,
        device=device,
        data_root=data_root,
        out=out,
        resume=resume,
        checkpoint_every=checkpoint_every,
        deterministic=deterministic,
        probe_every=probe_every,
        overwrite=overwrite,
        as_json=as_json,
        quiet=quiet,
    )


def _run(
    model,
    depth,
    conv,
    dataset,
    hidden,
    heads,
    seed,
    epochs,
    lr,
    warmup,
    weight_decay,
    split,
    patience,
    dropout,
    norm,
    pattern,
    device,
    data_root,
    out,
    resume,
    checkpoint_every,
    deterministic,
    probe_every,
    overwrite,
    as_json,
    quiet,
) -> None:
    from oversmooth.report.render import default_out
    from oversmooth.report.writers import write_training_report
    from oversmooth.train import describe
    from oversmooth.train import train as run_training

    config = TrainConfig(
        **O.given(
            model=model,
            depth=depth,
            conv=conv,
            dataset=dataset,
            hidden=hidden,
            heads=heads,
            seed=seed,
            epochs=epochs,
            lr=lr,
            warmup=warmup,
            weight_decay=weight_decay,
            split=split,
            patience=patience,
            dropout=dropout,
            norm=norm,
            pattern=pattern,
            device=device,
            data_root=str(data_root) if data_root else None,
            deterministic=deterministic,
            probe_every=probe_every,
        )
    )
    if out is None:
        if resume:
            raise ValueError("--resume: pass --out with the folder of the run to continue")
        out = default_out("train", config.model)
    with progress_bar(not quiet) as update:  # per epoch, with the epoch's scores
        result = run_training(
            config,
            out,
            resume=resume,
            overwrite=overwrite,
            progress=update,
            checkpoint_every=checkpoint_every,
            report=write_training_report,
        )
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
    if result.stopped in ("interrupted", "terminated"):
        typer.echo(
            f"{result.stopped}: epoch {result.epochs_run - 1} saved; continue with the same "
            f"command plus --resume --out {result.out}",
            err=True,
        )
        raise typer.Exit(130 if result.stopped == "interrupted" else 143)
