"""The report builder (oversmooth.report.document) and what every report gets from it:
rendered inline Markdown, a table of contents, the verdict banner, the reproduce command and
verdict prose rebuilt from fits.json."""

from __future__ import annotations

import json
import re
import shlex

import pandas as pd
import pytest
from typer.testing import CliRunner

from oversmooth.cli.main import app
from oversmooth.config import from_record
from oversmooth.probe import DEFAULT_METRICS
from oversmooth.report import plots
from oversmooth.report.command import reproduce_command
from oversmooth.report.document import TOC_MIN_SECTIONS, Document, inline_html
from oversmooth.report.prose import verdict_prose
from oversmooth.report.render import energy_table

runner = CliRunner()


def _visible_text(page: str) -> str:
    """The HTML with its tags and inlined images removed (what a reader sees)."""
    return re.sub(r"<[^>]*>", "", page)


def test_inline_markdown_becomes_html_and_other_text_is_escaped():
    out = inline_html("Run `oversmooth analyze --depth 8` with **care**, *see* [docs](docs/x.md)")
    assert "<code>oversmooth analyze --depth 8</code>" in out and "`" not in out
    assert "<strong>care</strong>" in out and "<em>see</em>" in out
    assert '<a href="docs/x.md">docs</a>' in out
    hostile = inline_html("a <script>alert(1)</script> & `<b>` [x](javascript:alert(1))")
    assert "<script>" not in hostile and "&lt;script&gt;" in hostile and "&amp;" in hostile
    assert "<code>&lt;b&gt;</code>" in hostile and "href" not in hostile
    # asterisks that are not emphasis stay as they are
    assert inline_html("2 * 3 * 4") == "2 * 3 * 4"


def test_html_has_no_literal_backticks_and_markdown_keeps_them(tmp_path):
    doc = Document("t")
    doc.heading("Section with `code`")
    doc.text("Measured with `--dtype float64` in `metrics.csv`.")
    doc.write(tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert "<code>--dtype float64</code>" in page and "<code>metrics.csv</code>" in page
    assert "`" not in page
    assert "`--dtype float64`" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("sections", [TOC_MIN_SECTIONS - 1, TOC_MIN_SECTIONS])
def test_table_of_contents_from_enough_sections(tmp_path, sections):
    doc = Document("long report")
    for i in range(sections):
        doc.heading(f"Part {i}")
        doc.text("text")
    doc.heading("Sub part", level=3)  # not a section
    doc.write(tmp_path)
    page = (tmp_path / "report.html").read_text()
    md = (tmp_path / "report.md").read_text()
    has_toc = sections >= TOC_MIN_SECTIONS
    assert ('<nav class="toc">' in page) is has_toc
    assert ("- [Part 0](#part-0)" in md) is has_toc
    if has_toc:
        links = re.findall(r'<a href="#([^"]+)">', page)
        assert links == [f"part-{i}" for i in range(sections)]
        for anchor in links:  # every link has its target
            assert f'id="{anchor}"' in page
        assert "Sub part" not in page.split("</nav>")[0]


@pytest.mark.parametrize(
    "label,curse,collapse,kind",
    [
        ("exponential-smoothing", False, "oversmoothing", "oversmoothing"),
        ("algebraic-smoothing", False, "both", "oversmoothing"),
        ("exponential-smoothing", False, None, "energy-decay"),
        ("algebraic-smoothing", False, None, "energy-decay"),
        ("power-law-growth", True, None, "curse-of-depth"),
        ("power-law-growth", False, None, "healthy"),
        ("exponential-growth", False, None, "energy-growth"),
        ("stable", False, None, "healthy"),
        ("inconclusive", None, None, "inconclusive"),
    ],
)
def test_verdict_banner_is_coloured_by_kind(tmp_path, label, curse, collapse, kind):
    """A law of decay is bannered oversmoothing only where the verdict found the nodes
    converging; with no cause named (share not resolved, a levelled-off fall, no
    feature_norm) it is an energy decay, not OVERSMOOTHING."""
    doc = Document("t")
    doc.verdict("energy halves every `10` layers", label, curse, collapse)
    doc.write(tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert f'class="verdict verdict-{kind}"' in page and f".verdict-{kind}{{" in page
    assert "<code>10</code>" in page
    heading = label if kind == label else f"{label} · {kind.replace('-', ' ')}"
    assert f"**Verdict: {heading}.**" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize(
    ("curse", "collapse", "kind", "heading"),
    [
        (None, None, "inconclusive", "inconclusive"),
        (None, "oversmoothing", "oversmoothing", "law inconclusive · oversmoothing"),
        (None, "both", "oversmoothing", "law inconclusive · oversmoothing"),
        (None, "norm-collapse", "norm collapse", "law inconclusive · norm collapse"),
        (True, None, "curse of depth", "law inconclusive · curse of depth"),
        (False, None, "inconclusive", "inconclusive"),
    ],
)
def test_an_inconclusive_law_keeps_what_was_decided(tmp_path, curse, collapse, kind, heading):
    """``inconclusive`` is the law only: the banner still says oversmoothing, norm collapse or
    the curse of depth when the verdict decided it."""
    doc = Document("t")
    doc.verdict("text", "inconclusive", curse, collapse)
    doc.write(tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert f'class="verdict verdict-{kind.replace(" ", "-")}"' in page
    label = "law inconclusive" if kind != "inconclusive" else "inconclusive"
    assert f'<div class="verdict-label">{label}' in page
    assert f"**Verdict: {heading}.**" in (tmp_path / "report.md").read_text()


def test_figures_are_saved_and_shown_at_their_natural_size_or_the_column(tmp_path):
    doc = Document("t")
    fig = plots.figure(12, 3.6)  # 1800 x 540 px at 150 dpi: Figure 1's old size
    fig.add_subplot().plot([1, 2], [3, 4])
    doc.figure(fig, "a wide figure", "wide.png")
    doc.table(pd.DataFrame({"a": [1.0, float("nan")], "b": ["x|y", "z"]}))
    doc.write(tmp_path)
    assert (tmp_path / "wide.png").is_file()
    page = (tmp_path / "report.html").read_text()
    # 1800 px at 150 dpi is 12 in = 1152 CSS px: its natural size, scaled to a narrower column
    # (max-width) and back to full size on a click (.full); tables scroll inside their frame
    assert 'style="width:1152px" data-width="1152"' in page and 'href="wide.png"' in page
    assert ".figure img{display:block;max-width:100%;height:auto}" in page
    assert ".figure.full img{max-width:none" in page
    assert '<div class="wide"><div class="scroll" tabindex="0"><table' in page
    assert ".scroll{overflow-x:auto" in page
    md = (tmp_path / "report.md").read_text()
    assert "![a wide figure](wide.png)" in md and "x\\|y" in md and "| — |" in md
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries
    with pytest.raises(ValueError, match="ending in .png"):
        doc.figure(plots.figure(), "no name")


def test_energy_table_has_no_spread_for_one_seed_and_no_index_row():
    rows = [
        {
            "model": "postln",
            "dataset": "cora",
            "depth": d,
            "seed": s,
            "final_energy": 1e-3 * (s + 1),
        }
        for d in (2, 8)
        for s in (0, 1)
    ]
    two = energy_table(pd.DataFrame(rows))
    assert list(two.columns) == ["model", "dataset", "2 layers", "8 layers"]
    assert two.iloc[0]["2 layers"] == "0.0015 ± 0.00071 [0.00141]"  # [geometric mean]
    one = energy_table(pd.DataFrame([r for r in rows if r["seed"] == 0]))
    assert one.iloc[0]["2 layers"] == "0.001" and "±" not in one.to_string()


def test_reproduce_command_of_an_older_folder_names_the_metrics_as_they_are_now():
    old = ["laplacian_energy", "dirichlet_energy", "relative_energy", "cosine_prev"]
    config = {"command": "analyze", "model": "postln", "metrics": [*old, "feature_norm", "mad"]}
    assert reproduce_command(config) == "oversmooth analyze --metrics mean_average_distance"


@pytest.mark.parametrize(
    "config",
    [
        {
            "command": "analyze",
            "model": "preln",
            "depth": 64,
            "conv": "gcn",
            "dataset": "cora",
            "seeds": [0, 3],
            "similarity": False,
            "prune": [2, 4],
            "dtype": "float32",
            "floor": "shadow",
            # the CLI's --metrics adds to the defaults
            "metrics": [*DEFAULT_METRICS, "mean_average_distance"],
        },
        {"command": "analyze", "model": "postln", "depth": 256, "seeds": [0, 1, 2, 3, 4]},
    ],
)
def test_reproduce_command_parses_back_to_the_same_config(monkeypatch, config):
    """The Reproduce section's command, given to the CLI, builds the recorded configuration."""
    import oversmooth.analysis as A

    full = {**from_record(A.AnalysisConfig, config).to_dict(), "command": "analyze"}
    command = reproduce_command(full)
    assert command.startswith("oversmooth analyze")
    if config["model"] == "postln":  # every value is a default: no options at all
        assert command == "oversmooth analyze"
    seen = {}

    class Stop(Exception):
        pass

    def capture(cfg, progress=None):
        seen["config"] = cfg
        raise Stop

    monkeypatch.setattr(A, "run_analysis", capture)
    args = shlex.split(command)[1:]
    result = runner.invoke(app, [*args, "--quiet", "--out", "/nonexistent-dir/x"])
    assert "config" in seen, result.output
    assert seen["config"].to_dict() == {k: v for k, v in full.items() if k != "command"}


def test_compare_command_lists_only_what_differs():
    from oversmooth.analysis import ComparisonConfig

    config = {
        "command": "compare",
        **ComparisonConfig(models=("preln", "postln"), depths=(2, 8), seeds=(0,)).to_dict(),
    }
    assert reproduce_command(config) == (
        "oversmooth compare --models preln,postln --depths 2,8 --seeds 0"
    )
    with pytest.raises(ValueError, match="expected analyze, prune, compare or train"):
        reproduce_command({"command": "bench"})


def test_verdict_prose_falls_back_to_the_frozen_text():
    assert verdict_prose({"verdict": "old words"}, "title") == "old words"
    assert verdict_prose({}, "T") == "T: no verdict recorded"


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    out = tmp_path_factory.mktemp("an") / "run"
    result = runner.invoke(
        app,
        [
            "analyze",
            "--model",
            "postln",
            "--depth",
            "24",
            "--no-similarity",
            "--out",
            str(out),
            "--quiet",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    return out, json.loads(result.output)


def test_report_rerenders_the_verdict_prose_from_fits_json(analyzed):
    out, printed = analyzed
    page = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    fits = json.loads((out / "fits.json").read_text())
    evidence = fits["mean_over_seeds"]["evidence"]
    # the report's sentence agrees with the one the CLI printed
    assert printed["verdict"] in md
    assert "Post-LN SAN, 24 layers on cora" in _visible_text(page)
    assert "oversmooth analyze --depth 24 --no-similarity" in md  # the Reproduce section
    assert "`" not in page
    over = f" (geometric mean over {evidence['seeds']} seeds)" if evidence["seeds"] > 1 else ""
    old = f"final energy{over} {evidence['final_energy']:.2g}"
    assert old in md
    evidence["final_energy"] = 1.234e-7
    if evidence.get("rate"):
        evidence["rate"]["value"] = 42.0
    (out / "fits.json").write_text(json.dumps(fits))
    edited = runner.invoke(app, ["report", str(out)])  # an edited fits.json is refused
    assert edited.exit_code == 2 and "fits.json: not the file the run wrote" in edited.output
    config = json.loads((out / "config.json").read_text())
    del config["digests"]  # as in a folder of an older version: the words follow the numbers
    (out / "config.json").write_text(json.dumps(config))
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    md = (out / "report.md").read_text()
    assert f"final energy{over} 1.2e-07" in md and old not in md
    if evidence.get("rate") and evidence["label"].startswith("exponential"):
        assert "every 42 layers" in md
    # an old folder: no numbers, only the frozen sentence
    fits["mean_over_seeds"].pop("evidence")
    fits["verdict"] = "a frozen verdict from an old version"
    (out / "fits.json").write_text(json.dumps(fits))
    assert runner.invoke(app, ["report", str(out)]).exit_code == 0
    assert "a frozen verdict from an old version" in (out / "report.md").read_text()
