"""Grid sweeps: models x convs x depths x datasets x seeds x modes, resumable.

Every cell runs in a worker process with one torch thread (all cores busy, no
oversubscription) and is written atomically to its own JSON file under
``OUT/cells/``.  A cell is identified by a hash of everything that changes its
result: its grid coordinates, every option that is not about how or where the
sweep runs (any field of :class:`SweepSpec` outside ``GRID_KEYS`` and
``RUN_KEYS``, so a new option joins the identity by itself) and the package
version.  A rerun skips the cells that finished with the same identity; a
folder whose finished cells were computed with other options is refused before
any work, and cells from another package version are recomputed.

A sweep holds an exclusive claim on its folder for its whole run (a second
sweep into it exits at once, naming the owner), checks names, datasets, device
and sizes before the first cell starts, and runs cells in workers that die
with it.  A worker that dies costs only the cell it was computing: that cell is
retried once in a fresh worker, then recorded as failed; the other cells go on.
A cell that raises is recorded with its reason (``status: failed``) and retried
on the next run.  At the end the cells are merged into ``metrics.csv`` (one row
per layer and cell), ``summary.csv`` (one row per cell) and a comparison report
per (conv, mode) group, the same report ``oversmooth compare`` writes.

Backends: ``local`` (a process pool, the default) or ``ray`` (``pip install
oversmooth[ray]``), which connects to ``ray_address`` or starts a local
cluster.  Both run the same cell function, so they give identical tables.

A spec file is TOML::

    [grid]
    models = ["preln", "postln", "nonlocal"]
    convs = ["san"]
    depths = [2, 32, 64]
    datasets = ["cora"]
    seeds = [0, 1, 2]
    modes = ["init"]          # "init" and/or "trained"

    [options]                 # optional
    hidden = 32
    heads = 4
    epochs = 300              # trained mode
    device = "auto"           # default; or cpu, cuda, cuda:N
    backend = "local"         # or "ray"
    workers = 2               # default: all cores
    ray_address = "auto"      # ray only; default: start a local cluster
    out = "reports/sweep"
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import json
import math
import os
import re
import shutil
import signal
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from oversmooth.version import __version__
from oversmooth.experiments.cells import DATA_FILES, cell_id, cell_key, failed_record
from oversmooth.config import (
    DERIVED,
    MAX_DEPTH,
    MODEL_FIELDS,
    SEED_RANGE,
    ModelConfig,
    is_seed,
    set_by_run,
    with_data_sizes,
)
from oversmooth.registry import upgrade_columns
from oversmooth.run_configs import ComparisonConfig
from oversmooth.outputs import (
    MARKER,
    check_out,
    check_path_text,
    claim_folder,
    json_text,
    working_inside,
    write_json,
    write_marker,
)
from oversmooth.report.formats import table_formats as table_formats_of
from oversmooth.report.formats import CSV_FLOAT, write_table

if TYPE_CHECKING:
    import pandas as pd

    from oversmooth.analysis import AnalysisConfig, AnalysisResult, ComparisonResult

__all__ = [
    "SweepSpec",
    "load_spec",
    "cell_id",
    "cell_key",
    "run_cell",
    "run_sweep",
    "merge",
    "write_cell",
    "WORKER_PRELOAD",
    "worker_context",
    "start_worker_server",
]

GRID_KEYS = frozenset({"models", "convs", "depths", "datasets", "seeds", "modes"})
# How and where a sweep runs; never changes a cell's numbers, so not part of its identity.
RUN_KEYS = frozenset({"backend", "workers", "ray_address", "out"})
MODES = ("init", "trained")
BACKENDS = ("local", "ray")


@dataclass(frozen=True)
class SweepSpec:
    """A grid (``models`` x ``convs`` x ``depths`` x ``datasets`` x ``seeds`` x ``modes``) and
    how its cells run.  ``model``: every other model field, shared by all cells (its name,
    conv, depth and seed are the first cell's)."""

    #: the model fields its lists set: those of a comparison
    GRID: ClassVar[Mapping[str, str]] = ComparisonConfig.GRID

    models: tuple[str, ...] = ("preln", "postln", "nonlocal")
    convs: tuple[str, ...] = ("san",)
    depths: tuple[int, ...] = (2, 32)
    datasets: tuple[str, ...] = ("cora",)
    seeds: tuple[int, ...] = (0,)
    modes: tuple[str, ...] = ("init",)
    # every cell's model runs in float64 (see oversmooth.precision); trained cells train in
    # float32, as `oversmooth train` does, and are analysed in this precision
    model: ModelConfig = field(default_factory=lambda: ModelConfig(dtype="float64"))
    epochs: int = 300
    device: str = "auto"  # resolved in the cell identity (cpu or cuda)
    backend: str = "local"
    workers: int | None = None
    ray_address: str | None = None
    out: str = "reports/sweep"
    data_root: str | None = None

    def __post_init__(self) -> None:
        from oversmooth.registry import CONVS, MODELS, Registry

        if not isinstance(self.model, ModelConfig):
            raise ValueError(f"model: expected a ModelConfig, received {self.model!r}")
        for key in sorted(GRID_KEYS):  # None or a bare value used to fail as "not iterable"
            if not isinstance(getattr(self, key), (tuple, list)):
                raise ValueError(
                    f"{key}: expected a list of values, received {getattr(self, key)!r}"
                )
        modes = Registry("modes", dict.fromkeys(MODES))
        for key, valid in (("models", MODELS), ("convs", CONVS), ("modes", modes)):
            values = getattr(self, key)
            if not values:
                raise ValueError(f"{key}: expected at least one value")
            for v in values:
                valid.resolve(v, kind=key)
        for key in GRID_KEYS:
            values = getattr(self, key)
            repeated = [v for i, v in enumerate(values) if v in values[:i]]
            if repeated:
                raise ValueError(f"{key}: {repeated[0]!r} appears twice; list each value once")
        too_deep = [d for d in self.depths if isinstance(d, int) and d > MAX_DEPTH]
        if too_deep:  # refused up front, as analyze does, not by each cell after the start-up
            raise ValueError(
                f"depths: expected integers in [1, {MAX_DEPTH}], received {too_deep[0]}"
            )
        if not self.depths or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in self.depths
        ):
            raise ValueError(
                f"depths: expected a list of integers >= 1, received {list(self.depths)}"
            )
        if not self.seeds or not all(is_seed(v) for v in self.seeds):
            raise ValueError(
                f"seeds: expected a list of integers in {SEED_RANGE}, received {list(self.seeds)}"
            )
        if not self.datasets or any(not isinstance(d, str) or not d for d in self.datasets):
            raise ValueError(
                f"datasets: expected a list of dataset names, received {list(self.datasets)}"
            )
        first = {axis: (GRID_OF[axis], getattr(self, GRID_OF[axis])[0]) for axis in GRID_OF}
        object.__setattr__(self, "model", set_by_run(self.model, "a sweep", **first))
        for model, conv in itertools.product(self.models, self.convs):  # every model-field check
            replace(self.model, name=model, conv=conv)
        self._check_run_options()

    def _check_run_options(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(
                f"backend: expected one of {', '.join(BACKENDS)}, received {self.backend!r}"
            )
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) or self.epochs < 1:
            raise ValueError(f"epochs: expected an integer >= 1, received {self.epochs!r}")
        if self.workers is not None and (
            isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1
        ):
            raise ValueError(f"workers: expected an integer >= 1, received {self.workers!r}")
        if not isinstance(self.device, str):
            raise ValueError(
                f"device: expected auto, cpu, cuda or cuda:N, received {self.device!r}"
            )
        if not isinstance(self.out, str) or not self.out:
            raise ValueError(f"out: expected a folder path, received {self.out!r}")
        for key in ("ray_address", "data_root"):
            if getattr(self, key) is not None and not isinstance(getattr(self, key), str):
                raise ValueError(f"{key}: expected a string, received {getattr(self, key)!r}")
        _check_device(self.device)
        _check_ray_options(self.backend, self.ray_address)

    def cells(self) -> list[dict]:
        return [
            {"model": m, "conv": c, "depth": d, "dataset": ds, "seed": s, "mode": mode}
            for mode, ds, c, m, d, s in itertools.product(
                self.modes, self.datasets, self.convs, self.models, self.depths, self.seeds
            )
        ]

    def options(self) -> dict:
        """Every setting that can change a cell's numbers: the fields outside the grid and
        ``RUN_KEYS``, the model's by their own names (``hidden``, ``norm``, ...).

        ``hidden``, ``heads`` and ``dtype`` are always there; another model field only when
        it is not at its default, so that the identity of a cell computed before that field
        could be swept is unchanged.
        """
        skip = GRID_KEYS | RUN_KEYS | {"model"}
        options = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        default = ModelConfig()
        for name, value in self.model.to_dict().items():
            if name in self.GRID or f"model.{name}" in DERIVED:
                continue
            if name in _ALWAYS_IN_IDENTITY or value != getattr(default, name):
                options[name] = value
        if options.get("device") == "auto":  # the device the cells will really run on
            from oversmooth.runtime import resolve_device

            options["device"] = resolve_device("auto").type
        return options

    def to_dict(self) -> dict:
        return asdict(self)


# the model fields of a cell's identity since before the model was nested
_ALWAYS_IN_IDENTITY = ("hidden", "heads", "dtype")
# model field -> the grid list that sets it
GRID_OF = dict(SweepSpec.GRID)
_SWEEPABLE_MODEL_FIELDS = (
    frozenset(MODEL_FIELDS)
    - set(SweepSpec.GRID)
    - {path.removeprefix("model.") for path in DERIVED}
)


#: what a spec's [options] table may set: the run fields and the model fields (by name)
OPTION_KEYS = (frozenset(f.name for f in fields(SweepSpec)) - GRID_KEYS - {"model"}) | (
    _SWEEPABLE_MODEL_FIELDS
)


def _check_ray_options(backend: str, address: str | None) -> None:
    """An address that cannot name a Ray cluster, or one given to the local backend (which
    would ignore it), is refused before anything runs."""
    if address is None:
        return
    if backend != "ray":
        raise ValueError(
            f"ray_address: given ({address!r}) but the backend is {backend}, which would "
            'ignore it; add --backend ray (or backend = "ray" in the spec) or drop it'
        )
    from oversmooth.experiments.sweep_ray import check_address

    check_address(address)


def _check_device(device: str) -> None:
    """Refuse a device this machine cannot run before any cell starts."""
    from oversmooth.runtime import resolve_device

    resolved = resolve_device(device)
    if resolved.type == "cuda" and resolved.index is not None:
        import torch

        if resolved.index >= torch.cuda.device_count():
            raise ValueError(
                f"device: {device!r} asked for, but this machine has "
                f"{torch.cuda.device_count()} CUDA device(s); use cuda:0 or cpu"
            )


def _toml() -> Any:
    """The TOML reader: ``tomllib`` (Python 3.11+) or its backport ``tomli`` (Python 3.10, a
    dependency there), which has the same ``loads`` and ``TOMLDecodeError``."""
    try:
        import tomllib
    except ImportError:
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib


def load_spec(path: str | os.PathLike, overrides: Mapping[str, Any] | None = None) -> SweepSpec:
    """Read a TOML spec, with ``overrides`` (dotted field paths, ``{"model.norm": "graph"}``, as
    the command line gives them) on top; unknown sections or keys and bad values raise one
    ``ValueError`` naming them.  ``[options]`` names model fields by their own names
    (``hidden = 16``)."""
    from oversmooth.config import build

    tomllib = _toml()
    path = Path(check_path_text(path, "spec"))
    if path.is_dir():
        raise ValueError(f"{path}: a folder; expected a TOML spec file (docs/sweep.md)")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such spec file")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); save the spec as UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML ({exc})") from None
    if not raw:  # an empty file used to run the default grid
        raise ValueError(
            f"{path}: the spec is empty; expected a [grid] table (models, depths, datasets, "
            "...) and optionally [options]; see `oversmooth sweep --help`"
        )
    unknown = set(raw) - {"grid", "options"}
    if unknown:
        raise ValueError(
            f"{path}: unknown section [{sorted(unknown)[0]}]; expected [grid] and [options]"
        )
    grid, options = raw.get("grid", {}), raw.get("options", {})
    for section, table in (("grid", grid), ("options", options)):
        if not isinstance(table, dict):
            raise ValueError(
                f"{path}: {section} must be a table ([{section}] followed by "
                f"key = value lines), received {section} = {table!r}"
            )
    for section, keys, valid in (("grid", grid, GRID_KEYS), ("options", options, OPTION_KEYS)):
        bad = set(keys) - valid
        if bad:
            raise ValueError(
                f"{path}: unknown key {section}.{sorted(bad)[0]}; "
                f"expected one of {', '.join(sorted(valid))}"
            )
    values: dict = {}
    for key, value in grid.items():
        if not isinstance(value, list):
            raise ValueError(f"{path}: grid.{key} must be a list, received {value!r}")
        values[key] = tuple(value)
    for key, value in options.items():
        values[f"model.{key}" if key in _SWEEPABLE_MODEL_FIELDS else key] = value
    values.update(overrides or {})
    try:
        return build(SweepSpec, values)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def run_cell(cell: dict, options: dict, out: str) -> dict:
    """Compute one cell (in a worker); returns a JSON-able record, never raises."""
    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    record: dict[str, Any] = {
        "cell": cell,
        "id": cell_id(cell),
        "key": cell_key(cell, options),
        "options": options,
        "version": __version__,
    }
    try:
        from oversmooth.analysis import run_analysis

        # a trained cell's run goes under the sweep's runs/, inside the folder the sweep holds
        with working_inside(out):
            config = _cell_analysis(cell, options, Path(out) / "runs" / record["id"], record)
        record.update(_finished_fields(run_analysis(config)))
    except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
        record.update(
            {
                "status": "failed",
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=8),
            }
        )
    record["seconds"] = time.perf_counter() - started
    return record


def _cell_model(cell: dict, options: dict) -> ModelConfig:
    """The model of ``cell``: its grid coordinates, and every other field from ``options``."""
    return ModelConfig(
        **{k: v for k, v in options.items() if k in _SWEEPABLE_MODEL_FIELDS},
        **{field: cell[axis.removesuffix("s")] for field, axis in GRID_OF.items()},
    )


def _cell_analysis(cell: dict, options: dict, run_dir: Path, record: dict) -> AnalysisConfig:
    """The analysis of ``cell``: its model at initialisation, or (trained mode) the best
    checkpoint of its training into ``run_dir``, whose best scores go into ``record``."""
    from oversmooth.analysis import AnalysisConfig

    model = _cell_model(cell, options)
    where = {"device": options["device"], "data_root": options.get("data_root")}
    if cell["mode"] != "trained":
        return AnalysisConfig(
            model=model,
            dataset=cell["dataset"],
            seeds=(cell["seed"],),
            similarity=False,
            **where,
        )
    from oversmooth.config import default_of
    from oversmooth.report.writers import write_training_report
    from oversmooth.train import TrainConfig, train

    # trained in float32, as `oversmooth train` does; analysed in the sweep's dtype
    trained = replace(model, dtype=default_of(TrainConfig, "model.dtype"))
    result = train(
        TrainConfig(model=trained, dataset=cell["dataset"], epochs=options["epochs"], **where),
        run_dir,
        overwrite=True,
        report=write_training_report,
    )
    if result.stopped in ("interrupted", "terminated"):  # a signal sent to the worker
        raise RuntimeError(f"training {result.stopped} after {result.epochs_run} epochs")
    record["training"] = {"best_epoch": result.best_epoch, **result.best}
    return AnalysisConfig.from_checkpoint(
        str(run_dir / "best.pt"), {**where, "similarity": False, "model.dtype": model.dtype}
    )


def _finished_fields(analysis: AnalysisResult) -> dict[str, Any]:
    """What a finished cell's record holds besides its identity: the per-layer metrics (the
    seed column dropped), the final energy, the classification and the verdict line."""
    from oversmooth.report.prose import analysis_title, verdict_text

    frame = analysis.metrics.drop(columns=["seed"])
    reference = analysis.fits["mean_over_seeds"].get("reference", {}).get("diffusion", {})
    return {
        "status": "ok",
        "final_energy": float(frame["laplacian_energy"].iloc[-1]),
        "classification": analysis.label,
        "verdict": verdict_text(analysis.verdict, analysis_title(analysis.config)),
        "metrics": {c: frame[c].tolist() for c in frame.columns},
        # the graph's linear-diffusion reference, so that the merge need not load the dataset
        # and solve its eigenproblem again
        "diffusion": {k: v for k, v in reference.items() if k != "measured"},
        # the model's input and output sizes as the data set them, for the merged reports'
        # config.json (which recorded the config's placeholder 1 and 1, an audit)
        "sizes": [
            analysis.config["model"]["in_channels"],
            analysis.config["model"]["out_channels"],
        ],
    }


def write_cell(folder: Path, record: dict) -> None:
    """Write one cell's record as ``folder/<cell id>.json`` (atomically, one line)."""
    write_json(folder / f"{record['id']}.json", record, indent=None)


def _records(folder: Path) -> list[dict]:
    """Every readable cell record in ``folder`` (an unreadable one is recomputed, so skipped;
    so is one whose contents are not a cell's: :func:`_whole`)."""
    records = []
    for path in sorted(folder.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if _whole(record, path.stem):
            records.append(_with_nan(record))
    return records


def _whole(record: Any, name: str) -> bool:
    """Whether ``record`` (read from the file ``name``.json) is a cell's record: a dict whose
    cell gives its id and its file's name, and, when finished (``ok``), per-layer metrics as
    lists of numbers of one length.  A valid JSON file edited or damaged inside (no metrics,
    a list cut short, another seed than its name) made every rerun fail after the merged
    tables were removed, or merged one seed twice and another never (an audit)."""
    if not isinstance(record, dict) or not isinstance(record.get("cell"), dict):
        return False
    try:
        if record.get("id") != name or cell_id(record["cell"]) != name:
            return False
    except (KeyError, TypeError, ValueError):
        return False
    if record.get("status") != "ok":
        return True
    metrics = record.get("metrics")
    if not isinstance(metrics, dict) or "laplacian_energy" not in metrics:
        return False
    lengths = set()
    for values in metrics.values():
        # numbers, NaN as null, and at_floor's booleans
        if not isinstance(values, list) or not all(
            v is None or isinstance(v, (int, float)) for v in values
        ):
            return False
        lengths.add(len(values))
    return len(lengths) == 1 and lengths != {0}


def _with_nan(record: dict) -> dict:
    """``record`` with the numbers JSON stores as ``null`` (NaN, +-Inf) back as NaN: the
    per-layer metrics, the final energy and the training scores."""
    nan = float("nan")
    metrics = record.get("metrics")
    if isinstance(metrics, dict):
        record["metrics"] = {
            name: [nan if v is None else v for v in values] if isinstance(values, list) else values
            for name, values in metrics.items()
        }
    if "final_energy" in record and record["final_energy"] is None:
        record["final_energy"] = nan
    if isinstance(record.get("training"), dict):
        record["training"] = {k: nan if v is None else v for k, v in record["training"].items()}
    return record


def _finished(records: list[dict], keys: dict[str, str]) -> dict[str, dict]:
    """The ``ok`` records whose key is the one the current spec gives their cell (id -> key)."""
    return {
        r["id"]: r
        for r in records
        if r.get("status") == "ok" and keys.get(r.get("id", "")) == r.get("key")
    }


def _check_same_options(out: Path, records: list[dict], options: dict) -> None:
    """Refuse a folder whose finished cells were computed with other options.

    Compares the options a record and this sweep both name (a record from a release
    without some option is recomputed, not refused; its key differs anyway).
    """
    options = json.loads(json_text(options, indent=None))  # as a record stores them
    default = ModelConfig()
    defaults = {  # a model field at its default is left out of the options (SweepSpec.options)
        name: json.loads(json_text(getattr(default, name), indent=None))
        for name in _SWEEPABLE_MODEL_FIELDS
    }
    for record in records:
        theirs = record.get("options")
        if record.get("status") != "ok" or not isinstance(theirs, dict):
            continue
        for name in sorted(set(theirs) | set(options)):
            if (name not in theirs or name not in options) and name not in defaults:
                continue  # an option a release did not have: recomputed (its key differs)
            mine = options.get(name, defaults.get(name))
            was = theirs.get(name, defaults.get(name))
            if was == mine:
                continue
            if name == DATA_FILES:
                # a file that joined or left the grid is no conflict (its cells are its own);
                # one read with other contents under the same name is
                was, mine = was or {}, mine or {}
                changed = sorted(k for k in set(was) & set(mine) if was[k] != mine[k])
                if not changed:
                    continue
                raise ValueError(
                    f"--out: {out} holds cells computed on other contents of "
                    f"{', '.join(changed)} (the file changed since, or another file has its "
                    f"name); choose another --out (or delete {out} to recompute)"
                )
            raise ValueError(
                f"--out: {out} holds cells computed with {name}={was!r}, but this "
                f"sweep asks {name}={mine!r}; choose another --out "
                f"(or delete {out} to recompute)"
            )


#: The tables :func:`merge` writes (each as CSV, and Parquet when asked).
MERGED_TABLES = ("metrics", "summary", "failed")

_LOCK_NAME = re.compile(r"^\..+\.lock$")


def _clean_litter(out: Path) -> None:
    """Remove hidden temporary files and folders (``.NAME.tmp-PID``) and the folder locks
    (``.NAME.lock``) that dead processes left inside the sweep folder."""
    from oversmooth.outputs import HIDDEN_COPY, _pid_alive, remove_entry, remove_unheld_lock

    for folder in (out, out / "cells", out / "runs"):
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if _LOCK_NAME.match(entry.name) and entry.is_file():
                remove_unheld_lock(entry)  # only a lock no live process holds
                continue
            match = HIDDEN_COPY.match(entry.name)
            if match and not _pid_alive(int(match.group(3))):
                remove_entry(entry)


def _check_datasets(spec: SweepSpec) -> tuple[dict[str, str], dict[str, str]]:
    """Load every dataset once, so an unknown or broken one stops the sweep before any cell.

    Returns each dataset's fingerprint for the Ray backend (every node must read the same
    graph; an empty dict for the local one), and the fingerprint of each dataset read from a
    file (a ``.pt`` or ``.csv`` path), which goes into the cells' identity: a file changed
    between two runs (or another file of the same relative name) is not the graph the
    finished cells measured."""
    from oversmooth.analysis import _load_data
    from oversmooth.data import _names_a_file, check_distinct
    from oversmooth.experiments.sweep_ray import graph_fingerprint
    from oversmooth.resources import check_allocation, model_bytes

    check_distinct(spec.datasets)
    fingerprints, files = {}, {}
    deepest, m = max(spec.depths), spec.model
    for name in spec.datasets:
        # refused here as each cell's analysis would refuse it (features the model's precision
        # cannot hold, none, or all equal), not once per cell
        data, _ = _load_data(name, spec.data_root, m.dtype)
        if "trained" in spec.modes and getattr(data, "y", None) is None:
            raise ValueError(
                f"datasets: {name!r} has no labels, which trained mode needs; "
                'use modes = ["init"] or a labelled dataset'
            )
        # the deepest cell's model, checked as analyze checks its one model, before the start
        check_allocation(
            f"a sweep cell on {name} (depth {deepest}, hidden {m.hidden}"
            + (f", ffn {m.ffn})" if m.ffn is not None else ")"),
            model_bytes(deepest, m.hidden, data.num_features, 2, m.ffn),
            "cpu",
            hint="use smaller depths, hidden or ffn",
        )
        ray, is_file = spec.backend == "ray", _names_a_file(name)
        fingerprint = graph_fingerprint(data) if ray or is_file else ""
        if ray:
            fingerprints[name] = fingerprint
        if is_file:
            files[name] = fingerprint
    return fingerprints, files


# ----------------------------------------------------------------------------- local workers


_PR_SET_PDEATHSIG = 1


def _die_with_parent(main_pid: int) -> None:
    """Make this worker exit when the sweep's main process does, even on SIGKILL.

    Linux: the kernel sends SIGKILL when this worker's parent dies (``prctl``): the main
    process itself (spawn), or the fork server (which exits when the main process does).
    Everywhere: a thread checks once a second that the parent is the same and the main
    process alive, in case ``prctl`` is not available."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
    parent = os.getppid()

    def orphaned() -> bool:
        if os.getppid() != parent or parent == 1:
            return True
        try:
            os.kill(main_pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return _zombie(main_pid)

    if orphaned():  # the main process died before the lines above ran
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if orphaned():
                os._exit(1)

    threading.Thread(target=watch, name="oversmooth-parent-watch", daemon=True).start()


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has died and waits to be reaped (Linux's ``/proc``; False where there
    is none).  A killed main process that its own parent has not reaped (a Python supervisor
    that has not waited yet) still answers ``kill(pid, 0)``: its workers, children of the fork
    server, which outlives it, computed their whole cell (31 s at depth 1024) before noticing
    (an audit)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # "pid (comm) state ...": the command may hold spaces and parentheses
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in (b"Z", b"X")


#: What a cell imports, loaded once by the local backend's fork server: every worker forked
#: from it starts with them (measured on 2 cores: `import torch` 1.6 s, then 1.0 s of lazy
#: imports in a worker's first cell, paid by every worker when each was a fresh process).
#: The modules after ``scipy.sparse.linalg`` are those a cell still imported on its first
#: run (the fits' t quantiles, the spectral step's graph components, pandas' Arrow strings
#: where pyarrow is installed): 0.12-0.15 s more on each worker's first cell without them.
#: A name that does not import here is skipped by the server.
#: The server runs no torch operation, so it has no OpenMP thread pool and forking it is
#: safe, which forking the sweep's own process (which has run torch) would not be.
WORKER_PRELOAD = (
    "oversmooth.experiments.sweep",
    "oversmooth.analysis",
    "oversmooth.data",
    "oversmooth._data",
    "pandas",
    "scipy.sparse.linalg",
    "scipy.sparse.csgraph",
    "scipy.special",
    "statistics",
    "pyarrow.pandas_compat",
)


def worker_context() -> Any:
    """The multiprocessing context of local workers: a fork server that has imported
    :data:`WORKER_PRELOAD` where the platform has one (Linux, macOS), else spawn."""
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(WORKER_PRELOAD))
    return ctx


def _noop() -> None:
    """A worker that does nothing (:func:`start_worker_server` waits for one)."""


def start_worker_server(wait: bool = False) -> None:
    """Start the fork server local workers come from (once per process; later calls do
    nothing).  Its imports run in the background unless ``wait``, which returns once a first
    worker has been forked from it, i.e. once the imports are done."""
    ctx = worker_context()
    if ctx.get_start_method() != "forkserver":
        return
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()  # outside the block: it unblocks SIGINT (_start_blocked)
    with _sigint_blocked():  # the server, and every worker it forks, keep Ctrl-C blocked
        forkserver.ensure_running()
    if wait:
        proc = ctx.Process(target=_noop, daemon=True)
        _start_blocked(proc)
        proc.join()


def _worker_main(conn: Any, main_pid: int) -> None:
    """A local worker: compute the cells it is sent, one at a time, until told to stop."""
    _die_with_parent(main_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    # what the worker inherited (its imports) lives as long as it does: the garbage collector
    # leaves it alone from now on, instead of walking it on every full collection
    gc.freeze()
    import torch

    from oversmooth.allocator import keep_freed_memory

    keep_freed_memory()  # the fork server's process never went through the command's start
    torch.set_num_threads(1)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        fn, cell, options, out = task
        record = fn(cell, options, out)
        try:
            conn.send(record)
        except OSError:  # the main process is gone (BrokenPipeError): nobody to tell
            os._exit(1)


@contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread for the block: a process started inside inherits the mask,
    so a Ctrl-C sent to the whole process group during its start-up (its imports, before it
    can ignore SIGINT) neither kills it nor prints its traceback.  A Ctrl-C that arrives here
    meanwhile stays pending and is raised as soon as the block ends; it is never lost."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _start_blocked(proc: Any) -> None:
    """Start the worker ``proc`` with Ctrl-C blocked (see :func:`_sigint_blocked`).

    multiprocessing's resource tracker is started first, outside the block: starting it ends
    with an unconditional ``SIG_UNBLOCK`` of SIGINT in this thread (CPython 3.11's
    ``resource_tracker.ensure_running``), so the first worker, started right after it inside
    the block, used to start with Ctrl-C deliverable, and a Ctrl-C during its imports printed
    a second ``interrupted`` line (2 of 10 runs of the Ctrl-C test at load 8 on 2 cores).
    """
    if sys.platform != "win32":
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    with _sigint_deferred(), _sigint_blocked():
        proc.start()


@contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold a Ctrl-C back until the block ends, then deliver it to the previous handler.

    Blocking SIGINT (:func:`_sigint_blocked`) holds it back in this thread only: another
    thread of the process (the progress bar's refresh thread) can still take it, and Python
    then raises KeyboardInterrupt in the main thread at once — in the middle of a worker's
    start, whose half-written start-up data the new worker then fails to read, printing a
    traceback (1 of 2 full-suite runs of the Ctrl-C test at its worker-starting stage).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:
            if callable(previous):
                previous(signal.SIGINT, None)
            elif previous != signal.SIG_IGN:
                raise KeyboardInterrupt


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


CellFn = Callable[[dict, dict, str], dict]


def _run_local(
    todo: list[dict],
    options: dict,
    out: Path,
    workers: int,
    on_done: Callable[[dict], None],
    cell_fn: CellFn = run_cell,
) -> None:
    """Run ``todo`` in ``workers`` processes, one cell per worker at a time.

    Workers are started once per sweep and forked from a fork server that has the heavy
    imports done (:func:`worker_context`; spawned where there is no fork server).  Each
    worker has its own pipe, so a worker that dies is known with the cell it was computing:
    that cell alone is retried once in a fresh worker, then recorded as failed.
    """
    pool = _WorkerPool(worker_context(), deque(todo), options, out, on_done, cell_fn)
    start_worker_server()
    try:
        pool.run(workers)
    finally:
        pool.stop()  # only on an error or Ctrl-C is any worker left: their cells are redone later


@dataclass(eq=False)  # compared (``slots.remove``) by identity
class _Slot:
    """One live local worker: its process, the main process's end of its pipe, and the cell
    it is computing (``None`` while idle)."""

    proc: Any
    conn: Any
    cell: dict | None = None


@dataclass
class _WorkerPool:
    """The local backend's workers and the cells still to compute (:func:`_run_local`).

    Every worker is registered in ``slots`` before it starts, so that :meth:`stop` stops it
    even when its start is interrupted."""

    ctx: Any
    queue: deque[dict]
    options: dict
    out: Path
    on_done: Callable[[dict], None]
    cell_fn: CellFn
    slots: list[_Slot] = field(default_factory=list)  # one per live worker
    deaths: dict[str, int] = field(default_factory=dict)  # cell id -> workers died on it

    def run(self, workers: int) -> None:
        """Start up to ``workers`` workers and feed them cells until the queue is empty and
        every worker has exited."""
        from multiprocessing.connection import wait

        for _ in range(min(workers, len(self.queue))):
            self.start()
        for slot in self.slots:
            self.assign(slot)
        while self.slots:
            ready = set(wait([s.conn for s in self.slots] + [s.proc.sentinel for s in self.slots]))
            for slot in list(self.slots):
                if slot.conn in ready or slot.proc.sentinel in ready:
                    self._serve(slot, gone=slot.proc.sentinel in ready)

    def start(self) -> _Slot:
        """A new worker, registered in ``slots`` before it starts (with Ctrl-C held back)."""
        parent_conn, child_conn = self.ctx.Pipe()
        proc = self.ctx.Process(
            target=_worker_main,
            args=(child_conn, os.getpid()),
            daemon=True,
            name="oversmooth-sweep-worker",
        )
        slot = _Slot(proc, parent_conn)
        self.slots.append(slot)
        try:
            _start_blocked(proc)
        finally:
            child_conn.close()
        return slot

    def assign(self, slot: _Slot) -> None:
        """Send ``slot``'s worker the next cell of the queue."""
        slot.cell = self.queue.popleft()
        try:
            slot.conn.send((self.cell_fn, slot.cell, self.options, str(self.out)))
        except OSError:  # it has just died: its sentinel fires next, and the cell goes back
            pass

    def _serve(self, slot: _Slot, gone: bool) -> None:
        """Handle a worker that sent a record or exited (``gone``): pass the record on, then
        give it the next cell, let it exit when none is left, or replace it if it died."""
        gone = self._receive(slot) or gone
        if not gone and slot.proc.is_alive():
            if slot.cell is None and self.queue:
                self.assign(slot)
            elif slot.cell is None:
                try:
                    slot.conn.send(None)  # nothing left for it: let it exit
                except OSError:
                    pass
                self._remove(slot)
            return
        if slot.cell is not None:
            self._died(slot)
        self._remove(slot)
        if self.queue:
            self.assign(self.start())

    def _receive(self, slot: _Slot) -> bool:
        """Pass on the record ``slot``'s worker sent, if any; whether its pipe has closed (the
        worker is dying)."""
        record, closed = None, False
        try:
            if slot.conn.poll():
                record = slot.conn.recv()
        except (EOFError, OSError):
            closed = True
        if record is not None:
            slot.cell = None
            self.on_done(record)
        return closed

    def _died(self, slot: _Slot) -> None:
        """The worker of ``slot`` died computing its cell: retry the cell first, in a fresh
        worker, or record it as failed if a worker already died on it."""
        slot.proc.join(5)
        cell = slot.cell
        assert cell is not None
        reason = f"worker died ({_exit_reason(slot.proc.exitcode)})"
        self.deaths[cell_id(cell)] = self.deaths.get(cell_id(cell), 0) + 1
        if self.deaths[cell_id(cell)] >= 2:
            self.on_done(
                failed_record(cell, self.options, f"{reason} twice while computing this cell")
            )
        else:
            self.queue.appendleft(cell)  # retried first, in a fresh worker

    def _remove(self, slot: _Slot) -> None:
        """Wait for ``slot``'s worker to exit, close its pipe and forget it."""
        slot.proc.join(5)
        slot.conn.close()
        self.slots.remove(slot)

    def stop(self) -> None:
        """Stop every worker still registered: kill it, or close the pipe of one interrupted
        before it started."""
        for slot in self.slots:
            if slot.proc.pid is None:  # interrupted before it started
                slot.conn.close()
                continue
            if slot.proc.is_alive():
                slot.proc.kill()
            slot.proc.join(5)
            slot.conn.close()


@dataclass
class SweepResult:
    out: Path
    total: int
    skipped: int
    ran: int
    failed: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    # finished cells whose final energy is not finite (NaN or Inf: the model diverged in
    # that precision); kept, not retried (a rerun computes the same numbers)
    diverged: list[dict] = field(default_factory=list)


def run_sweep(
    spec: SweepSpec,
    out: str | os.PathLike | None = None,
    *,
    progress: Callable[[int, int, str], None] | None = None,
    cell_fn: CellFn = run_cell,
    figure_formats: Sequence[str] = ("png",),
    table_formats: Sequence[str] = ("csv",),
) -> SweepResult:
    """Run every unfinished cell of ``spec`` into ``out`` (default ``spec.out``), then merge.

    Args:
        spec: the grid and options.
        out: the sweep folder; claimed exclusively for the whole run.
        progress: called with (cells done, cells in all, message) after each cell.
        cell_fn: computes one cell (default :func:`run_cell`); must be importable by name,
            since workers receive it by reference.
        figure_formats: the merged reports' figures also as SVG/PDF
            (:mod:`oversmooth.report.formats`; formats change no cell).
        table_formats: the merged tables also as Parquet.

    Raises:
        ValueError: a dataset or device that cannot be used, ``out`` holds cells computed
            with other options, or (Ray) a node that cannot compute the cells as this
            machine would; nothing is written then.
        FileExistsError: ``out`` is a file, or another live sweep holds it.
    """
    out = check_out(out if out is not None else spec.out, False, reuse="sweep")
    formats = {"figure_formats": figure_formats, "table_formats": table_formats}
    table_formats_of(table_formats)  # Parquet without pyarrow: refused before any cell runs
    fingerprints, files = _check_datasets(spec)
    options = spec.options()
    if files:  # a dataset read from a file: its contents are part of every cell's identity
        options[DATA_FILES] = files
    cells = spec.cells()
    keys = {cell_id(c): cell_key(c, options) for c in cells}
    with claim_folder(out, False, reuse="sweep"):
        created = not out.exists()
        todo, stale = _unfinished(out, cells, options, keys)
        started = time.perf_counter()
        with (
            _backend(spec, options, fingerprints, bool(todo)) as run_cells,
            _removed_if_nothing_finished(out, created),
        ):
            _prepare_folder(out, spec)
            failed = _run_todo(run_cells, todo, out, len(cells), stale, progress, cell_fn)
            _, summary = merge(out, spec, options=options, **formats)
    total = len(cells)
    return SweepResult(
        out,
        total,
        total - len(todo),
        len(todo),
        failed,
        time.perf_counter() - started,
        _diverged(summary),
    )


def _diverged(summary: pd.DataFrame) -> list[dict]:
    """The finished cells of a merged ``summary`` whose final energy is not finite: each as
    ``{"id", "final_energy"}`` (None for NaN, as JSON has it), in the table's order.  A cell
    that overflowed was counted as a success with no word but its report's verdict (an
    audit)."""
    import numpy as np

    out = []
    for row in summary.to_dict("records"):
        energy = row.get("final_energy")
        energy = math.nan if energy is None else float(energy)
        if np.isfinite(energy):
            continue
        cell = {
            "model": str(row["model"]),
            "conv": str(row["conv"]),
            "depth": int(row["depth"]),
            "dataset": str(row["dataset"]),
            "seed": int(row["seed"]),
            "mode": str(row["mode"]),
        }
        out.append({"id": cell_id(cell), "final_energy": None if math.isnan(energy) else energy})
    return out


def _unfinished(
    out: Path, cells: list[dict], options: dict, keys: dict[str, str]
) -> tuple[list[dict], int]:
    """The cells not yet finished in ``out`` with these options (id -> key ``keys``), and how
    many finished ones are recomputed because another oversmooth version computed them.

    Raises:
        ValueError: ``out`` holds cells computed with other options.
    """
    cells_dir = out / "cells"
    records = _records(cells_dir) if cells_dir.is_dir() else []
    _check_same_options(out, records, options)
    finished = _finished(records, keys)
    todo = [c for c in cells if cell_id(c) not in finished]
    return todo, _stale(records, keys, finished)


@contextmanager
def _removed_if_nothing_finished(out: Path, created: bool) -> Iterator[None]:
    """On an error or Ctrl-C in the block, remove ``out`` if this sweep created it and no cell
    finished: a sweep that computed nothing leaves no folder."""
    try:
        yield
    except BaseException:
        if created and not any((out / "cells").glob("*.json")):
            shutil.rmtree(out, ignore_errors=True)
        raise


def _prepare_folder(out: Path, spec: SweepSpec) -> None:
    """Make ``out/cells``, mark ``out`` as a sweep folder, clear what dead processes left in it
    and write the spec beside the cells.  The merged tables and reports of the earlier run go
    first, whether or not cells are left to compute: a run stopped before its merge leaves the
    new ``spec.json`` and the cells, never tables or reports of another spec beside them (the
    next run merges).  A rerun that only merged again, stopped, left the new tables beside the
    old spec's reports; a grid that shrank kept the reports of its dropped cells."""
    (out / "cells").mkdir(parents=True, exist_ok=True)
    if not (out / MARKER).is_file():  # new, or begun by a version before the marker
        write_marker(out, "sweep")
    _clean_litter(out)
    _clear_merged(out)
    write_json(out / "spec.json", spec.to_dict())


def _clear_merged(out: Path) -> None:
    """Remove what :func:`merge` writes: the tables (every format) and the report folders."""
    for stem in MERGED_TABLES:
        for path in out.glob(f"{stem}.*"):
            if path.is_file():
                path.unlink(missing_ok=True)
    for folder in out.glob("report-*"):
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)


Runner = Callable[[list[dict], Path, Callable[[dict], None], CellFn], None]


@contextmanager
def _backend(
    spec: SweepSpec, options: dict, fingerprints: dict[str, str], needed: bool
) -> Iterator[Runner]:
    """The function that runs cells: a local process pool, or tasks on a Ray cluster joined
    (and its nodes checked) here, before anything is written; no cluster when nothing is left
    to compute."""
    if spec.backend == "ray" and needed:
        from oversmooth.experiments.sweep_ray import ray_session

        with ray_session(spec.ray_address, spec.workers, options, fingerprints) as run:
            yield run
        return
    workers = spec.workers or os.cpu_count() or 1
    if needed:
        start_worker_server()  # its imports overlap the rest of the set-up

    def run_local(todo: list[dict], out: Path, on_done: Callable[[dict], None], fn: CellFn) -> None:
        _run_local(todo, options, out, min(workers, len(todo)), on_done, fn)

    yield run_local


def _stale(records: list[dict], keys: dict[str, str], finished: dict[str, dict]) -> int:
    """Finished cells of this grid computed by another oversmooth version (recomputed)."""
    return sum(
        1
        for r in records
        if r.get("status") == "ok" and r.get("id") in keys and r.get("id") not in finished
    )


def _run_todo(
    run_cells: Runner,
    todo: list[dict],
    out: Path,
    total: int,
    stale: int,
    progress: Callable[[int, int, str], None] | None,
    cell_fn: CellFn,
) -> list[dict]:
    """Run ``todo``, writing each record as it arrives; returns the failed records."""
    done_count = total - len(todo)
    failed: list[dict] = []
    if progress:
        note = f"; {stale} from another oversmooth version are recomputed" if stale else ""
        progress(done_count, total, f"{done_count} cells already finished{note}")

    def on_done(record: dict) -> None:
        nonlocal done_count
        write_cell(out / "cells", record)
        done_count += 1
        if record.get("status") != "ok":
            failed.append(record)
        if progress:
            progress(done_count, total, f"{record['id']}: {record.get('status')}")

    if todo:
        run_cells(todo, out, on_done, cell_fn)
    return failed


def _merged_tables(ok: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-layer and per-cell tables of the finished cells ``ok``, sorted by cell."""
    import pandas as pd

    from oversmooth.analysis import final_at_floor

    keys = ["mode", "dataset", "conv", "model", "depth", "seed"]
    frames, rows = [], []
    for r in ok:
        frame = upgrade_columns(pd.DataFrame(r["metrics"]))  # cells of older versions too
        for k in reversed(keys):
            frame.insert(0, k, r["cell"][k])
        frames.append(frame)
        rows.append(
            {
                **{k: r["cell"][k] for k in keys},
                "final_energy": r["final_energy"],
                # as compare's summary has it (the tables mark a final energy at the floor)
                **({"final_at_floor": final_at_floor(frame)} if "at_floor" in frame else {}),
                "classification": r["classification"],
                # the trained cell's numbers at its best epoch: best_test_acc, ..., best_epoch
                **{
                    k if k.startswith("best_") else f"best_{k}": v
                    for k, v in r.get("training", {}).items()
                },
                "seconds": r.get("seconds"),
            }
        )
    sort = lambda f: f.sort_values(keys + (["layer"] if "layer" in f else [])).reset_index(  # noqa: E731
        drop=True
    )
    metrics = sort(pd.concat(frames, ignore_index=True)) if frames else pd.DataFrame(columns=keys)
    summary = sort(pd.DataFrame(rows)) if rows else pd.DataFrame(columns=keys)
    return metrics, summary


def merge(
    out: str | os.PathLike,
    spec: SweepSpec | None = None,
    *,
    options: dict | None = None,
    figure_formats: Sequence[str] = ("png",),
    table_formats: Sequence[str] = ("csv",),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Merge finished cells into ``metrics.csv``, ``summary.csv``, ``failed.csv`` and reports.

    With ``spec``, only the cells of its grid computed with its options (their key; ``options``
    as :func:`run_sweep` made them, default ``spec.options()``) are merged, so the tables always
    describe the spec written beside them, in its order (modes, datasets, convs and models
    as it lists them, then depth, seed and layer); each table is written atomically
    (also as Parquet with ``parquet`` in ``table_formats``, the reports' figures also in
    ``figure_formats``).
    """
    import pandas as pd

    out = Path(out)
    records = _records(out / "cells")
    if spec is not None:
        options = spec.options() if options is None else options
        wanted = {cell_key(c, options) for c in spec.cells()}
        records = [r for r in records if r.get("key") in wanted]
    failed = [r for r in records if r.get("status") != "ok"]
    ok = [r for r in records if r.get("status") == "ok"]
    metrics, summary = _merged_tables(ok)
    if spec is not None:  # the tables as the reports list them: the spec's order, not a-z
        metrics, summary = _in_spec_order(metrics, spec), _in_spec_order(summary, spec)
    write_table(metrics, out / "metrics.csv", table_formats, float_format=CSV_FLOAT)
    write_table(summary, out / "summary.csv", table_formats, float_format=CSV_FLOAT)
    failed_rows = pd.DataFrame([{**r["cell"], "error": r.get("error", "")} for r in failed])
    write_table(failed_rows, out / "failed.csv", table_formats)
    if spec is not None and len(summary):
        from oversmooth.report.render import write_comparison

        for (mode, conv), part in summary.groupby(["mode", "conv"], sort=False):
            layer_rows = metrics[(metrics["mode"] == mode) & (metrics["conv"] == conv)]
            part, layer_rows = _in_spec_order(part, spec), _in_spec_order(layer_rows, spec)
            write_comparison(
                _group_comparison(spec, mode, conv, part, layer_rows, _references(ok), _sizes(ok)),
                out / f"report-{conv}-{mode}",
                overwrite=True,
                figure_formats=figure_formats,
                table_formats=table_formats,
            )
    return metrics, summary


def _in_spec_order(frame: pd.DataFrame, spec: SweepSpec) -> pd.DataFrame:
    """``frame``'s rows in the order the spec lists its datasets and models (then depth, seed,
    layer): the report's tables and figure listed the models alphabetically beside verdicts in
    the spec's order (an audit)."""
    rank = {
        "mode": {m: k for k, m in enumerate(spec.modes)},
        "dataset": {d: k for k, d in enumerate(spec.datasets)},
        "conv": {c: k for k, c in enumerate(spec.convs)},
        "model": {m: k for k, m in enumerate(spec.models)},
    }
    keys = [c for c in ("mode", "dataset", "conv", "model", "depth", "seed", "layer") if c in frame]
    if not keys:  # no cell finished: an empty table
        return frame

    def order(column: pd.Series) -> pd.Series:
        return column.map(rank[column.name]) if column.name in rank else column

    return frame.sort_values(keys, key=order, kind="stable").reset_index(drop=True)


def _references(records: list[dict]) -> dict[str, dict]:
    """Each dataset's linear-diffusion reference as a finished cell recorded it (the first
    such cell's; cells written by a version that did not record it give none)."""
    out: dict[str, dict] = {}
    for r in records:
        reference = r.get("diffusion")
        # every number back as written (JSON keeps no Inf or NaN: they come back as null)
        if (
            isinstance(reference, dict)
            and reference
            and all(v is not None for k, v in reference.items() if k != "reason")
        ):
            out.setdefault(str(r["cell"].get("dataset")), reference)
    return out


def _sizes(records: list[dict]) -> dict[str, tuple[int, int]]:
    """Each dataset's ``(features, classes)`` as a finished cell recorded them (cells written
    by a version that did not record them give none)."""
    out: dict[str, tuple[int, int]] = {}
    for r in records:
        sizes = r.get("sizes")
        if isinstance(sizes, list) and len(sizes) == 2 and all(type(v) is int for v in sizes):
            out.setdefault(str(r["cell"].get("dataset")), (sizes[0], sizes[1]))
    return out


def _group_comparison(
    spec: SweepSpec,
    mode: str,
    conv: str,
    part: pd.DataFrame,
    layer_rows: pd.DataFrame,
    references: Mapping[str, dict] | None = None,
    sizes: Mapping[str, tuple[int, int]] | None = None,
) -> ComparisonResult:
    """The cells of one (``mode``, ``conv``) group as the result of ``oversmooth compare``:
    ``part`` their summary rows, ``layer_rows`` their per-layer rows; ``references``: the
    datasets' diffusion references the cells recorded (:func:`_references`); ``sizes``: their
    ``(features, classes)`` (:func:`_sizes`; the config records None where one is unknown,
    never the config's placeholder)."""
    from oversmooth.analysis import ComparisonResult
    from oversmooth.runtime import environment, resolve_device

    models = [m for m in spec.models if m in set(part["model"])]
    datasets = [d for d in spec.datasets if d in set(part["dataset"])]
    depths = sorted(set(part["depth"]))
    fits, verdicts = _deepest_fits(spec, layer_rows, models, datasets, depths[-1], references or {})
    seeds = tuple(spec.seeds)  # as asked: a seed whose cell failed is missing from part
    config = ComparisonConfig(
        models=tuple(models),
        depths=tuple(depths),
        convs=(conv,),
        datasets=tuple(datasets),
        seeds=seeds,
        model=replace(spec.model, name=models[0], conv=conv, depth=depths[0], seed=seeds[0]),
        device=spec.device,
    )
    present = set(zip(part["model"], part["dataset"], part["depth"], strict=True))
    missing = [  # asked, but no seed of it finished: the report says so
        {"model": m, "dataset": d, "depth": int(k)}
        for m in spec.models
        for d in spec.datasets
        for k in spec.depths
        if (m, d, k) not in present
    ]
    known = [sizes[d] for d in datasets if sizes and d in sizes]
    record = with_data_sizes(config.to_dict(), known if len(known) == len(datasets) else [])
    return ComparisonResult(
        config={"command": "compare", **record, "sweep_mode": mode, "missing": missing},
        metrics=layer_rows.drop(columns=["mode", "conv"]),
        summary=part.drop(columns=["mode", "conv"]),
        fits=fits,
        verdicts=verdicts,
        environment=environment(resolve_device(spec.device)),
    )


def _deepest_fits(
    spec: SweepSpec,
    layer_rows: pd.DataFrame,
    models: list[str],
    datasets: list[str],
    depth: int,
    references: Mapping[str, dict],
) -> tuple[dict, list]:
    """The fitted laws (by ``dataset/model``) and verdicts at ``depth``, the deepest of the
    group, each pooling every seed of that dataset and model, with the theory beside them
    (the graph's linear-diffusion rate, the nonlocal law), as ``oversmooth compare`` gives.
    A dataset's diffusion reference is the one its cells recorded (``references``), else
    computed here from the loaded dataset."""
    from oversmooth.analysis import (
        describe_frame,
        diffusion_reference,
        fits_record,
        theory_reference,
    )
    from oversmooth.data import load

    fits, verdicts = {}, []
    for dataset in datasets:
        diffusion = references.get(dataset) or diffusion_reference(
            load(dataset, data_root=spec.data_root)
        )
        for model in models:
            rows = layer_rows[
                (layer_rows["dataset"] == dataset)
                & (layer_rows["model"] == model)
                & (layer_rows["depth"] == depth)
            ]
            if len(rows):
                desc = describe_frame(rows, spec.model.hidden, dtype=spec.model.dtype)
                finished, asked = int(rows["seed"].nunique()), len(spec.seeds)
                if finished < asked:
                    # the verdict pools the seeds that finished: said where it is read, as the
                    # tables say "(k of n seeds)" (its line read as the full sweep's: an audit)
                    desc["_verdict"].notes.append(
                        {"code": "fewer-seeds", "seeds": finished, "of_seeds": asked}
                    )
                    desc["evidence"] = desc["_verdict"].to_dict()
                desc["reference"] = theory_reference(model, desc, diffusion)
                fits[f"{dataset}/{model}"] = {**fits_record(desc), "depth": depth}
                verdicts.append(desc["_verdict"])
    return fits, verdicts
