"""CLI reads as one tool: complete help at 80 and 100 columns, one --device default, --json,
and a bare analyze that says what it runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from oversmooth.cli.main import app

runner = CliRunner()
GROUP = typer.main.get_command(app)
COMMANDS = sorted(GROUP.commands)
WIDTHS = (80, 100)


def squeeze(text: str) -> str:
    """Text without any whitespace: what survives re-wrapping."""
    return "".join(text.split())


def help_of(name: str | None, width: int) -> str:
    args = [name, "--help"] if name else ["--help"]
    result = runner.invoke(app, args, env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return result.output


def test_every_command_is_covered():
    assert set(COMMANDS) >= {
        "analyze",
        "compare",
        "prune",
        "train",
        "sweep",
        "bench",
        "reproduce",
        "models",
        "datasets",
        "metrics",
        "report",
    }


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", COMMANDS)
def test_command_help_is_complete(name, width):
    text = help_of(name, width)
    assert "…" not in text, text
    assert "<bool>" not in text, "a flag shows a value placeholder"
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert not too_wide, too_wide
    flat = squeeze(text)
    command = GROUP.commands[name]
    for param in command.params:
        if getattr(param, "hidden", False):  # deprecated spellings: accepted, not listed
            listed = re.findall(r"(?<![\w-])--[a-z][a-z-]*(?![\w-])", text)
            assert not set(param.opts) & set(listed), f"{name}: hidden {param.opts} listed"
            continue
        for opt in [*param.opts, *getattr(param, "secondary_opts", [])]:
            if opt.startswith("-"):
                assert opt in text, f"{name}: {opt} missing"
        if getattr(param, "help", None):
            assert squeeze(param.help) in flat, f"{name} {param.name}: help cut: {param.help!r}"
    assert squeeze(command.help.split("\n\n")[0]) in flat, f"{name}: description cut"


@pytest.mark.parametrize("width", WIDTHS)
def test_top_level_help_lists_every_command_uncut(width):
    text = help_of(None, width)
    assert "…" not in text and "..." not in text.split("Commands:")[-1], text
    flat = squeeze(text)
    for name in COMMANDS:
        first = GROUP.commands[name].help.split("\n\n")[0]
        sentence = first.split(". ")[0].rstrip(".")
        assert squeeze(sentence) in flat, f"{name}: summary cut"
    for opt in ("--debug", "--version"):
        assert opt in text


@pytest.mark.parametrize(
    "name,kept",
    [
        ("analyze", "[default: postln, or the checkpoint's]"),
        ("analyze", "[default: 256, or the checkpoint's]"),
        ("prune", "[default: preln, or the checkpoint's]"),
        ("analyze", "[default: float64]"),
        ("compare", "[default: preln,postln,nonlocal]"),
        ("train", "[default: nonlocal]"),
        (
            "train",
            "[default: 1e-4 peak for the Post-LN models (postln, nonlocal), 1e-3 for the others]",
        ),
        ("sweep", "A TOML spec ([grid] and [options])"),
        ("sweep", "[default: float64, or the spec's]"),
        # a required option showed "[default: none]" (an audit)
        ("prune", "Layers to prune one at a time, e.g. 2,32,64. [required]"),
    ],
)
def test_bracketed_text_survives(name, kept):
    assert squeeze(kept) in squeeze(help_of(name, 80))


@pytest.mark.parametrize("name", COMMANDS)
def test_option_help_names_only_options_the_command_has(name):
    command = GROUP.commands[name]
    own = {opt for p in command.params for opt in [*p.opts, *getattr(p, "secondary_opts", [])]}
    for param in command.params:
        for mentioned in re.findall(r"(?<![\w-])--[a-z][a-z-]*", getattr(param, "help", "") or ""):
            assert mentioned in own, f"{name} {param.name}: help mentions {mentioned}"


@pytest.mark.parametrize("name", COMMANDS)
def test_device_defaults_to_auto_everywhere(name):
    for param in GROUP.commands[name].params:
        if "--device" in param.opts:
            assert param.default == "auto" or (
                param.default is None and "[default: auto" in param.help
            ), f"{name}: --device default {param.default!r}"


def test_sweep_without_device_runs_auto(monkeypatch, tmp_path):
    import oversmooth.experiments.sweep as sweep

    seen = {}

    def fake(config, progress=None, **formats):  # figure_formats, table_formats
        seen["device"] = config.device
        raise RuntimeError("stop here")

    monkeypatch.setattr(sweep, "run_sweep", fake)
    runner.invoke(app, ["sweep", "--depths", "2", "--out", str(tmp_path / "s"), "-q"])
    assert seen["device"] == "auto"
    spec = tmp_path / "spec.toml"
    spec.write_text('[grid]\ndepths = [2]\n[options]\ndevice = "cpu"\n')
    runner.invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "t"), "-q"])
    assert seen["device"] == "cpu"  # the spec's device wins over the default
    spec.write_text("[grid]\ndepths = [2]\n")
    runner.invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "u"), "-q"])
    assert seen["device"] == "auto"


def _fake_reproduction(seen):
    def fake(config, out, *, overwrite=False, progress=None, **formats):
        seen["config"] = config
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text("# r\n")
        (out / "config.json").write_text(
            json.dumps(
                {
                    "command": "reproduce",
                    "quick": config.quick,
                    "seeds": list(config.seeds),
                    "datasets": ["cora"],
                    "seconds": 1.5,
                    "environment": {"torch": "x"},
                }
            )
        )
        return out

    return fake


def test_reproduce_defaults_to_auto(monkeypatch, tmp_path):
    import oversmooth.experiments.reproduce as reproduce

    seen = {}
    monkeypatch.setattr(reproduce, "run_reproduction", _fake_reproduction(seen))
    out = tmp_path / "r"
    result = runner.invoke(app, ["reproduce", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert seen["config"].device == "auto"
    assert result.stdout == f"report: {out / 'report.md'}\n"
    cpu = ["reproduce", "--out", str(tmp_path / "c"), "-q", "--device", "cpu"]
    result = runner.invoke(app, cpu)
    assert result.exit_code == 0 and seen["config"].device == "cpu", result.output


def test_reproduce_prints_json(monkeypatch, tmp_path):
    import oversmooth.experiments.reproduce as reproduce

    monkeypatch.setattr(reproduce, "run_reproduction", _fake_reproduction({}))
    out = tmp_path / "r"
    result = runner.invoke(app, ["reproduce", "--out", str(out), "--json", "-q"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["out"] == str(out) and payload["report"] == str(out / "report.md")
    assert payload["quick"] is True and payload["seconds"] == 1.5
    assert payload["datasets"] == ["cora"]
    assert "environment" not in payload and payload["dtype"] == "float64"
    assert payload["device"].split(":")[0] in ("cpu", "cuda")


def test_report_prints_json(tmp_path):
    out = tmp_path / "a"
    first = runner.invoke(
        app, ["analyze", "--depth", "2", "--no-similarity", "--out", str(out), "-q", "--json"]
    )
    assert first.exit_code == 0, first.output
    result = runner.invoke(app, ["report", str(out), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["out"] == str(out) and payload["command"] == "analyze"
    assert payload["report"] == str(out / "report.html")
    assert "report.md" in payload["files"] and "energy.png" in payload["files"]
    human = runner.invoke(app, ["report", str(out)])
    assert human.stdout == f"report: {out / 'report.html'}\n"


class _Stop(Exception):
    pass


@pytest.fixture
def stopped_analysis(monkeypatch, tmp_path):
    """run_analysis replaced by a stop: what analyze prints before the work, and its config."""
    import oversmooth.analysis as analysis

    seen = {}

    def fake(config, progress=None):
        seen["config"] = config
        raise _Stop("stopped by the test")

    monkeypatch.setattr(analysis, "run_analysis", fake)
    monkeypatch.chdir(tmp_path)
    return seen


def test_bare_analyze_says_what_it_runs(stopped_analysis):
    result = runner.invoke(app, ["analyze"])
    config = stopped_analysis["config"]
    expected = ("postln", 256, "cora", (0, 1, 2, 3, 4))
    assert (config.model.name, config.model.depth, config.dataset, config.seeds) == expected
    lines = result.stderr.splitlines()
    assert lines[0].startswith(
        "analyze: Post-LN SAN, 256 layers on cora, seeds 0,1,2,3,4, float64 (about "
    )
    assert lines[0].endswith("; --help for options")
    assert "analyze:" not in result.stdout


@pytest.mark.parametrize("args", [["--quiet"], ["--json"], ["--depth", "4"]])
def test_analyze_line_only_when_bare(stopped_analysis, args):
    result = runner.invoke(app, ["analyze", *args])
    assert stopped_analysis["config"] is not None
    assert "analyze: " not in result.stderr


def test_the_command_list_needs_no_command_module():
    """`oversmooth --help` lists every command from the table in cli/commands.py, without
    importing the commands (or torch): each summary there is its command's own first line."""
    from oversmooth.cli import commands
    from oversmooth.cli.main import new_app

    listed = new_app()
    commands.register(listed, only="")
    stubs = typer.main.get_command(listed).commands
    assert list(stubs) == list(commands.COMMANDS) == list(GROUP.commands)
    for name, command in GROUP.commands.items():
        real = command.get_short_help_str(limit=10_000)
        assert stubs[name].get_short_help_str(limit=10_000) == real, name


@pytest.mark.parametrize(
    ("args", "loaded"),
    [(["--help"], False), (["--version"], False), (["--debug", "models", "--help"], True)],
)
def test_the_entry_point_loads_only_the_command_it_runs(args, loaded):
    import subprocess
    import sys

    code = (
        "import sys\n"
        f"sys.argv = ['oversmooth', *{args!r}]\n"
        "from oversmooth.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit as exit:\n    code = exit.code\n"
        "print('torch' in sys.modules, 'oversmooth.cli.models_cmd' in sys.modules, code)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    last = done.stdout.strip().splitlines()[-1]
    assert last.split()[1] == str(loaded), done.stdout + done.stderr
    assert last.split()[2] in ("0", "None"), done.stdout + done.stderr
    if not loaded:
        assert last.split()[0] == "False", "listing the commands imported torch"


def test_python_dash_m_runs_the_command():
    """``python -m oversmooth`` is the command, named so in its help (a virtual environment's
    scripts folder need not be on PATH)."""
    import subprocess
    import sys

    from oversmooth import __version__

    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "oversmooth", *args], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert run("--version").split() == ["oversmooth", __version__]
    assert run("models", "--help").startswith("Usage: python -m oversmooth models")
