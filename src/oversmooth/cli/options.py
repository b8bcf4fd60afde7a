"""Command-line options, generated from the one option table (:data:`oversmooth.config.OPTIONS`).

A command that fills a run config is declared with :func:`config_command`: it receives one
:class:`Given` holding the table options the user gave, builds its config in one call
(:func:`build`), and its own options (``--out``, ``--json``, ...) as ordinary parameters.
Its options, their flags, help and shown defaults all come from the table and the config's
defaults, so they cannot drift apart from each other or from a report's "Reproduce" line.
Importing this module imports no torch.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Collection, Mapping
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from oversmooth import config as C

F = TypeVar("F", bound=Callable[..., Any])

_KINDS: dict[str, Any] = {
    "int": int,
    "float": float,
    "str": str,
    "switch": bool,
    "ints": str,
    "names": str,
    "extra": str,
    "repeat": list[str],
}
_METAVARS = {"ints": "<int,...>", "names": "<name,...>", "extra": "<name,...>", "repeat": "<run>"}
_ENUMS: dict[tuple[str, tuple[str, ...]], Any] = {}


def _enum(name: str, names: Collection[str]) -> Any:
    """A ``str`` Enum whose members are ``names`` (typer shows them as the choices)."""
    key = (name, tuple(names))
    if key not in _ENUMS:
        _ENUMS[key] = Enum(name.title().replace("_", ""), {n: n for n in names}, type=str)
    return _ENUMS[key]


def value(v: Any) -> Any:
    """An option's plain value: the string of an Enum member, anything else unchanged."""
    return v.value if isinstance(v, Enum) else v


def bracket(default: str, also: str | None = None) -> str:
    """``[default: X]`` or ``[default: X, <also>]``."""
    return f"[default: {default}{', ' + also if also else ''}]"


def option_help(entry: C.Option, default: Any, also: str | None = None, why: str = "") -> str:
    """The help of ``entry``: its text, ``why`` (a sentence: why this command's default
    differs from another's), then the default."""
    return " ".join(t for t in (entry.help, why, bracket(entry.shown(default), also)) if t)


def declare(entry: C.Option, help: str, hidden: bool = False, flags: tuple[str, ...] = ()) -> Any:
    """``Annotated[<type> | None, typer.Option(...)]`` for ``entry``: declared ``= None``, so
    None means "not given" and the config's own default applies."""
    kind = _enum(entry.name, entry.choices) if entry.kind == "choice" else _KINDS[entry.kind]
    metavar = _METAVARS.get(entry.kind)
    return Annotated[
        kind | None,
        typer.Option(
            *(flags or entry.flags), help=help, show_default=False, hidden=hidden, metavar=metavar
        ),
    ]


class Given:
    """The table options a command received (``option name -> value``, None: not given).

    :meth:`values` reads them as dotted config fields (``{"model.depth": 8}``), parsed and
    checked; a former spelling (``--seed`` for ``--seeds``) gives a ``note:`` line.
    """

    def __init__(self, config: type, raw: Mapping[str, Any]) -> None:
        self.config, self.raw = config, dict(raw)

    def __bool__(self) -> bool:
        """Whether any table option was given."""
        return any(v is not None for v in self.raw.values())

    def values(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field, entry in C.options_of(self.config):
            flag, raw = entry.flag, self.raw.get(entry.name)
            for old in entry.old:
                before = self.raw.get(_name(old))
                if before is None:
                    continue
                if raw is not None:
                    raise ValueError(f"{old}: the old spelling of {entry.flag}; give only {flag}")
                typer.echo(f"note: {old} is deprecated; use {entry.flag}", err=True)
                flag, raw = old, before
            if raw is not None:
                out[field] = entry.parse(value(raw), flag)
        return out


def _name(flag: str) -> str:
    return flag.split("/")[0].removeprefix("--").replace("-", "_")


def parameters(
    config: type,
    defaults: Mapping[str, Any] | None = None,
    also: str | None = None,
    also_for: Callable[[str], bool] | None = None,
    why: Mapping[str, str] | None = None,
    required: Collection[str] = (),
) -> list[inspect.Parameter]:
    """One keyword parameter per table option of ``config`` (then one hidden parameter per
    former spelling), its help showing ``config``'s default or the command's own
    (``defaults``, dotted fields); ``also`` (where else a default may come from) is added to
    the fields ``also_for`` accepts (all when it is None); the fields of ``required`` show
    ``[required]`` instead (prune's --prune-layers showed ``[default: none]``: an audit)."""
    defaults, why = dict(defaults or {}), dict(why or {})
    params, hidden = [], []
    for field, entry in C.options_of(config):
        default = defaults[field] if field in defaults else C.default_of(config, field)
        more = also if also_for is None or also_for(field) else None
        if field in required:
            text = " ".join(t for t in (entry.help, why.get(field, ""), "[required]") if t)
        else:
            text = option_help(entry, default, more, why.get(field, ""))
        params.append(_keyword(entry.name, declare(entry, text)))
        for old in entry.old:
            note = f"Deprecated: {entry.flag}."
            hidden.append(_keyword(_name(old), declare(entry, note, hidden=True, flags=(old,))))
    return params + hidden


def _keyword(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def config_command(
    config: type,
    *,
    defaults: Mapping[str, Any] | None = None,
    also: str | None = None,
    also_for: Callable[[str], bool] | None = None,
    why: Mapping[str, str] | None = None,
    required: Collection[str] = (),
) -> Callable[[F], F]:
    """Declare a command that fills ``config``: ``fn(given, **own)`` becomes a function whose
    parameters are the table options of ``config`` (see :func:`parameters`) followed by
    ``fn``'s own; typer reads that signature, and ``fn`` receives the table options as one
    :class:`Given`."""

    def wrap(fn: F) -> F:
        table = parameters(config, defaults, also, also_for, why, required)
        hints = typing.get_type_hints(fn, include_extras=True)
        own = [
            p.replace(annotation=hints[p.name], kind=inspect.Parameter.KEYWORD_ONLY)
            for p in list(inspect.signature(fn).parameters.values())[1:]
        ]
        names = [p.name for p in table]

        @functools.wraps(fn)
        def command(**options: Any) -> Any:
            given = Given(config, {name: options.pop(name) for name in names})
            return fn(given, **options)

        signature = inspect.Signature([*table, *own])
        command.__signature__ = signature  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        return command  # type: ignore[return-value]

    return wrap


def build(config: type, given: Given, **defaults: Any) -> Any:
    """The run config of a command: ``config`` with the given options over the command's own
    ``defaults`` (dotted fields as keywords: ``**{"model.name": "preln"}``) over its defaults.

    With ``--checkpoint`` the model, dataset and seed come from the checkpoint
    (:meth:`~oversmooth.run_configs.AnalysisConfig.from_checkpoint`), and the command's own
    model defaults do not apply."""
    values = given.values()
    if values.get("checkpoint") is not None:
        own = {k: v for k, v in defaults.items() if not k.startswith("model.")}
        return config.from_checkpoint(str(values["checkpoint"]), {**own, **values})  # type: ignore[attr-defined]
    return C.build(config, {**defaults, **values})


# -- options that are no config field: what a command does with its result -------------------
# a string, not a Path: typer turns --out "" into Path("."), the current folder
Out = Annotated[
    str | None,
    typer.Option(
        "--out", "-o", help="Output folder. [default: reports/<command>-<model>-<timestamp>]"
    ),
]
Overwrite = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Replace --out if it exists: only a folder oversmooth wrote, or an empty one.",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print a machine-readable summary on stdout.")]
Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="No progress bar (it is also off when stderr is not a terminal) and no download "
        "messages; errors and warnings still print.",
    ),
]
DataRoot = Annotated[  # commands without a config (datasets): the table's text and default
    Path | None,
    typer.Option(
        "--data-root",
        help=option_help(C.option("data_root"), None),
        show_default=False,
    ),
]
Device = Annotated[  # commands without a config (bench): the table's text and default
    str,
    typer.Option(
        "--device", help=C.option("device").help + " " + bracket("auto"), show_default=False
    ),
]
FigureFormat = Annotated[
    str | None,
    typer.Option(
        "--figure-format",
        help="Figure formats, comma-separated: png (always written: the reports show it), svg, "
        "pdf; e.g. png,svg,pdf writes each figure three times, same name. [default: png]",
        show_default=False,
    ),
]
TableFormat = Annotated[
    str | None,
    typer.Option(
        "--table-format",
        help="Table formats, comma-separated: csv (always written), parquet (full float64 "
        "precision, beside each CSV; needs pyarrow). [default: csv]",
        show_default=False,
    ),
]
