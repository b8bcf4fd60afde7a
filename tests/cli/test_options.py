"""Every command's options are the option table's (oversmooth.config.OPTIONS): same flags,
same short flags, same help, plural names for lists, every default shown; and the commands
are thin (no ``locals()`` passed on)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import oversmooth.cli
from oversmooth.cli.main import app
from oversmooth.config import OPTIONS, option, options_of
from oversmooth.experiments.atlas import AtlasConfig
from oversmooth.experiments.reproduce import ReproduceConfig
from oversmooth.experiments.sweep import SweepSpec
from oversmooth.run_configs import AnalysisConfig, ComparisonConfig, TrainConfig

runner = CliRunner()
GROUP = typer.main.get_command(app)
#: command -> the run config it fills
CONFIGS = {
    "analyze": AnalysisConfig,
    "prune": AnalysisConfig,
    "compare": ComparisonConfig,
    "train": TrainConfig,
    "sweep": SweepSpec,
    "reproduce": ReproduceConfig,
    "atlas": AtlasConfig,
}
#: the options that set no config field: what a command does with its result
COMMAND_ONLY = {
    "out",
    "overwrite",
    "as_json",
    "quiet",
    "figure_format",
    "table_format",
    "resume",
    "checkpoint_every",
    "spec",
    "quick",
    "stats",
    "features",
    "labels",
    "names_only",
    "folder",
    "device",
    "data_root",
}


def _params(command: str) -> dict:
    return {p.name: p for p in GROUP.commands[command].params}


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_a_config_command_has_exactly_the_table_s_options(command):
    params = _params(command)
    table = options_of(CONFIGS[command])
    for field, entry in table:
        param = params.get(entry.name)
        assert param is not None, f"{command}: no {entry.flag} for {field}"
        flags = [*param.opts, *param.secondary_opts]
        assert flags == [f for spelling in entry.flags for f in spelling.split("/")], flags
        assert param.help.startswith(entry.help), f"{command} {entry.flag}: {param.help!r}"
        shown = "[default: " in param.help or param.help.endswith("[required]")
        assert shown, f"{command} {entry.flag}: default not shown"
        for old in entry.old:  # a former spelling: accepted, hidden
            hidden = next(p for p in params.values() if old in p.opts)
            assert hidden.hidden and hidden.help == f"Deprecated: {entry.flag}."
    names = {entry.name for _, entry in table}
    aliases = {old.removeprefix("--") for _, entry in table for old in entry.old}
    rest = set(params) - names - aliases
    assert rest <= COMMAND_ONLY, f"{command}: options outside the table: {rest - COMMAND_ONLY}"


@pytest.mark.parametrize("command", sorted(GROUP.commands))
def test_an_option_spelled_as_in_the_table_is_the_table_s(command):
    """Commands without a config (bench, datasets) use the table's text for its options."""
    for param in GROUP.commands[command].params:
        if param.name in ("device", "data_root"):  # the settings every command shares
            entry = option(param.name)
            assert param.opts[0] == entry.flag and param.help.startswith(entry.help), command


def test_short_flags_mean_one_thing_everywhere():
    meaning: dict[str, set[str]] = {}
    for command in GROUP.commands.values():
        for param in command.params:
            longs = [o for o in param.opts if o.startswith("--")]
            for short in (o for o in param.opts if re.fullmatch(r"-[A-Za-z]", o)):
                meaning.setdefault(short, set()).update(o.rstrip("s") for o in longs)
    assert meaning["-m"] == {"--model"} and meaning["-L"] == {"--depth"}
    assert meaning["-d"] == {"--dataset"} and meaning["-o"] == {"--out"}
    for command in GROUP.commands.values():  # every command with the long flag has the short
        flags = {o for p in command.params for o in p.opts}
        for short, (long,) in (("-m", {"--model"}), ("-L", {"--depth"}), ("-d", {"--dataset"})):
            if long in flags or long + "s" in flags:
                assert short in flags, f"{command.name}: {long} without {short}"


def test_every_list_option_has_a_plural_name():
    for entry in OPTIONS:
        if entry.kind in ("ints", "names"):
            assert entry.flag.endswith("s") or entry.flag == "--prune-layers", entry.flag
        for old in entry.old:
            assert not old.endswith("s") or old == "--layers", old


@pytest.mark.parametrize("command", sorted(GROUP.commands))
def test_every_option_with_a_value_shows_its_default(command):
    for param in GROUP.commands[command].params:
        if param.param_type_name == "argument" or param.hidden:
            continue
        if param.is_flag and not param.secondary_opts:  # --json, --overwrite: off unless given
            continue
        help = param.help or ""
        shown = (
            "[default: " in help or help.endswith("[required]") or param.show_default is not False
        )
        assert shown, f"{command} {param.opts[0]}: no default shown"


def test_commands_pass_no_locals_on():
    folder = Path(oversmooth.cli.__file__).parent
    for path in folder.glob("*.py"):
        assert "locals()" not in path.read_text(encoding="utf-8"), path.name


def test_compare_takes_several_convs_and_the_old_singular_with_a_note(tmp_path):
    args = ["--models", "preln,postln", "--depths", "2,3", "--seeds", "0", "--hidden", "8"]
    args += ["--heads", "2", "-d", "karate", "--floor", "bound", "-q", "--json"]
    result = runner.invoke(app, ["compare", "--convs", "san,gcn", *args, "-o", tmp_path / "c"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    assert {(r["model"], r["conv"]) for r in summary} == {
        (m, c) for m in ("preln", "postln") for c in ("san", "gcn")
    }
    fits = json.loads((tmp_path / "c" / "fits.json").read_text())
    assert set(fits) == {f"karate/{m}/{c}" for m in ("preln", "postln") for c in ("san", "gcn")}
    report = (tmp_path / "c" / "report.md").read_text()
    assert "Pre-LN GCN, 3 layers on karate" in report and "Post-LN SAN" in report
    assert "oversmooth compare --models preln,postln --convs san,gcn" in report
    assert runner.invoke(app, ["report", str(tmp_path / "c")]).exit_code == 0
    old = runner.invoke(app, ["compare", "--conv", "gcn", *args, "-o", tmp_path / "g"])
    assert old.exit_code == 0, old.output
    assert "note: --conv is deprecated; use --convs" in old.stderr
    assert {r.get("conv", "gcn") for r in json.loads(old.stdout)["summary"]} == {"gcn"}
    assert json.loads((tmp_path / "g" / "config.json").read_text())["convs"] == ["gcn"]
    both = runner.invoke(app, ["compare", "--conv", "gcn", "--convs", "san", *args])
    assert both.exit_code == 2 and "give only --convs" in both.stderr


def test_a_model_field_reaches_the_model_from_every_command(monkeypatch, tmp_path):
    """--ffn 0 (no FFN sublayer) reaches the model that analyze, compare, prune, train and
    sweep build, and training takes --dtype."""
    import oversmooth.analysis as A
    import oversmooth.experiments.sweep as S
    import oversmooth.train as T

    seen = []

    def capture(config, *args, **kwargs):
        seen.append(config)
        raise RuntimeError("stop")

    for module, name in (
        (A, "run_analysis"),
        (A, "run_comparison"),
        (T, "train"),
        (S, "run_sweep"),
    ):
        monkeypatch.setattr(module, name, capture)
    common = ["--ffn", "0", "--norm", "graph", "--pattern", "MS", "-o", str(tmp_path / "x")]
    for command in ("analyze", "prune --prune-layers 1", "compare", "train --dtype float64"):
        runner.invoke(app, [*command.split(), *common])
    runner.invoke(app, ["sweep", "--ffn", "0", "--norm", "graph", "--pattern", "MS"])
    assert len(seen) == 5
    for config in seen:
        assert (config.model.ffn, config.model.norm, config.model.pattern) == (0, "graph", "MS")
    assert seen[3].model.dtype == "float64"


def test_the_table_names_its_fields_once():
    fields = [f for entry in OPTIONS for f in entry.fields]
    assert len(fields) == len(set(fields))
    assert option("model.ffn").flag == "--ffn"


def test_compare_runs_the_diffusion_model_once_whatever_the_convs(tmp_path):
    """The diffusion model ignores the conv (X' = P X): with --convs san,gcn it wrote two
    identical rows, one titled for each conv (an audit); it runs once, under the first."""
    args = ["--models", "diffusion,postln", "--convs", "san,gcn", "--depths", "2,3"]
    args += ["--seeds", "0", "--hidden", "8", "--heads", "2", "-d", "karate", "--floor", "bound"]
    result = runner.invoke(app, ["compare", *args, "-q", "--json", "-o", tmp_path / "c"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    assert sorted({(r["model"], r["conv"]) for r in summary}) == [
        ("diffusion", "san"),
        ("postln", "gcn"),
        ("postln", "san"),
    ]
    fits = json.loads((tmp_path / "c" / "fits.json").read_text())
    assert set(fits) == {"karate/diffusion/san", "karate/postln/san", "karate/postln/gcn"}
