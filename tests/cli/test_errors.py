"""The CLI's exit-code contract: bad input is one ``error:`` line and exit 2, within a second
and before any work; internal failures exit 1 with the --debug hint; outputs are exclusive."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from typer.testing import CliRunner

from oversmooth.cli.main import app
from oversmooth.config import ModelConfig

runner = CliRunner()
FAST = ["--dataset", "karate", "--depth", "2", "--hidden", "8", "--heads", "2", "--quiet"]


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def one_line_error(result, code: int = 2, contains: str = "") -> str:
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    assert contains in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    (root / "big_id.csv").write_text("source,target\n0,1\n1,10000000000\n")
    (root / "inf_id.csv").write_text("source,target\n0,1\n1,inf\n")
    (root / "latin1.csv").write_bytes("source,target\n0,1\n# caf\xe9\n".encode("latin-1"))
    (root / "folder.csv").mkdir()
    (root / "edges.csv").write_text("0,1\n1,2\n")
    ring = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    torch.save(
        {"x": torch.zeros(0, 3), "edge_index": torch.zeros(2, 0, dtype=torch.long)},
        root / "empty.pt",
    )
    torch.save(
        {"x": torch.eye(4), "edge_index": ring, "y": torch.tensor([0.5, 1, 0, 1])},
        root / "floaty.pt",
    )
    huge = torch.full((6,), 1e308, dtype=torch.float64)
    torch.save({"x": torch.eye(4), "edge_index": ring, "edge_weight": huge}, root / "huge.pt")
    torch.save({"edge_index": ring}, root / "no_x.pt")  # no features: the feature 1 on every node
    (root / "empty.toml").write_text("# nothing yet\n")
    return root


@pytest.mark.parametrize(
    "args,contains",
    [
        # impossible sizes are refused before allocating, with the need and what the machine has
        (["datasets", "--stats", "csbm:n=1000000000000"], "would need about"),
        (["datasets", "--stats", "csbm:n=100000000,degree=90"], "available"),
        (["datasets", "--stats", "grid:rows=1000000,cols=1000000"], "would need about"),
        (["datasets", "--stats", "csbm:n=1000,features=1000000000"], "would need about"),
        (["datasets", "--stats", "{root}/big_id.csv"], "would need about"),
        (["analyze", *FAST, "--metrics", "energy_100000000"], "orders above 1000 are refused"),
        (["analyze", "-d", "karate", "-L", "65536", "--hidden", "4096", "-q"], "a smaller --depth"),
        # bad values
        (["datasets", "--stats", "csbm:n=10,n=20"], "parameter n given twice"),
        (["datasets", "--stats", "{root}/inf_id.csv"], "node ids must be non-negative integers"),
        (["datasets", "--stats", "{root}/latin1.csv"], "latin1.csv: not UTF-8 text"),
        (["analyze", "--depth", "0", "--quiet"], "depth"),
        (["analyze", "--depth", "abc"], "Invalid value for '--depth'"),
        (["analyze", *FAST, "--seeds", "a,b"], "--seeds: expected comma-separated integers"),
        (["analyze", "--model", "foo"], "'foo' is not one of"),
        (["analyze", "--conv", "foo"], "'foo' is not one of"),
        (["analyze", *FAST, "--metrics", "bogus"], "received 'bogus'"),
        (["analyze", "--dataset", "bogus", "--quiet"], "dataset: unknown name 'bogus'"),
        (["compare", "--datasets", "karate,bogus", "--depths", "2", "-q"], "unknown name 'bogus'"),
        # missing files, folders where files are expected
        (["analyze", "--dataset", "{root}/missing.csv", "--quiet"], "missing.csv: no such file"),
        (["analyze", "--dataset", "{root}/folder.csv", "--quiet"], "folder.csv: is a folder"),
        # a CSV's nodes would all get the feature 1 (every energy 0): refused, with the cure
        (["analyze", "--dataset", "{root}/edges.csv", "--quiet"], "has no node features"),
        (["compare", "--datasets", "{root}/edges.csv", "--depths", "2", "-q"], "save it with"),
        # likewise a .pt without x: every energy 0 was blamed on the float floor (an audit)
        (["analyze", "--dataset", "{root}/no_x.pt", "-q"], "every node has the same features"),
        (["datasets", "--stats", "{root}/edges.csv", "--features", "{root}/folder.csv"], "folder"),
        (["datasets", "--stats", "karate", "--features", "{root}/edges.csv"], "only an edge-list"),
        (["report", "{root}/nothing-here"], "no such folder"),
        (["report", "{root}/big_id.csv"], "not a folder"),
        # issue #28: were exit 1, ran the wrong thing, or said the wrong thing
        (["analyze", "--dataset", "{root}/empty.pt", "-q"], "the graph has 0 nodes"),
        (["train", "--dataset", "{root}/floaty.pt", "--epochs", "1"], "expected one integer class"),
        (["analyze", "--dataset", "{root}/huge.pt", "-q"], "sum past the float64 range"),
        (["analyze", *FAST, "--seeds", ""], "--seeds: expected at least one integer"),
        (["analyze", *FAST, "--seeds", "0,0"], "seeds: 0 appears twice"),
        # one rule for every list: these dropped the repeat silently (an audit)
        (["compare", "-m", "preln,preln", "-L", "2", "-q"], "--models: preln appears twice"),
        (["compare", "-m", "preln", "-L", "2,2", "-q"], "--depths: 2 appears twice"),
        (["analyze", *FAST, "--metrics", "feature_norm,feature_norm"], "feature_norm appears"),
        (["analyze", *FAST, "--figure-format", "svg,svg"], "--figure-format: svg appears twice"),
        (["analyze", *FAST, "-d", "csbm:n=-5"], "dataset csbm: parameter n: expected an"),
        # a run of a grid that cannot run says which (an audit)
        (
            ["compare", "--convs", "esa", "-L", "2", "--seeds", "0", "-d", "complete:n=400"],
            "preln esa at depth 2 on complete:n=400: line graph",
        ),
        (["analyze", *FAST, "--seeds", "0,,1"], "--seeds: an empty item in '0,,1'"),
        # the option the user typed, not the config field behind it, nor pydantic's prefix
        (["analyze", *FAST, "--block-dropout", "2"], "--block-dropout: expected a probability"),
        (["prune", *FAST, "--prune-layers", "9"], "--prune-layers: expected layer numbers"),
        (["train", "--probe-every", "-1", "--epochs", "1"], "--probe-every: expected an integer"),
        (["analyze", "--model", "foo"], "'--model' / '-m': 'foo' is not one of"),
        (["compare", "--datasets", "karate,", "--depths", "2", "-q"], "--datasets: an empty item"),
        (["compare", "--datasets", "karate", "--depths", "2", "--seeds", "", "-q"], "--seeds"),
        (["analyze", "--dataset", "", "-q"], "dataset: empty name"),
        (["sweep", "{root}/empty.toml", "-q"], "the spec is empty"),
        (["sweep", "--datasets", "karate", "--seeds", "", "-q"], "--seeds: expected at least"),
        (["datasets", "--stats", "csbm-batch:graphs=100000000,n=200"], "would need about"),
        (["sweep", "--datasets", "karate", "--depths", "1000000000", "-q"], "[1, 65536]"),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(files, tmp_path, args, contains):
    args = [a.replace("{root}", str(files)) for a in args]
    if args[0] in ("analyze", "compare", "train", "sweep"):
        args += ["--out", str(tmp_path / "out")]
    one_line_error(run(*args), 2, contains)
    assert not (tmp_path / "out").exists()  # no folder for a run that did nothing
    assert list(tmp_path.iterdir()) == []


def test_debug_keeps_exit_2_for_user_errors():
    result = run("--debug", "analyze", "--dataset", "bogus", "--quiet")
    assert result.exit_code == 2
    assert "dataset: unknown name 'bogus'" in result.output


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_is_exit_2(tmp_path):
    path = tmp_path / "edges.csv"
    path.write_text("0,1\n")
    path.chmod(0)
    one_line_error(run("datasets", "--stats", path), 2, "edges.csv: cannot read")


def test_internal_bug_exits_1_with_debug_hint(monkeypatch, tmp_path):
    import oversmooth.analysis as analysis

    def broken(*args, **kwargs):
        raise KeyError("layer")

    monkeypatch.setattr(analysis, "run_analysis", broken)
    line = one_line_error(run("analyze", *FAST, "--out", tmp_path / "x"), 1, "KeyError")
    assert "--debug" in line
    assert list(tmp_path.iterdir()) == []  # no lock, no empty folder

    def typo(*args, **kwargs):
        raise TypeError("bug")

    monkeypatch.setattr(analysis, "run_analysis", typo)
    assert "TypeError: bug" in one_line_error(run("analyze", *FAST, "--out", tmp_path / "y"), 1)

    def full(*args, **kwargs):  # said "MemoryError:  (rerun ...)": an empty reason (an audit)
        raise MemoryError()

    monkeypatch.setattr(analysis, "run_analysis", full)
    line = one_line_error(run("analyze", *FAST, "--out", tmp_path / "z"), 1)
    assert "MemoryError: out of memory; try a smaller --depth" in line and "  " not in line


def test_report_refuses_a_metrics_file_cut_at_a_row_or_edited(tmp_path):
    """An audit: `head -40 metrics.csv` (whole rows) or every energy times 1000 was drawn
    without a word, the plot's mean over fewer seeds beside a verdict pooling them all."""
    import pandas as pd

    out = tmp_path / "r"
    assert run("analyze", *FAST, "--out", out).exit_code == 0
    good = (out / "metrics.csv").read_text()
    config = json.loads((out / "config.json").read_text())
    assert set(config["digests"]) >= {"metrics.csv", "fits.json"}
    assert run("report", out).exit_code == 0  # a rebuild keeps what it checks
    assert run("report", out).exit_code == 0
    lines = good.splitlines(keepends=True)
    (out / "metrics.csv").write_text("".join(lines[:-2]))
    one_line_error(run("report", out), 2, "of its")
    frame = pd.read_csv(io.StringIO(good))
    frame["laplacian_energy"] *= 1000
    frame.to_csv(out / "metrics.csv", index=False)
    one_line_error(run("report", out), 2, "metrics.csv: not the file the run wrote")
    (out / "metrics.csv").write_text(good)
    assert run("report", out).exit_code == 0
    # a folder of an older version records no digests: its files are read as they are
    del config["digests"]
    (out / "config.json").write_text(json.dumps(config))
    frame.to_csv(out / "metrics.csv", index=False)
    assert run("report", out).exit_code == 0


def test_report_names_the_missing_or_corrupt_file(tmp_path):
    out = tmp_path / "r"
    assert run("analyze", *FAST, "--out", out).exit_code == 0
    config = json.loads((out / "config.json").read_text())
    del config["digests"]  # the files are edited below: checked line by line, not by digest
    (out / "config.json").write_text(json.dumps(config))
    good_fits = (out / "fits.json").read_text()
    (out / "fits.json").write_text("{not json")
    one_line_error(run("report", out), 2, f"{out / 'fits.json'}: not valid JSON")
    fits = {"per_seed": {}, "mean_over_seeds": float("nan")}  # was an AttributeError, exit 1
    (out / "fits.json").write_text(json.dumps(fits))
    one_line_error(run("report", out), 2, "fits.json: mean_over_seeds must be an object")
    (out / "fits.json").write_text("NaN")
    one_line_error(run("report", out), 2, "fits.json: expected a JSON object")
    # a number edited into a word: the verdict lost its clause, with no word (an audit)
    (out / "fits.json").write_text(good_fits)
    edited = json.loads(good_fits)
    edited["mean_over_seeds"]["evidence"]["final_energy"] = "big"
    (out / "fits.json").write_text(json.dumps(edited))
    one_line_error(
        run("report", out),
        2,
        "fits.json: mean_over_seeds.evidence.final_energy is 'big', expected a number",
    )
    edited = json.loads(good_fits)
    edited["mean_over_seeds"]["evidence"] = "a verdict"
    (out / "fits.json").write_text(json.dumps(edited))
    one_line_error(run("report", out), 2, "mean_over_seeds.evidence must be an object")
    (out / "fits.json").write_text(good_fits)
    assert run("report", out).exit_code == 0
    (out / "fits.json").write_text("{}")
    (out / "metrics.csv").unlink()
    one_line_error(run("report", out), 2, f"{out / 'metrics.csv'}: missing")
    (out / "metrics.csv").write_text("seed,layer\n0,1\n")
    one_line_error(run("report", out), 2, "metrics.csv: no column laplacian_energy")
    # cut short, or a number edited into text: refused, never drawn from what is left
    good = "seed,layer,laplacian_energy\n0,0,1.5\n0,1,0.75\n0,2,0.375\n"
    (out / "metrics.csv").write_text(good[:-9])
    one_line_error(run("report", out), 2, "metrics.csv: the last row ends without a newline")
    (out / "metrics.csv").write_text(good.replace("0,2,0.375", "0,2"))
    one_line_error(run("report", out), 2, "metrics.csv: line 4 has 2 fields, the header 3")
    (out / "metrics.csv").write_text(good.replace("0.75", "abc"))
    one_line_error(run("report", out), 2, "column laplacian_energy holds 'abc' on line 3")
    # a metric's whole column of words ("could not convert string to float", naming no file)
    words = "seed,layer,laplacian_energy,feature_norm\n0,0,1.5,a\n0,1,0.75,b\n0,2,0.375,c\n"
    (out / "metrics.csv").write_text(words)
    one_line_error(run("report", out), 2, "column feature_norm holds 'a' on line 2")
    (out / "config.json").write_bytes(b"\xff\xfe")
    one_line_error(run("report", out), 2, "config.json: not UTF-8")


def test_checkpoint_options_that_differ_are_refused(tmp_path):
    from oversmooth import train as T

    T.train(
        T.TrainConfig(model=ModelConfig("preln", depth=2, hidden=8, heads=2), epochs=1),
        tmp_path / "run",
    )
    best = tmp_path / "run" / "best.pt"
    out = tmp_path / "a"
    analyze = ("analyze", "--checkpoint", best, "--out", out, "-q")
    line = one_line_error(run(*analyze, "--hidden", 32), 2)
    assert "hidden=8" in line and "--hidden 32" in line and "drop --hidden" in line
    for option, value in (("--heads", 4), ("--seeds", 5), ("--norm", "graph"), ("--ffn", 3)):
        line = one_line_error(run(*analyze, option, value), 2)
        assert f"drop {option}" in line
    prune = ("prune", "--checkpoint", best, "--prune-layers", 1, "-o", out)
    line = one_line_error(run(*prune, "--hidden", 16), 2)
    assert "drop --hidden" in line
    # the checkpoint's own values are accepted
    assert run("analyze", "--checkpoint", best, "--hidden", 8, "--out", out, "-q").exit_code == 0


def test_pt_with_integer_features_is_converted_with_a_note(tmp_path):
    path = tmp_path / "g.pt"
    x, edge_index = torch.tensor([[1, 0], [0, 2], [3, 1]]), torch.tensor([[0, 1], [1, 2]])
    torch.save({"x": x, "edge_index": edge_index}, path)
    result = run("datasets", "--stats", path)
    assert result.exit_code == 0, result.output
    assert "note: " in result.output and "converted to float32" in result.output


# ----------------------------------------------------------------------------- exclusive outputs

_SLOW_ANALYZE = textwrap.dedent(
    """
    import os, sys, time
    import oversmooth.analysis as analysis
    from oversmooth.cli.main import app

    real = analysis.run_analysis
    release = os.environ.get("RELEASE")
    def slow(*args, **kwargs):  # hold the claim until the other run has collided
        print("running", flush=True)
        deadline = time.monotonic() + 60  # a run that never collides fails, not hangs
        while release and not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.01)
        return real(*args, **kwargs)
    analysis.run_analysis = slow
    app(sys.argv[1:], prog_name="oversmooth")
    """
)


def _cli_process(*args: str, code: str = _SLOW_ANALYZE, release: str = "") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RELEASE": release},
    )


def test_two_concurrent_runs_into_one_folder(tmp_path):
    # with --overwrite both used to run to the end and replace each other's report
    out = tmp_path / "same"
    release = tmp_path.parent / f"{tmp_path.name}-release"  # tmp_path's listing is checked
    args = ("analyze", *FAST, "--out", str(out), "--overwrite")
    procs = [_cli_process(*args, release=str(release)) for _ in range(2)]
    try:
        # the run that claimed the folder waits in its analysis until the other is refused
        deadline = time.monotonic() + 300
        while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.01)
        release.touch()
        results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
    finally:
        for p in procs:  # a hung child is not left behind
            if p.poll() is None:
                p.kill()
                p.wait()
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    loser_stdout, loser = next((out, err) for code, out, err in results if code == 2)
    assert "running" not in loser_stdout  # refused at its first check, before any work
    errors = [line for line in loser.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(out) in errors[0] and "Traceback" not in loser
    winner = next(stdout for code, stdout, _ in results if code == 0)
    assert f"report: {out / 'report.html'}" in winner
    assert {"metrics.csv", "fits.json", "config.json", "report.md", "report.html"} <= {
        p.name for p in out.iterdir()
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same"]  # no lock or temp left


def test_claimed_folder_is_refused_before_any_work(tmp_path, monkeypatch):
    import oversmooth.analysis as analysis

    out = tmp_path / "r"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nfrom oversmooth.outputs import claim_folder\n"
            f"with claim_folder({str(out)!r}, False):\n"
            "    print('held', flush=True)\n    time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    calls = []
    monkeypatch.setattr(analysis, "run_analysis", lambda *a, **k: calls.append(1))
    try:
        assert holder.stdout.readline().strip() == "held"
        compare = ["compare", "--datasets", "karate", "--depths", "2", "-q"]
        for args in (["analyze", *FAST], compare):
            line = one_line_error(run(*args, "--out", out, "--overwrite"), 2, str(out))
            assert f"another oversmooth run (pid {holder.pid})" in line
        one_line_error(run("bench", "--quick", "--out", out, "--overwrite"), 2, str(out))
    finally:
        holder.kill()
        holder.wait()
    assert calls == []


def test_bench_refuses_an_existing_folder_without_overwrite(tmp_path, monkeypatch):
    import oversmooth.experiments.bench as bench

    calls = []
    monkeypatch.setattr(bench, "probe_overhead", lambda *a, **k: calls.append(1))
    (tmp_path / "b").mkdir()
    one_line_error(run("bench", "--quick", "--out", tmp_path / "b"), 2, "pass --overwrite")
    assert calls == []


def test_killed_write_leaves_nothing_after_the_next_run(tmp_path):
    out = tmp_path / "r"
    killed_during_write = textwrap.dedent(
        """
        import sys, time
        import oversmooth.report.render as render
        from oversmooth.cli.main import app

        def hang(folder, **options):
            print("writing", flush=True)
            time.sleep(120)
        render.render_report = hang
        app(sys.argv[1:], prog_name="oversmooth")
        """
    )
    proc = _cli_process("analyze", *FAST, "--out", str(out), code=killed_during_write)
    try:
        assert proc.stdout.readline().strip() == "writing"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    litter = sorted(p.name for p in tmp_path.iterdir())
    assert litter == [".r.lock", f".r.tmp-{proc.pid}"]  # what SIGKILL leaves
    result = run("analyze", *FAST, "--out", out)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]
    assert (out / "report.html").is_file()


def test_failed_run_leaves_no_empty_parent_folders(tmp_path, monkeypatch):
    import oversmooth.analysis as analysis

    out = tmp_path / "a" / "b" / "c"
    real = analysis.run_analysis

    def fails(*args, **kwargs):
        assert (tmp_path / "a" / "b").is_dir()  # made at the claim, for the lock
        raise ValueError("simulated bad input found late")

    monkeypatch.setattr(analysis, "run_analysis", fails)
    one_line_error(run("analyze", *FAST, "--out", out), 2, "simulated")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(analysis, "run_analysis", real)
    assert run("analyze", *FAST, "--out", out).exit_code == 0
    assert (out / "report.md").is_file()


_COMMANDS = {
    "analyze": ["analyze", *FAST],
    "compare": ["compare", "--datasets", "karate", "--depths", "2", "-q"],
    "train": ["train", "--dataset", "karate", "--depth", "2", "--epochs", "1", "-q"],
    "sweep": ["sweep", "--datasets", "karate", "--depths", "2", "-q"],
}


@pytest.mark.parametrize("command", sorted(_COMMANDS))
@pytest.mark.parametrize(
    "out, says",
    [
        ("", "empty"),
        (".", "the current folder"),
        ("..", "a parent of the current folder"),
        ("x" * 300, "300 bytes long"),  # was exit 1 (ENAMETOOLONG after the work)
        ("{dangling}", "does not exist"),
    ],
)
def test_unusable_out_is_refused_before_any_work(tmp_path, monkeypatch, command, out, says):
    import oversmooth.analysis as analysis
    import oversmooth.data as data

    calls = []
    for module, name in ((analysis, "run_analysis"), (analysis, "run_comparison"), (data, "load")):
        monkeypatch.setattr(module, name, lambda *a, **k: calls.append(1))
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "gone", tmp_path / "link")
    monkeypatch.chdir(tmp_path / "sub")
    out = out.replace("{dangling}", str(tmp_path / "link"))
    overwrite = [] if command == "sweep" else ["--overwrite"]  # a sweep resumes instead
    line = one_line_error(run(*_COMMANDS[command], "--out", out, *overwrite), 2)
    assert "out" in line and (says in line or (command == "sweep" and out == "")), line
    assert calls == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "sub"]
    assert list((tmp_path / "sub").iterdir()) == []


def test_a_full_disk_is_said_with_the_folder_the_user_named():
    """ "OSError: [Errno 28] No space left on device" named no file; train's first save said
    "the previous checkpoint is kept ... rerun with --resume" of a hidden temporary path, and
    --resume then found nothing (a fault-injection audit)."""
    import errno
    from pathlib import Path

    from oversmooth.checkpoint import _write_error
    from oversmooth.cli._common import _disk_full

    full = OSError(errno.ENOSPC, "No space left on device", "/data/.an.tmp-55/metrics.csv")
    said = _disk_full(full)
    assert said.startswith("no space left on the device writing /data/an/metrics.csv; free")
    assert _disk_full(OSError(errno.EACCES, "denied")) == ""
    first = _write_error(Path("/data/.t.tmp-9/last.pt"), OSError(errno.ENOSPC, "No space"))
    assert str(first).startswith("/data/t: its first checkpoint could not be written")
    assert "nothing was saved" in str(first) and "--resume" not in str(first)
    later = _write_error(Path("/data/t/last.pt"), OSError(errno.ENOSPC, "No space"))
    assert "the previous checkpoint is kept" in str(later) and "--resume" in str(later)
    assert _disk_full(first) == ""  # its own line stands


def test_an_os_error_names_the_path_the_user_knows():
    """ "[Errno 1] Operation not permitted: '.../cells/.preln-...json.tmp-8304'" named a hidden
    temporary file (a fault-injection audit)."""
    import errno

    from oversmooth.cli._common import _os_error_text

    denied = PermissionError(errno.EPERM, "Operation not permitted", "/s/cells/.c.json.tmp-84")
    assert _os_error_text(denied) == "/s/cells/c.json: Operation not permitted"
    moved = OSError(errno.EISDIR, "Is a directory")
    moved.filename, moved.filename2 = "/s/.a.tmp-3/x", "/s/b"
    assert _os_error_text(moved) == "/s/a/x -> /s/b: Is a directory"
    assert _os_error_text(ValueError("x")) == "" and _os_error_text(OSError("plain")) == ""


def test_report_refuses_a_configuration_value_of_the_wrong_type(tmp_path):
    """A hand-edited depth "x" was drawn into the title and the rerun command, exit 0."""
    out = tmp_path / "r"
    assert run("analyze", *FAST, "--out", out).exit_code == 0
    config = json.loads((out / "config.json").read_text())
    config["model"]["depth"] = "x"
    (out / "config.json").write_text(json.dumps(config))
    one_line_error(run("report", out), 2, "config.json: model.depth is 'x', expected a whole")
    config["model"]["depth"], config["seeds"] = 4, "abc"
    (out / "config.json").write_text(json.dumps(config))
    one_line_error(run("report", out), 2, "config.json: seeds is 'abc', expected a list of whole")


def test_an_os_error_path_is_said_as_it_is(capsys):
    """A bare file named "depth" read as the option --depth; bytes names printed as b'...';
    a file descriptor as a path (a regression audit)."""
    import errno

    import typer

    from oversmooth.cli._common import _os_error_text, handle_errors

    @handle_errors
    def denied(name):
        raise PermissionError(errno.EACCES, "Permission denied", name)

    for name, said in [("depth", "error: depth: Permission denied"), (b"/a/.o.tmp-2/m", "/a/o/m")]:
        with pytest.raises(typer.Exit) as stop:
            denied(name)
        assert stop.value.exit_code == 2
        assert said in capsys.readouterr().err
    fd = PermissionError(errno.EACCES, "Permission denied")
    fd.filename = 3
    assert _os_error_text(fd) == ""
    assert _os_error_text(PermissionError(errno.EACCES, "x", b"/a/.o.tmp-2/m")) == "/a/o/m: x"


def test_seeds_up_to_what_torch_takes(tmp_path):
    from oversmooth import data as D

    assert D.load(f"csbm:n=50,degree=4,seed={2**32 - 1}").num_nodes == 50


def test_seeds_that_torch_would_draw_alike_are_refused():
    """torch's CPU generator keeps 32 bits of a seed: seeds 0 and 2**32 drew the same weights
    and were pooled as two replicates, "0.00379 +- 0" over 2 seeds (an audit)."""
    import torch

    from oversmooth import data as D
    from oversmooth.config import ModelConfig
    from oversmooth.experiments.sweep import SweepSpec
    from oversmooth.run_configs import AnalysisConfig

    torch.manual_seed(2**32)
    aliased = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(aliased, torch.rand(1))  # why: the premise of the limit
    why = r"\[0, 2\*\*32 - 1\] \(torch's CPU generator keeps 32 bits of a seed\)"
    with pytest.raises(ValueError, match=why):
        AnalysisConfig(seeds=(0, 2**32))
    with pytest.raises(ValueError, match=why):
        ModelConfig("postln", depth=2, seed=2**32)
    with pytest.raises(ValueError, match=why):
        SweepSpec(seeds=(0, 2**32))
    with pytest.raises(ValueError, match=why):
        D.load(f"csbm:n=50,degree=4,seed={2**32}")
    from oversmooth import Probe

    with pytest.raises(ValueError, match="sample_seed: expected an integer in " + why):
        Probe(None, torch.tensor([[0, 1], [1, 0]]), sample_seed=2**32)


def test_a_batch_of_graphs_takes_every_seed_in_range():
    """Graph g of a batch draws with seed * 100_003 + g: seed=50000 was refused for a derived
    seed of 5000150000 it never passed (a review); kept to 32 bits, as torch keeps it."""
    from oversmooth import data as D

    batch = D.load(f"csbm-batch:graphs=2,n=20,degree=4,seed={2**32 - 1}")
    first = D.csbm(20, degree=4, seed=((2**32 - 1) * 100_003) % 2**32)
    assert torch.equal(batch.x[:20], first.x)
    assert D.load("csbm-batch:graphs=2,n=20,degree=4,seed=50000").num_nodes == 40


def test_a_checkpoint_written_with_a_seed_above_32_bits_still_loads(tmp_path):
    """Seeds up to 2**64 - 1 were taken before; torch drew from their low 32 bits, so such a
    checkpoint's model is that seed's draw (it failed as "its model config is invalid")."""
    from oversmooth.checkpoint import load_checkpoint, save_checkpoint
    from oversmooth.config import ModelConfig
    from oversmooth.nn.model import model_from_config

    model = model_from_config(ModelConfig("postln", depth=2, in_channels=4, out_channels=2, seed=5))
    path = tmp_path / "old.pt"
    save_checkpoint(path, model, {"dataset": "karate"})
    saved = torch.load(path, weights_only=True)
    saved["model_config"]["seed"] = 2**32 + 5  # what an earlier release wrote
    torch.save(saved, path)
    loaded, _ = load_checkpoint(path)
    assert loaded.config.seed == 5
    pairs = zip(loaded.parameters(), model.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)


@pytest.mark.parametrize(
    "args, said",
    [
        # a dangling value: click said "Got unexpected extra argument(s) (<the path>)"
        (["compare", "--depths", "4", "--models", "--out", "x"], "--models took '--out'"),
        # a type error: click said "unable to parse string as an integer"
        (["analyze", "--depth", "--seeds", "1"], "--depth took '--seeds'"),
        # it parses: the run went into a folder named "--overwrite"
        (["analyze", "--out", "--overwrite", *FAST], "--out took '--overwrite'"),
        (["analyze", "--out", "-L", "2"], "--out took '-L'"),
    ],
)
def test_an_option_given_no_value_that_took_the_next_option_is_said(tmp_path, args, said):
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        line = one_line_error(run(*args), 2, said)
    finally:
        os.chdir(old)
    assert line.split(" (see ")[0].endswith(f"expected a value after {said.split()[0]}")
    assert not any(tmp_path.iterdir())  # nothing written, no folder named "--overwrite"


@pytest.mark.parametrize(
    "args, said, instead",
    [
        # seed 1 alone ran, and the report said "with seed 1"
        (["analyze", "--seeds", "0", "--seeds", "1"], "--seeds was given twice (0 and 1)", "0,1"),
        # no SVG was written
        (
            ["analyze", "--figure-format=svg", "--figure-format", "pdf"],
            "--figure-format was given twice (svg and pdf)",
            "svg,pdf",
        ),
        # a short spelling and the long one are one option
        (
            ["compare", "-m", "preln", "--models", "postln", "-m", "plain"],
            "--models was given 3 times",
            "preln,postln,plain",
        ),
    ],
)
def test_a_list_option_given_twice_is_refused_not_cut_to_its_last(tmp_path, args, said, instead):
    """Click keeps the last value of a repeated option: a list given in two halves lost its
    first half, unsaid.  A one-value option keeps its last (a shell alias, then one's own)."""
    line = one_line_error(run(*args, "--out", tmp_path / "r"), 2, said)
    flag = said.split()[0]
    assert line.split(" (see ")[0].endswith(f"expected one comma-separated list: {flag} {instead}")
    assert not (tmp_path / "r").exists()


def test_a_one_value_option_given_twice_keeps_its_last(tmp_path):
    """-m is analyze's --model (one value) and compare's --models (a list)."""
    args = ["-m", "preln", "-m", "postln", "--depth", "3", "--seeds", "0"]
    result = run("analyze", *FAST, *args, "--out", tmp_path / "d")
    assert result.exit_code == 0 and "Post-LN SAN, 3 layers" in result.output


def test_features_beyond_the_models_precision_are_refused_before_any_work(tmp_path):
    """float64 features of 1e39 passed validation, and a float32 model overflowed at its input:
    NaN from layer 0, an 'inconclusive' report and exit 0 (an audit).  Refused in one line,
    before any folder is made."""
    import torch
    from torch_geometric.data import Data

    edges = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    x = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 1e39
    torch.save(Data(x=x, edge_index=edges), tmp_path / "big.pt")
    argv = ["analyze", "--dataset", str(tmp_path / "big.pt"), "--depth", "2", "-q"]
    result = CliRunner().invoke(app, [*argv, "--dtype", "float32", "--out", str(tmp_path / "a")])
    assert result.exit_code == 2 and not (tmp_path / "a").exists()
    assert "beyond the float32 range (3.4e+38)" in result.output
    assert "--dtype float64" in result.output


def test_features_below_the_models_precision_and_every_dataset_of_a_compare_are_checked_first():
    """Features of 1e-50 round to 0 in float32 (the verdict blamed an edgeless graph); compare
    ran every model of its first dataset before refusing the second; and a float32 maximum
    itself is taken (a review)."""
    import torch

    from oversmooth.analysis import check_feature_range

    with pytest.raises(ValueError, match="below the smallest float32 value"):
        check_feature_range("x", torch.full((3, 2), 1e-50, dtype=torch.float64), "float32")
    check_feature_range("x", torch.full((3, 2), torch.finfo(torch.float32).max).double(), "float32")
    check_feature_range("x", torch.full((3, 2), 1e-50, dtype=torch.float64), "float64")
    check_feature_range("x", torch.zeros(3, 2, dtype=torch.float64), "float32")  # all 0: taken


def test_compare_refuses_a_later_dataset_before_any_model_runs(tmp_path, monkeypatch):
    import torch
    from torch_geometric.data import Data

    import oversmooth.analysis as analysis

    edges = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    x = torch.tensor([[1e39, 1.0], [2.0, 3.0], [4.0, 5.0]], dtype=torch.float64)
    torch.save(Data(x=x, edge_index=edges), tmp_path / "big.pt")
    ran = []
    monkeypatch.setattr(analysis, "input_graph", lambda *a: ran.append(a))
    argv = ["compare", "--datasets", f"karate,{tmp_path / 'big.pt'}", "--depths", "2"]
    result = CliRunner().invoke(app, [*argv, "--dtype", "float32", "--out", str(tmp_path / "c")])
    assert result.exit_code == 2 and "beyond the float32 range" in result.output
    assert not ran and not (tmp_path / "c").exists()


def test_train_refuses_features_its_precision_cannot_hold(tmp_path):
    """It trained into a NaN loss at epoch 0 and said to lower --lr (a review)."""
    import torch
    from torch_geometric.data import Data

    edges = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    x = torch.tensor([[1e39, 1.0], [2.0, 3.0], [4.0, 5.0]], dtype=torch.float64)
    torch.save(Data(x=x, edge_index=edges, y=torch.tensor([0, 1, 0])), tmp_path / "big.pt")
    argv = ["train", "--dataset", str(tmp_path / "big.pt"), "--depth", "2", "--epochs", "1"]
    result = CliRunner().invoke(app, [*argv, "--dtype", "float32", "--out", str(tmp_path / "t")])
    assert result.exit_code == 2 and "beyond the float32 range" in result.output, result.output
    assert not (tmp_path / "t").exists()


def test_report_on_a_sweeps_folder_names_its_reports(tmp_path):
    """An audit: `report SWEEP` said "config.json: missing; expected a folder from analyze,
    ..." instead of naming the sweep's report-* folders."""
    from oversmooth.outputs import write_marker

    sweep = tmp_path / "sw"
    (sweep / "cells").mkdir(parents=True)
    write_marker(sweep, "sweep")
    one_line_error(run("report", sweep), 2, "a sweep's folder, which has no report of its own")
    report = sweep / "report-san-init"
    report.mkdir()
    (report / "config.json").write_text("{}", encoding="utf-8")
    line = one_line_error(run("report", sweep), 2, "its reports are in")
    assert str(report) in line and "pass one of them" in line


def test_a_grid_commands_errors_name_its_plural_options(tmp_path):
    """An audit: compare said "--conv: ..." (an option it does not have) and "dataset: ..."
    for its --convs and --datasets; analyze names its own --dataset."""
    out = tmp_path / "c"
    line = one_line_error(run("compare", "--models", "diffusion", "--convs", "esa", "-o", out), 2)
    assert line.startswith("error: --convs: the diffusion model")
    line = one_line_error(run("compare", "-d", "karate,nosuch", "-o", out), 2)
    assert line.startswith("error: --datasets: unknown name 'nosuch'")
    line = one_line_error(run("analyze", "-d", "nosuch", "-o", out), 2)
    assert line.startswith("error: --dataset: unknown name 'nosuch'")
    line = one_line_error(run("datasets", "--stats", "nosuch"), 2)  # (a review)
    assert line.startswith("error: --stats: unknown name 'nosuch'")
