"""Sweeps: local and Ray backends agree, kill-and-rerun completes, failures are isolated, bad specs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from typer.testing import CliRunner

from oversmooth.cli.main import app
from oversmooth.sweep import SweepSpec, load_spec, run_sweep

GRID = dict(models=("preln", "postln"), depths=(2, 4), seeds=(0,), hidden=16, heads=2, workers=2)


def _tables(out):
    metrics = pd.read_csv(out / "metrics.csv")
    summary = pd.read_csv(out / "summary.csv").drop(columns=["seconds"])
    return metrics, summary


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


def test_rerun_skips_finished_cells(tmp_path):
    spec = SweepSpec(**{**GRID, "depths": (2,)})
    first = run_sweep(spec, tmp_path / "s")
    again = run_sweep(spec, tmp_path / "s")
    assert first.ran == 2 and again.ran == 0 and again.skipped == 2


def test_killed_sweep_reruns_to_completion_without_duplicates(tmp_path):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "oversmooth.cli.main", "sweep", "--models", "preln,postln,nonlocal", "--depths", "2,3,4",
           "--seeds", "0", "--workers", "1", "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and len(list((out / "cells").glob("*.json"))) < 2:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished_before = len(list((out / "cells").glob("*.json")))
    assert 2 <= finished_before < 9, "the sweep should have been killed mid-way"
    result = run_sweep(SweepSpec(models=("preln", "postln", "nonlocal"), depths=(2, 3, 4), seeds=(0,), workers=2), out)
    assert result.skipped == finished_before and result.ran == 9 - finished_before
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 9
    assert not summary.duplicated(["model", "depth", "seed"]).any()
    assert not list((out / "cells").glob(".*"))  # no half-written cell files


def test_failing_cell_is_recorded_and_others_finish(tmp_path):
    spec = SweepSpec(models=("preln",), depths=(2,), datasets=("cora", "nope"), workers=2)
    result = run_sweep(spec, tmp_path / "f")
    assert len(result.failed) == 1 and "unknown name 'nope'" in result.failed[0]["error"]
    summary = pd.read_csv(tmp_path / "f" / "summary.csv")
    assert summary["dataset"].tolist() == ["cora"]
    failed = pd.read_csv(tmp_path / "f" / "failed.csv")
    assert failed["dataset"].tolist() == ["nope"]


def test_bad_spec_files(tmp_path):
    missing = tmp_path / "none.toml"
    with pytest.raises(FileNotFoundError, match="none.toml: no such spec file"):
        load_spec(missing)
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
    with pytest.raises(ValueError, match="models: unknown value 'resnet'"):
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
    good.write_text("[grid]\nmodels = ['preln']\ndepths = [2]\n[options]\nbackend = 'local'\nworkers = 1\n")
    assert load_spec(good).models == ("preln",)
    runner = CliRunner()
    result = runner.invoke(app, ["sweep", str(bad_key)])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "unknown key grid.width" in result.output


def test_cli_sweep_from_lists(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["sweep", "--models", "preln", "--depths", "2", "--workers", "1", "--out", str(tmp_path / "c"), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["cells"] == 1 and payload["ran"] == 1 and payload["failed"] == []


def test_trained_mode_cell(tmp_path):
    spec = SweepSpec(models=("preln",), depths=(2,), modes=("trained",), epochs=3, hidden=16, heads=2, workers=1)
    result = run_sweep(spec, tmp_path / "t")
    assert not result.failed, result.failed
    summary = pd.read_csv(tmp_path / "t" / "summary.csv")
    assert summary["mode"].tolist() == ["trained"] and 0 <= summary["best_test_acc"].iloc[0] <= 1
    assert (tmp_path / "t" / "report-san-trained" / "report.md").is_file()
