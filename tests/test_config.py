"""One model config, one option table: every field reachable from the command line, and a
report's Reproduce line that parses back to the configuration it was written from."""

from __future__ import annotations

import dataclasses
import json
import random
import shlex

import pytest
from typer.testing import CliRunner

from oversmooth.cli.main import app
from oversmooth.config import (
    DERIVED,
    DTYPE_NAMES,
    ENCODERS,
    FLOOR_METHODS,
    INITS,
    NONLOCAL_NORMS,
    SPLITS,
    ModelConfig,
    build,
    command_options,
    from_record,
    leaf_fields,
    option,
    options_of,
    upgrade_record,
    with_data_sizes,
)
from oversmooth.experiments.sweep import SweepSpec
from oversmooth.registry import CONVS, MODELS, NORMS
from oversmooth.report.command import reproduce_command
from oversmooth.run_configs import AnalysisConfig, ComparisonConfig, TrainConfig
from .processes import python_words

runner = CliRunner()
MODEL_BUILDING = (AnalysisConfig, ComparisonConfig, TrainConfig, SweepSpec)


# -- random valid configurations ---------------------------------------------------------------


def _model(rng: random.Random, **fixed) -> ModelConfig:
    """A random valid model: every field drawn, the combinations a model refuses avoided."""
    name = fixed.get("name", rng.choice(list(MODELS)))
    node_convs = [c for c in CONVS if CONVS[c].elements != "edges"]
    diffusion_model = MODELS[name].placement == "diffusion"
    conv = fixed.get("conv", rng.choice(node_convs if diffusion_model else list(CONVS)))
    heads = rng.choice((1, 2, 4))
    plain = MODELS[name].placement == "diffusion" or CONVS[conv].elements == "edges"
    fields = dict(
        name=name,
        conv=conv,
        depth=rng.randint(1, 40),
        hidden=heads * rng.randint(1, 8),
        heads=heads,
        seed=rng.randint(0, 9),
        ffn=rng.choice((None, 0, rng.randint(1, 64))),
        dropout=rng.choice((0.0, 0.5, round(rng.random() * 0.9, 3))),
        block_dropout=rng.choice((0.0, round(rng.random() * 0.9, 3))),
        norm=rng.choice(list(NORMS)),
        pattern="M"
        if MODELS[name].placement == "diffusion"
        else "".join(rng.choice("MS") for _ in range(rng.randint(1, 4))),
        dtype=rng.choice(DTYPE_NAMES),
        encoder=rng.choice(ENCODERS),
        init=rng.choice(INITS),
        self_loops=True if plain else rng.random() < 0.5,
        score_scale=rng.random() < 0.5,
        nonlocal_norm=rng.choice(NONLOCAL_NORMS),
    )
    fields.update(fixed)
    return ModelConfig(**fields)


def _seeds(rng: random.Random) -> tuple[int, ...]:
    return tuple(rng.sample(range(20), rng.randint(1, 4)))


def _floor(rng: random.Random, dtype: str) -> str:
    return rng.choice([m for m in FLOOR_METHODS if not (m == "shadow" and dtype == "float64")])


def _where(rng: random.Random) -> dict:
    return {"device": rng.choice(("auto", "cpu")), "data_root": rng.choice((None, "/d a/t"))}


def random_analysis(rng: random.Random) -> AnalysisConfig:
    from oversmooth.probe import DEFAULT_METRICS, METRICS

    seeds = _seeds(rng)
    model = _model(rng, seed=seeds[0])
    edges = CONVS[model.conv].elements == "edges"
    extra = [m for m in METRICS if m not in DEFAULT_METRICS and "<" not in m] + ["energy_3"]
    return AnalysisConfig(
        model=model,
        dataset=rng.choice(("cora", "karate", "ring:n=5", "my graph.pt")),
        seeds=seeds,
        similarity=rng.random() < 0.5,
        prune=() if edges else tuple(rng.sample(range(1, model.depth + 1), k=min(2, model.depth))),
        metrics=(*DEFAULT_METRICS, *rng.sample(extra, rng.randint(0, 3))),
        floor=_floor(rng, model.dtype),
        **_where(rng),
    )


def random_comparison(rng: random.Random) -> ComparisonConfig:
    models = tuple(rng.sample(list(MODELS), rng.randint(1, 3)))
    # the diffusion model refuses an edge-set conv
    usable = [
        c
        for c in CONVS
        if not (
            CONVS[c].elements == "edges" and any(MODELS[m].placement == "diffusion" for m in models)
        )
    ]
    convs = tuple(rng.sample(usable, rng.randint(1, 2)))
    depths = tuple(sorted(rng.sample(range(1, 40), rng.randint(1, 3))))
    seeds = _seeds(rng)
    diffusion = any(MODELS[m].placement == "diffusion" for m in models)
    edges = any(CONVS[c].elements == "edges" for c in convs)
    fixed = {"name": models[0], "conv": convs[0], "depth": depths[0], "seed": seeds[0]}
    fixed.update({"pattern": "M"} if diffusion else {})
    fixed.update({"self_loops": True} if diffusion or edges else {})
    model = _model(rng, **fixed)
    return ComparisonConfig(
        models=models,
        convs=convs,
        depths=depths,
        datasets=tuple(rng.sample(("cora", "karate", "citeseer"), rng.randint(1, 2))),
        seeds=seeds,
        model=model,
        floor=_floor(rng, model.dtype),
        **_where(rng),
    )


def random_train(rng: random.Random) -> TrainConfig:
    return TrainConfig(
        model=_model(rng),
        dataset=rng.choice(("cora", "karate")),
        epochs=rng.randint(1, 9000),
        lr=rng.choice((None, 1e-5, round(rng.random() * 0.01, 6) or 1e-3)),
        warmup=rng.choice((None, rng.randint(0, 50))),
        weight_decay=rng.choice((5e-4, 0.0, 0.01)),
        split=rng.choice(SPLITS),
        patience=rng.choice((None, rng.randint(1, 50))),
        deterministic=rng.random() < 0.5,
        probe_every=rng.choice((None, rng.randint(0, 20))),
        **_where(rng),
    )


def random_sweep(rng: random.Random) -> SweepSpec:
    grid = random_comparison(rng)
    backend = rng.choice(("local", "ray"))  # a Ray address only with the Ray backend
    return SweepSpec(
        models=grid.models,
        convs=grid.convs,
        depths=grid.depths,
        datasets=grid.datasets,
        seeds=grid.seeds,
        modes=tuple(rng.sample(("init", "trained"), rng.randint(1, 2))),
        model=grid.model,
        epochs=rng.randint(1, 500),
        backend=backend,
        workers=rng.choice((None, rng.randint(1, 8))),
        ray_address=rng.choice((None, "auto")) if backend == "ray" else None,
        out=rng.choice(("reports/sweep", "runs/a b")),
        **_where(rng),
    )


class _Stop(Exception):
    pass


def _captured(monkeypatch, module: str, name: str, args: list[str]):
    """The config the command line ``args`` builds: the library function it calls is stopped."""
    import importlib

    seen = {}

    def capture(config, *args, **kwargs):
        seen["config"] = config
        raise _Stop

    monkeypatch.setattr(importlib.import_module(module), name, capture)
    result = runner.invoke(app, args)
    assert "config" in seen, result.output
    return seen["config"]


# -- the Reproduce line ------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(25))
def test_random_analysis_reproduce_line_parses_back_to_the_same_config(monkeypatch, seed):
    rng = random.Random(seed)
    config = random_analysis(rng)
    command = rng.choice(("analyze", "prune")) if config.prune else "analyze"
    record = json.loads(json.dumps({"command": command, **config.to_dict()}))  # as on disk
    line = reproduce_command(record)
    args = shlex.split(line)[1:] + ["--quiet", "--out", "/nonexistent-dir/x"]
    assert _captured(monkeypatch, "oversmooth.analysis", "run_analysis", args) == config, line


@pytest.mark.parametrize("seed", range(25))
def test_random_comparison_reproduce_line_parses_back_to_the_same_config(monkeypatch, seed):
    config = random_comparison(random.Random(seed))
    record = json.loads(json.dumps({"command": "compare", **config.to_dict()}))
    line = reproduce_command(record)
    args = shlex.split(line)[1:] + ["--quiet", "--out", "/nonexistent-dir/x"]
    assert _captured(monkeypatch, "oversmooth.analysis", "run_comparison", args) == config, line


@pytest.mark.parametrize("seed", range(12))
def test_random_train_and_sweep_options_parse_back(monkeypatch, seed):
    """The table's rendering of a config, given to train or sweep, builds that config."""
    rng = random.Random(seed)
    train = random_train(rng)
    args = ["train", *command_options(TrainConfig, train, TrainConfig()), "-q", "-o", "x"]
    assert _captured(monkeypatch, "oversmooth.train", "train", args) == train, args
    spec = random_sweep(rng)
    args = ["sweep", *command_options(SweepSpec, spec, SweepSpec()), "-q"]
    assert _captured(monkeypatch, "oversmooth.experiments.sweep", "run_sweep", args) == spec


def test_an_ffn_0_analysis_reproduces_an_ffn_0_model():
    """The bug that began this: the Reproduce line of an ffn=0 run dropped --ffn."""
    config = AnalysisConfig(model=ModelConfig("postln", depth=8, ffn=0, dtype="float64"))
    line = reproduce_command({"command": "analyze", **config.to_dict()})
    assert line == "oversmooth analyze --depth 8 --ffn 0"


def test_a_checkpoint_run_names_the_checkpoint_not_what_it_fixes():
    config = AnalysisConfig(model=ModelConfig("preln", depth=8, hidden=8), similarity=False)
    record = {"command": "prune", **config.to_dict(), "checkpoint": "runs/a/best.pt", "prune": [2]}
    # a prune folder reruns with prune (its defaults: Pre-LN, no similarity matrix)
    assert reproduce_command(record) == (
        "oversmooth prune --dtype float32 --prune-layers 2 --checkpoint runs/a/best.pt"
    )


# -- old records -------------------------------------------------------------------------------

OLD_ANALYZE = {
    "command": "analyze",
    "model": "preln",
    "depth": 64,
    "conv": "gcn",
    "dataset": "cora",
    "hidden": 16,
    "heads": 4,
    "seeds": [0, 3],
    "norm": "node",
    "pattern": "M",
    "ffn": 0,
    "dtype": "float32",
    "floor": "shadow",
    "similarity": False,
    "device_resolved": "cpu",
}
OLD_COMPARE = {
    "command": "compare",
    "models": ["preln", "postln"],
    "depths": [2, 8],
    "conv": "gat",
    "datasets": ["cora"],
    "seeds": [0],
    "hidden": 8,
    "heads": 2,
    "dtype": "float64",
}


def test_an_old_flat_record_reads_as_today_s():
    new = upgrade_record(OLD_ANALYZE)
    assert new["model"] == {
        "name": "preln",
        "depth": 64,
        "conv": "gcn",
        "hidden": 16,
        "heads": 4,
        "norm": "node",
        "pattern": "M",
        "ffn": 0,
        "dtype": "float32",
    }
    assert new["seeds"] == [0, 3] and new["device_resolved"] == "cpu"
    config = from_record(AnalysisConfig, OLD_ANALYZE)
    assert config.model == ModelConfig("preln", "gcn", 64, hidden=16, ffn=0, dtype="float32")
    assert upgrade_record(config.to_dict()) == config.to_dict()  # today's: unchanged
    old = upgrade_record(OLD_COMPARE)
    assert old["convs"] == ["gat"] and old["model"] == {"hidden": 8, "heads": 2, "dtype": "float64"}
    compare = from_record(ComparisonConfig, OLD_COMPARE)
    assert compare.convs == ("gat",) and compare.model.hidden == 8
    assert reproduce_command(OLD_COMPARE) == reproduce_command(
        {"command": "compare", **compare.to_dict()}
    )
    reproduce = {"command": "reproduce", "quick": True, "seeds": [0], "dtype": "float64"}
    assert upgrade_record(reproduce) == reproduce  # no model: nothing to nest


def test_config_json_records_the_data_sizes_and_reads_back_without_them():
    """config.json holds the sizes the model was built with (one pair for all datasets, else
    None), never the config's placeholder; reading it back leaves them to the data."""
    record = ComparisonConfig(datasets=("cora", "citeseer")).to_dict()
    assert record["model"]["in_channels"] == 1  # the placeholder the record must not keep
    one = with_data_sizes(record, [(1433, 7), (1433, 7)])
    assert (one["model"]["in_channels"], one["model"]["out_channels"]) == (1433, 7)
    two = with_data_sizes(record, [(1433, 7), (3703, 6)])
    assert (two["model"]["in_channels"], two["model"]["out_channels"]) == (None, None)
    assert record["model"]["in_channels"] == 1  # not written through
    for written in (one, two):
        assert from_record(ComparisonConfig, written) == ComparisonConfig(
            **{"datasets": ("cora", "citeseer")}
        )
        assert reproduce_command({"command": "compare", **written}) == reproduce_command(
            {"command": "compare", **record}
        )


def test_an_old_train_record_resumes(tmp_path):
    """A training run begun before the model was nested (its last.pt holds a flat config)
    resumes: the loader upgrades it, and model fields it lacks had their defaults."""
    import torch

    from oversmooth.train import train

    config = TrainConfig(model=ModelConfig("preln", depth=2, hidden=8, heads=2), epochs=2)
    train(config, tmp_path / "run")
    state = torch.load(tmp_path / "run" / "last.pt", weights_only=True)
    flat = {k: v for k, v in config.to_dict().items() if k != "model"}
    flat.update(model="preln", depth=2, hidden=8, heads=2, conv="san", seed=0, dropout=0.5)
    state["meta"]["train_config"] = flat
    torch.save(state, tmp_path / "run" / "last.pt")
    resumed = train(dataclasses.replace(config, epochs=3), tmp_path / "run", resume=True)
    assert resumed.epochs_run == 3


# -- one home per field, one option per field ----------------------------------------------------


@pytest.mark.parametrize("config", MODEL_BUILDING, ids=lambda c: c.__name__)
def test_every_field_is_reachable_from_the_command_line(config):
    options = {field for field, _ in options_of(config)}
    grid = {f"model.{name}" for name in getattr(config, "GRID", {})}
    unreachable = set(leaf_fields(config)) - options - grid - set(DERIVED)
    assert not unreachable
    assert {f"model.{f.name}" for f in dataclasses.fields(ModelConfig)} <= (
        options | grid | set(DERIVED)
    )


@pytest.mark.parametrize("config", MODEL_BUILDING, ids=lambda c: c.__name__)
def test_run_configs_hold_the_model_rather_than_copy_its_fields(config):
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)} - {"name"}
    own = {f.name for f in dataclasses.fields(config)}
    assert "model" in own and not own & model_fields


def test_a_field_the_run_sets_is_refused_when_given_otherwise():
    with pytest.raises(ValueError, match=r"model.seed: an analysis sets it from seeds"):
        AnalysisConfig(model=ModelConfig("postln", seed=3), seeds=(0, 1))
    assert AnalysisConfig(model=ModelConfig("postln", seed=3), seeds=(3, 1)).model.seed == 3
    assert AnalysisConfig(seeds=(4,)).model.seed == 4  # the default: replaced
    with pytest.raises(ValueError, match=r"model.name: a comparison sets it from models"):
        ComparisonConfig(models=("preln",), model=ModelConfig("postln"))


def test_build_starts_from_the_config_s_own_default_model():
    config = build(AnalysisConfig, {"model.depth": 8, "metrics": ("mean_average_distance",)})
    assert config.model == ModelConfig("postln", depth=8, dtype="float64")
    assert (
        config.metrics[-1] == "mean_average_distance"
        and config.metrics[:-1] == AnalysisConfig().metrics
    )
    assert build(TrainConfig, {"model.dtype": "float64"}).model.name == "nonlocal"


def test_config_and_every_command_help_import_no_torch():
    code = (
        "import sys\n"
        "import oversmooth.config, oversmooth.run_configs\n"
        "from oversmooth.cli import commands\n"
        "from oversmooth.cli.main import new_app\n"
        "import typer\n"
        "group = new_app()\n"
        "commands.register(group)\n"
        "click = typer.main.get_command(group)\n"
        "for name, command in click.commands.items():\n"
        "    assert command.get_help(typer.Context(command, info_name=name))\n"
        "print(len(click.commands), 'torch' in sys.modules)\n"
    )
    count, torch_loaded = python_words(code)
    assert int(count) >= 11 and torch_loaded == "False"


def test_a_list_of_datasets_keeps_each_datasets_parameters(tmp_path):
    """``--datasets csbm:n=200,degree=5,cora`` is two datasets: a ``key=value`` item after a
    name with parameters is one of its parameters, not a dataset of its own."""
    parse = option("datasets").parse
    assert parse("csbm:n=200,degree=5,cora,csbm:n=50") == (
        "csbm:n=200,degree=5",
        "cora",
        "csbm:n=50",
    )
    assert parse("cora,csbm:degree=4,n=64") == ("cora", "csbm:degree=4,n=64")
    args = ["--models", "preln", "--depths", "2", "--seeds", "0", "-q", "--json"]
    datasets = ["--datasets", "csbm:n=60,degree=4,karate", "--out", str(tmp_path / "c")]
    result = runner.invoke(app, ["compare", *args, *datasets])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["summary"]
    assert [r["dataset"] for r in rows] == ["csbm:n=60,degree=4", "karate"]


def test_one_dataset_in_two_spellings_is_refused_before_any_work(tmp_path):
    """``karate,KARATE`` ran the graph twice and wrote ``energy_karate.png`` beside
    ``energy_KARATE.png`` (one file on a case-insensitive file system); parameters in another
    order, a default given explicitly and ``./g.pt`` for ``g.pt`` are the same dataset too."""
    from oversmooth.data import check_distinct, dataset_identity

    same = [
        ("karate", "KARATE"),
        ("csbm:n=200,degree=5", "csbm:degree=5.0,n=200"),
        ("csbm", "csbm:n=1000"),
        ("g.pt", "./g.pt"),
    ]
    for a, b in same:
        assert dataset_identity(a) == dataset_identity(b), (a, b)
        with pytest.raises(ValueError, match=f"'{a}' and '{b}' are the same dataset"):
            check_distinct([a, "cora", b])
    check_distinct(["cora", "citeseer", "csbm:n=200", "csbm:n=300", "a.pt", "b/a.pt"])
    args = ["--models", "preln", "--depths", "2", "--seeds", "0", "-q"]
    out = tmp_path / "c"
    result = runner.invoke(app, ["compare", *args, "-d", "karate,KARATE", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "--datasets: 'karate' and 'KARATE' are the same dataset" in result.output
    assert not out.exists()


def test_the_diffusion_model_refuses_an_edge_set_conv():
    """``--conv`` is ignored by the diffusion model, but ``esa`` ran it over the line graph,
    titled and judged as the node graph's diffusion (its spectral reference; an audit)."""
    from oversmooth.config import ModelConfig

    with pytest.raises(ValueError, match=r"conv='esa', whose states are edges"):
        ModelConfig("diffusion", conv="esa")
    ModelConfig("diffusion", conv="gat")  # a node-level conv: ignored
