"""Figures also as SVG and PDF, tables also as Parquet (oversmooth.report.formats), in the
writers and at the CLI; Parquet without pyarrow is refused before any work."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from oversmooth.cli.main import app
from oversmooth.report import Document, plots
from oversmooth.report.formats import (
    figure_formats,
    parquet_available,
    save_figure,
    table_formats,
    write_beside,
    write_table,
)

runner = CliRunner()


def _figure():
    fig = plots.figure(3, 2)
    fig.add_subplot().plot([1, 2, 3], [3, 1, 2])
    return fig


def _check_files(folder, stem):
    """The PNG, SVG and PDF of one figure are what their suffix says."""
    assert (folder / f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    root = ET.parse(folder / f"{stem}.svg").getroot()  # parses as XML
    assert root.tag.endswith("svg")
    assert (folder / f"{stem}.pdf").read_bytes()[:5] == b"%PDF-"


@pytest.fixture
def no_pyarrow(monkeypatch):
    """pyarrow made unimportable, as on a machine without it."""
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError


# -- parsing ------------------------------------------------------------------------------------


def test_figure_formats_always_include_png_in_a_fixed_order():
    assert figure_formats(None) == ("png",)
    assert figure_formats("svg") == ("png", "svg")
    assert figure_formats("pdf, SVG,png") == ("png", "svg", "pdf")
    assert figure_formats(["pdf"]) == ("png", "pdf")


def test_table_formats_always_include_csv():
    assert table_formats(None) == ("csv",)
    assert table_formats("parquet") == ("csv", "parquet")


@pytest.mark.parametrize("text", ["jpg", "png,jpeg", ",", ""])
def test_unknown_or_empty_figure_formats_are_refused_with_the_valid_ones(text):
    with pytest.raises(ValueError, match="--figure-format: .*png, svg, pdf"):
        figure_formats(text)


def test_unknown_table_format_is_refused():
    with pytest.raises(ValueError, match="--table-format: unknown format 'xlsx'; expected any of"):
        table_formats("xlsx")


def test_parquet_without_pyarrow_is_refused_in_one_line_naming_the_fix(no_pyarrow):
    assert not parquet_available()
    assert table_formats("csv") == ("csv",)  # CSV alone needs nothing
    with pytest.raises(ValueError) as err:
        table_formats("csv,parquet")
    message = str(err.value)
    assert "pip install pyarrow" in message and "\n" not in message


# -- files --------------------------------------------------------------------------------------


def test_save_figure_writes_each_format_as_what_it_says(tmp_path):
    written = save_figure(_figure(), tmp_path / "curve.png", ("svg", "pdf"))
    assert [p.name for p in written] == ["curve.png", "curve.svg", "curve.pdf"]
    _check_files(tmp_path, "curve")


def test_save_figure_alone_writes_png_only(tmp_path):
    save_figure(_figure(), tmp_path / "curve.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.png"]


def test_document_writes_the_formats_and_embeds_the_png(tmp_path):
    doc = Document("formats")
    doc.figure(_figure(), "a curve", "curve.png")
    doc.write(tmp_path, ("png", "svg", "pdf"))
    _check_files(tmp_path, "curve")
    html = (tmp_path / "report.html").read_text()
    assert "data:image/png;base64," in html and "svg" not in html.split("<main>")[1]
    assert "](curve.png)" in (tmp_path / "report.md").read_text()


def test_document_copies_an_existing_figure_with_its_other_formats(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    save_figure(_figure(), source / "curve.png", ("svg",))
    out = tmp_path / "out"
    out.mkdir()
    doc = Document("copy")
    doc.figure(source / "curve.png", "a copied curve")
    doc.write(out, ("svg", "pdf"))  # no PDF beside the source: none is made up
    assert sorted(p.name for p in out.iterdir() if p.stem == "curve") == [
        "curve.png",
        "curve.svg",
    ]


def _frame():
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "layer": np.arange(6),
            "energy": rng.random(6) * 10.0 ** -np.arange(6),
            "label": ["a", "b", None, "d", "e", "f"],
            "at_floor": [False, False, True, False, True, False],
        }
    )


@pytest.mark.skipif(not parquet_available(), reason="pyarrow is not installed")
def test_parquet_reads_back_equal_to_the_csv(tmp_path):
    frame = _frame()
    written = write_table(frame, tmp_path / "metrics.csv", ("parquet",), float_format="%.10g")
    assert [p.name for p in written] == ["metrics.csv", "metrics.parquet"]
    csv = pd.read_csv(tmp_path / "metrics.csv")
    parquet = pd.read_parquet(tmp_path / "metrics.parquet")
    assert list(parquet.columns) == list(csv.columns)
    pd.testing.assert_frame_equal(parquet, csv, check_dtype=False, rtol=1e-9)
    # the Parquet copy keeps every bit of the float64 values; the CSV keeps 10 digits
    assert parquet["energy"].tolist() == frame["energy"].tolist()


@pytest.mark.skipif(not parquet_available(), reason="pyarrow is not installed")
def test_parquet_of_an_indexed_table_has_the_index_as_its_first_column(tmp_path):
    layers = [0, 1, 2]
    matrix = pd.DataFrame(np.eye(3) * 0.5, index=layers, columns=layers)
    write_table(matrix, tmp_path / "similarity.csv", ("parquet",), index=True, index_label="layer")
    csv = pd.read_csv(tmp_path / "similarity.csv")
    parquet = pd.read_parquet(tmp_path / "similarity.parquet")
    pd.testing.assert_frame_equal(parquet, csv, check_dtype=False)
    assert parquet.columns[0] == "layer"


@pytest.mark.skipif(not parquet_available(), reason="pyarrow is not installed")
def test_mixed_object_columns_are_written_as_text(tmp_path):
    frame = pd.DataFrame({"value": [1, "two", None], "x": [1.0, 2.0, 3.0]}, dtype=object)
    write_table(frame, tmp_path / "mixed.csv", ("parquet",))
    back = pd.read_parquet(tmp_path / "mixed.parquet")
    assert back["value"].tolist()[:2] == ["1", "two"]


@pytest.mark.skipif(not parquet_available(), reason="pyarrow is not installed")
def test_write_beside_leaves_the_csv_alone(tmp_path):
    (tmp_path / "history.csv").write_text("epoch,loss\n0,1.5\n")
    write_beside(pd.DataFrame({"epoch": [0], "loss": [1.5]}), tmp_path / "history.csv", ["parquet"])
    assert (tmp_path / "history.csv").read_text() == "epoch,loss\n0,1.5\n"
    assert pd.read_parquet(tmp_path / "history.parquet")["loss"].tolist() == [1.5]


def test_write_table_with_parquet_and_no_pyarrow_writes_nothing(tmp_path, no_pyarrow):
    with pytest.raises(ValueError, match="pip install pyarrow"):
        write_table(_frame(), tmp_path / "metrics.csv", ("parquet",))
    assert not any(tmp_path.iterdir())


# -- the commands -------------------------------------------------------------------------------

_ANALYZE = ["analyze", "--model", "postln", "--depth", "4", "--dataset", "karate", "--seeds", "0"]


def test_analyze_refuses_parquet_without_pyarrow_before_any_work(tmp_path, no_pyarrow):
    out = tmp_path / "run"
    result = runner.invoke(app, [*_ANALYZE, "--out", str(out), "--table-format", "parquet"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --table-format parquet"), lines
    assert "pip install pyarrow" in lines[0]
    assert not out.exists()


def test_unknown_figure_format_is_one_line_and_exit_2(tmp_path):
    result = runner.invoke(app, ["compare", "--figure-format", "gif", "--out", str(tmp_path / "c")])
    assert result.exit_code == 2, result.output
    assert result.output.strip().startswith("error: --figure-format: unknown format 'gif'")
    assert "Traceback" not in result.output


@pytest.mark.skipif(not parquet_available(), reason="pyarrow is not installed")
def test_analyze_writes_every_figure_and_table_format_and_report_rerenders(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(
        app,
        [*_ANALYZE, "--out", str(out), "--figure-format", "png,svg,pdf", "--table-format",
         "csv,parquet", "--prune-layers", "2"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    pngs = sorted(p.stem for p in out.glob("*.png"))
    assert pngs and sorted(p.stem for p in out.glob("*.svg")) == pngs
    assert sorted(p.stem for p in out.glob("*.pdf")) == pngs
    for stem in pngs:
        _check_files(out, stem)
    for name in ("metrics", "prune"):
        csv = pd.read_csv(out / f"{name}.csv")
        parquet = pd.read_parquet(out / f"{name}.parquet")
        pd.testing.assert_frame_equal(parquet, csv, check_dtype=False, rtol=1e-9)
    for p in out.glob("*.svg"):
        p.unlink()
    again = runner.invoke(app, ["report", str(out), "--figure-format", "svg", "--json"])
    assert again.exit_code == 0, again.output
    assert sorted(p.stem for p in out.glob("*.svg")) == pngs


@pytest.mark.skipif(not parquet_available(), reason="pyarrow is not installed")
def test_training_report_writes_parquet_beside_the_run_s_csvs(tmp_path):
    from oversmooth.report.writers import write_training_report

    history = [
        {"epoch": e, "loss": 2.0 / (e + 1), "val_loss": 2.5 / (e + 1)}
        | {"train_acc": 0.5, "val_acc": 0.4, "test_acc": 0.3}
        for e in range(4)
    ]
    dynamics = [
        {"epoch": e, "layer": k, "laplacian_energy": 10.0 ** -(k + e)}
        for e in range(0, 4, 2)
        for k in range(3)
    ]
    summary = {"train_acc": 0.5, "val_acc": 0.4, "test_acc": 0.3, "epochs_run": 4}
    write_training_report(
        tmp_path,
        history,
        2,
        summary,
        dynamics=dynamics,
        figure_formats=("pdf",),
        table_formats=("parquet",),
    )
    assert pd.read_parquet(tmp_path / "history.parquet")["loss"].tolist() == [
        r["loss"] for r in history
    ]
    assert len(pd.read_parquet(tmp_path / "dynamics.parquet")) == len(dynamics)
    for stem in ("training", "dynamics"):
        assert (tmp_path / f"{stem}.pdf").read_bytes()[:5] == b"%PDF-"
