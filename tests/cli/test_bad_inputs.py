"""Bad input, systematically: every value-taking option of every command, given each bad value
its kind of option must refuse, and the same for the Python API's run configs.

The table is generated from the commands' own option lists (a new option without a kind below
fails :func:`test_every_option_has_a_kind`), so it follows the command line as it changes.
Each case must end in exit code 2 with one ``error:`` line (``note:`` lines, such as a
deprecated option's, may precede it) that names the option or the value and says what was
expected or what to try, no traceback, no work started (the model, the benchmark and the
sweep's folder claim are replaced by a tripwire) and nothing written.  Every case runs in
this process (``CliRunner``) and is refused before any work, so each takes milliseconds.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path

import pytest
import typer
from click.testing import CliRunner

from oversmooth.cli.main import app

# the click group, built once: typer's own runner rebuilds it at every call (24 ms, against
# 0.5 ms for a case refused while parsing)
GROUP = typer.main.get_command(app)
RUNNER = CliRunner()

# A valid, tiny run of each command; the option under test replaces its own occurrence.
BASE: dict[str, list[str]] = {
    "analyze": ["analyze", "-d", "karate", "-L", "2", "--hidden", "8", "--heads", "2", "-q"],
    "compare": [
        *("compare", "--datasets", "karate", "--depths", "2"),
        *("--hidden", "8", "--heads", "2", "-q"),
    ],
    "prune": [
        *("prune", "-d", "karate", "-L", "2", "--hidden", "8", "--heads", "2"),
        *("--prune-layers", "1", "-q"),
    ],
    "train": [
        *("train", "-d", "karate", "-L", "2", "--hidden", "8", "--heads", "2"),
        *("--epochs", "1", "-q"),
    ],
    "datasets": ["datasets", "--stats", "karate"],
    "sweep": ["sweep", "--datasets", "karate", "--depths", "2", "-q"],
    "report": ["report"],
    "bench": ["bench", "--quick"],
    "reproduce": ["reproduce", "--quick"],
    "models": ["models"],
    "metrics": ["metrics"],
    "atlas": ["atlas", "--quick", "--architectures", "gcn"],
}
WRITES = {"analyze", "compare", "prune", "train", "sweep", "bench", "reproduce", "atlas"}
# a command's required argument, when the option under test is not that argument
ARGUMENT = {"report": "{tmp}/a_report"}

# The bad values.  {tmp} is the test's folder, which holds notes.txt (a text file) and
# a_folder/ (an empty folder).
VALUES: dict[str, str] = {
    "empty": "",
    "blank": "   ",
    "negative": "-1",
    "zero": "0",
    "huge": "1" + "0" * 30,
    "fraction": "2.5",
    "nan": "nan",
    "inf": "inf",
    "word": "abc",
    "unicode": "ünïcødé☃",
    "injection": "$(touch pwned); rm -rf ~",
    "newline": "a\nb",
    "missing": "{tmp}/no/such.pt",
    "file": "{tmp}/notes.txt",
    "folder": "{tmp}/a_folder",
    "long": "x" * 5000,
}
ANY = frozenset(VALUES)
NOT_A_NUMBER = ANY - {"negative", "zero", "huge", "fraction"}  # as an integer option sees them
KINDS: dict[str, frozenset[str]] = {
    # integers >= 1 whose size is checked against the machine (a huge one would not fit)
    "size": NOT_A_NUMBER | {"negative", "zero", "huge", "fraction"},
    "count": NOT_A_NUMBER | {"negative", "zero", "fraction"},  # integers >= 1, no upper bound
    "nonnegative": NOT_A_NUMBER | {"negative", "fraction"},  # integers >= 0, no upper bound
    "width": NOT_A_NUMBER | {"negative", "huge", "fraction"},  # >= 0 (0: none), checked size
    "seed": NOT_A_NUMBER | {"negative", "huge", "fraction"},  # [0, 2**64 - 1]
    "rate": NOT_A_NUMBER | {"negative", "zero", "huge"},  # a float > 0, bounded
    "probability": NOT_A_NUMBER | {"negative", "huge", "fraction"},  # a float in [0, 1)
    "nonnegative float": NOT_A_NUMBER | {"negative"},  # a float >= 0, finite
    "name": ANY,  # a choice or a list of choices: none of the values is one
    "dataset": ANY,  # a dataset name or a graph file: none of the values is one
    "input": ANY,  # a file or folder to read: none of the values is one
    "address": ANY,  # a Ray address (refused with the local backend anyway)
    # a folder of benchmarks: a missing one is a download target, an odd name a legal one
    "data root": frozenset({"newline", "long", "file"}),
    # an output folder: a new or odd name is legal; an existing folder is resumed or refused
    # by the overwrite rules (tested in test_errors.py)
    "out": frozenset({"empty", "blank", "newline", "long", "file"}),
}
OPTION_KINDS: dict[str, str] = {
    "--depth": "size",
    "--depths": "size",
    "--hidden": "size",
    "--heads": "size",
    "--ffn": "width",
    "--epochs": "count",
    "--workers": "count",
    "--patience": "count",
    "--warmup": "nonnegative",
    "--probe-every": "nonnegative",
    "--prune-seeds": "nonnegative",
    "--seed": "seed",
    "--seeds": "seed",
    "--prune-layers": "size",
    "--prune": "size",
    "--layers": "size",
    "--lr": "rate",
    "--dropout": "probability",
    "--block-dropout": "probability",
    "--weight-decay": "nonnegative float",
    "--checkpoint-every": "nonnegative float",
    **dict.fromkeys(
        (
            *("--model", "--models", "--conv", "--convs", "--norm", "--nonlocal-norm"),
            *("--pattern", "--encoder", "--init", "--dtype", "--floor", "--device"),
            *("--backend", "--split", "--modes", "--metrics", "--architectures"),
            *("--figure-format", "--table-format"),
        ),
        "name",
    ),
    "--dataset": "dataset",
    "--datasets": "dataset",
    "--stats": "dataset",
    "--checkpoint": "input",
    "--features": "input",
    "--labels": "input",
    "--trained": "input",
    "spec": "input",
    "folder": "input",
    "--ray-address": "address",
    "--data-root": "data root",
    "--out": "out",
}


# what an option's messages may call it instead (the field it sets)
ALSO_NAMED = {"--stats": ("dataset",), "--layers": ("prune",)}


def value_options(command: str) -> list[tuple[str, str, str]]:
    """(name, first spelling, kind) of every option and argument of ``command`` that takes a
    value; flags are left out."""
    cmd = GROUP.commands[command]  # type: ignore[attr-defined]
    found = []
    for param in cmd.get_params(typer.Context(cmd)):
        if getattr(param, "is_flag", False) or param.name in ("help",):
            continue
        spelling = param.opts[0] if param.param_type_name == "option" else param.name
        long_name = next((o for o in param.opts if o.startswith("--")), spelling)
        found.append((long_name, spelling, OPTION_KINDS.get(long_name, "")))
    return found


def cases() -> list[tuple[str, str, str, str]]:
    """The table: (command, option, its spelling, bad value's name), one row per case."""
    return [
        (command, long_name, spelling, value)
        for command in BASE
        for long_name, spelling, kind in value_options(command)
        for value in sorted(KINDS.get(kind, ()))
    ]


CASES = cases()


class WorkStarted(BaseException):
    """Raised by the tripwires: the run got past its checks (BaseException: no command
    catches it)."""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One folder for the module (a folder per case costs more than most cases): it holds
    notes.txt (a text file), a_folder/ (an empty folder) and a_report/ (an analysis, for
    ``report``) and is the current folder; the
    first piece of real work of each command is replaced by a tripwire (a size check inside
    model building still runs: the model is built, then the tripwire goes off)."""
    import oversmooth.analysis as analysis
    import oversmooth.experiments.bench as bench
    import oversmooth.experiments.pyg_zoo as zoo
    import oversmooth.experiments.sweep as sweep
    import oversmooth.train as train

    def after(fn):
        @functools.wraps(fn)
        def wire(*args, **kwargs):
            fn(*args, **kwargs)
            raise WorkStarted(fn.__name__)

        return wire

    def after_first(fn):  # a generator of models: the first is built, then the tripwire
        @functools.wraps(fn)
        def wire(*args, **kwargs):
            next(iter(fn(*args, **kwargs)))
            raise WorkStarted(fn.__name__)

        return wire

    def instead(fn):
        @functools.wraps(fn)
        def wire(*args, **kwargs):
            raise WorkStarted(fn.__name__)

        return wire

    folder = tmp_path_factory.mktemp("bad-inputs")
    (folder / "notes.txt").write_text("not a graph, a spec or a checkpoint\n")
    (folder / "a_folder").mkdir()
    report = [*BASE["analyze"], "--out", str(folder / "a_report")]  # what `report` reads
    assert RUNNER.invoke(GROUP, report).exit_code == 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(analysis, "seeded_models", after_first(analysis.seeded_models))
        patch.setattr(train, "model_from_config", after(train.model_from_config))
        patch.setattr(bench, "machine", instead(bench.machine))
        patch.setattr(sweep, "claim_folder", instead(sweep.claim_folder))
        patch.setattr(zoo, "build", instead(zoo.build))
        patch.chdir(folder)
        yield folder


def _replace(args: list[str], spellings: tuple[str, ...], value: str) -> list[str]:
    """``args`` with the option spelled any of ``spellings`` set to ``value`` (an argument,
    when it is not an option)."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in spellings:
            skip = True
            continue
        out.append(arg)
    return out


CLUES = re.compile(
    r"expected|is not one of|not a valid|no such|does not exist|use |pass |choose|drop |"
    r"try |see '|must |only |copy |check |add |put |rename|would need|is a (file|folder)",
    re.I,
)


def check_refusal(output: str, exit_code: int, option: str, value: str) -> str:
    """The contract of a refused input; returns the error line."""
    lines = [line for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    others = [line for line in lines if not line.startswith(("error: ", "note: "))]
    assert exit_code == 2, f"exit {exit_code}: {output[-600:]}"
    assert len(errors) == 1 and not others, output[-600:]
    line = errors[0]
    named = option.lstrip("-").lower()
    names = {named, named.replace("-", "_"), named.rstrip("s"), *ALSO_NAMED.get(option, ())}
    shown = value.strip()[:30]
    assert any(n in line.lower() for n in names) or (shown and shown in line), (
        f"names neither the option nor the value: {line[:300]}"
    )
    assert CLUES.search(line), f"says neither what was expected nor what to try: {line[:300]}"
    if len(value) < 100:  # a long value may be echoed; the message itself stays short
        assert len(line) < 600, f"{len(line)} characters: {line[:300]}"
    return line


def refusal_problem(workdir: Path, command: str, option: str, spelling: str, value: str) -> str:
    """Run one case; what is wrong with how it was refused ("" when nothing)."""
    text = VALUES[value].replace("{tmp}", str(workdir))
    cmd = GROUP.commands[command]  # type: ignore[attr-defined]
    param = next(p for p in cmd.get_params(typer.Context(cmd)) if option in (*p.opts, p.name))
    args = _replace(BASE[command], tuple(param.opts), text)
    args += [spelling, text] if param.param_type_name == "option" else [text]
    if command in ARGUMENT and param.param_type_name == "option":
        args.append(ARGUMENT[command].replace("{tmp}", str(workdir)))
    if command in WRITES and option != "--out":
        args += ["--out", str(workdir / "out")]
    before = sorted(p.name for p in workdir.iterdir())
    try:  # click's runner lets a BaseException through
        result = RUNNER.invoke(GROUP, args)
    except WorkStarted as started:
        return f"accepted: the run started ({started})"
    try:
        check_refusal(result.output, result.exit_code, option, text)
    except AssertionError as exc:
        return str(exc).splitlines()[0]
    left = sorted(set(p.name for p in workdir.iterdir()) - set(before))
    return f"left {left} behind" if left else ""


# one test per option (a test per case would spend more in pytest than in the cases)
@pytest.mark.parametrize(
    "command, option, spelling",
    [pytest.param(*key, id=f"{key[0]} {key[1]}") for key in sorted({c[:3] for c in CASES})],
)
def test_bad_values_are_refused_in_one_line(workdir, command, option, spelling):
    rows = [c for c in CASES if c[:3] == (command, option, spelling)]
    problems = {value: refusal_problem(workdir, *row) for row in rows for value in [row[3]]}
    wrong = {value: why for value, why in problems.items() if why}
    assert not wrong, f"{command} {option}: " + "; ".join(f"{v}: {w}" for v, w in wrong.items())


def test_the_table_is_large_and_covers_every_command():
    assert len(CASES) >= 400, len(CASES)
    assert set(BASE) == set(GROUP.commands), "a command without a BASE run"  # type: ignore[attr-defined]
    assert {c[0] for c in CASES} >= {c for c in BASE if value_options(c)}


def test_every_option_has_a_kind():
    # a new option joins the table by being given a kind here
    missing = sorted(
        {f"{c} {name}" for c in BASE for name, _, kind in value_options(c) if not kind}
    )
    assert not missing, f"options without a kind in OPTION_KINDS: {missing}"


# ----------------------------------------------------------------------------- usage errors


@pytest.mark.parametrize("command", sorted(BASE))
@pytest.mark.parametrize(
    "extra, says",
    [
        (["--no-such-option"], "No such option"),
        (["--json", "--json", "surplus-argument"], "unexpected extra argument"),
    ],
    ids=["unknown-option", "extra-argument"],
)
def test_usage_errors_are_one_line(workdir, command, extra, says):
    args = [*BASE[command], *extra]
    if command in ("report", "sweep") and says != "No such option":  # they take one argument
        args = [command, str(workdir / "a_folder"), "surplus-argument"]
    result = RUNNER.invoke(GROUP, args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: ") and says in lines[0], lines[0]


@pytest.mark.parametrize(
    "command", sorted(c for c in BASE if any(s.startswith("-") for _, s, _ in value_options(c)))
)
def test_an_option_without_its_value_is_one_line(workdir, command):
    option = next(s for _, s, _ in value_options(command) if s.startswith("-"))
    result = RUNNER.invoke(GROUP, [*BASE[command], option])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "requires an argument" in lines[0] and option in lines[0], lines[0]


@pytest.mark.parametrize("option", ["--data-root", "--features", "--labels"])
def test_datasets_options_that_need_stats_are_refused_without_it(workdir, option):
    # listing the datasets used to ignore them silently (exit 0)
    result = RUNNER.invoke(GROUP, ["datasets", option, str(workdir / "notes.txt")])
    line = check_refusal(result.output, result.exit_code, option, "")
    assert "only used with --stats" in line, line


def test_a_failed_download_leaves_no_folder_behind(tmp_path, monkeypatch):
    # --data-root a/b/c on an offline machine: PyG makes every missing parent before the
    # download fails; a/ and a/b/ used to stay (found with --data-root '$(touch ...); ...')
    import urllib.error

    from torch_geometric.datasets import Planetoid

    def refuse(self):
        raise urllib.error.URLError("network unreachable")

    monkeypatch.setattr(Planetoid, "download", refuse)
    monkeypatch.chdir(tmp_path)
    args = ["datasets", "--stats", "pubmed", "--data-root", "a/b/c"]
    result = RUNNER.invoke(GROUP, args)
    check_refusal(result.output, result.exit_code, "--data-root", "a/b/c")
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- the Python API

API_VALUES = {
    "negative": -1,
    "zero": 0,
    "huge": 10**30,
    "fraction": 2.5,
    "nan": math.nan,
    "inf": math.inf,
    "bool": True,
    "text": "3",
    "none": None,
}
# field -> values that must raise ValueError naming the field
API_FIELDS = {
    # (the depth's upper bound is the run configs', as the command line's tests show)
    "depth": {"negative", "zero", "fraction", "nan", "inf", "bool", "text", "none"},
    "hidden": {"negative", "zero", "fraction", "nan", "inf", "bool", "text", "none"},
    "heads": {"negative", "zero", "fraction", "nan", "inf", "bool", "text", "none"},
    "seed": {"negative", "huge", "fraction", "nan", "inf", "bool", "text", "none"},
    "ffn": {"negative", "fraction", "nan", "inf", "bool", "text"},
    "dropout": {"negative", "huge", "fraction", "nan", "inf", "bool", "text", "none"},
    "block_dropout": {"negative", "huge", "fraction", "nan", "inf", "bool", "text", "none"},
    "name": {"negative", "zero", "fraction", "bool", "text", "none"},
    "conv": {"negative", "zero", "fraction", "bool", "text", "none"},
    "norm": {"negative", "zero", "fraction", "bool", "text", "none"},
    "dtype": {"negative", "zero", "fraction", "bool", "text", "none"},
}
SWEEP_FIELDS = {
    "epochs": {"negative", "zero", "fraction", "nan", "bool", "text", "none"},
    "workers": {"negative", "zero", "fraction", "nan", "bool", "text"},
    "backend": {"negative", "zero", "bool", "text", "none"},
    "device": {"negative", "zero", "bool", "text", "none"},
    "ray_address": {"negative", "zero", "bool", "text"},
    "out": {"negative", "zero", "bool", "none"},
    "data_root": {"negative", "zero", "bool"},
    "seeds": {"negative", "huge", "fraction", "bool", "text", "none"},
    "depths": {"negative", "zero", "huge", "fraction", "bool", "text", "none"},
}
API_CASES = [
    pytest.param("model", f, v, id=f"ModelConfig-{f}-{v}")
    for f, values in API_FIELDS.items()
    for v in sorted(values)
] + [
    pytest.param("sweep", f, v, id=f"SweepSpec-{f}-{v}")
    for f, values in SWEEP_FIELDS.items()
    for v in sorted(values)
]


@pytest.mark.parametrize("target, field, value", API_CASES)
def test_bad_api_value_is_a_value_error_naming_the_field(target, field, value):
    from oversmooth.config import ModelConfig
    from oversmooth.experiments.sweep import SweepSpec

    bad = API_VALUES[value]
    with pytest.raises(ValueError) as caught:
        if target == "model":
            ModelConfig(**{field: bad})
        elif field in ("seeds", "depths"):
            SweepSpec(**{field: bad if bad is None else (bad,)})
        else:
            SweepSpec(**{field: bad})
    message = str(caught.value)
    assert {"name": "model"}.get(field, field.rstrip("s")) in message, message
    assert "\n" not in message and CLUES.search(message), message
