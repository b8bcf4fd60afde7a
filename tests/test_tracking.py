"""oversmooth.tracking: a probe's rows to TensorBoard, W&B-like functions and Lightning loggers."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import pytest
import torch

from oversmooth import Probe
from oversmooth.tracking import VERDICT_CODES, frame_scalars, log_frame, log_verdict
from oversmooth.verdict import LABELS, Rate, Verdict


class Stack(torch.nn.Module):
    """Three propagation layers on a path graph (no parameters, no randomness)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Identity() for _ in range(3))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        src, dst = edge_index
        for layer in self.layers:
            mean = torch.zeros_like(x).index_add_(0, dst, x[src])
            x = layer(0.5 * x + 0.5 * mean / torch.bincount(dst, minlength=len(x))[:, None])
        return x


EDGES = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])


def _frame(metrics=("laplacian_energy", "relative_energy", "feature_norm"), passes=1):
    model = Stack()
    x = torch.arange(8.0, dtype=torch.float64).reshape(4, 2) ** 2
    with Probe(model, EDGES, list(metrics)) as probe:
        for i in range(passes):
            model(x * (i + 1), EDGES)
    return probe.to_frame()


def test_names_values_and_the_first_layer_gap():
    frame = _frame()
    scalars = frame_scalars(frame)
    energy = frame["laplacian_energy"].to_numpy()
    assert scalars["energy/laplacian_energy/layer_00"] == energy[0]
    assert scalars["energy/laplacian_energy/layer_03"] == energy[3]
    assert scalars["energy/laplacian_energy/final"] == energy[3]
    assert scalars["energy/feature_norm/final"] == frame["feature_norm"].iloc[-1]
    # relative energy is undefined at layer 0: not sent there, sent everywhere else
    assert "energy/relative_energy/layer_00" not in scalars
    assert scalars["energy/relative_energy/layer_01"] == pytest.approx(energy[1] / energy[0] - 1)
    assert len(scalars) == 3 * 4 + 3 - 1
    assert "energy/step/final" not in scalars and "energy/layer/final" not in scalars


def test_layer_names_are_padded_to_the_depth():
    frame = pd.DataFrame({"layer": range(101), "laplacian_energy": 1.0})
    names = list(frame_scalars(frame, final=False))
    assert names[0] == "energy/laplacian_energy/layer_000"
    assert names[-1] == "energy/laplacian_energy/layer_100"
    assert names == sorted(names)  # a tracker's alphabetical order is the depth order


def test_options_select_metrics_prefix_and_parts():
    frame = _frame()
    only = frame_scalars(frame, ["feature_norm"], prefix="gnn", per_layer=False)
    assert list(only) == ["gnn/feature_norm/final"]
    with pytest.raises(ValueError, match="dirichlet_energy not in the frame"):
        frame_scalars(frame, ["dirichlet_energy"])
    # one name is one metric (it was read letter by letter, an audit)
    assert list(frame_scalars(frame, "feature_norm", per_layer=False)) == [
        "energy/feature_norm/final"
    ]


def test_several_steps_log_the_last_and_several_graphs_are_refused():
    frame = _frame(passes=2)
    last = frame[frame["step"] == 1]
    assert frame_scalars(frame)["energy/feature_norm/final"] == last["feature_norm"].iloc[-1]
    per_graph = pd.DataFrame({"layer": [0, 0], "graph": [0, 1], "laplacian_energy": [1.0, 2.0]})
    with pytest.raises(ValueError, match="several values of 'graph'"):
        frame_scalars(per_graph)


def test_a_layer_held_twice_in_one_step_is_refused_not_mixed():
    """Two one-pass frames put together (an EnergyMonitor's frames are each step 0): each name
    took the value of whichever row sorted last, layers of one pass beside layers of the other
    (an audit)."""
    first, second = _frame(), _frame()
    second["laplacian_energy"] *= 10.0
    both = pd.concat([first.assign(global_step=0), second.assign(global_step=3)])
    with pytest.raises(ValueError, match="layer 0 more than once.*'global_step'"):
        frame_scalars(both)
    with pytest.raises(ValueError, match="more than once"):
        log_frame(both.drop(columns="global_step"), lambda scalars, step: None, step=1)
    one = frame_scalars(both[both["global_step"] == 3])
    assert one["energy/laplacian_energy/final"] == second["laplacian_energy"].iloc[-1]


def test_a_function_sink_gets_the_dict_and_the_step():
    calls = []
    sent = log_frame(_frame(), lambda scalars, step: calls.append((scalars, step)), step=7)
    assert calls == [(sent, 7)]
    with pytest.raises(TypeError, match="fn\\(scalars, step=step\\)"):
        log_frame(_frame(), object(), step=0)


def _verdict(label: str) -> Verdict:
    """A hand-made verdict with the few numbers its sentence reads."""
    change = {"change_decades": 0.01, "change_halfwidth": 0.1, "window": [1, 64], "level": 0.99}
    if label == "stable":
        return Verdict(label=label, reason="stable", seeds=1, evidence=change)
    rate = Rate("exponential", "halving_length", 9.5, (9.0, 10.0), -0.073, (-0.077, -0.069))
    return Verdict(
        label=label, reason="exp-constant-rate", seeds=1, rate=replace(rate, window=(33, 64))
    )


def test_summary_writer_gets_scalars_and_the_verdict_as_text(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    frame = _frame()
    with SummaryWriter(tmp_path) as writer:
        sent = log_frame(frame, writer, step=3)
        log_verdict(_verdict("exponential-smoothing"), writer, step=3)
    events = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    tags = events.Tags()
    assert set(sent) | {"energy/verdict_code"} == set(tags["scalars"])
    (point,) = events.Scalars("energy/laplacian_energy/layer_02")
    assert point.step == 3
    assert math.isclose(point.value, frame["laplacian_energy"].iloc[2], rel_tol=1e-6)  # float32
    (code,) = events.Scalars("energy/verdict_code")
    assert code.value == LABELS.index("exponential-smoothing")
    assert "energy/verdict/text_summary" in tags["tensors"]


class FakeLightningLogger:
    """What log_verdict reads of a Lightning logger: log_metrics, and log_text on W&B's."""

    def __init__(self, text: bool) -> None:
        self.metrics: list = []
        self.texts: list = []
        if text:
            self.log_text = lambda **kw: self.texts.append(kw)

    def log_metrics(self, metrics: dict, step: int) -> None:
        self.metrics.append((metrics, step))


def test_verdict_code_everywhere_text_where_taken():
    assert [VERDICT_CODES[label] for label in LABELS] == list(range(len(LABELS)))
    csv_like, wandb_like = FakeLightningLogger(text=False), FakeLightningLogger(text=True)
    for logger in (csv_like, wandb_like):
        log_verdict(_verdict("stable"), logger, step=5)
        assert logger.metrics == [({"energy/verdict_code": float(LABELS.index("stable"))}, 5)]
    assert csv_like.texts == []
    log_verdict(_verdict("stable"), wandb_like, step=6, title="model")
    line = "stable energy: +0.01 decades over layers 1-64 (99% interval -0.09 to +0.11)"
    assert [t["data"] for t in wandb_like.texts] == [
        [["stable", line]],
        [["stable", f"model: {line}"]],
    ]
    assert wandb_like.texts[0] == {
        "key": "energy/verdict",
        "columns": ["label", "summary"],
        "data": [["stable", line]],
        "step": 5,
    }


def test_final_is_not_sent_when_the_last_layer_was_not_recorded():
    """capture='residual' with a head: the Probe leaves layer L out (missing_layers) and its
    last row is layer L-1; 'final' was that row's value under the last layer's name (an
    audit)."""
    frame = _frame()
    frame.attrs["missing_layers"] = [4]
    scalars = frame_scalars(frame)
    assert not any(name.endswith("/final") for name in scalars)
    assert "energy/laplacian_energy/layer_03" in scalars
    frame.attrs["missing_layers"] = [2]  # a layer inside the stack: the last one is there
    assert "energy/laplacian_energy/final" in frame_scalars(frame.drop(index=2))
