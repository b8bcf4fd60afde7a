"""``oversmooth models``: the architectures, convolutions, LayerNorm modes and block patterns,
read from the registries (:mod:`oversmooth.registry`)."""

from __future__ import annotations

import typer

from oversmooth.cli._common import echo_json, echo_listing, handle_errors
from oversmooth.cli.options import Json


def models(as_json: Json = False) -> None:
    """List model names, message-passing types, LayerNorm modes and block-pattern letters with
    one-line descriptions."""
    handle_errors(_run)(as_json)


def _run(as_json: bool) -> None:
    from oversmooth.nn.model import PATTERN_LETTERS
    from oversmooth.registry import CONVS, MODELS, NORMS

    if as_json:
        echo_json(
            {
                "models": {k: v.help for k, v in MODELS.items()},
                "convs": {k: v.help for k, v in CONVS.items()},
                "norms": {k: v.help for k, v in NORMS.items()},
                "pattern_letters": PATTERN_LETTERS,
            }
        )
        return
    for title, registry in (
        ("models (--model):", MODELS),
        ("convolutions (--conv):", CONVS),
        ("LayerNorm statistics (--norm):", NORMS),
    ):
        typer.echo(title)
        echo_listing(((name, entry.help) for name, entry in registry.items()), 2, 14)
    typer.echo("block pattern letters (--pattern, repeated to the depth, e.g. MMSS):")
    echo_listing(PATTERN_LETTERS.items(), 2, 14)
