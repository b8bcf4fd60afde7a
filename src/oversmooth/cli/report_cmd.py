"""``oversmooth report DIR``: re-render figures and reports from a run's data files."""

from __future__ import annotations

import csv
import io
import json
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer

from oversmooth.cli import options as O
from oversmooth.config import upgrade_record, value_at
from oversmooth.outputs import (
    check_path_text,
    clean_stale_siblings,
    folder_lock,
    probe_writable,
    put_back,
    rebuilt,
)
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
# a training run's report reads its history (one row per epoch), the result in summary.json
# and dynamics.csv, the layers' energies at the probed epochs, when the run has one
_TRAIN_HISTORY = ("epoch", "loss", "val_loss", "train_acc", "val_acc", "test_acc")
_TRAIN_DYNAMICS = ("epoch", "layer", "laplacian_energy")
_RERUN = "rerun the command that wrote it"


def report(
    folder: Annotated[
        Path,
        typer.Argument(
            metavar="FOLDER",
            help="A folder written by analyze, prune, compare, atlas, train or bench.",
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
            f"{path}: missing; expected a folder from analyze, prune, compare, atlas, train or "
            "bench"
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text; the file is corrupt, {_RERUN}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); {_RERUN}"
        ) from None


def _check_csv(
    path: Path,
    columns: tuple[str, ...],
    required: bool,
    numbers: bool = True,
    rows: bool = True,
) -> Any:
    """The table at ``path`` (a DataFrame; None for a missing optional one), checked: readable,
    whole, with ``columns`` and (``rows``) rows, and (``numbers``) numbers where a metric's
    column is; one line naming the file otherwise."""
    import pandas as pd

    if not path.is_file():
        if required:
            raise FileNotFoundError(f"{path}: missing; {_RERUN}")
        return None
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
    if missing or (rows and frame.empty):
        what = f"no column {', '.join(missing)}" if missing else "no rows"
        raise ValueError(f"{path}: {what}; {_RERUN}")
    if numbers:
        _check_numbers(path, frame)
    return frame


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
    """A column of numbers (a metric's, a coordinate's, or most of its values read as numbers)
    with a value that does not: the file was edited or damaged, and the renderer would stop
    inside pandas ("could not convert string to float: 'abc'", naming no file, for a metric
    column of words: an audit)."""
    import pandas as pd

    import oversmooth

    # the metrics' columns are named after their functions, which the package exports (read
    # without importing torch, as oversmooth.metrics would); energy_<m> for the orders m
    numeric = set(oversmooth.__all__) | {"layer", "seed", "step", "depth", "epoch", "float_floor"}
    for column in frame.columns:
        values = frame[column]
        if pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            continue
        numbers = pd.to_numeric(values, errors="coerce")
        bad = numbers.isna() & values.notna()
        known = column in numeric or str(column).startswith("energy_")
        if bad.any() and (known or numbers.notna().sum() > bad.sum()):
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
        _check_evidence(path, key, record)


#: Where a verdict record (fits.json) holds numbers (or null); a word there left the verdict
#: sentence without its clause, with no word of it (an audit set final_energy to "big")
_RECORD_NUMBERS = ("final_energy", "float_floor", "float64_final_energy", "layers_at_floor")
_EVIDENCE_NUMBERS = ("final_energy", "seeds", "usable_layers", "layers_at_floor")
_RATE_NUMBERS = ("value", "exponent", "shift")
_RATE_PAIRS = ("interval", "exponent_interval")


def _check_evidence(path: Path, key: str, record: dict) -> None:
    """A record's numbers must be numbers: the record's own, and, in a verdict of this
    version (codes and numbers; an older one's words are shown as they are), the evidence's,
    its rates' and its inner numbers (every one but the law's ``model`` description)."""

    def number(where: str, value: object) -> None:
        if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            return
        raise ValueError(f"{path}: {where} is {value!r}, expected a number; {_RERUN}")

    for name in _RECORD_NUMBERS:
        if name in record:
            number(f"{key}.{name}", record[name])
    if "evidence" not in record:
        return
    evidence = record["evidence"]
    if not isinstance(evidence, dict):
        raise ValueError(
            f"{path}: {key}.evidence must be an object, received {evidence!r}; {_RERUN}"
        )
    from oversmooth.report.prose import numeric_verdict

    if not numeric_verdict(evidence):
        return  # an older version's verdict, in words, shown as it is
    where = f"{key}.evidence"
    for name in _EVIDENCE_NUMBERS:
        if name in evidence:
            number(f"{where}.{name}", evidence[name])
    for name in ("rate", "asymptotic_rate"):
        rate = evidence.get(name)
        if rate is None:
            continue
        if not isinstance(rate, dict):
            raise ValueError(f"{path}: {where}.{name} must be an object or null; {_RERUN}")
        for field in _RATE_NUMBERS:
            if field in rate:
                number(f"{where}.{name}.{field}", rate[field])
        for field in _RATE_PAIRS:
            pair = rate.get(field)
            if field in rate and not (isinstance(pair, list) and len(pair) == 2):
                raise ValueError(
                    f"{path}: {where}.{name}.{field} is {pair!r}, expected two numbers; {_RERUN}"
                )
            for value in pair or ():
                number(f"{where}.{name}.{field}", value)
    inner = evidence.get("evidence", {})
    if isinstance(inner, dict):
        for name, value in inner.items():
            if isinstance(value, str) and name != "model":
                number(f"{where}.evidence.{name}", value)


#: What the configuration's keys the report reads must hold.
_CONFIG_TYPES = {
    "depth": "a whole number",
    "seeds": "a list of whole numbers",
    "depths": "a list of whole numbers",
    "name": "text",
    "conv": "text",
    "dataset": "text",
    "models": "a list of names",
    "convs": "a list of names",
    "datasets": "a list of names",
}


def _typed(value: object, kind: str) -> bool:
    def whole(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if kind == "a whole number":
        return whole(value)
    if kind == "text":
        return isinstance(value, str)
    if not isinstance(value, list) or not value:
        return False
    return all(whole(v) if kind == "a list of whole numbers" else isinstance(v, str) for v in value)


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
        raise FileNotFoundError(
            f"{folder}: no such folder; pass a folder written by analyze, prune, compare, "
            "atlas, train or bench (the `report:` line they print names it)"
        )
    if not folder.is_dir():
        raise ValueError(
            f"{folder}: not a folder; pass one written by analyze, prune, compare, atlas, train "
            "or bench"
        )
    config_path = folder / "config.json"
    if not config_path.exists():
        _refuse_a_sweeps_folder(folder)
        _refuse_a_bench_folder(folder)
    config = _read_json(config_path)
    if not isinstance(config, dict):
        raise ValueError(f"{config_path}: expected a JSON object; {_RERUN}")
    config = upgrade_record(config)
    command = config.get("command")
    if command not in _NEEDS:
        raise ValueError(
            f"{config_path}: unknown command {command!r}; expected a folder of analyze, prune, "
            "compare, atlas, train or bench"
        )
    missing = [k for k in _CONFIG_KEYS[command] if not _has(config, k)]
    if missing:
        raise ValueError(f"{config_path}: missing {', '.join(missing)}; {_RERUN}")
    for key in _CONFIG_KEYS[command]:
        value, kind = value_at(config, key), _CONFIG_TYPES.get(key.rsplit(".", 1)[-1])
        if kind is not None and not _typed(value, kind):
            # a hand-edited depth "x" was drawn into the title and the rerun command (exit 0)
            raise ValueError(
                f"{config_path}: {key} is {value!r}, expected {kind}; {_RERUN} (or restore it)"
            )
    for name, columns in _NEEDS[command].items():
        if name.endswith(".json"):
            _check_fits(folder / name, command)
        else:
            _check_csv(folder / name, columns, required=True)
    if command != "compare":
        for name, columns in _OPTIONAL.items():
            _check_csv(folder / name, columns, required=False)
        _check_layers(folder / "metrics.csv", config)
    _check_digests(folder, config)
    _check_writable(folder)


def _check_digests(folder: Path, config: dict) -> None:
    """Each data file whose SHA-256 config.json records must still be the file the run wrote:
    a metrics.csv cut short at a row or edited was drawn beside the run's verdict and fits,
    computed from other numbers, with no word (an audit)."""
    from oversmooth.outputs import file_digest

    digests = config.get("digests")
    if not isinstance(digests, dict):
        return  # a folder of an older version: nothing recorded to check against
    for name, recorded in digests.items():
        path = folder / str(name)
        if not path.is_file():  # the report was drawn without it (an audit)
            raise FileNotFoundError(
                f"{path}: missing, and the run wrote it (config.json records its SHA-256): "
                f"restore the file, or {_RERUN}"
            )
        if file_digest(path) != recorded:
            raise ValueError(
                f"{path}: not the file the run wrote (its SHA-256 differs from the one "
                "config.json records), and the report would draw it beside the run's verdict "
                f"and fits, computed from the numbers as written: restore the file, or {_RERUN}"
            )


def _check_layers(path: Path, config: dict) -> None:
    """An analyze or prune folder's metrics.csv holds every layer 0..depth of every seed the
    run measured: rows cut from it (whole rows, so every line is as long as the header) were
    drawn as a mean over fewer seeds, beside a verdict pooling them all."""
    import pandas as pd

    metrics = pd.read_csv(path, usecols=["seed", "layer"])
    depth, seeds = int(value_at(config, "model.depth")), value_at(config, "seeds")
    want = depth + 1
    counts = metrics.groupby("seed")["layer"].nunique()
    short = {int(s): int(n) for s, n in counts.items() if n != want}
    absent = sorted(set(int(s) for s in seeds) - set(int(s) for s in counts.index))
    if short or absent:
        which = (
            f"seed {next(iter(short))} has {next(iter(short.values()))} of its {want} layers"
            if short
            else f"seed {absent[0]} has no rows"
        )
        raise ValueError(
            f"{path}: {which} (config.json: seeds {list(seeds)}, depth {depth}); the file was "
            f"cut short or edited: restore it, or {_RERUN}"
        )


def _refuse_a_sweeps_folder(folder: Path) -> None:
    """A sweep's folder holds its reports in ``report-*`` folders: name them (it said
    "config.json: missing; expected a folder from analyze, ...": an audit)."""
    from oversmooth.outputs import folder_kind

    if folder_kind(folder) != "sweep":
        return
    reports = sorted(p.name for p in folder.glob("report-*") if (p / "config.json").is_file())
    where = (
        f"its reports are in {', '.join(f'{folder / r}' for r in reports[:3])}"
        + (f" and {len(reports) - 3} more" if len(reports) > 3 else "")
        + ": pass one of them"
        if reports
        else "it holds no report yet: rerun the sweep to finish and merge it"
    )
    raise ValueError(f"{folder}: a sweep's folder, which has no report of its own; {where}")


def _refuse_a_bench_folder(folder: Path) -> None:
    """A folder without config.json: a bench's has results.json; say what is wrong with it, or
    that neither is there (a bench folder without its results.json was told "config.json:
    missing", a file no bench writes; an audit)."""
    results = folder / "results.json"
    if results.is_file():
        if not isinstance(_read_json(results), dict) or _bench_results(folder) is None:
            raise ValueError(
                f"{results}: not the results of oversmooth bench (no schema_version and "
                "targets); rerun oversmooth bench"
            )
        return
    raise FileNotFoundError(
        f"{folder}: neither config.json (written by analyze, prune, compare, atlas and train) "
        "nor results.json (by bench); pass a folder one of them wrote, or rerun the command "
        "that wrote this one"
    )


def _command_of(folder: Path) -> object:
    """The command that wrote ``folder`` as its config.json says (``bench`` for a folder with
    no config.json and the ``results.json`` of :func:`oversmooth.experiments.bench.run_bench`),
    else None (:func:`check_report_folder` then says what is wrong)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "bench" if _bench_results(folder) is not None else None
    except (OSError, ValueError):
        return None
    return config.get("command") if isinstance(config, dict) else None


def _bench_results(folder: Path) -> dict | None:
    """``folder``'s bench results (``results.json`` with its schema and targets), or None."""
    try:
        results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(results, dict) and "schema_version" in results and "targets" in results:
        return results
    return None


def _check_atlas_folder(folder: Path) -> None:
    """An atlas folder's files, each readable and whole (one line naming a file that is not),
    and unchanged since the atlas wrote them where its config.json records their digests: a
    corrupt fits.json stopped inside the JSON parser without naming the file, an empty one as
    a KeyError (exit 1), and an edited curve was drawn beside the verdict of the measured one
    (an audit)."""
    check_path_text(folder, "FOLDER")
    config = _read_json(folder / "config.json")
    if not isinstance(config, dict):
        raise ValueError(f"{folder / 'config.json'}: expected a JSON object; {_RERUN}")
    fits = _read_json(folder / "fits.json")
    if not isinstance(fits, dict):
        raise ValueError(f"{folder / 'fits.json'}: expected a JSON object; {_RERUN}")
    # its `verdict` column holds labels (the name of a metric function: no numbers check)
    _check_csv(folder / "atlas.csv", ("architecture",), required=True, numbers=False)
    _check_csv(folder / "curves.csv", _ATLAS_CURVES, required=True)
    # no rows where no seed was pruned (prune_seeds=0; refused, an audit)
    _check_csv(folder / "prune.csv", (), required=False, rows=False)
    _check_digests(folder, config)
    _check_writable(folder)


_ATLAS_CURVES = ("architecture", "dataset", "seed", "layer", "laplacian_energy")


def _render_training(folder: Path, formats: tuple[str, ...]) -> None:
    """Redraw a finished ``oversmooth train`` folder: ``training.png``, ``dynamics.png`` (when
    the run probed its layers), ``report.md`` and ``report.html``, from ``history.csv``,
    ``summary.json`` and ``dynamics.csv``; the checkpoints are not read."""
    from oversmooth.report.writers import write_training_report

    check_path_text(folder, "FOLDER")
    summary_path = folder / "summary.json"
    if not summary_path.is_file():
        raise FileNotFoundError(
            f"{summary_path}: missing; the run has not finished (resume it with oversmooth "
            f"train --resume --out {folder}), or it was written by an older oversmooth"
        )
    summary = _read_json(summary_path)
    best = summary.get("best_epoch") if isinstance(summary, dict) else None
    if not isinstance(summary, dict) or isinstance(best, bool) or not isinstance(best, int):
        raise ValueError(f"{summary_path}: expected an object with an integer best_epoch; {_RERUN}")
    history = _check_csv(folder / "history.csv", _TRAIN_HISTORY, required=True)
    dynamics = _check_csv(folder / "dynamics.csv", _TRAIN_DYNAMICS, required=False)
    config = _read_json(folder / "config.json")
    _check_digests(folder, config if isinstance(config, dict) else {})
    _check_writable(folder)
    history = history.to_dict("records")
    dynamics = None if dynamics is None else dynamics.to_dict("records")
    write_training_report(folder, history, best, summary, dynamics, figure_formats=formats)


def _render(folder: Path, command: str, formats: Any) -> None:
    """Rebuild the report of ``folder``, written by ``command``, with all its new files or
    none."""
    from oversmooth.report.render import render_report

    if command == "atlas":  # its own renderer, from atlas.csv, curves.csv and fits.json
        from oversmooth.experiments.atlas import render_atlas

        _check_atlas_folder(folder)
        with rebuilt(folder) as work:  # all the new files, or none
            try:
                render_atlas(work, formats)
            except (KeyError, TypeError, ValueError) as exc:  # nothing is moved in
                raise ValueError(
                    f"{folder}: its atlas.csv, curves.csv, fits.json and config.json do not fit "
                    f"together ({type(exc).__name__}: {exc}); {_RERUN} (oversmooth atlas)"
                ) from None
    elif command == "bench":  # from results.json, as the bench wrote it: nothing re-measured
        from oversmooth.report.writers import write_bench_report

        results = _bench_results(folder)
        assert results is not None  # _command_of found them
        with rebuilt(folder) as work:
            try:
                write_bench_report(work, results, formats)
            except (KeyError, TypeError, ValueError) as exc:  # nothing is moved in
                raise ValueError(
                    f"{folder / 'results.json'}: results schema "
                    f"{results.get('schema_version')} lacks what this version's bench report "
                    f"reads ({type(exc).__name__}: {exc}); rebuild it with the oversmooth that "
                    "wrote it, or rerun oversmooth bench"
                ) from None
    elif command == "train":
        _render_training(folder, formats)
    else:
        check_report_folder(folder)
        with rebuilt(folder) as work:
            render_report(work, figure_formats=formats)


def _run(folder: Path, as_json: bool = False, figure_format: str | None = None) -> None:
    from oversmooth.report.formats import figure_formats
    from oversmooth.report.render import rebuilding

    formats = figure_formats(figure_format)
    # the claim a run writing the folder holds: a rebuild beside `analyze --overwrite` read
    # the old run's tables and wrote its report into the new run's folder
    try:
        found = folder.is_dir()
    except OSError:  # a name too long, ...: said by the checks below
        found = False
    # (a folder that is not there is not locked: the checks below say what is wrong)
    unwritable = (
        f"report: cannot write beside {folder} in {folder.parent} (read-only or not yours): the "
        "rebuild puts its lock and its copy of the folder there; copy the folder somewhere "
        "writable and run report on the copy"
    )
    if not found and put_back(folder, unwritable):
        found = folder.is_dir()
    command = _command_of(folder)  # read once a folder set aside is back
    # a rebuild moves the files it wrote into the folder: in place
    with (
        folder_lock(folder, unwritable, in_place=True, rebuild=True)
        if found
        else nullcontext(folder) as folder
    ):
        if found:  # a killed rebuild's copy (.NAME.tmp-PID), which no later rebuild removed
            clean_stale_siblings(folder)
        with rebuilding():  # the pages say which version rebuilt them
            _render(folder, command, formats)
    if as_json:
        command = _command_of(folder)  # a bench folder has no config.json (an audit)
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
