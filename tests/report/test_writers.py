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
        return {k: v for k, v in config.items() if k != "environment"}

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
