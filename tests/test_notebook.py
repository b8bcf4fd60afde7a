"""oversmooth.plot and oversmooth.write_report on the probe frame of a PyG model."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch
from torch_geometric.nn.models import GCN

import oversmooth
from oversmooth.data import load
from oversmooth.report.plots import figure


def new_ax():  # not pyplot: other tests check that nothing imported it
    return figure().add_subplot()


@pytest.fixture(scope="module")
def probed():
    data = load("cora")
    torch.manual_seed(0)
    model = GCN(data.num_features, 16, num_layers=12, out_channels=7).eval()
    with oversmooth.Probe(model, data, similarity=True) as probe, torch.no_grad():
        model(data.x, data.edge_index)
        model(data.x, data.edge_index)
    return probe, probe.to_frame()


def test_plot_kinds_return_axes(probed):
    probe, frame = probed
    ax = oversmooth.plot(frame, step=1, ax=new_ax())
    assert ax.get_yscale() == "log" and ax.get_title().startswith("verdict: ")
    assert oversmooth.verdict(frame[frame.step == 1]).label in ax.get_title()
    assert len(ax.get_lines()) >= 2  # the curve and at least one fitted law
    assert oversmooth.plot(probe, kind="similarity", step=1, ax=new_ax()).images
    assert oversmooth.plot(
        frame, kind="relative", metric="dirichlet_energy", step=0, ax=new_ax()
    ).get_lines()


def test_plot_of_several_seeds_draws_their_geometric_mean_as_the_report_does():
    """The verdict pools the seeds' logarithms and the report draws each seed and their
    geometric mean; plot drew the arithmetic mean, up to 2.7x above on three seeds of a GCN on
    Cora (an audit)."""
    import numpy as np
    import pandas as pd

    layers = np.arange(0, 25)
    frame = pd.concat(
        pd.DataFrame(
            {"seed": s, "layer": layers, "laplacian_energy": 10.0 ** (-(0.2 + s) * layers / 8)}
        )
        for s in range(3)
    )
    ax = oversmooth.plot(frame, hidden=8, ax=new_ax())
    lines = {line.get_label(): line for line in ax.get_lines()}
    mean = lines["geometric mean of 3 seeds"]
    x = np.asarray(mean.get_xdata(), dtype=float)
    truth = 10.0 ** (-np.mean([0.2 + s for s in range(3)]) * x / 8)
    np.testing.assert_allclose(np.asarray(mean.get_ydata(), dtype=float), truth, rtol=1e-12)
    assert {f"seed {s}" for s in range(3)} <= set(lines)


def test_plot_refuses_bad_input(probed):
    probe, frame = probed
    with pytest.raises(ValueError, match="kind="):
        oversmooth.plot(frame, kind="nope", ax=new_ax())
    with pytest.raises(ValueError, match="similarity"):
        oversmooth.plot(frame, kind="similarity", ax=new_ax())
    with pytest.raises(ValueError, match="step=7"):
        oversmooth.plot(frame, step=7, ax=new_ax())
    with pytest.raises(ValueError, match="graph"):
        oversmooth.plot(frame.assign(graph=0), ax=new_ax())


def test_several_passes_are_refused_like_several_graphs(probed, tmp_path):
    probe, frame = probed  # two forward passes: plot and write_report name step=, as verdict
    for call in (
        lambda: oversmooth.plot(frame, ax=new_ax()),
        lambda: oversmooth.plot(probe, kind="relative", ax=new_ax()),
        lambda: oversmooth.write_report(frame, tmp_path / "both"),
    ):
        with pytest.raises(ValueError, match=r"2 forward passes.*step=<one of them>.*step=1"):
            call()
    assert not (tmp_path / "both").exists()
    one = frame[frame.step == 0]  # a single pass needs no step=
    assert oversmooth.plot(one, ax=new_ax()).get_title().startswith("verdict: ")


def test_reports_read_the_dtype_from_the_frame(tmp_path):
    import json

    from torch_geometric.data import Data

    ring = torch.arange(10)
    edges = torch.stack([ring, (ring + 1) % 10])
    data = Data(
        x=torch.randn(10, 4, dtype=torch.float64), edge_index=torch.cat([edges, edges.flip(0)], 1)
    )
    model = GCN(4, 8, num_layers=5).double().eval()
    with oversmooth.Probe(model, data) as probe, torch.no_grad():
        model(data.x, data.edge_index)
    frame = probe.to_frame()
    assert frame.attrs["dtype"] == "float64" and frame.attrs["model"] == "GCN"
    out = oversmooth.write_report(frame, tmp_path / "f64")
    assert json.loads((out / "fits.json").read_text())["mean_over_seeds"]["dtype"] == "float64"
    config = json.loads((out / "config.json").read_text())
    assert config["dtype"] == "float64" and config["probe"]["model"] == "GCN"
    assert config["probe"]["capture"] == "output" and config["probe"]["gaps"] == []
    assert "the model ran in float64" in (out / "report.md").read_text(encoding="utf-8")
    with pytest.raises(ValueError, match=r"dtype='float32'.*measured in float64"):
        oversmooth.plot(frame, dtype="float32", ax=new_ax())
    bare = frame.copy()
    bare.attrs.clear()  # e.g. read back from a CSV: float32 assumed, and said
    out = oversmooth.write_report(bare, tmp_path / "bare")
    text = (out / "report.md").read_text(encoding="utf-8")
    assert "assumes float32" in text
    assert "the model ran in float32" not in text  # assumed, not said as a fact (an audit)
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"
    # torch's dtype is the same precision as the frame's "float64" (it was refused)
    out = oversmooth.write_report(frame, tmp_path / "torch64", dtype=torch.float64)
    assert json.loads((out / "config.json").read_text())["dtype"] == "float64"
    # an empty frame with its step column: one clear line (an IndexError, an audit)
    with pytest.raises(ValueError, match="no rows; run a forward pass"):
        oversmooth.write_report(frame.iloc[:0], tmp_path / "empty")


def test_write_report_has_verdict_banner(probed, tmp_path):
    from oversmooth.report.document import verdict_heading, verdict_kind

    probe, frame = probed
    out = oversmooth.write_report(probe, tmp_path / "rep", title="PyG GCN, 12 layers", step=1)
    names = {p.name for p in out.iterdir()}
    assert {"report.md", "report.html", "energy.png", "similarity.png", "metrics.csv"} <= names
    md = (out / "report.md").read_text(encoding="utf-8")
    found = oversmooth.verdict(frame[frame.step == 1])
    kind = verdict_kind(found.label, found.curse_of_depth, found.collapse)
    assert f"**Verdict: {verdict_heading(found.label, kind)}.**" in md
    assert "PyG GCN, 12 layers" in md
    assert "verdict" in (out / "report.html").read_text(encoding="utf-8").lower()
    with pytest.raises(FileExistsError, match=r"pass overwrite=True"):  # Python's words
        oversmooth.write_report(frame, out, step=1)
    assert oversmooth.write_report(frame, out, step=1, overwrite=True) == out


def test_write_report_picks_step(probed, tmp_path):
    import pandas as pd

    _, frame = probed
    scaled = frame.copy()
    scaled.loc[scaled.step == 0, "laplacian_energy"] *= 10.0
    out = oversmooth.write_report(scaled, tmp_path / "s0", step=0)
    written = pd.read_csv(out / "metrics.csv")
    expected = scaled[scaled.step == 0]["laplacian_energy"].to_numpy()
    assert written["laplacian_energy"].to_numpy() == pytest.approx(expected, rel=1e-8)
    assert "step" not in written


def test_a_probes_similarity_matrix_is_reported_only_for_the_pass_it_belongs_to(probed, tmp_path):
    """write_report(step=0) wrote the last pass's matrix beside step 0's rows, and
    plot(kind="similarity", step=0) drew it: the probe keeps the last recorded pass's only."""
    import json

    probe, _ = probed  # two passes: steps 0 and 1
    with pytest.raises(ValueError, match=r"step=<one of 0, 1>|step="):
        oversmooth.plot(probe, kind="similarity", ax=new_ax())
    with pytest.raises(ValueError, match=r"last recorded pass only \(step 1\), not of step 0"):
        oversmooth.plot(probe, kind="similarity", step=0, ax=new_ax())
    oversmooth.plot(probe, kind="similarity", step=1, ax=new_ax())
    out = oversmooth.write_report(probe, tmp_path / "s0", step=0)
    assert not (out / "similarity.csv").exists()
    assert "No inter-layer similarity matrix" in (out / "report.md").read_text(encoding="utf-8")
    out = oversmooth.write_report(probe, tmp_path / "s1", step=1)
    assert (out / "similarity.csv").is_file()
    assert json.loads((out / "config.json").read_text())["step"] == 1
    one = probe.to_frame()
    out = oversmooth.write_report(one[one.step == 1], tmp_path / "only1")
    assert json.loads((out / "config.json").read_text())["step"] == 1  # was null


def test_write_report_picks_one_graph_of_a_batch(tmp_path):
    import pandas as pd
    from torch_geometric.data import Batch, Data

    torch.manual_seed(0)
    graphs = []
    for n in (12, 20, 16):
        ring = torch.arange(n)
        edges = torch.stack([ring, (ring + 1) % n])
        graphs.append(Data(x=torch.randn(n, 4), edge_index=torch.cat([edges, edges.flip(0)], 1)))
    batch = Batch.from_data_list(graphs)
    model = GCN(4, 8, num_layers=6).double().eval()
    with oversmooth.Probe(model, batch, reduce="none") as probe, torch.no_grad():
        model(batch.x.double(), batch.edge_index)
    frame = probe.to_frame()
    with pytest.raises(ValueError, match=r"graph=<one of 0\.\.2>"):
        oversmooth.write_report(frame, tmp_path / "all")
    with pytest.raises(ValueError, match="graph=5"):
        oversmooth.plot(frame, graph=5, ax=new_ax())
    out = oversmooth.write_report(frame, tmp_path / "g1", graph=1, dtype="float64")
    written = pd.read_csv(out / "metrics.csv")
    with oversmooth.Probe(model, graphs[1]) as alone, torch.no_grad():
        model(graphs[1].x.double(), graphs[1].edge_index)
    want = alone.to_frame()["laplacian_energy"].to_numpy()
    assert written["laplacian_energy"].to_numpy() == pytest.approx(want, rel=1e-9)
    assert "Graph 1 of the batch" in (out / "report.md").read_text(encoding="utf-8")
    with oversmooth.Probe(model, batch, reduce="none", similarity=True) as probe:
        with torch.no_grad():
            model(batch.x.double(), batch.edge_index)
    with pytest.raises(ValueError, match="averages the graphs of the batch"):
        oversmooth.plot(probe, kind="similarity", graph=1, ax=new_ax())
    out = oversmooth.write_report(probe, tmp_path / "sim1", graph=1)
    assert not (out / "similarity.csv").exists()  # the batch's mean matrix, not graph 1's
    with pytest.raises(ValueError, match="no 'graph' column"):
        oversmooth.plot(alone.to_frame(), graph=0, ax=new_ax())


def test_write_report_names_the_layers_that_did_not_run(tmp_path):
    import json

    from .pyg_models import small_graph
    from .test_probe import Unused

    data = small_graph()
    model = Unused().double().eval()  # skips convs[0], runs convs[2] twice
    with pytest.warns(UserWarning, match="never ran"):
        with oversmooth.Probe(model, data) as probe, torch.no_grad():
            model(data.x, data.edge_index)
    out = oversmooth.write_report(probe.to_frame(), tmp_path / "gaps")
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "convs.0: never ran in the forward" in md
    assert "convs.2: ran 2 times in one forward where 1 was expected" in md
    config = json.loads((out / "config.json").read_text())
    assert config["probe"]["missing_layers"] == [] and len(config["probe"]["gaps"]) == 2


def test_write_report_refuses_negative_energies_and_escapes_the_title(probed, tmp_path):
    _, frame = probed
    bad = frame[frame.step == 1].copy()
    bad.loc[bad.index[2], "laplacian_energy"] = -1e-3  # was accepted and fitted
    with pytest.raises(ValueError, match="laplacian_energy is negative at layer"):
        oversmooth.write_report(bad, tmp_path / "bad")
    assert list(tmp_path.iterdir()) == []
    title = "<img src=x onerror=alert(1)> [x](javascript:alert(1))"
    out = oversmooth.write_report(frame[frame.step == 1], tmp_path / "t", title=title)
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "<img" not in md and "&lt;img src=x" in md  # shown as text in a Markdown viewer
    assert "](javascript:" not in md and "[x]\\(javascript:" in md
    assert "<img src=x" not in (out / "report.html").read_text(encoding="utf-8")


def test_a_monitor_frame_is_reported_with_its_training_step(tmp_path):
    """An EnergyMonitor frame (attrs global_step 5, epoch 4) was reported as "One forward
    pass (step 0)": the probe's own pass counter, read as the initialisation (an audit)."""
    ring = torch.arange(10)
    edges = torch.stack([ring, (ring + 1) % 10])
    edges = torch.cat([edges, edges.flip(0)], 1)
    model = GCN(4, 8, num_layers=3).double().eval()
    with oversmooth.Probe(model, edges) as probe, torch.no_grad():
        model(torch.randn(10, 4, dtype=torch.float64), edges)
    frame = probe.to_frame()
    frame.attrs.update(global_step=5, epoch=4)
    text = (oversmooth.write_report(frame, tmp_path / "m") / "report.md").read_text()
    assert "One forward pass, after 5 training steps (epoch 4) (an EnergyMonitor probe)." in text
    assert "(step 0)" not in text


def test_frames_of_several_passes_put_together_are_refused():
    """An EnergyMonitor's frames of several epochs, concatenated, are all step 0: the relative
    change was drawn between the same layer at two epochs (an audit)."""
    import pandas as pd

    import oversmooth

    one = pd.DataFrame({"layer": range(4), "laplacian_energy": [4.0, 2.0, 1.0, 0.5], "step": 0})
    both = pd.concat([one.assign(global_step=0), one.assign(global_step=5)], ignore_index=True)
    with pytest.raises(ValueError, match="holds layer 0 more than once.*'global_step' column"):
        oversmooth.plot(both, kind="relative")


def test_seed_curves_draw_the_float_floor_beside_the_laplacian_energy_only():
    import pandas as pd

    from oversmooth.report.render import seed_curves

    frame = pd.DataFrame(
        {
            "seed": [0, 0, 1, 1],
            "layer": [0, 1, 0, 1],
            "laplacian_energy": [1.0, 0.5, 2.0, 1.0],
            "feature_norm": [1.0, 1.0, 1.0, 1.0],
            "float_floor": [1e-30] * 4,
        }
    )
    energy, _, _ = seed_curves(frame, None)
    norm, _, _ = seed_curves(frame, None, "feature_norm")
    assert all(c["floor"] is not None for c in energy if c["label"].startswith("seed"))
    assert all(c.get("floor") is None for c in norm)
