"""``oversmooth atlas``: PyTorch Geometric's building blocks, built as its examples assemble
them, probed at initialisation, judged and pruned; the committed atlas matches the code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import oversmooth
from oversmooth.cli.main import app
from oversmooth.experiments.atlas import (
    ARCHITECTURES,
    AtlasConfig,
    decades_lost,
    probe_entry,
    read_atlas,
    render_atlas,
)
from oversmooth.experiments.pyg_zoo import ZOO, APPNPNet, build
from oversmooth.metrics import laplacian_energy
from oversmooth.outputs import file_digest
from oversmooth.report.formats import parquet_available
from oversmooth.verdict import COLLAPSES, LABELS

runner = CliRunner()
REPORT = Path(__file__).resolve().parents[2] / "reports" / "atlas"


@pytest.fixture(scope="module")
def karate():
    from oversmooth.data import load

    data = load("karate").to_pyg()
    data.x = data.x.to(torch.float64)
    return data, int(data.y.max()) + 1


@pytest.fixture(scope="module")
def quick_atlas(tmp_path_factory):
    """One ``oversmooth atlas --quick`` run, every figure and table format."""
    out = tmp_path_factory.mktemp("atlas") / "atlas"
    tables = "csv,parquet" if parquet_available() else "csv"
    args = ["atlas", "--quick", "--out", str(out), "--json", "--figure-format", "png,svg,pdf"]
    result = runner.invoke(app, [*args, "--table-format", tables])
    assert result.exit_code == 0, result.output
    return out, json.loads(result.output)


def test_quick_atlas_has_one_row_per_architecture(quick_atlas):
    out, printed = quick_atlas
    table = pd.read_csv(out / "atlas.csv")
    assert table["architecture"].tolist() == list(ZOO)
    assert set(table["verdict"]) <= set(LABELS)
    assert set(table["collapse"].dropna()) <= set(COLLAPSES)
    assert [row["architecture"] for row in printed["table"]] == list(ZOO)
    # every depth of the ladder has its final energy; the second graph its verdict
    config = AtlasConfig.preset(True)
    for depth in config.depths:
        assert table[f"energy_{depth}"].gt(0).all()
    assert set(table[f"verdict_{config.datasets[1]}"]) <= set(LABELS)
    # the middle layer is pruned wherever the model has one module per layer (not APPNP)
    prune = pd.read_csv(out / "prune.csv")
    assert set(prune["architecture"]) == {k for k, e in ZOO.items() if e.prunable}
    assert (prune["layer"] == config.middle).all()


def test_quick_atlas_writes_its_folder_in_every_format(quick_atlas):
    out, _ = quick_atlas
    assert (out / "atlas.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "atlas.pdf").read_bytes()[:5] == b"%PDF-"
    assert "<svg" in (out / "atlas.svg").read_text()[:2000]
    marker = json.loads((out / ".oversmooth.json").read_text())
    assert marker["kind"] == "atlas"
    config = json.loads((out / "config.json").read_text())
    assert config["command"] == "atlas" and config["quick"] is True
    assert set(config["timings"]) == set(ZOO) | {"total"}
    report = (out / "report.md").read_text()
    for entry in ZOO.values():
        assert f"| {entry.name} |" in report
    if parquet_available():
        for name in ("atlas", "curves", "prune"):
            csv = pd.read_csv(out / f"{name}.csv")
            parquet = pd.read_parquet(out / f"{name}.parquet").fillna(np.nan)  # None: NaN
            pd.testing.assert_frame_equal(parquet, csv, check_dtype=False, rtol=1e-5)


def _frame_xs(svg: str, group: str) -> list[float]:
    """x coordinates of the frame (first path) of the SVG group ``group``."""
    import re

    body = svg[svg.index(f'<g id="{group}">') :]
    path = re.search(r'<path d="([^"]*)"', body)
    assert path is not None
    return [float(x) for x in re.findall(r"[MLQ] ([-\d.]+) [-\d.]+", path.group(1))]


def test_the_figure_legend_sits_beside_the_panels_inside_the_figure(quick_atlas):
    """The legend is placed outside the panels, right: it must neither leave the figure nor
    cover a panel (tight layout ignored it, and it was cut off at the right edge)."""
    import re

    out, _ = quick_atlas
    svg = (out / "atlas.svg").read_text()
    width = float(re.search(r'viewBox="0 0 ([\d.]+) ', svg).group(1))
    legend = _frame_xs(svg, "legend_1")
    panels = [_frame_xs(svg, g) for g in re.findall(r'<g id="(axes_\d+)">', svg)]
    assert len(panels) == 4 and max(legend) <= width
    assert all(max(p) < min(legend) for p in panels)


def test_the_report_is_rebuilt_from_the_folder_alone(quick_atlas, tmp_path):
    out, _ = quick_atlas
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / "report.md").unlink()
    render_atlas(copy)
    assert (copy / "report.md").read_text() == (out / "report.md").read_text()
    assert read_atlas(copy).config == AtlasConfig.preset(True)
    assert (copy / "atlas.csv").read_text() == (out / "atlas.csv").read_text()


def test_a_rebuild_forms_the_decades_lost_again_by_the_current_rule(quick_atlas, tmp_path):
    """A derived column stored by an older rule (GAT's decades lost counted a first layer the
    verdict left out: an audit) is formed again from the curves and the verdicts' notes, in
    atlas.csv and on the page alike."""
    import pandas as pd

    out, _ = quick_atlas
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    table = pd.read_csv(copy / "atlas.csv")
    table["decades_lost"] = 999.0
    table.to_csv(copy / "atlas.csv", index=False)
    render_atlas(copy)
    assert (copy / "atlas.csv").read_text() == (out / "atlas.csv").read_text()
    assert "999" not in (copy / "report.md").read_text()


def test_oversmooth_report_rebuilds_an_atlas_folder(quick_atlas, tmp_path):
    out, _ = quick_atlas
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    for name in ("report.md", "atlas.png", "atlas.svg"):
        (copy / name).unlink()
    result = runner.invoke(app, ["report", str(copy), "--figure-format", "svg"])
    assert result.exit_code == 0, result.output
    assert (copy / "atlas.png").is_file() and (copy / "atlas.svg").is_file()
    assert (copy / "report.md").read_text() == (out / "report.md").read_text()


def test_oversmooth_report_refuses_an_atlas_folder_changed_since_it_was_written(
    quick_atlas, tmp_path
):
    """config.json records the data files' SHA-256: an edited curve was drawn, and its decades
    lost written back to atlas.csv, beside the verdict of the measured curve (exit 0); a
    corrupt fits.json stopped in the JSON parser without naming it, an empty one as a KeyError
    (exit 1), an atlas.csv cut mid-row as a TypeError (exit 1; an audit)."""
    out, _ = quick_atlas
    config = json.loads((out / "config.json").read_text())
    assert sorted(config["digests"]) == ["atlas.csv", "curves.csv", "fits.json", "prune.csv"]

    def damaged(name: str, change, digests: bool = True) -> str:
        copy = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(out, copy)
        path = copy / name
        path.write_text(change(path.read_text()))
        if not digests:
            record = json.loads((copy / "config.json").read_text())
            record.pop("digests")
            (copy / "config.json").write_text(json.dumps(record))
        before = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()}
        result = runner.invoke(app, ["report", str(copy)])
        assert result.exit_code == 2, result.output
        assert {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()} == before
        return " ".join(result.output.split())

    def edit_curve(text: str) -> str:
        lines = text.splitlines(keepends=True)
        cells = lines[5].split(",")
        cells[4] = repr(float(cells[4]) * 1e4)  # laplacian_energy
        lines[5] = ",".join(cells)
        return "".join(lines)

    said = damaged("curves.csv", edit_curve)
    assert "curves.csv: not the file the run wrote" in said and "SHA-256" in said
    said = damaged("fits.json", lambda text: "{x")
    assert "fits.json: not valid JSON (line 1, column 2" in said
    said = damaged("atlas.csv", lambda text: text[: len(text) // 2])
    assert "atlas.csv:" in said and "rerun the command that wrote it" in said
    said = damaged("fits.json", lambda text: "{}", digests=False)  # a folder of before
    assert "do not fit together (KeyError" in said and "oversmooth atlas" in said
    (tmp_path / "gone").mkdir()
    copy = tmp_path / "gone" / "atlas"
    shutil.copytree(out, copy)
    (copy / "prune.csv").unlink()  # digested, then deleted: drawn without it (an audit)
    result = runner.invoke(app, ["report", str(copy)])
    assert result.exit_code == 2 and "missing, and the run wrote it" in result.output
    # an atlas.csv whose derived column an older rule wrote: formed again, and its digest in
    # config.json with it, so that the next report passes
    copy = tmp_path / "older"
    shutil.copytree(out, copy)
    table = pd.read_csv(copy / "atlas.csv")
    table["decades_lost"] = 999.0
    table.to_csv(copy / "atlas.csv", index=False)
    record = json.loads((copy / "config.json").read_text())
    record["digests"]["atlas.csv"] = file_digest(copy / "atlas.csv")
    (copy / "config.json").write_text(json.dumps(record))
    for _ in range(2):
        result = runner.invoke(app, ["report", str(copy)])
        assert result.exit_code == 0, result.output
    assert (copy / "atlas.csv").read_text() == (out / "atlas.csv").read_text()
    assert json.loads((copy / "config.json").read_text())["digests"] == config["digests"]
    # no seed pruned (prune_seeds=0): a prune.csv of a header alone is no damage
    copy = tmp_path / "unpruned"
    shutil.copytree(out, copy)
    header = (copy / "prune.csv").read_text().splitlines(keepends=True)[0]
    (copy / "prune.csv").write_text(header)
    record = json.loads((copy / "config.json").read_text())
    record["digests"]["prune.csv"] = file_digest(copy / "prune.csv")
    (copy / "config.json").write_text(json.dumps(record))
    result = runner.invoke(app, ["report", str(copy)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("key", list(ZOO))
def test_a_deeper_stack_starts_with_the_shallower_one(karate, key):
    """Layer d of a depth-5 stack is the final layer of the depth-3 stack of the same seed: the
    atlas reads every depth of its ladder from one forward of the deepest stack."""
    data, classes = karate
    entry = ZOO[key]
    short = probe_entry(entry, build(key, data.num_features, classes, 3, seed=7), data)
    long = probe_entry(entry, build(key, data.num_features, classes, 5, seed=7), data)
    columns = ["laplacian_energy", "dirichlet_energy", "feature_norm"]
    assert short["layer"].tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(short[columns].to_numpy(), long[columns].to_numpy()[:4])
    other = probe_entry(entry, build(key, data.num_features, classes, 3, seed=8), data)
    assert not np.array_equal(other[columns].to_numpy(), short[columns].to_numpy())


def test_appnp_records_the_state_its_own_loop_carries(karate):
    data, classes = karate
    model = build("appnp", data.num_features, classes, 6, seed=0)
    assert isinstance(model, APPNPNet)
    frame = probe_entry(ZOO["appnp"], model, data)
    assert frame["layer"].tolist() == list(range(7))
    with torch.no_grad():
        out = model(data.x, data.edge_index)
    # the last recorded step is APPNP's output, bit for bit
    assert frame["laplacian_energy"].iloc[-1] == float(laplacian_energy(out, data.edge_index))


def test_the_config_names_the_zoo_s_architectures_without_importing_it():
    assert ARCHITECTURES == tuple(ZOO)
    assert AtlasConfig().names == tuple(ZOO) and AtlasConfig(architectures=("gps",)).names == (
        "gps",
    )
    help_text = runner.invoke(app, ["atlas", "--help"], terminal_width=200).output
    assert all(key in help_text for key in ZOO)


def test_build_is_seeded_and_leaves_the_global_generator_alone():
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    a = build("gcn", 5, 2, 2, seed=1)
    after = torch.rand(3)
    b = build("gcn", 5, 2, 2, seed=1)
    assert torch.equal(before, after)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert p.dtype == torch.float64 and torch.equal(p, q)
    assert not a.training


def test_decades_lost_is_the_fall_of_the_seeds_geometric_mean():
    frame = pd.DataFrame(
        {
            "seed": [0, 0, 1, 1],
            "layer": [1, 4, 1, 4],
            "laplacian_energy": [1.0, 1e-2, 100.0, 1e-2],  # geometric means 10 and 1e-2
            "at_floor": [False, False, False, True],
        }
    )
    lost, floor = decades_lost(frame, 4)
    assert lost == pytest.approx(3.0) and floor


@pytest.mark.parametrize(
    "options,message",
    [
        ({"architectures": ("gcn", "nope")}, "architectures: unknown name 'nope'"),
        ({"depths": (0, 8)}, "depths: expected integers >= 1"),
        ({"seeds": ()}, "seeds: expected at least one"),
        ({"prune_seeds": 4}, "prune_seeds: expected an integer in"),
    ],
)
def test_config_refuses_bad_input(options, message):
    with pytest.raises(ValueError, match=message):
        AtlasConfig(**options)


def test_an_unknown_architecture_is_one_line_and_exit_2(tmp_path):
    result = runner.invoke(
        app, ["atlas", "--architectures", "gcn,transformer", "--out", str(tmp_path / "a")]
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "unknown name 'transformer'" in lines[0]
    assert not (tmp_path / "a").exists()


def test_the_committed_atlas_covers_the_zoo():
    """reports/atlas is a full run of the current package (regenerate: oversmooth atlas)."""
    assert (REPORT / "atlas.csv").is_file(), "reports/atlas is missing: run oversmooth atlas"
    table = pd.read_csv(REPORT / "atlas.csv")
    config = json.loads((REPORT / "config.json").read_text())
    assert not config["quick"]
    assert config["environment"]["oversmooth"] == oversmooth.__version__
    assert len(table) >= 12 and set(table["architecture"]) == set(ZOO)
    assert max(config["depths"]) == 128 and len(config["seeds"]) >= 3
    assert (REPORT / "atlas.png").is_file() and (REPORT / "report.md").is_file()


@pytest.mark.parametrize("out, says", [(".", "the current folder"), ("", "empty")])
def test_an_unusable_out_is_refused_before_any_work(tmp_path, monkeypatch, out, says):
    import oversmooth.experiments.atlas as atlas

    monkeypatch.setattr(atlas, "run_atlas", lambda *a, **k: pytest.fail("the atlas ran"))
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["atlas", "--quick", "--out", out])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines
    assert list(tmp_path.iterdir()) == []


def test_decades_lost_leaves_out_the_end_layer_the_verdict_left_out():
    """GCN + PairNorm: layer 1 sits decades below the law, so "decades lost" from it read
    -1.6 (gained) beside a verdict that "decays by 1.78 decades over layers 2-128"."""
    from oversmooth.experiments.atlas import _decades_cell, decades_lost
    from oversmooth.verdict import Verdict

    energy = {1: 1e-3, 2: 1e2, 3: 1e1, 4: 1.0}
    frame = pd.DataFrame(
        {"layer": list(energy), "laplacian_energy": list(energy.values()), "at_floor": False}
    )
    assert decades_lost(frame, 4)[0] == pytest.approx(-3.0)  # from layer 1: "gained"
    odd = Verdict("inconclusive", "no-trend", seeds=1, notes=[{"code": "ends", "off_layers": [1]}])
    assert decades_lost(frame, 4, odd.notes)[0] == pytest.approx(
        2.0
    )  # from layer 2, as the verdict
    # a first layer that alone decided the law, left out by the verdict (GAT on Cora: 46.6
    # decades from layer 1 beside a verdict over layers 2-128, 45.5: an audit)
    first = [{"code": "first-layer", "layer": 1, "label": "exponential-smoothing"}]
    assert decades_lost(frame, 4, first)[0] == pytest.approx(2.0)
    assert _decades_cell(-0.04, False) == "0.0"  # never "-0.0"


def test_gcn_pairnorm_is_said_with_the_scale_pyg_builds():
    """PyG's ``GCN(norm="pairnorm")`` hands ``hidden_channels`` (64) to the norm's first
    argument, PairNorm's scale; the atlas said ``PairNorm(scale=1)`` (an audit).  Every energy
    from layer 2 on is 64^2 times that of scale 1: the description must say what is built."""
    model = build("gcn-pairnorm", 5, 2, 3, seed=0)
    scales = {float(norm.scale) for norm in model.norms if hasattr(norm, "scale")}
    assert scales == {64.0}
    assert "PairNorm(scale=64)" in ZOO["gcn-pairnorm"].configuration


def test_the_atlas_cells_say_what_the_verdict_says():
    """An asymptotic rate bounded on one side showed the fit's point ("doubles every 0.4453
    layers (up to 0.5547)", from a shift at the top of its grid) beside a verdict saying "not
    shown to be asymptotic ... up to 0.555"; a late rate read "halves every 30.91 layers" where
    the verdict establishes no trend (a seed rising): an audit.  Now the bound alone, a dash."""
    from oversmooth.experiments.atlas import _late_cell, _rate_cell

    assert _rate_cell("doubling_length", 0.4453, 0.0, 0.5547) == (
        "doubling length up to 0.5547 layers"
    )
    assert _rate_cell("halving_length", 3.0, 2.0, float("inf")).startswith("halving length 2")
    assert _rate_cell("halving_length", 3.0, 2.0, 4.0).startswith("halves every 3 layers (2")
    assert _rate_cell("halving_length", 3.0, 0.0, float("inf")) == "not bounded"
    evidence = {"late_slope": -0.0224}
    assert _late_cell({"trend": None, "evidence": evidence}) == "—"
    assert _late_cell({"trend": "decay", "evidence": evidence}).startswith("halves every 30.9")
