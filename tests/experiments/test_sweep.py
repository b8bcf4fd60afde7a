"""Sweeps: local and Ray backends agree, kill-and-rerun completes, failures are isolated, bad
specs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import json
import os
import signal
import subprocess
import sys

import pandas as pd
import pytest
from typer.testing import CliRunner

from oversmooth.cli.main import app
from tests.conftest import held_folder
from oversmooth.experiments.sweep import (
    SweepResult,
    SweepSpec,
    write_cell,
    cell_id,
    cell_key,
    load_spec,
    merge,
    run_cell,
    run_sweep,
)
from oversmooth.config import ModelConfig

MODEL = ModelConfig(hidden=16, heads=2, dtype="float64")
GRID = dict(models=("preln", "postln"), depths=(2, 4), seeds=(0,), model=MODEL, workers=2)
TINY = dict(models=("preln",), depths=(2,), datasets=("karate",), model=MODEL, workers=1)


# Cell functions for the tests: module-level, so spawned workers can import them by name.


def _injected_failure(cell: dict, options: dict) -> dict:
    """The record of a cell that failed (as a worker writes it)."""
    return {
        "cell": cell,
        "id": cell_id(cell),
        "key": cell_key(cell, options),
        "options": options,
        "status": "failed",
        "error": "RuntimeError: injected failure",
    }


def fails_at_depth_3(cell: dict, options: dict, out: str) -> dict:
    if cell["depth"] != 3:
        return run_cell(cell, options, out)
    return _injected_failure(cell, options)


def fails_on_seed_1(cell: dict, options: dict, out: str) -> dict:
    if cell["seed"] != 1:
        return run_cell(cell, options, out)
    return _injected_failure(cell, options)


def dies_on_postln(cell: dict, options: dict, out: str) -> dict:
    """SIGKILLs its own worker: once for postln depth 2 (retried, then fine), always at depth 3."""
    marker = os.path.join(os.path.dirname(out), f"died-{cell_id(cell)}")
    if cell["model"] == "postln" and (cell["depth"] == 3 or not os.path.exists(marker)):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return run_cell(cell, options, out)


def nan_metrics(cell: dict, options: dict, out: str) -> dict:
    """A real cell whose results include NaN: one metric column entirely, one value of
    another, and the final energy."""
    record = run_cell(cell, options, out)
    columns = [
        c
        for c in record["metrics"]
        if c not in ("layer", "laplacian_energy", "at_floor", "float_floor")
    ]
    record["metrics"][columns[0]] = [float("nan")] * len(record["metrics"][columns[0]])
    record["metrics"][columns[1]][-1] = float("inf")
    record["final_energy"] = float("nan")
    return record


def _tables(out):
    metrics = pd.read_csv(out / "metrics.csv")
    summary = pd.read_csv(out / "summary.csv").drop(columns=["seconds"])
    return metrics, summary


@pytest.mark.slow  # 13 s; the default suite's two-node cluster test compares Ray cells with local
def test_local_and_ray_give_identical_tables(tmp_path):
    pytest.importorskip("ray")
    local = run_sweep(SweepSpec(**GRID, backend="local"), tmp_path / "local")
    ray_run = run_sweep(SweepSpec(**GRID, backend="ray"), tmp_path / "ray")
    assert local.total == ray_run.total == 4 and not local.failed and not ray_run.failed
    lm, ls = _tables(tmp_path / "local")
    rm, rs = _tables(tmp_path / "ray")
    pd.testing.assert_frame_equal(lm, rm)
    pd.testing.assert_frame_equal(ls, rs)
    assert len(ls) == 4 and len(lm) == 2 * 3 + 2 * 5
    assert (tmp_path / "local" / "report-san-init" / "report.html").is_file()


def test_two_local_workers_give_the_tables_of_one(tmp_path):
    one = run_sweep(SweepSpec(**{**GRID, "workers": 1}), tmp_path / "one")
    two = run_sweep(SweepSpec(**{**GRID, "workers": 2}), tmp_path / "two")
    assert one.ran == two.ran == 4 and not one.failed and not two.failed
    for a, b in zip(_tables(tmp_path / "one"), _tables(tmp_path / "two"), strict=True):
        key = ["model", "depth"] + (["layer"] if "layer" in a else [])
        pd.testing.assert_frame_equal(
            a.sort_values(key).reset_index(drop=True), b.sort_values(key).reset_index(drop=True)
        )


def test_local_workers_are_forked_from_a_server_with_the_imports_done():
    from oversmooth.experiments.sweep import WORKER_PRELOAD, worker_context

    ctx = worker_context()
    if sys.platform.startswith("linux"):
        assert ctx.get_start_method() == "forkserver"
    # importing what the server preloads must not start torch's thread pool (forking a
    # process that has one is unsafe): the pool's threads appear only at the first
    # parallel operation, after the imports
    code = (
        "import importlib, os, sys\n"
        "def threads(): return len(os.listdir('/proc/self/task'))\n"
        f"for name in {list(WORKER_PRELOAD)!r}:\n"
        "    try: importlib.import_module(name)\n"
        "    except ImportError: pass\n"
        "before = threads()\n"
        "import torch\n"
        "torch.randn(512, 512) @ torch.randn(512, 512)\n"
        "print(before, threads())\n"
    )
    if not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2:
        pytest.skip("counts the threads of /proc/self/task on a machine with 2+ cores")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["OMP_NUM_THREADS"] = "2"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    before, after = map(int, out.stdout.split())
    assert after > before, (before, after)


def imports_of_a_cell(cell: dict, options: dict, out: str) -> dict:
    """run_cell, and the modules it imported that the worker did not have yet."""
    import gc

    before = set(sys.modules)
    record = run_cell(cell, options, out)
    record["imported"] = sorted(set(sys.modules) - before)
    record["frozen"] = gc.get_freeze_count()
    return record


def test_a_workers_first_cell_finds_its_modules_loaded_and_frozen(tmp_path):
    from oversmooth.experiments.sweep import _records

    result = run_sweep(SweepSpec(**TINY), tmp_path / "w", cell_fn=imports_of_a_cell)
    assert result.ran == 1 and not result.failed
    (record,) = _records(tmp_path / "w" / "cells")
    heavy = ("torch", "pandas", "numpy", "scipy", "statistics", "oversmooth", "matplotlib")
    late = [m for m in record["imported"] if m.split(".")[0] in heavy]
    assert not late, f"imported on the worker's first cell, not by the fork server: {late}"
    assert record["frozen"] > 100_000  # the inherited imports, out of the collector's way


def test_rerun_skips_finished_cells(tmp_path):
    spec = SweepSpec(**{**GRID, "depths": (2,)})
    first = run_sweep(spec, tmp_path / "s")
    again = run_sweep(spec, tmp_path / "s")
    assert first.ran == 2 and again.ran == 0 and again.skipped == 2


def test_failing_cell_is_recorded_and_others_finish(tmp_path):
    spec = SweepSpec(**{**TINY, "depths": (2, 3), "workers": 2})
    result = run_sweep(spec, tmp_path / "f", cell_fn=fails_at_depth_3)
    assert len(result.failed) == 1 and "injected failure" in result.failed[0]["error"]
    summary = pd.read_csv(tmp_path / "f" / "summary.csv")
    assert summary["depth"].tolist() == [2]
    failed = pd.read_csv(tmp_path / "f" / "failed.csv")
    assert failed["depth"].tolist() == [3]
    again = run_sweep(spec, tmp_path / "f")  # a failed cell is retried on the next run
    assert again.skipped == 1 and again.ran == 1 and not again.failed


def test_a_cell_that_failed_for_one_seed_is_marked_in_the_report(tmp_path):
    """The report said "mean ± std over seeds 0, 1" over a value of seed 0 alone, unmarked."""
    spec = SweepSpec(**{**TINY, "seeds": (0, 1), "workers": 2})
    result = run_sweep(spec, tmp_path / "f", cell_fn=fails_on_seed_1)
    assert len(result.failed) == 1
    text = (tmp_path / "f" / "report-san-init" / "report.md").read_text()
    assert "(1 of 2 seeds)" in text and "the other runs of that cell failed" in text


def test_a_seed_that_failed_everywhere_is_marked_in_table_csv_too(tmp_path):
    """table.csv counted the seeds the summary held, not the seeds asked: with seed 1 failed in
    every cell it showed 2-seed means unmarked while report.md said (1 of 2 seeds) (an
    audit)."""
    spec = SweepSpec(**{**TINY, "seeds": (0, 1), "workers": 1})
    run_sweep(spec, tmp_path / "f", cell_fn=fails_on_seed_1)
    table = (tmp_path / "f" / "report-san-init" / "table.csv").read_text()
    assert "(1 of 2 seeds)" in table
    # the verdict pools seed 0 alone: its line and fits.json say so (they read as the 2-seed
    # sweep's: an audit)
    text = (tmp_path / "f" / "report-san-init" / "report.md").read_text()
    assert "pooled over the 1 of the 2 seeds asked that finished" in text
    fits = json.loads((tmp_path / "f" / "report-san-init" / "fits.json").read_text())
    (record,) = fits.values()
    assert {"code": "fewer-seeds", "seeds": 1, "of_seeds": 2} in record["evidence"]["notes"]


def test_a_combination_whose_every_seed_failed_is_named_in_the_report(tmp_path):
    """A depth all of whose runs failed vanished from the tables and the headings (and a
    model, from the title) with no word in the report (an audit)."""
    spec = SweepSpec(**{**TINY, "depths": (2, 3), "workers": 1})
    run_sweep(spec, tmp_path / "f", cell_fn=fails_at_depth_3)
    folder = tmp_path / "f" / "report-san-init"
    text = (folder / "report.md").read_text()
    model, dataset = TINY["models"][0], TINY["datasets"][0]
    assert f"No run finished for {model} at depth 3 on {dataset}: every seed of it" in text
    assert json.loads((folder / "config.json").read_text())["missing"] == [
        {"model": model, "dataset": dataset, "depth": 3}
    ]
    # table.csv keeps the depth, a dash where no run finished (it vanished there: an audit)
    table = pd.read_csv(folder / "table.csv")
    assert table["3 layers"].tolist() == ["—"] and table["2 layers"].notna().all()


def test_a_run_clears_the_tables_and_reports_of_the_earlier_spec_before_it_merges(tmp_path):
    """A grown grid stopped before its merge left spec.json of the new grid beside the tables
    and reports of the old one; so did a rerun with nothing to compute (it only merges
    again), and a grid that shrank kept the reports of its dropped cells."""
    from oversmooth.experiments.sweep import _prepare_folder

    out = tmp_path / "s"
    run_sweep(SweepSpec(**TINY), out, table_formats=("csv", "parquet"))
    assert (out / "summary.csv").is_file() and (out / "report-san-init").is_dir()
    grown = SweepSpec(**{**TINY, "seeds": (0, 1)})
    _prepare_folder(out, grown)  # what a run does before its first cell or its merge
    left = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert left == ["cells", "spec.json"]
    assert json.loads((out / "spec.json").read_text())["seeds"] == [0, 1]
    # a grid that shrinks: the dropped conv's report goes
    both = SweepSpec(**{**TINY, "convs": ("san", "gcn")})
    run_sweep(both, out)
    assert (out / "report-gcn-init").is_dir()
    run_sweep(SweepSpec(**TINY), out)
    assert not (out / "report-gcn-init").exists() and (out / "report-san-init").is_dir()


def test_a_changed_dataset_file_or_a_field_back_at_its_default_is_refused(tmp_path):
    """Finished cells were reused after the dataset file changed (one table over two graphs),
    and a model field set back to its default recomputed and overwrote them."""
    import torch

    ring = torch.tensor([[i, (i + 1) % 6] for i in range(6)]).T
    graph = tmp_path / "g.pt"
    torch.save({"x": torch.eye(6)[:, :4], "edge_index": torch.cat([ring, ring.flip(0)], 1)}, graph)
    out = tmp_path / "s"
    spec = SweepSpec(**{**TINY, "datasets": (str(graph),), "model": replace(MODEL, norm="graph")})
    assert run_sweep(spec, out).ran == 1
    assert run_sweep(spec, out).ran == 0  # the same file: reused
    with pytest.raises(ValueError, match=r"computed with norm='graph', but this sweep asks norm="):
        run_sweep(replace(spec, model=MODEL), out)
    torch.save({"x": torch.eye(6)[:, 1:5], "edge_index": torch.cat([ring, ring.flip(0)], 1)}, graph)
    with pytest.raises(ValueError, match=r"computed on other contents of .*g\.pt"):
        run_sweep(spec, out)


def test_a_dataset_file_joining_or_leaving_the_grid_keeps_the_other_cells(tmp_path):
    """Every file's fingerprint sat in every cell's key: adding a file recomputed the finished
    cells of the other datasets, and adding a second file was refused as "other contents of"
    a file the folder had never seen (an audit)."""
    import torch

    ring = torch.tensor([[i, (i + 1) % 6] for i in range(6)]).T
    files = []
    for name, shift in (("a.pt", 0), ("b.pt", 1)):
        path = tmp_path / name
        x = torch.eye(6)[:, shift : shift + 4]
        torch.save({"x": x, "edge_index": torch.cat([ring, ring.flip(0)], 1)}, path)
        files.append(str(path))
    out = tmp_path / "s"
    assert run_sweep(SweepSpec(**TINY), out).ran == 1
    grown = SweepSpec(**{**TINY, "datasets": ("karate", files[0])})
    assert run_sweep(grown, out).ran == 1  # karate's cell reused
    both = SweepSpec(**{**TINY, "datasets": ("karate", *files)})
    assert run_sweep(both, out).ran == 1  # b.pt's cell alone: no refusal
    assert run_sweep(SweepSpec(**TINY), out).ran == 0  # the grid shrunk back: all reused


def test_repeated_grid_values_are_refused():
    with pytest.raises(ValueError, match="depths: 2 appears twice"):
        SweepSpec(**{**TINY, "depths": (2, 3, 2)})


def test_bad_spec_files(tmp_path):
    missing = tmp_path / "none.toml"
    with pytest.raises(FileNotFoundError, match="none.toml: no such spec file"):
        load_spec(missing)
    with pytest.raises(ValueError, match="a folder; expected a TOML spec file"):
        load_spec(tmp_path)
    bad_key = tmp_path / "k.toml"
    bad_key.write_text("[grid]\nmodels = ['preln']\nwidth = [3]\n")
    with pytest.raises(ValueError, match="unknown key grid.width"):
        load_spec(bad_key)
    bad_value = tmp_path / "v.toml"
    bad_value.write_text("[grid]\ndepths = [2, 0]\n")
    with pytest.raises(ValueError, match="depths: expected a list of integers >= 1"):
        load_spec(bad_value)
    bad_model = tmp_path / "m.toml"
    bad_model.write_text("[grid]\nmodels = ['postln', 'resnet']\n")
    with pytest.raises(
        ValueError, match="models: expected one of preln, postln, .*, received 'resnet'"
    ):
        load_spec(bad_model)
    section = tmp_path / "s.toml"
    section.write_text("[grids]\nmodels = ['preln']\n")
    with pytest.raises(ValueError, match=r"unknown section \[grids\]"):
        load_spec(section)
    broken = tmp_path / "b.toml"
    broken.write_text("[grid\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_spec(broken)
    good = tmp_path / "g.toml"
    good.write_text(
        "[grid]\nmodels = ['preln']\ndepths = [2]\n[options]\nbackend = 'local'\nworkers = 1\n"
    )
    assert load_spec(good).models == ("preln",)
    runner = CliRunner()
    result = runner.invoke(app, ["sweep", str(bad_key)])
    assert (
        result.exit_code == 2
        and result.output.count("\n") == 1
        and "unknown key grid.width" in result.output
    )


def test_cli_sweep_from_lists(tmp_path):
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "sweep",
            "--models",
            "preln",
            "--depths",
            "2",
            "--workers",
            "1",
            "--dtype",
            "float32",
            "--out",
            str(tmp_path / "c"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["cells"] == 1 and payload["ran"] == 1 and payload["failed"] == []
    report = tmp_path / "c" / "report-san-init"  # the merged report states the sweep's dtype
    model = json.loads((report / "config.json").read_text())["model"]
    assert model["dtype"] == "float32"
    # and Cora's sizes, not the config's placeholder 1 and 1 (an audit)
    assert (model["in_channels"], model["out_channels"]) == (1433, 7)
    fits = json.loads((report / "fits.json").read_text())
    assert fits["cora/preln"]["dtype"] == "float32"


def test_trained_mode_cell(tmp_path):
    spec = SweepSpec(
        model=ModelConfig(hidden=16, heads=2, dtype="float64"),
        models=("preln",),
        depths=(2,),
        modes=("trained",),
        epochs=3,
        workers=1,
    )
    result = run_sweep(spec, tmp_path / "t")
    assert not result.failed, result.failed
    summary = pd.read_csv(tmp_path / "t" / "summary.csv")
    assert summary["mode"].tolist() == ["trained"] and 0 <= summary["best_test_acc"].iloc[0] <= 1
    assert (tmp_path / "t" / "report-san-trained" / "report.md").is_file()


def test_changed_options_are_refused_not_silently_reused(tmp_path):
    out = tmp_path / "h"
    first = run_sweep(SweepSpec(**TINY), out)
    assert first.ran == 1 and not first.failed
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match=r"computed with hidden=16, but this sweep asks hidden=8"):
        run_sweep(SweepSpec(**{**TINY, "model": replace(MODEL, hidden=8)}), out)
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # untouched
    spec_file = tmp_path / "h8.toml"
    spec_file.write_text(
        f"[grid]\nmodels = ['preln']\ndepths = [2]\ndatasets = ['karate']\n"
        f"[options]\nhidden = 8\nheads = 2\nout = '{out}'\n"
    )
    result = CliRunner().invoke(app, ["sweep", str(spec_file), "--quiet"])
    assert result.exit_code == 2 and "hidden=16" in result.output and result.output.count("\n") == 1
    assert json.loads((out / "spec.json").read_text())["model"]["hidden"] == 16


def test_every_option_field_is_part_of_the_cell_identity():
    base = SweepSpec(**TINY)
    cell = base.cells()[0]
    assert set(base.options()) >= {"hidden", "heads", "epochs", "device", "data_root"}
    assert not set(base.options()) & {"backend", "workers", "ray_address", "out"}
    key = cell_key(cell, base.options())
    changes = ({"hidden": 8}, {"heads": 4}, {"norm": "graph"}, {"ffn": 0}, {"dtype": "float32"})
    for change in changes:
        changed = SweepSpec(**{**TINY, "model": replace(MODEL, **change)})
        assert cell_key(cell, changed.options()) != key, change
    assert cell_key(cell, SweepSpec(**{**TINY, "epochs": 7}).options()) != key
    assert cell_key(cell, SweepSpec(**{**TINY, "workers": 2, "out": "x"}).options()) == key
    assert SweepSpec(**{**TINY, "device": "auto"}).options()["device"] in ("cpu", "cuda")


def test_the_version_is_part_of_the_cell_identity(monkeypatch):
    import oversmooth.experiments.cells as S

    base = SweepSpec(**TINY)
    cell = base.cells()[0]
    key = cell_key(cell, base.options())
    monkeypatch.setattr(S, "__version__", "0.0.0-other")
    assert cell_key(cell, base.options()) != key


@pytest.mark.slow  # 5-7 s end to end; the key's version is tested above in milliseconds
def test_cells_of_another_version_are_recomputed_and_never_merged(tmp_path):
    out = tmp_path / "v"
    spec = SweepSpec(**{**TINY, "depths": (2, 3)})
    run_sweep(spec, out)
    reference = pd.read_csv(out / "metrics.csv")
    stale = sorted((out / "cells").glob("*.json"))[0]
    record = json.loads(stale.read_text())
    record.update(version="0.0.1", key="made-by-an-older-release", final_energy=-1.0)
    stale.write_text(json.dumps(record))
    gone = subprocess.Popen(["true"])
    gone.wait()  # a dead process's leftovers: a half-written cell and a report lock
    litter = [out / "cells" / f".{stale.name}.tmp-{gone.pid}", out / ".report-gcn-init.lock"]
    litter[0].write_text("{")
    litter[1].write_text(f"{gone.pid}\n")
    again = run_sweep(spec, out)
    assert not any(p.exists() for p in litter)
    assert again.skipped == 1 and again.ran == 1
    assert json.loads(stale.read_text())["key"] == cell_key(record["cell"], spec.options())
    pd.testing.assert_frame_equal(pd.read_csv(out / "metrics.csv"), reference)
    assert len(list((out / "cells").glob("*.json"))) == 2


def test_dead_worker_costs_only_its_own_cell(tmp_path):
    spec = SweepSpec(**{**TINY, "models": ("preln", "postln"), "depths": (2, 3), "workers": 2})
    result = run_sweep(spec, tmp_path / "w", cell_fn=dies_on_postln)
    doomed = [cell_id(c) for c in spec.cells() if c["model"] == "postln" and c["depth"] == 3]
    assert [r["id"] for r in result.failed] == doomed
    assert "worker died (killed by SIGKILL) twice" in result.failed[0]["error"]
    summary = pd.read_csv(tmp_path / "w" / "summary.csv")
    finished = sorted(zip(summary["model"], summary["depth"], strict=True))
    assert finished == [("postln", 2), ("preln", 2), ("preln", 3)]


def test_second_sweep_into_a_claimed_folder_exits_2(tmp_path):
    out = tmp_path / "busy"
    with held_folder(out) as owner:
        argv = ["sweep", "--datasets", "karate", "--depths", "2", "--out", str(out)]
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 2 and f"pid {owner.pid}" in result.output
        assert str(out) in result.output
        assert not out.exists()


def test_interrupted_before_any_cell_leaves_nothing(tmp_path):
    def interrupt(done: int, total: int, message: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(SweepSpec(**TINY), tmp_path / "i", progress=interrupt)
    assert list(tmp_path.iterdir()) == []  # no folder, no lock, no temp file


@pytest.mark.parametrize(
    "args, spec_text, expected",
    [
        ([], "[options]\ndevice = 7\n", "device: expected auto, cpu, cuda or cuda:N, received 7"),
        ([], "grid = 5\n", "grid must be a table"),
        ([], b"[grid]\nmodels = ['pr\xe9ln']\n", "not UTF-8 text"),
        (["--datasets", "nope"], None, "--datasets: unknown name 'nope'"),
        (["--datasets", "karate", "--device", "cuda:99"], None, "device: 'cuda:99' asked for"),
    ],
)
def test_bad_input_exits_2_before_any_work(tmp_path, args, spec_text, expected):
    out = tmp_path / "never"
    argv = ["sweep", *args, "--out", str(out), "--quiet"]
    if spec_text is not None:
        spec_file = tmp_path / "spec.toml"
        spec_file.write_bytes(spec_text if isinstance(spec_text, bytes) else spec_text.encode())
        argv.insert(1, str(spec_file))
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and expected in result.output
    if spec_text is not None:  # a spec file's error names the file
        assert "spec.toml" in result.output
    assert not out.exists()


def test_out_naming_a_file_exits_2(tmp_path):
    target = tmp_path / "a-file"
    target.write_text("keep me")
    argv = ["sweep", "--datasets", "karate", "--depths", "2", "--out", str(target)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2 and "exists and is not a folder" in result.output
    assert target.read_text() == "keep me"


def test_cuda_on_a_machine_without_it_exits_2(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    argv = ["sweep", "--datasets", "karate", "--device", "cuda", "--out", str(tmp_path / "c")]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2 and "CUDA is not available" in result.output
    assert not (tmp_path / "c").exists()


def test_nan_results_are_written_as_strict_json_and_read_back_as_nan(tmp_path):
    from tests.test_outputs import strict_json

    spec = SweepSpec(**TINY)
    out = tmp_path / "n"
    first = run_sweep(spec, out, cell_fn=nan_metrics)
    assert first.ran == 1 and not first.failed
    files = sorted(out.rglob("*.json"))
    assert any(f.parent.name == "cells" for f in files) and (out / "spec.json") in files
    for path in files:
        strict_json(path.read_text())  # no NaN / Infinity literal anywhere
    cell = strict_json(next((out / "cells").glob("*.json")).read_text())
    assert cell["final_energy"] is None
    metrics = pd.read_csv(out / "metrics.csv")
    nan_column = [c for c in metrics if metrics[c].isna().all()]
    assert nan_column and metrics[nan_column[0]].dtype == float
    assert pd.read_csv(out / "summary.csv")["final_energy"].isna().all()
    again = run_sweep(spec, out)  # resume reads the cell back: nothing recomputed
    assert again.ran == 0 and again.skipped == 1
    pd.testing.assert_frame_equal(pd.read_csv(out / "metrics.csv"), metrics)
    # a finished cell whose final energy is not finite is named, in both runs (it was counted
    # as a success with no word: an audit), and kept, not retried
    (cell,) = spec.cells()
    assert first.diverged == again.diverged == [{"id": cell_id(cell), "final_energy": None}]


def test_the_command_names_diverged_cells(tmp_path, monkeypatch):
    """The summary line counts the diverged cells, stderr names each, --json lists them, and
    the exit code stays 0 (they finished)."""
    import oversmooth.experiments.sweep as sweep

    def fake(spec, progress=None, **formats):
        return SweepResult(
            Path(spec.out), 2, 0, 2, [], 1.0, [{"id": "a-cell", "final_energy": None}]
        )

    monkeypatch.setattr(sweep, "run_sweep", fake)
    argv = ["sweep", "--datasets", "karate", "--depths", "2", "--out", str(tmp_path / "d")]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert "0 failed, 1 diverged (a final energy that is not finite)" in result.output
    assert "diverged a-cell: final energy not finite" in result.output
    result = CliRunner().invoke(app, [*argv, "--json"])
    assert json.loads(result.stdout)["diverged"] == [{"id": "a-cell", "final_energy": None}]


def test_graph_files_in_folders_sweep_and_report(tmp_path, monkeypatch):
    # a dataset path with a folder in it used to crash the merge: its "/" went into a figure name
    import torch

    (tmp_path / "data").mkdir()
    ring = torch.tensor([[i, (i + 1) % 6] for i in range(6)]).T
    graph = {"x": torch.eye(6)[:, :4], "edge_index": torch.cat([ring, ring.flip(0)], 1)}
    torch.save(graph, tmp_path / "data" / "plain.pt")
    monkeypatch.chdir(tmp_path)
    absolute = str(tmp_path / "data" / "plain.pt")
    spec = SweepSpec(**{**TINY, "datasets": ("data/plain.pt", absolute)})
    # the cells in this process (a worker pool costs seconds), then the sweep's own merge
    (tmp_path / "s" / "cells").mkdir(parents=True)
    for cell in spec.cells():
        record = run_cell(cell, spec.options(), str(tmp_path / "s"))
        assert record["status"] == "ok", record.get("error")
        write_cell(tmp_path / "s" / "cells", record)
    merge(tmp_path / "s", spec)
    report = tmp_path / "s" / "report-san-init"
    figures = sorted(p.name for p in report.glob("*.png"))
    assert len([f for f in figures if f.startswith("energy_")]) == 2, figures
    assert not [p for p in report.rglob("*") if p.is_dir()]  # no folder made from a "/"
    fits = json.loads((report / "fits.json").read_text())
    assert sorted(fits) == sorted(f"{d}/preln" for d in spec.datasets)
    assert all("reference" in fit for fit in fits.values())  # the theory, as compare gives it
    text = (report / "report.md").read_text()
    assert "data/plain.pt" in text and absolute in text


def test_spec_is_read_without_tomllib_through_tomli(tmp_path, monkeypatch):
    # Python 3.10 has no tomllib; requires-python says >=3.10, so the tomli backport is used
    import tomllib
    import types

    calls = []
    backport = types.ModuleType("tomli")
    backport.loads = lambda text: calls.append(text) or tomllib.loads(text)
    backport.TOMLDecodeError = tomllib.TOMLDecodeError
    monkeypatch.setitem(sys.modules, "tomllib", None)  # `import tomllib` now fails, as on 3.10
    monkeypatch.setitem(sys.modules, "tomli", backport)
    path = tmp_path / "spec.toml"
    path.write_text('[grid]\ndepths = [2, 3]\ndatasets = ["karate"]\n')
    assert load_spec(path).depths == (2, 3) and len(calls) == 1
    path.write_text("[grid\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_spec(path)


def test_no_bare_tomllib_import_in_the_package():
    from pathlib import Path

    import oversmooth

    root = Path(oversmooth.__file__).parent
    bare = []
    for path in root.rglob("*.py"):
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if line.strip().split(" ")[:2] in (["import", "tomllib"], ["from", "tomllib"]):
                if lines[i - 1].strip() != "try:":  # only inside the tomli fallback
                    bare.append(f"{path.name}:{i + 1}")
    assert bare == [], bare


def test_a_spec_sets_any_model_field_and_the_command_line_overrides_it(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(
        "[grid]\nmodels = ['preln']\ndepths = [2]\n"
        "[options]\nhidden = 8\nheads = 2\nnorm = 'graph'\nffn = 0\ndtype = 'float32'\n"
    )
    loaded = load_spec(spec)
    assert (loaded.model.hidden, loaded.model.norm, loaded.model.ffn) == (8, "graph", 0)
    assert loaded.model.dtype == "float32" and loaded.options()["norm"] == "graph"
    changed = load_spec(spec, {"model.norm": "node", "depths": (3,)})
    assert changed.model.norm == "node" and changed.depths == (3,) and changed.model.ffn == 0
    assert "norm" not in changed.options()  # at its default: the identity of older cells


def test_a_sweep_refuses_one_dataset_in_two_spellings():
    from oversmooth.experiments.sweep import _check_datasets

    spec = SweepSpec(models=("preln",), depths=(2,), seeds=(0,), datasets=("karate", "KARATE"))
    with pytest.raises(ValueError, match="'karate' and 'KARATE' are the same dataset"):
        _check_datasets(spec)


def test_the_merge_takes_the_diffusion_reference_the_cells_recorded(tmp_path, monkeypatch):
    """The merge's comparison report has each dataset's linear-diffusion reference from the
    cells' records (the dataset is not loaded again, nor its eigenproblem solved); records
    without one (an older release's) make the merge compute it, with the same numbers."""
    from oversmooth import data as D
    from oversmooth.analysis import diffusion_reference

    out = tmp_path / "ref"
    spec = SweepSpec(**TINY)
    run_sweep(spec, out)
    cell = json.loads(next((out / "cells").glob("*.json")).read_text())
    expected = diffusion_reference(D.load("karate"))
    for key in ("seconds",):  # how long it took: the cell's, or the merge's own
        expected.pop(key), cell["diffusion"].pop(key)
    assert cell["diffusion"] == expected and expected["computed"]

    def merged() -> dict:
        fits = json.loads((out / "report-san-init" / "fits.json").read_text())
        found = dict(fits["karate/preln"]["reference"]["diffusion"])
        found.pop("measured"), found.pop("seconds")
        return found

    assert merged() == expected

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the merge loaded a dataset")

    monkeypatch.setattr(D, "load", refused)
    merge(out, spec)
    assert merged() == expected
    monkeypatch.undo()
    for path in (out / "cells").glob("*.json"):  # as an older release wrote them
        record = json.loads(path.read_text())
        record.pop("diffusion")
        path.write_text(json.dumps(record))
    merge(out, spec)
    assert merged() == expected


def test_a_recorded_reference_with_a_number_json_could_not_keep_is_not_used():
    """JSON writes Inf and NaN as null: such a recorded reference is computed again."""
    from oversmooth.experiments.sweep import _references

    whole = {"computed": True, "reason": None, "energy_ratio": 0.99, "halving_steps": 95.5}
    lost = {**whole, "halving_steps": None}
    unread = {"computed": False, "reason": "too large", "num_nodes": 10**6}
    records = [
        {"cell": {"dataset": "a"}, "diffusion": lost},
        {"cell": {"dataset": "b"}, "diffusion": whole},
        {"cell": {"dataset": "c"}, "diffusion": unread},
        {"cell": {"dataset": "d"}},
    ]
    assert _references(records) == {"b": whole, "c": unread}


@pytest.mark.parametrize("damage", ["no_metrics", "short_list", "words", "other_seed"])
def test_a_cell_file_damaged_inside_is_recomputed(tmp_path, damage):
    """A cell file of valid JSON edited or damaged inside: no metrics, a list cut short or of
    words made every rerun fail after the merged tables were removed; a cell naming another
    seed than its file merged that seed twice and its own never (an audit)."""
    spec = SweepSpec(**{**TINY, "seeds": (0, 1), "workers": 1})
    out = tmp_path / "f"
    run_sweep(spec, out)
    clean = pd.read_csv(out / "metrics.csv")
    path = sorted((out / "cells").glob("*-s0-*.json"))[0]
    record = json.loads(path.read_text())
    if damage == "no_metrics":
        del record["metrics"]
    elif damage == "short_list":
        record["metrics"]["laplacian_energy"] = record["metrics"]["laplacian_energy"][:1]
    elif damage == "words":
        record["metrics"]["laplacian_energy"] = "abc"
    else:
        record["cell"]["seed"] = 1
    path.write_text(json.dumps(record))
    again = run_sweep(spec, out)
    assert again.ran == 1 and again.skipped == 1 and not again.failed
    pd.testing.assert_frame_equal(pd.read_csv(out / "metrics.csv"), clean)


def test_the_report_lists_the_models_in_the_specs_order(tmp_path):
    """The energy table and figure listed the models alphabetically while the verdicts and the
    "What was measured" table followed the spec (an audit)."""
    spec = SweepSpec(**{**TINY, "models": ("preln", "nonlocal", "postln"), "workers": 1})
    run_sweep(spec, tmp_path / "o")
    table = pd.read_csv(tmp_path / "o" / "report-san-init" / "table.csv")
    assert table["model"].tolist() == ["preln", "nonlocal", "postln"]
    # and so do the top-level tables (they were a-z: an audit)
    assert pd.read_csv(tmp_path / "o" / "summary.csv")["model"].tolist() == list(spec.models)
    metrics = pd.read_csv(tmp_path / "o" / "metrics.csv")
    assert metrics["model"].drop_duplicates().tolist() == list(spec.models)


def test_the_dataset_check_refuses_what_every_cell_would(tmp_path):
    """The check before any cell is analyze's own (features the model's precision cannot hold,
    or every node alike), so such a dataset stops the sweep once instead of failing each cell."""
    import torch
    from torch_geometric.data import Data

    from oversmooth.experiments.sweep import _check_datasets

    edges = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    for name, x, said in (
        (
            "big.pt",
            torch.tensor([[1e39, 1.0], [2.0, 3.0], [4.0, 5.0]], dtype=torch.float64),
            "beyond the float32 range",
        ),
        ("same.pt", torch.ones(3, 2), "every node has the same features"),
    ):
        torch.save(Data(x=x, edge_index=edges), tmp_path / name)
        spec = SweepSpec(
            models=("preln",), depths=(2,), seeds=(0,), datasets=(str(tmp_path / name),)
        )
        spec = replace(spec, model=replace(spec.model, dtype="float32"))
        with pytest.raises(ValueError, match=said):
            _check_datasets(spec)
