"""The committed reports match the code that claims them: regenerate them (`oversmooth bench`,
`oversmooth reproduce`) when one of these fails."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import oversmooth
from oversmooth.experiments import bench

REPORTS = Path(__file__).resolve().parent.parent / "reports"


def _load(path: Path) -> dict:
    assert path.is_file(), f"{path} is missing; regenerate the report"
    return json.loads(path.read_text(encoding="utf-8"))


def test_benchmark_report_has_the_current_schema_version_and_targets():
    results = _load(REPORTS / "benchmarks" / "results.json")
    assert results.get("schema_version") == bench.SCHEMA_VERSION, (
        f"reports/benchmarks/results.json has schema {results.get('schema_version')}, the code "
        f"{bench.SCHEMA_VERSION}: rerun `oversmooth bench --overwrite`"
    )
    assert results["machine"]["oversmooth"] == oversmooth.__version__, (
        f"reports/benchmarks was measured with oversmooth {results['machine']['oversmooth']}, "
        f"the package is {oversmooth.__version__}: rerun `oversmooth bench --overwrite`"
    )
    recorded = {row["key"] for row in results.get("targets", [])}
    absent = [t.key for t in bench.TARGETS if t.key not in recorded]
    assert not absent, f"reports/benchmarks/results.json lacks targets {absent}"
    assert not results["quick"], "the committed benchmark report must come from a full run"
    # the progress total the bench announces is its number of sections
    assert len(results["section_s"]) == bench.SECTIONS, list(results["section_s"])


def test_paper_reproduction_records_the_current_package_version():
    config = _load(REPORTS / "paper-reproduction" / "config.json")  # it records no schema
    assert config["environment"]["oversmooth"] == oversmooth.__version__, (
        f"reports/paper-reproduction was made with oversmooth "
        f"{config['environment']['oversmooth']}, the package is {oversmooth.__version__}"
    )


# ----------------------------------------------------------------------------- claims

README = REPORTS.parent / "README.md"
# a duration as prose states one: "13 seconds", "1.8 s", "about 16 minutes", "0.06–0.2 s"
DURATION = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?)(?:[–-]\d+(?:\.\d+)?)? ?(?:s|seconds?|min|minutes?|ms|h|hours?)\b"
)
RATIO = re.compile(r"\babout (\d+(?:\.\d+)?)x\b")


def _help(command: str) -> str:
    from typer.testing import CliRunner

    from oversmooth.cli.main import app

    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def _claims() -> list[tuple[str, str, float]]:
    """Each claim: (where, a pattern whose group 1 is the number stated, the committed value
    the number states, rounded as written)."""
    bench = _load(REPORTS / "benchmarks" / "results.json")
    end, precision = bench["end_to_end"], bench["precision"]
    reproduce = _load(REPORTS / "paper-reproduction" / "config.json")
    sweep = bench["sweep"]
    one, two = (
        next(r for r in sweep["runs"] if r["pair"] == sweep["pair"] and r["workers"] == w)
        for w in (1, 2)
    )
    main = [  # the main command, in the README and again in docs/analyze.md
        (r"it takes about (\d+) seconds", end["seconds"]),
        (r"\((\d+\.\d) s in `reports/benchmarks`", end["seconds"]),
        (r"alone takes (\d+\.\d) s", end["import_torch_s"]),
    ]
    return [
        *[("README.md", pattern, value) for pattern, value in main],
        *[("docs/analyze.md", pattern, value) for pattern, value in main],
        ("analyze --help", r"float64 \(about (\d+) s on", end["seconds"]),
        (
            "docs/verdict.md",
            r"takes (\d+\.\d) s on 2 cores \(`reports/benchmarks`\)",
            end["seconds"],
        ),
        ("docs/precision.md", r"takes (\d+\.\d\d) s in float32", precision["float32_bare_s"]),
        ("docs/precision.md", r"and (\d+\.\d\d) s in float64", precision["float64_bare_s"]),
        ("docs/precision.md", r"in float64 \((\d+\.\d\d)x\)", precision["forward_ratio"]),
        ("docs/precision.md", r"shadow, (\d+\.\d\d) s against", precision["float64_twin_s"]),
        ("docs/precision.md", r"against (\d+\.\d\d) s \(", precision["float32_shadow_s"]),
        ("docs/precision.md", r"s \((\d+\.\d\d)x\), because", precision["analysis_ratio"]),
        ("docs/reproduce.md", r"\(about (\d+) minutes on 2 cores", reproduce["seconds"] / 60),
        ("reproduce --help", r"--quick takes about (\d+) minutes on", reproduce["seconds"] / 60),
        ("docs/sweep.md", r"once per sweep, about (\d+\.\d) s on", sweep["server_start_s"]),
        ("docs/sweep.md", r"workers computed (\d+\.\d\d) times as many", sweep["ratio"]),
        ("docs/sweep.md", r"(\d+\.\d\d) times once started", sweep["steady_ratio"]),
        ("docs/sweep.md", r"a cell takes (\d+\.\d\d) s alone", one["cell_median_s"]),
        ("docs/sweep.md", r"and (\d+\.\d\d) s beside another", two["cell_median_s"]),
        ("docs/sweep.md", r"first cell (\d+\.\d\d) s more", sweep["warmup_s"]),
    ]


def _texts() -> dict[str, str]:
    from oversmooth.cli.commands import COMMANDS

    texts = {"README.md": README.read_text(encoding="utf-8")}
    for doc in ("analyze", "verdict", "precision", "reproduce", "sweep"):
        texts[f"docs/{doc}.md"] = (REPORTS.parent / "docs" / f"{doc}.md").read_text("utf-8")
    texts.update({f"{name} --help": _help(name) for name in COMMANDS})
    return {where: " ".join(text.split()) for where, text in texts.items()}  # lines joined


def test_every_duration_and_ratio_stated_is_the_committed_measurement():
    """The durations and ratios of the README and every --help (and the docs pages that repeat
    or detail them) come from reports/benchmarks and reports/paper-reproduction: each is
    registered in _claims() and equals the committed number at the precision it is written
    with; an unregistered duration or 'about Nx' in the README or a --help fails (register it
    against a committed report, or do not state it)."""
    texts = _texts()
    checked: dict[str, set[int]] = {where: set() for where in texts}
    for where, pattern, value in _claims():
        found = list(re.finditer(pattern, texts[where]))
        assert len(found) == 1, f"{where}: the claim {pattern!r} is not there once; update it"
        stated = found[0].group(1)
        decimals = len(stated.partition(".")[2])
        assert float(stated) == round(value, decimals), (
            f"{where} states {stated} ({pattern!r}), the committed report {value:.4g}: "
            "write the committed number (or regenerate the report)"
        )
        checked[where].add(found[0].start(1))
    for where, text in texts.items():
        if where.startswith("docs/"):
            continue
        for m in [*DURATION.finditer(text), *RATIO.finditer(text)]:
            assert m.start(1) in checked[where], (
                f"{where}: {m.group(0)!r} is not checked against a committed report"
            )


@pytest.mark.parametrize("page", ["README.md", "docs/analyze.md"])
def test_the_main_command_prints_what_the_benchmarked_run_printed(page):
    """The output of the main command shown in the README (and docs/analyze.md) is the one
    reports/benchmarks recorded (its '...' standing for the elided middle), and the reading of
    it rounds the same numbers."""
    verdict = _load(REPORTS / "benchmarks" / "results.json")["end_to_end"]["verdict"]
    text = (REPORTS.parent / page).read_text(encoding="utf-8")
    block = re.search(r"and prints:\n\n```\n(.*?)\n", text)
    assert block, f"{page}: the main command's printed verdict is not found"
    shown = re.escape(block.group(1)).replace(re.escape("..."), ".*")
    assert re.fullmatch(shown, verdict), f"{page} prints\n{block.group(1)}\nthe run:\n{verdict}"
    if page == "README.md":
        decades = float(re.search(r"decays by (\d+\.\d+) decades", verdict).group(1))
        halving = float(re.search(r"late halving length (\d+\.\d+) layers", verdict).group(1))
        reading = (
            f"the energy falls {decades:.1f} decades over 256 layers, halving every {halving:.1f}"
        )
        assert reading in " ".join(text.lower().split()), f"{page} no longer reads: {reading}"


def test_the_memory_table_of_reliability_md_is_the_committed_measurement():
    """reports/reliability.md's measured peaks (and estimate / measured) are the committed
    bench's whole-process peaks (`scaling_size.csv`, MiB) in MB or GB, and the estimate of
    resources.analysis_bytes for the same graphs; they said 495 MB, 773 MB and 1.75 GB for a
    bench that measured 486 MB, 812 MB and 1.77 GB (an audit)."""
    import csv

    from oversmooth.resources import analysis_bytes

    rows = csv.DictReader((REPORTS / "benchmarks" / "scaling_size.csv").open(encoding="utf-8"))
    measured = {int(r["nodes"]): float(r["process_peak_mib"]) * 2**20 for r in rows}
    text = (REPORTS / "reliability.md").read_text(encoding="utf-8")
    for power in (4, 5, 6):
        row = re.search(
            rf"^\| 10\^{power} \| ([\d.]+) (MB|GB) \| ([\d.]+) (MB|GB) \| ([\d.]+) \|", text, re.M
        )
        assert row, f"reports/reliability.md: no memory row for 10^{power} nodes"
        unit = {"MB": 1e6, "GB": 1e9}
        peak, estimate = measured[10**power], float(row.group(3)) * unit[row.group(4)]
        stated = row.group(1)
        decimals = len(stated.partition(".")[2])
        assert float(stated) == round(peak / unit[row.group(2)], decimals), (power, stated, peak)
        # the CSBM of the bench: n nodes of degree 10 (about 10 n directed edges), 32 features
        wanted = analysis_bytes(10**power, 10 * 10**power, 32, 4)
        assert abs(estimate - wanted) <= 0.01 * wanted, (power, estimate, wanted)
        assert float(row.group(5)) == round(wanted / peak, 2), (power, row.group(5))


def test_the_bare_commands_announcement_is_the_committed_measurement():
    """A bare `oversmooth analyze` announced "about 6 s" where its --help (and the committed
    bench, 5.49 s) said about 5 (an audit)."""
    from oversmooth.cli._common import _BARE_SECONDS

    seconds = _load(REPORTS / "benchmarks" / "results.json")["end_to_end"]["seconds"]
    assert _BARE_SECONDS == round(seconds), (_BARE_SECONDS, seconds)


def _two_digits(value: str | float) -> str:
    return f"{float(value):.1e}"


def _stated(page: str, pattern: str) -> re.Match:
    """Where ``pattern`` matches docs/``page`` (its whitespace runs read as one space)."""
    text = " ".join((REPORTS.parent / "docs" / page).read_text("utf-8").split())
    found = re.search(pattern, text)
    assert found, f"docs/{page}: no longer says {pattern!r}"
    return found


def test_the_float32_floor_paragraph_of_precision_md_is_the_committed_reproduction():
    """docs/precision.md quotes the committed reproduction's float32 runs of Post-LN SAN at
    depth 256 (ablations.csv, report.md); it said 2.3e-12 and 4.3e-12 where they end at 2.4e-12
    and 4.4e-12, numbers of an earlier regeneration (an audit)."""
    import csv

    folder = REPORTS / "paper-reproduction"
    rows = csv.DictReader((folder / "ablations.csv").open(encoding="utf-8"))
    end = {
        (r["ablation"], int(r["seed"])): r["energy"]
        for r in rows
        if r["model"] == "postln" and r["depth"] == "256"
    }
    report = (folder / "report.md").read_text(encoding="utf-8")
    sentence = report[report.index("The float32 floor.") :].split("\n")[0]
    floors = dict(
        re.findall(r"seed (\d): float32 \S+ against float64 \S+, floor ([\d.e+-]+)", sentence)
    )
    parts = dict(re.findall(r"seed (\d): (from layer \d+|at no layer)", sentence))
    said = {int(k): (floors[k], parts[k]) for k in floors}
    stated = _stated(
        "precision.md",
        r"In float32 our runs end at (\S+) and (\S+) \(seeds 0 and 1\), on their own estimated "
        r"floors \((\S+) and (\S+)\), while the same weights in float64 reach (\S+) and (\S+); "
        r"the float32 and float64 curves part \(by more than 2x\) from layers (\d+) and (\d+) on",
    )
    f32 = [stated.group(1), stated.group(2)]
    assert f32 == [_two_digits(end["float32", s]) for s in (0, 1)], f32
    assert [stated.group(3), stated.group(4)] == [_two_digits(said[s][0]) for s in (0, 1)]
    f64 = [stated.group(5), stated.group(6)]
    assert f64 == [_two_digits(end["baseline", s]) for s in (0, 1)], f64
    assert [f"from layer {stated.group(k)}" for k in (7, 8)] == [said[s][1] for s in (0, 1)]
    third = _stated("precision.md", r"seed 2 ends at (\S+) in float32 and (\S+) in float64")
    assert third.groups() == (_two_digits(end["float32", 2]), _two_digits(end["baseline", 2]))
    assert said[2][1] == "at no layer"


def test_the_collapse_example_of_verdict_md_is_the_committed_atlas():
    """docs/verdict.md's example of the collapse decades is the atlas's PyG GAT on Cora; it
    quoted "the first 64 layers ... 25.0 decades, of which the norm carries 19.8" from an atlas
    that had since gone to 128 layers (45.0 and 40.0)."""
    record = _load(REPORTS / "atlas" / "fits.json")["gat/cora"]
    ev, (first, last) = record["evidence"], record["window"]
    stated = _stated(
        "verdict.md",
        r"PyG `GAT` \(`reports/atlas`: Cora, three seeds, (\d+) layers, at initialisation\) "
        r"loses ([\d.]+) decades of energy over layers (\d+)–(\d+) \(([\d.]+) read from its "
        r"curve\), of which the squared norm carries ([\d.]+): `([a-z-]+)`",
    )
    depth, fall, lo, hi, read, norm, kind = stated.groups()
    assert (int(depth), int(lo), int(hi)) == (last, first, last)
    assert float(fall) == round(-ev["energy_decades"], 1)
    assert float(read) == round(-ev["energy_read_decades"], 1)
    assert float(norm) == round(-ev["norm_decades"], 1)
    assert kind == record["collapse"]
