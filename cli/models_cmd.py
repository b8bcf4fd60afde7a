"""``oversmooth models``: the architectures, convolutions and block patterns."""

from __future__ import annotations

import typer

from oversmooth.cli._common import echo_json, handle_errors
from oversmooth.cli.options import Json


def models(as_json: Json = False) -> None:
    """List model names, message-passing types and block-pattern letters with one-line descriptions."""
    handle_errors(_run)(as_json)


CONV_HELP = {
    "san": "self-attention: e_ij = (Q X_i)·(K X_j)/sqrt(d_k) over N(i) and i",
    "gcn": "e_ij = 1: the mean over the neighbourhood with self loop",
    "gat": "e_ij = LeakyReLU(a^T [V X_i || V X_j]) over N(i) and i",
}


def _run(as_json: bool) -> None:
    from oversmooth.nn.model import MODELS, PATTERN_LETTERS

    if as_json:
        echo_json(
            {
                "models": {k: v[2] for k, v in MODELS.items()},
                "convs": CONV_HELP,
                "pattern_letters": PATTERN_LETTERS,
            }
        )
        return
    typer.echo("models (--model):")
    for name, (_, _, text) in MODELS.items():
        typer.echo(f"  {name:<15} {text}")
    typer.echo("convolutions (--conv):")
    for name, text in CONV_HELP.items():
        typer.echo(f"  {name:<15} {text}")
    typer.echo("block pattern letters (--pattern, repeated to the depth, e.g. MMSS):")
    for letter, text in PATTERN_LETTERS.items():
        typer.echo(f"  {letter:<15} {text}")
