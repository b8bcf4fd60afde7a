"""Model precision and the float floor of a run (oversmooth.precision)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oversmooth.analysis import AnalysisConfig, describe_frame, run_analysis
from oversmooth.graph import GraphOperator
from oversmooth.nn.model import ModelConfig, model_from_config
from oversmooth.precision import (
    AT_FLOOR_FACTOR,
    FloorTracker,
    add_floor_columns,
    dtype_eps,
    mark_at_floor,
    resolve_floor_method,
)
from oversmooth.probe import Probe
from oversmooth.report.prose import verdict_text
from oversmooth.verdict import Verdict


def _dense_graph(n: int = 30, p: float = 0.5, seed: int = 0) -> torch.Tensor:
    """A dense random graph: a large spectral gap, so Post-LN GCN collapses within ~50 layers."""
    a = torch.rand(n, n, generator=torch.Generator().manual_seed(seed)) < p
    a = torch.triu(a, 1)
    return (a | a.T).nonzero().T.contiguous()


def _run(dtype: str, method: str, depth: int, n: int = 30):
    ei = _dense_graph(n)
    graph = GraphOperator(ei, num_nodes=n)
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(1))
    config = ModelConfig(
        name="postln",
        conv="gcn",
        depth=depth,
        in_channels=8,
        out_channels=2,
        hidden=16,
        heads=2,
        dtype=dtype,
    )
    model = model_from_config(config)
    tracker = FloorTracker(model, graph, method) if method != "bound" else None
    with torch.no_grad(), Probe(model, graph) as probe:
        if tracker is None:
            model(x.to(model.decoder.weight.dtype), ei)
        else:
            with tracker:
                model(x.to(model.decoder.weight.dtype), ei)
    return add_floor_columns(probe.to_frame(), tracker.to_frame() if tracker else None, dtype)


@pytest.fixture(scope="module")
def deep():
    """Post-LN GCN, depth 64, in float32 (shadow and twin floors) and float64 (twin floor)."""
    return {
        key: _run(*key, depth=64)
        for key in (("float32", "shadow"), ("float32", "twin"), ("float64", "twin"))
    }


def _off_by_2x(frame32, frame64) -> np.ndarray:
    e32, e64 = frame32["laplacian_energy"].to_numpy(), frame64["laplacian_energy"].to_numpy()
    return np.maximum(e32 / e64, e64 / e32) > 2


@pytest.mark.parametrize("method", ["shadow", "twin"])
def test_float32_floor_flags_every_layer_float64_contradicts(deep, method):
    f32, f64 = deep[("float32", method)], deep[("float64", "twin")]
    off = _off_by_2x(f32, f64)
    assert off.sum() >= 5  # the case does reach the float32 floor
    flagged = f32["at_floor"].to_numpy()
    assert not (off & ~flagged).any(), (
        f"layers off by > 2x but not flagged: {f32['layer'][off & ~flagged].tolist()}"
    )
    # the flag is not a blanket: the early layers, where both precisions agree, are not flagged
    first_off = int(np.argmax(off))
    assert not flagged[: first_off - 10].any()
    # the single-step bound (eps32 * norm)^2, the old filter, keeps layers that are off by > 2x
    bound = (dtype_eps("float32") * f32["feature_norm"].to_numpy()) ** 2
    assert (off & (f32["laplacian_energy"].to_numpy() >= bound)).any()
    assert f32["float_floor"].iloc[-1] > bound[-1]  # the accumulated floor lies above it


def test_shadow_gives_the_float64_energies(deep):
    shadow, f64 = deep[("float32", "shadow")], deep[("float64", "twin")]
    np.testing.assert_allclose(shadow["float64_energy"], f64["laplacian_energy"], rtol=1e-8)


@pytest.mark.parametrize("conv", ["gcn", "san"])
def test_shadow_uses_unrounded_edge_weights(conv):
    # the float64 reference must see the user's float64 weights, not their float32 rounding
    n = 30
    ei = _dense_graph(n)
    w = 0.1 + torch.rand(
        ei.size(1), generator=torch.Generator().manual_seed(2), dtype=torch.float64
    )
    graph = GraphOperator(ei, w, num_nodes=n)
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(1))  # float32 input for both
    frames = {}
    for dtype in ("float32", "float64"):
        config = ModelConfig(
            name="postln",
            conv=conv,
            depth=12,
            in_channels=8,
            out_channels=2,
            hidden=16,
            heads=2,
            dtype=dtype,
        )
        model = model_from_config(config)
        with torch.no_grad(), Probe(model, graph) as probe:
            if dtype == "float32":
                with FloorTracker(model, graph, "shadow") as tracker:
                    model(x, ei, edge_weight=w)
                frames[dtype] = tracker.to_frame()
            else:
                model(x.double(), ei, edge_weight=w)
                frames[dtype] = probe.to_frame()
    np.testing.assert_allclose(
        frames["float32"]["float64_energy"], frames["float64"]["laplacian_energy"], rtol=1e-12
    )


def test_float64_floor_uses_float64_rounding(deep):
    f64 = deep[("float64", "twin")]
    assert not f64["at_floor"].any()
    assert (f64["float_floor"] < 1e-24).all()  # float64 rounding, nowhere near eps32's 1e-13
    assert "float64_energy" not in f64


def test_no_flags_where_precisions_agree():
    f32, f64 = _run("float32", "shadow", depth=24), _run("float64", "twin", depth=24)
    assert not _off_by_2x(f32, f64).any()
    assert not f32["at_floor"].any() and not f64["at_floor"].any()


def test_fits_leave_out_rows_at_the_floor(deep):
    f32 = deep[("float32", "shadow")]
    desc = describe_frame(f32, hidden=16, dtype="float32")
    found = desc["evidence"]
    assert found["dropped"]["at_floor"] == int(f32["at_floor"].sum()) > 0
    assert found["window"][1] < int(f32["layer"][f32["at_floor"]].min())
    assert desc["final_at_floor"] and desc["float64_final_energy"] == pytest.approx(
        f32["float64_energy"].iloc[-1]
    )


def test_layers_at_floor_counts_what_the_verdict_left_out():
    # fits.json's layers_at_floor counted energies below the bound itself while the verdict
    # leaves out those below AT_FLOOR_FACTOR times it: a frame of a user's own model (no floor
    # columns) whose last layers sit between the two had "0 layers at the floor" beside a
    # verdict that dropped them
    import pandas as pd

    layers = np.arange(41)
    bound = (dtype_eps("float32") * 1.0) ** 2
    energy = np.exp(-0.5 * layers)
    energy[-6:] = 3.0 * bound  # between the bound and AT_FLOOR_FACTOR times it
    rows = [
        {"seed": s, "layer": k, "laplacian_energy": e * (1 + 0.01 * s), "feature_norm": 1.0}
        for s in range(3)
        for k, e in zip(layers, energy, strict=True)
    ]
    desc = describe_frame(pd.DataFrame(rows), hidden=16, dtype="float32")
    assert desc["evidence"]["dropped"]["at_floor"] == 18
    assert desc["layers_at_floor"] == desc["evidence"]["layers_at_floor"] == 6
    assert desc["final_at_floor"]


def test_float64_fit_keeps_points_below_the_float32_bound(deep):
    # regression: the floor used eps32 for float64 states and dropped genuine float64 energies
    f64 = deep[("float64", "twin")].drop(columns=["float_floor", "at_floor"])
    eps32_bound = (dtype_eps("float32") * f64["feature_norm"]) ** 2
    assert (f64["laplacian_energy"] < eps32_bound).sum() >= 5
    found = describe_frame(f64, hidden=16, dtype="float64")["evidence"]
    assert found["dropped"]["at_floor"] == 0


def test_bound_floor_uses_the_runs_epsilon():
    f64 = _run("float64", "bound", depth=4)
    expected = (np.finfo(np.float64).eps * f64["feature_norm"]) ** 2
    np.testing.assert_allclose(f64["float_floor"], expected)


def test_tracker_leaves_no_hooks_and_the_run_unchanged():
    ei = _dense_graph(12)
    graph = GraphOperator(ei, num_nodes=12)
    x = torch.randn(12, 8, generator=torch.Generator().manual_seed(1))
    model = model_from_config(
        ModelConfig(
            name="postln", conv="san", depth=4, in_channels=8, out_channels=2, hidden=8, heads=2
        )
    )
    with torch.no_grad():
        plain = model(x, ei)
        with Probe(model, graph) as probe, FloorTracker(model, graph, "shadow") as tracker:
            tracked = model(x, ei)
    assert torch.equal(plain, tracked)
    assert (
        tracker.to_frame()["layer"].tolist()
        == probe.to_frame()["layer"].tolist()
        == [0, 1, 2, 3, 4]
    )
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_mark_at_floor_threshold():
    floor = np.array([1.0, 1.0, 1.0, 1.0])
    energy = np.array([AT_FLOOR_FACTOR * 1.01, AT_FLOOR_FACTOR * 0.99, np.nan, 0.0])
    assert mark_at_floor(energy, floor).tolist() == [False, True, True, True]


def test_floor_method_choices():
    assert resolve_floor_method("auto", "float32") == "shadow"
    assert resolve_floor_method("auto", "float64") == "twin"
    with pytest.raises(ValueError, match="'shadow' compares a run with a float64 copy"):
        resolve_floor_method("shadow", "float64")
    with pytest.raises(ValueError, match="floor: expected one of auto, shadow, twin, bound"):
        resolve_floor_method("exact", "float32")
    with pytest.raises(ValueError, match="dtype: expected one of float32, float64"):
        AnalysisConfig(model=ModelConfig("postln", depth=2, dtype="half"))


def test_analysis_records_dtype_and_floor_method():
    result = run_analysis(
        AnalysisConfig(
            model=ModelConfig("postln", depth=3, dtype="float32"),
            dataset="karate",
            similarity=False,
            device="cpu",
        )
    )
    assert result.config["model"]["dtype"] == "float32"
    assert result.config["floor_method"] == "shadow"
    assert {"float_floor", "at_floor", "float64_energy"} <= set(result.metrics.columns)
    assert not result.metrics["at_floor"].any()


@pytest.mark.slow
def test_postln_depth_256_in_float64_on_cora():
    result = run_analysis(
        AnalysisConfig(
            model=ModelConfig("postln", depth=256, dtype="float64"),
            dataset="cora",
            similarity=False,
            device="cpu",
        )
    )
    assert result.fits["mean_over_seeds"]["final_energy"] < 1e-13
    assert result.label == "exponential-smoothing"
    assert not result.verdict.final_at_floor and "(at the" not in verdict_text(result.verdict)


def test_sweep_cells_run_in_the_spec_dtype(tmp_path):
    from oversmooth.experiments.sweep import SweepSpec, run_cell

    spec = SweepSpec(
        model=ModelConfig(dtype="float32"), models=("postln",), depths=(3,), datasets=("karate",)
    )
    assert spec.options()["dtype"] == "float32"
    record = run_cell(spec.cells()[0], spec.options(), str(tmp_path))
    assert record["status"] == "ok", record.get("error")
    assert "float64_energy" in record["metrics"] and "at_floor" in record["metrics"]
    with pytest.raises(ValueError, match="dtype: expected one of float32, float64"):
        SweepSpec(model=ModelConfig(dtype="double"))


def test_energy_plot_draws_the_estimated_floor_curve():
    from matplotlib.figure import (
        Figure,
    )  # not pyplot: tests/report/test_plots.py checks it stays unimported

    from oversmooth.report import plots

    layers = np.arange(0, 9)
    floor = np.geomspace(1e-14, 1e-12, 9)
    ax = Figure().add_subplot()
    curve = {
        "label": "seed 0",
        "layers": layers,
        "values": np.geomspace(1, 1e-12, 9),  # a curve coming down to its floor
        "floor": floor,
    }
    plots.energy_curves(ax, [curve])
    lines = [line for line in ax.get_lines() if "float floor" in line.get_label()]
    assert len(lines) == 1
    np.testing.assert_allclose(lines[0].get_ydata(), floor[1:])  # per layer, not a constant line
    ax = Figure().add_subplot()  # a floor far below every value is not drawn and does not squash
    plots.energy_curves(ax, [{**curve, "floor": floor * 1e-20}])
    assert not [line for line in ax.get_lines() if "float floor" in line.get_label()]
    assert ax.get_ylim()[0] > 1e-14


def _fake_float32_run(final_energy: float, floor: float):
    import pandas as pd

    from oversmooth.analysis import AnalysisResult

    frame = pd.DataFrame(
        {
            "seed": [0, 0],
            "layer": [0, 256],
            "laplacian_energy": [1.0, final_energy],
            "float64_energy": [1.0, 1e-14],
            "float_floor": [1e-20, floor],
        }
    )
    frame["at_floor"] = mark_at_floor(frame["laplacian_energy"], frame["float_floor"])
    found = Verdict(label="inconclusive", reason="few-layers", seeds=1)
    return AnalysisResult(config={}, metrics=frame, fits={}, verdict=found, label=found.label)


def test_reproduce_floor_paragraph_follows_the_numbers(monkeypatch):
    import pandas as pd

    import oversmooth.experiments.reproduce as R

    table = pd.DataFrame(
        {"dataset": ["cora"], "model": ["postln"], "depth": [256], "paper": [1.32e-12]}
    )
    (text,) = R.floor_finding({"float32_floor": _fake_float32_run(2.7e-12, 2.7e-12)}, table)
    assert "ends within 12 times the floor of its own accumulated rounding in every seed" in text
    # below 12 floors rounding could account for the paper's value, but cannot be told from a
    # real energy of that size: the float64 run's own 1e-14 has no float32 rounding at all
    # (an audit: "most likely it measures float32 rounding" rested on that one-sided test)
    assert "1.32e-12 at depth 256 lies below 12 times the largest float32 floor" in text
    assert "cannot be told from rounding" in text and "need not be rounding" in text
    assert "most likely" not in text
    assert "seed 0: from layer 256" in text
    (text,) = R.floor_finding({"float32_floor": _fake_float32_run(2.7e-12, 1e-20)}, table)
    assert "ends above 12 times the floor" in text and "lies above that float32 floor" in text
    no_paper = table.assign(paper=[float("nan")])
    (text,) = R.floor_finding({"float32_floor": _fake_float32_run(2.7e-12, 2.7e-12)}, no_paper)
    assert "paper" not in text
    assert R.floor_finding({}, table) == []


def test_verdict_names_the_floor_and_the_float64_value(deep):
    desc = describe_frame(deep[("float32", "shadow")], hidden=16, dtype="float32")
    f64 = deep[("float32", "shadow")]["float64_energy"].iloc[-1]
    (floor,) = desc["evidence"]["notes"]
    assert floor["code"] == "floor" and floor["dtype"] == "float32"
    assert floor["float64_energy"] == pytest.approx(f64)
    assert verdict_text(desc["evidence"]).endswith(
        "at the float32 floor (those layers are left out of the fit); "
        f"float64 gives {f64:.2g} (its own floor unchecked: a float64 run checks it)"
    )
    no_shadow = describe_frame(deep[("float32", "twin")], 16, dtype="float32")
    assert no_shadow["evidence"]["notes"][-1]["float64_energy"] is None
    assert verdict_text(no_shadow["evidence"]).endswith(
        "; measure it in float64 (--dtype float64; a model of your own: model.double())"
    )
    on_f64 = describe_frame(deep[("float64", "twin")], 16, dtype="float64")
    assert on_f64["evidence"]["notes"] == [] and "floor" not in verdict_text(on_f64["evidence"])


def test_auto_float64_runs_the_twin_only_near_the_floor():
    """Issue 30 item 1: a float64 curve twelve decades above its floor pays one forward a seed
    after the first, whose twin measured the floor; a linear stack that reaches the floor still
    gets the twin (and every frozen layer)."""
    from torch_geometric.data import Data

    from oversmooth import build_model
    from oversmooth.analysis import probe_run
    from oversmooth.precision import TWIN_MARGIN, TwinEvidence, bound_floor, twin_needed

    n = 30
    ei = _dense_graph(n)
    data = Data(x=torch.randn(n, 8, generator=torch.Generator().manual_seed(1)), edge_index=ei)

    def far(seed: int) -> torch.nn.Module:
        return build_model(
            "postln", depth=12, in_channels=8, out_channels=2, hidden=16, heads=2, seed=seed
        ).double()

    evidence = TwinEvidence()
    first = probe_run(far(0), data, twin=evidence)
    assert first.attrs["floor_method"] == "twin" and evidence.amplification is not None
    assert (evidence.amplification >= 1).all()
    frame = probe_run(far(1), data, twin=evidence)
    assert frame.attrs["floor_method"] == "bound"
    assert not twin_needed(frame, "float64", evidence.amplification)
    assert twin_needed(frame, "float64")  # no evidence: the twin
    assert np.array_equal(frame["float_floor"], bound_floor(frame["feature_norm"], "float64"))
    near = build_model("diffusion", depth=200, in_channels=8, out_channels=2, dtype="float64")
    stack = TwinEvidence()
    for _ in range(2):  # the second with the first's evidence
        frame = probe_run(near, data, twin=stack)
        assert frame.attrs["floor_method"] == "twin" and frame["at_floor"].any()
    assert TWIN_MARGIN >= 1e6  # the twin's floor was at most 201x the bound on the zoo
    # metrics without feature_norm: the bound still decides (the norm is measured for it and
    # left out of the table), instead of paying the twin whatever the curve
    alone = probe_run(far(1), data, metrics=["laplacian_energy"], twin=evidence)
    assert alone.attrs["floor_method"] == "bound" and "feature_norm" not in alone
    full = probe_run(far(1), data, twin=evidence)
    for column in ("laplacian_energy", "float_floor", "at_floor"):
        assert np.array_equal(alone[column], full[column])
    bound = probe_run(far(1), data, metrics=["dirichlet_energy"], floor="bound")
    assert "feature_norm" not in bound and np.array_equal(bound["float_floor"], full["float_floor"])
    twin = probe_run(near, data, metrics=["laplacian_energy"], twin=TwinEvidence())
    assert twin.attrs["floor_method"] == "twin" and twin["at_floor"].any()


def test_a_model_that_amplifies_its_rounding_gets_the_twin_far_above_the_bound():
    """The bound alone decided whether a float64 run needed its twin: a Post-LN stack with
    trained-size weights (x64) on karate grows its rounding errors about 10^0.5 a layer in
    energy while its energy stays 1e20 times the bound, so no layer was flagged and layers up to
    810x off the exact energy (a 60-digit reference) were fitted (an audit).  The first seed
    runs the twin; every layer that two float64 runs on inputs one ulp apart do not agree on
    within 2x is flagged."""
    from oversmooth import Probe, build_model
    from oversmooth.analysis import probe_run
    from oversmooth.data import karate
    from oversmooth.precision import TwinEvidence, bound_floor

    data = karate()
    model = build_model(
        "postln", depth=96, seed=1, in_channels=data.num_features, out_channels=2
    ).double()
    with torch.no_grad():
        for p in model.blocks.parameters():
            if p.dim() == 2:
                p.mul_(64.0)
    frame = probe_run(model, data, twin=TwinEvidence())
    assert frame.attrs["floor_method"] == "twin"
    energy = frame["laplacian_energy"].to_numpy()
    bound = bound_floor(frame["feature_norm"], "float64")
    assert (energy > 1e12 * bound).all()  # what the bound rule read as far from any floor

    def energies(x: torch.Tensor) -> np.ndarray:
        with Probe(model, data.edge_index, ["laplacian_energy"]) as probe, torch.no_grad():
            model(x, data.edge_index)
        return probe.to_frame()["laplacian_energy"].to_numpy()

    x = data.x.double()
    a, b = energies(x), energies(torch.nextafter(x, torch.full_like(x, np.inf)))
    np.testing.assert_array_equal(a, energy)
    unresolved = np.maximum(a / b, b / a) > 2
    assert unresolved.sum() > 10
    assert frame["at_floor"].to_numpy()[unresolved].all()
    # a later seed of it: what the first seed's twin measured says it needs its own
    evidence = TwinEvidence()
    probe_run(model, data, twin=evidence)
    again = probe_run(model, data, twin=evidence)
    assert again.attrs["floor_method"] == "twin"
    np.testing.assert_array_equal(again["at_floor"], frame["at_floor"])


def test_the_twin_of_a_large_graph_works_a_block_of_rows_and_channels_at_a_time(monkeypatch):
    """Above ENCODER_BLOCK_ROWS nodes the twin perturbs and encodes its input a block of rows at
    a time and sums the floor's energy over a few channels at a time (at 10^6 nodes the whole
    command's peak went 2.15 GB -> 1.93 GB): the same floor, to the twin's own noise, and the
    same energy of a difference, to rounding."""
    import oversmooth.precision as precision
    from oversmooth import GraphOperator, build_model
    from oversmooth.data import karate
    from oversmooth.metrics import laplacian_energy

    data = karate()
    graph = GraphOperator(data.edge_index, num_nodes=data.num_nodes)
    model = build_model(
        "postln", depth=6, in_channels=data.num_features, out_channels=2, hidden=16, heads=2
    ).double()

    def floors() -> np.ndarray:
        with torch.no_grad(), precision.FloorTracker(model, graph, "twin") as tracker:
            model(data.x, data.edge_index)
        return tracker.to_frame()["float_floor"].to_numpy()

    whole = floors()
    monkeypatch.setattr(precision, "ENCODER_BLOCK_ROWS", 8)  # karate's 34 nodes: 5 blocks
    monkeypatch.setattr(precision, "MEASURE_CHANNELS", 3)  # 16 channels: 6 parts
    blocks = floors()
    assert not np.array_equal(blocks, whole)  # other signs drawn
    assert ((blocks > whole / 5) & (blocks < whole * 5)).all()
    tracker = precision.FloorTracker(model, graph, "twin")
    a, b = torch.randn(34, 16, dtype=torch.float64), torch.randn(34, 16, dtype=torch.float64)
    tracker._state = b
    tracker._measure(1, a)
    exact = laplacian_energy(a - b, graph) / 2
    assert float(tracker._floor[1]) == pytest.approx(float(exact), rel=1e-12)


class _Smoothing(torch.nn.Module):
    """A user's smoothing stack: Linear, then LayerNorm(mean over N(i) and i) per layer."""

    def __init__(self, depth: int = 40, width: int = 16) -> None:
        super().__init__()
        from torch_geometric.nn import SimpleConv

        self.enc = torch.nn.Linear(width, width)
        self.convs = torch.nn.ModuleList(
            [SimpleConv(aggr="mean", combine_root="self_loop") for _ in range(depth)]
        )
        self.norms = torch.nn.ModuleList([torch.nn.LayerNorm(width) for _ in range(depth)])

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        h = self.enc(x)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            h = norm(conv(h, edge_index))
        return h


def test_a_model_run_under_autocast_is_held_to_the_autocast_precision_floor(tmp_path):
    """Under torch.autocast(bfloat16) the frame said float32 (its weights' precision): the
    bfloat16 plateau at 1e-4, 16 decades above the float64 run, was fitted as the law ("no
    late halving") with no layer at the floor."""
    import warnings

    from oversmooth import verdict, write_report

    torch.manual_seed(0)
    edge_index = _dense_graph(60, 0.15)
    x = torch.randn(60, 16)
    model = _Smoothing().eval()
    with Probe(model, edge_index) as probe, torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x, edge_index)
    frame = probe.to_frame()
    assert frame.attrs["dtype"] == "bfloat16"
    plateau = frame["laplacian_energy"].iloc[-10:]
    assert plateau.min() > 1e-8  # the bfloat16 rounding floor, not the law
    found = verdict(frame)
    assert found.final_at_floor and found.dropped["at_floor"] >= 30
    assert found.label == "inconclusive"
    with Probe(model.double(), edge_index) as exact, torch.no_grad():
        model(x.double(), edge_index)
    assert exact.to_frame().attrs["dtype"] == "float64"
    assert exact.to_frame()["laplacian_energy"].iloc[-1] < 1e-12 * plateau.min()
    # a stored bfloat16 frame has its own epsilon in the verdict and the report
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the report's "few layers" notes are not the point
        write_report(frame, tmp_path / "bf16")
    assert "bfloat16" in (tmp_path / "bf16" / "report.md").read_text()
    assert verdict(frame.assign(), dtype="bfloat16").dropped == found.dropped


def test_states_stored_coarser_than_the_weights_set_the_floor():
    """States recorded in float16 among float32 ones: the frame is held to float16's floor."""
    torch.manual_seed(0)
    edge_index = _dense_graph(40, 0.2)
    probe = Probe(None, edge_index)
    probe.record(0, torch.randn(40, 16))
    probe.record(1, torch.randn(40, 16).half())
    probe.record(2, torch.randn(40, 16))
    assert probe.to_frame().attrs["dtype"] == "float16"


def test_zoo_models_refuse_half_precision_on_the_cpu_in_one_line():
    from oversmooth import build_model

    model = build_model("postln", depth=2, in_channels=8, out_channels=3, hidden=8, heads=2)
    x, edge_index = torch.randn(10, 8), _dense_graph(10, 0.4)
    with pytest.raises(ValueError, match=r"weights are bfloat16; .* model.float\(\)"):
        model.to(torch.bfloat16)(x, edge_index)
    model = model.float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(ValueError, match=r"under torch.autocast to bfloat16; .*outside"):
            model(x, edge_index)
    assert model(x, edge_index).dtype == torch.float32
