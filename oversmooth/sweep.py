"""Grid sweeps: models x convs x depths x datasets x seeds x modes, resumable.

Every cell runs in a worker process with one torch thread (all cores busy, no
oversubscription) and is written atomically to its own JSON file under
``OUT/cells/``.  A rerun skips the cells that finished, so Ctrl-C, a killed
worker or a killed sweep lose no finished cell; a cell that raises is recorded
with its reason (``status: failed``) and retried on the next run, and the others
go on.  At the end the cells are merged into ``metrics.csv`` (one row per layer
and cell), ``summary.csv`` (one row per cell) and a comparison report per
(conv, mode) group, the same report ``oversmooth compare`` writes.

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
    device = "cpu"
    backend = "local"         # or "ray"
    workers = 2               # default: all cores
    ray_address = "auto"      # ray only; default: start a local cluster
    out = "reports/sweep"
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

__all__ = ["SweepSpec", "load_spec", "cell_id", "run_cell", "run_sweep", "merge"]

GRID_KEYS = {"models", "convs", "depths", "datasets", "seeds", "modes"}
OPTION_KEYS = {"hidden", "heads", "epochs", "device", "backend", "workers", "ray_address", "out", "data_root"}
MODES = ("init", "trained")
BACKENDS = ("local", "ray")


@dataclass(frozen=True)
class SweepSpec:
    models: tuple[str, ...] = ("preln", "postln", "nonlocal")
    convs: tuple[str, ...] = ("san",)
    depths: tuple[int, ...] = (2, 32)
    datasets: tuple[str, ...] = ("cora",)
    seeds: tuple[int, ...] = (0,)
    modes: tuple[str, ...] = ("init",)
    hidden: int = 32
    heads: int = 4
    epochs: int = 300
    device: str = "cpu"
    backend: str = "local"
    workers: int | None = None
    ray_address: str | None = None
    out: str = "reports/sweep"
    data_root: str | None = None

    def __post_init__(self) -> None:
        from oversmooth.nn.conv import CONVS
        from oversmooth.nn.model import MODELS

        for key, valid in (("models", MODELS), ("convs", CONVS), ("modes", MODES)):
            values = getattr(self, key)
            if not values:
                raise ValueError(f"{key}: expected at least one value")
            for v in values:
                if v not in valid:
                    raise ValueError(f"{key}: unknown value {v!r}; expected any of {', '.join(valid)}")
        for key in ("depths", "seeds"):
            values = getattr(self, key)
            if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < (1 if key == "depths" else 0) for v in values):
                raise ValueError(f"{key}: expected a list of integers >= {1 if key == 'depths' else 0}, received {list(values)}")
        if not self.datasets or any(not isinstance(d, str) or not d for d in self.datasets):
            raise ValueError(f"datasets: expected a list of dataset names, received {list(self.datasets)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, received {self.backend!r}")
        for key in ("hidden", "heads", "epochs"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{key}: expected an integer >= 1, received {v!r}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden: expected a multiple of heads={self.heads}, received {self.hidden}")
        if self.workers is not None and (isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1):
            raise ValueError(f"workers: expected an integer >= 1, received {self.workers!r}")

    def cells(self) -> list[dict]:
        return [
            {"model": m, "conv": c, "depth": d, "dataset": ds, "seed": s, "mode": mode}
            for mode, ds, c, m, d, s in itertools.product(self.modes, self.datasets, self.convs, self.models, self.depths, self.seeds)
        ]

    def options(self) -> dict:
        return {"hidden": self.hidden, "heads": self.heads, "epochs": self.epochs, "device": self.device, "data_root": self.data_root}

    def to_dict(self) -> dict:
        return asdict(self)


def load_spec(path: str | os.PathLike, **overrides) -> SweepSpec:
    """Read a TOML spec; unknown sections or keys and bad values raise one ``ValueError`` naming them."""
    import tomllib

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such spec file")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML ({exc})") from None
    unknown = set(raw) - {"grid", "options"}
    if unknown:
        raise ValueError(f"{path}: unknown section [{sorted(unknown)[0]}]; expected [grid] and [options]")
    grid, options = raw.get("grid", {}), raw.get("options", {})
    for section, keys, valid in (("grid", grid, GRID_KEYS), ("options", options, OPTION_KEYS)):
        bad = set(keys) - valid
        if bad:
            raise ValueError(f"{path}: unknown key {section}.{sorted(bad)[0]}; expected one of {', '.join(sorted(valid))}")
    values: dict = {}
    for key, value in grid.items():
        if not isinstance(value, list):
            raise ValueError(f"{path}: grid.{key} must be a list, received {value!r}")
        values[key] = tuple(value)
    values.update(options)
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return SweepSpec(**values)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def cell_id(cell: dict) -> str:
    """Readable and unique: ``model-conv-dN-dataset-sN-mode`` plus a short hash of the whole cell."""
    digest = hashlib.sha1(json.dumps(cell, sort_keys=True).encode()).hexdigest()[:8]
    safe_ds = "".join(ch if ch.isalnum() else "_" for ch in str(cell["dataset"]))[:24]
    return f"{cell['model']}-{cell['conv']}-d{cell['depth']}-{safe_ds}-s{cell['seed']}-{cell['mode']}-{digest}"


def run_cell(cell: dict, options: dict, out: str) -> dict:
    """Compute one cell (in a worker); returns a JSON-able record, never raises."""
    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    record = {"cell": cell, "id": cell_id(cell)}
    try:
        from oversmooth.analysis import AnalysisConfig, run_analysis

        common = dict(similarity=False, device=options["device"], data_root=options.get("data_root"))
        if cell["mode"] == "trained":
            from oversmooth.train import TrainConfig, train

            run_dir = Path(out) / "runs" / record["id"]
            result = train(TrainConfig(model=cell["model"], depth=cell["depth"], conv=cell["conv"], dataset=cell["dataset"],
                                       hidden=options["hidden"], heads=options["heads"], seed=cell["seed"], epochs=options["epochs"],
                                       device=options["device"], data_root=options.get("data_root")), run_dir, overwrite=True)
            record["training"] = {"best_epoch": result.best_epoch, **result.best}
            config = AnalysisConfig.from_checkpoint(str(run_dir / "best.pt"), **common)
        else:
            config = AnalysisConfig(model=cell["model"], depth=cell["depth"], conv=cell["conv"], dataset=cell["dataset"],
                                    hidden=options["hidden"], heads=options["heads"], seeds=(cell["seed"],), **common)
        analysis = run_analysis(config)
        frame = analysis.metrics.drop(columns=["seed"])
        record.update({
            "status": "ok",
            "final_energy": float(frame["laplacian_energy"].iloc[-1]),
            "classification": analysis.label,
            "verdict": analysis.verdict,
            "metrics": {c: frame[c].tolist() for c in frame.columns},
        })
    except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
        record.update({"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc(limit=8)})
    record["seconds"] = time.perf_counter() - started
    return record


def _write_cell(folder: Path, record: dict) -> None:
    path = folder / f"{record['id']}.json"
    tmp = folder / f".{record['id']}.json.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(record, default=str, allow_nan=True))
    os.replace(tmp, path)


def _finished(folder: Path) -> dict[str, dict]:
    done = {}
    for path in folder.glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # unreadable: recomputed
        if record.get("status") == "ok":
            done[record["id"]] = record
    return done


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)


def _run_local(todo: list[dict], options: dict, out: Path, workers: int, on_done: Callable[[dict], None]) -> None:
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"), initializer=_init_worker) as pool:
        pending = {pool.submit(run_cell, cell, options, str(out)): cell for cell in todo}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    cell = pending.pop(future)
                    try:
                        record = future.result()
                    except Exception as exc:  # noqa: BLE001 - a worker that died
                        record = {"cell": cell, "id": cell_id(cell), "status": "failed", "error": f"worker died: {type(exc).__name__}: {exc}"}
                    on_done(record)
        except BaseException:
            for future in pending:
                future.cancel()
            raise


def _run_ray(todo: list[dict], options: dict, out: Path, workers: int | None, address: str | None, on_done: Callable[[dict], None]) -> None:
    try:
        import ray
    except ImportError:
        raise ValueError("backend: ray is not installed; pip install 'oversmooth[ray]' or use --backend local") from None
    started_here = False
    if not ray.is_initialized():
        kwargs = {"address": address} if address else {"num_cpus": workers or os.cpu_count()}
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False, **kwargs)
        started_here = True
    try:
        remote = ray.remote(num_cpus=1, max_retries=1)(run_cell)
        refs = {remote.remote(cell, options, str(out)): cell for cell in todo}
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            for ref in ready:
                cell = refs.pop(ref)
                try:
                    record = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a worker that died
                    record = {"cell": cell, "id": cell_id(cell), "status": "failed", "error": f"worker died: {type(exc).__name__}: {exc}"}
                on_done(record)
    finally:
        if started_here:
            ray.shutdown()


@dataclass
class SweepResult:
    out: Path
    total: int
    skipped: int
    ran: int
    failed: list[dict] = field(default_factory=list)
    seconds: float = 0.0


def run_sweep(spec: SweepSpec, out: str | os.PathLike | None = None, *, progress: Callable[[int, int, str], None] | None = None) -> SweepResult:
    """Run every unfinished cell of ``spec`` into ``out`` (default ``spec.out``), then merge."""
    out = Path(out if out is not None else spec.out)
    cells_dir = out / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(spec.to_dict(), indent=2) + "\n")
    cells = spec.cells()
    finished = _finished(cells_dir)
    todo = [c for c in cells if cell_id(c) not in finished]
    total, done_count = len(cells), len(cells) - len(todo)
    failed: list[dict] = []
    started = time.perf_counter()
    if progress:
        progress(done_count, total, f"{done_count} cells already finished")

    def on_done(record: dict) -> None:
        nonlocal done_count
        _write_cell(cells_dir, record)
        done_count += 1
        if record.get("status") != "ok":
            failed.append(record)
        if progress:
            progress(done_count, total, f"{record['id']}: {record.get('status')}")

    if todo:
        workers = spec.workers or os.cpu_count() or 1
        if spec.backend == "ray":
            _run_ray(todo, spec.options(), out, spec.workers, spec.ray_address, on_done)
        else:
            _run_local(todo, spec.options(), out, min(workers, len(todo)), on_done)
    merge(out, spec)
    return SweepResult(out, total, total - len(todo), len(todo), failed, time.perf_counter() - started)


def merge(out: str | os.PathLike, spec: SweepSpec | None = None):
    """Merge finished cells into ``metrics.csv``, ``summary.csv``, ``failed.csv`` and comparison reports."""
    import pandas as pd

    from oversmooth.analysis import (ComparisonConfig, ComparisonResult, _public, _title,
                                     describe_frame, summary_table)
    from oversmooth.report.render import write_comparison

    out = Path(out)
    records = [json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))]
    ok = [r for r in records if r.get("status") == "ok"]
    failed = [r for r in records if r.get("status") != "ok"]
    keys = ["mode", "dataset", "conv", "model", "depth", "seed"]
    frames, rows = [], []
    for r in ok:
        frame = pd.DataFrame(r["metrics"])
        for k in reversed(keys):
            frame.insert(0, k, r["cell"][k])
        frames.append(frame)
        rows.append({**{k: r["cell"][k] for k in keys}, "final_energy": r["final_energy"], "classification": r["classification"],
                     **{f"best_{k}": v for k, v in r.get("training", {}).items()}, "seconds": r.get("seconds")})
    sort = lambda f: f.sort_values(keys + (["layer"] if "layer" in f else [])).reset_index(drop=True)  # noqa: E731
    metrics = sort(pd.concat(frames, ignore_index=True)) if frames else pd.DataFrame(columns=keys)
    summary = sort(pd.DataFrame(rows)) if rows else pd.DataFrame(columns=keys)
    metrics.to_csv(out / "metrics.csv", index=False, float_format="%.10g")
    summary.to_csv(out / "summary.csv", index=False, float_format="%.10g")
    pd.DataFrame([{**r["cell"], "error": r.get("error", "")} for r in failed]).to_csv(out / "failed.csv", index=False)
    if spec is not None and len(summary):
        for (mode, conv), part in summary.groupby(["mode", "conv"], sort=False):
            layer_rows = metrics[(metrics["mode"] == mode) & (metrics["conv"] == conv)]
            models = [m for m in spec.models if m in set(part["model"])]
            datasets = [d for d in spec.datasets if d in set(part["dataset"])]
            depths = sorted(set(part["depth"]))
            fits, verdicts = {}, []
            for dataset in datasets:
                for model in models:  # the verdict pools every seed at the deepest depth
                    rows_dm = layer_rows[(layer_rows["dataset"] == dataset)
                                         & (layer_rows["model"] == model)
                                         & (layer_rows["depth"] == depths[-1])]
                    if len(rows_dm):
                        trained = " (trained)" if mode == "trained" else ""
                        title = f"{_title(model, conv, depths[-1], dataset)}{trained}"
                        desc = describe_frame(rows_dm, spec.hidden, title=title)
                        fits[f"{dataset}/{model}"] = {**_public(desc), "depth": depths[-1]}
                        verdicts.append(desc["verdict"])
            config = ComparisonConfig(models=tuple(models), depths=tuple(depths), conv=conv, datasets=tuple(datasets),
                                      seeds=tuple(sorted(set(part["seed"]))), hidden=spec.hidden, heads=spec.heads, device=spec.device)
            result = ComparisonResult(
                config={"command": "compare", **config.to_dict(), "sweep_mode": mode},
                metrics=layer_rows.drop(columns=["mode", "conv"]), summary=part.drop(columns=["mode", "conv"]),
                table=summary_table(part), fits=fits, verdicts=verdicts,
            )
            write_comparison(result, out / f"report-{conv}-{mode}", overwrite=True)
    return metrics, summary
