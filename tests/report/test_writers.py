"""The train report has what every command's report has: a title naming its command, the
settings as the run used them (no ``None`` beside the number used), Reproduce with a command
that reruns the same configuration, Environment, accuracies in percent; and the command says
where the report is."""

from __future__ import annotations

import json
import re
import shlex

from typer.testing import CliRunner

from oversmooth.cli.main import app
from oversmooth.report.writers import training_settings

runner = CliRunner()


def test_train_report_is_complete_and_its_command_reruns_it(tmp_path):
    out = tmp_path / "run"
    options = ["--model", "postln", "--depth", "2", "--epochs", "3", "--lr", "0.003"]
    result = runner.invoke(app, ["train", *options, "--patience", "5", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"report: {out / 'report.html'}" in result.output.splitlines()
    md = (out / "report.md").read_text()
    assert md.startswith("# oversmooth train: postln SAN, depth 2, cora\n")
    for section in ("Result", "Training curves", "Configuration", "Reproduce", "Environment"):
        assert f"\n## {section}\n" in md, section
    assert "None" not in md and "| lr | 0.003 |" in md
    assert "| warmup | 1 (default) |" in md  # Post-LN: a tenth of the epochs, at least one
    assert "| patience | 5 |" in md and re.search(r"\| train \| \d+\.\d\d% \|", md)
    assert "| git_commit |" in md and "| time: training |" in md
    command = re.search(r"```console\n(.*)\n```", md).group(1)
    assert command == "oversmooth train --model postln --depth 2 --epochs 3 --lr 0.003 --patience 5"
    again = tmp_path / "again"
    rerun = runner.invoke(app, [*shlex.split(command)[1:], "--out", str(again), "--quiet"])
    assert rerun.exit_code == 0, rerun.output

    def settings(folder):
        config = json.loads((folder / "config.json").read_text())
        # the digests of its files: summary.json holds the run's own seconds
        return {k: v for k, v in config.items() if k not in ("environment", "digests")}

    assert settings(again) == settings(out)


def test_settings_show_what_a_default_resolved_to():
    config = {
        "command": "train",
        "model": "nonlocal",
        "lr": None,
        "learning_rate": 1e-4,
        "patience": None,
        "probe_every": 0,
        "probe_interval": 0,
        "device": "auto",
        "device_resolved": "cpu",
        "environment": {"torch": "2"},
    }
    table = dict(zip(*training_settings(config).to_dict(orient="list").values(), strict=True))
    assert table == {
        "model": "nonlocal",
        "lr": "0.0001 (default)",
        "patience": "off (no early stopping)",
        "probe_every": "0 (off: no dynamics.csv)",
        "device": "auto (cpu)",
    }
    # a run written before ffn_channels was recorded: its default FFN, not "—" (no FFN)
    old = {"model.hidden": 32, "model.ffn": None}
    table = dict(zip(*training_settings(old).to_dict(orient="list").values(), strict=True))
    assert table["model.ffn"] == "64 = 2 x hidden (default)"


def test_report_rebuilds_a_training_run_from_its_files(tmp_path):
    """`oversmooth report RUN` redraws a finished training run (training.png, dynamics.png,
    report.md/html) from history.csv, summary.json and dynamics.csv; an unfinished run or a
    damaged history is refused in one line that names the file."""
    out = tmp_path / "run"
    result = runner.invoke(
        app, ["train", "--model", "preln", "--depth", "2", "--epochs", "3", "--out", str(out), "-q"]
    )
    assert result.exit_code == 0, result.output
    md = (out / "report.md").read_text()
    for name in ("training.png", "dynamics.png", "report.html", "report.md"):
        (out / name).unlink()
    result = runner.invoke(app, ["report", str(out), "--figure-format", "svg"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"report: {out / 'report.html'}"
    assert (out / "report.md").read_text() == md
    for name in ("training.png", "training.svg", "dynamics.png", "dynamics.svg", "report.html"):
        assert (out / name).is_file(), name

    history = (out / "history.csv").read_text()
    (out / "history.csv").write_text(history.replace("val_loss", "vl", 1))
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code != 0
    assert "history.csv: no column val_loss; rerun the command that wrote it" in result.output
    (out / "history.csv").write_text(history)
    (out / "summary.json").unlink()
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code != 0
    assert "summary.json: missing; the run has not finished" in result.output
