"""CLI: oversmooth datasets and the global error handling."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from oversmooth.cli.main import app

runner = CliRunner()


def test_help_lists_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "datasets" in result.output and "metrics" in result.output


def test_metrics_command():
    result = runner.invoke(app, ["metrics", "--names"])
    assert result.exit_code == 0 and "laplacian_energy" in result.output.split()


def test_datasets_listing():
    result = runner.invoke(app, ["datasets"])
    assert result.exit_code == 0
    for name in ("cora", "citeseer", "pubmed", "csbm", "karate"):
        assert name in result.output


def test_datasets_stats_cora_and_citeseer():
    result = runner.invoke(app, ["datasets", "--stats", "cora", "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    assert (stats["nodes"], stats["edges"], stats["features"], stats["classes"]) == (2708, 5278, 1433, 7)
    result = runner.invoke(app, ["datasets", "--stats", "citeseer"])
    assert result.exit_code == 0 and "3327" in result.output and "3703" in result.output


def test_datasets_errors_are_one_line(tmp_path):
    result = runner.invoke(app, ["datasets", "--stats", "nope"])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "Traceback" not in result.output
    assert "unknown name 'nope'" in result.output
    result = runner.invoke(app, ["datasets", "--stats", str(tmp_path / "none.csv")])
    assert result.exit_code == 2 and "no such file" in result.output
    (tmp_path / "bad.csv").write_text("0,1\n2,zz\n")
    result = runner.invoke(app, ["datasets", "--stats", str(tmp_path / "bad.csv")])
    assert result.exit_code == 2 and "bad.csv:2" in result.output
