"""``oversmooth report DIR``: re-render figures and reports from a run's data files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from oversmooth.cli import options as O
from oversmooth.config import upgrade_record, value_at
from oversmooth.outputs import check_path_text
from oversmooth.cli._common import echo_json, handle_errors

# What the renderer reads, per command: required files and the columns / keys it needs
_NEEDS = {
    "analyze": {"metrics.csv": ("seed", "layer", "laplacian_energy"), "fits.json": ()},
    "compare": {
        "metrics.csv": ("dataset", "depth"),
        "summary.csv": (),
        "table.csv": (),
        "fits.json": (),
    },
}
_NEEDS["prune"] = _NEEDS["analyze"]
_OPTIONAL = {"similarity.csv": (), "prune.csv": ("layer",)}
_CONFIG_KEYS = {  # dotted paths in the record (an older flat one is upgraded first)
    "analyze": ("model.name", "model.conv", "model.depth", "dataset", "seeds"),
    "compare": ("models", "convs", "depths", "datasets"),
}
_CONFIG_KEYS["prune"] = _CONFIG_KEYS["analyze"]
_RERUN = "rerun the command that wrote it"


def report(
    folder: Annotated[
        Path,
        typer.Argument(
            metavar="FOLDER", help="A folder written by analyze, prune, compare or atlas."
        ),
    ],
    figure_format: O.FigureFormat = None,
    as_json: O.Json = False,
) -> None:
    """Rebuild the PNGs, report.md and report.html of FOLDER from its CSV/JSON files, without
    recomputing."""
    handle_errors(_run)(folder, as_json, figure_format)


def _read_json(path: Path) -> object:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; expected a folder from analyze/prune/compare")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text; the file is corrupt, {_RERUN}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); {_RERUN}"
        ) from None


def _check_csv(path: Path, columns: tuple[str, ...], required: bool) -> None:
    import pandas as pd

    if not path.is_file():
        if required:
            raise FileNotFoundError(f"{path}: missing; {_RERUN}")
        return
    try:
        frame = pd.read_csv(path)
    except Exception as exc:  # noqa: BLE001 - pandas raises several types for a corrupt file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: not a readable CSV ({first[:120]}); {_RERUN}") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing or frame.empty:
        what = f"no column {', '.join(missing)}" if missing else "no rows"
        raise ValueError(f"{path}: {what}; {_RERUN}")


def _check_fits(path: Path, command: str) -> None:
    """fits.json must hold objects where the renderer reads objects: one per curve for compare,
    ``mean_over_seeds`` (and each ``per_seed`` entry) for analyze/prune; a NaN or a number in
    their place is a corrupt file, not a crash inside the renderer."""
    fits = _read_json(path)
    if not isinstance(fits, dict):
        raise ValueError(f"{path}: expected a JSON object; {_RERUN}")
    if command == "compare":
        records = dict(fits)
    else:
        per_seed = fits.get("per_seed", {})
        if not isinstance(per_seed, dict):
            raise ValueError(f"{path}: per_seed must be an object, received {per_seed!r}; {_RERUN}")
        records = {"mean_over_seeds": fits.get("mean_over_seeds", {})}
        records.update({f"per_seed.{k}": v for k, v in per_seed.items()})
    for key, record in records.items():
        if not isinstance(record, dict):
            raise ValueError(f"{path}: {key} must be an object, received {record!r}; {_RERUN}")


def _has(record: dict, path: str) -> bool:
    try:
        value_at(record, path)
    except (KeyError, TypeError):
        return False
    return True


def check_report_folder(folder: Path) -> None:
    """Fail with one line naming the file when a data file the renderer needs is missing or
    corrupt, instead of a raw parse error from inside the renderer."""
    check_path_text(folder, "FOLDER")
    if not folder.exists():
        raise FileNotFoundError(f"{folder}: no such folder")
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder; pass one written by analyze, prune or compare")
    config_path = folder / "config.json"
    config = _read_json(config_path)
    if not isinstance(config, dict):
        raise ValueError(f"{config_path}: expected a JSON object; {_RERUN}")
    config = upgrade_record(config)
    command = config.get("command")
    if command not in _NEEDS:
        raise ValueError(
            f"{config_path}: unknown command {command!r}; expected analyze, prune or compare"
        )
    missing = [k for k in _CONFIG_KEYS[command] if not _has(config, k)]
    if missing:
        raise ValueError(f"{config_path}: missing {', '.join(missing)}; {_RERUN}")
    for name, columns in _NEEDS[command].items():
        if name.endswith(".json"):
            _check_fits(folder / name, command)
        else:
            _check_csv(folder / name, columns, required=True)
    if command != "compare":
        for name, columns in _OPTIONAL.items():
            _check_csv(folder / name, columns, required=False)


def _is_atlas(folder: Path) -> bool:
    """A folder of ``oversmooth atlas`` (its config.json says so)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # check_report_folder says what is wrong
    return isinstance(config, dict) and config.get("command") == "atlas"


def _run(folder: Path, as_json: bool = False, figure_format: str | None = None) -> None:
    from oversmooth.report.formats import figure_formats
    from oversmooth.report.render import render_report

    formats = figure_formats(figure_format)
    if _is_atlas(folder):  # its own renderer, from atlas.csv, curves.csv and fits.json
        from oversmooth.experiments.atlas import render_atlas

        render_atlas(folder, formats)
    else:
        check_report_folder(folder)
        render_report(folder, figure_formats=formats)
    if as_json:
        command = json.loads((folder / "config.json").read_text(encoding="utf-8"))["command"]
        files = sorted(
            p.name
            for p in folder.iterdir()
            if p.suffix in {f".{f}" for f in formats} or p.name in ("report.md", "report.html")
        )
        echo_json(
            {
                "out": str(folder),
                "command": command,
                "report": str(folder / "report.html"),
                "files": files,
            }
        )
        return
    typer.echo(f"report: {folder / 'report.html'}")
