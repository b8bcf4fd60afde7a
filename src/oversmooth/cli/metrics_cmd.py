"""``oversmooth metrics``: the measures the toolkit records, with their formulas.

Reads the one metric registry (:data:`oversmooth.metrics.registry.METRICS`): every name listed
here is accepted by ``--metrics`` and ``Probe(metrics=...)``, every accepted name is listed, and
each is the name of the function in :mod:`oversmooth.metrics` that computes it.
"""

from __future__ import annotations

from typing import Annotated

import typer

from oversmooth.cli._common import handle_errors


def metrics(
    names_only: Annotated[
        bool,
        typer.Option(
            "--names",
            help="Print only the metric names, one per line (each is accepted by "
            "analyze's metrics option and by Probe(metrics=...)).",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print JSON: per-layer metrics (name, default, help) and the measures "
            "that are not per-layer columns; with --names, a list of names.",
        ),
    ] = False,
) -> None:
    """List the per-layer measures and their definitions (all accumulate in float64)."""
    handle_errors(_print)(names_only, as_json)


def _print(names_only: bool, as_json: bool) -> None:
    from oversmooth.outputs import json_text
    from oversmooth.metrics.registry import METRICS, NOT_PER_LAYER, RENAMED

    if as_json:
        listing = (
            list(METRICS)
            if names_only
            else {
                "per_layer": [
                    {"name": m.name, "default": m.default, "help": m.help} for m in METRICS.values()
                ],
                "not_per_layer": [
                    {"name": name, "help": text} for name, text in NOT_PER_LAYER.items()
                ],
                "renamed": RENAMED,
            }
        )
        typer.echo(json_text(listing))
        return
    if names_only:
        for name in METRICS:
            typer.echo(name)
        return
    width = max(map(len, [*METRICS, *NOT_PER_LAYER]))
    say = _wrapper(width + 4)
    say(
        "Per-layer metrics (names for --metrics, each the function oversmooth.metrics.<name>; "
        "* recorded by default):",
        "",
    )
    for m in METRICS.values():
        say(m.help, f"{'*' if m.default else ' '} {m.name:<{width}}  ")
    typer.echo("")
    say("Not per-layer columns (not accepted by --metrics):", "")
    for name, text in NOT_PER_LAYER.items():
        say(text, f"  {name:<{width}}  ")
    typer.echo("")
    say("Renamed columns (folders written with the old names still load):", "")
    for old, new in RENAMED.items():
        say(f"now {new}", f"  {old:<{width}}  ")


def _wrapper(hang: int):
    """Print ``text`` after ``lead`` wrapped at spaces to the terminal's width (``COLUMNS``,
    at most 100, as the help pages), continuation lines indented by ``hang`` (``lead``'s
    width); a terminal too narrow for the hang gets the text on lines of its own."""
    import shutil
    import textwrap

    columns = min(shutil.get_terminal_size((80, 24)).columns, 100)

    def say(text: str, lead: str) -> None:
        indent = " " * (hang if lead else 0)
        if lead and columns - hang < 30:  # too narrow: the text under its name
            typer.echo(lead.rstrip())
            lead = indent = "    "
        lines = textwrap.wrap(
            text,
            width=max(columns, 40),
            initial_indent=lead,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        for line in lines or [lead.rstrip()]:
            typer.echo(line)

    return say
