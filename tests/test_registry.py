"""One registry per kind of name, one probed forward (probe_run), one progress signature, and
a CLI whose choices and defaults come from them."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from oversmooth.analysis import AnalysisConfig, ComparisonConfig, probe_run, run_analysis
from oversmooth.cli.main import app
from oversmooth.nn import ModelConfig, build_model
from oversmooth.registry import CONVS, MODELS, NORMS, ModelEntry, display_name
from oversmooth.experiments.sweep import SweepSpec
from oversmooth.train import TrainConfig

runner = CliRunner()


@pytest.fixture
def fake_model():
    """A sixth architecture, registered for one test and removed afterwards."""
    MODELS.add("fake-preln", ModelEntry("preln", False, "Fake-LN", True, "a test entry"))
    try:
        yield "fake-preln"
    finally:
        MODELS.remove("fake-preln")
    assert "fake-preln" not in MODELS


def test_adding_a_model_is_one_entry(fake_model):
    config = ModelConfig(name=fake_model, depth=3)
    assert config.name == fake_model
    model = build_model(fake_model, depth=3, in_channels=4, out_channels=2)
    assert len(model.blocks) == 3
    assert display_name(fake_model) == "Fake-LN"
    assert (
        TrainConfig(model=ModelConfig(fake_model, depth=64)).learning_rate == 1e-4
    )  # post_ln flag of the entry
    listed = runner.invoke(app, ["models"])
    assert listed.exit_code == 0, listed.output
    assert re.search(r"^  fake-preln +a test entry$", listed.stdout, re.M)
    as_json = runner.invoke(app, ["models", "--json"])
    assert '"fake-preln": "a test entry"' in as_json.stdout


@pytest.mark.parametrize(
    "make,kind,registry",
    [
        (lambda v: ModelConfig(name=v), "model", MODELS),
        (lambda v: ModelConfig(name="preln", conv=v), "conv", CONVS),
        (lambda v: ModelConfig(name="preln", norm=v), "norm", NORMS),
        (lambda v: TrainConfig(model=ModelConfig(v, depth=64)), "model", MODELS),
        (lambda v: ComparisonConfig(models=("preln", v)), "models", MODELS),
        (lambda v: SweepSpec(models=(v,)), "models", MODELS),
        (lambda v: SweepSpec(convs=(v,)), "convs", CONVS),
    ],
)
def test_every_unknown_name_is_refused_in_the_same_words(make, kind, registry):
    expected = f"{kind}: expected one of {', '.join(registry)}, received 'bogus'"
    with pytest.raises(ValueError) as caught:
        make("bogus")
    assert str(caught.value) == expected


def test_cli_choices_are_the_registries():
    for option, registry in (("--model", MODELS), ("--conv", CONVS), ("--norm", NORMS)):
        text = runner.invoke(app, ["analyze", "--help"], env={"COLUMNS": "200"}).stdout
        assert f"{option} <{'|'.join(registry)}>" in text
    # (descriptions wrap to the terminal: compared with the whitespace folded)
    listed = " ".join(runner.invoke(app, ["models"]).stdout.split())
    for registry in (MODELS, CONVS, NORMS):
        for name, entry in registry.items():
            assert " ".join(f"{name} {entry.help}".split()) in listed


def test_hidden_not_a_multiple_of_heads_is_refused_by_the_model_config_everywhere():
    for make in (
        lambda: AnalysisConfig(
            model=ModelConfig("postln", hidden=30, heads=4, depth=256, dtype="float64")
        ),
        lambda: TrainConfig(model=ModelConfig("nonlocal", hidden=30, heads=4, depth=64)),
        lambda: ComparisonConfig(model=ModelConfig(hidden=30, heads=4, dtype="float64")),
        lambda: SweepSpec(model=ModelConfig(hidden=30, heads=4, dtype="float64")),
    ):
        with pytest.raises(ValueError, match=r"^hidden: expected a multiple of heads=4, "):
            make()


def _help_defaults(command: str) -> dict[str, str]:
    """option -> the text of its ``[default: ...]`` as ``command --help`` prints it."""
    import typer

    found = {}
    for param in typer.main.get_command(app).commands[command].params:
        match = re.search(r"\[default: (.*?)(?:, or [^\]]*)?\]", getattr(param, "help", "") or "")
        if match:
            found[param.opts[0] if param.opts[0].startswith("--") else param.opts[-1]] = match[1]
    text = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80"}).stdout
    flat = "".join(text.split())
    for value in found.values():
        assert "".join(value.split()) in flat
    return found


@pytest.mark.parametrize(
    "command,config,own",
    [
        ("analyze", AnalysisConfig(), {}),
        ("prune", AnalysisConfig(), {"model.name": "preln", "similarity": False}),
        ("compare", ComparisonConfig(), {}),
        ("train", TrainConfig(), {}),
        ("sweep", SweepSpec(), {}),
    ],
)
def test_help_defaults_are_the_config_defaults(command, config, own):
    """Every option's shown default is the value the command really runs with (read from a
    constructed default config, not from the table the help is made of)."""
    from oversmooth.config import options_of, value_at

    shown = _help_defaults(command)
    checked = 0
    for field, entry in options_of(type(config)):
        value = own.get(field, value_at(config, field))
        if value is None or entry.kind == "extra":  # derived (--lr: the help says how); extras
            continue
        if entry.flag not in shown:  # a required option (prune's --prune-layers): no default
            assert (command, entry.flag) == ("prune", "--prune-layers"), entry.flag
            continue
        if isinstance(value, bool) and entry.off_flag == "--no-" + entry.flag[2:]:
            expect = "on" if value else "off"
        elif isinstance(value, bool):  # --quick/--full
            expect = entry.flag if value else entry.off_flag
        elif isinstance(value, (tuple, list)):
            expect = ",".join(map(str, value)) or "none"
        else:
            expect = str(value)
        assert shown[entry.flag] == expect, f"{command} {entry.flag}"
        checked += 1
    assert checked >= 15, shown


def test_analyze_passes_only_what_the_user_gave(monkeypatch, tmp_path):
    import oversmooth.analysis as analysis

    seen = {}

    def fake(config, progress=None):
        seen["config"] = config
        raise RuntimeError("stop here")

    monkeypatch.setattr(analysis, "run_analysis", fake)
    runner.invoke(app, ["analyze", "--out", str(tmp_path / "a"), "-q"])
    assert seen["config"] == AnalysisConfig()
    runner.invoke(app, ["analyze", "--hidden", "16", "--out", str(tmp_path / "b"), "-q"])
    assert seen["config"] == AnalysisConfig(
        model=ModelConfig("postln", hidden=16, depth=256, dtype="float64")
    )
    runner.invoke(app, ["prune", "--prune-layers", "2", "--out", str(tmp_path / "c"), "-q"])
    assert seen["config"] == AnalysisConfig(
        model=ModelConfig("preln", depth=256, dtype="float64"), similarity=False, prune=(2,)
    )


def test_old_option_spellings_still_work_with_a_note(monkeypatch, tmp_path):
    import oversmooth.analysis as analysis

    seen = {}

    def fake(config, progress=None):
        seen["config"] = config
        raise RuntimeError("stop here")

    monkeypatch.setattr(analysis, "run_analysis", fake)
    result = runner.invoke(app, ["analyze", "--prune", "2,3", "--out", str(tmp_path / "a")])
    assert "note: --prune is deprecated; use --prune-layers" in result.output
    assert seen["config"].prune == (2, 3)
    result = runner.invoke(app, ["prune", "--layers", "4", "--out", str(tmp_path / "b")])
    assert "note: --layers is deprecated; use --prune-layers" in result.output
    assert seen["config"].prune == (4,)
    both = ["analyze", "--prune", "2", "--prune-layers", "2", "--out", str(tmp_path / "c")]
    result = runner.invoke(app, both)
    assert result.exit_code == 2 and "give only --prune-layers" in result.output


def test_progress_advances_per_layer_over_seeds():
    calls = []
    config = AnalysisConfig(
        model=ModelConfig("postln", depth=8, hidden=8, dtype="float64"),
        dataset="karate",
        seeds=(0, 1),
        similarity=False,
        device="cpu",
    )
    run_analysis(config, progress=lambda done, total, what: calls.append((done, total, what)))
    assert [c[0] for c in calls] == list(range(1, 17))
    assert {c[1] for c in calls} == {16}
    assert calls[0][2].startswith("seed 0") and calls[-1][2].startswith("seed 1")


def test_progress_counts_prune_steps_after_the_layers():
    calls = []
    config = AnalysisConfig(
        model=ModelConfig("postln", depth=4, hidden=8, dtype="float64"),
        dataset="karate",
        seeds=(0,),
        similarity=False,
        device="cpu",
        prune=(2,),
    )
    run_analysis(config, progress=lambda done, total, what: calls.append((done, total)))
    assert calls == [(k, 5) for k in range(1, 6)]


def test_probe_run_is_one_probed_forward():
    from oversmooth.data import load

    data = load("karate")
    model = build_model(
        "postln", depth=5, in_channels=data.num_features, out_channels=2, hidden=8, dtype="float64"
    )
    steps = []
    frame = probe_run(
        model, data, similarity=True, progress=lambda d, t, w: steps.append((d, t, w)), what="x"
    )
    assert list(frame["layer"]) == list(range(6))
    assert {"laplacian_energy", "at_floor", "float_floor"} <= set(frame.columns)
    assert frame.attrs["similarity"].shape == (6, 6)
    assert steps == [(k, 5, "x") for k in range(1, 6)]
    again = probe_run(model, data, floor="bound")  # the hooks are gone: nothing is called
    assert len(steps) == 5
    assert (again["laplacian_energy"] == frame["laplacian_energy"]).all()


def test_show_completion_prints_a_bash_script(monkeypatch):
    # typer reads these when it builds the command: no shell detection, the shell is the value
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    monkeypatch.setenv("SHELL", "/bin/bash")
    result = runner.invoke(app, ["--show-completion", "bash"], prog_name="oversmooth")
    assert result.exit_code == 0, result.output
    assert "complete " in result.stdout and "_OVERSMOOTH_COMPLETE=complete_bash" in result.stdout


def test_root_help_offers_completion():
    text = runner.invoke(app, ["--help"], env={"COLUMNS": "80"}).stdout
    assert "--install-completion" in text and "--show-completion" in text


def test_compare_progress_counts_runs_times_layers():
    from oversmooth.analysis import run_comparison

    calls = []
    config = ComparisonConfig(
        model=ModelConfig(hidden=8, dtype="float64"),
        models=("preln", "postln"),
        depths=(2, 3),
        datasets=("karate",),
        seeds=(0,),
        device="cpu",
        floor="bound",
    )
    run_comparison(config, progress=lambda done, total, what: calls.append((done, total)))
    assert [c[0] for c in calls] == list(range(1, 11)) and {c[1] for c in calls} == {10}


def test_old_column_names_are_upgraded_and_new_ones_win():
    import pandas as pd

    from oversmooth.registry import RENAMED_COLUMNS, upgrade_columns

    old = pd.DataFrame({"layer": [0, 1], "cosine_prev": [float("nan"), 0.5], "mad": [0.1, 0.2]})
    new = upgrade_columns(old)
    assert list(new.columns) == ["layer", "mean_cosine_similarity", "mean_average_distance"]
    assert new["mean_cosine_similarity"].iloc[1] == 0.5
    assert upgrade_columns(new) is new  # nothing to rename
    both = old.assign(mean_cosine_similarity=[1.0, 1.0])
    assert upgrade_columns(both)["mean_cosine_similarity"].tolist() == [1.0, 1.0]
    assert set(RENAMED_COLUMNS) == {"cosine_prev", "rusch_dirichlet", "mad", "mad_global"}
