"""CLI: every command and every error path (typer's CliRunner)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oversmooth.cli.main import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def _one_line_error(result, code=2, contains=""):
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    assert contains in lines[0], lines[0]


@pytest.mark.parametrize(
    "model,seeds,labels",
    [
        # one seed of Post-LN at depth 256 falls 13 decades with a rate that wanders (its
        # quarter slopes -0.18, -0.16, -0.04, -0.12 per layer): the law is not separable from a
        # shifted power law, but the fall, its late rate and that the nodes converge are
        ("postln", "0", {"exponential-smoothing", "inconclusive"}),
        pytest.param(
            "nonlocal", "0", {"algebraic-smoothing", "inconclusive"}, marks=pytest.mark.slow
        ),
        # the default five seeds: growth with the curse of depth, the law left open
        pytest.param(
            "preln", "0,1,2,3,4", {"power-law-growth", "inconclusive"}, marks=pytest.mark.slow
        ),
    ],
)
def test_main_command_verdicts(tmp_path, model, seeds, labels):
    """The README's main command: the paper's three behaviours at depth 256 on embedded Cora."""
    import math

    import numpy as np
    import pandas as pd

    out = tmp_path / model
    result = run(
        "analyze",
        "--model",
        model,
        "--depth",
        256,
        "--seeds",
        seeds,
        "--out",
        out,
        "--json",
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["classification"] in labels, summary["verdict"]
    found = json.loads((out / "fits.json").read_text())["mean_over_seeds"]["evidence"]
    if found["label"] == "inconclusive" and found["collapse"] == "oversmoothing":
        # what was decided opens the line, as on the report's banner: "inconclusive" alone
        # read as an undecided diagnosis (an audit)
        assert ": oversmoothing, law inconclusive: energy decays by" in summary["verdict"]
    if model == "preln":
        assert found["trend"] == "growth" and summary["curse_of_depth"] is True
        assert "curse of depth" in summary["verdict"]
        # the raw energy grows with the norm while the directions converge: both are said
        assert (
            found["evidence"]["norm_decades"] > 1 and found["evidence"]["scale_free_decades"] < -0.5
        )
        assert "the directions still converge" in summary["verdict"]
    if model == "postln":  # float64 by default: far below the float32 floor (about 1e-12)
        assert found["trend"] == "decay" and found["collapse"] == "oversmoothing"
        assert summary["final_energy"] < 1e-13 and not summary["final_at_floor"]
        # the printed late rate is the slope of its own float64 curve over the last quarter,
        # inside the printed interval
        metrics = pd.read_csv(out / "metrics.csv")
        late = metrics[metrics["layer"] >= found["evidence"]["late_window"][0]]
        slope = np.polyfit(late["layer"], np.log(late["laplacian_energy"]), 1)[0]
        lo, hi = found["evidence"]["late_slope_interval"]
        assert lo <= slope <= hi and slope == pytest.approx(found["evidence"]["late_slope"])
        assert f"{math.log(2) / -slope:.3g} layers over layers" in summary["verdict"]
    if model == "nonlocal":  # no collapse: slow decay
        assert summary["final_energy"] > 1e-3
    for name in (
        "metrics.csv",
        "similarity.csv",
        "fits.json",
        "config.json",
        "energy.png",
        "similarity.png",
        "report.md",
        "report.html",
    ):
        assert (out / name).is_file(), name
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["name"] == model and config["environment"]["torch"]
    # the sizes the model was built with (Cora's features and classes), not a placeholder
    assert (config["model"]["in_channels"], config["model"]["out_channels"]) == (1433, 7)
    assert "data:image/png;base64," in (out / "report.html").read_text()


def test_analyze_human_output_and_prune_and_seeds(tmp_path):
    result = run(
        "analyze",
        "--model",
        "preln",
        "--depth",
        8,
        "--seeds",
        "0,1",
        "--prune-layers",
        "2,8",
        "--out",
        tmp_path / "a",
        "--no-similarity",
    )
    assert result.exit_code == 0, result.output
    assert "Pre-LN SAN, 8 layers on cora" in result.output and "report:" in result.output
    # the table is one model's, which the line above it says
    assert "pruning, the model of seed 0 (the run's first, not the 2 seeds' mean above):" in (
        result.output
    )
    import pandas as pd

    metrics = pd.read_csv(tmp_path / "a" / "metrics.csv")
    assert sorted(metrics["seed"].unique()) == [0, 1] and len(metrics) == 2 * 9
    assert list(metrics.columns[:3]) == ["seed", "layer", "laplacian_energy"]
    assert pd.read_csv(tmp_path / "a" / "prune.csv")["layer"].tolist() == [2, 8]
    assert not (tmp_path / "a" / "similarity.csv").exists()


def test_prune_command(tmp_path):
    result = run(
        "prune",
        "--model",
        "preln",
        "--depth",
        8,
        "--prune-layers",
        "2,4,8",
        "--out",
        tmp_path / "p",
        "--json",
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert [row["layer"] for row in payload["prune"]] == [2, 4, 8]
    assert (tmp_path / "p" / "pruning.png").is_file()


def test_compare_command(tmp_path):
    out = tmp_path / "c"
    result = run(
        "compare",
        "--models",
        "preln,postln,nonlocal",
        "--depths",
        "2,8",
        "--seeds",
        "0,1",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    assert "2 layers" in result.output and "8 layers" in result.output
    import pandas as pd

    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 3 * 2 * 2
    table = pd.read_csv(out / "table.csv", index_col=[0, 1])
    assert table.shape == (3, 2) and "±" in table.iloc[0, 0]
    assert (out / "energy_cora.png").is_file() and (out / "report.html").is_file()


def test_models_metrics_and_report_rebuild(tmp_path):
    result = run("models")
    assert result.exit_code == 0 and "nonlocal-preln" in result.output and "gat" in result.output
    assert json.loads(run("models", "--json").output)["pattern_letters"]["S"]
    out = tmp_path / "r"
    assert run("analyze", "--depth", 4, "--out", out).exit_code == 0
    (out / "report.md").unlink()
    (out / "energy.png").unlink()
    result = run("report", out)
    assert (
        result.exit_code == 0 and (out / "report.md").is_file() and (out / "energy.png").is_file()
    )
    _one_line_error(run("report", tmp_path / "missing"), 2, "no such folder; pass a folder")
    # rebuilt by the version that ran it: nothing more said; by another (a run's recorded
    # commit older than the code), the page says who rebuilt it (the atlas's said only its
    # run's commit, 70 commits before its words: an audit)
    text = (out / "report.md").read_text(encoding="utf-8")
    assert "rebuilt from the folder's files" not in text
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    config["environment"]["git_commit"] = "0123abc"
    (out / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert run("report", out).exit_code == 0
    text = (out / "report.md").read_text(encoding="utf-8")
    assert "(commit `0123abc`). This page was rebuilt from the folder's files by oversmooth" in text


def test_a_report_rebuild_that_fails_part_way_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    """Each file was replaced atomically but not the set: a full disk on report.html left a
    report.md of the new render beside the old report.html (an audit).  The rebuild runs in a
    hard-linked copy that replaces the folder only when it is complete."""
    import oversmooth.report.document as document

    out = tmp_path / "r"
    assert run("analyze", "-d", "karate", "--depth", 4, "--seeds", 0, "--out", out).exit_code == 0
    (out / "energy.png").unlink()  # the rebuild draws it again: not if it fails
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (out / "notes.txt").write_text("mine")  # a file of the user's own stays
    real = document.atomic_text

    def full(path, text):
        if Path(path).name == "report.html":
            raise OSError(28, "No space left on device")
        real(path, text)

    monkeypatch.setattr(document, "atomic_text", full)
    _one_line_error(run("report", out), 1, "no space left on the device; free some space")
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != "notes.txt"} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no copy, no lock left
    monkeypatch.setattr(document, "atomic_text", real)
    assert run("report", out).exit_code == 0 and (out / "notes.txt").read_text() == "mine"
    assert (out / "energy.png").is_file()


KARATE = ("--dataset", "karate", "--depth", 2, "--hidden", 8, "--heads", 2)


def test_existing_out_is_never_overwritten_without_flag(tmp_path):
    out = tmp_path / "keep"
    out.mkdir()
    (out / "precious.txt").write_text("data")
    _one_line_error(
        run("analyze", "--depth", 2, "--out", out), 2, "already exists; pass --overwrite"
    )
    assert (out / "precious.txt").read_text() == "data"
    # --overwrite replaces only what oversmooth wrote: the user's folder is refused, kept
    _one_line_error(
        run("analyze", *KARATE, "--out", out, "--overwrite"), 2, "not written by oversmooth"
    )
    assert sorted(p.name for p in out.iterdir()) == ["precious.txt"]
    (out / "precious.txt").unlink()  # an empty folder, or one of ours, is replaced
    assert run("analyze", *KARATE, "--out", out, "--overwrite").exit_code == 0
    assert run("analyze", *KARATE, "--out", out, "--overwrite").exit_code == 0
    assert (out / "metrics.csv").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


@pytest.mark.parametrize(
    "args,contains",
    [
        (["analyze", "--model", "postlm"], "'postlm' is not one of"),
        (["analyze", "--conv", "gin"], "'gin' is not one of"),
        (["analyze", "--depth", 0], "depth: expected an integer >= 1, received 0"),
        (["analyze", "--depth", 10**9], "depth: expected an integer in [1, 65536]"),
        (["analyze", "--hidden", 30], "hidden: expected a multiple of heads=4"),
        (["analyze", "--seeds", "0,a"], "--seeds: expected comma-separated integers"),
        (
            ["analyze", "--depth", 4, "--prune-layers", "9"],
            "layers: expected layer numbers in [1, 4]",
        ),
        (["analyze", "--dataset", "nope"], "unknown name 'nope'"),
        (["analyze", "--metrics", "bogus"], "received 'bogus'"),
        (["analyze", "--pattern", "MQ"], "pattern: expected a non-empty string over {M, S}"),
        (["analyze", "--device", "tpu"], "device: expected auto, cpu, cuda"),
        (["analyze", "--out", "/proc/none/x"], "--out: cannot write into"),
        (
            ["compare", "--depths", "2,x"],
            "--depths: expected comma-separated integers like 2,32,64, received '2,x'",
        ),
        (["compare", "--models", "preln,foo"], "models: expected one of preln, postln"),
        (["compare", "--depths", "0"], "--depths: expected integers >= 1"),
        # the L x L similarity matrix is in the up-front estimate: it failed at the end of
        # the run, after hours (an audit)
        (["analyze", "-d", "karate", "--depth", 65536, "--seeds", 0], "pass --no-similarity"),
        # it said --depth (an audit)
        (["compare", "--depths", "2,70000"], "--depths: expected an integer in [1, 65536]"),
        (
            ["train", "--checkpoint-every", "-1", "--epochs", 1],
            "--checkpoint-every: expected seconds >= 0",
        ),
        (["prune", "--prune-layers", "2,x"], "--prune-layers: expected comma-separated integers"),
        (["nosuch"], "No such command"),
    ],
)
def test_user_errors_are_one_line_with_exit_code_2(args, contains):
    _one_line_error(run(*args), 2, contains)


def test_runtime_failure_is_exit_1_and_debug_shows_traceback(monkeypatch, tmp_path):
    import oversmooth.analysis as analysis

    def broken(*a, **k):
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(analysis, "run_analysis", broken)
    result = run("analyze", "--depth", 2, "--out", tmp_path / "x")
    _one_line_error(result, 1, "RuntimeError: simulated failure")
    assert not (tmp_path / "x").exists()
    result = run("--debug", "analyze", "--depth", 2, "--out", tmp_path / "y")
    assert result.exit_code == 1 and isinstance(result.exception, RuntimeError)


@pytest.mark.parametrize("dtype, method", [("float32", "shadow"), ("float64", "twin")])
def test_analyze_dtype_flows_to_the_model_and_the_report(tmp_path, dtype, method):
    import pandas as pd

    out = tmp_path / dtype
    result = run(
        "analyze",
        "--model",
        "postln",
        "--depth",
        4,
        "--dtype",
        dtype,
        "--out",
        out,
        "--json",
        "--quiet",
        "--no-similarity",
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["dtype"] == dtype and payload["floor_method"] == method
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["dtype"] == dtype and config["floor_method"] == method
    metrics = pd.read_csv(out / "metrics.csv")
    assert {"float_floor", "at_floor"} <= set(metrics.columns) and not metrics["at_floor"].any()
    assert ("float64_energy" in metrics.columns) == (dtype == "float32")
    if dtype == "float64":
        assert (metrics["float_floor"] < 1e-25).all()  # float64 rounding, never eps32


def test_compare_and_prune_take_dtype(tmp_path):
    import pandas as pd

    out = tmp_path / "c"
    result = run(
        "compare",
        "--models",
        "postln",
        "--depths",
        "2,4",
        "--seeds",
        "0",
        "--dtype",
        "float32",
        "--out",
        out,
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    assert json.loads((out / "config.json").read_text())["model"]["dtype"] == "float32"
    assert "at_floor" in pd.read_csv(out / "metrics.csv").columns
    assert "final_at_floor" in pd.read_csv(out / "summary.csv").columns
    result = run(
        "prune",
        "--model",
        "preln",
        "--depth",
        4,
        "--prune-layers",
        "2",
        "--dtype",
        "float64",
        "--out",
        tmp_path / "p",
        "--json",
    )
    assert result.exit_code == 0, result.output


def test_bad_dtype_and_floor_are_one_line_errors(tmp_path):
    result = run("analyze", "--depth", 2, "--dtype", "float16", "--out", tmp_path / "x")
    assert result.exit_code == 2 and "float16" in result.output and "Traceback" not in result.output
    shadow64 = run(
        "analyze", "--depth", 2, "--dtype", "float64", "--floor", "shadow", "--out", tmp_path / "y"
    )
    _one_line_error(shadow64, 2, "needs --dtype float32")
    result = run(
        "sweep", "--models", "postln", "--depths", 2, "--dtype", "half", "--out", tmp_path / "s"
    )
    assert result.exit_code == 2 and "half" in result.output and "Traceback" not in result.output


@pytest.mark.slow
def test_postln_depth_256_float64_reports_the_real_energy(tmp_path):
    result = run(
        "analyze",
        "--model",
        "postln",
        "--depth",
        256,
        "--dtype",
        "float64",
        "--out",
        tmp_path / "a",
        "--json",
        "--quiet",
        "--no-similarity",
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["final_energy"] < 1e-13 and payload["classification"] == "exponential-smoothing"
    assert not payload["final_at_floor"]


_ENDING = """
import atexit, sys
atexit.register(lambda: print("interpreter teardown ran", flush=True))
sys.argv = ["oversmooth"] + sys.argv[1:]
from oversmooth.cli.main import main
main()
"""


def test_analyze_ends_the_process_once_its_report_is_written(tmp_path):
    """Nothing runs after the report: no interpreter teardown (atexit handlers are its first
    step), the verdict and the report's path still printed; --help still ends normally."""
    import subprocess
    import sys

    out = tmp_path / "run"
    args = ["analyze", "--depth", "2", "--seeds", "0", "--dataset", "karate", "--out", str(out)]
    done = subprocess.run([sys.executable, "-c", _ENDING, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "report: " in done.stdout and (out / "report.html").is_file()
    assert "interpreter teardown ran" not in done.stdout
    helped = subprocess.run(
        [sys.executable, "-c", _ENDING, "--help"], capture_output=True, text=True
    )
    assert helped.returncode == 0 and "interpreter teardown ran" in helped.stdout
    failed = subprocess.run(
        [sys.executable, "-c", _ENDING, "analyze", "--depth", "0"], capture_output=True, text=True
    )
    assert failed.returncode == 2 and "interpreter teardown ran" in failed.stdout


def test_overwrite_never_deletes_a_sweeps_cells(tmp_path):
    """An audit: `analyze --overwrite` into a sweep's folder deleted its computed cells, its
    spec and its merged results, silently (a training run's folder was already kept)."""
    from oversmooth.outputs import write_marker

    sweep = tmp_path / "sw"
    (sweep / "cells").mkdir(parents=True)
    (sweep / "cells" / "a.json").write_text("{}", encoding="utf-8")
    (sweep / "spec.json").write_text("{}", encoding="utf-8")
    write_marker(sweep, "sweep")
    kept = sorted(p.name for p in sweep.rglob("*"))
    for command in ("analyze", "compare"):
        result = run(command, "-d", "karate", "-q", "-o", sweep, "--overwrite")
        _one_line_error(result, contains="holds an oversmooth sweep run (its computed cells)")
    assert sorted(p.name for p in sweep.rglob("*")) == kept


def test_overwrite_never_deletes_what_the_run_reads_or_a_training_run(tmp_path):
    """An audit: `analyze --checkpoint DIR/best.pt --out DIR --overwrite` deleted the checkpoint
    it was reading (and `-d DIR/graph.pt` the graph), and `analyze --overwrite` into a training
    run's folder deleted its checkpoints.  Both are refused now, before any work; a training
    run still replaces a training run."""
    import torch

    from oversmooth.data import karate

    trained = tmp_path / "tr"
    assert (
        run(
            "train", "-m", "preln", "-d", "karate", "-L", "2", "--epochs", "2", "-q", "-o", trained
        ).exit_code
        == 0
    )
    kept = sorted(p.name for p in trained.iterdir())
    for args in (
        ("analyze", "-q", "--checkpoint", trained / "best.pt", "-o", trained, "--overwrite"),
        ("analyze", "-d", "karate", "-L", "2", "-q", "-o", trained, "--overwrite"),
        (
            "prune",
            "-q",
            "--checkpoint",
            trained / "best.pt",
            "--prune-layers",
            "2",
            "-o",
            trained,
            "--overwrite",
        ),
    ):
        _one_line_error(run(*args), contains="holds an oversmooth train run")
    assert sorted(p.name for p in trained.iterdir()) == kept
    again = run(
        "train",
        "-m",
        "preln",
        "-d",
        "karate",
        "-L",
        "2",
        "--epochs",
        "2",
        "-q",
        "-o",
        trained,
        "--overwrite",
    )
    assert again.exit_code == 0, again.output
    folder = tmp_path / "an"
    assert run("analyze", "-d", "karate", "-L", "2", "-q", "-o", folder).exit_code == 0
    k = karate()
    torch.save({"x": k.x, "edge_index": k.edge_index, "y": k.y}, folder / "graph.pt")
    for command in ("analyze", "compare"):
        result = run(
            command,
            "-d",
            folder / "graph.pt",
            "-L",
            "2",
            "--seeds",
            "0",
            "-q",
            "-o",
            folder,
            "--overwrite",
        )
        _one_line_error(result, contains="which this run reads")
        assert (folder / "graph.pt").is_file()


def test_report_in_a_read_only_parent_says_what_it_needs(tmp_path, monkeypatch):
    """The lock (and now the rebuilt copy) go beside DIR: a read-only parent was refused with
    "--out: cannot write into ...; choose another folder", though report has no --out (an
    audit)."""
    import errno
    import os

    out = tmp_path / "r"
    assert run("analyze", "-d", "karate", "--depth", 4, "--seeds", 0, "--out", out).exit_code == 0
    real = os.open

    def read_only(path, flags, *args):
        if str(path).endswith(".lock"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real(path, flags, *args)

    monkeypatch.setattr(os, "open", read_only)
    result = run("report", out)
    _one_line_error(result, 2, "report: cannot write beside")
    assert "--out" not in result.output and "copy the folder somewhere writable" in result.output


def test_report_dot_from_inside_the_folder(tmp_path, monkeypatch):
    """'report .' put its lock and its rebuilt copy inside the folder itself and failed every
    time ("..tmp-PID appeared while the report was rebuilt"; an audit); the folder also stays
    the same folder (a shell inside it keeps its files)."""
    out = tmp_path / "r"
    assert run("analyze", "-d", "karate", "--depth", 4, "--seeds", 0, "--out", out).exit_code == 0
    inode = out.stat().st_ino
    (out / "energy.png").unlink()
    monkeypatch.chdir(out)
    result = run("report", ".")
    assert result.exit_code == 0, result.output
    assert (out / "energy.png").is_file() and out.stat().st_ino == inode
    assert not [p.name for p in out.iterdir() if p.name.startswith("..")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_a_reader_that_goes_away_is_no_error():
    """``oversmooth metrics | head -3`` printed ``error: BrokenPipeError ...`` (an audit):
    quiet now, with SIGPIPE's exit code."""
    import subprocess

    read, write = os.pipe()
    os.close(read)  # the reader has gone before the first line
    try:
        done = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "oversmooth"), "metrics"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


def test_metrics_wraps_to_the_terminal():
    """``oversmooth metrics`` printed 16 lines over 80 columns at COLUMNS=80 (an audit)."""
    from oversmooth.cli.main import app

    for columns in (80, 50):
        result = CliRunner().invoke(app, ["metrics"], env={"COLUMNS": str(columns)})
        assert result.exit_code == 0
        lines = result.output.splitlines()
        assert max(map(len, lines)) <= columns and "laplacian_energy" in result.output


@pytest.mark.parametrize("command", ["models", "datasets"])
def test_listings_fit_an_80_column_terminal(command, monkeypatch):
    """An audit: `models` printed lines of up to 101 characters, `datasets` up to 137."""
    monkeypatch.setenv("COLUMNS", "80")
    result = run(command)
    assert result.exit_code == 0
    assert max(map(len, result.output.splitlines())) <= 80, result.output
    assert "csbm-batch" in result.output or "nonlocal-preln" in result.output
