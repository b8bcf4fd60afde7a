"""``oversmooth report DIR``: re-render figures and reports from a run's data files."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from oversmooth.cli import options as O
from oversmooth.config import upgrade_record, value_at
from oversmooth.outputs import check_path_text, probe_writable
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
        raise FileNotFoundError(
            f"{path}: missing; expected a folder from analyze, prune, compare or atlas"
        )
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
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text; the file is corrupt, {_RERUN}") from None
    except OSError as exc:
        raise PermissionError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    _check_rows(path, text)
    try:
        frame = pd.read_csv(io.StringIO(text))
    except Exception as exc:  # noqa: BLE001 - pandas raises several types for a corrupt file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: not a readable CSV ({first[:120]}); {_RERUN}") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing or frame.empty:
        what = f"no column {', '.join(missing)}" if missing else "no rows"
        raise ValueError(f"{path}: {what}; {_RERUN}")
    _check_numbers(path, frame)


def _check_rows(path: Path, text: str) -> None:
    """Every row as long as the header, and the file ending with its last row's newline (as
    oversmooth writes it): a file cut short would otherwise be read as fewer rows, its last one
    padded with blanks, and drawn without a word."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return  # read_csv says the file is empty
    if not text.endswith("\n"):
        raise ValueError(f"{path}: the last row ends without a newline (cut short?); {_RERUN}")
    width = len(rows[0])
    for number, row in enumerate(rows[1:], start=2):
        if row and len(row) != width:
            raise ValueError(
                f"{path}: line {number} has {len(row)} fields, the header {width}; {_RERUN}"
            )


def _check_numbers(path: Path, frame: Any) -> None:
    """A column of numbers (most of its values read as numbers) with a value that does not: the
    file was edited or damaged, and the renderer would stop inside pandas."""
    import pandas as pd

    for column in frame.columns:
        values = frame[column]
        if pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            continue
        numbers = pd.to_numeric(values, errors="coerce")
        bad = numbers.isna() & values.notna()
        if bad.any() and numbers.notna().sum() > bad.sum():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise ValueError(
                f"{path}: column {column} holds {values.iloc[row]!r} on line {row + 2}, "
                f"expected a number; {_RERUN}"
            )


def _check_writable(folder: Path) -> None:
    """The report is rebuilt in place: the folder must take new files."""
    try:
        probe_writable(folder)
    except OSError as exc:
        raise PermissionError(
            f"{folder}: cannot write into it ({exc.strerror or exc}); the report is rebuilt in "
            "place: make the folder writable, or copy it and pass the copy"
        ) from None


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
        raise ValueError(
            f"{folder}: not a folder; pass one written by analyze, prune, compare or atlas"
        )
    config_path = folder / "config.json"
    config = _read_json(config_path)
    if not isinstance(config, dict):
        raise ValueError(f"{config_path}: expected a JSON object; {_RERUN}")
    config = upgrade_record(config)
    command = config.get("command")
    if command not in _NEEDS:
        raise ValueError(
            f"{config_path}: unknown command {command!r}; expected a folder of analyze, prune, "
            "compare or atlas"
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
    _check_writable(folder)


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
