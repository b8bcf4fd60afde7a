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


# the names Probe(metrics=...) accepted before the registry; energy_<m> for any order
ACCEPTED = [
    "laplacian_energy",
    "laplacian_energy_degree",
    "dirichlet_energy",
    "feature_norm",
    "rusch_dirichlet_energy",
    "mean_average_distance",
    "mean_average_distance_global",
    "effective_rank",
    "relative_energy",
    "mean_cosine_similarity",
    "energy_1",
    "energy_5",
]


def test_every_listed_metric_is_accepted_by_the_probe():
    import pytest
    import torch

    from oversmooth import Probe, build_model
    from oversmooth.probe import check_metrics

    listed = runner.invoke(app, ["metrics", "--names"]).output.split()
    described = json.loads(runner.invoke(app, ["metrics", "--json"]).output)
    assert [m["name"] for m in described["per_layer"]] == listed
    assert json.loads(runner.invoke(app, ["metrics", "--names", "--json"]).output) == listed
    names = [name.replace("<m>", "3") for name in listed]  # energy_<m>: any order
    assert check_metrics(names) == names
    model = build_model("preln", depth=2, in_channels=3, out_channels=2, hidden=8, heads=2)
    edge_index = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    with Probe(model, edge_index, metrics=names) as probe:
        model(torch.randn(4, 3), edge_index)
    assert set(names) <= set(probe.to_frame().columns)
    # measures that are not per-layer columns are listed apart, and refused by --metrics
    others = [m["name"] for m in described["not_per_layer"]]
    assert "layer_similarity" in others and not set(others) & set(listed)
    for name in others:
        with pytest.raises(ValueError, match=f"received '{name}'"):
            check_metrics([name])
    defaults = [m["name"] for m in described["per_layer"] if m["default"]]
    assert defaults == [
        "laplacian_energy",
        "dirichlet_energy",
        "relative_energy",
        "mean_cosine_similarity",
        "feature_norm",
    ]


def test_every_accepted_metric_is_listed():
    from oversmooth.probe import check_metrics

    listed = runner.invoke(app, ["metrics", "--names"]).output.split()
    full = runner.invoke(app, ["metrics"]).output
    assert check_metrics(ACCEPTED) == ACCEPTED
    for name in ACCEPTED:
        shown = "energy_<m>" if name.startswith("energy_") else name
        assert shown in listed and shown in full, name


def test_datasets_listing():
    result = runner.invoke(app, ["datasets"])
    assert result.exit_code == 0
    for name in ("cora", "citeseer", "pubmed", "csbm", "karate"):
        assert name in result.output


def test_datasets_stats_cora_and_citeseer():
    result = runner.invoke(app, ["datasets", "--stats", "cora", "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    assert (stats["nodes"], stats["edges"], stats["features"], stats["classes"]) == (
        2708,
        5278,
        1433,
        7,
    )
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
